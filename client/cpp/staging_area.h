// StagingArea: host shared memory that a session keeps for Array::Write and Array::Read of
// plain bytes, so that large transfers to a daemon on the same host are memcpys instead of
// bytes in gRPC messages.
//
// A transfer of at least options.min_bytes copies the caller's bytes into the staging
// region and has gpukitd copy them from there into the array (CopyFromHostMemory), or the
// other way (CopyToHostMemory, then a copy out). The region is registered on first use and
// re-registered larger when a transfer needs more, up to options.max_region_bytes; larger
// transfers go in region-sized pieces at increasing array offsets. One transfer uses the
// region at a time: concurrent transfers of a session wait for each other (gpukitd runs a
// session's copies one after another on its stream anyway).
//
// A transfer the area does not take returns std::nullopt, and the caller sends the bytes in
// gRPC messages instead: a smaller one, any while the area is disabled, and every one after
// registering a region failed with UNAVAILABLE, FAILED_PRECONDITION or UNIMPLEMENTED (no
// descriptor channel: a daemon on another host, one listening on TCP only, one too old).
// That failure is remembered for the life of the area and logged at debug level only. Any
// other error of a transfer it takes is returned as is; an array may then hold part of the
// new bytes, as after a failed Upload.
//
//   StagingArea staging(calls, {.enabled = over_unix_socket});
//   if (std::optional<absl::Status> done = staging.Write(handle, data, bytes)) return *done;
//   ... send the bytes in gRPC messages ...
//
// Neither the area nor anything it holds refers back to the session (no HostMemory, whose
// shared_ptr to the session would make a cycle): it keeps the region's handle and its
// mapping, and Release() unmaps them when the session closes.
//
// Thread safety: thread-safe.
#ifndef GPUKIT_CLIENT_CPP_STAGING_AREA_H_
#define GPUKIT_CLIENT_CPP_STAGING_AREA_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace gpukit::internal {

// Transfers from this size up go through the staging region. Measured (docs/benchmarks.md,
// "Plain transfers through the staging region"), a copy through host memory was within 1.5x
// of gRPC messages below 64 KiB (0.98x to 1.48x), 1.35x to 3.3x ahead at 64 and 128 KiB, and
// about 2x or more ahead both ways from 256 KiB (2.2x to 6.2x there), on a 2-core VM and a
// 16-core host. Below 256 KiB the tens of microseconds saved do not pay for a region per
// session and for concurrent transfers waiting for each other at the one region.
inline constexpr int64_t kStagingMinBytes = int64_t{256} << 10;
// The staging region never grows past this: larger transfers go in pieces of this size.
inline constexpr int64_t kStagingMaxRegionBytes = int64_t{256} << 20;

// A shared mapping of this process (mmap of a memfd), unmapped when destroyed.
class HostMapping {
 public:
  HostMapping() = default;
  HostMapping(char* data, int64_t bytes) : data_(data), bytes_(bytes) {}
  HostMapping(HostMapping&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  HostMapping& operator=(HostMapping&& other) noexcept;
  HostMapping(const HostMapping&) = delete;
  HostMapping& operator=(const HostMapping&) = delete;
  ~HostMapping() { Reset(); }

  char* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  // Gives up ownership: the caller unmaps.
  char* release();
  void Reset();

 private:
  char* data_ = nullptr;
  int64_t bytes_ = 0;
};

// Host shared memory registered with gpukitd, in raw parts: the daemon's handle ("m-...")
// and this process's mapping.
struct RegisteredRegion {
  std::string handle;
  HostMapping mapping;
};

// The daemon calls a StagingArea makes. The session implements them over gRPC; unit tests
// pass a fake.
class HostMemoryCalls {
 public:
  virtual ~HostMemoryCalls() = default;
  // A region of `bytes`: shared memory mapped here, registered, its descriptor delivered.
  // On failure nothing stays registered or mapped.
  virtual absl::StatusOr<RegisteredRegion> RegisterRegion(int64_t bytes) = 0;
  virtual absl::Status UnregisterRegion(const std::string& region) = 0;
  // CopyFromHostMemory (to_array) or CopyToHostMemory.
  virtual absl::Status CopyRegion(bool to_array, const std::string& array, int64_t array_offset,
                                  const std::string& region, int64_t region_offset,
                                  int64_t bytes) = 0;
};

struct StagingOptions {
  // False: every transfer returns std::nullopt.
  bool enabled = true;
  // The smallest transfer that uses the region.
  int64_t min_bytes = kStagingMinBytes;
  // The largest region; larger transfers go in pieces.
  int64_t max_region_bytes = kStagingMaxRegionBytes;
};

// The size of region a transfer of `transfer_bytes` needs when the region has
// `current_bytes` now (0: none): the current size when it holds the transfer or is at the
// cap already, else the transfer's size rounded up to a power of two, at most
// `max_region_bytes`. Rounding up bounds how often a session re-registers (at most once
// per power of two up to the cap).
int64_t StagingRegionBytes(int64_t current_bytes, int64_t transfer_bytes, int64_t max_region_bytes);

class StagingArea {
 public:
  // `calls` must outlive the area.
  StagingArea(HostMemoryCalls& calls, const StagingOptions& options)
      : calls_(calls), options_(options) {}
  StagingArea(const StagingArea&) = delete;
  StagingArea& operator=(const StagingArea&) = delete;

  // Writes `bytes` of `data` into array `array` from offset 0, or reads them into `out`.
  // std::nullopt: the area does not take this transfer (see above).
  std::optional<absl::Status> Write(const std::string& array, const char* data, int64_t bytes);
  std::optional<absl::Status> Read(const std::string& array, char* out, int64_t bytes);

  // Unmaps the region without telling the daemon (for a session that closed: closing it
  // unmapped the daemon's side). Waits for a transfer in progress; later ones return
  // std::nullopt.
  void Release();

 private:
  // Makes the region hold at least min(bytes, max_region_bytes). OK when it does, and also
  // when registering found no descriptor channel: then unavailable_ is set and the transfer
  // falls back to gRPC. Any other error is the transfer's.
  absl::Status EnsureRegion(int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<absl::Status> Transfer(bool to_array, const std::string& array, char* host,
                                       int64_t bytes);

  HostMemoryCalls& calls_;
  const StagingOptions options_;
  absl::Mutex mu_;  // held for a whole transfer
  RegisteredRegion region_ ABSL_GUARDED_BY(mu_);
  bool unavailable_ ABSL_GUARDED_BY(mu_) = false;  // no descriptor channel, for good
  bool released_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gpukit::internal

#endif  // GPUKIT_CLIENT_CPP_STAGING_AREA_H_
