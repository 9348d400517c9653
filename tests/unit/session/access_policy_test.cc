// Tenants and roles from identity (daemon/session/access_policy.h): which tenant a caller
// acts as, which tenant a session it opens gets, which partitions a tenant may use and who
// is an admin, as tables of rows, with gpukitd running as uid 500, under the default rules
// and under a configured `access` block.
#include "daemon/session/access_policy.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/session/session_manager.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint32_t kDaemonUid = 500;
constexpr uint32_t kVisionGid = 2000;
constexpr uint32_t kOpsGid = 3000;

const Principal kRoot = Principal::Local(0, 0, 10);
const Principal kDaemonUser = Principal::Local(kDaemonUid, kDaemonUid, 11);
const Principal kAlice = Principal::Local(1000, 1000, 12);  // mapped by uid to "vision"
const Principal kBob = Principal::Local(1001, 1001, 13);    // unmapped
// Carol's primary group maps to "vision"; Dave's supplementary one; Dave also has a group
// that maps elsewhere later in the list, which loses.
const Principal kCarol = Principal::Local(1002, kVisionGid, 14);
const Principal kDave = Principal::Local(1003, 1003, 15, {100, kVisionGid, 2001});
// Erin maps by uid to "speech" and by group to "vision": the uid wins.
const Principal kErin = Principal::Local(1004, kVisionGid, 16);
const Principal kOperator = Principal::Local(1005, 1005, 17);              // an admin by uid
const Principal kOpsMember = Principal::Local(1006, 1006, 18, {kOpsGid});  // an admin by group
const Principal kOpsPrimary = Principal::Local(1007, kOpsGid, 19);         // ... by primary gid
// Token hashes (any 64 hex digits; the policy never sees a token, only its hash).
const std::string kVisionToken(64, 'a');
const std::string kAdminToken(64, 'b');
const std::string kUnknownToken(64, 'c');
const Principal kTcp = Principal::Network("ipv4:10.0.0.2:40000");  // no token
const Principal kTcpVision = Principal::Network("ipv4:10.0.0.2:40001", kVisionToken);
const Principal kTcpVision2 = Principal::Network("ipv4:10.0.0.3:40002", kVisionToken);
const Principal kTcpAdmin = Principal::Network("ipv6:[::1]:40003", kAdminToken);
const Principal kTcpUnknown = Principal::Network("ipv4:10.0.0.2:40004", kUnknownToken);
const Principal kNobody = Principal::Unidentified("unix:/run/gpukit/gpukitd.sock");

AccessRules ConfiguredRules() {
  AccessRules rules;
  rules.uid_tenants = {{1000, "vision"}, {1004, "speech"}};
  rules.gid_tenants = {{kVisionGid, "vision"}, {2001, "audio"}};
  rules.tenant_partitions = {{"vision", {"gpu-a", "default"}},
                             {"speech", {"gpu-b"}},
                             {"uid-1001", {}},  // Bob's own tenant: no partition at all
                             {"audio", {"gpu-b"}}};
  rules.admin_uids = {1005};
  rules.admin_gids = {kOpsGid};
  rules.tokens = {{kVisionToken, {"vision", false}}, {kAdminToken, {"ops", true}}};
  return rules;
}

std::shared_ptr<const AccessPolicy> Configured() {
  absl::StatusOr<std::shared_ptr<const AccessPolicy>> policy =
      AccessPolicy::Create(kDaemonUid, ConfiguredRules());
  EXPECT_TRUE(policy.ok()) << policy.status();
  return policy.ok() ? *policy : std::make_shared<const AccessPolicy>(kDaemonUid);
}

