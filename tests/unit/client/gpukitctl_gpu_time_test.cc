// How gpukitctl shows GPU time: the cells of device time and its split by QoS class, and
// `top`'s GPU% (device time gained between two refreshes over the daemon's uptime between
// them), which can pass 100% when tasks on different streams overlap.
#include <string>

#include "client/cpp/gpukitctl_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpukit::ctl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

constexpr int64_t kMs = 1000 * 1000;  // nanoseconds

TEST(GpuTimeCellsTest, DeviceTimeIsShownLikeOtherDurationsAndSplitGuaranteedFirst) {
  EXPECT_EQ(DeviceTimeCell(0), "0us");
  EXPECT_EQ(DeviceTimeCell(850 * 1000), "850us");
  EXPECT_EQ(DeviceTimeCell(12500 * 1000), "12.5ms");
  EXPECT_EQ(DeviceTimeCell(3200 * kMs), "3.2s");
  v1::DeviceTimeByQos split;
  split.set_guaranteed_ns(3200 * kMs);
  split.set_best_effort_ns(12500 * 1000);
  EXPECT_EQ(QosSplitCell(split), "3.2s/0us/12.5ms");
  EXPECT_EQ(PercentCell(std::nullopt), "-");
  EXPECT_EQ(PercentCell(37.54), "37.5%");
  EXPECT_EQ(PercentCell(150), "150%");
}

TEST(GpuTimeCellsTest, TenantsTableHasOneRowPerTenantWithItsTotalsAndSplit) {
  v1::ListTenantsResponse response;
  v1::TenantUsage* t = response.add_tenants();
  t->set_tenant("alpha");
  t->set_sessions(2);
  t->set_memory_used_bytes(4096);
  t->set_device_time_ns(1500 * kMs);
  t->mutable_device_time_by_qos()->set_guaranteed_ns(1000 * kMs);
  t->mutable_device_time_by_qos()->set_burstable_ns(500 * kMs);
  t->set_tasks_finished(12);
  t->set_tasks_failed(1);
  EXPECT_THAT(TenantsTable(response),
              ElementsAre(ElementsAre("TENANT", "SESSIONS", "MEMORY", "GPU-TIME", "BY-QOS(G/B/BE)",
                                      "TASKS", "FAILED"),
                          ElementsAre("alpha", "2", "4 KiB", "1.5s", "1s/500ms/0us", "12", "1")));
}

v1::SessionInfo Session(const std::string& id, int64_t device_time_ns) {
  v1::SessionInfo s;
  s.set_session_id(id);
  s.set_device_time_ns(device_time_ns);
  return s;
}

TopSnapshot Snapshot(int64_t uptime_ms, const std::vector<v1::SessionInfo>& sessions,
                     const std::vector<std::pair<std::string, int64_t>>& tenants, int keep = 10) {
  TopSnapshot snapshot;
  snapshot.status.set_uptime_ms(uptime_ms);
  v1::ListSessionsResponse listed;
  for (const v1::SessionInfo& s : sessions) *listed.add_sessions() = s;
  KeepBusiest(listed, keep, &snapshot);
  for (const auto& [name, ns] : tenants) {
    v1::TenantUsage* t = snapshot.tenants.add_tenants();
    t->set_tenant(name);
    t->set_device_time_ns(ns);
  }
  snapshot.has_tenants = true;
  return snapshot;
}

TEST(GpuPercentTest, IsTheDeviceTimeGainedOverTheUptimeBetweenTwoRefreshes) {
  const TopSnapshot before = Snapshot(
      1000, {Session("s-old", 100 * kMs), Session("s-gone", 5 * kMs)}, {{"alpha", 100 * kMs}});
  // s-new opened in between: all its time is new. Only one session is shown, but GPU% is
  // known for every session, so the next refresh can show any of them.
  TopSnapshot after = Snapshot(3000, {Session("s-old", 600 * kMs), Session("s-new", 100 * kMs)},
                               {{"alpha", 700 * kMs}, {"beta", 3000 * kMs}}, /*keep=*/1);
  AddGpuPercent(before, &after);
  EXPECT_THAT(after.session_gpu_percent, ElementsAre(Pair("s-new", 5.0), Pair("s-old", 25.0)));
  // Tasks on different streams overlap: 3 s of device time in 2 s of wall time.
  EXPECT_THAT(after.tenant_gpu_percent, ElementsAre(Pair("alpha", 30.0), Pair("beta", 150.0)));
}

TEST(GpuPercentTest, NothingWithoutUptimeBetweenTheRefreshes) {
  const TopSnapshot before = Snapshot(1000, {Session("s-1", 0)}, {{"alpha", 0}});
  TopSnapshot after = Snapshot(1000, {Session("s-1", 5 * kMs)}, {{"alpha", 5 * kMs}});
  after.session_gpu_percent["stale"] = 1;
  AddGpuPercent(before, &after);
  EXPECT_THAT(after.session_gpu_percent, IsEmpty());
  EXPECT_THAT(after.tenant_gpu_percent, IsEmpty());
}

TEST(GpuPercentTest, TopFrameShowsTenantsAndEachSessionsGpuTimeAndPercent) {
  const TopSnapshot before = Snapshot(1000, {Session("s-1", 0)}, {{"alpha", 0}});
  TopSnapshot after = Snapshot(2000, {Session("s-1", 250 * kMs)}, {{"alpha", 250 * kMs}});
  AddGpuPercent(before, &after);
  const std::string frame = RenderTopFrame(after);
  EXPECT_THAT(frame, HasSubstr("\nTENANT "));
  EXPECT_THAT(frame, HasSubstr("GPU%"));
  EXPECT_THAT(frame, testing::ContainsRegex("alpha +0 +0 B +250ms +0us/0us/0us +25%"));
  EXPECT_THAT(frame, testing::ContainsRegex("s-1 .*250ms +25% "));
  // Without ListTenants (an older daemon) there is no tenants table.
  after.has_tenants = false;
  EXPECT_THAT(RenderTopFrame(after), testing::Not(HasSubstr("\nTENANT ")));
}

}  // namespace
}  // namespace gpukit::ctl
