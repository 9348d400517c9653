// CudaDevice's built-in ops: which path runs them (the build's precompiled fatbins or the
// NVRTC JIT compiler), RunOp, and the routing of matmuls to cuBLASLt with a workspace per
// stream. The rest of the class is in cuda_device.cc and cuda_device_memory.cc.
#include <cuda.h>  // types and constants only; calls go through CudaDriver

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/cuda/embedded_kernels.h"
#include "runtime/base/status_macros.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_device_internal.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/fatbin.h"
#include "runtime/cuda/matmul_plan.h"
#include "runtime/jit/library_search.h"
#include "spdlog/spdlog.h"

namespace gpukit {

void CudaDevice::EnableCublasLt(const CudaDeviceOptions& options) {
  matmul_slice_seconds_[static_cast<int>(StreamPriority::kLow)] =
      absl::ToDoubleSeconds(std::max(options.matmul_slices.low_priority, absl::ZeroDuration()));
  matmul_slice_seconds_[static_cast<int>(StreamPriority::kNormal)] =
      absl::ToDoubleSeconds(std::max(options.matmul_slices.normal_priority, absl::ZeroDuration()));
  if (!options.use_cublaslt) {
    spdlog::info("{}: cuBLASLt turned off; matmul uses gpukit's own kernel", Describe());
    return;
  }
  absl::StatusOr<std::unique_ptr<CublasLtMatmul>> blas = absl::InternalError("not bound");
  if (absl::Status bound = Bind(); !bound.ok()) {
    blas = bound;
  } else {
    LibrarySearchOptions search;
    search.explicit_dir = options.cublaslt_dir;
    blas = CublasLtMatmul::Create(CudaLibrarySearchDirs(search), info_.multiprocessor_count);
  }
  if (!blas.ok()) {
    // The status reads "cuBLASLt not available (where it looked)" when the library is missing.
    spdlog::warn("{}: {}; matmul uses gpukit's own kernel", Describe(),
                 std::string(blas.status().message()));
    return;
  }
  blas_ = *std::move(blas);
  spdlog::info("{}: matmul through cuBLASLt {} ({})", Describe(), blas_->library().version,
               blas_->library().path);
}

void CudaDevice::EnableBuiltinOps(std::shared_ptr<JitCompiler> jit, bool compile_at_start,
                                  bool use_precompiled) {
  // The precompiled modules (kernels/cuda/embedded_kernels.h), when the build made them: how
  // this GPU runs them is the worst fit among them (they are built alike, so all fit alike).
  const absl::Span<const kernels::EmbeddedKernelSource> modules = kernels::EmbeddedKernelSources();
  FatbinFit fit = FatbinFit::kNone;
  int64_t fatbin_bytes = 0;
  std::string no_fatbin_reason = use_precompiled ? "this build has no precompiled kernels"
                                                 : "precompiled kernels are turned off";
  if (use_precompiled && !modules.empty() && !modules.front().fatbin.empty()) {
    fit = FatbinFit::kSass;
    for (const kernels::EmbeddedKernelSource& module : modules) {
      absl::StatusOr<std::vector<FatbinImage>> images = ParseFatbin(module.fatbin);
      const FatbinFit module_fit =
          images.ok() ? FatbinRunsOn(*images, info_.sm_major, info_.sm_minor) : FatbinFit::kNone;
      if (!images.ok()) {
        spdlog::warn("{}: the precompiled built-in kernels \"{}\" are unreadable: {}", Describe(),
                     std::string(module.name), images.status().ToString());
      }
      if (module_fit == FatbinFit::kNone) fit = FatbinFit::kNone;
      if (module_fit == FatbinFit::kPtx && fit == FatbinFit::kSass) fit = FatbinFit::kPtx;
      fatbin_bytes += static_cast<int64_t>(module.fatbin.size());
    }
    if (fit == FatbinFit::kNone) {
      no_fatbin_reason = absl::StrCat("the precompiled kernels hold no code ", info_.arch, " runs");
    }
  }
  if (jit != nullptr) {
    if (absl::Status arch = jit->CheckArch(info_.arch); !arch.ok()) {
      spdlog::warn("{}: NVRTC {} cannot compile for it: {}", Describe(), jit->nvrtc_version(),
                   std::string(arch.message()));
      jit = nullptr;
    }
  }
  if (fit == FatbinFit::kNone && jit == nullptr) {
    spdlog::warn(
        "{}: no NVRTC JIT compiler for it and {}, so no built-in ops (raw kernel "
        "launches only)",
        Describe(), no_fatbin_reason);
    return;
  }
  ModuleCompiler compile;  // stays null without NVRTC: the fatbins must do
  if (jit != nullptr) {
    jit_ = std::move(jit);
    JitCompiler* compiler = jit_.get();
    const std::string arch = info_.arch;
    compile = [compiler, arch](absl::string_view module, absl::string_view source,
                               absl::string_view entry) -> absl::StatusOr<std::string> {
      CompileRequest request;
      request.source = std::string(source);
      request.entries = {std::string(entry)};
      GPUKIT_ASSIGN_OR_RETURN(JitResult compiled, compiler->Compile(request, arch));
      spdlog::info("built-in kernels \"{}\" for {}: {} ({:.1f} ms)", std::string(module), arch,
                   std::string(KernelOriginName(compiled.origin)),
                   absl::ToDoubleMilliseconds(compiled.elapsed));
      return compiled.kernel->cubin;
    };
  }
  ops_ = std::make_unique<BuiltinOpRunner>(
      *this, BuiltinOpRunnerOptions{.compile = std::move(compile),
                                    .modules = modules,
                                    .use_precompiled = fit != FatbinFit::kNone});
  // With compile_at_start, modules still to be compiled (by NVRTC, or by the driver from
  // PTX) are compiled in the background from now on, several at once, so that the first op
  // waits for its own at most.
  const int warm_up_threads =
      std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2);
  const char* const when = compile_at_start ? "in the background" : "on first use";
  const kernels::PrecompiledTargets targets = kernels::PrecompiledKernelTargets();
  const std::string fatbin_text =
      targets.sass_archs.empty()
          ? std::string()
          : absl::StrFormat("precompiled fatbin for sm_%d..sm_%d (%.1f MiB)",
                            targets.sass_archs.front(), targets.sass_archs.back(),
                            static_cast<double>(fatbin_bytes) / (1 << 20));
  switch (fit) {
    case FatbinFit::kSass:
      spdlog::info("{}: built-in kernels: {}, SASS for {}", Describe(), fatbin_text, info_.arch);
      break;
    case FatbinFit::kPtx:
      spdlog::info("{}: built-in kernels: {}, compute_{} PTX compiled by the driver for {} {}",
                   Describe(), fatbin_text, targets.ptx_arch, info_.arch, when);
      if (compile_at_start) ops_->StartWarmUp(warm_up_threads);
      break;
    case FatbinFit::kNone:
      spdlog::info("{}: built-in kernels: compiling with NVRTC {} for {} {} ({})", Describe(),
                   jit_->nvrtc_version(), info_.arch, when, no_fatbin_reason);
      if (compile_at_start) ops_->StartWarmUp(warm_up_threads);
      break;
  }
}

