// The scheduler seen from outside: a daemon configured with several partitions, client
// processes (tests/integration/worker.cc) in them at once, and gpukitctl reading the
// partitions' counters. Quotas, session admission, queue limits, queue timeouts, operator
// cancellation, and a client killed while it holds memory.
//
// Partitions of the daemon under test (device 0, 4 GiB, on the CPU backend):
//   gold     1 GiB, share 0.5; sessions default to Guaranteed (64 MiB, 0.05)
//   bronze   64 MiB, share 0.2, at most 4 tasks queued
//   narrow   256 MiB, share 0.1, 1 task running and 1 queued at most
//   slow     256 MiB, share and bandwidth cap 0.001, 1 running and 1 queued at most: once it
//            has run over its cap it holds every task for seconds (see SaturateSlow)
//   default  what they leave
#include <signal.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/status_matchers.h"
#include <sys/wait.h>

namespace gpukit::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr absl::Duration kLease = absl::Seconds(2);
constexpr absl::Duration kProcessTimeout = absl::Seconds(60);

class SchedulerTest : public DaemonTest {
 protected:
  std::string DaemonConfigJson() const override {
    return R"({
      "sessions": {"defaultLease": "2s", "minLease": "200ms"},
      "partitions": [
        {"name": "gold", "memory": "1GiB", "compute": 0.5,
         "defaultRequests": {"memory": "64MiB", "compute": 0.05},
         "defaultLimits": {"memory": "64MiB", "compute": 0.05}},
        {"name": "bronze", "memory": "64MiB", "compute": 0.2, "maxQueuedTasks": 4},
        {"name": "narrow", "memory": "256MiB", "compute": 0.1,
         "maxRunningTasks": 1, "maxQueuedTasks": 1},
        {"name": "slow", "memory": "256MiB", "compute": 0.001, "bandwidth": 0.001,
         "maxRunningTasks": 1, "maxQueuedTasks": 1}
      ]
    })";
  }

  absl::StatusOr<Subprocess> SpawnWorker(const std::vector<std::string>& args,
                                         const std::string& name) {
    std::vector<std::string> argv = {kWorkerPath, "--addr", daemon().address()};
    argv.insert(argv.end(), args.begin(), args.end());
    return Subprocess::Spawn({argv, absl::StrCat(temp_dir(), "/", name, ".out"), ""});
  }

  absl::StatusOr<ProgramResult> Ctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {kCtlPath, "--addr", daemon().address()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProgram(argv, temp_dir(), absl::Seconds(15));
  }

  // A libgpukit client in `partition` with `resources`.
  absl::StatusOr<std::unique_ptr<Client>> ConnectTo(const std::string& partition,
                                                    const ResourceRequirements& resources = {}) {
    ClientOptions options;
    options.address = daemon().address();
    options.tenant = absl::StrCat(partition, "-tenant");
    options.partition = partition;
    options.resources = resources;
    options.client_name = "scheduler-test";
    options.call_timeout = absl::Seconds(10);
    return Client::Connect(options);
  }

  // Waits for every worker to exit 0.
  void ExpectAllExitZero(std::vector<Subprocess>& workers) {
    for (size_t i = 0; i < workers.size(); ++i) {
      SCOPED_TRACE(absl::StrCat("worker ", i));
      absl::StatusOr<int> code = workers[i].WaitForExitCode(kProcessTimeout);
      EXPECT_THAT(code, IsOkAndHolds(0)) << "worker output:\n" << workers[i].Output();
    }
  }

  // Runs matmuls in the "slow" partition until it owes more than `debt` of device time to
  // its bandwidth cap of 0.001: from then on each of its tasks waits about debt / 0.001 (5 s
  // of wait per 5 ms of debt) before it may start. Returns the session's input array.
  void SaturateSlow(Client& client, absl::Duration debt, std::unique_ptr<Array>* input) {
    constexpr int64_t kN = 384;
    GPUKIT_ASSERT_OK_AND_ASSIGN(
        Array a, client.FromVector<float>(std::vector<float>(kN * kN, 0.5f), {kN, kN}));
    for (int i = 0; i < 50; ++i) {
      GPUKIT_ASSERT_OK_AND_ASSIGN(v1::PartitionStatus slow, api().GetPartition("slow"));
      if (slow.pacing_balance_ns() < -absl::ToInt64Nanoseconds(debt)) {
        *input = std::make_unique<Array>(std::move(a));
        return;
      }
      // Admitted at once while the partition has credit; it runs into debt here.
      GPUKIT_ASSERT_OK_AND_ASSIGN(Array product, client.Matmul(a, a));
    }
    FAIL() << "50 matmuls did not put partition \"slow\" " << absl::FormatDuration(debt)
           << " in debt";
  }
};

