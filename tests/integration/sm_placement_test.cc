// SM placements of partitions through the real daemon (CPU backend, device executor): two
// partitions with reserved SMs and the shared rest get streams on disjoint SM groups of the
// CPU device's nominal H100 (16 groups of 8 SMs and a last of 4), as GetPartitionStatus's
// sm_count and `gpukitctl partitions` show; a share changed by UpdatePartition places later
// sessions anew while an open session keeps its streams and goes on working.
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

using ::testing::HasSubstr;

class SmPlacementTest : public DaemonTest {
 protected:
  // big [0, 0.5) = groups 0..7, small [0.5, 0.75) = groups 8..11, and the implied "default"
  // partition (shared, 0.25 of the time) on the rest, groups 12..15 and the last group of 4.
  std::string DaemonConfigJson() const override {
    return R"({
      "partitions": [
        {"name": "big", "memory": "256MiB", "compute": 0.5, "reserveSms": true},
        {"name": "small", "memory": "256MiB", "compute": 0.25, "reserveSms": true}
      ]
    })";
  }

  absl::StatusOr<std::string> OpenIn(const std::string& partition) {
    v1::OpenSessionRequest request;
    request.set_tenant(absl::StrCat("tenant-", partition));
    request.set_partition(partition);
    absl::StatusOr<v1::OpenSessionResponse> response = api().Open(request);
    if (!response.ok()) return response.status();
    return response->session_id();
  }

  int SmCount(const std::string& partition) {
    absl::StatusOr<v1::PartitionStatus> status = api().GetPartition(partition);
    EXPECT_TRUE(status.ok()) << status.status();
    return status.ok() ? status->sm_count() : -1;
  }

  absl::StatusOr<ProgramResult> Ctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {kCtlPath, "--addr", daemon().address()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProgram(argv, temp_dir(), absl::Seconds(15));
  }

  // Adds 1 to a 4-element array of the session's and checks the result: its streams work.
  void ExpectWorks(const std::string& session) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(
        v1::ArrayInfo a, api().CreateWithBytes(session, {4}, v1::DTYPE_UINT8, "\x01\x02\x03\x04"));
    v1::RunOpRequest request;
    request.set_session_id(session);
    request.set_op("add");
    *request.add_inputs() = HandleOperand(a.handle());
    *request.add_inputs() = HandleOperand(a.handle());
    GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ArrayInfo sum, api().RunOp(request));
    EXPECT_THAT(api().DownloadAll(session, sum.handle()),
                IsOkAndHolds(std::string("\x02\x04\x06\x08")));
  }
};

TEST_F(SmPlacementTest, ReservedPartitionsGetDisjointSmsAndTheSharedOneTheRest) {
  EXPECT_EQ(SmCount("big"), 0) << "no streams before a session";
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string big, OpenIn("big"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string small, OpenIn("small"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string rest, OpenIn("default"));
  EXPECT_EQ(SmCount("big"), 64);
  EXPECT_EQ(SmCount("small"), 32);
  EXPECT_EQ(SmCount("default"), 36);
  ExpectWorks(big);
  ExpectWorks(small);
  ExpectWorks(rest);

  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult table, Ctl({"partitions"}));
  ASSERT_EQ(table.exit_code, 0) << table.stderr_text;
  EXPECT_THAT(table.stdout_text, HasSubstr("64 reserved"));
  EXPECT_THAT(table.stdout_text, HasSubstr("32 reserved"));
  EXPECT_THAT(table.stdout_text, HasSubstr("SMS"));
}

TEST_F(SmPlacementTest, ChangedShareGivesLaterSessionsTheNewPlacement) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string before, OpenIn("small"));
  EXPECT_EQ(SmCount("small"), 32);

  std::unique_ptr<v1::AdminService::Stub> admin = v1::AdminService::NewStub(api().channel());
  v1::UpdatePartitionRequest update;
  update.mutable_partition()->set_name("small");
  update.mutable_partition()->set_compute_share(0.125);
  update.add_update_mask("compute_share");
  v1::UpdatePartitionResponse updated;
  grpc::ClientContext context;
  ASSERT_TRUE(admin->UpdatePartition(&context, update, &updated).ok());
  EXPECT_TRUE(updated.partition().partition().reserve_sms()) << "the mask left it alone";
  EXPECT_EQ(SmCount("small"), 0) << "nothing made in the new placement yet";

  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string after, OpenIn("small"));
  EXPECT_EQ(SmCount("small"), 16);  // [0.5, 0.625): groups 8..9
  ExpectWorks(before);              // the open session keeps its streams
  ExpectWorks(after);
}

}  // namespace
}  // namespace gpukit::testing
