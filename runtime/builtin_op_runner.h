// BuiltinOpRunner: runs gpukit's built-in ops as launches of the device kernels of
// kernels/cuda, on any Device that runs compiled modules.
//
// It lowers a planned op (OpLaunch) onto kernel launches: inputs whose dtype is not the
// plan's compute dtype are cast into temporary buffers first, scalars are converted on the
// host exactly as the CPU backend converts them, and each op picks its kernel by name
// ("gk_add_f32", "gk_reduce_rows_sum_bf16", ...) with a parameter block from
// kernels/cuda/op_params.h. Modules are compiled on first use through the injected
// compiler (NVRTC and its cache, in the CUDA backend) and loaded once.
//
//   BuiltinOpRunner runner(device, [&](absl::string_view module, absl::string_view source,
//                                      absl::string_view entry) { return CompileCubin(...); });
//   GPUKIT_RETURN_IF_ERROR(runner.Run(launch, stream));  // enqueued on `stream`
//
// An op that needs temporary device memory (an input of another dtype, cast first) waits
// for its work before it frees it, so Run returns after the work has run in that case;
// otherwise it returns once the work is enqueued, as Device::RunOp does. Long reductions
// keep their partial results in a small scratch buffer per stream (Scratch). Neither is
// counted by the scheduler: the casts are at most the size of the inputs, the scratch
// 32 KiB per stream.
//
// Thread safety: Run may be called from any thread; modules are loaded under a lock.
#ifndef GPUKIT_RUNTIME_BUILTIN_OP_RUNNER_H_
#define GPUKIT_RUNTIME_BUILTIN_OP_RUNNER_H_

#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "runtime/device.h"

namespace gpukit {

// Compiles a built-in module's source (kernels/cuda/embedded_kernels.h) into an image that
// Device::LoadModule takes. `entry` names one kernel of the module, the same on every call
// for a module (a compiler that wants entry names gets a stable cache key).
using ModuleCompiler = std::function<absl::StatusOr<std::string>(
    absl::string_view module, absl::string_view source, absl::string_view entry)>;

class BuiltinOpRunner {
 public:
  BuiltinOpRunner(Device& device, ModuleCompiler compile);
  BuiltinOpRunner(const BuiltinOpRunner&) = delete;
  BuiltinOpRunner& operator=(const BuiltinOpRunner&) = delete;

  // Whether the op has device kernels.
  static bool Supports(absl::string_view op_name);

  // Enqueues the op on `stream`. UNIMPLEMENTED for an op without device kernels; errors of
  // compiling or loading a module are returned as they are (INTERNAL for a built-in source
  // that does not compile: that is gpukit's bug, not the caller's).
  absl::Status Run(const OpLaunch& launch, StreamId stream);

  // The function `kernel` of built-in module `module`, compiling and loading the module on
  // first use. Exposed for tests.
  absl::StatusOr<FunctionId> Kernel(absl::string_view module, absl::string_view kernel);

  // Scratch memory of `stream` for the partial results of long reductions: allocated on its
  // first use, reused by every later op on the stream (stream order keeps them apart), so a
  // reduction neither allocates nor waits.
  static constexpr int64_t kScratchBytes = 4096 * 8;
  absl::StatusOr<BufferId> Scratch(StreamId stream);
  // Frees `stream`'s scratch; the device calls it when it destroys the stream (after its
  // work has finished).
  void ReleaseStream(StreamId stream);

 private:
  Device& device_;
  const ModuleCompiler compile_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, ModuleId> modules_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, FunctionId> functions_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, BufferId> scratch_ ABSL_GUARDED_BY(mu_);
};

// The suffix of a dtype in built-in kernel names: "f32", "f16", "bf16", "i32", "i64", "u8".
absl::string_view KernelDTypeSuffix(DType dtype);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_BUILTIN_OP_RUNNER_H_
