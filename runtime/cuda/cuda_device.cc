// CudaDevice: creation (the context, the pools, the built-in ops), streams, copies, events,
// modules and launches. Buffers and memory are in cuda_device_memory.cc, built-in ops and
// cuBLASLt in cuda_device_ops.cc; the nested types they share in cuda_device_internal.h.
#include "runtime/cuda/cuda_device.h"

#include <cuda.h>  // types and constants only; calls go through CudaDriver

#include <cmath>
#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda_device_internal.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/transfer_engine.h"
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

const char* const kAxes[3] = {"x", "y", "z"};

}  // namespace

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
    absl::MutexLock events_lock(&events_mu_);
    events.swap(events_);
  }
  {
    absl::MutexLock lock(&mu_);
    functions.swap(functions_);
    modules.swap(modules_);
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
  {
    absl::MutexLock lock(&green_mu_);
    for (auto& [sms, green] : green_contexts_) {
      LogQuietlyIfFailed(cu_.cuGreenCtxDestroy(green.green), "cuGreenCtxDestroy");
    }
    green_contexts_.clear();
    for (auto& [groups, green] : placed_contexts_) {
      LogQuietlyIfFailed(cu_.cuGreenCtxDestroy(green.green), "cuGreenCtxDestroy");
    }
    placed_contexts_.clear();
  }
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

// ---- Streams ----

absl::StatusOr<StreamId> CudaDevice::CreateStream(const StreamOptions& options) {
  GPUKIT_RETURN_IF_ERROR(ValidateStreamOptions(options));
  const StreamPriority priority = options.priority;
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
  int sm_count = 0;
  if (options.sm_first.has_value() || options.sm_share < 1) {
    GPUKIT_ASSIGN_OR_RETURN(const GreenContext* green,
                            options.sm_first.has_value()
                                ? PlacedGreenContext(*options.sm_first, options.sm_share)
                                : GreenContextFor(options.sm_share));
    if (green != nullptr) {
      GPUKIT_RETURN_IF_ERROR(
          CheckCu(cu_.cuGreenCtxStreamCreate(&handle, green->green, CU_STREAM_NON_BLOCKING, value),
                  "cuGreenCtxStreamCreate"));
      sm_count = green->sm_count;
    }
  }
  if (handle == nullptr) {
    GPUKIT_RETURN_IF_ERROR(
        CheckCu(cu_.cuStreamCreateWithPriority(&handle, CU_STREAM_NON_BLOCKING, value),
                "cuStreamCreateWithPriority"));
  }
  // A green context's stream is destroyed like any other (with the primary context current,
  // which green contexts are made from).
  auto stream = std::make_shared<Stream>(cu_, context_, handle);
  stream->sm_count = sm_count;
  stream->matmul_slice_seconds = matmul_slice_seconds_[static_cast<int>(priority)];
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  streams_.emplace(id, std::move(stream));
  return StreamId{id};
}

bool CudaDevice::GreenAvailableLocked() {
  if (!green_available_.has_value()) {
    green_available_ =
        cu_.cuDeviceGetDevResource != nullptr && cu_.cuDevSmResourceSplitByCount != nullptr &&
        cu_.cuDevResourceGenerateDesc != nullptr && cu_.cuGreenCtxCreate != nullptr &&
        cu_.cuGreenCtxDestroy != nullptr && cu_.cuGreenCtxGetDevResource != nullptr &&
        cu_.cuGreenCtxStreamCreate != nullptr;
    if (*green_available_) {
      sm_resource_ = std::make_unique<CUdevResource>();
      absl::Status got =
          CheckCu(cu_.cuDeviceGetDevResource(device_, sm_resource_.get(), CU_DEV_RESOURCE_TYPE_SM),
                  "cuDeviceGetDevResource");
      if (!got.ok()) {
        spdlog::warn(
            "{}: no green contexts ({}): streams asking for part of the SMs get all of "
            "them",
            Describe(), std::string(got.message()));
        green_available_ = false;
      }
    } else {
      spdlog::warn(
          "{}: the driver ({}) has no green contexts (CUDA 12.5 or newer): streams "
          "asking for part of the SMs get all of them",
          Describe(), cu_.driver_version);
    }
  }
  return *green_available_;
}

absl::StatusOr<CudaDevice::GreenContext> CudaDevice::CreateGreenContext(CUdevResourceDesc desc,
                                                                        int expected_sms) {
  GreenContext green;
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu_.cuGreenCtxCreate(&green.green, desc, device_, CU_GREEN_CTX_DEFAULT_STREAM),
              "cuGreenCtxCreate"));
  CUdevResource own = {};
  if (cu_.cuGreenCtxGetDevResource(green.green, &own, CU_DEV_RESOURCE_TYPE_SM) == CUDA_SUCCESS) {
    green.sm_count = static_cast<int>(own.sm.smCount);
  } else {
    green.sm_count = expected_sms;
  }
  return green;
}

