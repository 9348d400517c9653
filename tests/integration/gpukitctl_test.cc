// gpukitctl, the operator's command line, run as a separate process against a live daemon:
// its tables, its JSON (parsed back into the gpukit.v1 messages, so the output must follow
// the schema), and its exit status and messages when something is wrong.
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

constexpr absl::Duration kCtlTimeout = absl::Seconds(15);

class GpukitctlTest : public DaemonTest {
 protected:
  void TearDown() override {
    array_.reset();  // while the daemon still runs
    client_.reset();
    DaemonTest::TearDown();
  }

  // Runs gpukitctl with `args` against this test's daemon.
  absl::StatusOr<ProgramResult> Ctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {kCtlPath, "--addr", daemon().address()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProgram(argv, temp_dir(), kCtlTimeout);
  }

  // Runs gpukitctl -o json `command`, expecting success, and parses its output into
  // `message`.
  void CtlJson(const std::string& command, google::protobuf::Message* message) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult result, Ctl({"-o", "json", command}));
    ASSERT_EQ(result.exit_code, 0) << result.stderr_text;
    google::protobuf::util::JsonParseOptions strict;
    strict.ignore_unknown_fields = false;
    const auto parsed =
        google::protobuf::util::JsonStringToMessage(result.stdout_text, message, strict);
    ASSERT_TRUE(parsed.ok()) << parsed.message() << " in:\n" << result.stdout_text;
  }

  // A live client with one 4 KiB array, as an operator would see it.
  void ConnectClientWithAnArray() {
    GPUKIT_ASSERT_OK_AND_ASSIGN(client_, Connect("ctl-tenant"));
    GPUKIT_ASSERT_OK_AND_ASSIGN(Array array, client_->Empty({1024}, DType::kFloat32));
    array_ = std::make_unique<Array>(std::move(array));
  }

  std::unique_ptr<Client> client_;
  std::unique_ptr<Array> array_;
};

// Splits a table into its lines.
std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// Splits a table line into its words (cells are padded with spaces).
std::vector<std::string> Words(const std::string& line) {
  return absl::StrSplit(line, ' ', absl::SkipEmpty());
}

TEST_F(GpukitctlTest, StatusPrintsTheBackendAndSessionCountAsTableAndJson) {
  ASSERT_NO_FATAL_FAILURE(ConnectClientWithAnArray());
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult table, Ctl({"status"}));
  ASSERT_EQ(table.exit_code, 0) << table.stderr_text;
  const std::vector<std::string> lines = Lines(table.stdout_text);
  ASSERT_EQ(lines.size(), 2u) << table.stdout_text;
  EXPECT_THAT(Words(lines[0]), ElementsAre("VERSION", "BACKEND", "UPTIME", "DEVICES", "SESSIONS",
                                           "ARRAYS", "LISTEN"));
  const std::vector<std::string> row = Words(lines[1]);
  ASSERT_EQ(row.size(), 7u) << lines[1];
  EXPECT_EQ(row[0], GPUKIT_VERSION_STRING);
  EXPECT_EQ(row[1], "cpu");
  EXPECT_EQ(row[3], "1");  // devices
  EXPECT_EQ(row[4], "1");  // sessions
  EXPECT_EQ(row[5], "1");  // arrays
  EXPECT_EQ(row[6], daemon().address());

  v1::StatusResponse status;
  ASSERT_NO_FATAL_FAILURE(CtlJson("status", &status));
  EXPECT_EQ(status.version(), GPUKIT_VERSION_STRING);
  EXPECT_EQ(status.backend(), "cpu");
  EXPECT_EQ(status.sessions(), 1);
  EXPECT_EQ(status.arrays(), 1);
  EXPECT_EQ(status.device_count(), 1);
  EXPECT_THAT(status.listen_addresses(), ElementsAre(daemon().address()));
}

TEST_F(GpukitctlTest, DevicesPrintsTheCpuDeviceWithMemoryInUseAsTableAndJson) {
  ASSERT_NO_FATAL_FAILURE(ConnectClientWithAnArray());
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult table, Ctl({"devices"}));
  ASSERT_EQ(table.exit_code, 0) << table.stderr_text;
  const std::vector<std::string> lines = Lines(table.stdout_text);
  ASSERT_EQ(lines.size(), 2u) << table.stdout_text;
  EXPECT_THAT(Words(lines[0]),
              ElementsAre("INDEX", "NAME", "BACKEND", "MEMORY-USED", "MEMORY-TOTAL"));
  EXPECT_THAT(lines[1], StartsWith("0 "));
  EXPECT_THAT(lines[1], HasSubstr("CPU simulation device"));
  EXPECT_THAT(lines[1], HasSubstr("4 KiB"));  // memory used
  EXPECT_THAT(lines[1], HasSubstr("4 GiB"));  // memory total

  v1::ListDevicesResponse devices;
  ASSERT_NO_FATAL_FAILURE(CtlJson("devices", &devices));
  ASSERT_EQ(devices.devices_size(), 1);
  EXPECT_EQ(devices.devices(0).index(), 0);
  EXPECT_EQ(devices.devices(0).backend(), "cpu");
  EXPECT_EQ(devices.devices(0).name(), "CPU simulation device");
  EXPECT_EQ(devices.devices(0).memory_total_bytes(), int64_t{4} << 30);
  EXPECT_EQ(devices.devices(0).memory_used_bytes(), 4096);
}

