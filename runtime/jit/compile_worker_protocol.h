// The messages between gpukitd and its compile workers (compile_sandbox.h), and how they
// travel: each message is one frame on a unix stream socket, a 4-byte little-endian length
// followed by that many bytes of fields. A field is a 4-byte length and its bytes; a list is
// a count and its fields. Both ends are built from this one file, so there is no versioning.
//
//   GPUKIT_RETURN_IF_ERROR(WriteFrame(fd, EncodeWorkerRequest(request)));
//   GPUKIT_ASSIGN_OR_RETURN(std::string frame, ReadFrame(fd, kMaxWorkerFrameBytes, deadline));
//   GPUKIT_ASSIGN_OR_RETURN(WorkerResponse response, DecodeWorkerResponse(frame));
//
// Thread safety: pure functions; a socket is used by one thread at a time.
#ifndef GPUKIT_RUNTIME_JIT_COMPILE_WORKER_PROTOCOL_H_
#define GPUKIT_RUNTIME_JIT_COMPILE_WORKER_PROTOCOL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/jit/nvrtc.h"

namespace gpukit {

// Larger than any request (1 MiB of source and headers, a few KiB of names) or answer (a
// cubin of tens of MiB at most, a log capped by the worker): a length beyond it means a
// broken peer, and the connection is dropped.
inline constexpr int64_t kMaxWorkerFrameBytes = int64_t{256} << 20;

// The worker's first message: once NVRTC is loaded and the process is locked down, or the
// reason it could not be (then the worker exits).
struct WorkerHello {
  absl::Status status;
  int nvrtc_major = 0;
  int nvrtc_minor = 0;
  std::string library_path;
  std::vector<int> supported_archs;
};

struct WorkerResponse {
  absl::Status status;  // the compile's error, or OK with `output` set
  NvrtcOutput output;
};

std::string EncodeWorkerHello(const WorkerHello& hello);
absl::StatusOr<WorkerHello> DecodeWorkerHello(const std::string& frame);
std::string EncodeWorkerRequest(const NvrtcInput& input);
absl::StatusOr<NvrtcInput> DecodeWorkerRequest(const std::string& frame);
std::string EncodeWorkerResponse(const WorkerResponse& response);
absl::StatusOr<WorkerResponse> DecodeWorkerResponse(const std::string& frame);

// Writes one frame, retrying short writes and EINTR. UNAVAILABLE when the peer is gone.
absl::Status WriteFrame(int fd, const std::string& payload);
// Reads one frame. `deadline` absl::InfiniteFuture() waits for ever. DEADLINE_EXCEEDED when
// the frame is not whole by then, UNAVAILABLE when the peer closed the socket,
// INVALID_ARGUMENT for a length above `max_bytes`.
absl::StatusOr<std::string> ReadFrame(int fd, int64_t max_bytes, absl::Time deadline);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_JIT_COMPILE_WORKER_PROTOCOL_H_
