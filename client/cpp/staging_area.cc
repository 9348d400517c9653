#include "client/cpp/staging_area.h"

#include <algorithm>
#include <bit>

#include "runtime/base/parallel_copy.h"
#include "spdlog/spdlog.h"
#include <sys/mman.h>

namespace gpukit::internal {

HostMapping& HostMapping::operator=(HostMapping&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

char* HostMapping::release() {
  bytes_ = 0;
  return std::exchange(data_, nullptr);
}

void HostMapping::Reset() {
  if (data_ != nullptr) ::munmap(data_, static_cast<size_t>(bytes_));
  data_ = nullptr;
  bytes_ = 0;
}

int64_t StagingRegionBytes(int64_t current_bytes, int64_t transfer_bytes,
                           int64_t max_region_bytes) {
  const int64_t needed = std::min(transfer_bytes, max_region_bytes);
  if (current_bytes >= needed) return current_bytes;
  const auto rounded = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(needed)));
  return std::min(rounded, max_region_bytes);
}

namespace {

// The codes with which registering says that this client cannot share memory with the
// daemon at all, as opposed to a failure of this one attempt.
bool MeansNoDescriptorChannel(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable ||         // channel unreachable
         status.code() == absl::StatusCode::kFailedPrecondition ||  // daemon has none
         status.code() == absl::StatusCode::kUnimplemented;         // daemon predates it
}

}  // namespace

absl::Status StagingArea::EnsureRegion(int64_t bytes) {
  const int64_t wanted =
      StagingRegionBytes(region_.mapping.bytes(), bytes, options_.max_region_bytes);
  if (wanted == region_.mapping.bytes()) return absl::OkStatus();
  if (!region_.handle.empty()) {
    // Unregistered before the larger one is registered, so both never hold memory at once.
    absl::Status unregistered = calls_.UnregisterRegion(region_.handle);
    if (!unregistered.ok()) return unregistered;
    region_ = RegisteredRegion();
  }
  absl::StatusOr<RegisteredRegion> registered = calls_.RegisterRegion(wanted);
  // The power of two above the transfer can exceed a daemon's limits.maxArraySize, which the
  // array's own size does not: ask for just that.
  const int64_t exact = std::min(bytes, options_.max_region_bytes);
  if (!registered.ok() && registered.status().code() == absl::StatusCode::kInvalidArgument &&
      wanted > exact) {
    registered = calls_.RegisterRegion(exact);
  }
  if (!registered.ok()) {
    if (!MeansNoDescriptorChannel(registered.status())) return registered.status();
    spdlog::debug("no host shared memory with gpukitd, transfers go in gRPC messages: {}",
                  registered.status().ToString());
    unavailable_ = true;
    return absl::OkStatus();
  }
  region_ = *std::move(registered);
  return absl::OkStatus();
}

std::optional<absl::Status> StagingArea::Transfer(bool to_array, const std::string& array,
                                                  char* host, int64_t bytes) {
  if (!options_.enabled || bytes <= 0 || bytes < options_.min_bytes) return std::nullopt;
  absl::MutexLock lock(&mu_);
  if (unavailable_ || released_) return std::nullopt;
  if (absl::Status status = EnsureRegion(bytes); !status.ok()) return status;
  if (unavailable_) return std::nullopt;
  char* const staging = region_.mapping.data();
  const int64_t piece_limit = region_.mapping.bytes();
  for (int64_t offset = 0; offset < bytes; offset += piece_limit) {
    const int64_t piece = std::min(piece_limit, bytes - offset);
    if (to_array) ParallelCopy(staging, host + offset, piece);
    absl::Status status = calls_.CopyRegion(to_array, array, offset, region_.handle, 0, piece);
    if (!status.ok()) return status;
    if (!to_array) ParallelCopy(host + offset, staging, piece);
  }
  return absl::OkStatus();
}

std::optional<absl::Status> StagingArea::Write(const std::string& array, const char* data,
                                               int64_t bytes) {
  // Transfer only reads `host` when writing to the array.
  return Transfer(/*to_array=*/true, array, const_cast<char*>(data), bytes);
}

std::optional<absl::Status> StagingArea::Read(const std::string& array, char* out, int64_t bytes) {
  return Transfer(/*to_array=*/false, array, out, bytes);
}

void StagingArea::Release() {
  absl::MutexLock lock(&mu_);
  released_ = true;
  region_ = RegisteredRegion();
}

}  // namespace gpukit::internal
