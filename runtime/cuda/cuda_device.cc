#include "runtime/cuda/cuda_device.h"

#include <cuda.h>  // types and constants only; calls go through CudaDriver

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/cuda/embedded_kernels.h"
#include "runtime/base/shape.h"
#include "runtime/base/status_macros.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/cuda/fatbin.h"
#include "runtime/cuda/matmul_plan.h"
#include "runtime/cuda/shared_mapping.h"
#include "runtime/cuda/transfer_engine.h"
#include "runtime/jit/library_search.h"
#include "spdlog/spdlog.h"

namespace gpukit {

static_assert(sizeof(CUdeviceptr) == sizeof(uint64_t), "device addresses are kept as uint64_t");
static_assert(std::is_same_v<CUdevice, int>, "CUdevice is kept as int");
static_assert(std::is_same_v<CUcontext, CUctx_st*>, "CUcontext is kept as CUctx_st*");

namespace {

// The smallest SM gpukitd runs on (Ampere): what its kernels and the VMM pool assume.
constexpr int kMinimumSmMajor = 8;

// Most parameters a kernel can have: 32764 bytes of parameter space, one byte each at worst.
constexpr size_t kMaxKernelParams = 32764;

absl::Status MakeCurrent(const CudaDriver& cu, CUcontext context) {
  // Always set rather than compare with cuCtxGetCurrent: a thread may still name a primary
  // context that was released and retained again since, and setting it is as cheap.
  return CheckCu(cu.cuCtxSetCurrent(context), "cuCtxSetCurrent");
}

// Releases have no caller to report to; a faulted context fails every one of them alike.
// Cleanups at the device's end often meet a context already torn down: debug level here,
// where cuda_driver.h's LogIfFailed warns.
void LogQuietlyIfFailed(CUresult result, const char* call) {
  if (result != CUDA_SUCCESS) spdlog::debug("{} failed: {}", call, CuErrorName(result));
}

const char* const kAxes[3] = {"x", "y", "z"};

}  // namespace

// A CUDA stream, destroyed when the last user lets go (the table, or a call using it).
struct CudaDevice::Stream {
  Stream(const CudaDriver& cu, CUcontext context, CUstream handle)
      : cu(cu), context(context), handle(handle) {}
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (MakeCurrent(cu, context).ok())
      LogQuietlyIfFailed(cu.cuStreamDestroy(handle), "cuStreamDestroy");
  }

  const CudaDriver& cu;
  const CUcontext context;
  const CUstream handle;
  // Orders RecordEvent on this stream, so sequence numbers follow the driver's record order.
  absl::Mutex record_mu;
  uint64_t next_event_seq ABSL_GUARDED_BY(record_mu) = 0;
};

// Timing CUDA events for reuse: every task records two, and creating and destroying them
// costs two driver calls each. Recording an event again is allowed while an earlier record is
// still pending; nobody can wait on the earlier one once its EventId is gone.
class CudaDevice::EventPool {
 public:
  EventPool(const CudaDriver& cu, CUcontext context) : cu_(cu), context_(context) {}
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  ~EventPool() {
    if (!MakeCurrent(cu_, context_).ok()) return;
    for (CUevent event : free_) LogQuietlyIfFailed(cu_.cuEventDestroy(event), "cuEventDestroy");
  }

  // A free event, or a new one; the context must be current.
  absl::StatusOr<CUevent> Take() {
    {
      absl::MutexLock lock(&mu_);
      if (!free_.empty()) {
        CUevent event = free_.back();
        free_.pop_back();
        return event;
      }
    }
    CUevent event = nullptr;
    // Default flags: timing stays enabled, which EventElapsedNs (pacing) needs.
    GPUKIT_RETURN_IF_ERROR(CheckCu(cu_.cuEventCreate(&event, CU_EVENT_DEFAULT), "cuEventCreate"));
    return event;
  }

  void Give(CUevent event) {
    {
      absl::MutexLock lock(&mu_);
      if (free_.size() < kMaxFree) {
        free_.push_back(event);
        return;
      }
    }
    if (MakeCurrent(cu_, context_).ok())
      LogQuietlyIfFailed(cu_.cuEventDestroy(event), "cuEventDestroy");
  }

 private:
  // More than enough for every stream's tasks in flight; beyond it, events are destroyed.
  static constexpr size_t kMaxFree = 1024;
  const CudaDriver& cu_;
  const CUcontext context_;
  absl::Mutex mu_;
  std::vector<CUevent> free_ ABSL_GUARDED_BY(mu_);
};

// A timing CUDA event and where it was recorded (EventElapsedNs checks both).
struct CudaDevice::Event {
  Event(std::shared_ptr<EventPool> pool, CUevent handle) : pool(std::move(pool)), handle(handle) {}
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { pool->Give(handle); }

  const std::shared_ptr<EventPool> pool;
  const CUevent handle;
  uint64_t stream_id = 0;  // set before the event enters the table, constant afterwards
  uint64_t seq = 0;        // order among the stream's events
};

// A loaded module, unloaded when the table and every function of it have let go.
struct CudaDevice::Module {
  Module(const CudaDriver& cu, CUcontext context, CUmodule handle)
      : cu(cu), context(context), handle(handle) {}
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  ~Module() {
    if (MakeCurrent(cu, context).ok())
      LogQuietlyIfFailed(cu.cuModuleUnload(handle), "cuModuleUnload");
  }

  const CudaDriver& cu;
  const CUcontext context;
  const CUmodule handle;
  // Kernel name -> FunctionId, so GetFunction gives one id per kernel. Guarded by the
  // device's mu_ (a nested type cannot name it in an annotation).
  absl::flat_hash_map<std::string, uint64_t> functions;
};

// A kernel of a module, with what launch validation needs to know about it.
struct CudaDevice::Function {
  std::shared_ptr<Module> module;  // keeps the code loaded while a launch uses it
  CUfunction handle = nullptr;
  std::string name;
  int max_threads_per_block = 0;  // after register use; at most the device's limit
  int static_shared_bytes = 0;
  bool params_known = false;        // the driver reports parameters (CUDA 12.4+)
  std::vector<size_t> param_bytes;  // when params_known
  // Dynamic shared memory the kernel is opted into; only ever raised, so a concurrent launch
  // never sees its limit lowered.
  absl::Mutex mu;
  int dynamic_shared_limit_bytes ABSL_GUARDED_BY(mu) = 0;
};

