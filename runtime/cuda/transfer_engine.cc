#include "runtime/cuda/transfer_engine.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "spdlog/spdlog.h"

namespace gpukit {

TransferEngine::TransferEngine(const CudaDriver& cu, CUcontext context,
                               const TransferEngineOptions& options)
    : cu_(cu), context_(context), options_(options), copier_(options.copy_threads - 1) {}

TransferEngine::~TransferEngine() {
  absl::MutexLock lock(&mu_);
  if (slots_.empty()) return;
  if (cu_.cuCtxSetCurrent(context_) != CUDA_SUCCESS) return;
  for (Slot& slot : slots_) {
    if (slot.busy) cu_.cuEventSynchronize(slot.done);
    if (slot.done != nullptr) cu_.cuEventDestroy(slot.done);
    if (slot.pinned != nullptr) cu_.cuMemFreeHost(slot.pinned);
  }
}

absl::Status TransferEngine::EnsureSlotsLocked() {
  if (!slots_.empty()) return absl::OkStatus();
  std::vector<Slot> slots(options_.staging_buffers);
  absl::Status status;
  for (Slot& slot : slots) {
    status = CheckCu(cu_.cuMemHostAlloc(&slot.pinned, options_.chunk_bytes, 0), "cuMemHostAlloc");
    if (status.ok()) status = CheckCu(cu_.cuEventCreate(&slot.done, CU_EVENT_DISABLE_TIMING),
                                      "cuEventCreate");
    if (!status.ok()) break;
  }
  if (!status.ok()) {
    for (Slot& slot : slots) {
      if (slot.done != nullptr) cu_.cuEventDestroy(slot.done);
      if (slot.pinned != nullptr) cu_.cuMemFreeHost(slot.pinned);
    }
    return status;
  }
  slots_ = std::move(slots);
  spdlog::debug("transfer engine: {} pinned staging buffers of {} bytes", slots_.size(),
                options_.chunk_bytes);
  return absl::OkStatus();
}

absl::Status TransferEngine::WaitSlot(Slot& slot) {
  if (!slot.busy) return absl::OkStatus();
  slot.busy = false;
  return CheckCu(cu_.cuEventSynchronize(slot.done), "cuEventSynchronize");
}

void TransferEngine::ParallelCopy(void* dst, const void* src, int64_t bytes) {
  // Pieces of 256 KiB taken as the threads go: a 32 MiB chunk is 128 of them across
  // copy_threads threads, and a chunk below two pieces stays on the calling thread.
  ParallelCopyOptions options;
  options.min_piece_bytes = int64_t{256} << 10;
  options.max_threads = options_.copy_threads;
  copier_.Copy(dst, src, bytes, options);
}

absl::Status TransferEngine::HostToDevice(CUdeviceptr dst, const void* src, int64_t bytes,
                                          CUstream stream) {
  if (bytes < options_.min_bytes) {
    return CheckCu(cu_.cuMemcpyHtoDAsync(dst, src, bytes, stream), "cuMemcpyHtoDAsync");
  }
  absl::MutexLock lock(&mu_);
  GPUKIT_RETURN_IF_ERROR(EnsureSlotsLocked());
  const auto* from = static_cast<const char*>(src);
  size_t next = 0;
  for (int64_t offset = 0; offset < bytes; offset += options_.chunk_bytes) {
    Slot& slot = slots_[next];
    next = (next + 1) % slots_.size();
    GPUKIT_RETURN_IF_ERROR(WaitSlot(slot));  // its previous DMA has read it
    const int64_t length = std::min(options_.chunk_bytes, bytes - offset);
    ParallelCopy(slot.pinned, from + offset, length);
    GPUKIT_RETURN_IF_ERROR(CheckCu(cu_.cuMemcpyHtoDAsync(dst + offset, slot.pinned, length, stream),
                                   "cuMemcpyHtoDAsync"));
    GPUKIT_RETURN_IF_ERROR(CheckCu(cu_.cuEventRecord(slot.done, stream), "cuEventRecord"));
    slot.busy = true;
  }
  return absl::OkStatus();
}

absl::Status TransferEngine::DeviceToHost(void* dst, CUdeviceptr src, int64_t bytes,
                                          CUstream stream) {
  if (bytes < options_.min_bytes) {
    return CheckCu(cu_.cuMemcpyDtoHAsync(dst, src, bytes, stream), "cuMemcpyDtoHAsync");
  }
  absl::MutexLock lock(&mu_);
  GPUKIT_RETURN_IF_ERROR(EnsureSlotsLocked());
  for (Slot& slot : slots_) GPUKIT_RETURN_IF_ERROR(WaitSlot(slot));  // uploads' staging
  auto* to = static_cast<char*>(dst);
  const size_t n = slots_.size();
  std::vector<std::pair<int64_t, int64_t>> landing(n, {0, 0});  // (offset, length) per slot
  // Copies the oldest chunk in flight out of its slot.
  auto drain = [&](size_t s) -> absl::Status {
    if (!slots_[s].busy) return absl::OkStatus();
    GPUKIT_RETURN_IF_ERROR(WaitSlot(slots_[s]));
    ParallelCopy(to + landing[s].first, slots_[s].pinned, landing[s].second);
    return absl::OkStatus();
  };
  size_t next = 0;
  for (int64_t offset = 0; offset < bytes; offset += options_.chunk_bytes) {
    GPUKIT_RETURN_IF_ERROR(drain(next));
    const int64_t length = std::min(options_.chunk_bytes, bytes - offset);
    Slot& slot = slots_[next];
    GPUKIT_RETURN_IF_ERROR(CheckCu(cu_.cuMemcpyDtoHAsync(slot.pinned, src + offset, length, stream),
                                   "cuMemcpyDtoHAsync"));
    GPUKIT_RETURN_IF_ERROR(CheckCu(cu_.cuEventRecord(slot.done, stream), "cuEventRecord"));
    slot.busy = true;
    landing[next] = {offset, length};
    next = (next + 1) % n;
  }
  for (size_t i = 0; i < n; ++i) GPUKIT_RETURN_IF_ERROR(drain((next + i) % n));
  return absl::OkStatus();
}

}  // namespace gpukit
