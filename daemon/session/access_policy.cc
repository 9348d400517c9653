#include "daemon/session/access_policy.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "runtime/base/names.h"
#include "runtime/base/status_macros.h"

namespace gpukit {
namespace {

absl::Status CheckName(absl::string_view name, absl::string_view where) {
  if (IsValidName(name, kMaxTenantLength)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(where, " = \"", absl::CHexEscape(name),
                                                 "\" must be 1 to ", kMaxTenantLength,
                                                 " of [A-Za-z0-9._-]"));
}

bool InGroups(const Principal& caller, const absl::flat_hash_set<uint32_t>& gids) {
  if (gids.contains(caller.gid)) return true;
  return std::any_of(caller.groups.begin(), caller.groups.end(),
                     [&gids](uint32_t g) { return gids.contains(g); });
}

}  // namespace

std::string OwnTenantName(uint32_t uid) { return absl::StrCat("uid-", uid); }

absl::StatusOr<std::shared_ptr<const AccessPolicy>> AccessPolicy::Create(uint32_t daemon_uid,
                                                                         AccessRules rules) {
  for (const auto& [uid, tenant] : rules.uid_tenants) {
    GPUKIT_RETURN_IF_ERROR(CheckName(tenant, absl::StrCat("access.uids[\"", uid, "\"]")));
  }
  for (const auto& [gid, tenant] : rules.gid_tenants) {
    GPUKIT_RETURN_IF_ERROR(CheckName(tenant, absl::StrCat("access.gids[\"", gid, "\"]")));
  }
  for (const auto& [tenant, partitions] : rules.tenant_partitions) {
    GPUKIT_RETURN_IF_ERROR(CheckName(tenant, "access.tenants[].name"));
    for (const std::string& partition : partitions) {
      GPUKIT_RETURN_IF_ERROR(
          CheckName(partition, absl::StrCat("access.tenants[\"", tenant, "\"].partitions[]")));
    }
  }
  for (const auto& [hash, grant] : rules.tokens) {
    if (hash.size() != 64 || !std::all_of(hash.begin(), hash.end(), [](char c) {
          return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
        })) {
      return absl::InvalidArgumentError(
          absl::StrCat("access.tokens[].sha256 = \"", absl::CHexEscape(hash.substr(0, 80)),
                       "\" must be 64 lowercase hex digits (sha256sum of the token)"));
    }
    GPUKIT_RETURN_IF_ERROR(CheckName(
        grant.tenant, absl::StrCat("access.tokens[\"", hash.substr(0, 12), "...\"].tenant")));
  }
  return std::shared_ptr<const AccessPolicy>(new AccessPolicy(daemon_uid, std::move(rules)));
}

const AccessRules::TokenGrant* AccessPolicy::TokenOf(const Principal& caller) const {
  if (!caller.network() || caller.token_sha256.empty()) return nullptr;
  auto it = rules_.tokens.find(caller.token_sha256);
  return it == rules_.tokens.end() ? nullptr : &it->second;
}

bool AccessPolicy::Authenticated(const Principal& caller) const {
  return caller.local() || TokenOf(caller) != nullptr;
}

bool AccessPolicy::IsAdmin(const Principal& caller) const {
  if (caller.network()) {
    const AccessRules::TokenGrant* grant = TokenOf(caller);
    return grant != nullptr && grant->admin;
  }
  if (!caller.local()) return false;
  if (caller.uid == 0 || caller.uid == daemon_uid_) return true;
  return rules_.admin_uids.contains(caller.uid) || InGroups(caller, rules_.admin_gids);
}

std::string AccessPolicy::TenantOf(const Principal& caller) const {
  if (const AccessRules::TokenGrant* grant = TokenOf(caller)) return grant->tenant;
  if (!caller.local()) return "";
  if (auto it = rules_.uid_tenants.find(caller.uid); it != rules_.uid_tenants.end()) {
    return it->second;
  }
  if (auto it = rules_.gid_tenants.find(caller.gid); it != rules_.gid_tenants.end()) {
    return it->second;
  }
  for (uint32_t group : caller.groups) {
    if (auto it = rules_.gid_tenants.find(group); it != rules_.gid_tenants.end()) {
      return it->second;
    }
  }
  return OwnTenantName(caller.uid);
}

bool AccessPolicy::MayUsePartition(absl::string_view tenant, absl::string_view partition) const {
  auto it = rules_.tenant_partitions.find(tenant);
  if (it == rules_.tenant_partitions.end()) return true;
  return std::find(it->second.begin(), it->second.end(), partition) != it->second.end();
}

absl::StatusOr<std::string> AccessPolicy::SessionTenant(const Principal& caller,
                                                        absl::string_view requested,
                                                        absl::string_view partition) const {
  if (!Authenticated(caller)) {
    return absl::UnauthenticatedError(
        caller.network()
            ? "over TCP a session needs a valid bearer token (metadata authorization: Bearer "
              "<token>, a token that access.tokens lists)"
            : "the connection has no identity; no session may open");
  }
  const bool admin = IsAdmin(caller);
  std::string tenant = TenantOf(caller);
  if (!requested.empty() && requested != tenant) {
    if (!admin) {
      return absl::PermissionDeniedError(absl::StrCat(
          caller.local() ? absl::StrCat("uid ", caller.uid) : std::string("this token"),
          " acts as tenant \"", tenant, "\" and may not open a session for tenant \"",
          absl::CHexEscape(requested.substr(0, 80)), "\"; leave the tenant empty to use your own"));
    }
    tenant = std::string(requested);
  }
  if (!admin && !MayUsePartition(tenant, partition)) {
    return absl::PermissionDeniedError(
        absl::StrCat("tenant \"", tenant, "\" may not use partition \"",
                     absl::CHexEscape(partition.substr(0, 80)), "\""));
  }
  return tenant;
}

bool AccessPolicy::MayUseSession(const Principal& caller, const Principal& owner) const {
  // Today the same rule as listing (MaySeeSession checks IsAdmin first).
  return MaySeeSession(caller, owner);
}

bool AccessPolicy::MaySeeSession(const Principal& caller, const Principal& owner) const {
  if (IsAdmin(caller)) return true;
  if (caller.local()) return owner.local() && owner.uid == caller.uid;
  // The same token: the caller that opened it, or another connection of the same client.
  return TokenOf(caller) != nullptr && owner.network() && owner.token_sha256 == caller.token_sha256;
}

}  // namespace gpukit