// Cells of a gpukitctl table line: columns are at least three spaces apart.
std::vector<std::string> Cells(const std::string& line) {
  std::vector<std::string> cells;
  for (absl::string_view piece : absl::StrSplit(line, "   ")) {
    piece = absl::StripAsciiWhitespace(piece);
    if (!piece.empty()) cells.emplace_back(piece);
  }
  return cells;
}

// The cells of the row whose first cell is `key`; empty if none.
std::vector<std::string> RowOf(const std::string& table, const std::string& key) {
  for (absl::string_view line : absl::StrSplit(table, '\n', absl::SkipEmpty())) {
    std::vector<std::string> cells = Cells(std::string(line));
    if (!cells.empty() && cells[0] == key) return cells;
  }
  return {};
}

TEST_F(SchedulerTest, PartitionsTableListsTheConfiguredPartitions) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult table, Ctl({"partitions"}));
  ASSERT_EQ(table.exit_code, 0) << table.stderr_text;
  const std::vector<std::string> lines = absl::StrSplit(table.stdout_text, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 6u) << table.stdout_text;
  EXPECT_THAT(
      Cells(lines[0]),
      ElementsAre("NAME", "DEVICE", "MEMORY(used/quota)", "COMPUTE(requested/share)", "BANDWIDTH",
                  "SESSIONS", "QUEUED", "RUNNING", "SPILL", "GPU-TIME", "BY-QOS(G/B/BE)", "SMS"));
  // By name; default has the memory and share the others leave.
  EXPECT_THAT(Cells(lines[1]), ElementsAre("bronze", "0", "0B/64MiB", "0/0.2", "-", "0", "0", "0",
                                           "no", "0us", "0us/0us/0us", "-"));
  EXPECT_THAT(Cells(lines[2]), ElementsAre("default", "0", "0B/2.4GiB", "0/0.199", "-", "0", "0",
                                           "0", "no", "0us", "0us/0us/0us", "-"));
  EXPECT_THAT(Cells(lines[3]), ElementsAre("gold", "0", "0B/1GiB", "0/0.5", "-", "0", "0", "0",
                                           "no", "0us", "0us/0us/0us", "-"));
  EXPECT_THAT(Cells(lines[4]), ElementsAre("narrow", "0", "0B/256MiB", "0/0.1", "-", "0", "0", "0",
                                           "no", "0us", "0us/0us/0us", "-"));
  EXPECT_THAT(Cells(lines[5]), ElementsAre("slow", "0", "0B/256MiB", "0/0.001", "0.001", "0", "0",
                                           "0", "no", "0us", "0us/0us/0us", "-"));

  // A gold session takes the partition's Guaranteed defaults, which the table counts.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> gold, ConnectTo("gold"));
  EXPECT_EQ(gold->qos_class(), "Guaranteed");
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array held, gold->Empty({1024 * 1024}, DType::kFloat32));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult after, Ctl({"partitions"}));
  ASSERT_EQ(after.exit_code, 0) << after.stderr_text;
  // Its GPU time is Create's zeroing of the array (how long it took is the machine's).
  EXPECT_THAT(RowOf(after.stdout_text, "gold"),
              ElementsAre("gold", "0", "4MiB/1GiB", "0.05/0.5", "-", "1", "0", "0", "no",
                          ::testing::_, ::testing::EndsWith("/0us/0us"), "132"));
}

