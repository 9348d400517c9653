// Several client processes at once against gpukitd on the CUDA backend: the real daemon,
// started with --backend=cuda on a socket in the test's temporary directory, and worker
// processes (tests/integration/worker.cc, --mode gpu-compute) that each open a session,
// upload fresh random data and check add, matmul and reductions run on the GPU against
// values they compute themselves. The CPU backend's version of these tests is
// tests/integration/multi_process_test.cc.
//
// The daemon keeps its default kernel cache (gpukit/kernels under $XDG_CACHE_HOME or ~/.cache), so
// the first run on a host compiles the built-in kernels it uses and later runs load them.
//
// The seed is $GPUKIT_TEST_SEED when set, else a fresh one; the test prints it, and each
// worker prints its own (the test's seed plus its number) in its output.
//
// From a bundle (deploy/bundle.sh's bin/run-gpu-tests.sh) the build tree is not there: the
// test finds gpukitd and gpukit_integration_worker beside itself in bin/ (binary_path.h).
// Skipped, visibly, where there is no GPU that gpukitd accepts, or no NVRTC to compile its
// built-in kernels.
#include <signal.h>

#include <cstdint>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/cpp/device_import.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/builtin_op_runner.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/device_factory.h"
#include "runtime/jit/jit_compiler.h"
#include "tests/gpu/gpu_host.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/random_seed.h"
#include "tests/testing/status_matchers.h"
#include <sys/wait.h>

namespace gpukit::testing {
namespace {

// Why gpukitd --backend=cuda cannot run built-in ops here, or nothing when it can. Probed
// once per process; the CUDA contexts it creates are released before any daemon starts.
const std::optional<std::string>& WhyNoGpu() {
  static const std::optional<std::string> reason = []() -> std::optional<std::string> {
    if (std::optional<std::string> why = WhyNoCudaBackend()) return why;
    absl::StatusOr<std::unique_ptr<JitCompiler>> jit = JitCompiler::Create({});
    if (!jit.ok()) {
      return absl::StrCat("no NVRTC, so gpukitd runs no built-in op on the GPU: ",
                          jit.status().ToString());
    }
    return std::nullopt;
  }();
  return reason;
}

// Long enough for the first use of each built-in kernel module, which NVRTC compiles (or the
// kernel cache loads) while the op waits.
constexpr absl::Duration kWorkerTimeout = absl::Minutes(3);

class MultiClientGpuTest : public DaemonTest {
 protected:
  void SetUp() override {
    if (const std::optional<std::string>& why = WhyNoGpu()) GTEST_SKIP() << *why;
    DaemonTest::SetUp();
    if (HasFatalFailure()) return;
    seed_ = TestSeed();
    std::cout << "seed " << seed_ << " (replay with GPUKIT_TEST_SEED=" << seed_ << ")" << std::endl;
    ExpectCudaBackend();
  }

  // Short leases may be asked for, so that a dead client's session lapses within the test.
  std::string DaemonConfigJson() const override { return R"({"sessions": {"minLease": "200ms"}})"; }

  void ConfigureDaemon(DaemonOptions& options) const override {
    options.backend = "cuda";
    // cuInit, a primary context per GPU and cuBLASLt take longer than the CPU device.
    options.ready_timeout = absl::Seconds(60);
  }

  // Worker `number` of this test: seeded with seed_ + number, its output in the temp dir.
  absl::StatusOr<Subprocess> SpawnWorker(int number, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {WorkerPath(), "--addr", daemon().address(), "--mode",
                                     "gpu-compute"};
    argv.push_back("--seed");
    argv.push_back(absl::StrCat(uint64_t{seed_} + number));
    argv.insert(argv.end(), args.begin(), args.end());
    return Subprocess::Spawn({argv, absl::StrCat(temp_dir(), "/worker-", number, ".out"), ""});
  }

  // Waits until `worker` has printed a line that starts with `prefix`, or has exited; true if
  // it printed one.
  static bool WaitForLine(Subprocess& worker, const std::string& prefix, absl::Duration timeout) {
    const std::string wanted = "\n" + prefix;
    auto printed = [&] { return absl::StrContains("\n" + worker.Output(), wanted); };
    PollUntil([&] { return printed() || !worker.Running(); }, timeout);
    return printed();
  }

