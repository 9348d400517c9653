// DeviceArray: an array's data, layout and memory reservation, as one owner.
//
// The data is resident (a device buffer, counted by a MemoryReservation) or spilled (a copy
// in host memory, no device memory held) when the scheduler reclaimed it under memory
// pressure. Work that uses an array pins it: Pin() restores a spilled array first, and a
// pinned array is never spilled. Destroying the array frees whatever it holds, so whoever
// drops the last reference (the session, or work in flight) ends its life; nothing can
// leak on an error path.
//
//   GPUKIT_ASSIGN_OR_RETURN(ArrayPin pin, array->Pin(now, restorer));
//   ... enqueue work on pin.buffer(); wait for it; then drop the pin.
//
// Thread safety: thread-safe. Pin and Spill take the array's lock; Spill gives up rather
// than wait on an array that is busy.
#ifndef GPUKIT_DAEMON_SESSION_DEVICE_ARRAY_H_
#define GPUKIT_DAEMON_SESSION_DEVICE_ARRAY_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/scheduler/scheduler.h"
#include "runtime/device.h"

namespace gpukit {

class ArrayPin;

// Device memory for a restore: a fresh buffer and its reservation.
struct DeviceAllocation {
  BufferId buffer;
  MemoryReservation reservation;
};

class DeviceArray : public std::enable_shared_from_this<DeviceArray> {
 public:
  // Gets memory to restore a spilled array of `bytes` (admitted against the owner's
  // session, reclaiming others if it must).
  using Restorer = std::function<absl::StatusOr<DeviceAllocation>(int64_t bytes)>;

  // Takes ownership of `buffer` on `device` (which must outlive the array).
  DeviceArray(std::string handle, Device& device, BufferId buffer, TensorDesc desc, int64_t bytes,
              MemoryReservation reservation, absl::Time now);
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray();

  const std::string& handle() const { return handle_; }
  Device& device() const { return device_; }
  const TensorDesc& desc() const { return desc_; }
  int64_t bytes() const { return bytes_; }

  // Pins the array resident, restoring it first if it was spilled (copying on `stream`
  // and waiting). Errors: those of `restore`, and device errors of the copy.
  absl::StatusOr<ArrayPin> Pin(absl::Time now, const Restorer& restore, StreamId stream);

  // Copies the array to host memory and frees its device buffer and reservation, if it is
  // resident, unpinned and not locked by another thread. Returns the device bytes freed
  // (0 when it did nothing).
  absl::StatusOr<int64_t> Spill(StreamId stream);

  // Marks the array's memory as shared with a client process (ExportArray, or memory the client
  // allocated: ImportArray): from then on it is never spilled, since the other process names
  // that very memory. Call while it is resident. `until_session_end`: the memory must outlive
  // the array's handle too (a legacy CUDA IPC handle's, which the other process may map as
  // long as it lives): the session keeps the array until it ends (Session::RemoveArray).
  void MarkShared(bool until_session_end = false);
  bool kept_until_session_end() const;

  bool spilled() const;
  bool pinned() const;
  absl::Time last_used() const;
  // For reclaim: when the array was last used, if it is resident, unpinned and not held
  // by another thread right now; nullopt otherwise. Never blocks, so a restore that
  // reclaims while it holds its own array's lock cannot deadlock on that or any other array.
  std::optional<absl::Time> SpillableLastUsed() const;

 private:
  friend class ArrayPin;
  void Unpin();

  const std::string handle_;
  Device& device_;
  const TensorDesc desc_;
  const int64_t bytes_;

  mutable absl::Mutex mu_;
  BufferId buffer_ ABSL_GUARDED_BY(mu_);  // valid while resident
  MemoryReservation reservation_ ABSL_GUARDED_BY(mu_);
  // The data while spilled: pinned host memory on a GPU (Device::AllocateHostBuffer).
  HostBuffer host_copy_ ABSL_GUARDED_BY(mu_);
  bool spilled_ ABSL_GUARDED_BY(mu_) = false;
  int pins_ ABSL_GUARDED_BY(mu_) = 0;
  bool shared_ ABSL_GUARDED_BY(mu_) = false;
  bool kept_until_session_end_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_used_ ABSL_GUARDED_BY(mu_);
};

// Keeps an array resident and alive while work uses it. Move-only.
class ArrayPin {
 public:
  ArrayPin() = default;
  ArrayPin(ArrayPin&& other) noexcept = default;
  ArrayPin& operator=(ArrayPin&& other) noexcept;
  ArrayPin(const ArrayPin&) = delete;
  ArrayPin& operator=(const ArrayPin&) = delete;
  ~ArrayPin() { Reset(); }

  BufferId buffer() const { return buffer_; }
  DeviceArray& array() const { return *array_; }
  void Reset();

 private:
  friend class DeviceArray;
  ArrayPin(std::shared_ptr<DeviceArray> array, BufferId buffer)
      : array_(std::move(array)), buffer_(buffer) {}
  std::shared_ptr<DeviceArray> array_;
  BufferId buffer_;
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SESSION_DEVICE_ARRAY_H_
