#include "daemon/service/access_guard.h"

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/scheduler/partition.h"
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
  if (policy()->MayUseSession(caller, *owner)) return grpc::Status::OK;
  spdlog::warn("session access refused: session={} caller=\"{}\" owner=\"{}\"",
               absl::CHexEscape(session_id.substr(0, 80)), caller.Describe(), owner->Describe());
  return ToGrpc(SessionNotFoundError(session_id), context);
}

grpc::Status AccessGuard::CheckAdmin(grpc::ServerContextBase* context,
                                     absl::string_view rpc) const {
  const Principal caller = Caller(*context);
  if (policy()->IsAdmin(caller)) return grpc::Status::OK;
  spdlog::warn("admin call refused: rpc={} caller=\"{}\"", std::string(rpc), caller.Describe());
  return ToGrpc(absl::PermissionDeniedError(
                    absl::StrCat(rpc,
                                 " needs the admin role (root, gpukitd's user or access.adminUids/"
                                 "adminGids); this caller is not an admin")),
                context);
}

grpc::Status AccessGuard::SessionTenant(grpc::ServerContextBase* context,
                                        absl::string_view requested, absl::string_view partition,
                                        std::string* tenant) const {
  const Principal caller = Caller(*context);
  absl::StatusOr<std::string> decided =
      policy()->SessionTenant(caller, requested, partition.empty() ? kDefaultPartition : partition);
  if (decided.ok()) {
    *tenant = *std::move(decided);
    return grpc::Status::OK;
  }
  spdlog::warn("session open refused: caller=\"{}\" tenant={} partition={}: {}", caller.Describe(),
               absl::CHexEscape(requested.substr(0, 80)), absl::CHexEscape(partition.substr(0, 80)),
               std::string(decided.status().message()));
  return ToGrpc(decided.status(), context);
}

}  // namespace gpukit::service
