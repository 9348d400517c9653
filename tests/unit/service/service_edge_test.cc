// The service edge in this process, through gRPC over a Core on a FakeClock: a task's
// deadline is a duration that the scheduler resolves against the core's clock (the
// request's queue timeout and the call's remaining time), and partition updates of
// different fields from several clients at once all land.
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "daemon/scheduler/clock.h"
#include "daemon/server.h"
#include "daemon/service/convert.h"
#include "gmock/gmock.h"
#include "gpukit/v1/admin.grpc.pb.h"
#include "gpukit/v1/array.grpc.pb.h"
#include "gpukit/v1/compute.grpc.pb.h"
#include "gpukit/v1/session.grpc.pb.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_device.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace gpukit {
namespace {

using ::gpukit::testing::ScopedTempDir;
using ::testing::HasSubstr;

std::unique_ptr<grpc::ClientContext> Context(
    std::chrono::system_clock::duration timeout = std::chrono::seconds(30)) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + timeout);
  return context;
}

class ServiceEdgeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CpuDeviceOptions device_options;
    device_options.memory_bytes = int64_t{64} << 20;
    std::vector<std::unique_ptr<Device>> devices;
    devices.push_back(*CpuDevice::Create(device_options));
    CoreOptions core_options;
    // One running slot, which the test can hold, so a task of a request waits in the queue.
    core_options.partitions.push_back({.name = "default",
                                       .memory_quota_bytes = int64_t{32} << 20,
                                       .compute_share = 1.0,
                                       .max_running_tasks = 1});
    // Leases outlast the hours of fake time the tests let pass while a request waits.
    core_options.sessions.default_lease = absl::Hours(3);
    core_options.sessions.max_lease = absl::Hours(3);
    GPUKIT_ASSERT_OK_AND_ASSIGN(core_, Core::Create(clock_, std::move(devices), core_options));
    ServerOptions options;
    options.listen = {"unix://" + dir_.path() + "/gpukitd.sock"};
    options.reap_interval = absl::Hours(1);
    GPUKIT_ASSERT_OK_AND_ASSIGN(server_, Server::Start(*core_, clock_, options));
    channel_ = grpc::CreateChannel(server_->addresses()[0], grpc::InsecureChannelCredentials());
    sessions_ = v1::SessionService::NewStub(channel_);
    arrays_ = v1::ArrayService::NewStub(channel_);
    compute_ = v1::ComputeService::NewStub(channel_);
    admin_ = v1::AdminService::NewStub(channel_);
  }

  void TearDown() override {
    if (blocker_ != nullptr) core_->scheduler().Finish(blocker_, absl::OkStatus(), {});
    if (other_ != nullptr) core_->scheduler().EndSession(other_);
    if (server_ != nullptr) server_->Shutdown();
  }

  // A session with one array of 4 floats, for a RunOp to read.
  void OpenSessionWithArray() {
    v1::OpenSessionRequest open;
    open.set_tenant("edge");
    v1::OpenSessionResponse opened;
    ASSERT_TRUE(sessions_->Open(Context().get(), open, &opened).ok());
    session_ = opened.session_id();
    v1::CreateArrayRequest create;
    create.set_session_id(session_);
    create.set_dtype(v1::DTYPE_FLOAT32);
    create.add_shape(4);
    v1::CreateArrayResponse created;
    ASSERT_TRUE(arrays_->Create(Context().get(), create, &created).ok());
    handle_ = created.array().handle();
  }

  // A task of a scheduler-only session takes the partition's only running slot.
  void OccupyTheSlot() {
    GPUKIT_ASSERT_OK_AND_ASSIGN(SessionAdmission other,
                                core_->scheduler().AdmitSession("s-other", "default", {}));
    other_ = other.ticket;
    GPUKIT_ASSERT_OK_AND_ASSIGN(blocker_, core_->scheduler().Submit(other_, {}));
    ASSERT_EQ(core_->scheduler().StateOf(blocker_), TaskState::kAdmitted);
  }

  // Waits (in real time, up to 30 s) until a request's task waits in the queue.
  std::optional<TaskInfo> AwaitQueuedTask() {
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (absl::Now() < give_up) {
      std::vector<TaskInfo> queued = core_->ListTasks({.state = TaskState::kQueued});
      if (!queued.empty()) return queued[0];
      absl::SleepFor(absl::Milliseconds(1));  // polls for an event, not for time to pass
    }
    return std::nullopt;
  }

  // RunOp "sum" of the session's array, on a thread: the call waits in the queue.
  std::thread RunOpInBackground(std::unique_ptr<grpc::ClientContext> context,
                                int64_t queue_timeout_ms, grpc::Status* status,
                                std::string* reason) {
    return std::thread([this, context = std::move(context), queue_timeout_ms, status, reason] {
      v1::RunOpRequest request;
      request.set_session_id(session_);
      request.set_op("sum");
      request.add_inputs()->set_handle(handle_);
      request.mutable_task()->set_queue_timeout_ms(queue_timeout_ms);
      v1::RunOpResponse response;
      *status = compute_->RunOp(context.get(), request, &response);
      auto it = context->GetServerTrailingMetadata().find("gpukit-reason");
      if (it != context->GetServerTrailingMetadata().end()) {
        *reason = std::string(it->second.data(), it->second.size());
      }
    });
  }

  FakeClock clock_;
  ScopedTempDir dir_;
  std::unique_ptr<Core> core_;
  std::unique_ptr<Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::SessionService::Stub> sessions_;
  std::unique_ptr<v1::ArrayService::Stub> arrays_;
  std::unique_ptr<v1::ComputeService::Stub> compute_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
  std::string session_;
  std::string handle_;
  SessionTicket other_;
  TaskRef blocker_;
};