TEST_F(SchedulerTest, WorkersInSeveralPartitionsAllSucceedAtOnce) {
  std::vector<Subprocess> workers;
  const std::vector<std::string> partitions = {"gold",   "gold",   "gold",    "bronze",
                                               "bronze", "bronze", "default", "narrow"};
  for (size_t i = 0; i < partitions.size(); ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(Subprocess worker,
                                SpawnWorker({"--mode", "compute", "--seed", absl::StrCat(i + 1),
                                             "--partition", partitions[i]},
                                            absl::StrCat("compute-", i)));
    workers.push_back(std::move(worker));
  }
  ExpectAllExitZero(workers);

  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListPartitionsResponse listed, api().ListPartitions());
  for (const v1::PartitionStatus& p : listed.partitions()) {
    SCOPED_TRACE(p.partition().name());
    EXPECT_EQ(p.sessions(), 0);
    EXPECT_EQ(p.memory_used_bytes(), 0);
    EXPECT_EQ(p.memory_requested_bytes(), 0);
    EXPECT_EQ(p.queued_tasks(), 0);
    EXPECT_EQ(p.running_tasks(), 0);
    EXPECT_EQ(p.failed_total(), 0);
    EXPECT_THAT(p.rejected(), ::testing::IsEmpty());
    if (p.partition().name() != "slow") {
      EXPECT_GT(p.succeeded_total(), 0);
    }
  }
  EXPECT_TRUE(WaitUntilDaemonHoldsNothing(absl::Seconds(1)));
}

TEST_F(SchedulerTest, AllocationAboveTheBronzeQuotaIsRefusedWhileGoldKeepsWorking) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> bronze, ConnectTo("bronze"));
  EXPECT_EQ(bronze->qos_class(), "BestEffort");
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array held, bronze->Empty({48 * kMiB}, DType::kUInt8));

  std::vector<Subprocess> workers;
  for (int i = 0; i < 3; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(
        Subprocess worker,
        SpawnWorker({"--mode", "compute", "--seed", absl::StrCat(10 + i), "--partition", "gold"},
                    absl::StrCat("gold-", i)));
    workers.push_back(std::move(worker));
  }
  // 48 MiB + 32 MiB > 64 MiB: refused, though the device has gigabytes free.
  absl::StatusOr<Array> beyond = bronze->Empty({32 * kMiB}, DType::kUInt8);
  EXPECT_THAT(beyond, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("quota")));
  EXPECT_EQ(RejectReason(beyond.status()), "REASON_PARTITION_QUOTA_EXCEEDED");
  // An op whose result does not fit is refused the same way.
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array more, bronze->Empty({12 * kMiB}, DType::kUInt8));
  absl::StatusOr<Array> copy = bronze->Add(more, 1);
  EXPECT_THAT(copy, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(RejectReason(copy.status()), "REASON_PARTITION_QUOTA_EXCEEDED");
  // Up to the quota exactly is fine.
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array last, bronze->Empty({4 * kMiB}, DType::kUInt8));

  ExpectAllExitZero(workers);
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::PartitionStatus status, api().GetPartition("bronze"));
  EXPECT_EQ(status.memory_used_bytes(), 64 * kMiB);
  EXPECT_THAT(status.rejected(), UnorderedElementsAre(Pair("REASON_PARTITION_QUOTA_EXCEEDED", 2)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::PartitionStatus gold, api().GetPartition("gold"));
  EXPECT_GT(gold.succeeded_total(), 0);
  EXPECT_EQ(gold.failed_total(), 0);
  EXPECT_THAT(gold.rejected(), ::testing::IsEmpty());
}

