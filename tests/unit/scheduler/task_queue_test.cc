// A partition's queue order (daemon/scheduler/task_queue.h) and task states
// (daemon/scheduler/task.h).
#include "daemon/scheduler/task_queue.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "daemon/scheduler/task.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpukit {
namespace {

using ::testing::ElementsAre;
using ::testing::Optional;

template <typename Case>
std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

std::vector<uint64_t> Drain(TaskQueue& q) {
  std::vector<uint64_t> ids;
  while (!q.empty()) ids.push_back(q.Pop().task_id);
  return ids;
}

// ---- QueueKey order ----

struct OrderCase {
  std::string name;
  QueueKey first;  // runs before `second`
  QueueKey second;
};

class QueueKeyOrderTest : public ::testing::TestWithParam<OrderCase> {};

TEST_P(QueueKeyOrderTest, FirstRunsBeforeSecond) {
  EXPECT_TRUE(GetParam().first < GetParam().second);
  EXPECT_FALSE(GetParam().second < GetParam().first);
}

TEST_P(QueueKeyOrderTest, QueuePopsFirstBeforeSecondWhicheverArrivesInTheQueueFirst) {
  TaskQueue q;
  q.Push(GetParam().second, 2);
  q.Push(GetParam().first, 1);
  EXPECT_THAT(Drain(q), ElementsAre(1, 2));
}

INSTANTIATE_TEST_SUITE_P(Table, QueueKeyOrderTest,
                         ::testing::Values(OrderCase{"GuaranteedBeforeBurstable",
                                                     {QosClass::kGuaranteed, 0, 9},
                                                     {QosClass::kBurstable, 0, 1}},
                                           OrderCase{"BurstableBeforeBestEffort",
                                                     {QosClass::kBurstable, 0, 9},
                                                     {QosClass::kBestEffort, 0, 1}},
                                           OrderCase{"QosClassBeatsPriority",
                                                     {QosClass::kGuaranteed, -100, 9},
                                                     {QosClass::kBestEffort, 100, 1}},
                                           OrderCase{"HigherPriorityFirstWithinAClass",
                                                     {QosClass::kBurstable, 5, 9},
                                                     {QosClass::kBurstable, 4, 1}},
                                           OrderCase{"NegativePriorityAfterZero",
                                                     {QosClass::kBestEffort, 0, 9},
                                                     {QosClass::kBestEffort, -1, 1}},
                                           OrderCase{"EarlierArrivalFirstAtEqualClassAndPriority",
                                                     {QosClass::kGuaranteed, 3, 1},
                                                     {QosClass::kGuaranteed, 3, 2}}),
                         CaseName<OrderCase>);

TEST(TaskQueueTest, OrdersByQosClassThenPriorityThenArrival) {
  const std::vector<std::pair<QueueKey, uint64_t>> keyed = {
      {{QosClass::kBestEffort, 100, 0}, 7}, {{QosClass::kBurstable, 0, 1}, 5},
      {{QosClass::kGuaranteed, -5, 2}, 3},  {{QosClass::kBurstable, 10, 3}, 4},
      {{QosClass::kGuaranteed, 0, 4}, 1},   {{QosClass::kGuaranteed, 0, 5}, 2},
      {{QosClass::kBurstable, 0, 6}, 6},    {{QosClass::kBestEffort, -100, 7}, 8},
  };
  std::vector<std::pair<QueueKey, uint64_t>> shuffled = keyed;
  std::mt19937 rng(42);  // the order pushed does not matter; any fixed shuffle shows it
  for (int round = 0; round < 5; ++round) {
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    TaskQueue q;
    for (const auto& [key, id] : shuffled) q.Push(key, id);
    EXPECT_EQ(q.size(), 8);
    EXPECT_THAT(Drain(q), ElementsAre(1, 2, 3, 4, 5, 6, 7, 8));
  }
}

TEST(TaskQueueTest, FrontIsWhatPopReturnsNext) {
  TaskQueue q;
  q.Push({QosClass::kBurstable, 0, 1}, 10);
  q.Push({QosClass::kGuaranteed, 0, 2}, 20);
  EXPECT_EQ(q.front().task_id, 20u);
  EXPECT_EQ(q.front().key.seq, 2u);
  EXPECT_EQ(q.Pop().task_id, 20u);
  EXPECT_EQ(q.front().task_id, 10u);
  EXPECT_EQ(q.size(), 1);
}

TEST(TaskQueueTest, IteratesInRunOrder) {
  TaskQueue q;
  q.Push({QosClass::kBestEffort, 0, 1}, 3);
  q.Push({QosClass::kGuaranteed, 0, 2}, 1);
  q.Push({QosClass::kBurstable, 0, 3}, 2);
  std::vector<uint64_t> ids;
  for (const TaskQueue::Entry& e : q) ids.push_back(e.task_id);
  EXPECT_THAT(ids, ElementsAre(1, 2, 3));
  EXPECT_EQ(q.size(), 3) << "iterating does not consume";
}

TEST(TaskQueueTest, StartsEmpty) {
  TaskQueue q;
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.size(), 0);
  EXPECT_EQ(q.begin(), q.end());
}

