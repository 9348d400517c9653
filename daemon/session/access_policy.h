// AccessPolicy: what a caller (Principal) may do. It answers four questions: is the caller an
// admin, which tenant it acts as, which partitions that tenant may use, and which sessions
// the caller may use and see. The rules come from the operator's configuration (the
// `access` block, AccessRules below); with none, a safe default holds.
//
//   GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<const AccessPolicy> policy,
//                           AccessPolicy::Create(geteuid(), rules));
//   const Principal caller = Principal::Local(1000, 1000, 4242);
//   GPUKIT_ASSIGN_OR_RETURN(std::string tenant,
//                           policy->SessionTenant(caller, request.tenant(), "default"));
//   if (!policy->MayUseSession(caller, session->owner())) return ...NOT_FOUND...;
//
// Rules:
// - Admins: a local caller whose uid is 0, gpukitd's effective uid or one of
//   AccessRules::admin_uids, or whose gid or a supplementary group is one of admin_gids; a
//   network caller whose bearer token is configured with admin. Admins may use and see
//   every session, open sessions for any tenant in any partition, and call the mutating
//   Admin RPCs.
// - A local caller's tenant: its uid's entry in uid_tenants, else the first of its gid and
//   then its supplementary groups (in the kernel's order) found in gid_tenants, else its own
//   tenant "uid-<uid>" (e.g. "uid-1000"). So with no configuration every uid is a tenant of
//   its own, named without a look-up of the user database (none in the request path, and
//   a renamed user keeps its accounting).
// - A network caller is authenticated by its bearer token: the token's SHA-256 must be one
//   of AccessRules::tokens, whose entry names its tenant (and whether it is an admin).
//   Without a valid token it is not authenticated: it may use no session (UNAUTHENTICATED)
//   and open none, though it may still call the open read-only RPCs.
// - OpenSession: an empty requested tenant means the caller's own; a caller that names
//   another gets PERMISSION_DENIED unless it is an admin. The tenant must be allowed the
//   partition (tenant_partitions; a tenant without an entry may use every partition), else
//   PERMISSION_DENIED (admins excepted).
// - A local caller may use and see the sessions that a local caller of its uid opened
//   (not those of other uids of its tenant: a session's arrays and kernels are its opener's);
//   a network caller those that a network caller with the same token opened.
// - Unidentified callers may do nothing.
//
// Cost: every call is a few hash look-ups, no system call and no allocation but the tenant
// name returned.
//
// Thread safety: immutable after Create; share it as std::shared_ptr<const AccessPolicy>
// and replace the pointer to change the rules (AccessGuard::SetPolicy).
#ifndef GPUKIT_DAEMON_SESSION_ACCESS_POLICY_H_
#define GPUKIT_DAEMON_SESSION_ACCESS_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/session/principal.h"

namespace gpukit {

// The operator's rules (config key `access`, docs/operations.md). Plain data; an empty
// AccessRules is the default described above.
struct AccessRules {
  // Local callers' uids to tenant names.
  absl::flat_hash_map<uint32_t, std::string> uid_tenants;
  // Local callers' gids (primary or supplementary) to tenant names; a uid's entry wins.
  absl::flat_hash_map<uint32_t, std::string> gid_tenants;
  // Tenant name -> the partitions it may use. A tenant without an entry may use every
  // partition; one with an empty list may use none.
  absl::flat_hash_map<std::string, std::vector<std::string>> tenant_partitions;
  // Admins besides root and gpukitd's own uid.
  absl::flat_hash_set<uint32_t> admin_uids;
  absl::flat_hash_set<uint32_t> admin_gids;
  // TCP callers' bearer tokens, by the lowercase hex SHA-256 of the token.
  struct TokenGrant {
    std::string tenant;
    bool admin = false;
  };
  absl::flat_hash_map<std::string, TokenGrant> tokens;
};

// The longest tenant name, in characters: OpenSession's rule (ValidateOpenSessionParams) and
// the access rules' (AccessPolicy::Create) for tenants and partitions.
inline constexpr size_t kMaxTenantLength = 63;

// The tenant name of an unmapped uid: "uid-1000".
std::string OwnTenantName(uint32_t uid);

class AccessPolicy {
 public:
  // `daemon_uid`: gpukitd's effective uid (geteuid()), whose local callers are admins.
  // INVALID_ARGUMENT naming the entry when a tenant or partition name is not 1-63 of
  // [A-Za-z0-9._-].
  static absl::StatusOr<std::shared_ptr<const AccessPolicy>> Create(uint32_t daemon_uid,
                                                                    AccessRules rules);
  // The default rules (an empty AccessRules); cannot fail.
  explicit AccessPolicy(uint32_t daemon_uid) : daemon_uid_(daemon_uid) {}

  // A local caller with uid 0, the daemon's uid or a configured admin uid or group; a
  // network caller with an admin token.
  bool IsAdmin(const Principal& caller) const;
  // Whether the caller has an identity: local, or network with a configured token.
  bool Authenticated(const Principal& caller) const;
  // The tenant the caller acts as (see the rules); "" for a caller that is not
  // authenticated.
  std::string TenantOf(const Principal& caller) const;
  // Whether sessions of `tenant` may be placed in `partition` (its resolved name).
  bool MayUsePartition(absl::string_view tenant, absl::string_view partition) const;
  // The tenant a session that `caller` opens with `requested` (OpenSessionRequest.tenant,
  // maybe empty) in `partition` (resolved: "default" for an empty request) acts for.
  // PERMISSION_DENIED when the caller may not claim that tenant or the tenant may not use
  // the partition; UNAUTHENTICATED for a caller that is not authenticated. Messages name
  // the caller's tenant and the partition, never another tenant's configuration.
  absl::StatusOr<std::string> SessionTenant(const Principal& caller, absl::string_view requested,
                                            absl::string_view partition) const;
  // Whether `caller` may name a session that `owner` opened in a request (any RPC with a
  // session_id, KeepAlive and Close included).
  bool MayUseSession(const Principal& caller, const Principal& owner) const;
  // Whether ListSessions (and ListTasks) shows `caller` a session that `owner` opened:
  // admins every session, local callers those of their uid, network callers those of
  // their token.
  bool MaySeeSession(const Principal& caller, const Principal& owner) const;

  uint32_t daemon_uid() const { return daemon_uid_; }
  // Whether any rule was configured (for gpukitd's start-up log line).
  bool configured() const { return configured_; }

 private:
  AccessPolicy(uint32_t daemon_uid, AccessRules rules)
      : daemon_uid_(daemon_uid), rules_(std::move(rules)), configured_(true) {}

  // The configured token a network caller presented; null for none or an unknown one.
  const AccessRules::TokenGrant* TokenOf(const Principal& caller) const;

  const uint32_t daemon_uid_;
  const AccessRules rules_;
  const bool configured_ = false;
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SESSION_ACCESS_POLICY_H_