TEST_F(SchedulerTest, SessionsAreAdmittedAgainstTheirPartition) {
  // Requests the partition cannot promise.
  ResourceRequirements too_much;
  too_much.memory_request_bytes = 128 * kMiB;
  too_much.memory_limit_bytes = 128 * kMiB;
  absl::StatusOr<std::unique_ptr<Client>> refused = ConnectTo("bronze", too_much);
  EXPECT_THAT(refused,
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("requests.memory")));
  EXPECT_EQ(RejectReason(refused.status()), "REASON_PARTITION_QUOTA_EXCEEDED");
  ResourceRequirements compute;
  compute.compute_request = 0.6;
  absl::StatusOr<std::unique_ptr<Client>> no_share = ConnectTo("gold", compute);
  EXPECT_THAT(no_share,
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("requests.compute")));
  EXPECT_EQ(RejectReason(no_share.status()), "REASON_PARTITION_QUOTA_EXCEEDED");

  // Requests above limits make no sense.
  ResourceRequirements inverted;
  inverted.memory_request_bytes = 64 * kMiB;
  inverted.memory_limit_bytes = 32 * kMiB;
  EXPECT_THAT(ConnectTo("gold", inverted),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("limits.memory")));

  // A partition that does not exist, named with the ones that do.
  EXPECT_THAT(ConnectTo("platinum"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("\"platinum\" does not exist")));

  // Gold's defaults request 0.05 of its 0.5 share: ten sessions fit, the eleventh does not.
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 10; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, ConnectTo("gold"));
    clients.push_back(std::move(client));
  }
  absl::StatusOr<std::unique_ptr<Client>> eleventh = ConnectTo("gold");
  EXPECT_THAT(eleventh, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(RejectReason(eleventh.status()), "REASON_PARTITION_QUOTA_EXCEEDED");
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::PartitionStatus gold, api().GetPartition("gold"));
  EXPECT_EQ(gold.sessions(), 10);
  EXPECT_EQ(gold.memory_requested_bytes(), 640 * kMiB);
  EXPECT_NEAR(gold.compute_requested(), 0.5, 1e-9);
  // One leaves; a place opens.
  clients.pop_back();
  GPUKIT_EXPECT_OK(ConnectTo("gold").status());

  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::PartitionStatus bronze, api().GetPartition("bronze"));
  EXPECT_THAT(bronze.rejected(), UnorderedElementsAre(Pair("REASON_PARTITION_QUOTA_EXCEEDED", 1)));
  ExpectDaemonServesAnotherClient();
}

TEST_F(SchedulerTest, ClientKilledWhileHoldingMemoryGivesItBackWithinALease) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      Subprocess worker,
      SpawnWorker({"--mode", "hold", "--bytes", "48MiB", "--partition", "bronze"}, "hold"));
  ASSERT_TRUE(
      PollUntil([&] { return absl::StrContains(worker.Output(), "holding") || !worker.Running(); },
                absl::Seconds(20)));
  ASSERT_TRUE(worker.Running()) << "worker output:\n" << worker.Output();
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::PartitionStatus before, api().GetPartition("bronze"));
  EXPECT_EQ(before.memory_used_bytes(), 48 * kMiB);
  EXPECT_EQ(before.sessions(), 1);
  // Another bronze client cannot have what the worker holds.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> other, ConnectTo("bronze"));
  EXPECT_THAT(other->Empty({32 * kMiB}, DType::kUInt8),
              StatusIs(absl::StatusCode::kResourceExhausted));

  GPUKIT_ASSERT_OK(worker.Signal(SIGKILL));
  GPUKIT_ASSERT_OK_AND_ASSIGN(int wait_status, worker.Wait(absl::Seconds(5)));
  ASSERT_TRUE(WIFSIGNALED(wait_status)) << DescribeWaitStatus(wait_status);
  const absl::Time killed_at = absl::Now();
  // The lease lapses (2 s) and the reaper (once a second) closes the session.
  EXPECT_TRUE(PollUntil(
      [&] {
        absl::StatusOr<v1::PartitionStatus> bronze = api().GetPartition("bronze");
        return bronze.ok() && bronze->memory_used_bytes() == 0 && bronze->sessions() == 1;
      },
      kLease + absl::Seconds(3)))
      << "bronze still holds memory " << absl::FormatDuration(absl::Now() - killed_at)
      << " after the kill";
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array freed_up, other->Empty({32 * kMiB}, DType::kUInt8));

  // gpukitctl shows the same.
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult json, Ctl({"-o", "json", "partitions"}));
  ASSERT_EQ(json.exit_code, 0) << json.stderr_text;
  v1::ListPartitionsResponse listed;
  google::protobuf::util::JsonParseOptions strict;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.stdout_text, &listed, strict).ok())
      << json.stdout_text;
  for (const v1::PartitionStatus& p : listed.partitions()) {
    if (p.partition().name() == "bronze") {
      EXPECT_EQ(p.memory_used_bytes(), 32 * kMiB);
    }
  }
}