absl::StatusOr<int> CudaDevice::DeviceCount() {
  GPUKIT_ASSIGN_OR_RETURN(const CudaDriver* cu, CudaDriver::Get());
  int count = 0;
  GPUKIT_RETURN_IF_ERROR(CheckCu(cu->cuDeviceGetCount(&count), "cuDeviceGetCount"));
  return count;
}

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(const CudaDeviceOptions& options) {
  GPUKIT_ASSIGN_OR_RETURN(const CudaDriver* cu, CudaDriver::Get());
  GPUKIT_ASSIGN_OR_RETURN(const int count, DeviceCount());
  if (options.index < 0 || options.index >= count) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device index ", options.index,
                                                   " is out of range: the driver shows ", count,
                                                   " device(s)"));
  }
  CUdevice device = 0;
  GPUKIT_RETURN_IF_ERROR(CheckCu(cu->cuDeviceGet(&device, options.index), "cuDeviceGet"));

  DeviceProperties properties;
  properties.index = options.index;
  properties.backend = BackendKind::kCuda;
  char name[256] = {};
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu->cuDeviceGetName(name, sizeof(name) - 1, device), "cuDeviceGetName"));
  properties.name = name;

  auto attribute = [&](CUdevice_attribute which, const char* what) -> absl::StatusOr<int> {
    int value = 0;
    GPUKIT_RETURN_IF_ERROR(CheckCu(cu->cuDeviceGetAttribute(&value, which, device),
                                   absl::StrCat("cuDeviceGetAttribute(", what, ")")));
    return value;
  };
  CudaDeviceInfo info;
  info.driver_version = cu->driver_version;
  GPUKIT_ASSIGN_OR_RETURN(info.sm_major, attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                                   "COMPUTE_CAPABILITY_MAJOR"));
  GPUKIT_ASSIGN_OR_RETURN(info.sm_minor, attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                                   "COMPUTE_CAPABILITY_MINOR"));
  info.arch = absl::StrCat("sm_", info.sm_major, info.sm_minor);
  if (info.sm_major < kMinimumSmMajor) {
    return absl::FailedPreconditionError(
        absl::StrCat("gpukitd requires SM >= 80 (Ampere or newer); device ", options.index, " (",
                     properties.name, ") is ", info.arch));
  }
  GPUKIT_ASSIGN_OR_RETURN(
      info.multiprocessor_count,
      attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "MULTIPROCESSOR_COUNT"));
  GPUKIT_ASSIGN_OR_RETURN(
      info.max_threads_per_block,
      attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "MAX_THREADS_PER_BLOCK"));
  GPUKIT_ASSIGN_OR_RETURN(info.max_block_dim[0],
                          attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, "MAX_BLOCK_DIM_X"));
  GPUKIT_ASSIGN_OR_RETURN(info.max_block_dim[1],
                          attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, "MAX_BLOCK_DIM_Y"));
  GPUKIT_ASSIGN_OR_RETURN(info.max_block_dim[2],
                          attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, "MAX_BLOCK_DIM_Z"));
  GPUKIT_ASSIGN_OR_RETURN(info.max_grid_dim[0],
                          attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, "MAX_GRID_DIM_X"));
  GPUKIT_ASSIGN_OR_RETURN(info.max_grid_dim[1],
                          attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, "MAX_GRID_DIM_Y"));
  GPUKIT_ASSIGN_OR_RETURN(info.max_grid_dim[2],
                          attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, "MAX_GRID_DIM_Z"));
  GPUKIT_ASSIGN_OR_RETURN(
      info.max_shared_memory_per_block_bytes,
      attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, "MAX_SHARED_MEMORY_PER_BLOCK"));
  GPUKIT_ASSIGN_OR_RETURN(info.max_shared_memory_per_block_optin_bytes,
                          attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                    "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"));
  size_t total_bytes = 0;
  GPUKIT_RETURN_IF_ERROR(CheckCu(cu->cuDeviceTotalMem(&total_bytes, device), "cuDeviceTotalMem"));
  properties.memory_total_bytes = static_cast<int64_t>(total_bytes);
  // What callers above the Device seam check launches against and compile for.
  properties.kernel_arch = info.arch;
  for (int axis = 0; axis < 3; ++axis) {
    properties.max_grid_dim[axis] = info.max_grid_dim[axis];
    properties.max_block_dim[axis] = info.max_block_dim[axis];
  }
  properties.max_threads_per_block = info.max_threads_per_block;
  properties.max_shared_memory_per_block_optin_bytes = info.max_shared_memory_per_block_optin_bytes;

  CUcontext context = nullptr;
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu->cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain"));
  absl::Status status = MakeCurrent(*cu, context);
  if (status.ok()) {
    status = CheckCu(cu->cuCtxGetStreamPriorityRange(&info.least_stream_priority,
                                                     &info.greatest_stream_priority),
                     "cuCtxGetStreamPriorityRange");
  }
  if (!status.ok()) {
    LogQuietlyIfFailed(cu->cuDevicePrimaryCtxRelease(device), "cuDevicePrimaryCtxRelease");
    return status;
  }
  std::unique_ptr<CudaDevice> created(
      new CudaDevice(*cu, device, context, std::move(properties), std::move(info)));
  CUstream health = nullptr;  // the context is current (MakeCurrent above)
  GPUKIT_RETURN_IF_ERROR(CheckCu(cu->cuStreamCreate(&health, CU_STREAM_NON_BLOCKING),
                                 "cuStreamCreate (health stream)"));
  created->health_stream_ = std::make_shared<Stream>(*cu, context, health);
  GPUKIT_RETURN_IF_ERROR(created->EnableMemoryPools(options));
  created->EnableBuiltinOps(options.jit, options.compile_builtin_kernels_at_start,
                            options.use_precompiled_kernels);
  created->EnableCublasLt(options);
  return created;
}

absl::Status CudaDevice::EnableMemoryPools(const CudaDeviceOptions& options) {
  GPUKIT_ASSIGN_OR_RETURN(
      host_pool_,
      MemoryPool::Create(std::make_unique<PinnedHostSource>(cu_, context_), options.host_pool));
  GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<CudaSegmentSource> source,
                          CudaSegmentSource::Create(cu_, context_, device_));
  memory_source_ = source->Describe();
  memory_exportable_ = source->kind() == CudaSegmentSource::Kind::kVmmPosixFd;
  if (source->kind() != CudaSegmentSource::Kind::kVmmPosixFd) {
    spdlog::warn("{}: device memory through {}", Describe(), memory_source_);
  }
  GPUKIT_ASSIGN_OR_RETURN(pool_, MemoryPool::Create(std::move(source), options.memory_pool));
  spdlog::info("{}: memory pool over {}, caching up to {} MiB of free memory", Describe(),
               memory_source_, options.memory_pool.max_cached_bytes >> 20);
  return absl::OkStatus();
}

