#include "daemon/session/device_array.h"

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "spdlog/spdlog.h"

namespace gpukit {

DeviceArray::DeviceArray(std::string handle, Device& device, BufferId buffer, TensorDesc desc,
                         int64_t bytes, MemoryReservation reservation, absl::Time now)
    : handle_(std::move(handle)),
      device_(device),
      desc_(std::move(desc)),
      bytes_(bytes),
      buffer_(buffer),
      reservation_(std::move(reservation)),
      last_used_(now) {}

// No lock: the last owner is the only thread that can reach the array. Taking the lock here
// would order it after whatever lock the owner holds when it drops the array (the session
// manager's, when a session closes), against restores, which hold it while they reclaim.
DeviceArray::~DeviceArray() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (spilled_) return;
  absl::Status status = device_.Free(buffer_);
  if (!status.ok()) {
    // Cannot happen unless the device lost the buffer; keep serving, but say so.
    spdlog::error("freeing array {}: {}", handle_, std::string(status.message()));
  }
}

absl::StatusOr<ArrayPin> DeviceArray::Pin(absl::Time now, const Restorer& restore,
                                          StreamId stream) {
  absl::MutexLock lock(&mu_);
  if (spilled_) {
    GPUKIT_ASSIGN_OR_RETURN(DeviceAllocation memory, restore(bytes_));
    absl::Status copied =
        bytes_ == 0 ? absl::OkStatus()
                    : device_.CopyHostToDevice(memory.buffer, 0, host_copy_.data(), bytes_, stream);
    if (copied.ok()) copied = SynchronizeStream(device_, stream);
    if (!copied.ok()) {
      device_.Free(memory.buffer).IgnoreError();
      return absl::Status(
          copied.code(), absl::StrCat("restoring spilled array ", handle_, ": ", copied.message()));
    }
    buffer_ = memory.buffer;
    reservation_ = std::move(memory.reservation);
    host_copy_ = HostBuffer();
    spilled_ = false;
    spdlog::debug("array restored: array={} bytes={}", handle_, bytes_);
  }
  ++pins_;
  last_used_ = std::max(last_used_, now);
  return ArrayPin(shared_from_this(), buffer_);
}

absl::StatusOr<int64_t> DeviceArray::Spill(StreamId stream) {
  if (!mu_.TryLock()) return 0;  // busy: being pinned or restored, so not a victim now
  struct Unlock {
    absl::Mutex* mu;
    ~Unlock() { mu->Unlock(); }
  } unlock{&mu_};
  if (spilled_ || pins_ > 0 || shared_) return 0;
  GPUKIT_ASSIGN_OR_RETURN(HostBuffer copy, device_.AllocateHostBuffer(bytes_));
  if (bytes_ > 0) {
    GPUKIT_RETURN_IF_ERROR(device_.CopyDeviceToHost(copy.data(), buffer_, 0, bytes_, stream));
    GPUKIT_RETURN_IF_ERROR(SynchronizeStream(device_, stream));
  }
  GPUKIT_RETURN_IF_ERROR(device_.Free(buffer_));
  host_copy_ = std::move(copy);
  buffer_ = BufferId{};
  reservation_.Release();
  spilled_ = true;
  spdlog::debug("array spilled: array={} bytes={}", handle_, bytes_);
  return bytes_;
}

void DeviceArray::Unpin() {
  absl::MutexLock lock(&mu_);
  --pins_;
}

bool DeviceArray::spilled() const {
  absl::MutexLock lock(&mu_);
  return spilled_;
}

void DeviceArray::MarkShared(bool until_session_end) {
  absl::MutexLock lock(&mu_);
  shared_ = true;
  kept_until_session_end_ = kept_until_session_end_ || until_session_end;
}

bool DeviceArray::kept_until_session_end() const {
  absl::MutexLock lock(&mu_);
  return kept_until_session_end_;
}

bool DeviceArray::pinned() const {
  absl::MutexLock lock(&mu_);
  return pins_ > 0;
}

std::optional<absl::Time> DeviceArray::SpillableLastUsed() const {
  if (!mu_.TryLock()) return std::nullopt;
  std::optional<absl::Time> since;
  if (!spilled_ && pins_ == 0 && !shared_ && bytes_ > 0) since = last_used_;
  mu_.Unlock();
  return since;
}

absl::Time DeviceArray::last_used() const {
  absl::MutexLock lock(&mu_);
  return last_used_;
}

ArrayPin& ArrayPin::operator=(ArrayPin&& other) noexcept {
  if (this != &other) {
    Reset();
    array_ = std::move(other.array_);
    buffer_ = other.buffer_;
  }
  return *this;
}

void ArrayPin::Reset() {
  if (array_ != nullptr) array_->Unpin();
  array_.reset();
}

}  // namespace gpukit