TEST_F(SchedulerTest, QueueFullRefusalsAreCountedAndTheDaemonServesOn) {
  constexpr int kWorkers = 4;
  constexpr int kOps = 100;
  std::vector<Subprocess> workers;
  for (int i = 0; i < kWorkers; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(
        Subprocess worker, SpawnWorker({"--mode", "hammer", "--ops", absl::StrCat(kOps),
                                        "--partition", "narrow", "--seed", absl::StrCat(i + 1)},
                                       absl::StrCat("hammer-", i)));
    workers.push_back(std::move(worker));
  }
  ExpectAllExitZero(workers);
  int64_t ok_total = 0, queue_full_total = 0;
  for (Subprocess& worker : workers) {
    const std::string output = worker.Output();
    const size_t at = output.find("hammer ok=");
    ASSERT_NE(at, std::string::npos) << output;
    int64_t ok = 0, queue_full = 0;
    const std::vector<std::string> fields =
        absl::StrSplit(absl::StripAsciiWhitespace(output.substr(at)), ' ');
    ASSERT_EQ(fields.size(), 3u) << output;
    ASSERT_TRUE(absl::SimpleAtoi(absl::StripPrefix(fields[1], "ok="), &ok)) << output;
    ASSERT_TRUE(absl::SimpleAtoi(absl::StripPrefix(fields[2], "queue_full="), &queue_full))
        << output;
    ok_total += ok;
    queue_full_total += queue_full;
  }
  // One running and one queued at most: with four clients some calls are refused (how many
  // depends on timing), and the partition counts exactly those.
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::PartitionStatus narrow, api().GetPartition("narrow"));
  const auto it = narrow.rejected().find("REASON_QUEUE_FULL");
  const int64_t counted = it == narrow.rejected().end() ? 0 : it->second;
  EXPECT_EQ(counted, queue_full_total);
  EXPECT_EQ(narrow.rejected_size(), queue_full_total > 0 ? 1 : 0);
  EXPECT_GE(narrow.succeeded_total(), ok_total);
  EXPECT_EQ(narrow.admitted_total(), narrow.succeeded_total());
  EXPECT_EQ(narrow.failed_total(), 0);
  EXPECT_GE(ok_total + queue_full_total, kWorkers * kOps);  // a refused op is not retried
  RecordProperty("queue_full", static_cast<int>(queue_full_total));

  // gpukitctl queues shows the same count.
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult queues, Ctl({"queues"}));
  ASSERT_EQ(queues.exit_code, 0) << queues.stderr_text;
  const std::vector<std::string> row = RowOf(queues.stdout_text, "narrow");
  ASSERT_EQ(row.size(), 7u) << queues.stdout_text;
  EXPECT_EQ(row[6], queue_full_total > 0 ? absl::StrCat("QUEUE_FULL=", queue_full_total) : "-");
  ExpectDaemonServesAnotherClient();
}

