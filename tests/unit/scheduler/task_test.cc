// The task state machine (daemon/scheduler/task.h): every (from, to) pair of states is
// allowed or refused as the table below lists, and a refusal is INTERNAL naming both states.
// The table is written out here on its own, not derived from the code, so that a changed
// edge must be changed in both places on purpose.
#include "daemon/scheduler/task.h"

#include <array>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// kAllowed[from][to]; columns in enum order: Pending Queued Admitted Running Succeeded Failed
// Cancelled Expired.
constexpr std::array<std::array<bool, kTaskStateCount>, kTaskStateCount> kAllowed = {{
    /* Pending   */ {false, true, false, false, false, false, false, false},
    /* Queued    */ {false, false, true, false, false, false, true, true},
    /* Admitted  */ {false, false, false, true, true, true, true, false},
    /* Running   */ {false, false, false, false, true, true, false, false},
    /* Succeeded */ {false, false, false, false, false, false, false, false},
    /* Failed    */ {false, false, false, false, false, false, false, false},
    /* Cancelled */ {false, false, false, false, false, false, false, false},
    /* Expired   */ {false, false, false, false, false, false, false, false},
}};

struct Pair {
  TaskState from;
  TaskState to;
};

class TaskTransitionTest : public ::testing::TestWithParam<Pair> {};

TEST_P(TaskTransitionTest, IsAllowedOrRefusedAsTheTableLists) {
  const auto [from, to] = GetParam();
  const bool allowed = kAllowed[static_cast<int>(from)][static_cast<int>(to)];
  EXPECT_EQ(TaskTransitionAllowed(from, to), allowed);
  const absl::Status status = CheckTaskTransition(7, from, to);
  if (allowed) {
    EXPECT_THAT(status, IsOk());
  } else {
    EXPECT_THAT(
        status,
        StatusIs(absl::StatusCode::kInternal,
                 AllOf(HasSubstr("task 7"),
                       HasSubstr(absl::StrCat(TaskStateName(from), " -> ", TaskStateName(to))))));
  }
}

std::vector<Pair> AllPairs() {
  std::vector<Pair> pairs;
  for (int from = 0; from < kTaskStateCount; ++from) {
    for (int to = 0; to < kTaskStateCount; ++to) {
      pairs.push_back({static_cast<TaskState>(from), static_cast<TaskState>(to)});
    }
  }
  return pairs;
}

INSTANTIATE_TEST_SUITE_P(EveryPair, TaskTransitionTest, ::testing::ValuesIn(AllPairs()),
                         [](const ::testing::TestParamInfo<Pair>& info) {
                           return absl::StrCat(TaskStateName(info.param.from), "To",
                                               TaskStateName(info.param.to));
                         });

TEST(TaskTransitionTableTest, EveryTerminalStateAllowsNothingAndEveryOtherAllowsSomething) {
  for (int from = 0; from < kTaskStateCount; ++from) {
    const auto state = static_cast<TaskState>(from);
    bool any = false;
    for (int to = 0; to < kTaskStateCount; ++to) {
      any = any || TaskTransitionAllowed(state, static_cast<TaskState>(to));
    }
    EXPECT_EQ(any, !IsTerminal(state)) << TaskStateName(state);
  }
}

TEST(TaskTransitionTableTest, RefusalListsWhatTheStateAllows) {
  EXPECT_THAT(CheckTaskTransition(3, TaskState::kQueued, TaskState::kRunning),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("(from Queued: Admitted, Cancelled, Expired)")));
  EXPECT_THAT(CheckTaskTransition(3, TaskState::kCancelled, TaskState::kSucceeded),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("(from Cancelled: none)")));
}

TEST(TaskStateNameTest, RoundTripsThroughParse) {
  for (int i = 0; i < kTaskStateCount; ++i) {
    const auto state = static_cast<TaskState>(i);
    EXPECT_EQ(ParseTaskState(TaskStateName(state)), state);
  }
  EXPECT_EQ(ParseTaskState("running"), TaskState::kRunning);
  EXPECT_EQ(ParseTaskState("Done"), std::nullopt);
}

}  // namespace
}  // namespace gpukit
