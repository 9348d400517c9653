// The Core's streams: each partition has its own streams per QoS class, made when its first
// session of a class opens, shared round robin by that partition's sessions of the class,
// and destroyed once the partition is deleted and no session uses them. The device
// records every stream created and destroyed and where each request enqueues its work.
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "daemon/core/core.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/base/status_macros.h"
#include "runtime/cpu/cpu_device.h"
#include "tests/testing/forwarding_device.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::ForwardingDevice;
using ::gpukit::testing::IsOk;
using ::gpukit::testing::IsOkAndHolds;
using ::gpukit::testing::StatusIs;
using ::gpukit::testing::StreamRecord;
using ::testing::Contains;

constexpr int64_t kDeviceBytes = int64_t{1} << 20;

ResourceSpec Guaranteed() {
  ResourceSpec spec;
  spec.memory_limit_bytes = 4096;
  spec.compute_limit = 0.1;
  return spec;
}

ResourceSpec Burstable() {
  ResourceSpec spec;
  spec.memory_request_bytes = 1;
  spec.memory_limit_bytes = 4096;
  return spec;
}

ResourceSpec ForClass(QosClass qos) {
  switch (qos) {
    case QosClass::kGuaranteed:
      return Guaranteed();
    case QosClass::kBurstable:
      return Burstable();
    case QosClass::kBestEffort:
      return {};
  }
  return {};
}

PartitionSpec Partition(std::string name) {
  PartitionSpec spec;
  spec.name = std::move(name);
  spec.memory_quota_bytes = kDeviceBytes / 2;
  spec.compute_share = 0.5;
  return spec;
}

class CoreStreamsTest : public ::testing::Test {
 protected:
  // Partitions "a" and "b", half of the device each; 2 streams per partition and class.
  CoreStreamsTest() {
    options_.limits.max_array_bytes = kDeviceBytes;
    options_.streams_per_partition = 2;
    options_.partitions = {Partition("a"), Partition("b")};
  }

  Core& core() {
    if (core_ == nullptr) {
      CpuDeviceOptions device_options;
      device_options.memory_bytes = kDeviceBytes;
      auto device = std::make_unique<ForwardingDevice>(*CpuDevice::Create(device_options));
      device_ = device.get();
      device_->on_enqueue = [this](StreamId stream) { last_enqueue_ = stream.value; };
      std::vector<std::unique_ptr<Device>> devices;
      devices.push_back(std::move(device));
      absl::StatusOr<std::unique_ptr<Core>> core =
          Core::Create(clock_, std::move(devices), options_);
      EXPECT_THAT(core, IsOk());
      core_ = *std::move(core);
    }
    return *core_;
  }

  absl::StatusOr<std::string> Open(const std::string& partition, QosClass qos) {
    OpenSessionParams params;
    params.tenant = "tenant";
    params.partition = partition;
    params.resources = ForClass(qos);
    GPUKIT_ASSIGN_OR_RETURN(SessionGrant grant, core().OpenSession(params));
    if (grant.qos != qos) return absl::InternalError("test bug: the session has another class");
    return grant.session_id;
  }

  // The stream the session's work runs on: where its upload of a small array is enqueued.
  absl::StatusOr<StreamId> StreamOf(const std::string& session) {
    GPUKIT_ASSIGN_OR_RETURN(ArrayView view, core().CreateArray(session, {DType::kUInt8, {4}}));
    last_enqueue_ = 0;
    const char bytes[4] = {1, 2, 3, 4};
    GPUKIT_RETURN_IF_ERROR(core().WriteArray(session, view.handle, 0, bytes));
    GPUKIT_RETURN_IF_ERROR(core().FreeArray(session, view.handle).status());
    if (last_enqueue_ == 0) return absl::InternalError("the upload enqueued nothing");
    return StreamId{last_enqueue_};
  }

