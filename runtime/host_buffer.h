// HostBuffer: host memory a Device handed out for bulk copies to and from it (see
// Device::AllocateHostBuffer), returned to the device by the destructor.
//
// On a GPU it is page-locked (pinned) memory, which the copy engines read and write directly:
// copies need no staging and run at the bus's speed. Elsewhere, or when the host cannot lock
// more memory, it is ordinary memory and `pinned()` says so.
//
//   GPUKIT_ASSIGN_OR_RETURN(HostBuffer spill, device.AllocateHostBuffer(bytes));
//   GPUKIT_RETURN_IF_ERROR(device.CopyDeviceToHost(spill.data(), buffer, 0, bytes, stream));
//
// Thread safety: a HostBuffer is a value; its memory may be used from any thread.
#ifndef GPUKIT_RUNTIME_HOST_BUFFER_H_
#define GPUKIT_RUNTIME_HOST_BUFFER_H_

#include <cstdint>
#include <functional>
#include <utility>

namespace gpukit {

class HostBuffer {
 public:
  // Gives `data` back; called once, by the destructor.
  using Release = std::function<void(char* data)>;

  HostBuffer() = default;
  HostBuffer(char* data, int64_t bytes, bool pinned, Release release)
      : data_(data), bytes_(bytes), pinned_(pinned), release_(std::move(release)) {}
  HostBuffer(HostBuffer&& other) noexcept { *this = std::move(other); }
  HostBuffer& operator=(HostBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      pinned_ = std::exchange(other.pinned_, false);
      release_ = std::exchange(other.release_, nullptr);
    }
    return *this;
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() { Reset(); }

  char* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  bool pinned() const { return pinned_; }

 private:
  void Reset() {
    if (data_ != nullptr && release_) release_(data_);
    data_ = nullptr;
    bytes_ = 0;
    release_ = nullptr;
  }

  char* data_ = nullptr;
  int64_t bytes_ = 0;
  bool pinned_ = false;
  Release release_;
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_HOST_BUFFER_H_
