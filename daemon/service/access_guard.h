// AccessGuard: the services' one check of who may do what. Every handler of a request that
// names a session calls CheckSession first, before it reads or touches anything; every
// mutating Admin RPC calls CheckAdmin; SessionService.Open asks SessionTenant which tenant
// the new session acts for:
//
//   if (grpc::Status denied = guard_.CheckSession(context, request->session_id());
//       !denied.ok()) {
//     return denied;
//   }
//
// The caller comes from the transport (Caller): "fd:<n>" peers are connections gpukitd
// accepted on its unix sockets, looked up in the PeerTable; "ipv4:"/"ipv6:" peers are TCP
// (network) callers; anything else is unidentified. The rules are AccessPolicy's
// (daemon/session/access_policy.h). A caller that may not use the session gets NOT_FOUND
// with exactly the message of a session that does not exist (SessionNotFoundError), so ids
// are no oracle; one that is not an admin gets PERMISSION_DENIED from CheckAdmin. gpukitd
// logs every refusal at warning with the caller's uid and pid or address.
//
// The policy is an immutable object behind a pointer that SetPolicy replaces (a reload of
// the configuration): a request takes one snapshot (policy()) and decides with it, so it
// never sees half of an old and half of a new policy; sessions keep their owners, so a
// reload changes who may open, not who owns.
//
// Thread safety: thread-safe (the PeerTable and the Core are; the policy pointer is behind a
// mutex, the policy itself immutable).
#ifndef GPUKIT_DAEMON_SERVICE_ACCESS_GUARD_H_
#define GPUKIT_DAEMON_SERVICE_ACCESS_GUARD_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "daemon/core/core.h"
#include "daemon/service/peer_table.h"
#include "daemon/session/access_policy.h"
#include "daemon/session/principal.h"
#include "grpcpp/server_context.h"

namespace gpukit::service {

// The lowercase hex SHA-256 of the token in an "authorization: Bearer <token>" value ("" when
// `authorization` is not of that form). Pure; O(token length).
std::string BearerTokenHash(absl::string_view authorization);

// The Principal for a transport peer string (ServerContext::peer()) and the request's
// authorization metadata (read only for TCP peers; local identity is the socket's). Pure but
// for `peers`.
Principal PrincipalOfPeer(absl::string_view peer, const PeerTable& peers,
                          absl::string_view authorization = "");

class AccessGuard {
 public:
  // `core` and `peers` must outlive the guard. `policy` must not be null.
  AccessGuard(const Core& core, const PeerTable& peers, std::shared_ptr<const AccessPolicy> policy)
      : core_(core), peers_(peers), policy_(std::move(policy)) {}

  // Who sent the request. O(1).
  Principal Caller(const grpc::ServerContextBase& context) const;
  // OK if the caller may name `session_id`; UNAUTHENTICATED for a TCP caller without a valid
  // token (whatever the id); NOT_FOUND as for an unknown session otherwise (and for an
  // unknown, closed or expired one). Does not renew the session's lease. O(1).
  grpc::Status CheckSession(grpc::ServerContextBase* context, absl::string_view session_id) const;
  // The same check for a caller known otherwise (the submit socket's peer), as an
  // absl::Status.
  absl::Status CheckSessionOf(const Principal& caller, absl::string_view session_id) const;
  // OK if the caller is an admin; PERMISSION_DENIED naming `rpc` ("CreatePartition")
  // otherwise, logged with the caller. O(1).
  grpc::Status CheckAdmin(grpc::ServerContextBase* context, absl::string_view rpc) const;
  // The tenant a session the caller opens with `requested` (maybe empty) in `partition`
  // (maybe empty: the default partition) acts for, into *tenant; the refusals of
  // AccessPolicy::SessionTenant otherwise, logged with the caller. O(1).
  grpc::Status SessionTenant(grpc::ServerContextBase* context, absl::string_view requested,
                             absl::string_view partition, std::string* tenant) const;
  // The same rule on a session's owner that the caller already has, for listings.
  bool MaySee(const Principal& caller, const Principal& owner) const {
    return policy()->MaySeeSession(caller, owner);
  }
  // The policy in force now; a request that asks more than one question should take it
  // once. O(1).
  std::shared_ptr<const AccessPolicy> policy() const {
    absl::MutexLock lock(&mu_);
    return policy_;
  }
  // Replaces the policy for requests that start from now on (those running keep theirs).
  // `policy` must not be null. Thread-safe; O(1) (the old policy is freed by its last user).
  void SetPolicy(std::shared_ptr<const AccessPolicy> policy) {
    absl::MutexLock lock(&mu_);
    policy_.swap(policy);
  }

 private:
  const Core& core_;
  const PeerTable& peers_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const AccessPolicy> policy_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpukit::service

#endif  // GPUKIT_DAEMON_SERVICE_ACCESS_GUARD_H_
