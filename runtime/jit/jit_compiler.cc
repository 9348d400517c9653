#include "runtime/jit/jit_compiler.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "runtime/base/status_macros.h"
#include "runtime/jit/compile_sandbox.h"
#include "runtime/jit/library_search.h"
#include "runtime/jit/nvrtc.h"
#include "spdlog/spdlog.h"

namespace gpukit {
namespace {

// "sm_90" -> 90, "sm_90a" -> 90, "sm_100f" -> 100; -1 when it is not of that form.
int ParseRealArch(absl::string_view arch) {
  if (!absl::ConsumePrefix(&arch, "sm_")) return -1;
  if (!arch.empty() && (arch.back() == 'a' || arch.back() == 'f')) arch.remove_suffix(1);
  if (arch.size() < 2 || arch.size() > 3) return -1;
  if (!std::all_of(arch.begin(), arch.end(), absl::ascii_isdigit)) return -1;
  int number = 0;
  return absl::SimpleAtoi(arch, &number) ? number : -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<JitCompiler>> JitCompiler::Create(
    const JitCompilerOptions& options) {
  if (options.compile_time_budget <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("compile_time_budget = ", absl::FormatDuration(options.compile_time_budget),
                     " must be > 0"));
  }
  GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<KernelCache> cache,
                          KernelCache::Create({.memory_budget_bytes = options.memory_budget_bytes,
                                               .max_memory_entries = options.max_memory_entries,
                                               .disk_dir = options.cache_dir}));
  std::unique_ptr<SourceCompiler> compiler;
  if (!options.worker_path.empty()) {
    GPUKIT_ASSIGN_OR_RETURN(
        compiler, CompileSandbox::Start({.worker_path = options.worker_path,
                                         .library_dir = options.library_dir,
                                         .max_workers = options.compile_workers,
                                         .memory_limit_bytes = options.worker_memory_bytes,
                                         .max_log_bytes = options.max_log_bytes}));
  } else {
    GPUKIT_ASSIGN_OR_RETURN(
        compiler, Nvrtc::Load(CudaLibrarySearchDirs({.explicit_dir = options.library_dir})));
  }
  return std::unique_ptr<JitCompiler>(
      new JitCompiler(options, std::move(compiler), std::move(cache)));
}

absl::Status JitCompiler::CheckArch(absl::string_view arch) const {
  const int number = ParseRealArch(arch);
  if (number < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("arch \"", arch, "\" is not a real GPU architecture such as sm_90 or sm_90a"));
  }
  const std::vector<int>& supported = compiler_->supported_archs();
  if (!supported.empty() &&
      std::find(supported.begin(), supported.end(), number) == supported.end()) {
    return absl::InvalidArgumentError(absl::StrCat("arch \"", arch, "\" is not supported by NVRTC ",
                                                   compiler_->version_string(), " (supported: sm_",
                                                   absl::StrJoin(supported, ", sm_"), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<JitResult> JitCompiler::Compile(const CompileRequest& request,
                                               absl::string_view arch) {
  const auto start = std::chrono::steady_clock::now();
  GPUKIT_RETURN_IF_ERROR(ValidateKernelSource(request.source, options_.limits));
  GPUKIT_RETURN_IF_ERROR(ValidateKernelHeaders(request.source, request.headers, options_.limits));
  GPUKIT_RETURN_IF_ERROR(ValidateEntryNames(request.entries, options_.limits));
  GPUKIT_ASSIGN_OR_RETURN(std::vector<std::string> options,
                          NormalizeCompileOptions(request.options, options_.limits));
  GPUKIT_RETURN_IF_ERROR(CheckArch(arch));

  // Headers are part of what the binary depends on: in the key after the source, sorted by
  // name (NVRTC finds them by name), NUL-separated (neither source nor header holds a NUL).
  std::string keyed_source = request.source;
  std::vector<std::pair<std::string, std::string>> headers = request.headers;
  std::sort(headers.begin(), headers.end());
  for (const auto& [name, text] : headers) {
    keyed_source.append(1, '\0').append(name).append(1, '\0').append(text);
  }
  const std::string key =
      KernelCacheKey(keyed_source, options, arch, compiler_->version_string(), request.entries);
  GPUKIT_ASSIGN_OR_RETURN(
      KernelCache::Lookup found, cache_->GetOrCompile(key, [&]() -> absl::StatusOr<CompiledKernel> {
        GPUKIT_ASSIGN_OR_RETURN(
            NvrtcOutput output,
            compiler_->Compile(NvrtcInput{.source = request.source,
                                          .headers = request.headers,
                                          .name_expressions = request.entries,
                                          .options = options,
                                          .arch = std::string(arch),
                                          .time_budget = options_.compile_time_budget}));
        spdlog::debug("JIT compiled {} for {} in {} ({} entries, {} bytes){}", key,
                      std::string(arch), absl::FormatDuration(output.compile_time),
                      request.entries.size(), output.cubin.size(),
                      output.log.empty() ? "" : " with warnings");
        CompiledKernel kernel;
        kernel.cubin = std::move(output.cubin);
        kernel.entries = request.entries;
        kernel.lowered_names = std::move(output.lowered_names);
        kernel.log = std::move(output.log);
        kernel.compile_time = output.compile_time;
        return kernel;
      }));
  return JitResult{std::move(found.kernel), found.origin,
                   absl::FromChrono(std::chrono::steady_clock::now() - start)};
}

}  // namespace gpukit