  // The daemon serves on CUDA devices only: this test must not pass on the CPU backend.
  void ExpectCudaBackend() {
    GPUKIT_ASSERT_OK_AND_ASSIGN(v1::StatusResponse status, api().Status());
    EXPECT_EQ(status.backend(), "cuda");
    GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListDevicesResponse devices, api().ListDevices());
    ASSERT_GE(devices.devices_size(), 1);
    for (const v1::DeviceInfo& device : devices.devices()) {
      SCOPED_TRACE(absl::StrCat("device ", device.index(), " \"", device.name(), "\""));
      EXPECT_EQ(device.backend(), "cuda");
      EXPECT_GT(device.memory_total_bytes(), 0);
      std::cout << "device " << device.index() << ": " << device.name() << " (" << device.backend()
                << ")" << std::endl;
    }
  }

  // What the daemon still holds for clients, or "" when nothing: no session, no array, no
  // memory charged to a partition, and on each device no memory but the cuBLASLt workspaces
  // that CudaDevice allocates on a stream's first float32 matmul and keeps until the stream
  // goes (when the daemon exits). ListDevices counts those in memory_used_bytes, so
  // DaemonTest::WaitUntilDaemonHoldsNothing, written for the CPU backend, would wait for
  // ever here once cuBLASLt has run a matmul.
  std::string WhatDaemonHolds() {
    absl::StatusOr<v1::StatusResponse> status = api().Status();
    absl::StatusOr<v1::ListPartitionsResponse> partitions = api().ListPartitions();
    absl::StatusOr<v1::ListDevicesResponse> devices = api().ListDevices();
    if (!status.ok()) return absl::StrCat("Status: ", status.status().ToString());
    if (!partitions.ok()) return absl::StrCat("ListPartitions: ", partitions.status().ToString());
    if (!devices.ok()) return absl::StrCat("ListDevices: ", devices.status().ToString());
    std::string held;
    if (status->sessions() != 0) absl::StrAppend(&held, status->sessions(), " sessions; ");
    if (status->arrays() != 0) absl::StrAppend(&held, status->arrays(), " arrays; ");
    for (const v1::PartitionStatus& partition : partitions->partitions()) {
      if (partition.memory_used_bytes() != 0) {
        absl::StrAppend(&held, "partition ", partition.partition().name(), " is charged ",
                        partition.memory_used_bytes(), " bytes; ");
      }
    }
    // What the CUDA device keeps per stream that has used it, beyond arrays: a cuBLASLt
    // workspace (float matmuls) and a reduction scratch buffer (BuiltinOpRunner's).
    // The test's sessions use at most 7 streams (2 per QoS class of the default partition,
    // streamsPerPartition's default, and the spill stream); 13 leaves room for a config with
    // 4 per class.
    constexpr int64_t kScratchBytes = BuiltinOpRunner::kScratchBytes;
    constexpr int64_t kPerStreamBytes = CublasLtMatmul::kWorkspaceBytes + kScratchBytes;
    constexpr int64_t kMaxRuntimeBytes = (3 * 4 + 1) * kPerStreamBytes;
    for (const v1::DeviceInfo& device : devices->devices()) {
      const int64_t used_bytes = device.memory_used_bytes();
      if (used_bytes % kScratchBytes != 0 || used_bytes > kMaxRuntimeBytes) {
        absl::StrAppend(&held, "device ", device.index(), " has ", used_bytes,
                        " bytes in use, more than per-stream workspaces and scratch (",
                        kPerStreamBytes, " bytes per stream); ");
      }
    }
    return held;
  }

  // Creates the file the workers started with --wait-for wait for.
  void StartWaitingWorkers() { std::ofstream(go_path()) << "go\n"; }
  std::string go_path() const { return temp_dir() + "/go"; }

  uint32_t seed_ = 0;
};

// What each worker's session holds from "ready" on: its 16 MiB resident array at least.
constexpr int64_t kResidentBytes = int64_t{16} << 20;

TEST_F(MultiClientGpuTest, TwoClientProcessesComputeOnTheGpuAtOnceAndLeaveNothingBehind) {
  constexpr int kWorkers = 2;
  std::vector<Subprocess> workers;
  for (int number = 0; number < kWorkers; ++number) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(Subprocess worker, SpawnWorker(number, {"--wait-for", go_path()}));
    workers.push_back(std::move(worker));
  }
  for (Subprocess& worker : workers) {
    ASSERT_TRUE(WaitForLine(worker, "ready", kWorkerTimeout)) << "worker output:\n"
                                                              << worker.Output();
  }