// ---- Built-in ops ----

bool CudaDevice::SupportsOp(absl::string_view op_name) const {
  return ops_ != nullptr && BuiltinOpRunner::Supports(op_name);
}

absl::Status CudaDevice::RunOp(const OpLaunch& launch, StreamId stream) {
  if (launch.op == nullptr) return absl::InvalidArgumentError("RunOp without an op");
  // Operands are checked as they will be once kernels exist, so a stale or short buffer
  // fails the same way on every backend.
  for (const OpOperand& operand : launch.inputs) {
    if (operand.is_scalar) continue;
    GPUKIT_ASSIGN_OR_RETURN(int64_t bytes, ByteSize(operand.desc.shape, operand.desc.dtype));
    GPUKIT_RETURN_IF_ERROR(Resolve(operand.buffer, 0, bytes).status());
  }
  GPUKIT_ASSIGN_OR_RETURN(int64_t out_bytes,
                          ByteSize(launch.plan.output.shape, launch.plan.output.dtype));
  GPUKIT_RETURN_IF_ERROR(Resolve(launch.output, 0, out_bytes).status());
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, FindStream(stream));
  if (blas_ != nullptr && launch.op->cuda_library == CudaLibrary::kCublasLtMatmul) {
    GPUKIT_ASSIGN_OR_RETURN(const bool ran, RunMatmulOnCublasLt(launch, *s, stream));
    if (ran) return absl::OkStatus();
  }
  if (ops_ == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("op \"", launch.op->name, "\" cannot run on ", Describe(),
                     ": built-in ops need precompiled kernels this GPU runs or the NVRTC JIT "
                     "compiler, and it has neither (see gpukitd's log at start-up)"));
  }
  return ops_->Run(launch, stream);
}