  std::vector<StreamRecord> Streams() const { return device_->streams(); }
  std::optional<StreamRecord> Find(StreamId stream) const {
    for (const StreamRecord& s : device_->streams()) {
      if (s.id == stream) return s;
    }
    return std::nullopt;
  }
  std::vector<StreamId> Live() const {
    std::vector<StreamId> live;
    for (const StreamRecord& s : device_->streams()) {
      if (!s.destroyed) live.push_back(s.id);
    }
    return live;
  }
  // The device's spill stream: the one stream Core::Create makes.
  StreamId Spill() const { return device_->streams().at(0).id; }

  FakeClock clock_;
  CoreOptions options_;
  std::unique_ptr<Core> core_;
  ForwardingDevice* device_ = nullptr;
  std::atomic<uint64_t> last_enqueue_{0};
};

TEST_F(CoreStreamsTest, OnlyTheSpillStreamExistsUntilASessionOpens) {
  core();
  const std::vector<StreamRecord> created = Streams();
  ASSERT_EQ(created.size(), 1u);
  EXPECT_EQ(created[0].priority, StreamPriority::kLow);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open("a", QosClass::kBestEffort));
  EXPECT_EQ(Streams().size(), 1u + options_.streams_per_partition)
      << "the first BestEffort session of a makes a's BestEffort streams, and no others";
}

TEST_F(CoreStreamsTest, SessionsOfOnePartitionAndClassShareItsStreamsRoundRobin) {
  std::vector<StreamId> streams;
  for (int i = 0; i < 4; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open("a", QosClass::kBurstable));
    GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, StreamOf(s));
    streams.push_back(stream);
  }
  EXPECT_NE(streams[0], streams[1]);
  EXPECT_EQ(streams[2], streams[0]);
  EXPECT_EQ(streams[3], streams[1]);
  EXPECT_NE(streams[0], Spill());
  EXPECT_NE(streams[1], Spill());
  EXPECT_EQ(Streams().size(), 3u) << "the spill stream and a's two Burstable streams";
}

TEST_F(CoreStreamsTest, SessionsOfTwoPartitionsNeverShareAStream) {
  absl::flat_hash_set<uint64_t> of_a, of_b;
  for (QosClass qos : {QosClass::kGuaranteed, QosClass::kBurstable, QosClass::kBestEffort}) {
    for (int i = 0; i < 3; ++i) {
      GPUKIT_ASSERT_OK_AND_ASSIGN(std::string in_a, Open("a", qos));
      GPUKIT_ASSERT_OK_AND_ASSIGN(std::string in_b, Open("b", qos));
      GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId a, StreamOf(in_a));
      GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId b, StreamOf(in_b));
      of_a.insert(a.value);
      of_b.insert(b.value);
    }
  }
  EXPECT_EQ(of_a.size(), 6u) << "a: 2 streams for each of 3 classes";
  EXPECT_EQ(of_b.size(), 6u);
  for (uint64_t stream : of_a) EXPECT_FALSE(of_b.contains(stream)) << "stream " << stream;
  EXPECT_FALSE(of_a.contains(Spill().value));
  EXPECT_FALSE(of_b.contains(Spill().value));
}

struct PriorityCase {
  QosClass qos;
  StreamPriority priority;
};

class CoreStreamPriorityTest : public CoreStreamsTest,
                               public ::testing::WithParamInterface<PriorityCase> {};

TEST_P(CoreStreamPriorityTest, SessionRunsOnAStreamOfItsClassPriority) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open("a", GetParam().qos));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, StreamOf(s));
  const std::optional<StreamRecord> record = Find(stream);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->priority, GetParam().priority);
  EXPECT_FALSE(record->destroyed);
}

INSTANTIATE_TEST_SUITE_P(
    Classes, CoreStreamPriorityTest,
    ::testing::Values(PriorityCase{QosClass::kGuaranteed, StreamPriority::kHigh},
                      PriorityCase{QosClass::kBurstable, StreamPriority::kNormal},
                      PriorityCase{QosClass::kBestEffort, StreamPriority::kLow}),
    [](const ::testing::TestParamInfo<PriorityCase>& info) {
      return std::string(QosName(info.param.qos));
    });

