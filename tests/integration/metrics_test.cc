// gpukitd's Prometheus metrics (--metrics-address 127.0.0.1:0), scraped over HTTP from a live
// daemon after sessions, ops, a quota refusal and failing RPCs: every figure that gpukitctl
// shows (the Admin RPCs) reads the same in the scrape, and the RPC counters count the calls
// the test made with the codes it got. tests/python/test_metrics.py parses the same text with
// Prometheus' own Python parser.
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kMiB = int64_t{1} << 20;

struct Label {
  std::string name;
  std::string value;
};

// A series as the exposition writes it: name{a="x",b="y"}.
std::string Series(const std::string& name, const std::vector<Label>& labels = {}) {
  std::string out = name;
  if (labels.empty()) return out;
  out += '{';
  for (size_t i = 0; i < labels.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ",", labels[i].name, "=\"", labels[i].value, "\"");
  }
  return out + '}';
}

// Every sample of an exposition by its series (the text before the value).
std::map<std::string, double> ParseSamples(const std::string& text) {
  std::map<std::string, double> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    double value = 0;
    EXPECT_NE(space, absl::string_view::npos) << line;
    if (space == absl::string_view::npos) continue;
    const absl::string_view number = line.substr(space + 1);
    if (number == "+Inf") {
      value = std::numeric_limits<double>::infinity();
    } else {
      EXPECT_TRUE(absl::SimpleAtod(number, &value)) << line;
    }
    EXPECT_TRUE(samples.emplace(std::string(line.substr(0, space)), value).second)
        << "series twice: " << line;
  }
  return samples;
}

class MetricsTest : public DaemonTest {
 protected:
  std::string DaemonConfigJson() const override {
    return R"({"partitions": [{"name": "small", "memory": "8MiB", "compute": 0.25}],
               "jit": {"cacheDir": "none"}})";
  }
  void ConfigureDaemon(DaemonOptions& options) const override {
    options.extra_args = {"--metrics-address", "127.0.0.1:0"};
  }

  // The port gpukitd logged: "metrics: serving http://127.0.0.1:PORT/metrics".
  int MetricsPort() {
    std::smatch match;
    const std::string log = daemon().Log();
    const std::regex logged("metrics: serving http://127\\.0\\.0\\.1:([0-9]+)/metrics");
    if (!std::regex_search(log, match, logged)) {
      ADD_FAILURE() << "no metrics line in the log:\n" << log;
      return 0;
    }
    return std::stoi(match[1]);
  }

  std::string Scrape(const std::string& path = "/metrics", int* status = nullptr) {
    httplib::Client http("127.0.0.1", MetricsPort());
    http.set_read_timeout(10);
    httplib::Result result = http.Get(path.c_str());
    if (!result) {
      ADD_FAILURE() << "GET " << path << " failed: " << httplib::to_string(result.error());
      return "";
    }
    if (status != nullptr) *status = result->status;
    if (path == "/metrics") {
      EXPECT_EQ(result->status, 200);
      EXPECT_THAT(result->get_header_value("Content-Type"),
                  StartsWith("text/plain; version=0.0.4"));
    }
    return result->body;
  }
};