void CudaDevice::EnableCublasLt(const CudaDeviceOptions& options) {
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
    blas = CublasLtMatmul::Create(CudaLibrarySearchDirs(search));
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

CudaDevice::CudaDevice(const CudaDriver& cu, int device, CUctx_st* context,
                       DeviceProperties properties, CudaDeviceInfo info)
    : cu_(cu),
      device_(device),
      context_(context),
      properties_(std::move(properties)),
      info_(std::move(info)),
      transfers_(std::make_unique<TransferEngine>(cu, context, TransferEngineOptions{})),
      event_pool_(std::make_shared<EventPool>(cu, context)) {}

CudaDevice::~CudaDevice() {
  // The warm-up loads modules through this device: it ends before anything is torn down.
  if (ops_ != nullptr) ops_->StopWarmUp();
  if (absl::Status idle = SynchronizeAllStreams(); !idle.ok()) {
    spdlog::warn("{}: queued work failed at shutdown: {}", Describe(), idle.ToString());
  }
  // Everything leaves the tables under the lock and is released outside it: releases call
  // the driver.
  absl::flat_hash_map<uint64_t, std::shared_ptr<Function>> functions;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Module>> modules;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Event>> events;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Stream>> streams;
  absl::flat_hash_map<uint64_t, Allocation> buffers;
  absl::flat_hash_map<uint64_t, MappedSegment> segments;
  {
    absl::MutexLock lock(&mu_);
    functions.swap(functions_);
    modules.swap(modules_);
    events.swap(events_);
    streams.swap(streams_);
    buffers.swap(buffers_);
    segments.swap(segments_);
    used_bytes_ = 0;
  }
  functions.clear();
  modules.clear();
  events.clear();
  event_pool_.reset();
  streams.clear();
  health_stream_.reset();
  if (!Bind().ok())
    spdlog::warn("{}: cannot bind its context to unmap imported memory", Describe());
  for (const auto& [id, allocation] : buffers) {
    if (allocation.address == 0 || allocation.imported != nullptr || allocation.in_segment) {
      continue;
    }
    if (allocation.legacy_ipc) {
      LogQuietlyIfFailed(cu_.cuMemFree(static_cast<CUdeviceptr>(allocation.address)), "cuMemFree");
    } else {
      ReleaseDeviceMemory(allocation.address).IgnoreError();
    }
  }
  buffers.clear();     // unmaps imported memory
  segments.clear();    // unmaps the segments; their memory stays with its owner
  pool_.reset();       // returns every segment to the driver
  host_pool_.reset();  // host buffers must not outlive the device
  transfers_.reset();  // its pinned buffers and events belong to the context
  blas_.reset();       // its handle belongs to the context too
  LogQuietlyIfFailed(cu_.cuDevicePrimaryCtxRelease(device_), "cuDevicePrimaryCtxRelease");
  // Leave no thread naming a context that may now be gone.
  CUcontext current = nullptr;
  if (cu_.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == context_) {
    LogQuietlyIfFailed(cu_.cuCtxSetCurrent(nullptr), "cuCtxSetCurrent");
  }
}

absl::Status CudaDevice::Bind() const { return MakeCurrent(cu_, context_); }

std::string CudaDevice::Describe() const {
  return absl::StrCat("device ", properties_.index, " (", properties_.name, ")");
}

// ---- Memory ----

MemoryInfo CudaDevice::GetMemoryInfo() const {
  absl::MutexLock lock(&mu_);
  return {properties_.memory_total_bytes, used_bytes_};
}

absl::StatusOr<uint64_t> CudaDevice::AllocateDeviceMemory(int64_t bytes) {
  absl::StatusOr<PoolBlock> block = pool_->Allocate(bytes);
  if (absl::IsResourceExhausted(block.status())) {
    int64_t used_bytes;
    {
      absl::MutexLock lock(&mu_);
      used_bytes = used_bytes_;
    }
    return absl::ResourceExhaustedError(
        absl::StrCat(Describe(), " is out of memory: cannot allocate ", bytes,
                     " bytes (gpukit buffers hold ", used_bytes, " of its ",
                     properties_.memory_total_bytes, " bytes; ", block.status().message(), ")"));
  }
  if (!block.ok()) return block.status();
  return block->address;
}

absl::Status CudaDevice::ReleaseDeviceMemory(uint64_t address) { return pool_->Free(address); }

absl::StatusOr<BufferId> CudaDevice::Allocate(int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("allocation of ", bytes, " bytes"));
  }
  if (bytes > properties_.memory_total_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(Describe(), " cannot hold ", bytes,
                                                     " bytes: it has ",
                                                     properties_.memory_total_bytes, " in all"));
  }
  uint64_t address = 0;  // a zero-byte buffer holds no memory
  if (bytes > 0) {
    GPUKIT_ASSIGN_OR_RETURN(address, AllocateDeviceMemory(bytes));
  }
  absl::MutexLock lock(&mu_);
  used_bytes_ += bytes;
  const uint64_t id = next_id_++;
  buffers_.emplace(id, Allocation{address, bytes});
  return BufferId{id};
}

absl::Status CudaDevice::Free(BufferId buffer) {
  Allocation doomed;
  {
    absl::MutexLock lock(&mu_);
    auto it = buffers_.find(buffer.value);
    if (it == buffers_.end()) {
      return absl::NotFoundError(absl::StrCat("buffer ", buffer.value, " not found"));
    }
    doomed = std::move(it->second);
    buffers_.erase(it);
    if (doomed.in_segment) {
      // The segment's memory stays mapped until UnmapSegment; the buffer was only a range.
      if (auto segment = segments_.find(doomed.segment_key); segment != segments_.end()) {
        --segment->second.buffers;
      }
      return absl::OkStatus();
    }
    if (doomed.imported == nullptr) used_bytes_ -= doomed.bytes;
  }
  // Outside the lock: both may wait for the GPU.
  if (doomed.imported != nullptr) {
    GPUKIT_RETURN_IF_ERROR(Bind());
    doomed.imported.reset();  // unmaps
    return absl::OkStatus();
  }
  if (doomed.address == 0) return absl::OkStatus();
  if (doomed.legacy_ipc) {
    GPUKIT_RETURN_IF_ERROR(Bind());
    return CheckCu(cu_.cuMemFree(static_cast<CUdeviceptr>(doomed.address)), "cuMemFree");
  }
  return ReleaseDeviceMemory(doomed.address);
}

absl::StatusOr<BufferId> CudaDevice::ImportBuffer(ImportedMemory memory) {
  GPUKIT_RETURN_IF_ERROR(CheckImportedRange(memory));
  GPUKIT_RETURN_IF_ERROR(Bind());
  absl::StatusOr<std::unique_ptr<SharedMapping>> mapping =
      memory.cuda_ipc_handle.empty()
          ? SharedMapping::OpenDescriptor(cu_, device_, std::move(memory.fd),
                                          memory.allocation_bytes)
          : SharedMapping::OpenIpcHandle(cu_, memory.cuda_ipc_handle);
  if (!mapping.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe(), " cannot map the shared memory: ", mapping.status().message()));
  }
  std::shared_ptr<SharedMapping> imported = *std::move(mapping);
  if (memory.offset_bytes > imported->bytes() ||
      memory.bytes > imported->bytes() - memory.offset_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("imported range [", memory.offset_bytes, ", +", memory.bytes,
                     ") is outside the shared allocation of ", imported->bytes(), " bytes"));
  }
  // A legacy handle of memory on another GPU opens through peer access; gpukit wants the
  // session's own GPU.
  int ordinal = -1;
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu_.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                        static_cast<CUdeviceptr>(imported->address())),
              "cuPointerGetAttribute"));
  if (ordinal != properties_.index) {
    return absl::InvalidArgumentError(absl::StrCat("the shared memory is on CUDA device ", ordinal,
                                                   " of gpukitd's, not on ", Describe()));
  }
  const uint64_t address = imported->address() + static_cast<uint64_t>(memory.offset_bytes);
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  buffers_.emplace(id, Allocation{address, memory.bytes, std::move(imported)});
  return BufferId{id};
}