TEST_F(SchedulerTest, TasksOfASaturatedPartitionWaitExpireAreRefusedAndCancelled) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, ConnectTo("slow"));
  std::unique_ptr<Array> a;
  ASSERT_NO_FATAL_FAILURE(SaturateSlow(*client, absl::Milliseconds(5), &a));

  // A task that may wait 100 ms expires in the queue.
  TaskOptions impatient;
  impatient.queue_timeout = absl::Milliseconds(100);
  absl::StatusOr<Array> expired = client->RunOp("add", {*a, 1}, {}, impatient);
  EXPECT_THAT(expired, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("queue")));
  EXPECT_EQ(RejectReason(expired.status()), "REASON_DEADLINE_EXCEEDED");

  // A patient one waits in the queue, which then is full (max 1).
  absl::StatusOr<Array> waited = absl::InternalError("not run");
  std::thread patient([&] { waited = client->Add(*a, 2); });
  v1::ListTasksRequest queued_request;
  queued_request.set_partition("slow");
  queued_request.set_state(v1::TASK_STATE_QUEUED);
  v1::ListTasksResponse queued;
  EXPECT_TRUE(PollUntil(
      [&] {
        absl::StatusOr<v1::ListTasksResponse> listed = api().ListTasks(queued_request);
        if (listed.ok()) queued = *listed;
        return listed.ok() && listed->tasks_size() == 1;
      },
      absl::Seconds(5)));
  if (queued.tasks_size() != 1) {
    patient.join();
    FAIL() << "no task queued in slow: " << queued.DebugString();
  }
  const std::string task_id = absl::StrCat(queued.tasks(0).task_id());
  absl::StatusOr<Array> refused = client->Add(*a, 3);
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(RejectReason(refused.status()), "REASON_QUEUE_FULL");

  // gpukitctl lists the waiting task and cancels it; its caller gets CANCELLED.
  absl::StatusOr<ProgramResult> tasks = Ctl({"tasks", "--partition", "slow", "--state", "queued"});
  absl::StatusOr<ProgramResult> cancel = Ctl({"task", "cancel", task_id});
  patient.join();
  GPUKIT_ASSERT_OK(tasks.status());
  EXPECT_EQ(tasks->exit_code, 0) << tasks->stderr_text;
  const std::vector<std::string> row = RowOf(tasks->stdout_text, task_id);
  ASSERT_EQ(row.size(), 11u) << tasks->stdout_text;
  EXPECT_EQ(row[1], "slow");
  EXPECT_EQ(row[2], client->session_id());
  EXPECT_EQ(row[3], "BestEffort");
  EXPECT_EQ(row[4], "op");
  EXPECT_EQ(row[5], "add");
  EXPECT_EQ(row[7], "Queued");
  EXPECT_EQ(row[9], "-");   // not run
  EXPECT_EQ(row[10], "-");  // no device time
  GPUKIT_ASSERT_OK(cancel.status());
  EXPECT_EQ(cancel->exit_code, 0) << cancel->stderr_text;
  EXPECT_EQ(cancel->stdout_text, absl::StrCat("task/", task_id, " cancelled\n"));
  EXPECT_THAT(waited, StatusIs(absl::StatusCode::kCancelled, HasSubstr("operator")));
  EXPECT_EQ(RejectReason(waited.status()), "REASON_CANCELLED");

  // Gone from the queue: a second cancel is NOT_FOUND.
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult again, Ctl({"task", "cancel", task_id}));
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_THAT(again.stderr_text, HasSubstr("is not waiting or running"));

  // Each refusal and early end is counted by reason.
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::PartitionStatus slow, api().GetPartition("slow"));
  EXPECT_THAT(slow.rejected(),
              UnorderedElementsAre(Pair("REASON_DEADLINE_EXCEEDED", 1),
                                   Pair("REASON_QUEUE_FULL", 1), Pair("REASON_CANCELLED", 1)));
  EXPECT_EQ(slow.queued_tasks(), 0);
  EXPECT_EQ(slow.failed_total(), 0);
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult queues, Ctl({"queues"}));
  EXPECT_THAT(RowOf(queues.stdout_text, "slow"),
              ElementsAre("slow", "0", "0", ::testing::_, ::testing::_, "0",
                          "CANCELLED=1,DEADLINE_EXCEEDED=1,QUEUE_FULL=1"));
  v1::ListTasksRequest ended;
  ended.set_partition("slow");
  ended.set_state(v1::TASK_STATE_EXPIRED);
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListTasksResponse expired_tasks, api().ListTasks(ended));
  ASSERT_EQ(expired_tasks.tasks_size(), 1);
  EXPECT_THAT(expired_tasks.tasks(0).error(), HasSubstr("deadline"));
  EXPECT_GE(expired_tasks.tasks(0).wait_us(), 100000);
  // Other partitions are not held by slow's debt.
  ExpectDaemonServesAnotherClient();
}

