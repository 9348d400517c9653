// AccessGuard's policy pointer (daemon/service/access_guard.h): SetPolicy replaces it while
// requests read it, and every reader sees one whole policy, old or new, never a mix.
#include "daemon/service/access_guard.h"

#include <atomic>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "daemon/scheduler/clock.h"
#include "daemon/service/peer_table.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_device.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::service {
namespace {

constexpr uint32_t kDaemonUid = 500;
const Principal kOperator = Principal::Local(1005, 1005, 7);

// A policy under which uid 1005 is an admin and tenant `tenant`, or neither.
std::shared_ptr<const AccessPolicy> Policy(bool operator_is_admin, const std::string& tenant) {
  AccessRules rules;
  if (operator_is_admin) rules.admin_uids = {1005};
  rules.uid_tenants = {{1005, tenant}};
  absl::StatusOr<std::shared_ptr<const AccessPolicy>> policy =
      AccessPolicy::Create(kDaemonUid, std::move(rules));
  EXPECT_TRUE(policy.ok()) << policy.status();
  return *policy;
}

class AccessGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::unique_ptr<Device>> devices;
    CpuDeviceOptions options;
    options.memory_bytes = int64_t{1} << 20;
    devices.push_back(*CpuDevice::Create(options));
    GPUKIT_ASSERT_OK_AND_ASSIGN(core_, Core::Create(clock_, std::move(devices), CoreOptions{}));
  }

  SystemClock clock_;
  std::unique_ptr<Core> core_;
  PeerTable peers_;
};

TEST_F(AccessGuardTest, SetPolicyIsSeenWholeByRequestsThatStartAfterIt) {
  const std::shared_ptr<const AccessPolicy> first = Policy(false, "before");
  AccessGuard guard(*core_, peers_, first);
  EXPECT_EQ(guard.policy(), first);
  EXPECT_FALSE(guard.policy()->IsAdmin(kOperator));
  const std::shared_ptr<const AccessPolicy> held = guard.policy();  // a request in flight

  const std::shared_ptr<const AccessPolicy> second = Policy(true, "after");
  guard.SetPolicy(second);
  EXPECT_EQ(guard.policy(), second);
  EXPECT_TRUE(guard.policy()->IsAdmin(kOperator));
  EXPECT_EQ(guard.policy()->TenantOf(kOperator), "after");
  // The request that took the old one keeps deciding with it, whole.
  EXPECT_FALSE(held->IsAdmin(kOperator));
  EXPECT_EQ(held->TenantOf(kOperator), "before");
}

TEST_F(AccessGuardTest, ReadersDuringManySwapsAlwaysSeeAConsistentPolicy) {
  const std::shared_ptr<const AccessPolicy> plain = Policy(false, "plain");
  const std::shared_ptr<const AccessPolicy> admin = Policy(true, "admin");
  AccessGuard guard(*core_, peers_, plain);
  std::atomic<bool> stop{false};
  std::atomic<int> mixed{0};
  std::atomic<int64_t> reads{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 4; ++i) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        const std::shared_ptr<const AccessPolicy> policy = guard.policy();
        const bool is_admin = policy->IsAdmin(kOperator);
        const std::string tenant = policy->TenantOf(kOperator);
        // One policy: admin with tenant "admin", or neither.
        if (is_admin != (tenant == "admin") || (policy != plain && policy != admin)) ++mixed;
        ++reads;
      }
    });
  }
  for (int swap = 0; swap < 2000; ++swap) guard.SetPolicy(swap % 2 == 0 ? admin : plain);
  // Let every reader read at least once more after the last swap, then stop them.
  const int64_t after = reads.load();
  while (reads.load() < after + 4) std::this_thread::yield();
  stop = true;
  for (std::thread& reader : readers) reader.join();
  EXPECT_EQ(mixed.load(), 0);
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(guard.policy(), plain);  // the last swap's
}

}  // namespace
}  // namespace gpukit::service
