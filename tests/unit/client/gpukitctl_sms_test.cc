// gpukitctl's SM placement surface: the partitions table's SMS column (the SMs a partition's
// streams got, and whether they are reserved) and the --reserve-sms flags of partition
// create / update.
#include <string>
#include <vector>

#include "client/cpp/gpukitctl_args.h"
#include "client/cpp/gpukitctl_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpukit::ctl {
namespace {

using ::testing::ElementsAre;

v1::PartitionStatus Row(const std::string& name, bool reserved, int sm_count) {
  v1::PartitionStatus status;
  status.mutable_partition()->set_name(name);
  status.mutable_partition()->set_reserve_sms(reserved);
  status.set_sm_count(sm_count);
  return status;
}

TEST(GpukitctlSmsTest, PartitionsTableShowsEachPartitionsSms) {
  v1::ListPartitionsResponse response;
  *response.add_partitions() = Row("fresh", false, 0);
  *response.add_partitions() = Row("shared", false, 132);
  *response.add_partitions() = Row("waiting", true, 0);
  *response.add_partitions() = Row("placed", true, 64);
  const Table table = PartitionsTable(response);
  ASSERT_EQ(table.size(), 5u);
  EXPECT_EQ(table[0].back(), "SMS");
  std::vector<std::string> cells;
  for (size_t i = 1; i < table.size(); ++i) cells.push_back(table[i].back());
  EXPECT_THAT(cells, ElementsAre("-", "132", "reserved", "64 reserved"));
}

CommandLine Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "gpukitctl");
  absl::StatusOr<CommandLine> line = ParseCommandLine(static_cast<int>(args.size()), args.data());
  EXPECT_TRUE(line.ok()) << line.status();
  return line.ok() ? *line : CommandLine{};
}

TEST(GpukitctlSmsTest, ReserveSmsFlagsSetTheFieldAndItsMask) {
  absl::StatusOr<PartitionFlags> on =
      ParsePartitionFlags("a", Parse({"partition", "update", "a", "--reserve-sms"}).flags);
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_TRUE(on->partition.reserve_sms());
  EXPECT_THAT(on->fields, ElementsAre("reserve_sms"));

  absl::StatusOr<PartitionFlags> off = ParsePartitionFlags(
      "a", Parse({"partition", "update", "a", "--no-reserve-sms", "--spill"}).flags);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->partition.reserve_sms());
  EXPECT_THAT(off->fields, ElementsAre("spill", "reserve_sms"));
}

}  // namespace
}  // namespace gpukit::ctl