  // Both sessions are open at once, each on a CUDA device and holding its data, before
  // either computes.
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse open, api().ListSessions());
  ASSERT_EQ(open.sessions_size(), kWorkers);
  std::set<int64_t> pids;
  for (const v1::SessionInfo& session : open.sessions()) {
    pids.insert(session.client_pid());
    EXPECT_GE(session.memory_bytes(), kResidentBytes) << session.session_id();
  }
  EXPECT_EQ(pids, (std::set<int64_t>{workers[0].pid(), workers[1].pid()}));

  StartWaitingWorkers();
  for (int number = 0; number < kWorkers; ++number) {
    SCOPED_TRACE(absl::StrCat("worker ", number, ", seed ", uint64_t{seed_} + number));
    absl::StatusOr<int> code = workers[number].WaitForExitCode(kWorkerTimeout);
    EXPECT_THAT(code, IsOkAndHolds(0)) << "worker output:\n" << workers[number].Output();
    EXPECT_THAT(workers[number].Output(), ::testing::HasSubstr("gpu-compute ok"));
  }

  // Each worker closed its session before exiting: nothing may be left, at once.
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse sessions, api().ListSessions());
  EXPECT_THAT(sessions.sessions(), ::testing::IsEmpty());
  EXPECT_EQ(WhatDaemonHolds(), "");
}

// Zero-copy device memory: a client process maps arrays of gpukitd's (Array::Map) and reads
// and writes them through the mapping; the worker checks both directions against gRPC, and
// times first and cached maps.
TEST_F(MultiClientGpuTest, AClientMapsArraysAndSeesTheSameMemoryBothWays) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(Subprocess worker,
                              SpawnWorker(7, {"--mode", "gpu-map", "--rounds", "200"}));
  absl::StatusOr<int> code = worker.WaitForExitCode(kWorkerTimeout);
  EXPECT_THAT(code, IsOkAndHolds(0)) << "worker output:\n" << worker.Output();
  EXPECT_THAT(worker.Output(), ::testing::HasSubstr("gpu-map ok"));
  std::printf("%s", worker.Output().c_str());
  EXPECT_EQ(WhatDaemonHolds(), "");
}

// A client killed with SIGKILL while it maps an exported array: its session lapses, the array
// is freed and its memory goes back to the driver; the daemon serves on.
TEST_F(MultiClientGpuTest, ClientKilledWhileItMapsAnArrayLeavesNothingBehind) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(Subprocess victim, SpawnWorker(8, {"--mode", "hold-mapped", "--bytes",
                                                                 "8MiB", "--lease-ms", "2000"}));
  ASSERT_TRUE(WaitForLine(victim, "holding", kWorkerTimeout)) << "victim output:\n"
                                                              << victim.Output();
  EXPECT_NE(WhatDaemonHolds(), "") << "the victim's session holds its array";
  ASSERT_EQ(kill(victim.pid(), SIGKILL), 0);
  EXPECT_TRUE(PollUntil([&] { return WhatDaemonHolds().empty(); }, absl::Seconds(6)))
      << WhatDaemonHolds();
  ExpectDaemonServesAnotherClient();
}

// The other way: a client process's own device memory as arrays of its session, both kinds
// (legacy IPC handle, VMM descriptor), checked both ways against gRPC, with refusals and
// timings.
TEST_F(MultiClientGpuTest, AClientImportsItsOwnDeviceMemoryAsArrays) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(Subprocess worker,
                              SpawnWorker(9, {"--mode", "gpu-import", "--rounds", "200"}));
  absl::StatusOr<int> code = worker.WaitForExitCode(kWorkerTimeout);
  EXPECT_THAT(code, IsOkAndHolds(0)) << "worker output:\n" << worker.Output();
  EXPECT_THAT(worker.Output(), ::testing::HasSubstr("gpu-import ok"));
  std::printf("%s", worker.Output().c_str());
  EXPECT_EQ(WhatDaemonHolds(), "");
  ExpectDaemonServesAnotherClient();
}

// A client killed with SIGKILL while gpukitd maps its memory: the lease lapses, gpukitd
// unmaps the dead process's memory and serves on.
TEST_F(MultiClientGpuTest, ClientKilledWhileGpukitdMapsItsMemoryLeavesNothingBehind) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      Subprocess victim,
      SpawnWorker(10, {"--mode", "hold-imported", "--bytes", "8MiB", "--lease-ms", "2000"}));
  ASSERT_TRUE(WaitForLine(victim, "holding", kWorkerTimeout)) << "victim output:\n"
                                                              << victim.Output();
  EXPECT_NE(WhatDaemonHolds(), "") << "the victim's session holds the imported array";
  ASSERT_EQ(kill(victim.pid(), SIGKILL), 0);
  EXPECT_TRUE(PollUntil([&] { return WhatDaemonHolds().empty(); }, absl::Seconds(6)))
      << WhatDaemonHolds();
  ExpectDaemonServesAnotherClient();
}