// The fake clock is years from the system clock: only a deadline resolved against it makes
// the queued task expire when the fake clock passes the timeout, and not before.
TEST_F(ServiceEdgeTest, QueueTimeoutExpiresByTheCoresClock) {
  OpenSessionWithArray();
  OccupyTheSlot();
  grpc::Status status;
  std::string reason;
  std::thread client = RunOpInBackground(Context(), /*queue_timeout_ms=*/10, &status, &reason);
  std::optional<TaskInfo> queued = AwaitQueuedTask();
  ASSERT_TRUE(queued.has_value());
  EXPECT_EQ(queued->deadline - queued->submitted, absl::Milliseconds(10));

  clock_.Advance(absl::Milliseconds(9));
  core_->scheduler().Pump();
  EXPECT_EQ(core_->ListTasks({.state = TaskState::kQueued}).size(), 1u) << "not yet";
  clock_.Advance(absl::Milliseconds(1));
  core_->scheduler().Pump();
  client.join();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(status.error_message(), HasSubstr("waited 10ms in the queue"));
  EXPECT_EQ(reason, "REASON_DEADLINE_EXCEEDED");
}

// Without a queue timeout, the call's gRPC deadline bounds the task: its time left when the
// request arrived becomes the task's timeout on the core's clock.
TEST_F(ServiceEdgeTest, CallDeadlineBoundsTheQueuedTask) {
  OpenSessionWithArray();
  OccupyTheSlot();
  grpc::Status status;
  std::string reason;
  std::thread client =
      RunOpInBackground(Context(std::chrono::hours(1)), /*queue_timeout_ms=*/0, &status, &reason);
  std::optional<TaskInfo> queued = AwaitQueuedTask();
  ASSERT_TRUE(queued.has_value());
  const absl::Duration timeout = queued->deadline - queued->submitted;
  EXPECT_GT(timeout, absl::ZeroDuration());
  // gRPC sends the call's timeout rounded up to a few significant digits (1h less a little
  // travels as 3610 s), so the server's deadline may be up to a percent later.
  EXPECT_LE(timeout, absl::Hours(1) + absl::Minutes(1));

  clock_.Advance(absl::Hours(1) + absl::Minutes(1));
  core_->scheduler().Pump();
  client.join();
  // The task expired (its reason says so), long before gRPC's own deadline of the call.
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(status.error_message(), HasSubstr("in the queue"));
  EXPECT_EQ(reason, "REASON_DEADLINE_EXCEEDED");
}

