// GPU-time accounting on a real GPU through the Core: two tenants' sessions, a Guaranteed
// one in its own partition and a BestEffort one in the default partition, run matmuls and a
// JIT kernel from two threads at once, so their work overlaps on the GPU on two streams.
// Every view the Admin API reports (session, tenant, partition, QoS class) must be exactly
// the sum of the device times of its tasks, each measured with two CUDA events on the
// session's stream, and a kernel task's time must be the one LaunchKernel returned from
// those events. The same check on the CPU backend is tests/integration/accounting_test.cc.
//
// Skipped, visibly, where there is no GPU or no NVRTC.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/core/core.h"
#include "daemon/scheduler/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/base/status_macros.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/jit/jit_compiler.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kMatmulSize = 1024;  // n x n x n, float32
constexpr int kRounds = 20;

constexpr char kSource[] = R"(
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
)";

absl::Duration Of(const DeviceTimeByQos& by_qos, QosClass qos) {
  return by_qos[static_cast<int>(qos)];
}

absl::Duration Sum(const DeviceTimeByQos& by_qos) { return by_qos[0] + by_qos[1] + by_qos[2]; }

// What one session's thread did: the device times LaunchKernel returned.
struct SessionRun {
  std::string session_id;
  absl::Duration kernel_time;
  int kernels = 0;
  absl::Status status;
};

// What ListTasks says a session's tasks used.
struct TaskTotals {
  absl::Duration device_time;
  absl::Duration kernel_time;
  int64_t finished = 0;
};

class AccountingGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<int> count = CudaDevice::DeviceCount();
    if (!count.ok()) GTEST_SKIP() << "no CUDA driver: " << count.status();
    if (*count == 0) GTEST_SKIP() << "the CUDA driver shows no GPU";
    absl::StatusOr<std::unique_ptr<JitCompiler>> jit = JitCompiler::Create({});
    if (!jit.ok()) GTEST_SKIP() << "no NVRTC JIT compiler: " << jit.status();
    jit_ = *std::move(jit);
    CudaDeviceOptions device_options;
    device_options.jit = jit_;
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<CudaDevice> gpu,
                                CudaDevice::Create(device_options));
    std::vector<std::unique_ptr<Device>> devices;
    devices.push_back(std::move(gpu));
    CoreOptions options;
    PartitionSpec gold;
    gold.name = "gold";
    gold.memory_quota_bytes = 1024 * kMiB;
    gold.compute_share = 0.5;
    options.partitions = {gold};
    GPUKIT_ASSERT_OK_AND_ASSIGN(core_, Core::Create(clock_, std::move(devices), options, jit_));
  }

  void TearDown() override { core_.reset(); }

  absl::StatusOr<std::string> Open(const std::string& tenant, const std::string& partition,
                                   const ResourceSpec& resources) {
    OpenSessionParams params;
    params.tenant = tenant;
    params.partition = partition;
    params.resources = resources;
    GPUKIT_ASSIGN_OR_RETURN(SessionGrant grant, core_->OpenSession(params));
    return grant.session_id;
  }

  absl::StatusOr<std::string> Filled(const std::string& session, std::vector<int64_t> shape,
                                     float value) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    GPUKIT_ASSIGN_OR_RETURN(ArrayView view,
                            core_->CreateArray(session, {DType::kFloat32, std::move(shape)}));
    const std::vector<float> values(static_cast<size_t>(n), value);
    GPUKIT_RETURN_IF_ERROR(core_->WriteArray(
        session, view.handle, 0,
        absl::MakeConstSpan(reinterpret_cast<const char*>(values.data()), n * sizeof(float))));
    return view.handle;
  }

  // Matmuls, a saxpy launch and a download, kRounds times, on one session.
  absl::Status Work(SessionRun& run) {
    const std::string& s = run.session_id;
    GPUKIT_ASSIGN_OR_RETURN(std::string a, Filled(s, {kMatmulSize, kMatmulSize}, 0.5f));
    GPUKIT_ASSIGN_OR_RETURN(std::string x, Filled(s, {kMatmulSize}, 1.0f));
    GPUKIT_ASSIGN_OR_RETURN(std::string y, Filled(s, {kMatmulSize}, 2.0f));
    CompileRequest request;
    request.source = kSource;
    request.entries = {"saxpy"};
    GPUKIT_ASSIGN_OR_RETURN(KernelView saxpy, core_->CompileKernel(s, request));
    OpInput in;
    in.handle = a;
    for (int i = 0; i < kRounds; ++i) {
      GPUKIT_ASSIGN_OR_RETURN(ArrayView product, core_->RunOp(s, "matmul", {in, in}, {}));
      GPUKIT_RETURN_IF_ERROR(core_->FreeArray(s, product.handle).status());
      std::vector<KernelArgInput> args(4);
      const float scale = 0.5f;
      const int n = static_cast<int>(kMatmulSize);
      std::memcpy(args[0].bytes, &scale, sizeof(scale));
      args[0].size_bytes = sizeof(scale);
      args[1].is_array = true;
      args[1].handle = x;
      args[2].is_array = true;
      args[2].handle = y;
      std::memcpy(args[3].bytes, &n, sizeof(n));
      args[3].size_bytes = sizeof(n);
      LaunchConfig config;
      config.grid[0] = static_cast<uint32_t>(kMatmulSize / 256);
      config.block[0] = 256;
      GPUKIT_ASSIGN_OR_RETURN(absl::Duration kernel_time,
                              core_->LaunchKernel(s, saxpy.handle, "", config, args));
      run.kernel_time += kernel_time;
      ++run.kernels;
      std::vector<float> out(kMatmulSize);
      GPUKIT_RETURN_IF_ERROR(core_->ReadArray(
          s, y, 0, absl::MakeSpan(reinterpret_cast<char*>(out.data()), out.size() * 4)));
    }
    return absl::OkStatus();
  }

  std::map<std::string, TaskTotals> TasksBySession() const {
    std::map<std::string, TaskTotals> totals;
    for (const TaskInfo& task : core_->scheduler().ListTasks({})) {
      if (task.state != TaskState::kSucceeded && task.state != TaskState::kFailed) continue;
      TaskTotals& t = totals[task.session_id];
      t.device_time += task.device_time;
      if (task.kind == TaskKind::kKernel) t.kernel_time += task.device_time;
      ++t.finished;
    }
    return totals;
  }

  SessionSummary SessionOf(const std::string& id) const {
    for (const SessionSummary& s : core_->ListSessions()) {
      if (s.session_id == id) return s;
    }
    ADD_FAILURE() << "no session " << id;
    return {};
  }

  TenantUsage TenantOf(const std::string& name) const {
    for (const TenantUsage& t : core_->ListTenants()) {
      if (t.tenant == name) return t;
    }
    ADD_FAILURE() << "no tenant " << name;
    return {};
  }

  PartitionStatus PartitionOf(const std::string& name) const {
    for (const PartitionStatus& p : core_->scheduler().ListPartitions()) {
      if (p.spec.name == name) return p;
    }
    ADD_FAILURE() << "no partition " << name;
    return {};
  }

  SystemClock clock_;  // real time: pacing charges real device time
  std::shared_ptr<JitCompiler> jit_;
  std::unique_ptr<Core> core_;
};

