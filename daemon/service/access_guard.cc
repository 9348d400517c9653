#include "daemon/service/access_guard.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/scheduler/partition.h"
#include "daemon/service/convert.h"
#include "runtime/jit/sha256.h"
#include "spdlog/spdlog.h"

namespace gpukit::service {

std::string BearerTokenHash(absl::string_view authorization) {
  constexpr absl::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(authorization.substr(0, kScheme.size()), kScheme)) {
    return "";
  }
  absl::string_view token = absl::StripAsciiWhitespace(authorization.substr(kScheme.size()));
  if (token.empty()) return "";
  return Sha256Hex(token);
}

Principal PrincipalOfPeer(absl::string_view peer, const PeerTable& peers,
                          absl::string_view authorization) {
  if (absl::StartsWith(peer, "fd:")) {
    // A connection UnixListener accepted (gRPC names such endpoints "fd:<n>").
    int fd = -1;
    if (absl::SimpleAtoi(peer.substr(3), &fd)) {
      if (std::optional<Principal> local = peers.Lookup(fd)) return *std::move(local);
    }
  } else if (absl::StartsWith(peer, "ipv4:") || absl::StartsWith(peer, "ipv6:")) {
    return Principal::Network(std::string(peer), BearerTokenHash(authorization));
  }
  return Principal::Unidentified(std::string(peer));
}

Principal AccessGuard::Caller(const grpc::ServerContextBase& context) const {
  absl::string_view authorization;
  const auto& metadata = context.client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    authorization = absl::string_view(it->second.data(), it->second.size());
  }
  return PrincipalOfPeer(context.peer(), peers_, authorization);
}

grpc::Status AccessGuard::CheckSession(grpc::ServerContextBase* context,
                                       absl::string_view session_id) const {
  return ToGrpc(CheckSessionOf(Caller(*context), session_id), context);
}

absl::Status AccessGuard::CheckSessionOf(const Principal& caller,
                                         absl::string_view session_id) const {
  const std::shared_ptr<const AccessPolicy> policy = this->policy();
  if (caller.network() && !policy->Authenticated(caller)) {
    // Before the look-up, whatever the id: an unauthenticated caller learns nothing of it.
    spdlog::warn("session access refused, no valid token: caller=\"{}\"", caller.Describe());
    return absl::UnauthenticatedError(
        "over TCP a session needs a valid bearer token (metadata authorization: Bearer <token>, "
        "a token that access.tokens lists)");
  }
  absl::StatusOr<Principal> owner = core_.SessionOwner(session_id);
  if (!owner.ok()) return owner.status();
  if (policy->MayUseSession(caller, *owner)) return absl::OkStatus();
  spdlog::warn("session access refused: session={} caller=\"{}\" owner=\"{}\"",
               absl::CHexEscape(session_id.substr(0, 80)), caller.Describe(), owner->Describe());
  return SessionNotFoundError(session_id);
}

grpc::Status AccessGuard::CheckAdmin(grpc::ServerContextBase* context,
                                     absl::string_view rpc) const {
  const Principal caller = Caller(*context);
  if (policy()->IsAdmin(caller)) return grpc::Status::OK;
  spdlog::warn("admin call refused: rpc={} caller=\"{}\"", std::string(rpc), caller.Describe());
  return ToGrpc(absl::PermissionDeniedError(
                    absl::StrCat(rpc,
                                 " needs the admin role (root, gpukitd's user, access.adminUids/"
                                 "adminGids, or an admin token); this caller is not an admin")),
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