absl::Status CudaDevice::MapSegment(uint64_t key, ScopedFd fd, int64_t bytes) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment ", key, " of ", bytes, " bytes: a segment has > 0 bytes"));
  }
  auto key_in_use = [key] {
    return absl::InvalidArgumentError(absl::StrCat("segment key ", key, " is already mapped"));
  };
  {
    absl::MutexLock lock(&mu_);
    if (segments_.contains(key)) return key_in_use();
  }
  // Mapped outside the lock (driver calls); a racing MapSegment of the same key loses below.
  GPUKIT_RETURN_IF_ERROR(Bind());
  absl::StatusOr<std::unique_ptr<SharedMapping>> mapping =
      SharedMapping::OpenDescriptor(cu_, device_, std::move(fd), bytes);
  if (!mapping.ok()) {
    // A faulted context fails every call alike: that is the device's state, not the caller's
    // descriptor, and the caller must learn it as such.
    GPUKIT_RETURN_IF_ERROR(CheckHealth());
    return absl::InvalidArgumentError(absl::StrCat(Describe(), " cannot map segment ", key, " of ",
                                                   bytes, " bytes: ", mapping.status().message()));
  }
  std::shared_ptr<SharedMapping> mapped = *std::move(mapping);
  {
    absl::MutexLock lock(&mu_);
    if (!segments_.contains(key)) {
      segments_.emplace(key, MappedSegment{std::move(mapped), 0});
      return absl::OkStatus();
    }
  }
  mapped.reset();  // unmaps, outside the lock; the context is still current
  return key_in_use();
}

absl::Status CudaDevice::UnmapSegment(uint64_t key) {
  std::shared_ptr<SharedMapping> doomed;
  {
    absl::MutexLock lock(&mu_);
    auto it = segments_.find(key);
    if (it == segments_.end()) {
      return absl::NotFoundError(absl::StrCat("segment ", key, " is not mapped"));
    }
    if (it->second.buffers > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "segment ", key, " still holds ", it->second.buffers, " buffer(s); free them first"));
    }
    doomed = std::move(it->second.mapping);
    segments_.erase(it);
  }
  GPUKIT_RETURN_IF_ERROR(Bind());
  doomed.reset();  // unmaps
  return absl::OkStatus();
}

absl::StatusOr<BufferId> CudaDevice::BufferInSegment(uint64_t key, int64_t offset, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  auto it = segments_.find(key);
  if (it == segments_.end()) {
    return absl::NotFoundError(absl::StrCat("segment ", key, " is not mapped"));
  }
  const int64_t segment_bytes = it->second.mapping->bytes();
  if (offset < 0 || bytes < 0 || offset > segment_bytes || bytes > segment_bytes - offset) {
    return absl::OutOfRangeError(absl::StrCat("range [", offset, ", +", bytes,
                                              ") is outside segment ", key, " of ", segment_bytes,
                                              " bytes"));
  }
  Allocation allocation;
  allocation.address = it->second.mapping->address() + static_cast<uint64_t>(offset);
  allocation.bytes = bytes;
  allocation.in_segment = true;
  allocation.segment_key = key;
  ++it->second.buffers;
  const uint64_t id = next_id_++;
  buffers_.emplace(id, std::move(allocation));
  return BufferId{id};
}

absl::Status CudaDevice::CheckHealth() {
  if (absl::Status bound = Bind(); !bound.ok()) {
    return absl::InternalError(
        absl::StrCat(Describe(), " cannot make its context current: ", bound.message()));
  }
  const CUresult result = cu_.cuStreamQuery(health_stream_->handle);
  // NOT_READY cannot happen on a stream nothing is enqueued on; were it ever to, it would
  // still not be a fault.
  if (result == CUDA_SUCCESS || result == CUDA_ERROR_NOT_READY) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(Describe(),
                                          " has taken a fault its CUDA context cannot recover "
                                          "from (only a new process can use the GPU): ",
                                          CheckCu(result, "cuStreamQuery").message()));
}

absl::StatusOr<HostBuffer> CudaDevice::AllocateHostBuffer(int64_t bytes) {
  if (bytes <= 0) return Device::AllocateHostBuffer(bytes);
  absl::StatusOr<PoolBlock> block = host_pool_->Allocate(bytes);
  if (!block.ok()) {
    spdlog::debug("{}: no pinned host memory for {} bytes ({}); using pageable memory", Describe(),
                  bytes, std::string(block.status().message()));
    return Device::AllocateHostBuffer(bytes);
  }
  MemoryPool* pool = host_pool_.get();
  return HostBuffer(
      reinterpret_cast<char*>(block->address), bytes, /*pinned=*/true,
      [pool](char* data) { pool->Free(reinterpret_cast<uint64_t>(data)).IgnoreError(); });
}

absl::StatusOr<ExportedBuffer> CudaDevice::ExportBuffer(BufferId buffer, ExportForm form) {
  // One export at a time on the device. mu_ is dropped while MoveBuffer waits for the streams
  // and copies, so without this two exports of one buffer both read its old address, both
  // moved it, and the later one failed (ABORTED) although the buffer was exportable; worse, a
  // descriptor export of a buffer already in a segment of its own could hand out that
  // segment's descriptor while an IPC export of the buffer moved it to a cuMemAlloc
  // allocation: the importer then mapped memory the buffer had left, and the buffer carried
  // both forms. Under export_mu_ the allocation is read after
  // any earlier export has recorded its move and its form, so a second export of the buffer
  // finds it in its own memory and names that same memory. Exports are rare and each costs a
  // driver call or a copy already; no other call takes export_mu_, so only exports wait.
  absl::MutexLock export_lock(&export_mu_);
  Allocation allocation;
  {
    absl::MutexLock lock(&mu_);
    auto it = buffers_.find(buffer.value);
    if (it == buffers_.end()) {
      return absl::NotFoundError(absl::StrCat("buffer ", buffer.value, " not found"));
    }
    allocation = it->second;
  }
  if (allocation.bytes == 0) {
    return absl::InvalidArgumentError("a zero-byte buffer has no memory to export");
  }
  if (allocation.imported != nullptr) {
    return absl::FailedPreconditionError(
        "the buffer is memory another process shared with gpukit; it cannot be exported again");
  }
  if (allocation.in_segment) {
    return absl::FailedPreconditionError(
        absl::StrCat("the buffer lies in segment ", allocation.segment_key,
                     ", memory another process owns; its owner exports it, this device cannot"));
  }
  if (form == ExportForm::kCudaIpcHandle) {
    if (allocation.exported_descriptor) {
      return absl::FailedPreconditionError(
          "the buffer was exported as a descriptor; it cannot also be a CUDA IPC handle");
    }
    return ExportIpcHandle(buffer, allocation);
  }
  if (allocation.legacy_ipc) {
    return absl::FailedPreconditionError(
        "the buffer was exported as a CUDA IPC handle; it cannot also be a descriptor");
  }
  if (!memory_exportable_) {
    return absl::FailedPreconditionError(
        absl::StrCat(Describe(), ": its memory cannot be exported as a descriptor: it comes from ",
                     memory_source_));
  }
  return ExportDescriptor(buffer, allocation);
}

