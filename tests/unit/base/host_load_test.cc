#include "runtime/base/host_load.h"

#include <cstdint>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include "gtest/gtest.h"

namespace gpukit {
namespace {

TEST(HostLoadTest, ParsesTheRunningCountOfLoadavg) {
  EXPECT_EQ(HostLoad::ParseRunnable("0.51 0.42 0.30 3/812 4242\n"), 3);
  EXPECT_EQ(HostLoad::ParseRunnable("12.00 9.10 4.20 17/2048 99"), 17);
  EXPECT_EQ(HostLoad::ParseRunnable(""), std::nullopt);
  EXPECT_EQ(HostLoad::ParseRunnable("0.51 0.42 0.30"), std::nullopt);
  EXPECT_EQ(HostLoad::ParseRunnable("0.51 0.42 0.30 x/812 1"), std::nullopt);
  EXPECT_EQ(HostLoad::ParseRunnable("0.51 0.42 0.30 812 1"), std::nullopt);
  EXPECT_EQ(HostLoad::ParseRunnable("0.51 0.42 0.30 -1/812 1"), std::nullopt);
}

// A core is spare while fewer threads are runnable than the limit (this process's: half its
// cores).
TEST(HostLoadTest, HasACoreToSpareBelowItsLimit) {
  std::optional<int> runnable = 7;
  int64_t now = 0;
  HostLoad load(
      8, [&] { return runnable; }, [&] { return now; });
  EXPECT_TRUE(load.SpareCore());
  runnable = 8;
  now += HostLoad::kLookEveryNs;
  EXPECT_FALSE(load.SpareCore());
  runnable = std::nullopt;  // cannot tell: spinning is allowed, as without the check
  now += HostLoad::kLookEveryNs;
  EXPECT_TRUE(load.SpareCore());
  HostLoad one(
      1, [] { return std::optional<int>(1); }, [] { return int64_t{0}; });
  EXPECT_FALSE(one.SpareCore()) << "the caller itself is the one runnable thread";
  int looks = 0;
  HostLoad unlimited(
      0,
      [&] {
        ++looks;
        return std::optional<int>(1000);
      },
      [] { return int64_t{0}; });
  EXPECT_TRUE(unlimited.SpareCore()) << "limit 0: spins whatever the load";
  EXPECT_EQ(looks, 0);
}

TEST(HostLoadTest, LooksAtMostOnceAMillisecond) {
  int looks = 0;
  int64_t now = 5;
  HostLoad load(
      4,
      [&] {
        ++looks;
        return std::optional<int>(looks == 1 ? 0 : 4);
      },
      [&] { return now; });
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(load.SpareCore());
  EXPECT_EQ(looks, 1);
  now += HostLoad::kLookEveryNs - 1;
  EXPECT_TRUE(load.SpareCore());
  EXPECT_EQ(looks, 1);
  now += 1;
  EXPECT_FALSE(load.SpareCore()) << "looked again: 4 runnable, the limit";
  EXPECT_EQ(looks, 2);
}

// HostLoad::Process() reads this host's /proc/loadavg: its text parses.
TEST(HostLoadTest, ThisHostsLoadavgParses) {
  std::ifstream file("/proc/loadavg");
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const std::optional<int> runnable = HostLoad::ParseRunnable(text);
  EXPECT_TRUE(runnable.has_value()) << text;
}

}  // namespace
}  // namespace gpukit
