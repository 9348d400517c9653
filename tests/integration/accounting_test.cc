// GPU-time accounting seen from outside (docs/api.md, "GPU-time accounting"): two tenants'
// sessions in two partitions run known ops on the CPU backend, and what the Admin service
// reports for each session, tenant, partition and QoS class must be exactly the sum of the
// device times of their tasks in ListTasks, each measured between the task's two events on
// the device. The totals must stay once a session closes.
//
// Partitions of the daemon under test (device 0 on the CPU backend):
//   gold     1 GiB, share 0.5; the Guaranteed tenant "alpha" opens its session here
//   default  what gold leaves; the BestEffort tenant "beta" opens its session here
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// What ListTasks says a session's tasks used.
struct TaskTotals {
  int64_t device_time_ns = 0;
  int64_t finished = 0;
};

class AccountingTest : public DaemonTest {
 protected:
  std::string DaemonConfigJson() const override {
    return R"({"partitions": [{"name": "gold", "memory": "1GiB", "compute": 0.5}]})";
  }

  absl::StatusOr<std::unique_ptr<Client>> ConnectAs(const std::string& tenant,
                                                    const std::string& partition,
                                                    const ResourceRequirements& resources) {
    ClientOptions options = ClientOptionsFor(tenant);
    options.partition = partition;
    options.resources = resources;
    return Client::Connect(options);
  }

  // Uploads two n x n float matrices, multiplies them `rounds` times, adds and reduces, and
  // downloads the result: upload, op and download tasks, each with a measured device time.
  static void RunKnownOps(Client& client, int64_t n, int rounds) {
    std::vector<float> values(static_cast<size_t>(n * n));
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 7) * 0.25f;
    GPUKIT_ASSERT_OK_AND_ASSIGN(Array a, client.FromVector(values, {n, n}));
    GPUKIT_ASSERT_OK_AND_ASSIGN(Array b, client.FromVector(values, {n, n}));
    for (int i = 0; i < rounds; ++i) {
      GPUKIT_ASSERT_OK_AND_ASSIGN(Array c, client.Matmul(a, b));
      GPUKIT_ASSERT_OK_AND_ASSIGN(Array d, client.Add(c, a));
      GPUKIT_ASSERT_OK_AND_ASSIGN(Array sum, client.Sum(d));
      GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> out, sum.ToVector<float>());
      ASSERT_EQ(out.size(), 1u);
    }
  }

  // Every task that ran and ended, summed by session, from the daemon's task list.
  std::map<std::string, TaskTotals> TasksBySession() {
    std::map<std::string, TaskTotals> totals;
    absl::StatusOr<v1::ListTasksResponse> tasks = api().ListTasks({});
    EXPECT_THAT(tasks, IsOk());
    if (!tasks.ok()) return totals;
    for (const v1::TaskInfo& task : tasks->tasks()) {
      if (task.state() != v1::TASK_STATE_SUCCEEDED && task.state() != v1::TASK_STATE_FAILED) {
        continue;
      }
      totals[task.session_id()].device_time_ns += task.device_time_ns();
      ++totals[task.session_id()].finished;
    }
    return totals;
  }

  v1::SessionInfo SessionOf(const std::string& id) {
    absl::StatusOr<v1::ListSessionsResponse> sessions = api().ListSessions();
    EXPECT_THAT(sessions, IsOk());
    if (sessions.ok()) {
      for (const v1::SessionInfo& s : sessions->sessions()) {
        if (s.session_id() == id) return s;
      }
    }
    ADD_FAILURE() << "ListSessions lists no session " << id;
    return {};
  }

  v1::TenantUsage TenantOf(const std::string& name) {
    absl::StatusOr<v1::ListTenantsResponse> tenants = api().ListTenants();
    EXPECT_THAT(tenants, IsOk());
    if (tenants.ok()) {
      for (const v1::TenantUsage& t : tenants->tenants()) {
        if (t.tenant() == name) return t;
      }
    }
    ADD_FAILURE() << "ListTenants lists no tenant " << name;
    return {};
  }

  v1::PartitionStatus PartitionOf(const std::string& name) {
    absl::StatusOr<v1::PartitionStatus> partition = api().GetPartition(name);
    EXPECT_THAT(partition, IsOk());
    return partition.ok() ? *partition : v1::PartitionStatus();
  }
};

int64_t Sum(const v1::DeviceTimeByQos& by_qos) {
  return by_qos.guaranteed_ns() + by_qos.burstable_ns() + by_qos.best_effort_ns();
}