absl::Status CudaDevice::MoveBuffer(BufferId buffer, uint64_t from, uint64_t to, int64_t bytes,
                                    bool to_legacy) {
  // Work other requests queued on the buffer (on any stream) finishes first, so that nothing
  // reads the old memory once it is freed.
  GPUKIT_RETURN_IF_ERROR(Bind());
  GPUKIT_RETURN_IF_ERROR(SynchronizeAllStreams());
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu_.cuMemcpyDtoD(to, from, static_cast<size_t>(bytes)), "cuMemcpyDtoD"));
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(buffer.value);
  if (it == buffers_.end() || it->second.address != from) {
    return absl::AbortedError("the buffer was freed or moved during its export");
  }
  it->second.address = to;
  it->second.legacy_ipc = to_legacy;
  return absl::OkStatus();
}

absl::StatusOr<ExportedBuffer> CudaDevice::ExportDescriptor(BufferId buffer,
                                                            const Allocation& allocation) {
  GPUKIT_ASSIGN_OR_RETURN(PoolBlock block, pool_->Lookup(allocation.address));
  if (block.shares_segment) {
    // Its slab holds other buffers, which the importer must not reach: move it out.
    GPUKIT_ASSIGN_OR_RETURN(PoolBlock own, pool_->AllocateOwnSegment(allocation.bytes));
    if (absl::Status moved =
            MoveBuffer(buffer, allocation.address, own.address, allocation.bytes, false);
        !moved.ok()) {
      pool_->Free(own.address).IgnoreError();
      return moved;
    }
    pool_->Free(allocation.address).IgnoreError();
    block = own;
  }
  GPUKIT_RETURN_IF_ERROR(pool_->MarkShared(block.address));
  GPUKIT_RETURN_IF_ERROR(Bind());
  int fd = -1;
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu_.cuMemExportToShareableHandle(
                  &fd, static_cast<CUmemGenericAllocationHandle>(block.segment.handle),
                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              "cuMemExportToShareableHandle"));
  ExportedBuffer exported;
  exported.fd.Reset(fd);
  {
    // Freeing a buffer while exporting it is the caller's error (as freeing it with work
    // queued is), but the descriptor must never name memory the buffer no longer has: the
    // pool may have given it to another buffer.
    absl::MutexLock lock(&mu_);
    auto it = buffers_.find(buffer.value);
    if (it == buffers_.end() || it->second.address != block.address) {
      return absl::AbortedError(
          absl::StrCat("buffer ", buffer.value, " was freed during its export"));
    }
    it->second.exported_descriptor = true;
  }
  exported.allocation_bytes = block.segment.bytes;
  exported.offset_bytes = 0;
  exported.bytes = allocation.bytes;
  return exported;
}

absl::StatusOr<ExportedBuffer> CudaDevice::ExportIpcHandle(BufferId buffer,
                                                           const Allocation& allocation) {
  uint64_t address = allocation.address;
  if (!allocation.legacy_ipc) {
    // cuIpcGetMemHandle names whole cuMemAlloc allocations: give the buffer one of its own.
    GPUKIT_RETURN_IF_ERROR(Bind());
    CUdeviceptr own = 0;
    GPUKIT_RETURN_IF_ERROR(
        CheckCu(cu_.cuMemAlloc(&own, static_cast<size_t>(allocation.bytes)), "cuMemAlloc"));
    if (absl::Status moved = MoveBuffer(buffer, allocation.address, own, allocation.bytes, true);
        !moved.ok()) {
      LogQuietlyIfFailed(cu_.cuMemFree(own), "cuMemFree");
      return moved;
    }
    ReleaseDeviceMemory(allocation.address).IgnoreError();
    address = own;
  }
  GPUKIT_RETURN_IF_ERROR(Bind());
  CUipcMemHandle handle;
  GPUKIT_RETURN_IF_ERROR(CheckCu(cu_.cuIpcGetMemHandle(&handle, static_cast<CUdeviceptr>(address)),
                                 "cuIpcGetMemHandle"));
  ExportedBuffer exported;
  exported.cuda_ipc_handle.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
  exported.allocation_bytes = allocation.bytes;
  exported.offset_bytes = 0;
  exported.bytes = allocation.bytes;
  return exported;
}

absl::Status CudaDevice::SynchronizeAllStreams() {
  std::vector<std::shared_ptr<Stream>> streams;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, stream] : streams_) streams.push_back(stream);
  }
  GPUKIT_RETURN_IF_ERROR(Bind());
  for (const std::shared_ptr<Stream>& stream : streams) {
    GPUKIT_RETURN_IF_ERROR(CheckCu(cu_.cuStreamSynchronize(stream->handle), "cuStreamSynchronize"));
  }
  return absl::OkStatus();
}

absl::Status CudaDevice::RegisterHostMemory(void* data, int64_t bytes, int /*shared_fd*/) {
  if (data == nullptr || bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("host range of ", bytes, " bytes at null"));
  }
  GPUKIT_RETURN_IF_ERROR(Bind());
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu_.cuMemHostRegister(data, static_cast<size_t>(bytes), 0), "cuMemHostRegister"));
  absl::MutexLock lock(&mu_);
  registered_host_[reinterpret_cast<uintptr_t>(data)] = bytes;
  return absl::OkStatus();
}

absl::Status CudaDevice::UnregisterHostMemory(void* data) {
  {
    absl::MutexLock lock(&mu_);
    if (registered_host_.erase(reinterpret_cast<uintptr_t>(data)) == 0) {
      return absl::NotFoundError("host range was not registered");
    }
  }
  GPUKIT_RETURN_IF_ERROR(Bind());
  return CheckCu(cu_.cuMemHostUnregister(data), "cuMemHostUnregister");
}

bool CudaDevice::IsPinnedHostRange(const void* data, int64_t bytes) const {
  const uintptr_t start = reinterpret_cast<uintptr_t>(data);
  if (host_pool_->Owns(start, bytes)) return true;
  absl::MutexLock lock(&mu_);
  auto it = registered_host_.upper_bound(start);
  if (it == registered_host_.begin()) return false;
  --it;
  const uintptr_t offset = start - it->first;
  return offset < static_cast<uintptr_t>(it->second) &&
         static_cast<uintptr_t>(bytes) <= static_cast<uintptr_t>(it->second) - offset;
}

absl::StatusOr<int64_t> CudaDevice::BufferBytes(BufferId buffer) const {
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(buffer.value);
  if (it == buffers_.end()) {
    return absl::NotFoundError(absl::StrCat("buffer ", buffer.value, " not found"));
  }
  return it->second.bytes;
}

