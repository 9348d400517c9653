// BuiltinOpRunner: runs gpukit's built-in ops as launches of the device kernels of
// kernels/cuda, on any Device that runs compiled modules.
//
// It lowers a planned op (OpLaunch) onto kernel launches: inputs whose dtype is not the
// plan's compute dtype are cast into temporary buffers first, scalars are converted on the
// host exactly as the CPU backend converts them, and each op's lowering (its OpDef::cuda in
// the op table, runtime/cuda/op_lowering.h) picks its kernels by name ("gk_add_f32",
// "gk_reduce_rows_sum_bf16", ...) with a parameter block from kernels/cuda/op_params.h.
// Each module is loaded once, on its first use or by the warm-up (StartWarmUp): from its
// precompiled fatbin when it has one and the options allow it, else compiled from its source
// through the injected compiler (NVRTC and its cache, in the CUDA backend). A fatbin the
// device refuses (an old driver, a GPU it has no code for) is logged once and the runner
// compiles that module and every later one instead.
//
//   BuiltinOpRunner runner(device, {.compile = [&](absl::string_view module,
//                                                  absl::string_view source,
//                                                  absl::string_view entry) { ... },
//                                   .modules = kernels::EmbeddedKernelSources()});
//   runner.StartWarmUp(4);  // optional: compile the modules before the first op needs them
//   GPUKIT_RETURN_IF_ERROR(runner.Run(launch, stream));  // enqueued on `stream`
//
// An op that needs temporary device memory (an input of another dtype, cast first) waits
// for its work before it frees it, so Run returns after the work has run in that case;
// otherwise it returns once the work is enqueued, as Device::RunOp does. Long reductions
// keep their partial results in a small scratch buffer per stream (Scratch). Neither is
// counted by the scheduler: the casts are at most the size of the inputs, the scratch
// 32 KiB per stream.
//
// Thread safety: Run may be called from any thread. Each module loads under its own lock:
// an op that needs a module another thread is loading waits for that load, and ops whose
// modules are loaded do not wait for it.
#ifndef GPUKIT_RUNTIME_BUILTIN_OP_RUNNER_H_
#define GPUKIT_RUNTIME_BUILTIN_OP_RUNNER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "kernels/cuda/embedded_kernels.h"
#include "runtime/device.h"

namespace gpukit {

// Compiles a built-in module's source (kernels/cuda/embedded_kernels.h) into an image that
// Device::LoadModule takes. `entry` names one kernel of the module, the same on every call
// for a module (a compiler that wants entry names gets a stable cache key).
using ModuleCompiler = std::function<absl::StatusOr<std::string>(
    absl::string_view module, absl::string_view source, absl::string_view entry)>;

struct BuiltinOpRunnerOptions {
  // Compiles a module's source; null when there is no compiler, and then a module without a
  // usable fatbin fails to load (FAILED_PRECONDITION).
  ModuleCompiler compile;
  // The modules: kernels::EmbeddedKernelSources() on a device; tests pass their own.
  absl::Span<const kernels::EmbeddedKernelSource> modules;
  // Loads a module's fatbin, when it has one, instead of compiling its source: the CUDA
  // device sets it when its GPU can run the fatbins (runtime/cuda/fatbin.h).
  bool use_precompiled = false;
};

// Where a loaded module came from.
enum class ModuleOrigin {
  kNotLoaded,
  kPrecompiled,  // its fatbin
  kCompiled,     // its source, through the compiler
};

class BuiltinOpRunner {
 public:
  // Compiles every module of kernels::EmbeddedKernelSources() from its source.
  BuiltinOpRunner(Device& device, ModuleCompiler compile);
  BuiltinOpRunner(Device& device, BuiltinOpRunnerOptions options);
  // Stops the warm-up (StopWarmUp) first.
  ~BuiltinOpRunner();
  BuiltinOpRunner(const BuiltinOpRunner&) = delete;
  BuiltinOpRunner& operator=(const BuiltinOpRunner&) = delete;

  // Loads every module in the background on `threads` threads (at least 1, at most one per
  // module), those of the commonest ops first (binary, cast, reduce, unary, ...), so that the
  // first ops find them loaded, or wait only for the load of theirs. An error is logged
  // (warning) and met again by the op that needs the module. Call it once, before or while
  // ops run; the owner must call StopWarmUp (or destroy the runner) before the device goes.
  void StartWarmUp(int threads);
  // Skips the modules the warm-up has not begun and waits for the loads in flight (each
  // bounded by the compiler's time budget). Idempotent; callable from any thread but a
  // warm-up thread.
  void StopWarmUp();

  // Where `module` came from, for logs and tests.
  ModuleOrigin Origin(absl::string_view module) const;

  // Whether the op has device kernels: a lowering in the op table (OpDef::cuda).
  static bool Supports(absl::string_view op_name);

  // Enqueues the op on `stream` through its lowering. UNIMPLEMENTED for an op without one;
  // errors of compiling or loading a module are returned as they are (INTERNAL for a built-in
  // source that does not compile: that is gpukit's bug, not the caller's).
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
  // One module; the slots are made by the constructor and never move.
  struct Slot {
    const kernels::EmbeddedKernelSource* source = nullptr;
    absl::string_view entry;  // one kernel of the module (see ModuleCompiler)
    // Held while the module loads, so that a second user waits for the first load.
    mutable absl::Mutex mu;
    std::optional<ModuleId> id ABSL_GUARDED_BY(mu);
    ModuleOrigin origin ABSL_GUARDED_BY(mu) = ModuleOrigin::kNotLoaded;
  };

  Slot* FindSlot(absl::string_view module) const;
  // The module's id, loading it first if no one has.
  absl::StatusOr<ModuleId> LoadedModule(Slot& slot);
  absl::StatusOr<ModuleId> Load(Slot& slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);
  // A warm-up thread: loads the modules of warm_up_order_ that no thread has claimed yet.
  void WarmUpLoop();

  Device& device_;
  const ModuleCompiler compile_;
  const bool use_precompiled_;
  std::vector<std::unique_ptr<Slot>> slots_;
  // Set when the device refused a fatbin: later modules are compiled without trying theirs.
  std::atomic<bool> precompiled_refused_{false};

  std::vector<Slot*> warm_up_order_;          // set before the warm-up threads start
  std::vector<std::thread> warm_up_threads_;  // started and joined by the owner's thread
  std::atomic<size_t> warm_up_next_{0};
  std::atomic<bool> warm_up_stopped_{false};

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, FunctionId> functions_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, BufferId> scratch_ ABSL_GUARDED_BY(mu_);
};

// The suffix of a dtype in built-in kernel names: "f32", "f16", "bf16", "i32", "i64", "u8".
absl::string_view KernelDTypeSuffix(DType dtype);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_BUILTIN_OP_RUNNER_H_