TEST_F(AccountingTest, EachViewOfDeviceTimeIsTheSumOfItsTasksMeasuredTimes) {
  ResourceRequirements guaranteed;
  guaranteed.memory_limit_bytes = 64 * kMiB;
  guaranteed.compute_limit = 0.25;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> alpha,
                              ConnectAs("alpha", "gold", guaranteed));
  ASSERT_EQ(alpha->qos_class(), "Guaranteed");
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> beta, ConnectAs("beta", "default", {}));
  ASSERT_EQ(beta->qos_class(), "BestEffort");
  ASSERT_NO_FATAL_FAILURE(RunKnownOps(*alpha, 128, 3));
  ASSERT_NO_FATAL_FAILURE(RunKnownOps(*beta, 192, 2));

  // Every call has returned, so every task of both sessions has ended and been charged.
  std::map<std::string, TaskTotals> tasks = TasksBySession();
  const TaskTotals alpha_tasks = tasks[alpha->session_id()];
  const TaskTotals beta_tasks = tasks[beta->session_id()];
  // 2 uploads, then per round matmul, add, sum and a download: at least 10 tasks.
  EXPECT_GE(alpha_tasks.finished, 2 + 3 * 4);
  EXPECT_GE(beta_tasks.finished, 2 + 2 * 4);
  EXPECT_GT(alpha_tasks.device_time_ns, 0) << "the matmuls took no device time";
  EXPECT_GT(beta_tasks.device_time_ns, 0) << "the matmuls took no device time";

  const v1::SessionInfo alpha_session = SessionOf(alpha->session_id());
  const v1::SessionInfo beta_session = SessionOf(beta->session_id());
  EXPECT_EQ(alpha_session.device_time_ns(), alpha_tasks.device_time_ns);
  EXPECT_EQ(alpha_session.tasks_finished(), alpha_tasks.finished);
  EXPECT_EQ(beta_session.device_time_ns(), beta_tasks.device_time_ns);
  EXPECT_EQ(beta_session.tasks_finished(), beta_tasks.finished);

  const v1::TenantUsage alpha_usage = TenantOf("alpha");
  EXPECT_EQ(alpha_usage.sessions(), 1);
  EXPECT_EQ(alpha_usage.device_time_ns(), alpha_tasks.device_time_ns);
  EXPECT_EQ(alpha_usage.device_time_by_qos().guaranteed_ns(), alpha_tasks.device_time_ns);
  EXPECT_EQ(Sum(alpha_usage.device_time_by_qos()), alpha_usage.device_time_ns());
  EXPECT_EQ(alpha_usage.tasks_finished(), alpha_tasks.finished);
  EXPECT_EQ(alpha_usage.tasks_failed(), 0);
  EXPECT_EQ(alpha_usage.memory_used_bytes(), alpha_session.memory_bytes());
  const v1::TenantUsage beta_usage = TenantOf("beta");
  EXPECT_EQ(beta_usage.device_time_ns(), beta_tasks.device_time_ns);
  EXPECT_EQ(beta_usage.device_time_by_qos().best_effort_ns(), beta_tasks.device_time_ns);
  EXPECT_EQ(Sum(beta_usage.device_time_by_qos()), beta_usage.device_time_ns());

  const v1::PartitionStatus gold = PartitionOf("gold");
  EXPECT_EQ(gold.device_time_ns(), alpha_tasks.device_time_ns);
  EXPECT_EQ(gold.device_time_by_qos().guaranteed_ns(), alpha_tasks.device_time_ns);
  EXPECT_EQ(Sum(gold.device_time_by_qos()), gold.device_time_ns());
  const v1::PartitionStatus fallback = PartitionOf("default");
  EXPECT_EQ(fallback.device_time_ns(), beta_tasks.device_time_ns);
  EXPECT_EQ(fallback.device_time_by_qos().best_effort_ns(), beta_tasks.device_time_ns);
  EXPECT_EQ(Sum(fallback.device_time_by_qos()), fallback.device_time_ns());

  // Closing a session keeps its tenant's and its partition's totals.
  GPUKIT_ASSERT_OK(alpha->Close());
  const v1::TenantUsage alpha_after = TenantOf("alpha");
  EXPECT_EQ(alpha_after.sessions(), 0);
  EXPECT_EQ(alpha_after.memory_used_bytes(), 0);
  EXPECT_EQ(alpha_after.device_time_ns(), alpha_tasks.device_time_ns);
  EXPECT_EQ(alpha_after.tasks_finished(), alpha_tasks.finished);
  EXPECT_EQ(PartitionOf("gold").device_time_ns(), alpha_tasks.device_time_ns);
  EXPECT_EQ(TenantOf("beta").device_time_ns(), beta_tasks.device_time_ns);
}

TEST_F(AccountingTest, ATenantsTimeIsThatOfAllItsSessionsAndARefusedOpAddsNone) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> first, ConnectAs("gamma", "default", {}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> second, ConnectAs("gamma", "default", {}));
  ASSERT_NO_FATAL_FAILURE(RunKnownOps(*first, 96, 2));
  ASSERT_NO_FATAL_FAILURE(RunKnownOps(*second, 64, 1));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array x, first->Empty({3, 5}, DType::kFloat32));
  const int64_t before_ns = SessionOf(first->session_id()).device_time_ns();

  // Shapes that do not match: refused before any work reaches the device.
  EXPECT_FALSE(first->Matmul(x, x).ok());
  EXPECT_EQ(SessionOf(first->session_id()).device_time_ns(), before_ns);

  std::map<std::string, TaskTotals> tasks = TasksBySession();
  const TaskTotals a = tasks[first->session_id()];
  const TaskTotals b = tasks[second->session_id()];
  EXPECT_GT(a.device_time_ns, 0);
  EXPECT_GT(b.device_time_ns, 0);
  EXPECT_EQ(SessionOf(first->session_id()).device_time_ns(), a.device_time_ns);
  EXPECT_EQ(SessionOf(first->session_id()).tasks_finished(), a.finished);
  EXPECT_EQ(SessionOf(second->session_id()).device_time_ns(), b.device_time_ns);
  const v1::TenantUsage gamma = TenantOf("gamma");
  EXPECT_EQ(gamma.sessions(), 2);
  EXPECT_EQ(gamma.device_time_ns(), a.device_time_ns + b.device_time_ns);
  EXPECT_EQ(gamma.device_time_by_qos().best_effort_ns(), gamma.device_time_ns());
  EXPECT_EQ(gamma.tasks_finished(), a.finished + b.finished);
  EXPECT_EQ(PartitionOf("default").device_time_ns(), gamma.device_time_ns());
}

}  // namespace
}  // namespace gpukit::testing