TEST_F(CoreStreamsTest, GuaranteedAndBestEffortSessionsOfAPartitionUseDifferentStreams) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string guaranteed, Open("a", QosClass::kGuaranteed));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string best_effort, Open("a", QosClass::kBestEffort));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId high, StreamOf(guaranteed));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId low, StreamOf(best_effort));
  EXPECT_NE(high, low);
  EXPECT_EQ(Find(high).value().priority, StreamPriority::kHigh);
  EXPECT_EQ(Find(low).value().priority, StreamPriority::kLow);
}

TEST_F(CoreStreamsTest, StreamsStayWithTheirPartitionWhenItsSessionsClose) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string first, Open("a", QosClass::kBestEffort));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, StreamOf(first));
  GPUKIT_ASSERT_OK(core().CloseSession(first).status());
  EXPECT_THAT(Live(), Contains(stream)) << "closing a session destroys no stream";
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string second, Open("a", QosClass::kBestEffort));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId again, StreamOf(second));
  EXPECT_NE(again, stream) << "the round robin goes on where it was";
  EXPECT_EQ(Streams().size(), 3u) << "the later session reuses a's streams";
}

TEST_F(CoreStreamsTest, ForcedDeleteDestroysThePartitionsStreamsAndLeaksNone) {
  absl::flat_hash_set<uint64_t> of_a;
  for (QosClass qos : {QosClass::kGuaranteed, QosClass::kBurstable, QosClass::kBestEffort}) {
    for (int i = 0; i < 2; ++i) {
      GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open("a", qos));
      GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, StreamOf(s));
      of_a.insert(stream.value);
    }
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string in_b, Open("b", QosClass::kBestEffort));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId of_b, StreamOf(in_b));
  ASSERT_EQ(of_a.size(), 6u);
  ASSERT_EQ(Live().size(), 1u + 6u + 2u);

  EXPECT_THAT(core().DeletePartition("a", /*force=*/true), IsOkAndHolds(6));
  for (const StreamRecord& s : Streams()) {
    EXPECT_EQ(s.destroyed, of_a.contains(s.id.value)) << "stream " << s.id.value;
  }
  EXPECT_THAT(Live(), ::testing::UnorderedElementsAre(Spill(), of_b, ::testing::_));
  // b's sessions go on, on b's streams.
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId still, StreamOf(in_b));
  EXPECT_THAT(Live(), Contains(still));

  // Every stream the core made is destroyed by the time it is gone. The device goes with the
  // core, so what it destroys from here on is recorded by the test itself.
  const std::vector<StreamRecord> made = Streams();
  absl::flat_hash_set<uint64_t> destroyed;
  for (const StreamRecord& s : made) {
    if (s.destroyed) destroyed.insert(s.id.value);
  }
  device_->before_destroy_stream = [&destroyed](StreamId stream) {
    destroyed.insert(stream.value);
  };
  core_.reset();
  device_ = nullptr;
  for (const StreamRecord& s : made) {
    EXPECT_TRUE(destroyed.contains(s.id.value)) << "stream " << s.id.value;
  }
}

TEST_F(CoreStreamsTest, DeletingAPartitionWithoutSessionsDestroysItsStreams) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open("a", QosClass::kBurstable));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, StreamOf(s));
  GPUKIT_ASSERT_OK(core().CloseSession(s).status());
  ASSERT_THAT(Live(), Contains(stream));
  EXPECT_THAT(core().DeletePartition("a", /*force=*/false), IsOkAndHolds(0));
  EXPECT_THAT(Live(), ::testing::ElementsAre(Spill()));
}