// A row's test name: its `name` field.
template <typename Case>
std::string RowName(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

// --- Who is an admin ---------------------------------------------------------------------

struct AdminCase {
  std::string name;
  Principal caller;
  bool admin_by_default;
  bool admin_configured;
};

class AdminRuleTest : public ::testing::TestWithParam<AdminCase> {};

TEST_P(AdminRuleTest, DecidesWhoIsAnAdmin) {
  const AdminCase& c = GetParam();
  EXPECT_EQ(AccessPolicy(kDaemonUid).IsAdmin(c.caller), c.admin_by_default) << "default rules";
  EXPECT_EQ(Configured()->IsAdmin(c.caller), c.admin_configured) << "configured rules";
}

INSTANTIATE_TEST_SUITE_P(
    Rows, AdminRuleTest,
    ::testing::Values(AdminCase{"Root", kRoot, true, true},
                      AdminCase{"DaemonUid", kDaemonUser, true, true},
                      AdminCase{"AdminUid", kOperator, false, true},
                      AdminCase{"AdminSupplementaryGroup", kOpsMember, false, true},
                      AdminCase{"AdminPrimaryGid", kOpsPrimary, false, true},
                      AdminCase{"MappedUser", kAlice, false, false},
                      AdminCase{"UnmappedUser", kBob, false, false},
                      AdminCase{"Tcp", kTcp, false, false},
                      AdminCase{"TcpWithATenantToken", kTcpVision, false, false},
                      AdminCase{"TcpWithAnAdminToken", kTcpAdmin, false, true},
                      AdminCase{"TcpWithAnUnknownToken", kTcpUnknown, false, false},
                      // A uid of 0 carried by a network principal means nothing.
                      AdminCase{"TcpWithUidZero",
                                Principal{Principal::Kind::kNetwork, 0, 0, 0, "ipv4:1.2.3.4:5", {}},
                                false, false},
                      AdminCase{"Unidentified", kNobody, false, false}),
    RowName<AdminCase>);

// --- Which tenant a caller acts as -----------------------------------------------------

struct TenantCase {
  std::string name;
  Principal caller;
  std::string by_default;
  std::string configured;
};

class TenantOfTest : public ::testing::TestWithParam<TenantCase> {};

TEST_P(TenantOfTest, MapsIdentityToATenant) {
  const TenantCase& c = GetParam();
  EXPECT_EQ(AccessPolicy(kDaemonUid).TenantOf(c.caller), c.by_default) << "default rules";
  EXPECT_EQ(Configured()->TenantOf(c.caller), c.configured) << "configured rules";
}

INSTANTIATE_TEST_SUITE_P(
    Rows, TenantOfTest,
    ::testing::Values(TenantCase{"UidMapping", kAlice, "uid-1000", "vision"},
                      TenantCase{"UnmappedUidIsItsOwnTenant", kBob, "uid-1001", "uid-1001"},
                      TenantCase{"PrimaryGidMapping", kCarol, "uid-1002", "vision"},
                      TenantCase{"FirstMappedSupplementaryGroup", kDave, "uid-1003", "vision"},
                      TenantCase{"UidWinsOverGroup", kErin, "uid-1004", "speech"},
                      TenantCase{"RootHasAnOwnTenantToo", kRoot, "uid-0", "uid-0"},
                      TenantCase{"TcpHasNone", kTcp, "", ""},
                      TenantCase{"TcpTokensTenant", kTcpVision, "", "vision"},
                      TenantCase{"TcpUnknownTokenHasNone", kTcpUnknown, "", ""},
                      TenantCase{"UnidentifiedHasNone", kNobody, "", ""}),
    RowName<TenantCase>);

// --- Which tenant a new session gets ---------------------------------------------------

struct OpenCase {
  std::string name;
  bool configured;
  Principal caller;
  std::string requested;
  std::string partition;
  absl::StatusCode code;
  std::string tenant;  // when OK; else a part of the message
};

class SessionTenantTest : public ::testing::TestWithParam<OpenCase> {};

TEST_P(SessionTenantTest, GivesTheCallersTenantOrRefuses) {
  const OpenCase& c = GetParam();
  const std::shared_ptr<const AccessPolicy> policy =
      c.configured ? Configured() : std::make_shared<const AccessPolicy>(kDaemonUid);
  absl::StatusOr<std::string> tenant = policy->SessionTenant(c.caller, c.requested, c.partition);
  if (c.code == absl::StatusCode::kOk) {
    ASSERT_TRUE(tenant.ok()) << tenant.status();
    EXPECT_EQ(*tenant, c.tenant);
  } else {
    EXPECT_THAT(tenant.status(), StatusIs(c.code, HasSubstr(c.tenant)));
  }
}

constexpr absl::StatusCode kOk = absl::StatusCode::kOk;
constexpr absl::StatusCode kDenied = absl::StatusCode::kPermissionDenied;

INSTANTIATE_TEST_SUITE_P(
    Rows, SessionTenantTest,
    ::testing::Values(
        // Default rules: every uid its own tenant, every partition.
        OpenCase{"DefaultEmptyTakesOwn", false, kBob, "", "default", kOk, "uid-1001"},
        OpenCase{"DefaultNamingOwn", false, kBob, "uid-1001", "gpu-a", kOk, "uid-1001"},
        OpenCase{"DefaultClaimingAnotherIsDenied", false, kBob, "vision", "default", kDenied,
                 "may not open a session for tenant \"vision\""},
        OpenCase{"DefaultClaimingAnotherUidIsDenied", false, kBob, "uid-1000", "default", kDenied,
                 "acts as tenant \"uid-1001\""},
        OpenCase{"DefaultAdminMayNameAny", false, kRoot, "victim", "default", kOk, "victim"},
        OpenCase{"DefaultDaemonUidMayNameAny", false, kDaemonUser, "team", "gpu-a", kOk, "team"},
        OpenCase{"DefaultAdminEmptyTakesOwn", false, kRoot, "", "default", kOk, "uid-0"},
        // Configured: mapped tenants and their partitions.
        OpenCase{"MappedEmptyTakesMapped", true, kAlice, "", "gpu-a", kOk, "vision"},
        OpenCase{"MappedNamingOwn", true, kAlice, "vision", "default", kOk, "vision"},
        OpenCase{"MappedClaimingOwnUidTenantIsDenied", true, kAlice, "uid-1000", "gpu-a", kDenied,
                 "acts as tenant \"vision\""},
        OpenCase{"MappedClaimingAnotherIsDenied", true, kAlice, "speech", "gpu-b", kDenied,
                 "for tenant \"speech\""},
        OpenCase{"PartitionNotListedIsDenied", true, kAlice, "", "gpu-b", kDenied,
                 "tenant \"vision\" may not use partition \"gpu-b\""},
        OpenCase{"GroupMappedPartition", true, kDave, "", "gpu-a", kOk, "vision"},
        OpenCase{"UidMappedOtherPartition", true, kErin, "", "gpu-b", kOk, "speech"},
        OpenCase{"UidMappedDeniedPartition", true, kErin, "", "gpu-a", kDenied,
                 "may not use partition \"gpu-a\""},
        OpenCase{"EmptyPartitionListAllowsNone", true, kBob, "", "default", kDenied,
                 "tenant \"uid-1001\" may not use partition \"default\""},
        OpenCase{"GroupMappedDefaultPartition", true, kCarol, "", "default", kOk, "vision"},
        OpenCase{"UnlistedOwnTenantMayUseAny", true, Principal::Local(1200, 1200, 20), "",
                 "anything", kOk, "uid-1200"},
        // Admins may open for any tenant in any partition, whatever its list says.
        OpenCase{"AdminUidMayNameAnyTenant", true, kOperator, "vision", "gpu-b", kOk, "vision"},
        OpenCase{"AdminGroupMayNameAnyTenant", true, kOpsMember, "uid-1001", "default", kOk,
                 "uid-1001"},
        OpenCase{"AdminEmptyTakesOwn", true, kOperator, "", "gpu-b", kOk, "uid-1005"},
        // TCP: the token is the identity.
        OpenCase{"TcpTokenEmptyTakesItsTenant", true, kTcpVision, "", "gpu-a", kOk, "vision"},
        OpenCase{"TcpTokenNamingItsTenant", true, kTcpVision, "vision", "default", kOk, "vision"},
        OpenCase{"TcpTokenClaimingAnotherIsDenied", true, kTcpVision, "speech", "gpu-b", kDenied,
                 "this token acts as tenant \"vision\""},
        OpenCase{"TcpTokensTenantsPartitions", true, kTcpVision, "", "gpu-b", kDenied,
                 "may not use partition \"gpu-b\""},
        OpenCase{"TcpAdminTokenMayNameAny", true, kTcpAdmin, "speech", "gpu-a", kOk, "speech"},
        OpenCase{"TcpWithoutTokenIsUnauthenticated", true, kTcp, "vision", "default",
                 absl::StatusCode::kUnauthenticated, "valid bearer token"},
        OpenCase{"TcpUnknownTokenIsUnauthenticated", true, kTcpUnknown, "", "default",
                 absl::StatusCode::kUnauthenticated, "valid bearer token"},
        OpenCase{"TcpByDefaultIsUnauthenticated", false, kTcp, "", "default",
                 absl::StatusCode::kUnauthenticated, "valid bearer token"},
        OpenCase{"UnidentifiedMayNotOpen", false, kNobody, "x", "default",
                 absl::StatusCode::kUnauthenticated, "no identity"}),
    RowName<OpenCase>);

// --- Sessions: a configured policy keeps the uid rule --------------------------------

TEST(AccessPolicy, SessionsBelongToTheOpenersUidNotToItsTenant) {
  const std::shared_ptr<const AccessPolicy> policy = Configured();
  // Alice and Carol are both "vision", but a session's arrays are its opener's.
  EXPECT_FALSE(policy->MayUseSession(kCarol, kAlice));
  EXPECT_FALSE(policy->MaySeeSession(kCarol, kAlice));
  EXPECT_TRUE(policy->MayUseSession(kAlice, Principal::Local(1000, 77, 99)));
  // Configured admins use and see every session; a TCP caller none of the local ones.
  EXPECT_TRUE(policy->MayUseSession(kOpsMember, kAlice));
  EXPECT_TRUE(policy->MaySeeSession(kOperator, kTcp));
  EXPECT_FALSE(policy->MayUseSession(kTcp, kAlice));
}

TEST(AccessPolicy, TcpSessionsBelongToTheirToken) {
  const std::shared_ptr<const AccessPolicy> policy = Configured();
  // Another connection with the same token: the same client.
  EXPECT_TRUE(policy->MayUseSession(kTcpVision2, kTcpVision));
  EXPECT_TRUE(policy->MaySeeSession(kTcpVision2, kTcpVision));
  // No token, an unknown one, or a session opened without one: nothing.
  EXPECT_FALSE(policy->MayUseSession(kTcp, kTcpVision));
  EXPECT_FALSE(policy->MayUseSession(kTcpUnknown, kTcpVision));
  EXPECT_FALSE(policy->MayUseSession(kTcp, kTcp));
  EXPECT_FALSE(policy->MaySeeSession(kTcpVision, kTcp));
  // Local sessions are not a token's, even of its tenant; an admin token may use all.
  EXPECT_FALSE(policy->MayUseSession(kTcpVision, kAlice));
  EXPECT_TRUE(policy->MayUseSession(kTcpAdmin, kAlice));
  EXPECT_TRUE(policy->MaySeeSession(kTcpAdmin, kTcpVision));
  // A local caller of the token's tenant may not use the token's session.
  EXPECT_FALSE(policy->MayUseSession(kAlice, kTcpVision));
  EXPECT_TRUE(policy->Authenticated(kTcpVision));
  EXPECT_FALSE(policy->Authenticated(kTcpUnknown));
  EXPECT_TRUE(policy->Authenticated(kBob));
  EXPECT_FALSE(policy->Authenticated(kNobody));
}

TEST(AccessPolicy, ConfiguredOnlyWhenCreatedFromRules) {
  EXPECT_FALSE(AccessPolicy(kDaemonUid).configured());
  EXPECT_TRUE(Configured()->configured());
  EXPECT_EQ(Configured()->daemon_uid(), kDaemonUid);
}

// --- Bad rules are refused, naming the entry -------------------------------------------

struct BadRulesCase {
  std::string name;
  AccessRules rules;
  std::string message;
};

class BadRulesTest : public ::testing::TestWithParam<BadRulesCase> {};

TEST_P(BadRulesTest, AreRefusedNamingTheEntry) {
  EXPECT_THAT(AccessPolicy::Create(kDaemonUid, GetParam().rules).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(GetParam().message)));
}

