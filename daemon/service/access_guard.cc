#include "daemon/service/access_guard.h"

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "daemon/service/convert.h"
#include "spdlog/spdlog.h"

namespace gpukit::service {

Principal PrincipalOfPeer(absl::string_view peer, const PeerTable& peers) {
  if (absl::StartsWith(peer, "fd:")) {
    // A connection UnixListener accepted (gRPC names such endpoints "fd:<n>").
    int fd = -1;
    if (absl::SimpleAtoi(peer.substr(3), &fd)) {
      if (std::optional<Principal> local = peers.Lookup(fd)) return *std::move(local);
    }
  } else if (absl::StartsWith(peer, "ipv4:") || absl::StartsWith(peer, "ipv6:")) {
    return Principal::Network(std::string(peer));
  }
  return Principal::Unidentified(std::string(peer));
}

Principal AccessGuard::Caller(const grpc::ServerContextBase& context) const {
  return PrincipalOfPeer(context.peer(), peers_);
}

grpc::Status AccessGuard::CheckSession(grpc::ServerContextBase* context,
                                       absl::string_view session_id) const {
  absl::StatusOr<Principal> owner = core_.SessionOwner(session_id);
  if (!owner.ok()) return ToGrpc(owner.status(), context);
  const Principal caller = Caller(*context);
  if (policy_.MayUseSession(caller, *owner)) return grpc::Status::OK;
  spdlog::warn("session access refused: session={} caller=\"{}\" owner=\"{}\"",
               absl::CHexEscape(session_id.substr(0, 80)), caller.Describe(), owner->Describe());
  return ToGrpc(SessionNotFoundError(session_id), context);
}

}  // namespace gpukit::service