TEST_F(CoreStreamsTest, StreamsOfADeletedPartitionOutliveTheWorkStillRunningOnThem) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string s, Open("a", QosClass::kBestEffort));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, StreamOf(s));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView in, core().CreateArray(s, {DType::kFloat32, {4}}));
  bool deleted_while_running = false;
  device_->before_run_op = [&](const OpLaunch&) {
    // The op has been started: the partition goes, closing the session, while it runs.
    EXPECT_THAT(core().DeletePartition("a", /*force=*/true), IsOkAndHolds(1));
    const std::optional<StreamRecord> record = Find(stream);
    deleted_while_running = record.has_value() && !record->destroyed;
  };
  OpInput input;
  input.handle = in.handle;
  // The op runs to its end on its stream; registering its result fails, the session is gone.
  EXPECT_THAT(core().RunOp(s, "sum", {input}, {}), StatusIs(absl::StatusCode::kNotFound));
  device_->before_run_op = nullptr;
  EXPECT_TRUE(deleted_while_running) << "the stream was destroyed under the running op";
  EXPECT_THAT(Live(), ::testing::ElementsAre(Spill()))
      << "the request was the last user; its end destroys the streams";
  int sums = 0;
  for (const TaskInfo& task : core().scheduler().ListTasks({})) {
    if (task.name != "sum") continue;
    ++sums;
    EXPECT_EQ(task.state, TaskState::kSucceeded) << "the work itself ran";
  }
  EXPECT_EQ(sums, 1);
}

TEST_F(CoreStreamsTest, PartitionMadeAgainGetsNewStreams) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string old_session, Open("a", QosClass::kBestEffort));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId old_stream, StreamOf(old_session));
  GPUKIT_ASSERT_OK(core().DeletePartition("a", /*force=*/true).status());
  GPUKIT_ASSERT_OK(core().scheduler().CreatePartition(Partition("a")));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string session, Open("a", QosClass::kBestEffort));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, StreamOf(session));
  EXPECT_NE(stream, old_stream);
  EXPECT_FALSE(Find(stream).value().destroyed);
  EXPECT_TRUE(Find(old_stream).value().destroyed);
  EXPECT_EQ(Live().size(), 3u);
}

// Threads open (and some close) sessions in partition "r" while the main thread deletes it
// with force, round after round. Each open is refused (NOT_FOUND: the partition is gone) or
// succeeds and is then closed by the deletion; no session and no stream of "r" survives.
TEST_F(CoreStreamsTest, SessionsOpeningWhileTheirPartitionIsDeletedLeaveNoSessionOrStream) {
  options_.limits.max_sessions = 1 << 20;
  options_.partitions = {Partition("r")};
  core();
  constexpr int kRounds = 50;
  constexpr int kThreads = 4;
  for (int round = 0; round < kRounds; ++round) {
    if (round > 0) {
      GPUKIT_ASSERT_OK(core().scheduler().CreatePartition(Partition("r")));
    }
    std::atomic<int> opened{0};
    std::atomic<int> unexpected{0};
    std::vector<std::thread> openers;
    for (int t = 0; t < kThreads; ++t) {
      openers.emplace_back([&, t] {
        const QosClass qos = t % 2 == 0 ? QosClass::kBestEffort : QosClass::kBurstable;
        for (int i = 0;; ++i) {
          absl::StatusOr<std::string> s = Open("r", qos);
          if (absl::IsNotFound(s.status())) return;  // the partition is gone
          if (!s.ok()) {
            ++unexpected;
            return;
          }
          ++opened;
          if (i % 2 == 1) {
            absl::Status closed = core().CloseSession(*s).status();
            if (!closed.ok() && !absl::IsNotFound(closed)) ++unexpected;
          }
        }
      });
    }
    while (opened.load() < 2 * kThreads) std::this_thread::yield();
    absl::StatusOr<int> closed = core().DeletePartition("r", /*force=*/true);
    for (std::thread& t : openers) t.join();
    ASSERT_THAT(closed, IsOk()) << "round " << round;
    EXPECT_EQ(unexpected.load(), 0) << "round " << round;
    ASSERT_EQ(core().session_count(), 0) << "round " << round << ": a session outlived r";
    ASSERT_EQ(core().scheduler().session_count(), 0) << "round " << round;
    ASSERT_THAT(Live(), ::testing::ElementsAre(Spill())) << "round " << round;
  }
}

}  // namespace
}  // namespace gpukit