TEST_F(AccountingGpuTest, EveryViewIsTheSumOfItsTasksCudaEventTimesUnderConcurrentWork) {
  ResourceSpec guaranteed;
  guaranteed.memory_limit_bytes = 256 * kMiB;
  guaranteed.compute_limit = 0.25;
  SessionRun alpha, beta;
  GPUKIT_ASSERT_OK_AND_ASSIGN(alpha.session_id, Open("alpha", "gold", guaranteed));
  GPUKIT_ASSERT_OK_AND_ASSIGN(beta.session_id, Open("beta", "default", {}));
  ASSERT_EQ(SessionOf(alpha.session_id).qos, QosClass::kGuaranteed);
  ASSERT_EQ(SessionOf(beta.session_id).qos, QosClass::kBestEffort);
  {
    std::thread alpha_thread([&] { alpha.status = Work(alpha); });
    std::thread beta_thread([&] { beta.status = Work(beta); });
    alpha_thread.join();
    beta_thread.join();
  }
  GPUKIT_ASSERT_OK(alpha.status);
  GPUKIT_ASSERT_OK(beta.status);

  std::map<std::string, TaskTotals> tasks = TasksBySession();
  const TaskTotals alpha_tasks = tasks[alpha.session_id];
  const TaskTotals beta_tasks = tasks[beta.session_id];
  // 3 uploads, then per round a matmul, a launch and a download.
  EXPECT_GE(alpha_tasks.finished, 3 + 3 * kRounds);
  EXPECT_GE(beta_tasks.finished, 3 + 3 * kRounds);
  // Kernel tasks were charged exactly what the events measured and LaunchKernel returned.
  EXPECT_EQ(alpha_tasks.kernel_time, alpha.kernel_time);
  EXPECT_EQ(beta_tasks.kernel_time, beta.kernel_time);
  EXPECT_GT(alpha.kernel_time, absl::ZeroDuration());
  // The matmuls dominate: far more than the small kernels.
  EXPECT_GT(alpha_tasks.device_time, alpha_tasks.kernel_time);
  EXPECT_GT(beta_tasks.device_time, beta_tasks.kernel_time);

  const SessionSummary alpha_session = SessionOf(alpha.session_id);
  const SessionSummary beta_session = SessionOf(beta.session_id);
  EXPECT_EQ(alpha_session.device_time, alpha_tasks.device_time);
  EXPECT_EQ(alpha_session.tasks_finished, alpha_tasks.finished);
  EXPECT_EQ(beta_session.device_time, beta_tasks.device_time);
  EXPECT_EQ(beta_session.tasks_finished, beta_tasks.finished);

  const TenantUsage alpha_usage = TenantOf("alpha");
  EXPECT_EQ(alpha_usage.device_time_total, alpha_tasks.device_time);
  EXPECT_EQ(Of(alpha_usage.device_time_by_qos, QosClass::kGuaranteed), alpha_tasks.device_time);
  EXPECT_EQ(alpha_usage.tasks_finished, alpha_tasks.finished);
  const TenantUsage beta_usage = TenantOf("beta");
  EXPECT_EQ(beta_usage.device_time_total, beta_tasks.device_time);
  EXPECT_EQ(Of(beta_usage.device_time_by_qos, QosClass::kBestEffort), beta_tasks.device_time);

  const PartitionStatus gold = PartitionOf("gold");
  EXPECT_EQ(gold.device_time_total, alpha_tasks.device_time);
  EXPECT_EQ(Sum(gold.device_time_by_qos), gold.device_time_total);
  const PartitionStatus fallback = PartitionOf("default");
  EXPECT_EQ(fallback.device_time_total, beta_tasks.device_time);
  EXPECT_EQ(Of(fallback.device_time_by_qos, QosClass::kBestEffort), beta_tasks.device_time);

  // Closing a session keeps its tenant's and partition's totals.
  GPUKIT_ASSERT_OK(core_->CloseSession(alpha.session_id).status());
  EXPECT_EQ(TenantOf("alpha").sessions, 0);
  EXPECT_EQ(TenantOf("alpha").device_time_total, alpha_tasks.device_time);
  EXPECT_EQ(PartitionOf("gold").device_time_total, alpha_tasks.device_time);
  std::printf("device time: alpha %s (kernels %s), beta %s (kernels %s)\n",
              absl::FormatDuration(alpha_tasks.device_time).c_str(),
              absl::FormatDuration(alpha.kernel_time).c_str(),
              absl::FormatDuration(beta_tasks.device_time).c_str(),
              absl::FormatDuration(beta.kernel_time).c_str());
}

}  // namespace
}  // namespace gpukit