absl::StatusOr<const CudaDevice::GreenContext*> CudaDevice::GreenContextFor(double sm_share) {
  absl::MutexLock lock(&green_mu_);
  if (!GreenAvailableLocked()) return nullptr;
  const CUdevResource& device_sms = *sm_resource_;
  const int total = static_cast<int>(device_sms.sm.smCount);
  const int align = std::max(1, static_cast<int>(device_sms.sm.smCoscheduledAlignment));
  const int minimum = std::max(align, static_cast<int>(device_sms.sm.minSmPartitionSize));
  int sms = static_cast<int>(sm_share * total) / align * align;
  sms = std::max(sms, (minimum + align - 1) / align * align);
  if (sms >= total) return nullptr;  // every SM: a plain stream
  if (auto it = green_contexts_.find(sms); it != green_contexts_.end()) return &it->second;

  CUdevResource group = {};
  CUdevResource rest = {};
  unsigned int groups = 1;
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu_.cuDevSmResourceSplitByCount(&group, &groups, sm_resource_.get(), &rest, 0, sms),
              absl::StrCat("cuDevSmResourceSplitByCount(", sms, " of ", total, " SMs)")));
  if (groups != 1) {
    return absl::InternalError(absl::StrCat("cuDevSmResourceSplitByCount gave ", groups,
                                            " groups of ", sms, " SMs, not one"));
  }
  CUdevResourceDesc desc = nullptr;  // the driver has no call to free it: one per SM count
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu_.cuDevResourceGenerateDesc(&desc, &group, 1), "cuDevResourceGenerateDesc"));
  GPUKIT_ASSIGN_OR_RETURN(GreenContext green, CreateGreenContext(desc, sms));
  spdlog::info("{}: green context of {} of its {} SMs (asked for {:.2f} of them)", Describe(),
               green.sm_count, total, sm_share);
  // Made current again: the calls above may leave the green context current on this thread.
  GPUKIT_RETURN_IF_ERROR(Bind());
  return &green_contexts_.emplace(sms, green).first->second;
}

absl::StatusOr<const CudaDevice::GreenContext*> CudaDevice::PlacedGreenContext(double first,
                                                                               double share) {
  absl::MutexLock lock(&green_mu_);
  if (!GreenAvailableLocked()) return nullptr;
  const int total = static_cast<int>(sm_resource_->sm.smCount);
  if (group_layout_.groups == 0) {
    // One split for every placement: green contexts may combine groups of one split only.
    const int group_sms = GroupSmsFor(static_cast<int>(sm_resource_->sm.minSmPartitionSize),
                                      static_cast<int>(sm_resource_->sm.smCoscheduledAlignment));
    unsigned int count = 0;
    GPUKIT_RETURN_IF_ERROR(CheckCu(
        cu_.cuDevSmResourceSplitByCount(nullptr, &count, sm_resource_.get(), nullptr, 0, group_sms),
        absl::StrCat("cuDevSmResourceSplitByCount(groups of ", group_sms, " of ", total,
                     " SMs, counting)")));
    if (count == 0) {
      return absl::InternalError(absl::StrCat("cuDevSmResourceSplitByCount makes no group of ",
                                              group_sms, " of ", total, " SMs"));
    }
    // The split's remainder lands after the groups, so that a range reaching it is one span.
    const unsigned int counted = count;
    auto groups = std::make_unique<CUdevResource[]>(count + 1);
    CUdevResource& rest = groups[count];
    GPUKIT_RETURN_IF_ERROR(CheckCu(
        cu_.cuDevSmResourceSplitByCount(groups.get(), &count, sm_resource_.get(), &rest, 0,
                                        group_sms),
        absl::StrCat("cuDevSmResourceSplitByCount(groups of ", group_sms, " of ", total, " SMs)")));
    SmLayout layout{.sm_count = total,
                    .group_sms = static_cast<int>(groups[0].sm.smCount),
                    .groups = static_cast<int>(count)};
    // The remainder is the last group, of its own size, where the driver combines it with the
    // groups: tried once on the last group and it, the combination a range reaching it needs.
    const int rest_sms = static_cast<int>(rest.sm.smCount);
    std::string rest_unused;  // why not, where not
    if (rest_sms > 0 && count != counted) {
      rest_unused = absl::StrCat("the split made ", count, " groups, not the ", counted,
                                 " it counted, so the remainder does not follow them");
    } else if (rest_sms > 0 &&
               rest.sm.smCoscheduledAlignment != groups[0].sm.smCoscheduledAlignment) {
      rest_unused = absl::StrCat("its co-scheduling alignment ", rest.sm.smCoscheduledAlignment,
                                 " is not the groups' ", groups[0].sm.smCoscheduledAlignment);
    } else if (rest_sms > 0) {
      // A driver that will not combine them answers CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
      // any error leaves the layout as it was without the remainder, rather than failing
      // every placed stream.
      CUdevResourceDesc probe = nullptr;  // the driver has no call to free it: one per device
      const absl::Status combined =
          CheckCu(cu_.cuDevResourceGenerateDesc(&probe, &groups[count - 1], 2),
                  "cuDevResourceGenerateDesc(the last group and the remainder)");
      if (combined.ok()) {
        layout.rest_sms = rest_sms;
      } else {
        rest_unused = std::string(combined.message());
      }
    }
    GPUKIT_RETURN_IF_ERROR(CheckSmLayout(layout));
    sm_groups_ = std::move(groups);
    group_layout_ = layout;
    spdlog::info(
        "{}: SMs split for placed streams into {} groups of {} and a last group of {} "
        "(of {} SMs)",
        Describe(), layout.equal_groups(), layout.group_sms, layout.rest_sms, total);
    if (!rest_unused.empty()) {
      spdlog::info("{}: the split's remaining {} SMs run only unplaced streams: {}", Describe(),
                   rest_sms, rest_unused);
    }
  }
  GPUKIT_ASSIGN_OR_RETURN(SmGroupRange range, PlaceSmGroups(group_layout_, first, share));
  if (range.first == 0 && range.count >= group_layout_.group_count()) return nullptr;  // all
  const std::pair<int, int> key(range.first, range.count);
  if (auto it = placed_contexts_.find(key); it != placed_contexts_.end()) return &it->second;

  CUdevResourceDesc desc = nullptr;  // the driver has no call to free it: one per range
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu_.cuDevResourceGenerateDesc(&desc, &sm_groups_[range.first], range.count),
              absl::StrCat("cuDevResourceGenerateDesc(groups ", range.first, "..",
                           range.first + range.count - 1, ")")));
  GPUKIT_ASSIGN_OR_RETURN(GreenContext green,
                          CreateGreenContext(desc, PlacedSmCount(group_layout_, range)));
  spdlog::info("{}: green context of SM groups {}..{} ({} SMs; asked for [{:.3f}, {:.3f}))",
               Describe(), range.first, range.first + range.count - 1, green.sm_count, first,
               first + share);
  // Made current again: the calls above may leave the green context current on this thread.
  GPUKIT_RETURN_IF_ERROR(Bind());
  return &placed_contexts_.emplace(key, green).first->second;
}

