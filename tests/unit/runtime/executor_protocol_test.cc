// The executor channel carries a planned op whole: what the planner decided for a reduction
// over several axes, argmax's axis and a 1-d matmul reach the executor as they left gpukitd.
#include "runtime/executor/executor_protocol.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/base/host_load.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/unix_fd.h"
#include "runtime/executor/spin_wait.h"
#include "runtime/op_registry.h"
#include "tests/testing/status_matchers.h"
#include <sys/socket.h>

namespace gpukit {
namespace {

using ::gpukit::testing::IsOk;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Plans `op` on arrays of `shapes` (float32; buffer ids 1, 2, ...; output id 99), encodes
// it as gpukitd does and decodes it as the executor does.
absl::StatusOr<OpLaunch> RoundTrip(absl::string_view op, const std::vector<Shape>& shapes,
                                   const AttrMap& attrs) {
  const OpRegistry& registry = OpRegistry::Builtin();
  GPUKIT_ASSIGN_OR_RETURN(const OpDef* def, registry.Find(op));
  std::vector<OperandDesc> descs;
  OpLaunch launch;
  launch.op = def;
  for (size_t i = 0; i < shapes.size(); ++i) {
    OperandDesc desc;
    desc.tensor = {DType::kFloat32, shapes[i]};
    descs.push_back(desc);
    OpOperand operand;
    operand.buffer = BufferId{i + 1};
    operand.desc = desc.tensor;
    launch.inputs.push_back(operand);
  }
  GPUKIT_ASSIGN_OR_RETURN(launch.plan, registry.Plan(*def, descs, attrs));
  launch.output = BufferId{99};
  executor::RunOp message;
  EncodeRunOp(launch, StreamId{7}, message);
  return DecodeRunOp(message, [](uint64_t id, const executor::Place&) -> absl::StatusOr<BufferId> {
    return BufferId{id};
  });
}

TEST(ExecutorProtocolTest, CarriesTheAxesOfAReductionOverSeveralAxes) {
  for (const std::vector<int64_t>& axes :
       {std::vector<int64_t>{2, 0}, std::vector<int64_t>{}, std::vector<int64_t>{-1}}) {
    absl::StatusOr<OpLaunch> decoded =
        RoundTrip("mean", {{2, 3, 4}}, {{"axis", axes}, {"keepdims", true}});
    ASSERT_THAT(decoded, IsOk());
    OperandDesc x;
    x.tensor = {DType::kFloat32, {2, 3, 4}};
    const absl::StatusOr<OpPlan> planned =
        OpRegistry::Builtin().Plan(*decoded->op, {x}, {{"axis", axes}, {"keepdims", true}});
    ASSERT_THAT(planned, IsOk());
    EXPECT_EQ(decoded->plan.params.reduce_axes, planned->params.reduce_axes);
    EXPECT_TRUE(decoded->plan.params.keepdims);
    EXPECT_EQ(decoded->plan.output.shape, planned->output.shape);
  }
  absl::StatusOr<OpLaunch> all = RoundTrip("sum", {{2, 3}}, {});
  ASSERT_THAT(all, IsOk());
  EXPECT_THAT(all->plan.params.reduce_axes, ElementsAre(0, 1));
  EXPECT_EQ(all->plan.params.axis, std::nullopt);
}

TEST(ExecutorProtocolTest, CarriesArgmaxsAxisAndA1dMatmulsShapes) {
  absl::StatusOr<OpLaunch> argmax = RoundTrip("argmax", {{2, 3}}, {{"axis", int64_t{-1}}});
  ASSERT_THAT(argmax, IsOk());
  EXPECT_EQ(argmax->plan.params.axis, 1);
  EXPECT_THAT(argmax->plan.params.reduce_axes, IsEmpty());

  absl::StatusOr<OpLaunch> matmul = RoundTrip("matmul", {{3}, {5, 3, 4}}, {});
  ASSERT_THAT(matmul, IsOk());
  ASSERT_EQ(matmul->inputs.size(), 2u);
  EXPECT_THAT(matmul->inputs[0].desc.shape, ElementsAre(3));
  EXPECT_THAT(matmul->inputs[1].desc.shape, ElementsAre(5, 3, 4));
  EXPECT_THAT(matmul->plan.output.shape, ElementsAre(5, 4));
  EXPECT_EQ(matmul->output.value, 99u);
}

// A host with cores to spare, or none, whatever this one's load (HostLoad).
HostLoad& IdleHost() {
  static HostLoad load(
      8, [] { return std::optional<int>(0); }, [] { return int64_t{0}; });
  return load;
}
HostLoad& BusyHost() {
  static HostLoad load(
      8, [] { return std::optional<int>(16); }, [] { return int64_t{0}; });
  return load;
}

TEST(RecentActivityTest, IsRecentOnlyWithinItsWindowAfterATouch) {
  RecentActivity hour(std::chrono::hours(1), nullptr, false, IdleHost());
  EXPECT_FALSE(hour.Recent());  // never touched
  hour.Touch();
  EXPECT_TRUE(hour.Recent());
  RecentActivity none(std::chrono::microseconds(0));  // a small host: never polls
  none.Touch();
  EXPECT_FALSE(none.Recent());
  RecentActivity short_window(std::chrono::microseconds(1), nullptr, false, IdleHost());
  short_window.Touch();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));  // past the window, not a wait
  EXPECT_FALSE(short_window.Recent());
}

