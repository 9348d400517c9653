// The CPU backend's kernel table: one entry per built-in op, over kernels/cpu.
//
// In builds with GPUKIT_FAULT_INJECTION the table also holds the test-only ops' kernels
// (op_registry.h's IsTestOnlyOp), which simulate what a faulting kernel does to a GPU:
//   _test_fault  returns a sticky fault (IsStickyFault), INTERNAL "simulated device fault
//                (_test_fault) ...": the CpuDevice that runs it is poisoned for good, as a
//                CUDA context is after an illegal address;
//   _test_hang   never returns: it blocks (no CPU time) on a wake-up that never comes, so its
//                stream never runs again and only killing the process ends it;
//   _test_abort  calls std::abort(): the process dies of SIGABRT.
//
// Thread safety: the table is immutable; kernels are pure over their arguments.
#ifndef GPUKIT_RUNTIME_CPU_CPU_OP_KERNELS_H_
#define GPUKIT_RUNTIME_CPU_CPU_OP_KERNELS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "runtime/device.h"

namespace gpukit {

// Runs `launch` with host addresses already resolved: inputs[i] is the data of
// launch.inputs[i] (nullptr for a scalar operand), `out` the output's.
using CpuOpKernel = absl::Status (*)(const OpLaunch& launch, const std::vector<const void*>& inputs,
                                     void* out);

// nullptr if the CPU backend has no kernel for the op.
CpuOpKernel FindCpuOpKernel(absl::string_view op_name);

// Whether the op's work must run on its stream's worker thread, never on the thread that
// enqueues it (the CPU device runs work on an idle stream at once, on the caller's thread):
// work that does not return (_test_hang, _test_abort) must leave RunOp returning, as a
// GPU's launch returns before its kernel runs. False for every op of a release build.
bool CpuOpRunsOnStreamThread(absl::string_view op_name);

// A kernel's error that poisons the device it ran on, as a sticky CUDA error (an illegal
// address, a trap) poisons its context: the CPU device fails every later enqueue and wait
// with it, and CheckHealth returns it. StickyFault is INTERNAL with `message` and a payload
// that IsStickyFault recognises (the payload survives PrefixStatus).
absl::Status StickyFault(absl::string_view message);
bool IsStickyFault(const absl::Status& status);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_CPU_CPU_OP_KERNELS_H_
