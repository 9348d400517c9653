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
    : cu_(cu), context_(context), options_(options) {
  for (int k = 0; k < options_.copy_threads - 1; ++k) {
    workers_.emplace_back([this, k] {
      uint64_t seen = 0;
      while (true) {
        std::function<void()> job;
        {
          absl::MutexLock lock(&work_mu_);
          auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_) {
            return stop_ || generation_ != seen;
          };
          work_mu_.Await(absl::Condition(&ready));
          if (stop_) return;
          seen = generation_;
          job = parts_[k];
        }
        if (job) job();
        absl::MutexLock lock(&work_mu_);
        --pending_;
      }
    });
  }
}

TransferEngine::~TransferEngine() {
  {
    absl::MutexLock lock(&work_mu_);
    stop_ = true;
  }
  for (std::thread& worker : workers_) worker.join();
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
  const int64_t ways = static_cast<int64_t>(workers_.size()) + 1;
  // Parts of whole cache lines; small copies stay on the calling thread.
  const int64_t part = bytes < (int64_t{256} << 10)
                           ? bytes
                           : ((bytes + ways - 1) / ways + 63) / 64 * 64;
  auto* to = static_cast<char*>(dst);
  const auto* from = static_cast<const char*>(src);
  int helpers = 0;
  if (part < bytes) {
    absl::MutexLock lock(&work_mu_);
    parts_.assign(workers_.size(), nullptr);
    for (size_t k = 0; k < workers_.size(); ++k) {
      const int64_t offset = static_cast<int64_t>(k + 1) * part;
      if (offset >= bytes) continue;
      const int64_t length = std::min(part, bytes - offset);
      parts_[k] = [to, from, offset, length] { std::memcpy(to + offset, from + offset, length); };
    }
    helpers = static_cast<int>(workers_.size());
    pending_ = helpers;
    ++generation_;
  }
  std::memcpy(to, from, std::min(part, bytes));
  if (helpers == 0) return;
  absl::MutexLock lock(&work_mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_) { return pending_ == 0; };
  work_mu_.Await(absl::Condition(&done));
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
    GPUKIT_RETURN_IF_ERROR(
        CheckCu(cu_.cuMemcpyHtoDAsync(dst + offset, slot.pinned, length, stream),
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
