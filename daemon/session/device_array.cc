#include "daemon/session/device_array.h"

#include "spdlog/spdlog.h"

namespace gpukit {

DeviceArray::~DeviceArray() {
  absl::Status status = device_.Free(buffer_);
  if (!status.ok()) {
    // Cannot happen unless the device lost the buffer; keep serving, but say so.
    spdlog::error("freeing array {}: {}", handle_, std::string(status.message()));
  }
}

}  // namespace gpukit