AccessRules WithUidTenant(std::string tenant) {
  AccessRules rules;
  rules.uid_tenants = {{1000, std::move(tenant)}};
  return rules;
}

AccessRules WithGidTenant(std::string tenant) {
  AccessRules rules;
  rules.gid_tenants = {{2000, std::move(tenant)}};
  return rules;
}

AccessRules WithPartitions(std::string tenant, std::vector<std::string> partitions) {
  AccessRules rules;
  rules.tenant_partitions = {{std::move(tenant), std::move(partitions)}};
  return rules;
}

AccessRules WithToken(std::string hash, std::string tenant) {
  AccessRules rules;
  rules.tokens = {{std::move(hash), {std::move(tenant), false}}};
  return rules;
}

INSTANTIATE_TEST_SUITE_P(
    Rows, BadRulesTest,
    ::testing::Values(
        BadRulesCase{"EmptyUidTenant", WithUidTenant(""), "access.uids[\"1000\"]"},
        BadRulesCase{"UidTenantWithSpace", WithUidTenant("a b"), "access.uids[\"1000\"]"},
        BadRulesCase{"LongUidTenant", WithUidTenant(std::string(64, 'a')), "1 to 63"},
        BadRulesCase{"GidTenantWithEscape", WithGidTenant("x\x1b[31m"), "\\x1b"},
        BadRulesCase{"BadTenantName", WithPartitions("a/b", {"default"}), "access.tenants[].name"},
        BadRulesCase{"BadPartitionName", WithPartitions("vision", {"gpu a"}),
                     "access.tenants[\"vision\"].partitions[]"},
        BadRulesCase{"ShortTokenHash", WithToken(std::string(63, 'a'), "t"),
                     "64 lowercase hex digits"},
        BadRulesCase{"UppercaseTokenHash", WithToken(std::string(64, 'A'), "t"),
                     "64 lowercase hex digits"},
        BadRulesCase{"TokenWithBadTenant", WithToken(std::string(64, 'a'), "a b"),
                     "access.tokens[\"aaaaaaaaaaaa...\"].tenant"}),
    RowName<BadRulesCase>);

TEST(AccessPolicy, OwnTenantNamesAreValidTenantNames) {
  EXPECT_EQ(OwnTenantName(0), "uid-0");
  EXPECT_EQ(OwnTenantName(4294967294u), "uid-4294967294");
  // The longest is well inside the tenant rule, so the default can never be refused.
  EXPECT_TRUE(AccessPolicy::Create(kDaemonUid, WithUidTenant(OwnTenantName(4294967295u))).ok());
}

// A tenant the access rules may name is one a session may open for, and no longer one.
TEST(AccessPolicy, RulesAndOpenSessionAgreeOnTheLongestTenant) {
  for (size_t length : {kMaxTenantLength, kMaxTenantLength + 1}) {
    const std::string tenant(length, 't');
    OpenSessionParams params;
    params.tenant = tenant;
    const bool opens = ValidateOpenSessionParams(params).ok();
    EXPECT_EQ(opens, length <= 63) << length;
    EXPECT_EQ(AccessPolicy::Create(kDaemonUid, WithUidTenant(tenant)).ok(), opens) << length;
  }
}

}  // namespace
}  // namespace gpukit