absl::StatusOr<uint64_t> CudaDevice::Resolve(BufferId buffer, int64_t offset, int64_t bytes) const {
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(buffer.value);
  if (it == buffers_.end()) {
    return absl::NotFoundError(absl::StrCat("buffer ", buffer.value, " not found"));
  }
  const int64_t size = it->second.bytes;
  if (offset < 0 || bytes < 0 || offset > size || bytes > size - offset) {
    return absl::OutOfRangeError(absl::StrCat("range [", offset, ", +", bytes, ") outside buffer ",
                                              buffer.value, " of ", size, " bytes"));
  }
  return it->second.address + static_cast<uint64_t>(offset);
}

// ---- Streams ----

absl::StatusOr<StreamId> CudaDevice::CreateStream(StreamPriority priority) {
  // Lower numbers are higher priorities: greatest <= least.
  int value = 0;
  switch (priority) {
    case StreamPriority::kHigh:
      value = info_.greatest_stream_priority;
      break;
    case StreamPriority::kLow:
      value = info_.least_stream_priority;
      break;
    case StreamPriority::kNormal:
      value = info_.least_stream_priority +
              (info_.greatest_stream_priority - info_.least_stream_priority) / 2;
      break;
  }
  GPUKIT_RETURN_IF_ERROR(Bind());
  CUstream handle = nullptr;
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu_.cuStreamCreateWithPriority(&handle, CU_STREAM_NON_BLOCKING, value),
              "cuStreamCreateWithPriority"));
  auto stream = std::make_shared<Stream>(cu_, context_, handle);
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  streams_.emplace(id, std::move(stream));
  return StreamId{id};
}

absl::Status CudaDevice::DestroyStream(StreamId stream) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Stream> doomed, FindStream(stream));
  GPUKIT_RETURN_IF_ERROR(Bind());
  // Waits without the lock; the stream is destroyed when `doomed` (the last user) goes.
  absl::Status synced = CheckCu(cu_.cuStreamSynchronize(doomed->handle), "cuStreamSynchronize");
  {
    absl::MutexLock lock(&mu_);
    if (streams_.erase(stream.value) == 0) {
      return absl::NotFoundError(absl::StrCat("stream ", stream.value, " not found"));
    }
  }
  if (ops_ != nullptr) ops_->ReleaseStream(stream);  // its work has finished
  std::optional<BufferId> workspace;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = blas_workspaces_.find(stream.value); it != blas_workspaces_.end()) {
      workspace = it->second;
      blas_workspaces_.erase(it);
    }
  }
  if (workspace.has_value()) Free(*workspace).IgnoreError();
  return synced;
}

absl::StatusOr<std::shared_ptr<CudaDevice::Stream>> CudaDevice::FindStream(StreamId stream) const {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(stream.value);
  if (it == streams_.end()) {
    return absl::NotFoundError(absl::StrCat("stream ", stream.value, " not found"));
  }
  return it->second;
}

absl::StatusOr<int> CudaDevice::StreamPriorityValue(StreamId stream) const {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, FindStream(stream));
  GPUKIT_RETURN_IF_ERROR(Bind());
  int priority = 0;
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu_.cuStreamGetPriority(s->handle, &priority), "cuStreamGetPriority"));
  return priority;
}

// ---- Copies ----

absl::Status CudaDevice::CopyHostToDevice(BufferId dst, int64_t dst_offset, const void* src,
                                          int64_t bytes, StreamId stream) {
  GPUKIT_ASSIGN_OR_RETURN(const uint64_t to, Resolve(dst, dst_offset, bytes));
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, FindStream(stream));
  if (bytes == 0) return absl::OkStatus();  // an empty copy may name a null host pointer
  if (src == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("copy of ", bytes, " bytes from host null"));
  }
  GPUKIT_RETURN_IF_ERROR(Bind());
  if (IsPinnedHostRange(src, bytes)) {
    return CheckCu(cu_.cuMemcpyHtoDAsync(to, src, static_cast<size_t>(bytes), s->handle),
                   "cuMemcpyHtoDAsync");
  }
  return transfers_->HostToDevice(to, src, bytes, s->handle);
}

absl::Status CudaDevice::CopyDeviceToHost(void* dst, BufferId src, int64_t src_offset,
                                          int64_t bytes, StreamId stream) {
  GPUKIT_ASSIGN_OR_RETURN(const uint64_t from, Resolve(src, src_offset, bytes));
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, FindStream(stream));
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("copy of ", bytes, " bytes to host null"));
  }
  GPUKIT_RETURN_IF_ERROR(Bind());
  if (IsPinnedHostRange(dst, bytes)) {
    return CheckCu(cu_.cuMemcpyDtoHAsync(dst, from, static_cast<size_t>(bytes), s->handle),
                   "cuMemcpyDtoHAsync");
  }
  return transfers_->DeviceToHost(dst, from, bytes, s->handle);
}

absl::Status CudaDevice::CopyDeviceToDevice(BufferId dst, int64_t dst_offset, BufferId src,
                                            int64_t src_offset, int64_t bytes, StreamId stream) {
  GPUKIT_ASSIGN_OR_RETURN(const uint64_t to, Resolve(dst, dst_offset, bytes));
  GPUKIT_ASSIGN_OR_RETURN(const uint64_t from, Resolve(src, src_offset, bytes));
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, FindStream(stream));
  if (bytes == 0) return absl::OkStatus();
  if (dst == src && dst_offset < src_offset + bytes && src_offset < dst_offset + bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device-to-device copy within buffer ", dst.value, " between overlapping ranges [",
        src_offset, ", +", bytes, ") and [", dst_offset, ", +", bytes, ")"));
  }
  GPUKIT_RETURN_IF_ERROR(Bind());
  return CheckCu(cu_.cuMemcpyDtoDAsync(to, from, static_cast<size_t>(bytes), s->handle),
                 "cuMemcpyDtoDAsync");
}

// ---- Events ----

absl::StatusOr<EventId> CudaDevice::RecordEvent(StreamId stream) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, FindStream(stream));
  GPUKIT_RETURN_IF_ERROR(Bind());
  GPUKIT_ASSIGN_OR_RETURN(CUevent handle, event_pool_->Take());
  auto event = std::make_shared<Event>(event_pool_, handle);  // gives it back on any error
  event->stream_id = stream.value;
  {
    absl::MutexLock lock(&s->record_mu);  // cuEventRecord only enqueues: it does not wait
    GPUKIT_RETURN_IF_ERROR(CheckCu(cu_.cuEventRecord(handle, s->handle), "cuEventRecord"));
    event->seq = s->next_event_seq++;
  }
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  events_.emplace(id, std::move(event));
  return EventId{id};
}

absl::StatusOr<std::shared_ptr<CudaDevice::Event>> CudaDevice::FindEvent(EventId event) const {
  absl::MutexLock lock(&mu_);
  auto it = events_.find(event.value);
  if (it == events_.end()) {
    return absl::NotFoundError(absl::StrCat("event ", event.value, " not found"));
  }
  return it->second;
}

