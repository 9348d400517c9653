// DeviceArray: an array's device buffer, layout and memory reservation, as one owner.
//
// Destroying it frees the buffer and returns the reservation, so whoever holds the last
// reference (the session, or work in flight that reads it) ends its life; nothing can leak
// on an error path.
//
// Thread safety: immutable after construction; safe to share between threads.
#ifndef GPUKIT_DAEMON_SESSION_DEVICE_ARRAY_H_
#define GPUKIT_DAEMON_SESSION_DEVICE_ARRAY_H_

#include <string>

#include "daemon/scheduler/admission.h"
#include "runtime/device.h"

namespace gpukit {

class DeviceArray {
 public:
  // Takes ownership of `buffer` on `device` (which must outlive the array).
  DeviceArray(std::string handle, Device& device, BufferId buffer, TensorDesc desc, int64_t bytes,
              MemoryReservation reservation)
      : handle_(std::move(handle)),
        device_(device),
        buffer_(buffer),
        desc_(std::move(desc)),
        bytes_(bytes),
        reservation_(std::move(reservation)) {}
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray();

  const std::string& handle() const { return handle_; }
  Device& device() const { return device_; }
  BufferId buffer() const { return buffer_; }
  const TensorDesc& desc() const { return desc_; }
  int64_t bytes() const { return bytes_; }

 private:
  const std::string handle_;
  Device& device_;
  const BufferId buffer_;
  const TensorDesc desc_;
  const int64_t bytes_;
  MemoryReservation reservation_;
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SESSION_DEVICE_ARRAY_H_
