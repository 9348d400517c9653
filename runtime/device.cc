#include "runtime/device.h"

#include "runtime/base/status_macros.h"

namespace gpukit {

absl::string_view BackendName(BackendKind backend) {
  switch (backend) {
    case BackendKind::kCpu:
      return "cpu";
    case BackendKind::kCuda:
      return "cuda";
  }
  return "unknown";
}

absl::Status SynchronizeStream(Device& device, StreamId stream) {
  GPUKIT_ASSIGN_OR_RETURN(EventId event, device.RecordEvent(stream));
  absl::Status status = device.WaitEvent(event);
  absl::Status destroyed = device.DestroyEvent(event);
  return status.ok() ? destroyed : status;
}

}  // namespace gpukit