// A refusal that spilling turns into a grant is not a refusal: only final refusals count.
TEST_F(SchedulerTest, AllocationGrantedBySpillingIsNotCountedAsARefusal) {
  ASSERT_THAT(Ctl({"partition", "update", "default", "--memory", "1GiB", "--compute", "0.1"}),
              IsOkAndHolds(::testing::Field(&ProgramResult::exit_code, 0)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      ProgramResult created,
      Ctl({"partition", "create", "spilly", "--memory", "64MiB", "--compute", "0.001", "--spill"}));
  ASSERT_EQ(created.exit_code, 0) << created.stderr_text;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> best_effort, ConnectTo("spilly"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array old, best_effort->Empty({48 * kMiB}, DType::kUInt8));
  ResourceRequirements within_request;
  within_request.memory_request_bytes = 32 * kMiB;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> burstable,
                              ConnectTo("spilly", within_request));
  // Fits only once the BestEffort array is spilled to host memory, which the daemon does.
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array fresh, burstable->Empty({32 * kMiB}, DType::kUInt8));
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::PartitionStatus spilly, api().GetPartition("spilly"));
  EXPECT_EQ(spilly.memory_used_bytes(), 32 * kMiB);
  EXPECT_THAT(spilly.rejected(), ::testing::IsEmpty()) << spilly.DebugString();
  // A request that no spill can satisfy is still counted, once.
  EXPECT_FALSE(burstable->Empty({64 * kMiB}, DType::kUInt8).ok());
  GPUKIT_ASSERT_OK_AND_ASSIGN(spilly, api().GetPartition("spilly"));
  EXPECT_THAT(spilly.rejected(),
              ::testing::ElementsAre(Pair("REASON_PARTITION_QUOTA_EXCEEDED", 1)))
      << spilly.DebugString();
}

// A Guaranteed task that its own partition's bandwidth cap holds back does not gate
// BestEffort work elsewhere on the device: gating would only leave the device idle.
TEST_F(SchedulerTest, GuaranteedTaskHeldByItsOwnCapDoesNotGateBestEffortElsewhere) {
  ResourceRequirements guaranteed;
  guaranteed.memory_request_bytes = 16 * kMiB;
  guaranteed.memory_limit_bytes = 16 * kMiB;
  guaranteed.compute_request = 0.001;
  guaranteed.compute_limit = 0.001;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> capped, ConnectTo("slow", guaranteed));
  ASSERT_EQ(capped->qos_class(), "Guaranteed");
  std::unique_ptr<Array> a;
  ASSERT_NO_FATAL_FAILURE(SaturateSlow(*capped, absl::Milliseconds(5), &a));
  TaskOptions three_seconds;
  three_seconds.queue_timeout = absl::Seconds(3);
  absl::StatusOr<Array> waited = absl::InternalError("not run");
  std::thread patient([&] { waited = capped->RunOp("add", {*a, 1}, {}, three_seconds); });
  v1::ListTasksRequest queued;
  queued.set_partition("slow");
  queued.set_state(v1::TASK_STATE_QUEUED);
  EXPECT_TRUE(PollUntil(
      [&] {
        absl::StatusOr<v1::ListTasksResponse> listed = api().ListTasks(queued);
        return listed.ok() && listed->tasks_size() == 1;
      },
      absl::Seconds(2)));

  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> other, ConnectTo("default"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array x, other->Empty({2}, DType::kFloat32));  // not a task
  const absl::Time start = absl::Now();
  absl::StatusOr<Array> y = other->Add(x, 1);
  const absl::Duration took = absl::Now() - start;
  patient.join();
  GPUKIT_EXPECT_OK(y.status());
  EXPECT_LT(took, absl::Seconds(1))
      << "a BestEffort op on an idle partition waited " << absl::FormatDuration(took);
  EXPECT_EQ(RejectReason(waited.status()), "REASON_DEADLINE_EXCEEDED");
}

}  // namespace
}  // namespace gpukit::testing