// A call with neither a gRPC deadline nor a queue timeout gives its task no deadline: it
// waits until a slot frees, however long that takes on any clock.
TEST_F(ServiceEdgeTest, CallWithoutDeadlineOrQueueTimeoutWaitsForItsTurn) {
  OpenSessionWithArray();
  OccupyTheSlot();
  grpc::Status status;
  std::string reason;
  std::thread client = RunOpInBackground(std::make_unique<grpc::ClientContext>(),
                                         /*queue_timeout_ms=*/0, &status, &reason);
  std::optional<TaskInfo> queued = AwaitQueuedTask();
  ASSERT_TRUE(queued.has_value());
  EXPECT_EQ(queued->deadline, absl::InfiniteFuture());
  clock_.Advance(absl::Hours(2));
  core_->scheduler().Pump();
  EXPECT_EQ(core_->ListTasks({.state = TaskState::kQueued}).size(), 1u);

  core_->scheduler().Finish(blocker_, absl::OkStatus(), {});  // the slot frees
  blocker_ = nullptr;
  client.join();
  EXPECT_TRUE(status.ok()) << status.error_message();
}

// Four writers each own one field of the partition and raise it 1, 2, 3, ...: two admin
// clients through AdminService.UpdatePartition with an update_mask naming only their field,
// and two callers of Core::UpdatePartition in tight loops, as a configuration reload calls
// it, which keep the partition changing while each RPC is inside its handler. A value a
// writer has seen acknowledged must be in every answer that comes after (to any writer),
// and every writer's last value must be there at the end: an update made of a read and a
// write in two locked steps would carry a stale copy of another writer's field and undo it.
TEST_F(ServiceEdgeTest, ConcurrentPartitionUpdatesOfDifferentFieldsLoseNone) {
  constexpr int kRpcRounds = 300;
  constexpr int kWriters = 4;
  struct Field {
    const char* mask;
    void (*set)(v1::Partition&, int);
    int64_t (*get)(const v1::Partition&);
  };
  const Field fields[kWriters] = {
      {"memory_quota_bytes",
       [](v1::Partition& p, int v) { p.set_memory_quota_bytes((int64_t{16} << 20) + v); },
       [](const v1::Partition& p) { return p.memory_quota_bytes() - (int64_t{16} << 20); }},
      {"max_queued_tasks", [](v1::Partition& p, int v) { p.set_max_queued_tasks(1000 + v); },
       [](const v1::Partition& p) { return int64_t{p.max_queued_tasks()} - 1000; }},
      {"max_running_tasks", [](v1::Partition& p, int v) { p.set_max_running_tasks(100 + v); },
       [](const v1::Partition& p) { return int64_t{p.max_running_tasks()} - 100; }},
      {"max_sessions", [](v1::Partition& p, int v) { p.set_max_sessions(v); },
       [](const v1::Partition& p) { return int64_t{p.max_sessions()}; }},
  };
  constexpr int kRpcWriters = 2;  // fields 0 and 1; the core writers have 2 and 3
  // Start every field at its value 0.
  {
    v1::UpdatePartitionRequest start;
    v1::Partition& p = *start.mutable_partition();
    p.set_name("default");
    p.set_compute_share(1.0);
    for (const Field& field : fields) {
      field.set(p, 0);
      start.add_update_mask(field.mask);
    }
    start.add_update_mask("compute_share");
    v1::UpdatePartitionResponse response;
    const grpc::Status started = admin_->UpdatePartition(Context().get(), start, &response);
    ASSERT_TRUE(started.ok()) << started.error_message();
  }

  std::atomic<int64_t> acknowledged[kWriters] = {};
  std::atomic<int> stale_answers = 0;
  std::atomic<int> failures = 0;
  std::atomic<int> rpc_writers_done = 0;
  // Counts an answer that shows a field below what its writer had acknowledged before.
  auto check = [&](const int64_t(&floor)[kWriters], const v1::Partition& answer) {
    for (int g = 0; g < kWriters; ++g) {
      if (fields[g].get(answer) < floor[g]) ++stale_answers;
    }
  };
  auto snapshot = [&](int64_t(&floor)[kWriters]) {
    for (int g = 0; g < kWriters; ++g) floor[g] = acknowledged[g].load();
  };
  // All start together, so their updates interleave rather than run one after another.
  std::atomic<int> ready = 0;
  auto start_together = [&] {
    ++ready;
    while (ready.load() < kWriters) std::this_thread::yield();
  };
  std::vector<std::thread> writers;
  for (int f = 0; f < kRpcWriters; ++f) {
    writers.emplace_back([&, f] {
      start_together();
      for (int v = 1; v <= kRpcRounds; ++v) {
        int64_t floor[kWriters];
        snapshot(floor);
        v1::UpdatePartitionRequest request;
        request.mutable_partition()->set_name("default");
        fields[f].set(*request.mutable_partition(), v);
        request.add_update_mask(fields[f].mask);
        v1::UpdatePartitionResponse response;
        const grpc::Status status = admin_->UpdatePartition(Context().get(), request, &response);
        if (!status.ok()) {
          ADD_FAILURE() << fields[f].mask << " = " << v << ": " << status.error_message();
          ++failures;
          continue;
        }
        acknowledged[f].store(v);
        check(floor, response.partition().partition());
      }
      ++rpc_writers_done;
    });
  }
  for (int f = kRpcWriters; f < kWriters; ++f) {
    writers.emplace_back([&, f] {
      start_together();
      for (int v = 1; rpc_writers_done.load() < kRpcWriters; ++v) {
        int64_t floor[kWriters];
        snapshot(floor);
        PartitionFieldMask mask;
        PartitionSpec values;
        if (f == 2) {
          mask.max_running_tasks = true;
          values.max_running_tasks = 100 + v;
        } else {
          mask.max_sessions = true;
          values.max_sessions = v;
        }
        absl::StatusOr<PartitionSpec> updated = core_->UpdatePartition("default", mask, values);
        if (!updated.ok()) {
          ADD_FAILURE() << fields[f].mask << " = " << v << ": " << updated.status();
          ++failures;
          break;
        }
        acknowledged[f].store(v);
        v1::Partition answer;
        service::ToProto(*updated, &answer);
        check(floor, answer);
      }
    });
  }
  for (std::thread& writer : writers) writer.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(stale_answers.load(), 0) << "an update undid another's acknowledged field";
  v1::ListPartitionsResponse listed;
  ASSERT_TRUE(admin_->ListPartitions(Context().get(), {}, &listed).ok());
  ASSERT_EQ(listed.partitions_size(), 1);
  for (int f = 0; f < kWriters; ++f) {
    EXPECT_EQ(fields[f].get(listed.partitions(0).partition()), acknowledged[f].load())
        << fields[f].mask;
  }
  EXPECT_EQ(acknowledged[0].load(), kRpcRounds);
  EXPECT_EQ(acknowledged[1].load(), kRpcRounds);
}

TEST_F(ServiceEdgeTest, UpdateMaskNamingAFieldThatCannotChangeIsInvalidArgument) {
  v1::UpdatePartitionRequest request;
  request.mutable_partition()->set_name("default");
  request.mutable_partition()->set_device_index(1);
  request.add_update_mask("device_index");
  v1::UpdatePartitionResponse response;
  const grpc::Status status = admin_->UpdatePartition(Context().get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("cannot change"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(PartitionStatus partition, core_->GetPartitionStatus("default"));
  EXPECT_EQ(partition.spec.device_index, 0);
}

}  // namespace
}  // namespace gpukit
