// DaemonMetrics over a Core with a CPU device and a FakeClock: every family is there from
// the start, the figures follow what the Core and its scheduler list, the RPC families come
// with an RpcMetrics only, and every metric written is documented in docs/operations.md.
#include "daemon/metrics/daemon_metrics.h"

#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "daemon/scheduler/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_device.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kDeviceBytes = int64_t{64} << 20;

// Sample values by series ("name{labels}"), and the names of the families ("# TYPE" lines).
struct Parsed {
  std::map<std::string, double> samples;
  std::vector<std::string> families;
};

Parsed Parse(const std::string& text) {
  Parsed out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&line, "# TYPE ")) {
      out.families.emplace_back(line.substr(0, line.find(' ')));
      continue;
    }
    if (line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    double value = 0;
    EXPECT_TRUE(absl::SimpleAtod(line.substr(space + 1), &value) ||
                line.substr(space + 1) == "+Inf")
        << line;
    out.samples[std::string(line.substr(0, space))] = value;
  }
  return out;
}

class DaemonMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CpuDeviceOptions device_options;
    device_options.memory_bytes = kDeviceBytes;
    std::vector<std::unique_ptr<Device>> devices;
    devices.push_back(*CpuDevice::Create(device_options));
    CoreOptions options;
    options.partitions = {{.name = "default", .memory_quota_bytes = 32 << 20, .compute_share = 1}};
    GPUKIT_ASSERT_OK_AND_ASSIGN(core_, Core::Create(clock_, std::move(devices), options));
  }

  std::string Open(const std::string& tenant) {
    OpenSessionParams params;
    params.tenant = tenant;
    absl::StatusOr<SessionGrant> grant = core_->OpenSession(params);
    EXPECT_THAT(grant, ::gpukit::testing::IsOk());
    return grant.ok() ? grant->session_id : "";
  }

  FakeClock clock_;
  std::unique_ptr<Core> core_;
};

TEST_F(DaemonMetricsTest, EveryFamilyIsThereBeforeAnySession) {
  RpcMetrics rpc;
  DaemonMetrics metrics(*core_, &rpc, {.version = "9.9.9", .started_at = absl::FromUnixSeconds(7)});
  const Parsed p = Parse(metrics.Render());
  EXPECT_EQ(p.samples.at("gpukit_build_info{version=\"9.9.9\",backend=\"cpu\"}"), 1);
  EXPECT_EQ(p.samples.at("gpukit_start_time_seconds"), 7);
  EXPECT_EQ(p.samples.at("gpukit_sessions"), 0);
  EXPECT_EQ(p.samples.at("gpukit_device_memory_total_bytes{device=\"0\"}"), kDeviceBytes);
  EXPECT_EQ(p.samples.at("gpukit_device_busy_seconds_total{device=\"0\"}"), 0);
  EXPECT_EQ(p.samples.at("gpukit_partition_memory_quota_bytes{partition=\"default\",device=\"0\"}"),
            32 << 20);
  for (const char* series : {"gpukit_executor_restarts_total{device=\"0\"}",
                             "gpukit_executor_messages_total{device=\"0\"}",
                             "gpukit_executor_round_trips_total{device=\"0\"}"}) {
    EXPECT_EQ(p.samples.count(series), 0u) << series << ": an in-process device has no executor";
  }
  for (const char* family :
       {"gpukit_tenant_gpu_seconds_total", "gpukit_jit_cache_hits_total",
        "gpukit_rpc_requests_total", "gpukit_rpc_duration_seconds",
        "gpukit_partition_throttled_seconds_total", "gpukit_partition_admissions_total"}) {
    EXPECT_THAT(p.families, ::testing::Contains(family));
  }
}

TEST_F(DaemonMetricsTest, FiguresFollowWhatTheCoreLists) {
  const std::string s = Open("team-a");
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView a, core_->CreateArray(s, {DType::kFloat32, {1024}}));
  OpInput in;
  in.handle = a.handle;
  GPUKIT_ASSERT_OK(core_->RunOp(s, "add", {in, in}, {}));
  EXPECT_THAT(core_->RunOp(s, "add", {in}, {}), Not(::gpukit::testing::IsOk()));

  DaemonMetrics metrics(*core_, nullptr, {.version = "v", .started_at = clock_.Now()});
  const std::string text = metrics.Render();
  const Parsed p = Parse(text);
  const PartitionStatus partition = core_->scheduler().ListPartitions().at(0);
  const TenantUsage tenant = core_->ListTenants().at(0);
  const std::string labels = "partition=\"default\",device=\"0\"";
  EXPECT_EQ(p.samples.at("gpukit_sessions"), 1);
  EXPECT_EQ(p.samples.at("gpukit_arrays"), core_->array_count());
  EXPECT_EQ(p.samples.at("gpukit_device_memory_used_bytes{device=\"0\"}"),
            core_->ListDevices().at(0).memory_used_bytes);
  EXPECT_EQ(p.samples.at("gpukit_partition_memory_used_bytes{" + labels + "}"),
            partition.memory_used_bytes);
  EXPECT_GT(partition.memory_used_bytes, 0);
  EXPECT_EQ(p.samples.at("gpukit_partition_sessions{" + labels + "}"), 1);
  EXPECT_EQ(
      p.samples.at("gpukit_partition_tasks_completed_total{" + labels + ",result=\"succeeded\"}"),
      partition.succeeded_total);
  EXPECT_EQ(p.samples.at("gpukit_partition_admissions_total{" + labels + ",result=\"admitted\"}"),
            partition.admitted_total);
  EXPECT_DOUBLE_EQ(
      p.samples.at("gpukit_partition_gpu_seconds_total{" + labels + ",qos=\"BestEffort\"}"),
      absl::ToDoubleSeconds(partition.device_time_total));
  EXPECT_DOUBLE_EQ(p.samples.at("gpukit_device_busy_seconds_total{device=\"0\"}"),
                   absl::ToDoubleSeconds(partition.device_time_total));
  EXPECT_EQ(p.samples.at("gpukit_tenant_memory_used_bytes{tenant=\"team-a\"}"),
            tenant.memory_used_bytes);
  EXPECT_EQ(
      p.samples.at("gpukit_tenant_tasks_completed_total{tenant=\"team-a\",result=\"succeeded\"}"),
      tenant.tasks_finished - tenant.tasks_failed);
  EXPECT_THAT(text, Not(HasSubstr("gpukit_rpc_"))) << "no RpcMetrics given";
}

TEST_F(DaemonMetricsTest, EveryMetricWrittenIsDocumentedInOperationsMd) {
  std::ifstream file(GPUKIT_SOURCE_DIR "/docs/operations.md");
  ASSERT_TRUE(file) << "docs/operations.md not found";
  const std::string docs((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  RpcMetrics rpc;
  DaemonMetrics metrics(*core_, &rpc, {.version = "v", .started_at = clock_.Now()});
  const Parsed p = Parse(metrics.Render());
  ASSERT_GT(p.families.size(), 30u);
  for (const std::string& family : p.families) {
    EXPECT_THAT(docs, HasSubstr("| `" + family + "` |")) << family << " is not in the table";
  }
}

}  // namespace
}  // namespace gpukit
