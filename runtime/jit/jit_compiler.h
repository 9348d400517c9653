// JitCompiler: client CUDA C++ source in, a cubin for one GPU architecture out, through NVRTC
// and the kernel cache. This is what the daemon calls for custom kernels and for its own
// built-in kernels (kernels/cuda), and the only part of runtime/jit it needs to know.
//
// A request is checked before anything is compiled: source size, entry names, options
// against the allow-list (compile_options.h), and the architecture against what the loaded
// NVRTC supports. Then the kernel is looked up by content (kernel_cache.h): memory, disk,
// or NVRTC.
//
//   JitCompilerOptions options;
//   options.cache_dir = "/var/cache/gpukit/kernels";
//   GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<JitCompiler> jit, JitCompiler::Create(options));
//   GPUKIT_ASSIGN_OR_RETURN(
//       JitResult compiled,
//       jit->Compile({.source = src, .entries = {"scale<float>"}, .options = {"-DN=4"}},
//                    "sm_90"));
//   // cuModuleLoadData(compiled.kernel->cubin), then
//   // cuModuleGetFunction(compiled.kernel->lowered_names[0])
//
// Where NVRTC runs: in sandboxed worker processes when options.worker_path is set (gpukitd
// always sets it; see compile_sandbox.h and docs/security.md), else in this process.
//
// Compile time: the calling thread waits for NVRTC. Each compile has a budget
// (compile_time_budget, 30 s by default). Where NVRTC supports cancellation
// (nvrtcSetFlowCallback, as CUDA 13's does), a compile that reaches its budget is cancelled
// within NVRTC's next checkpoint; with an older NVRTC it runs to its end and its output is
// then discarded. Either way the call returns DEADLINE_EXCEEDED and nothing is cached. The
// budget bounds how long one request holds a thread; it is not a hard real-time limit.
//
// Thread safety: Compile and the accessors may be called concurrently from any thread;
// concurrent compiles of the same kernel compile it once.
#ifndef GPUKIT_RUNTIME_JIT_JIT_COMPILER_H_
#define GPUKIT_RUNTIME_JIT_JIT_COMPILER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "runtime/jit/compile_options.h"
#include "runtime/jit/kernel_cache.h"
#include "runtime/jit/source_compiler.h"

namespace gpukit {

struct JitCompilerOptions {
  // The disk cache; empty keeps compiled kernels in memory only.
  std::string cache_dir;
  // 256 MiB and 4096 entries of cubins in memory (see KernelCacheOptions).
  int64_t memory_budget_bytes = int64_t{256} << 20;
  int64_t max_memory_entries = 4096;
  // Searched first for libnvrtc (flag or config); empty: the standard search
  // (library_search.h).
  std::string library_dir;
  // Generous: real kernels compile in well under a second, heavy templates in a few.
  absl::Duration compile_time_budget = absl::Seconds(30);
  CompileLimits limits;
  // The compile worker executable (gpukit-compile-worker): when set, NVRTC runs in sandboxed
  // worker processes that can open no file (compile_sandbox.h), as gpukitd always does. Empty:
  // NVRTC runs in this process, which lets a source #include any file the process can read;
  // only for sources gpukit trusts (tests, tools).
  std::string worker_path;
  int compile_workers = 2;                         // compiles at once (sandbox only)
  int64_t worker_memory_bytes = int64_t{4} << 30;  // each worker's address space
  int64_t max_log_bytes = int64_t{1} << 20;        // NVRTC's log is cut to this
};

struct CompileRequest {
  std::string source;  // CUDA C++; it may #include only `headers` (no -I; sandboxed: no file)
  std::vector<std::pair<std::string, std::string>> headers;  // (include name, text)
  std::vector<std::string> entries;  // kernels to expose: "add", "scale<float>"
  std::vector<std::string> options;  // allow-listed NVRTC options (compile_options.h)
};

struct JitResult {
  // Shared and immutable: a memory hit returns the same object as the compile that made it.
  std::shared_ptr<const CompiledKernel> kernel;
  KernelOrigin origin;     // compiled, memory or disk
  absl::Duration elapsed;  // this call, from validation to return
};

class JitCompiler {
 public:
  // FAILED_PRECONDITION "NVRTC JIT compiler not available (...)" when libnvrtc cannot be
  // loaded (the message lists where it looked); the errors of KernelCache::Create for a bad
  // cache directory; INVALID_ARGUMENT for a non-positive compile_time_budget.
  static absl::StatusOr<std::unique_ptr<JitCompiler>> Create(const JitCompilerOptions& options);

  // The compiled kernel for `request` on `arch` ("sm_90"). Errors:
  //   INVALID_ARGUMENT: the request breaks a rule (size, names, options, arch) or the source
  //     does not compile (the message holds NVRTC's whole log);
  //   DEADLINE_EXCEEDED: compiling took longer than compile_time_budget;
  //   RESOURCE_EXHAUSTED, FAILED_PRECONDITION, INTERNAL: see Nvrtc::Compile.
  absl::StatusOr<JitResult> Compile(const CompileRequest& request, absl::string_view arch);

  // OK when `arch` is a real architecture ("sm_90", "sm_90a", "sm_100f") that the loaded
  // NVRTC can compile for; INVALID_ARGUMENT naming the supported ones otherwise.
  absl::Status CheckArch(absl::string_view arch) const;

  std::string nvrtc_version() const { return compiler_->version_string(); }  // "13.0"
  const std::string& nvrtc_library_path() const { return compiler_->library_path(); }
  const std::vector<int>& supported_archs() const { return compiler_->supported_archs(); }
  bool sandboxed() const { return !options_.worker_path.empty(); }
  // The compiler behind the cache (a CompileSandbox when sandboxed()).
  const SourceCompiler& compiler() const { return *compiler_; }
  KernelCacheStats cache_stats() const { return cache_->stats(); }
  const KernelCache& cache() const { return *cache_; }

 private:
  JitCompiler(const JitCompilerOptions& options, std::unique_ptr<SourceCompiler> compiler,
              std::unique_ptr<KernelCache> cache)
      : options_(options), compiler_(std::move(compiler)), cache_(std::move(cache)) {}

  const JitCompilerOptions options_;
  const std::unique_ptr<SourceCompiler> compiler_;
  const std::unique_ptr<KernelCache> cache_;
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_JIT_JIT_COMPILER_H_