// Over TCP the token "multi-client-token" (its SHA-256 here) is tenant "tcp"; the daemon
// serves loopback TCP without TLS (--insecure-tcp).
constexpr char kTcpAccess[] = R"("access": {"tokens": [{"sha256":
  "3c6577026042c652fd3c1f763ef225b833359b21edf7bf7b9f0876d158888909", "tenant": "tcp"}]}})";

// The daemon also listens on TCP: a client there cannot receive descriptors, so Array::Map
// asks for a legacy CUDA IPC handle. This test's own process is that client. Legacy handles
// belong to a CUDA context, which a device executor's restart would take away, so only a
// daemon that runs its devices in-process (executor.mode "inprocess") serves them.
class MultiClientGpuTcpTest : public MultiClientGpuTest {
 protected:
  void ConfigureDaemon(DaemonOptions& options) const override {
    MultiClientGpuTest::ConfigureDaemon(options);
    options.extra_args = {"--listen", "127.0.0.1:0", "--insecure-tcp"};
    options.config_json = absl::StrCat(R"({"executor": {"mode": "inprocess"}, )", kTcpAccess);
  }
};

// With device executors (the default) the same request is refused, saying why.
class MultiClientGpuTcpExecutorTest : public MultiClientGpuTest {
 protected:
  void ConfigureDaemon(DaemonOptions& options) const override {
    MultiClientGpuTest::ConfigureDaemon(options);
    options.extra_args = {"--listen", "127.0.0.1:0", "--insecure-tcp"};
    options.config_json = absl::StrCat("{", kTcpAccess);
  }
};

TEST_F(MultiClientGpuTcpExecutorTest, OverTcpLegacyIpcHandlesAreRefusedWithTheReason) {
  const std::string listening = "listening on 127.0.0.1:";
  ASSERT_TRUE(
      PollUntil([&] { return absl::StrContains(daemon().Log(), listening); }, absl::Seconds(5)));
  const std::string log = daemon().Log();
  const size_t at = log.find(listening) + listening.size();
  ClientOptions options;
  options.address = absl::StrCat("127.0.0.1:", log.substr(at, log.find('\n', at) - at));
  options.tenant = "tcp";
  options.token = "multi-client-token";
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(options));
  std::vector<float> values(1024, 1.5f);
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array array, client->FromVector(values, {1024}));
  EXPECT_THAT(array.Map().status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::AllOf(::testing::HasSubstr("legacy CUDA IPC"),
                                        ::testing::HasSubstr("executor"))));
  // The array itself is untouched.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> back, array.ToVector<float>());
  EXPECT_EQ(back, values);
}

TEST_F(MultiClientGpuTcpTest, OverTcpArraysMapThroughLegacyIpcHandles) {
  const std::string listening = "listening on 127.0.0.1:";
  ASSERT_TRUE(
      PollUntil([&] { return absl::StrContains(daemon().Log(), listening); }, absl::Seconds(5)));
  const std::string log = daemon().Log();
  const size_t at = log.find(listening) + listening.size();
  ClientOptions options;
  options.address = absl::StrCat("127.0.0.1:", log.substr(at, log.find('\n', at) - at));
  options.tenant = "tcp";
  options.token = "multi-client-token";
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(options));
  std::vector<float> values(1 << 20);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 977) - 400.0f;
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array array,
                              client->FromVector(values, {static_cast<int64_t>(values.size())}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(DeviceMapping mapping, array.Map());
  EXPECT_EQ(mapping.size_bytes, static_cast<int64_t>(values.size() * sizeof(float)));
  // This thread's copies through the mapping, in the primary context (Map leaves the thread's
  // current context as it was).
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<gpukit::internal::PrimaryContext> primary,
                              gpukit::internal::PrimaryContext::Retain(mapping.device_index));
  GPUKIT_ASSERT_OK(primary->MakeCurrent());
  const CudaDriver& cu = primary->cu();
  std::vector<float> seen(values.size());
  ASSERT_EQ(cu.cuMemcpyDtoH(seen.data(), mapping.device_pointer, seen.size() * sizeof(float)),
            CUDA_SUCCESS);
  EXPECT_EQ(seen, values);
  const float written = 12.5f;
  ASSERT_EQ(cu.cuMemcpyHtoD(mapping.device_pointer + 40, &written, sizeof(written)), CUDA_SUCCESS);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> back, array.ToVector<float>());
  EXPECT_EQ(back[10], 12.5f);
  // Freed, the array's memory stays with the session (the mapping may still read it) until
  // the session ends.
  GPUKIT_ASSERT_OK(array.Free());
  GPUKIT_ASSERT_OK(client->Close());
  EXPECT_TRUE(PollUntil([&] { return WhatDaemonHolds().empty(); }, absl::Seconds(6)))
      << WhatDaemonHolds();
}