absl::Status CudaDevice::WaitEvent(EventId event) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Event> e, FindEvent(event));
  GPUKIT_RETURN_IF_ERROR(Bind());
  return CheckCu(cu_.cuEventSynchronize(e->handle), "cuEventSynchronize");
}

absl::StatusOr<bool> CudaDevice::QueryEvent(EventId event) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Event> e, FindEvent(event));
  GPUKIT_RETURN_IF_ERROR(Bind());
  const CUresult result = cu_.cuEventQuery(e->handle);
  if (result == CUDA_ERROR_NOT_READY) return false;
  // Any other answer means the work has finished; if it failed (a sticky error), WaitEvent
  // reports how, as the Device contract has it.
  if (result != CUDA_SUCCESS) {
    spdlog::debug("{}: cuEventQuery of event {}: {}", Describe(), event.value, CuErrorName(result));
  }
  return true;
}

absl::Status CudaDevice::DestroyEvent(EventId event) {
  std::shared_ptr<Event> doomed;  // destroyed after the lock is released
  absl::MutexLock lock(&mu_);
  auto it = events_.find(event.value);
  if (it == events_.end()) {
    return absl::NotFoundError(absl::StrCat("event ", event.value, " not found"));
  }
  doomed = std::move(it->second);
  events_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CudaDevice::EventElapsedNs(EventId start, EventId end) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Event> a, FindEvent(start));
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Event> b, FindEvent(end));
  if (a->stream_id != b->stream_id) {
    return absl::InvalidArgumentError(absl::StrCat("events ", start.value, " and ", end.value,
                                                   " were recorded on different streams"));
  }
  if (b->seq < a->seq) {
    return absl::InvalidArgumentError(
        absl::StrCat("event ", end.value, " was recorded before event ", start.value));
  }
  GPUKIT_RETURN_IF_ERROR(Bind());
  for (const auto& [e, id] : {std::pair{a.get(), start.value}, std::pair{b.get(), end.value}}) {
    const CUresult result = cu_.cuEventQuery(e->handle);
    if (result == CUDA_ERROR_NOT_READY) {
      return absl::FailedPreconditionError(absl::StrCat("event ", id, " has not completed"));
    }
    GPUKIT_RETURN_IF_ERROR(CheckCu(result, "cuEventQuery"));
  }
  float elapsed_ms = 0;
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu_.cuEventElapsedTime(&elapsed_ms, a->handle, b->handle), "cuEventElapsedTime"));
  return static_cast<int64_t>(std::llround(static_cast<double>(elapsed_ms) * 1e6));
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
  if (blas_ != nullptr && launch.op->name == "matmul") {
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
  const absl::Status status = blas_->Matmul(s.handle, route.shape, buffers);
  if (absl::IsUnimplemented(status)) {
    spdlog::debug("{}: matmul on gpukit's kernel: {}", Describe(), std::string(status.message()));
    return false;
  }
  GPUKIT_RETURN_IF_ERROR(status);
  cublaslt_matmuls_.fetch_add(1, std::memory_order_relaxed);
  return true;
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

// ---- Modules and launches ----

absl::StatusOr<ModuleId> CudaDevice::LoadModule(absl::string_view image) {
  if (image.empty()) return absl::InvalidArgumentError("module image is empty");
  // The driver reads PTX up to its NUL (a cubin carries its own size): the copy adds one.
  const std::string owned(image);
  GPUKIT_RETURN_IF_ERROR(Bind());
  char error_log[8192] = {};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {error_log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof(error_log)))};
  CUmodule handle = nullptr;
  const CUresult result = cu_.cuModuleLoadDataEx(&handle, owned.c_str(), 2, options, values);
  if (result != CUDA_SUCCESS) {
    absl::Status status = CheckCu(result, "cuModuleLoadDataEx");
    error_log[sizeof(error_log) - 1] = '\0';
    if (error_log[0] == '\0') return status;
    return absl::Status(status.code(), absl::StrCat(status.message(), ": ", error_log));
  }
  auto module = std::make_shared<Module>(cu_, context_, handle);
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  modules_.emplace(id, std::move(module));
  return ModuleId{id};
}

absl::Status CudaDevice::UnloadModule(ModuleId module) {
  // Released after the lock: the module unloads once no launch holds one of its functions.
  std::shared_ptr<Module> doomed;
  std::vector<std::shared_ptr<Function>> functions;
  absl::MutexLock lock(&mu_);
  auto it = modules_.find(module.value);
  if (it == modules_.end()) {
    return absl::NotFoundError(absl::StrCat("module ", module.value, " not found"));
  }
  doomed = std::move(it->second);
  modules_.erase(it);
  for (const auto& [name, function_id] : doomed->functions) {
    auto f = functions_.find(function_id);
    if (f == functions_.end()) continue;
    functions.push_back(std::move(f->second));
    functions_.erase(f);
  }
  return absl::OkStatus();
}

absl::StatusOr<FunctionId> CudaDevice::GetFunction(ModuleId module, absl::string_view name) {
  const std::string kernel(name);
  std::shared_ptr<Module> m;
  {
    absl::MutexLock lock(&mu_);
    auto it = modules_.find(module.value);
    if (it == modules_.end()) {
      return absl::NotFoundError(absl::StrCat("module ", module.value, " not found"));
    }
    m = it->second;
    if (auto known = m->functions.find(kernel); known != m->functions.end()) {
      return FunctionId{known->second};
    }
  }
  GPUKIT_RETURN_IF_ERROR(Bind());
  auto f = std::make_shared<Function>();
  f->module = m;
  f->name = kernel;
  const CUresult found = cu_.cuModuleGetFunction(&f->handle, m->handle, kernel.c_str());
  if (found == CUDA_ERROR_NOT_FOUND) {
    return absl::NotFoundError(
        absl::StrCat("no kernel named ", kernel, " in the module (module ", module.value, ")"));
  }
  GPUKIT_RETURN_IF_ERROR(CheckCu(found, "cuModuleGetFunction"));
  auto function_attribute = [&](CUfunction_attribute which, const char* what,
                                int* value) -> absl::Status {
    return CheckCu(cu_.cuFuncGetAttribute(value, which, f->handle),
                   absl::StrCat("cuFuncGetAttribute(", what, ")"));
  };
  GPUKIT_RETURN_IF_ERROR(function_attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                            "MAX_THREADS_PER_BLOCK", &f->max_threads_per_block));
  GPUKIT_RETURN_IF_ERROR(function_attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                                            "SHARED_SIZE_BYTES", &f->static_shared_bytes));
  int dynamic_limit = 0;
  GPUKIT_RETURN_IF_ERROR(function_attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                            "MAX_DYNAMIC_SHARED_SIZE_BYTES", &dynamic_limit));
  {
    absl::MutexLock lock(&f->mu);
    f->dynamic_shared_limit_bytes = dynamic_limit;
  }
  if (cu_.cuFuncGetParamInfo != nullptr) {
    // Parameters are counted by asking for each index until the driver says there is none.
    f->params_known = true;
    for (size_t i = 0; i < kMaxKernelParams; ++i) {
      size_t offset = 0, bytes = 0;
      const CUresult result = cu_.cuFuncGetParamInfo(f->handle, i, &offset, &bytes);
      if (result == CUDA_SUCCESS) {
        f->param_bytes.push_back(bytes);
        continue;
      }
      if (result != CUDA_ERROR_INVALID_VALUE) {
        spdlog::debug("{}: cuFuncGetParamInfo({}, {}): {}; launches of it are not checked",
                      Describe(), kernel, i, CuErrorName(result));
        f->params_known = false;
        f->param_bytes.clear();
      }
      break;
    }
  }
  absl::MutexLock lock(&mu_);
  if (!modules_.contains(module.value)) {
    return absl::NotFoundError(absl::StrCat("module ", module.value, " not found"));
  }
  if (auto known = m->functions.find(kernel); known != m->functions.end()) {
    return FunctionId{known->second};  // another thread got there first
  }
  const uint64_t id = next_id_++;
  functions_.emplace(id, std::move(f));
  m->functions.emplace(kernel, id);
  return FunctionId{id};
}