TEST_F(MetricsTest, ScrapeAgreesWithTheAdminRpcsForTheSameState) {
  // Work: two tenants, ops in "default", a refusal of the "small" partition's quota.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> a, Connect("team-a"));
  std::vector<float> values(4096, 1.0f);
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array x, a->FromVector(values, {64, 64}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array y, a->Add(x, x));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array z, a->Matmul(y, x));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> out, z.ToVector<float>());
  ASSERT_EQ(out.size(), values.size());

  ClientOptions small_options = ClientOptionsFor("team-b");
  small_options.partition = "small";
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> b, Client::Connect(small_options));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array small, b->FromVector(values, {4096}));
  EXPECT_THAT(b->Empty({16 * kMiB / 4}, DType::kFloat32),
              StatusIs(absl::StatusCode::kResourceExhausted));

  // Failing RPCs, each counted under its method and code.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string raw_session, api().OpenSession("team-c"));
  EXPECT_THAT(api().Describe(raw_session, "a-no-such-array"),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(api().Describe(raw_session, "a-no-such-array"),
              StatusIs(absl::StatusCode::kNotFound));
  v1::RunOpRequest unknown_op;
  unknown_op.set_session_id(raw_session);
  unknown_op.set_op("no_such_op");
  const absl::Status op_status = api().RunOp(unknown_op).status();
  ASSERT_FALSE(op_status.ok());

  // The state as gpukitctl reads it, then the scrape: nothing runs in between.
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::StatusResponse status, api().Status());
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListDevicesResponse devices, api().ListDevices());
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListPartitionsResponse partitions, api().ListPartitions());
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListTenantsResponse tenants, api().ListTenants());
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse sessions, api().ListSessions());
  const std::string text = Scrape();
  const std::map<std::string, double> m = ParseSamples(text);
  auto value = [&](const std::string& name, const std::vector<Label>& labels = {}) {
    auto it = m.find(Series(name, labels));
    EXPECT_NE(it, m.end()) << "no series " << Series(name, labels) << " in:\n" << text;
    return it == m.end() ? -1.0 : it->second;
  };

  EXPECT_EQ(value("gpukit_sessions"), status.sessions());
  EXPECT_EQ(value("gpukit_arrays"), status.arrays());
  EXPECT_EQ(value("gpukit_build_info", {{"version", status.version()}, {"backend", "cpu"}}), 1);

  ASSERT_EQ(devices.devices_size(), 1);
  double partitions_ns = 0;
  for (const v1::PartitionStatus& p : partitions.partitions()) {
    partitions_ns += static_cast<double>(p.device_time_ns());
  }
  for (const v1::DeviceInfo& d : devices.devices()) {
    const std::vector<Label> device = {{"device", absl::StrCat(d.index())}};
    EXPECT_EQ(value("gpukit_device_memory_total_bytes", device), d.memory_total_bytes());
    EXPECT_EQ(value("gpukit_device_memory_used_bytes", device), d.memory_used_bytes());
    EXPECT_EQ(value("gpukit_executor_restarts_total", device), d.executor().restarts());
    EXPECT_GT(value("gpukit_executor_messages_total", device), 0) << "the ops went to the executor";
    EXPECT_GT(value("gpukit_executor_round_trips_total", device), 0)
        << "their ends were waited for";
    EXPECT_NEAR(value("gpukit_device_busy_seconds_total", device), partitions_ns / 1e9, 1e-9)
        << "no partition was deleted: the device's busy time is theirs";
  }
  EXPECT_GT(partitions_ns, 0) << "the ops ran and were measured";

  std::map<std::string, int64_t> spilled;
  for (const v1::SessionInfo& s : sessions.sessions()) spilled[s.partition()] += s.spilled_bytes();
  ASSERT_EQ(partitions.partitions_size(), 2);
  for (const v1::PartitionStatus& p : partitions.partitions()) {
    const std::string& name = p.partition().name();
    const std::string device = absl::StrCat(p.partition().device_index());
    const std::vector<Label> labels = {{"partition", name}, {"device", device}};
    SCOPED_TRACE(name);
    EXPECT_EQ(value("gpukit_partition_memory_quota_bytes", labels),
              p.partition().memory_quota_bytes());
    EXPECT_EQ(value("gpukit_partition_memory_used_bytes", labels), p.memory_used_bytes());
    EXPECT_EQ(value("gpukit_partition_memory_requested_bytes", labels), p.memory_requested_bytes());
    EXPECT_EQ(value("gpukit_partition_spilled_bytes", labels), spilled[name]);
    EXPECT_EQ(value("gpukit_partition_sessions", labels), p.sessions());
    EXPECT_EQ(value("gpukit_partition_queue_depth", labels), p.queued_tasks());
    EXPECT_EQ(value("gpukit_partition_tasks",
                    {{"partition", name}, {"device", device}, {"state", "queued"}}),
              p.queued_tasks());
    EXPECT_EQ(value("gpukit_partition_tasks",
                    {{"partition", name}, {"device", device}, {"state", "running"}}),
              p.running_tasks());
    EXPECT_EQ(value("gpukit_partition_tasks_completed_total",
                    {{"partition", name}, {"device", device}, {"result", "succeeded"}}),
              p.succeeded_total());
    EXPECT_EQ(value("gpukit_partition_tasks_completed_total",
                    {{"partition", name}, {"device", device}, {"result", "failed"}}),
              p.failed_total());
    EXPECT_EQ(value("gpukit_partition_admissions_total",
                    {{"partition", name}, {"device", device}, {"result", "admitted"}}),
              p.admitted_total());
    for (const auto& [reason, count] : p.rejected()) {
      EXPECT_EQ(value("gpukit_partition_admissions_total", {{"partition", name},
                                                            {"device", device},
                                                            {"result", "rejected"},
                                                            {"reason", reason}}),
                count)
          << reason;
    }
    const v1::DeviceTimeByQos& by_qos = p.device_time_by_qos();
    EXPECT_NEAR(value("gpukit_partition_gpu_seconds_total",
                      {{"partition", name}, {"device", device}, {"qos", "Guaranteed"}}),
                by_qos.guaranteed_ns() / 1e9, 1e-9);
    EXPECT_NEAR(value("gpukit_partition_gpu_seconds_total",
                      {{"partition", name}, {"device", device}, {"qos", "Burstable"}}),
                by_qos.burstable_ns() / 1e9, 1e-9);
    EXPECT_NEAR(value("gpukit_partition_gpu_seconds_total",
                      {{"partition", name}, {"device", device}, {"qos", "BestEffort"}}),
                by_qos.best_effort_ns() / 1e9, 1e-9);
    EXPECT_GE(value("gpukit_partition_throttled_seconds_total", labels), 0);
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::PartitionStatus small_status, api().GetPartition("small"));
  EXPECT_GE(small_status.rejected().at("REASON_PARTITION_QUOTA_EXCEEDED"), 1)
      << "the refusal above is the partition's";

  ASSERT_GE(tenants.tenants_size(), 3);
  std::map<std::string, int64_t> tenant_spilled;
  for (const v1::SessionInfo& s : sessions.sessions())
    tenant_spilled[s.tenant()] += s.spilled_bytes();
  for (const v1::TenantUsage& t : tenants.tenants()) {
    const std::vector<Label> labels = {{"tenant", t.tenant()}};
    SCOPED_TRACE(t.tenant());
    EXPECT_EQ(value("gpukit_tenant_sessions", labels), t.sessions());
    EXPECT_EQ(value("gpukit_tenant_memory_used_bytes", labels), t.memory_used_bytes());
    EXPECT_EQ(value("gpukit_tenant_spilled_bytes", labels), tenant_spilled[t.tenant()]);
    EXPECT_EQ(value("gpukit_tenant_tasks_completed_total",
                    {{"tenant", t.tenant()}, {"result", "succeeded"}}),
              t.tasks_finished() - t.tasks_failed());
    EXPECT_EQ(value("gpukit_tenant_tasks_completed_total",
                    {{"tenant", t.tenant()}, {"result", "failed"}}),
              t.tasks_failed());
    EXPECT_NEAR(
        value("gpukit_tenant_gpu_seconds_total", {{"tenant", t.tenant()}, {"qos", "BestEffort"}}),
        t.device_time_by_qos().best_effort_ns() / 1e9, 1e-9);
    EXPECT_NEAR(
        value("gpukit_tenant_gpu_seconds_total", {{"tenant", t.tenant()}, {"qos", "Guaranteed"}}),
        t.device_time_by_qos().guaranteed_ns() / 1e9, 1e-9);
  }
  EXPECT_GT(value("gpukit_tenant_gpu_seconds_total", {{"tenant", "team-a"}, {"qos", "BestEffort"}}),
            0);

  // The RPCs: the two failed Describes, the failed RunOp, and one each of the Admin calls.
  const std::string describe = "gpukit.v1.ArrayService/Describe";
  EXPECT_EQ(value("gpukit_rpc_requests_total", {{"method", describe}, {"code", "NOT_FOUND"}}), 2);
  EXPECT_EQ(m.count(Series("gpukit_rpc_requests_total", {{"method", describe}, {"code", "OK"}})),
            0u);
  EXPECT_EQ(value("gpukit_rpc_duration_seconds_count", {{"method", describe}}), 2);
  EXPECT_EQ(value("gpukit_rpc_duration_seconds_bucket", {{"method", describe}, {"le", "+Inf"}}), 2);
  // absl and gRPC share the codes and their names ("INVALID_ARGUMENT").
  const std::string code = absl::StatusCodeToString(op_status.code());
  EXPECT_EQ(value("gpukit_rpc_requests_total",
                  {{"method", "gpukit.v1.ComputeService/RunOp"}, {"code", code}}),
            1);
  for (const char* admin : {"Status", "ListDevices", "ListTenants", "ListSessions"}) {
    EXPECT_EQ(value("gpukit_rpc_requests_total",
                    {{"method", absl::StrCat("gpukit.v1.AdminService/", admin)}, {"code", "OK"}}),
              1)
        << admin;
  }
  EXPECT_EQ(value("gpukit_rpc_requests_total",
                  {{"method", "gpukit.v1.AdminService/ListPartitions"}, {"code", "OK"}}),
            1);
}

