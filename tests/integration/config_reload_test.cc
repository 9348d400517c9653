// SIGHUP reloads gpukitd's --config file (daemon/config/reload.h): partitions are created,
// updated and deleted without dropping sessions, a partition with sessions is kept, a
// broken file is refused with its path:line while the old partitions stay and the daemon
// serves on, and the access block (here, bearer tokens) applies to requests from then on.
#include <csignal>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/cpp/channel.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr absl::Duration kReloadTimeout = absl::Seconds(20);

std::string Floats(const std::vector<float>& values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

class ConfigReloadTest : public DaemonTest {
 protected:
  std::string DaemonConfigJson() const override {
    return R"({"partitions": [{"name": "infer", "memory": "256MiB", "compute": 0.25}]})";
  }

  std::string ConfigPath() const { return temp_dir() + "/gpukitd.json"; }
  void WriteConfig(const std::string& json) {
    std::ofstream(ConfigPath(), std::ios::trunc) << json;
  }
  // Sends SIGHUP and waits until the log has one more line containing `marker`.
  void Reload(const std::string& marker) {
    const size_t before = Count(daemon().Log(), marker);
    ASSERT_EQ(kill(daemon().pid(), SIGHUP), 0) << std::strerror(errno);
    ASSERT_TRUE(PollUntil([&] { return Count(daemon().Log(), marker) > before; }, kReloadTimeout))
        << "no \"" << marker << "\" in the log after SIGHUP:\n"
        << daemon().Log();
  }
  static size_t Count(const std::string& text, const std::string& marker) {
    size_t n = 0;
    for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + 1)) {
      ++n;
    }
    return n;
  }

  // A session in "infer" with an array x = [1, 2, 3, 4].
  void OpenSessionWithArray() {
    v1::OpenSessionRequest open;
    open.set_tenant("reload");
    open.set_partition("infer");
    GPUKIT_ASSERT_OK_AND_ASSIGN(v1::OpenSessionResponse opened, api().Open(open));
    session_ = opened.session_id();
    GPUKIT_ASSERT_OK_AND_ASSIGN(
        v1::ArrayInfo x,
        api().CreateWithBytes(session_, {4}, v1::DTYPE_FLOAT32, Floats({1, 2, 3, 4})));
    array_ = x.handle();
  }
  // The session still works: x + x is computed and reads back.
  void ExpectSessionWorks() {
    v1::RunOpRequest request;
    request.set_session_id(session_);
    request.set_op("add");
    *request.add_inputs() = HandleOperand(array_);
    *request.add_inputs() = HandleOperand(array_);
    GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ArrayInfo sum, api().RunOp(request));
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::string bytes, api().DownloadAll(session_, sum.handle()));
    EXPECT_EQ(bytes, Floats({2, 4, 6, 8}));
  }

  std::string session_;
  std::string array_;
};

