// Who may use and see a session (daemon/session/access_policy.h): the rule as a table of
// (caller, owner) rows, with gpukitd running as uid 500.
#include "daemon/session/principal.h"

#include <string>

#include "daemon/session/access_policy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpukit {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kDaemonUid = 500;

const Principal kRoot = Principal::Local(0, 0, 10);
const Principal kDaemonUser = Principal::Local(kDaemonUid, kDaemonUid, 11);
const Principal kAlice = Principal::Local(1000, 1000, 12);
const Principal kAliceOtherProcess = Principal::Local(1000, 2000, 13);
const Principal kBob = Principal::Local(1001, 1001, 14);
const Principal kTcpA = Principal::Network("ipv4:10.0.0.2:40000");
const Principal kTcpB = Principal::Network("ipv6:[::1]:40001");
const Principal kNobody = Principal::Unidentified("unix:/run/gpukit/gpukitd.sock");

struct AccessCase {
  std::string name;
  Principal caller;
  Principal owner;
  bool may_use;
  bool may_see;
};

class AccessPolicyTest : public ::testing::TestWithParam<AccessCase> {};

TEST_P(AccessPolicyTest, DecidesUseAndListing) {
  const AccessCase& c = GetParam();
  const AccessPolicy policy(kDaemonUid);
  EXPECT_EQ(policy.MayUseSession(c.caller, c.owner), c.may_use)
      << c.caller.Describe() << " using a session of " << c.owner.Describe();
  EXPECT_EQ(policy.MaySeeSession(c.caller, c.owner), c.may_see)
      << c.caller.Describe() << " listing a session of " << c.owner.Describe();
}

INSTANTIATE_TEST_SUITE_P(
    Rows, AccessPolicyTest,
    ::testing::Values(
        // Admins: root and the daemon's own uid, on the unix socket, use and see all.
        AccessCase{"RootOnOwnSession", kRoot, kRoot, true, true},
        AccessCase{"RootOnLocalSession", kRoot, kAlice, true, true},
        AccessCase{"RootOnTcpSession", kRoot, kTcpA, true, true},
        AccessCase{"RootOnUnidentifiedSession", kRoot, kNobody, true, true},
        AccessCase{"DaemonUidOnLocalSession", kDaemonUser, kAlice, true, true},
        AccessCase{"DaemonUidOnTcpSession", kDaemonUser, kTcpA, true, true},
        // A local caller: sessions of its uid, from any of its processes and groups.
        AccessCase{"OwnerItself", kAlice, kAlice, true, true},
        AccessCase{"SameUidOtherProcess", kAliceOtherProcess, kAlice, true, true},
        AccessCase{"OtherUid", kBob, kAlice, false, false},
        AccessCase{"UserOnRootSession", kAlice, kRoot, false, false},
        AccessCase{"UserOnDaemonUidSession", kAlice, kDaemonUser, false, false},
        AccessCase{"LocalUserOnTcpSession", kAlice, kTcpA, false, false},
        AccessCase{"LocalUserOnUnidentifiedSession", kAlice, kNobody, false, false},
        // TCP without a token (the default policy lists none): nothing, not even sessions
        // opened over TCP (token-holding callers: access_policy_test.cc).
        AccessCase{"TcpOnTcpSession", kTcpA, kTcpA, false, false},
        AccessCase{"TcpOnOtherTcpPeersSession", kTcpB, kTcpA, false, false},
        AccessCase{"TcpOnLocalSession", kTcpA, kAlice, false, false},
        AccessCase{"TcpOnRootSession", kTcpA, kRoot, false, false},
        // A root uid claimed over TCP means nothing: TCP callers have no uid.
        AccessCase{"TcpWithUidZeroFieldOnRootSession",
                   Principal{Principal::Kind::kNetwork, 0, 0, 0, "ipv4:1.2.3.4:5", {}}, kRoot,
                   false, false},
        // Unidentified callers use and see nothing, not even their own sessions.
        AccessCase{"UnidentifiedOnOwnSession", kNobody, kNobody, false, false},
        AccessCase{"UnidentifiedOnLocalSession", kNobody, kAlice, false, false},
        AccessCase{"UnidentifiedOnTcpSession", kNobody, kTcpA, false, false}),
    [](const ::testing::TestParamInfo<AccessCase>& info) { return info.param.name; });

TEST(AccessPolicy, AdminsAreLocalRootAndTheDaemonsUid) {
  const AccessPolicy policy(kDaemonUid);
  EXPECT_TRUE(policy.IsAdmin(kRoot));
  EXPECT_TRUE(policy.IsAdmin(kDaemonUser));
  EXPECT_FALSE(policy.IsAdmin(kAlice));
  EXPECT_FALSE(policy.IsAdmin(kTcpA));
  EXPECT_FALSE(policy.IsAdmin(Principal{Principal::Kind::kNetwork, 0, 0, 0, "ipv4:1.2.3.4:5", {}}));
  EXPECT_FALSE(policy.IsAdmin(Principal{Principal::Kind::kUnidentified, 0, 0, 0, "", {}}));
  // A daemon running as root has root as its only admin uid.
  EXPECT_FALSE(AccessPolicy(0).IsAdmin(kDaemonUser));
}

TEST(Principal, DescribesItselfForLogs) {
  EXPECT_EQ(kAlice.Describe(), "uid=1000 gid=1000 pid=12");
  EXPECT_EQ(kTcpA.Describe(), "tcp peer=ipv4:10.0.0.2:40000");
  EXPECT_EQ(Principal::Network("ipv4:10.0.0.2:40000", std::string(64, 'a')).Describe(),
            "tcp peer=ipv4:10.0.0.2:40000 token=aaaaaaaaaaaa");
  EXPECT_THAT(Principal::Network("ipv4:\x1b[31m").Describe(), HasSubstr("\\x1b[31m"));
  EXPECT_THAT(kNobody.Describe(), HasSubstr("unidentified"));
}

}  // namespace
}  // namespace gpukit