absl::StatusOr<std::shared_ptr<CudaDevice::Function>> CudaDevice::FindFunction(
    FunctionId function) const {
  absl::MutexLock lock(&mu_);
  auto it = functions_.find(function.value);
  if (it == functions_.end()) {
    return absl::NotFoundError(absl::StrCat("function ", function.value, " not found"));
  }
  return it->second;
}

absl::Status CudaDevice::Launch(FunctionId function, const LaunchConfig& config,
                                absl::Span<const KernelArg> args, StreamId stream) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Function> f, FindFunction(function));
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, FindStream(stream));

  // The launch configuration, against the device's and the kernel's limits.
  for (int i = 0; i < 3; ++i) {
    if (config.grid[i] == 0 || config.grid[i] > static_cast<uint32_t>(info_.max_grid_dim[i])) {
      return absl::InvalidArgumentError(absl::StrCat("grid.", kAxes[i], " = ", config.grid[i],
                                                     " must be in [1, ", info_.max_grid_dim[i],
                                                     "] on ", Describe()));
    }
    if (config.block[i] == 0 || config.block[i] > static_cast<uint32_t>(info_.max_block_dim[i])) {
      return absl::InvalidArgumentError(absl::StrCat("block.", kAxes[i], " = ", config.block[i],
                                                     " must be in [1, ", info_.max_block_dim[i],
                                                     "] on ", Describe()));
    }
  }
  const uint64_t threads =
      uint64_t{config.block[0]} * uint64_t{config.block[1]} * uint64_t{config.block[2]};
  if (threads > static_cast<uint64_t>(info_.max_threads_per_block)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block ", config.block[0], "x", config.block[1], "x", config.block[2], " has ", threads,
        " threads; ", Describe(), " allows ", info_.max_threads_per_block, " per block"));
  }
  if (threads > static_cast<uint64_t>(f->max_threads_per_block)) {
    return absl::InvalidArgumentError(
        absl::StrCat("block ", config.block[0], "x", config.block[1], "x", config.block[2], " has ",
                     threads, " threads; kernel ", f->name, " allows at most ",
                     f->max_threads_per_block, " per block (its register use)"));
  }
  const int64_t dynamic_shared = config.shared_memory_bytes;
  if (dynamic_shared + f->static_shared_bytes > info_.max_shared_memory_per_block_optin_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared_memory_bytes = ", dynamic_shared, " plus kernel ", f->name, "'s ",
        f->static_shared_bytes, " static bytes exceeds the ",
        info_.max_shared_memory_per_block_optin_bytes, " bytes a block may use on ", Describe()));
  }

  // Arguments: buffers become their device addresses, scalars their bytes, parameter blocks
  // stay where the caller has them; the driver reads each through the pointer in `params`
  // during cuLaunchKernel.
  if (f->params_known && args.size() != f->param_bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel ", f->name, " takes ", f->param_bytes.size(), " parameters, got ", args.size()));
  }
  std::vector<uint64_t> values(args.size(), 0);
  std::vector<void*> params(args.size(), nullptr);
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < args.size(); ++i) {
      const KernelArg& arg = args[i];
      size_t bytes = 0;
      params[i] = &values[i];
      switch (arg.kind) {
        case KernelArg::Kind::kBuffer: {
          auto it = buffers_.find(arg.buffer.value);
          if (it == buffers_.end()) {
            return absl::NotFoundError(absl::StrCat("kernel ", f->name, " argument ", i,
                                                    ": buffer ", arg.buffer.value, " not found"));
          }
          values[i] = it->second.address;
          bytes = sizeof(CUdeviceptr);
          break;
        }
        case KernelArg::Kind::kScalar:
          if (arg.size_bytes == 0 || arg.size_bytes > sizeof(arg.bytes)) {
            return absl::InvalidArgumentError(absl::StrCat("kernel ", f->name, " argument ", i,
                                                           ": scalar size_bytes = ", arg.size_bytes,
                                                           " must be in [1, 8]"));
          }
          std::memcpy(&values[i], arg.bytes, arg.size_bytes);  // little-endian, like the GPU
          bytes = arg.size_bytes;
          break;
        case KernelArg::Kind::kBlock:
          if (arg.block == nullptr || arg.size_bytes == 0) {
            return absl::InvalidArgumentError(absl::StrCat("kernel ", f->name, " argument ", i,
                                                           ": a parameter block needs data and "
                                                           "size_bytes > 0, got ",
                                                           arg.size_bytes, " bytes"));
          }
          // The driver copies the block during cuLaunchKernel; it is not written.
          params[i] = const_cast<void*>(arg.block);
          bytes = arg.size_bytes;
          break;
      }
      if (f->params_known && bytes != f->param_bytes[i]) {
        return absl::InvalidArgumentError(absl::StrCat("kernel ", f->name, " parameter ", i, " is ",
                                                       f->param_bytes[i], " bytes; argument ", i,
                                                       " has ", bytes));
      }
    }
  }

  GPUKIT_RETURN_IF_ERROR(Bind());
  if (dynamic_shared > 0) {
    // Above the kernel's current limit (48 KiB less its static shared memory, until raised)
    // the kernel must opt in first.
    absl::MutexLock lock(&f->mu);
    if (dynamic_shared > f->dynamic_shared_limit_bytes) {
      GPUKIT_RETURN_IF_ERROR(
          CheckCu(cu_.cuFuncSetAttribute(f->handle, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         static_cast<int>(dynamic_shared)),
                  "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)"));
      f->dynamic_shared_limit_bytes = static_cast<int>(dynamic_shared);
    }
  }
  return CheckCu(
      cu_.cuLaunchKernel(f->handle, config.grid[0], config.grid[1], config.grid[2], config.block[0],
                         config.block[1], config.block[2], config.shared_memory_bytes, s->handle,
                         params.empty() ? nullptr : params.data(), nullptr),
      absl::StrCat("cuLaunchKernel(", f->name, ")"));
}

}  // namespace gpukit