TEST(TaskQueueTest, RemoveTakesOutOnlyTheEntryWithThatKey) {
  TaskQueue q;
  const QueueKey a{QosClass::kGuaranteed, 0, 1};
  const QueueKey b{QosClass::kGuaranteed, 0, 2};
  const QueueKey c{QosClass::kBestEffort, 0, 3};
  q.Push(a, 1);
  q.Push(b, 2);
  q.Push(c, 3);
  EXPECT_TRUE(q.Remove(b));
  EXPECT_EQ(q.size(), 2);
  EXPECT_THAT(Drain(q), ElementsAre(1, 3));
}

TEST(TaskQueueTest, RemoveOfAnAbsentKeyIsFalse) {
  TaskQueue q;
  q.Push({QosClass::kBurstable, 2, 1}, 1);
  EXPECT_FALSE(q.Remove({QosClass::kBurstable, 2, 99}));  // another seq
  EXPECT_FALSE(q.Remove({QosClass::kBurstable, 3, 1}));   // another priority
  EXPECT_FALSE(q.Remove({QosClass::kBestEffort, 2, 1}));  // another class
  EXPECT_EQ(q.size(), 1);
  EXPECT_TRUE(q.Remove({QosClass::kBurstable, 2, 1}));
  EXPECT_FALSE(q.Remove({QosClass::kBurstable, 2, 1}));  // already gone
  EXPECT_TRUE(q.empty());
}

TEST(TaskQueueTest, RemovingTheFrontExposesTheNext) {
  TaskQueue q;
  q.Push({QosClass::kGuaranteed, 0, 1}, 1);
  q.Push({QosClass::kGuaranteed, 0, 2}, 2);
  ASSERT_TRUE(q.Remove(q.front().key));
  EXPECT_EQ(q.front().task_id, 2u);
}

// ---- TaskState ----

struct StateCase {
  std::string name;
  TaskState state;
  bool terminal;
};

class TaskStateTest : public ::testing::TestWithParam<StateCase> {};

TEST_P(TaskStateTest, HasItsName) { EXPECT_EQ(TaskStateName(GetParam().state), GetParam().name); }

TEST_P(TaskStateTest, NameParsesBackInAnyCase) {
  const std::string& name = GetParam().name;
  EXPECT_THAT(ParseTaskState(name), Optional(GetParam().state));
  EXPECT_THAT(ParseTaskState(absl::AsciiStrToLower(name)), Optional(GetParam().state));
  EXPECT_THAT(ParseTaskState(absl::AsciiStrToUpper(name)), Optional(GetParam().state));
}

TEST_P(TaskStateTest, IsTerminalOnlyOnceFinished) {
  EXPECT_EQ(IsTerminal(GetParam().state), GetParam().terminal);
}

INSTANTIATE_TEST_SUITE_P(Table, TaskStateTest,
                         ::testing::Values(StateCase{"Pending", TaskState::kPending, false},
                                           StateCase{"Queued", TaskState::kQueued, false},
                                           StateCase{"Admitted", TaskState::kAdmitted, false},
                                           StateCase{"Running", TaskState::kRunning, false},
                                           StateCase{"Succeeded", TaskState::kSucceeded, true},
                                           StateCase{"Failed", TaskState::kFailed, true},
                                           StateCase{"Cancelled", TaskState::kCancelled, true},
                                           StateCase{"Expired", TaskState::kExpired, true}),
                         CaseName<StateCase>);

TEST(TaskStateNameTest, EveryStateRoundTrips) {
  for (int i = 0; i < kTaskStateCount; ++i) {
    const auto state = static_cast<TaskState>(i);
    EXPECT_THAT(ParseTaskState(TaskStateName(state)), Optional(state)) << TaskStateName(state);
  }
}

class ParseTaskStateRejectsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ParseTaskStateRejectsTest, UnknownNameIsNullopt) {
  EXPECT_EQ(ParseTaskState(GetParam()), std::nullopt);
}

INSTANTIATE_TEST_SUITE_P(Table, ParseTaskStateRejectsTest,
                         ::testing::Values("", "Done", "Queue", "Queuedd", " Queued", "Queued ",
                                           "kQueued", "Canceled", "0"));

TEST(TaskKindNameTest, NamesEveryKind) {
  EXPECT_EQ(TaskKindName(TaskKind::kOp), "op");
  EXPECT_EQ(TaskKindName(TaskKind::kKernel), "kernel");
  EXPECT_EQ(TaskKindName(TaskKind::kTransfer), "transfer");
}

}  // namespace
}  // namespace gpukit
