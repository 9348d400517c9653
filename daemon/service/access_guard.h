// AccessGuard: the services' one check of who may name a session. Every handler of a request
// that names a session calls CheckSession first, before it reads or touches anything:
//
//   if (grpc::Status denied = guard_.CheckSession(context, request->session_id());
//       !denied.ok()) {
//     return denied;
//   }
//
// The caller comes from the transport (Caller): "fd:<n>" peers are connections gpukitd
// accepted on its unix sockets, looked up in the PeerTable; "ipv4:"/"ipv6:" peers are TCP
// (network) callers; anything else is unidentified. The rule is AccessPolicy's. A caller
// that may not use the session gets NOT_FOUND with exactly the message of a session that
// does not exist (SessionNotFoundError), so ids are no oracle, and gpukitd logs the refusal
// with the caller's uid and pid or address.
//
// Thread safety: thread-safe (the PeerTable and the Core are; the rest is immutable).
#ifndef GPUKIT_DAEMON_SERVICE_ACCESS_GUARD_H_
#define GPUKIT_DAEMON_SERVICE_ACCESS_GUARD_H_

#include "absl/strings/string_view.h"
#include "daemon/core/core.h"
#include "daemon/service/peer_table.h"
#include "daemon/session/principal.h"
#include "grpcpp/server_context.h"

namespace gpukit::service {

// The Principal for a transport peer string (ServerContext::peer()). Pure but for `peers`.
Principal PrincipalOfPeer(absl::string_view peer, const PeerTable& peers);

class AccessGuard {
 public:
  // `core` and `peers` must outlive the guard.
  AccessGuard(const Core& core, const PeerTable& peers, AccessPolicy policy)
      : core_(core), peers_(peers), policy_(policy) {}

  // Who sent the request. O(1).
  Principal Caller(const grpc::ServerContextBase& context) const;
  // OK if the caller may name `session_id`; NOT_FOUND as for an unknown session otherwise
  // (and for an unknown, closed or expired one). Does not renew the session's lease. O(1).
  grpc::Status CheckSession(grpc::ServerContextBase* context, absl::string_view session_id) const;
  // The same rule on a session's owner that the caller already has, for listings.
  bool MaySee(const Principal& caller, const Principal& owner) const {
    return policy_.MaySeeSession(caller, owner);
  }
  const AccessPolicy& policy() const { return policy_; }

 private:
  const Core& core_;
  const PeerTable& peers_;
  const AccessPolicy policy_;
};

}  // namespace gpukit::service

#endif  // GPUKIT_DAEMON_SERVICE_ACCESS_GUARD_H_