TEST_F(MultiClientGpuTest, ClientKilledMidWorkLeavesNothingBehindOnceItsLeaseLapses) {
  constexpr int64_t kLeaseMs = 2000;
  // The victim computes until killed; the survivor waits for it to be under way.
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      Subprocess victim, SpawnWorker(0, {"--rounds", "0", "--lease-ms", absl::StrCat(kLeaseMs)}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Subprocess survivor, SpawnWorker(1, {"--wait-for", go_path()}));
  ASSERT_TRUE(WaitForLine(victim, "computing", kWorkerTimeout)) << "victim output:\n"
                                                                << victim.Output();
  ASSERT_TRUE(WaitForLine(survivor, "ready", kWorkerTimeout)) << "survivor output:\n"
                                                              << survivor.Output();

  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse before, api().ListSessions());
  ASSERT_EQ(before.sessions_size(), 2);
  std::string victim_session;
  for (const v1::SessionInfo& session : before.sessions()) {
    if (session.client_pid() == victim.pid()) victim_session = session.session_id();
    EXPECT_GE(session.memory_bytes(), kResidentBytes) << session.session_id();
  }
  ASSERT_FALSE(victim_session.empty()) << "no session of the victim (pid " << victim.pid() << ")";

  // Kill the victim while both compute on the GPU.
  StartWaitingWorkers();
  ASSERT_TRUE(WaitForLine(survivor, "round 0: ", kWorkerTimeout)) << "survivor output:\n"
                                                                  << survivor.Output();
  ASSERT_TRUE(victim.Running()) << "victim output:\n" << victim.Output();
  // The victim's lease deadline as the daemon has it just before the kill; renewals only move
  // it later. Every call of the victim renews it, and its keepalive every third of the lease.
  const absl::Time before_last_look = absl::Now();
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse last_look, api().ListSessions());
  int64_t lease_remaining_ms = -1;
  for (const v1::SessionInfo& session : last_look.sessions()) {
    if (session.session_id() == victim_session) lease_remaining_ms = session.lease_remaining_ms();
  }
  ASSERT_GE(lease_remaining_ms, 0) << "the victim's session went before the kill";
  const absl::Time earliest_lapse = before_last_look + absl::Milliseconds(lease_remaining_ms);
  GPUKIT_ASSERT_OK(victim.Signal(SIGKILL));
  GPUKIT_ASSERT_OK_AND_ASSIGN(int wait_status, victim.Wait(absl::Seconds(5)));
  ASSERT_TRUE(WIFSIGNALED(wait_status)) << DescribeWaitStatus(wait_status);

  // The victim's lease lapses and the reaper (once a second) closes its session, while the
  // survivor goes on.
  EXPECT_TRUE(PollUntil(
      [&] {
        absl::StatusOr<v1::ListSessionsResponse> sessions = api().ListSessions();
        if (!sessions.ok()) return false;
        for (const v1::SessionInfo& session : sessions->sessions()) {
          if (session.session_id() == victim_session) return false;
        }
        return true;
      },
      absl::Milliseconds(kLeaseMs) + absl::Seconds(3)));
  // Not before the lease could have lapsed: the daemon must not drop live sessions early.
  EXPECT_GE(absl::Now(), earliest_lapse);

  absl::StatusOr<int> code = survivor.WaitForExitCode(kWorkerTimeout);
  EXPECT_THAT(code, IsOkAndHolds(0)) << "survivor output:\n" << survivor.Output();
  // The survivor closed its session; the victim's memory went with its lease.
  EXPECT_TRUE(PollUntil([&] { return WhatDaemonHolds().empty(); }, absl::Seconds(3)))
      << WhatDaemonHolds();
  ExpectDaemonServesAnotherClient();
}

}  // namespace
}  // namespace gpukit::testing
