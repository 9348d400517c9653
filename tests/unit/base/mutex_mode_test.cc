#include "runtime/base/mutex_mode.h"

#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace gpukit {
namespace {

// Takes two mutexes in one order, then in the other: a lock-order cycle, which absl's check
// reports (and aborts on) the second time.
void InvertLockOrder() {
  absl::Mutex a;
  absl::Mutex b;
  {
    absl::MutexLock first(&a);
    absl::MutexLock second(&b);
  }
  absl::MutexLock first(&b);
  absl::MutexLock second(&a);
}

TEST(MutexModeDeathTest, KeepsTheLockOrderCheckWhenAsked) {
  EXPECT_DEATH(
      {
        setenv("GPUKIT_MUTEX_DEADLOCK_CHECK", "1", 1);
        UseFastMutexes();
        InvertLockOrder();
      },
      "deadlock");
}

TEST(MutexModeDeathTest, FastMutexesIgnoreLockOrder) {
  // In a child, so the mode does not leak into the other tests of this binary.
  EXPECT_EXIT(
      {
        unsetenv("GPUKIT_MUTEX_DEADLOCK_CHECK");
        UseFastMutexes();
        InvertLockOrder();
        std::exit(7);
      },
      testing::ExitedWithCode(7), "");
}

}  // namespace
}  // namespace gpukit