absl::StatusOr<int> CudaDevice::StreamSmCount(StreamId stream) const {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, FindStream(stream));
  return s->sm_count > 0 ? s->sm_count : info_.multiprocessor_count;
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

absl::Status CudaDevice::FillZero(BufferId buffer, int64_t offset, int64_t bytes, StreamId stream) {
  GPUKIT_ASSIGN_OR_RETURN(const uint64_t to, Resolve(buffer, offset, bytes));
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, FindStream(stream));
  if (bytes == 0) return absl::OkStatus();
  GPUKIT_RETURN_IF_ERROR(Bind());
  return CheckCu(cu_.cuMemsetD8Async(to, 0, static_cast<size_t>(bytes), s->handle),
                 "cuMemsetD8Async");
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

namespace {
// cuEventElapsedTime's milliseconds as whole nanoseconds.
int64_t NanosecondsFromMs(float elapsed_ms) {
  return static_cast<int64_t>(std::llround(static_cast<double>(elapsed_ms) * 1e6));
}
}  // namespace

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
  const uint64_t id = next_id_++;
  absl::MutexLock lock(&events_mu_);
  events_.emplace(id, std::move(event));
  return EventId{id};
}

absl::StatusOr<std::shared_ptr<CudaDevice::Event>> CudaDevice::FindEvent(EventId event) const {
  absl::MutexLock lock(&events_mu_);
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
  absl::MutexLock lock(&events_mu_);
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
  return NanosecondsFromMs(elapsed_ms);
}

absl::StatusOr<int64_t> CudaDevice::ElapsedNsIfCompleted(EventId start, EventId end) {
  std::shared_ptr<Event> a, b;
  {
    absl::MutexLock lock(&events_mu_);
    if (auto it = events_.find(start.value); it != events_.end()) a = it->second;
    if (auto it = events_.find(end.value); it != events_.end()) b = it->second;
  }
  if (a != nullptr && b != nullptr && a->stream_id == b->stream_id && b->seq >= a->seq &&
      Bind().ok()) {
    float elapsed_ms = 0;
    if (cu_.cuEventElapsedTime(&elapsed_ms, a->handle, b->handle) == CUDA_SUCCESS) {
      return NanosecondsFromMs(elapsed_ms);
    }
  }
  return Device::ElapsedNsIfCompleted(start, end);
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
  const CUresult launched =
      cu_.cuLaunchKernel(f->handle, config.grid[0], config.grid[1], config.grid[2], config.block[0],
                         config.block[1], config.block[2], config.shared_memory_bytes, s->handle,
                         params.empty() ? nullptr : params.data(), nullptr);
  // The kernel's name goes into the message only on failure: a launch is on every op's path.
  if (launched == CUDA_SUCCESS) return absl::OkStatus();
  return CheckCu(launched, absl::StrCat("cuLaunchKernel(", f->name, ")"));
}

}  // namespace gpukit