TEST_F(MetricsTest, OnlyMetricsIsServed) {
  int status = 0;
  Scrape("/", &status);
  EXPECT_EQ(status, 404);
  Scrape("/metrics/x", &status);
  EXPECT_EQ(status, 404);
}

TEST_F(MetricsTest, AnAddressInUseStopsStartUpWithTheReason) {
  const std::string taken = absl::StrCat("127.0.0.1:", MetricsPort());
  DaemonOptions options;
  options.dir = temp_dir();
  options.socket_path = temp_dir() + "/second.sock";
  options.log_name = "second.log";
  options.extra_args = {"--metrics-address", taken};
  absl::StatusOr<std::unique_ptr<DaemonProcess>> second = DaemonProcess::Start(options);
  ASSERT_FALSE(second.ok()) << "a second gpukitd served metrics on " << taken;
  EXPECT_THAT(second.status().message(), HasSubstr("cannot serve metrics on " + taken));
  Scrape();  // the first still serves
}

TEST_F(MetricsTest, ScrapesRepeatAndCountersOnlyGrow) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string session, api().OpenSession("team-a"));
  const std::string status_series = Series(
      "gpukit_rpc_requests_total", {{"method", "gpukit.v1.AdminService/Status"}, {"code", "OK"}});
  double previous = 0;
  for (int i = 1; i <= 3; ++i) {
    ASSERT_THAT(api().Status(), IsOk());
    const std::map<std::string, double> m = ParseSamples(Scrape());
    ASSERT_EQ(m.count(status_series), 1u);
    EXPECT_EQ(m.at(status_series), i);
    EXPECT_GT(m.at(status_series), previous);
    previous = m.at(status_series);
  }
}

}  // namespace
}  // namespace gpukit::testing