// While answers are owed the reader polls whatever the time since the last traffic: a
// wait's reply comes when the device's work ends, however long it runs.
TEST(RecentActivityTest, IsRecentWhileAnswersAreOwed) {
  std::atomic<int> owed{0};
  RecentActivity activity(std::chrono::microseconds(1), &owed, false, IdleHost());
  EXPECT_FALSE(activity.Recent()) << "never touched, nothing owed";
  owed = 2;
  EXPECT_TRUE(activity.Recent());
  owed = 0;
  EXPECT_FALSE(activity.Recent());
  RecentActivity small_host(std::chrono::microseconds(0), &owed);  // never polls
  owed = 1;
  EXPECT_FALSE(small_host.Recent());
}

// A host with no core to spare polls for nothing: its threads sleep, leaving the cores to the
// threads they wait for.
TEST(RecentActivityTest, IsNeverRecentOnABusyHost) {
  std::atomic<int> owed{1};
  RecentActivity activity(std::chrono::hours(1), &owed, false, BusyHost());
  activity.Touch();
  EXPECT_FALSE(activity.Recent());
}

TEST(SpinUntilTest, StopsAtOnceOnABusyHostAndSpinsOnAnIdleOne) {
  int looks = 0;
  auto ready_at_1000th_look = [&] { return ++looks >= 1000; };
  EXPECT_FALSE(SpinUntil(ready_at_1000th_look, std::chrono::seconds(30), BusyHost()));
  EXPECT_LE(looks, 2) << "spun on although the host had no core to spare";
  looks = 0;
  EXPECT_TRUE(SpinUntil(ready_at_1000th_look, std::chrono::seconds(30), IdleHost()));
  EXPECT_EQ(looks, 1000);
}

TEST(SpinSlotsTest, HandsOutAtMostItsSlotsAndTakesThemBack) {
  SpinSlots slots(2);
  EXPECT_TRUE(slots.TryAcquire());
  EXPECT_TRUE(slots.TryAcquire());
  EXPECT_FALSE(slots.TryAcquire()) << "both taken";
  slots.Release();
  EXPECT_TRUE(slots.TryAcquire());
  SpinSlots none(0);  // a small host: nobody spins for long
  EXPECT_FALSE(none.TryAcquire());
}

// The reader's polling receive (recent traffic) gets what the sleeping one gets: a message
// sent later by another thread, a closed peer's end, bytes that do not parse.
TEST(ExecutorProtocolTest, APollingReceiveGetsWhatASleepingOneGets) {
  for (bool polling : {false, true}) {
    SCOPED_TRACE(polling ? "polling" : "sleeping");
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
    ScopedFd a(fds[0]), b(fds[1]);
    RecentActivity activity(polling ? std::chrono::hours(1) : std::chrono::microseconds(0), nullptr,
                            false, IdleHost());
    activity.Touch();
    executor::Request sent;
    sent.set_seq(42);
    sent.mutable_wait_event()->set_event(7);
    std::thread sender([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      GPUKIT_EXPECT_OK(SendExecutorMessage(a.get(), sent));
      GPUKIT_EXPECT_OK(SendMessage(a.get(), "\xff\xff\xff", 3));
    });
    executor::Request got;
    GPUKIT_ASSERT_OK(ReceiveExecutorMessage(b.get(), got, &activity).status());
    EXPECT_EQ(got.seq(), 42u);
    EXPECT_EQ(got.wait_event().event(), 7u);
    EXPECT_THAT(ReceiveExecutorMessage(b.get(), got, &activity).status(),
                ::gpukit::testing::StatusIs(absl::StatusCode::kInternal));
    sender.join();
    a.Reset();
    EXPECT_THAT(ReceiveExecutorMessage(b.get(), got, &activity).status(),
                ::gpukit::testing::StatusIs(absl::StatusCode::kUnavailable));
  }
}

// A reader asleep on its socket and its bell: rings with nothing owed wake it to nothing (it
// sleeps again), a ring with an answer owed makes it poll, and whichever way it waits it gets
// every message whole and the peer's close.
TEST(ExecutorProtocolTest, ARungReaderGetsWhatASleepingOneGets) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
  ScopedFd a(fds[0]), b(fds[1]);
  std::atomic<int> owed{0};
  RecentActivity activity(std::chrono::microseconds(1), &owed, /*bell=*/true, IdleHost());
  ASSERT_TRUE(activity.has_bell());
  executor::Request sent;
  sent.set_seq(42);
  sent.mutable_wait_event()->set_event(7);
  std::thread sender([&] {
    for (int i = 0; i < 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      activity.Ring();  // nothing owed: the reader looks and sleeps again
    }
    owed = 1;
    activity.Ring();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    GPUKIT_EXPECT_OK(SendExecutorMessage(a.get(), sent));
  });
  executor::Request got;
  GPUKIT_ASSERT_OK(ReceiveExecutorMessage(b.get(), got, &activity).status());
  sender.join();
  EXPECT_EQ(got.seq(), 42u);
  EXPECT_EQ(got.wait_event().event(), 7u);
  owed = 0;
  a.Reset();
  EXPECT_THAT(ReceiveExecutorMessage(b.get(), got, &activity).status(),
              ::gpukit::testing::StatusIs(absl::StatusCode::kUnavailable));
  RecentActivity small_host(std::chrono::microseconds(0), &owed);
  EXPECT_FALSE(small_host.has_bell()) << "no polling there, so nothing to ring for";
}

}  // namespace
}  // namespace gpukit