absl::StatusOr<bool> CudaDevice::RunMatmulOnCublasLt(const OpLaunch& launch, const Stream& s,
                                                     StreamId stream) {
  if (launch.inputs.size() != 2 || launch.inputs[0].is_scalar || launch.inputs[1].is_scalar) {
    return false;  // the planner lets no such matmul through; the fallback reports it
  }
  const OpOperand& a = launch.inputs[0];
  const OpOperand& b = launch.inputs[1];
  const MatmulRoute route = RouteMatmul(a.desc, b.desc, launch.plan);
  switch (route.kind) {
    case MatmulRoute::Kind::kNothingToDo:
      return true;
    case MatmulRoute::Kind::kFallback:
      spdlog::debug("{}: matmul on gpukit's kernel: {}", Describe(), route.reason);
      return false;
    case MatmulRoute::Kind::kCublasLt:
      break;
  }
  MatmulBuffers buffers;
  GPUKIT_ASSIGN_OR_RETURN(buffers.a, Resolve(a.buffer, 0, 0));
  GPUKIT_ASSIGN_OR_RETURN(buffers.b, Resolve(b.buffer, 0, 0));
  GPUKIT_ASSIGN_OR_RETURN(buffers.out, Resolve(launch.output, 0, 0));
  std::tie(buffers.workspace, buffers.workspace_bytes) = BlasWorkspace(stream);
  GPUKIT_RETURN_IF_ERROR(Bind());
  // The target is the whole GPU's FLOPs even for a green context's stream (whose kernels a
  // higher class need not wait for on the other SMs): on an H200, targets scaled to the
  // stream's SMs made both the BestEffort flood and the Guaranteed victim's p99 worse
  // (docs/benchmarks.md, "Matmul slices along the tiles"). Its waves count its own SMs.
  const double max_slice_flops =
      (launch.sliceable ? s.matmul_slice_seconds : 0.0) *
      EstimatedMatmulFlopsPerSecond(info_.sm_major, info_.multiprocessor_count, route.shape.dtype,
                                    route.shape.allow_tf32);
  const absl::Status status =
      blas_->Matmul(s.handle, route.shape, buffers, max_slice_flops, s.sm_count);
  if (absl::IsUnimplemented(status)) {
    spdlog::debug("{}: matmul on gpukit's kernel: {}", Describe(), std::string(status.message()));
    return false;
  }
  GPUKIT_RETURN_IF_ERROR(status);
  cublaslt_matmuls_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

int64_t CudaDevice::cublaslt_sliced_matmul_count() const {
  return blas_ != nullptr ? blas_->sliced_matmul_count() : 0;
}

int64_t CudaDevice::cublaslt_slice_count() const {
  return blas_ != nullptr ? blas_->slice_count() : 0;
}

std::pair<uint64_t, uint64_t> CudaDevice::BlasWorkspace(StreamId stream) {
  BufferId workspace;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = blas_workspaces_.find(stream.value); it != blas_workspaces_.end()) {
      workspace = it->second;
    }
  }
  if (workspace.value == 0) {
    absl::StatusOr<BufferId> allocated =
        Allocate(static_cast<int64_t>(CublasLtMatmul::kWorkspaceBytes));
    if (!allocated.ok()) {
      spdlog::debug("{}: no cuBLASLt workspace for stream {}: {}", Describe(), stream.value,
                    std::string(allocated.status().message()));
      return {0, 0};
    }
    bool inserted = false;
    {
      absl::MutexLock lock(&mu_);
      // Two threads' first matmuls on one stream: the first workspace stays, the other goes.
      auto [it, added] = blas_workspaces_.emplace(stream.value, *allocated);
      workspace = it->second;
      inserted = added;
    }
    if (!inserted) Free(*allocated).IgnoreError();
  }
  absl::StatusOr<uint64_t> address =
      Resolve(workspace, 0, static_cast<int64_t>(CublasLtMatmul::kWorkspaceBytes));
  if (!address.ok()) return {0, 0};
  return {*address, CublasLtMatmul::kWorkspaceBytes};
}

}  // namespace gpukit
