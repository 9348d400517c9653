// Connection and error plumbing shared by libgpukit and gpukitctl (not a public header).
//
// Thread safety: pure functions.
#ifndef GPUKIT_CLIENT_CPP_CHANNEL_H_
#define GPUKIT_CLIENT_CPP_CHANNEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace gpukit {

// Payload key under which FromGrpc stores the daemon's "gpukit-reason" trailer.
inline constexpr absl::string_view kReasonPayloadUrl = "type.gpukit.dev/gpukit.v1.Reason";

// $GPUKIT_ADDR, else the default socket (runtime/base/default_address.h).
std::string DefaultClientTarget();

// The partition a session opens in: `requested` if not empty, else $GPUKIT_PARTITION if set
// and not empty (gpukit-device-plugin sets it in a Kubernetes container), else "" (the
// daemon's "default").
std::string SessionPartition(const std::string& requested);

// How a channel to a TCP address proves itself and its caller (docs/security.md). Unix
// sockets need neither: the daemon reads the caller's uid from the socket.
struct ChannelSecurity {
  // Sent as "authorization: Bearer <token>" on every call; empty: none.
  std::string token;
  // PEM file of the CA that signed the daemon's certificate; set: TLS. Empty: a plain
  // channel (which a daemon serves only on loopback addresses with --insecure-tcp).
  std::string tls_ca_file;
  // PEM files of this client's certificate and key, for a daemon that asks for one
  // (access.tls.clientCaFile); both or neither, and only with tls_ca_file.
  std::string tls_cert_file;
  std::string tls_key_file;
};

// $GPUKIT_TOKEN, or "" when it is not set.
std::string DefaultClientToken();

// A channel to `target` that is connected, or UNAVAILABLE naming the address when no
// daemon accepts within `timeout`. `security` adds TLS and the bearer token; INVALID_ARGUMENT
// when a file of it cannot be read or is empty (naming the file), a certificate comes without
// its key (or without tls_ca_file), or a TLS CA is given for a unix socket target ("unix:...",
// "unix-abstract:...": gpukitd serves no TLS there). The options are checked before the
// address is tried, so a wrong one is reported whether or not a daemon is listening.
absl::StatusOr<std::shared_ptr<grpc::Channel>> ConnectChannel(const std::string& target,
                                                              absl::Duration timeout,
                                                              const ChannelSecurity& security = {});

// grpc::Status -> absl::Status, keeping code and message, and the "gpukit-reason" trailer
// (when the call has one) as a payload read by RejectReason().
absl::Status FromGrpc(const grpc::Status& status, const grpc::ClientContext& context);

}  // namespace gpukit

#endif  // GPUKIT_CLIENT_CPP_CHANNEL_H_