TEST_F(ConfigReloadTest, AppliesPartitionsWithoutDroppingSessions) {
  OpenSessionWithArray();
  WriteConfig(R"({"partitions": [
    {"name": "infer", "memory": "512MiB", "compute": 0.5, "maxQueuedTasks": 16},
    {"name": "batch", "memory": "128MiB", "compute": 0.125}
  ]})");
  Reload("reloaded ");

  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::PartitionStatus infer, api().GetPartition("infer"));
  EXPECT_EQ(infer.partition().memory_quota_bytes(), 512 * kMiB);
  EXPECT_DOUBLE_EQ(infer.partition().compute_share(), 0.5);
  EXPECT_EQ(infer.partition().max_queued_tasks(), 16);
  EXPECT_EQ(infer.sessions(), 1);
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::PartitionStatus batch, api().GetPartition("batch"));
  EXPECT_EQ(batch.partition().memory_quota_bytes(), 128 * kMiB);
  // The implied "default" gets what the file's partitions leave.
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::PartitionStatus fallback, api().GetPartition("default"));
  EXPECT_DOUBLE_EQ(fallback.partition().compute_share(), 0.375);
  const std::string log = daemon().Log();
  EXPECT_THAT(log, HasSubstr("reload: partition batch created"));
  EXPECT_THAT(log, HasSubstr("reload: partition infer updated: memory 256 MiB -> 512 MiB"));
  ExpectSessionWorks();

  // Removing both: "batch" (no sessions) goes, "infer" (one session) stays, with the reason.
  WriteConfig(R"({"partitions": []})");
  Reload("reloaded ");
  EXPECT_THAT(api().GetPartition("batch"), StatusIs(absl::StatusCode::kNotFound));
  GPUKIT_ASSERT_OK_AND_ASSIGN(infer, api().GetPartition("infer"));
  EXPECT_EQ(infer.partition().memory_quota_bytes(), 512 * kMiB);
  EXPECT_THAT(daemon().Log(), HasSubstr("partition infer removed from the file but has 1 session"));
  ExpectSessionWorks();

  // Once its session has closed, the next reload of the same file deletes it.
  GPUKIT_ASSERT_OK(api().Close(session_).status());
  Reload("reloaded ");
  EXPECT_THAT(api().GetPartition("infer"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(daemon().Log(), HasSubstr("reload: partition infer deleted"));
}

TEST_F(ConfigReloadTest, RefusesABrokenFileAndKeepsTheOldPartitions) {
  OpenSessionWithArray();
  WriteConfig("{\n  \"partitions\": [\n    {\"name\": \"infer\" \"memory\": \"1GiB\"}\n  ]\n}\n");
  Reload("reload refused");
  // The parser's position: line 3, where the ':' is missing.
  EXPECT_THAT(daemon().Log(), HasSubstr(ConfigPath() + ":3:"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::PartitionStatus infer, api().GetPartition("infer"));
  EXPECT_EQ(infer.partition().memory_quota_bytes(), 256 * kMiB);
  ExpectSessionWorks();
  ExpectDaemonServesAnotherClient();

  // Valid JSON whose partitions do not fit the device is refused as a whole, too.
  WriteConfig(R"({"partitions": [{"name": "infer", "memory": "256MiB", "compute": 0.25},
                                 {"name": "huge", "memory": "64GiB", "compute": 0.5}]})");
  Reload("reload refused");
  EXPECT_THAT(api().GetPartition("huge"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(daemon().Log(), HasSubstr("do not fit"));
  ExpectSessionWorks();
}

// The access block on 127.0.0.1 (insecure TCP, loopback only): a token the file does not
// list opens nothing; after a reload that lists it, it opens a session of its tenant, and
// after one that drops it again, nothing more.
class AccessReloadTest : public ConfigReloadTest {
 protected:
  static constexpr char kToken[] = "reload-test-token";
  // printf %s reload-test-token | sha256sum
  static constexpr char kTokenSha256[] =
      "4beb01f113e34f34a7ae5e744f55b4d4b991fd121443e62226682880641a2b56";

  std::string DaemonConfigJson() const override { return AccessJson(""); }
  void ConfigureDaemon(DaemonOptions& options) const override {
    options.extra_args = {"--listen", "127.0.0.1:0"};
  }
  static std::string AccessJson(const std::string& tokens) {
    return absl::StrCat(R"({"access": {"insecureTcp": true, "tokens": [)", tokens, "]}}");
  }
};

TEST_F(AccessReloadTest, TokensApplyFromTheReloadOn) {
  const std::string tcp = TcpAddress();
  ASSERT_FALSE(tcp.empty());
  GPUKIT_ASSERT_OK_AND_ASSIGN(RawApi client, RawApi::Connect(tcp, {kToken, ""}));
  EXPECT_THAT(client.OpenSession("", 60000), StatusIs(absl::StatusCode::kUnauthenticated));

  WriteConfig(AccessJson(absl::StrCat(R"({"sha256": ")", kTokenSha256,
                                      R"(", "tenant": "reloaded-team"})")));
  Reload("reload: access policy applied");
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string session, client.OpenSession("", 60000));
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse listed, client.ListSessions());
  ASSERT_EQ(listed.sessions_size(), 1);
  EXPECT_EQ(listed.sessions(0).tenant(), "reloaded-team");
  GPUKIT_EXPECT_OK(client.Close(session));

  WriteConfig(AccessJson(""));
  Reload("reload: access policy applied");
  EXPECT_THAT(client.OpenSession("", 60000), StatusIs(absl::StatusCode::kUnauthenticated));
}

}  // namespace
}  // namespace gpukit::testing