TEST_F(GpukitctlTest, SessionsPrintsTheLiveClientsTenantAsTableAndJson) {
  ASSERT_NO_FATAL_FAILURE(ConnectClientWithAnArray());
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult table, Ctl({"sessions"}));
  ASSERT_EQ(table.exit_code, 0) << table.stderr_text;
  const std::vector<std::string> lines = Lines(table.stdout_text);
  ASSERT_EQ(lines.size(), 2u) << table.stdout_text;
  EXPECT_THAT(Words(lines[0]), ElementsAre("SESSION", "TENANT", "PARTITION", "CLIENT", "PID",
                                           "ARRAYS", "MEMORY", "AGE", "LEASE-LEFT"));
  const std::vector<std::string> row = Words(lines[1]);
  ASSERT_GE(row.size(), 8u) << lines[1];
  EXPECT_EQ(row[0], client_->session_id());
  EXPECT_EQ(row[1], "ctl-tenant");
  EXPECT_EQ(row[2], "default");
  EXPECT_EQ(row[3], "integration-test");
  EXPECT_EQ(row[4], std::to_string(getpid()));
  EXPECT_EQ(row[5], "1");                     // arrays
  EXPECT_EQ(row[6] + " " + row[7], "4 KiB");  // memory

  v1::ListSessionsResponse sessions;
  ASSERT_NO_FATAL_FAILURE(CtlJson("sessions", &sessions));
  ASSERT_EQ(sessions.sessions_size(), 1);
  const v1::SessionInfo& session = sessions.sessions(0);
  EXPECT_EQ(session.session_id(), client_->session_id());
  EXPECT_EQ(session.tenant(), "ctl-tenant");
  EXPECT_EQ(session.partition(), "default");
  EXPECT_EQ(session.client_name(), "integration-test");
  EXPECT_EQ(session.client_pid(), getpid());
  EXPECT_EQ(session.client_library_version(), "gpukit-cpp/" GPUKIT_VERSION_STRING);
  EXPECT_EQ(session.arrays(), 1);
  EXPECT_EQ(session.memory_bytes(), 4096);
}

TEST_F(GpukitctlTest, SessionsWithoutClientsSaysSoAndPrintsAnEmptyList) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult table, Ctl({"sessions"}));
  EXPECT_EQ(table.exit_code, 0);
  EXPECT_THAT(table.stdout_text, IsEmpty());
  EXPECT_THAT(table.stderr_text, HasSubstr("No sessions."));
  v1::ListSessionsResponse sessions;
  ASSERT_NO_FATAL_FAILURE(CtlJson("sessions", &sessions));
  EXPECT_EQ(sessions.sessions_size(), 0);
}

TEST_F(GpukitctlTest, ExitsOneWithAMessageWhenNothingListensAtTheAddress) {
  const std::string nowhere = "unix://" + temp_dir() + "/nobody-listens.sock";
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult result,
                              RunProgram({kCtlPath, "--addr", nowhere, "--timeout", "1s", "status"},
                                         temp_dir(), kCtlTimeout));
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.stderr_text, HasSubstr("cannot connect to gpukitd at " + nowhere));
  EXPECT_THAT(result.stdout_text, IsEmpty());
}

TEST_F(GpukitctlTest, ExitsOneWithAMessageOnAnUnknownCommandOrFlag) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult command, Ctl({"frobnicate"}));
  EXPECT_EQ(command.exit_code, 1);
  EXPECT_THAT(command.stderr_text, HasSubstr("unknown command \"frobnicate\""));
  EXPECT_THAT(command.stdout_text, IsEmpty());

  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult format, Ctl({"-o", "yaml", "status"}));
  EXPECT_EQ(format.exit_code, 1);
  EXPECT_THAT(format.stderr_text, HasSubstr("output format \"yaml\" is not table or json"));

  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult flag, Ctl({"--frobnicate", "status"}));
  EXPECT_EQ(flag.exit_code, 1);
  EXPECT_THAT(flag.stderr_text, HasSubstr("unknown flag --frobnicate"));

  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult none, Ctl({}));
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_THAT(none.stderr_text, HasSubstr("Usage: gpukitctl"));
}

}  // namespace
}  // namespace gpukit::testing
