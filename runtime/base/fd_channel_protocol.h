// The descriptor channel's wire format, shared by gpukitd (daemon/service/fd_channel.h) and
// the client library.
//
// The channel is a unix SOCK_SEQPACKET socket beside gpukitd's gRPC socket over which a
// client hands a file descriptor (host shared memory) to gpukitd with SCM_RIGHTS. A client
// keeps one connection (fd_channel_client.h) and makes its exchanges over it one at a time:
//   client -> gpukitd: "GKFD" | u32 version (1) | u32 op | 32-character token
//     op 1, deliver: with the descriptor a RegisterHostMemory reply's token asked for attached
//     op 2, fetch: for the descriptor an ExportArray reply's token names
//   gpukitd -> client: u32 status code (absl/gRPC numbering; 0 is OK) | UTF-8 message, with
//                      the descriptor attached to a successful fetch
// Integers are little-endian. The token is what pairs the message with a gRPC request of
// the session: without it a descriptor is refused.
//
// Thread safety: pure functions.
#ifndef GPUKIT_RUNTIME_BASE_FD_CHANNEL_PROTOCOL_H_
#define GPUKIT_RUNTIME_BASE_FD_CHANNEL_PROTOCOL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpukit {

enum class FdChannelOp : uint32_t { kDeliver = 1, kFetch = 2 };

struct FdChannelRequest {
  FdChannelOp op = FdChannelOp::kDeliver;
  std::string token;  // 32 characters
};

inline constexpr size_t kFdChannelTokenBytes = 32;
inline constexpr size_t kFdChannelMaxReplyBytes = 1024;

std::string EncodeFdChannelRequest(const FdChannelRequest& request);
// INVALID_ARGUMENT naming what is wrong: size, magic, version, op.
absl::StatusOr<FdChannelRequest> DecodeFdChannelRequest(absl::string_view bytes);

// The status, its message cut to fit kFdChannelMaxReplyBytes.
std::string EncodeFdChannelReply(const absl::Status& status);
// The status the reply carries; INTERNAL for a reply too short to hold one.
absl::Status DecodeFdChannelReply(absl::string_view bytes);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_BASE_FD_CHANNEL_PROTOCOL_H_
