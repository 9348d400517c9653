// gpukitctl, the operator's command line, run as a separate process against a live daemon:
// its tables, its JSON (parsed back into the gpukit.v1 messages, so the output must follow
// the schema), and its exit status and messages when something is wrong.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/scoped_env.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

using ::testing::ContainsRegex;
using ::testing::ElementsAre;
using ::testing::Ge;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

constexpr absl::Duration kCtlTimeout = absl::Seconds(15);
constexpr int64_t kMiB = int64_t{1} << 20;

// Parses `json` into `message`, refusing fields the schema does not have.
void ParseJsonStrictly(const std::string& json, google::protobuf::Message* message) {
  google::protobuf::util::JsonParseOptions strict;
  strict.ignore_unknown_fields = false;
  const auto parsed = google::protobuf::util::JsonStringToMessage(json, message, strict);
  ASSERT_TRUE(parsed.ok()) << parsed.message() << " in:\n" << json;
}

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

  // Runs gpukitctl -o json `args`, expecting success, and parses its output into `message`.
  void CtlJson(const std::vector<std::string>& args, google::protobuf::Message* message) {
    std::vector<std::string> json_args = {"-o", "json"};
    json_args.insert(json_args.end(), args.begin(), args.end());
    GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult result, Ctl(json_args));
    ASSERT_EQ(result.exit_code, 0) << result.stderr_text;
    ParseJsonStrictly(result.stdout_text, message);
  }
  void CtlJson(const std::string& command, google::protobuf::Message* message) {
    CtlJson(std::vector<std::string>{command}, message);
  }

  // Runs gpukitctl `args`, expecting exit status 0.
  void CtlOk(const std::vector<std::string>& args, std::string* stdout_text = nullptr) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult result, Ctl(args));
    ASSERT_EQ(result.exit_code, 0) << absl::StrJoin(args, " ") << ":\n" << result.stderr_text;
    if (stdout_text != nullptr) *stdout_text = result.stdout_text;
  }

  // The default partition owns the whole device at start; leave room for others.
  void ShrinkDefaultPartition() {
    ASSERT_NO_FATAL_FAILURE(
        CtlOk({"partition", "update", "default", "--memory", "1GiB", "--compute", "0.5"}));
  }

  // The partition named `name` as `gpukitctl -o json partitions` lists it.
  void ListedPartition(const std::string& name, v1::PartitionStatus* out) {
    v1::ListPartitionsResponse listed;
    ASSERT_NO_FATAL_FAILURE(CtlJson("partitions", &listed));
    for (const v1::PartitionStatus& p : listed.partitions()) {
      if (p.partition().name() == name) {
        *out = p;
        return;
      }
    }
    FAIL() << "gpukitctl partitions lists no \"" << name << "\": " << listed.DebugString();
  }

  // A libgpukit client of this daemon with the given options filled in.
  absl::StatusOr<std::unique_ptr<Client>> ConnectWith(ClientOptions options) {
    options.address = daemon().address();
    options.client_name = "integration-test";
    options.call_timeout = absl::Seconds(10);
    return Client::Connect(options);
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

// Splits a table line into its cells: columns are at least three spaces apart, and a cell
// ("4 KiB") has at most one space in a row.
std::vector<std::string> Cells(const std::string& line) {
  std::vector<std::string> cells;
  for (absl::string_view piece : absl::StrSplit(line, "   ")) {
    piece = absl::StripAsciiWhitespace(piece);
    if (!piece.empty()) cells.emplace_back(piece);
  }
  return cells;
}

// The cells of the table row whose first cell is `key`; empty if there is none.
std::vector<std::string> RowOf(const std::string& table, const std::string& key) {
  for (const std::string& line : Lines(table)) {
    std::vector<std::string> cells = Cells(line);
    if (!cells.empty() && cells[0] == key) return cells;
  }
  return {};
}

int64_t ToInt(const std::string& cell) {
  int64_t value = -1;
  EXPECT_TRUE(absl::SimpleAtoi(cell, &value)) << "cell \"" << cell << "\" is not a number";
  return value;
}

TEST_F(GpukitctlTest, VersionPrintsClientAndServerVersionsAsTableAndJson) {
  std::string table;
  ASSERT_NO_FATAL_FAILURE(CtlOk({"version"}, &table));
  EXPECT_EQ(table, "Client Version: " GPUKIT_VERSION_STRING "\nServer Version: " GPUKIT_VERSION_STRING
                   "\n");
  google::protobuf::Struct json;
  ASSERT_NO_FATAL_FAILURE(CtlJson("version", &json));
  EXPECT_EQ(json.fields().at("clientVersion").string_value(), GPUKIT_VERSION_STRING);
  EXPECT_EQ(json.fields().at("serverVersion").string_value(), GPUKIT_VERSION_STRING);
}

TEST_F(GpukitctlTest, VersionWithoutADaemonPrintsTheClientVersionAndFails) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      ProgramResult result,
      RunProgram({kCtlPath, "--addr", "unix://" + temp_dir() + "/nobody.sock", "--timeout", "1s",
                  "version"},
                 temp_dir(), kCtlTimeout));
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.stdout_text, "Client Version: " GPUKIT_VERSION_STRING "\n");
  EXPECT_THAT(result.stderr_text, HasSubstr("gpukitctl: "));
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
  EXPECT_THAT(Words(lines[0]), ElementsAre("INDEX", "NAME", "BACKEND", "MEMORY-USED",
                                           "MEMORY-TOTAL", "EXECUTOR", "RESTARTS", "LAST-FAULT"));
  EXPECT_THAT(lines[1], StartsWith("0 "));
  EXPECT_THAT(lines[1], HasSubstr("CPU simulation device"));
  EXPECT_THAT(lines[1], HasSubstr("4 KiB"));           // memory used
  EXPECT_THAT(lines[1], HasSubstr("4 GiB"));           // memory total
  EXPECT_THAT(lines[1], ContainsRegex("pid [0-9]+"));  // the device executor

  v1::ListDevicesResponse devices;
  ASSERT_NO_FATAL_FAILURE(CtlJson("devices", &devices));
  ASSERT_EQ(devices.devices_size(), 1);
  EXPECT_EQ(devices.devices(0).index(), 0);
  EXPECT_EQ(devices.devices(0).backend(), "cpu");
  EXPECT_EQ(devices.devices(0).name(), "CPU simulation device");
  EXPECT_EQ(devices.devices(0).memory_total_bytes(), int64_t{4} << 30);
  EXPECT_EQ(devices.devices(0).memory_used_bytes(), 4096);
  EXPECT_EQ(devices.devices(0).executor().mode(), "process");
  EXPECT_GT(devices.devices(0).executor().pid(), 0);
  EXPECT_EQ(devices.devices(0).executor().restarts(), 0);
}

TEST_F(GpukitctlTest, SessionsPrintsTheLiveClientsTenantAsTableAndJson) {
  ASSERT_NO_FATAL_FAILURE(ConnectClientWithAnArray());
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult table, Ctl({"sessions"}));
  ASSERT_EQ(table.exit_code, 0) << table.stderr_text;
  const std::vector<std::string> lines = Lines(table.stdout_text);
  ASSERT_EQ(lines.size(), 2u) << table.stdout_text;
  EXPECT_THAT(Words(lines[0]), ElementsAre("SESSION", "TENANT", "PARTITION", "CLIENT", "PID", "QOS",
                                           "ARRAYS", "REQUESTS", "LIMITS", "MEMORY", "SPILLED",
                                           "GPU-TIME", "AGE", "LEASE-LEFT"));
  const std::vector<std::string> row = Cells(lines[1]);
  ASSERT_EQ(row.size(), 14u) << lines[1];
  EXPECT_EQ(row[0], client_->session_id());
  EXPECT_EQ(row[1], "ctl-tenant");
  EXPECT_EQ(row[2], "default");
  EXPECT_EQ(row[3], "integration-test");
  EXPECT_EQ(row[4], std::to_string(getpid()));
  EXPECT_EQ(row[5], "BestEffort");  // no requests or limits
  EXPECT_EQ(row[6], "1");           // arrays
  EXPECT_EQ(row[7], "-");           // requests
  EXPECT_EQ(row[8], "-");           // limits
  EXPECT_EQ(row[9], "4 KiB");       // memory
  EXPECT_EQ(row[10], "0 B");        // spilled
  EXPECT_FALSE(row[11].empty());    // GPU time: Create's zeroing (how long is the machine's)

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
  EXPECT_GE(session.device_time_ns(), 0);
  EXPECT_EQ(session.tasks_finished(), 1);  // Create's zeroing of the array
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

TEST_F(GpukitctlTest, PartitionCreateListUpdateDeleteRoundTrip) {
  ASSERT_NO_FATAL_FAILURE(ShrinkDefaultPartition());
  std::string out;
  ASSERT_NO_FATAL_FAILURE(CtlOk({"partition",
                                 "create",
                                 "batch",
                                 "--memory",
                                 "512MiB",
                                 "--compute",
                                 "0.25",
                                 "--bandwidth",
                                 "0.5",
                                 "--max-queued",
                                 "8",
                                 "--max-running",
                                 "2",
                                 "--max-sessions",
                                 "3",
                                 "--spill",
                                 "--default-memory-request",
                                 "64MiB",
                                 "--default-memory-limit",
                                 "128MiB",
                                 "--default-compute-request",
                                 "0.1",
                                 "--default-compute-limit",
                                 "0.2"},
                                &out));
  EXPECT_EQ(out, "partition/batch created\n");

  // The table: one row per partition, by name.
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult table, Ctl({"partitions"}));
  ASSERT_EQ(table.exit_code, 0) << table.stderr_text;
  const std::vector<std::string> lines = Lines(table.stdout_text);
  ASSERT_EQ(lines.size(), 3u) << table.stdout_text;
  EXPECT_THAT(
      Cells(lines[0]),
      ElementsAre("NAME", "DEVICE", "MEMORY(used/quota)", "COMPUTE(requested/share)", "BANDWIDTH",
                  "SESSIONS", "QUEUED", "RUNNING", "SPILL", "GPU-TIME", "BY-QOS(G/B/BE)", "SMS"));
  EXPECT_THAT(Cells(lines[1]), ElementsAre("batch", "0", "0B/512MiB", "0/0.25", "0.5", "0/3", "0",
                                           "0", "yes", "0us", "0us/0us/0us", "-"));
  EXPECT_THAT(Cells(lines[2]), ElementsAre("default", "0", "0B/1GiB", "0/0.5", "-", "0", "0", "0",
                                           "no", "0us", "0us/0us/0us", "-"));

  // The JSON: every setting as given.
  v1::PartitionStatus batch;
  ASSERT_NO_FATAL_FAILURE(ListedPartition("batch", &batch));
  const v1::Partition& p = batch.partition();
  EXPECT_EQ(p.device_index(), 0);
  EXPECT_EQ(p.memory_quota_bytes(), 512 * kMiB);
  EXPECT_DOUBLE_EQ(p.compute_share(), 0.25);
  EXPECT_DOUBLE_EQ(p.bandwidth_cap(), 0.5);
  EXPECT_EQ(p.max_queued_tasks(), 8);
  EXPECT_EQ(p.max_running_tasks(), 2);
  EXPECT_EQ(p.max_sessions(), 3);
  EXPECT_TRUE(p.spill());
  EXPECT_EQ(p.session_defaults().requests().memory_bytes(), 64 * kMiB);
  EXPECT_EQ(p.session_defaults().limits().memory_bytes(), 128 * kMiB);
  EXPECT_DOUBLE_EQ(p.session_defaults().requests().compute(), 0.1);
  EXPECT_DOUBLE_EQ(p.session_defaults().limits().compute(), 0.2);
  EXPECT_EQ(batch.sessions(), 0);
  EXPECT_EQ(batch.memory_used_bytes(), 0);

  // Update changes the fields given and nothing else, session defaults one by one.
  ASSERT_NO_FATAL_FAILURE(
      CtlOk({"partition", "update", "batch", "--memory", "768MiB", "--max-queued", "16",
             "--default-memory-limit", "256MiB", "--no-spill"},
            &out));
  EXPECT_THAT(out, StartsWith("partition/batch updated"));
  v1::PartitionStatus updated;
  ASSERT_NO_FATAL_FAILURE(ListedPartition("batch", &updated));
  v1::Partition expected = p;
  expected.set_memory_quota_bytes(768 * kMiB);
  expected.set_max_queued_tasks(16);
  expected.set_spill(false);
  expected.mutable_session_defaults()->mutable_limits()->set_memory_bytes(256 * kMiB);
  EXPECT_EQ(updated.partition().DebugString(), expected.DebugString());

  // -o json prints the responses.
  v1::UpdatePartitionResponse update_json;
  ASSERT_NO_FATAL_FAILURE(
      CtlJson({"partition", "update", "batch", "--bandwidth", "0"}, &update_json));
  EXPECT_EQ(update_json.partition().partition().name(), "batch");
  EXPECT_DOUBLE_EQ(update_json.partition().partition().bandwidth_cap(), 0);
  EXPECT_EQ(update_json.partition().partition().memory_quota_bytes(), 768 * kMiB);
  v1::CreatePartitionResponse create_json;
  ASSERT_NO_FATAL_FAILURE(CtlJson(
      {"partition", "create", "tiny", "--memory", "16MiB", "--compute", "0.01"}, &create_json));
  EXPECT_EQ(create_json.partition().partition().name(), "tiny");
  EXPECT_EQ(create_json.partition().partition().memory_quota_bytes(), 16 * kMiB);
  EXPECT_EQ(create_json.partition().partition().max_queued_tasks(), 1024);  // daemon defaults
  EXPECT_EQ(create_json.partition().partition().max_running_tasks(), 1024);
  v1::DeletePartitionResponse delete_json;
  ASSERT_NO_FATAL_FAILURE(CtlJson({"partition", "delete", "tiny"}, &delete_json));
  EXPECT_EQ(delete_json.sessions_closed(), 0);

  ASSERT_NO_FATAL_FAILURE(CtlOk({"partition", "delete", "batch"}, &out));
  EXPECT_EQ(out, "partition/batch deleted\n");
  v1::ListPartitionsResponse left;
  ASSERT_NO_FATAL_FAILURE(CtlJson("partitions", &left));
  ASSERT_EQ(left.partitions_size(), 1);
  EXPECT_EQ(left.partitions(0).partition().name(), "default");

  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult again, Ctl({"partition", "delete", "batch"}));
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_THAT(again.stderr_text,
              HasSubstr("gpukitctl: partition delete: partition \"batch\" does not exist"));
}

TEST_F(GpukitctlTest, CreateThatOvercommitsTheDeviceFailsNamingDeviceOvercommitted) {
  // The default partition holds the whole device: no memory is left to promise.
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult memory, Ctl({"partition", "create", "extra", "--memory",
                                                         "1GiB", "--compute", "0.1"}));
  EXPECT_EQ(memory.exit_code, 1);
  EXPECT_THAT(memory.stderr_text, StartsWith("gpukitctl: partition create: "));
  EXPECT_THAT(memory.stderr_text, HasSubstr("memory quota"));
  EXPECT_THAT(memory.stderr_text, HasSubstr("(reason REASON_DEVICE_OVERCOMMITTED)"));
  EXPECT_THAT(memory.stdout_text, IsEmpty());

  // With memory to spare, the compute shares still add up to more than the device.
  ASSERT_NO_FATAL_FAILURE(CtlOk({"partition", "update", "default", "--memory", "1GiB"}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult compute, Ctl({"partition", "create", "extra",
                                                          "--memory", "1GiB", "--compute", "0.1"}));
  EXPECT_EQ(compute.exit_code, 1);
  EXPECT_THAT(compute.stderr_text, HasSubstr("compute share"));
  EXPECT_THAT(compute.stderr_text, HasSubstr("(reason REASON_DEVICE_OVERCOMMITTED)"));

  // Growing default back past the device is refused the same way.
  ASSERT_NO_FATAL_FAILURE(CtlOk({"partition", "update", "default", "--compute", "0.5"}));
  ASSERT_NO_FATAL_FAILURE(
      CtlOk({"partition", "create", "extra", "--memory", "1GiB", "--compute", "0.1"}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult grow,
                              Ctl({"partition", "update", "default", "--memory", "4GiB"}));
  EXPECT_EQ(grow.exit_code, 1);
  EXPECT_THAT(grow.stderr_text, StartsWith("gpukitctl: partition update: "));
  EXPECT_THAT(grow.stderr_text, HasSubstr("(reason REASON_DEVICE_OVERCOMMITTED)"));

  v1::ListPartitionsResponse listed;
  ASSERT_NO_FATAL_FAILURE(CtlJson("partitions", &listed));
  ASSERT_EQ(listed.partitions_size(), 2);
  EXPECT_EQ(listed.partitions(0).partition().memory_quota_bytes(), int64_t{1} << 30);  // default
  EXPECT_EQ(listed.partitions(1).partition().name(), "extra");
}

TEST_F(GpukitctlTest, DeletingABusyPartitionNeedsForceWhichClosesItsSessions) {
  ASSERT_NO_FATAL_FAILURE(ShrinkDefaultPartition());
  ASSERT_NO_FATAL_FAILURE(
      CtlOk({"partition", "create", "busy", "--memory", "256MiB", "--compute", "0.25"}));
  ClientOptions options;
  options.tenant = "busy-tenant";
  options.partition = "busy";
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, ConnectWith(options));
  EXPECT_EQ(client->partition(), "busy");
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array array, client->Empty({1024}, DType::kFloat32));

  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult refused, Ctl({"partition", "delete", "busy"}));
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.stderr_text, StartsWith("gpukitctl: partition delete: "));
  EXPECT_THAT(refused.stderr_text, HasSubstr("(reason REASON_PARTITION_BUSY)"));
  GPUKIT_EXPECT_OK(client->Empty({16}, DType::kFloat32).status());  // still served

  std::string out;
  ASSERT_NO_FATAL_FAILURE(CtlOk({"partition", "delete", "busy", "--force"}, &out));
  EXPECT_EQ(out, "partition/busy deleted (1 session(s) closed)\n");
  EXPECT_THAT(client->Empty({16}, DType::kFloat32), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(array.ToVector<float>(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(WaitUntilDaemonHoldsNothing(absl::Seconds(5)));
  v1::ListPartitionsResponse listed;
  ASSERT_NO_FATAL_FAILURE(CtlJson("partitions", &listed));
  ASSERT_EQ(listed.partitions_size(), 1);
  EXPECT_EQ(listed.partitions(0).partition().name(), "default");
}

TEST_F(GpukitctlTest, TasksAndQueuesCountTheOpsAClientRan) {
  constexpr int kOps = 10;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect("ops-tenant"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array a, client->FromVector<int32_t>({1, 2, 3}, {3}));
  for (int i = 0; i < kOps; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(Array sum, client->Add(a, i));
  }
  // One refusal, counted by reason: a session above its own memory limit.
  ClientOptions limited;
  limited.tenant = "limited-tenant";
  limited.resources.memory_limit_bytes = 4096;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> small, ConnectWith(limited));
  absl::StatusOr<Array> too_big = small->Empty({2048}, DType::kFloat32);
  ASSERT_THAT(too_big, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(RejectReason(too_big.status()), "REASON_SESSION_LIMIT_EXCEEDED");

  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult queues, Ctl({"queues"}));
  ASSERT_EQ(queues.exit_code, 0) << queues.stderr_text;
  const std::vector<std::string> queue_lines = Lines(queues.stdout_text);
  ASSERT_EQ(queue_lines.size(), 2u) << queues.stdout_text;
  EXPECT_THAT(Cells(queue_lines[0]), ElementsAre("PARTITION", "QUEUED", "RUNNING", "ADMITTED",
                                                 "SUCCEEDED", "FAILED", "REJECTED"));
  const std::vector<std::string> row = Cells(queue_lines[1]);
  ASSERT_EQ(row.size(), 7u) << queue_lines[1];
  EXPECT_EQ(row[0], "default");
  EXPECT_EQ(row[1], "0");
  EXPECT_EQ(row[2], "0");
  EXPECT_GE(ToInt(row[3]), kOps + 1);  // the ops and the upload
  EXPECT_GE(ToInt(row[4]), kOps + 1);
  EXPECT_EQ(row[5], "0");
  EXPECT_EQ(row[6], "SESSION_LIMIT_EXCEEDED=1");

  v1::PartitionStatus status;
  ASSERT_NO_FATAL_FAILURE(ListedPartition("default", &status));
  EXPECT_GE(status.admitted_total(), kOps + 1);
  EXPECT_GE(status.succeeded_total(), kOps + 1);
  EXPECT_EQ(status.failed_total(), 0);
  EXPECT_EQ(status.admitted_total(), status.succeeded_total());
  EXPECT_GT(status.device_time_ns(), 0);
  EXPECT_THAT(status.rejected(),
              ::testing::UnorderedElementsAre(::testing::Pair("REASON_SESSION_LIMIT_EXCEEDED", 1)));

  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult tasks, Ctl({"tasks"}));
  ASSERT_EQ(tasks.exit_code, 0) << tasks.stderr_text;
  const std::vector<std::string> task_lines = Lines(tasks.stdout_text);
  ASSERT_GE(task_lines.size(), kOps + 2u) << tasks.stdout_text;
  EXPECT_THAT(Cells(task_lines[0]), ElementsAre("ID", "PARTITION", "SESSION", "QOS", "KIND", "NAME",
                                                "PRIO", "STATE", "WAIT", "RUN", "DEVICE-TIME"));
  int adds = 0;
  for (size_t i = 1; i < task_lines.size(); ++i) {
    const std::vector<std::string> cells = Cells(task_lines[i]);
    ASSERT_EQ(cells.size(), 11u) << task_lines[i];
    EXPECT_EQ(cells[1], "default");
    EXPECT_EQ(cells[2], client->session_id());
    EXPECT_EQ(cells[3], "BestEffort");
    EXPECT_EQ(cells[7], "Succeeded");
    if (cells[4] == "op" && cells[5] == "add") ++adds;
  }
  EXPECT_EQ(adds, kOps);

  // Filters: partition, state (any case) and limit; newest first.
  v1::ListTasksResponse listed;
  ASSERT_NO_FATAL_FAILURE(CtlJson(
      {"tasks", "--partition", "default", "--state", "SUCCEEDED", "--limit", "3"}, &listed));
  ASSERT_EQ(listed.tasks_size(), 3);
  for (const v1::TaskInfo& task : listed.tasks()) {
    EXPECT_EQ(task.state(), v1::TASK_STATE_SUCCEEDED);
    EXPECT_EQ(task.partition(), "default");
    EXPECT_EQ(task.session_id(), client->session_id());
    EXPECT_EQ(task.kind(), "op");
  }
  EXPECT_GT(listed.tasks(0).task_id(), listed.tasks(1).task_id());
  v1::ListTasksResponse queued;
  ASSERT_NO_FATAL_FAILURE(CtlJson({"tasks", "--state", "queued"}, &queued));
  EXPECT_EQ(queued.tasks_size(), 0);
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult none, Ctl({"tasks", "--partition", "nowhere"}));
  EXPECT_EQ(none.exit_code, 0);
  EXPECT_THAT(none.stdout_text, IsEmpty());
  EXPECT_THAT(none.stderr_text, HasSubstr("No tasks."));

  // A finished task cannot be cancelled.
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult cancel,
                              Ctl({"task", "cancel", absl::StrCat(listed.tasks(0).task_id())}));
  EXPECT_EQ(cancel.exit_code, 1);
  EXPECT_THAT(cancel.stderr_text, StartsWith("gpukitctl: task cancel: "));
  EXPECT_THAT(cancel.stderr_text, HasSubstr("is not waiting or running"));
}

TEST_F(GpukitctlTest, SessionsShowTheQosClassAndResourcesOfEachClient) {
  ClientOptions guaranteed;
  guaranteed.tenant = "gold-tenant";
  guaranteed.resources.memory_request_bytes = 64 * kMiB;
  guaranteed.resources.memory_limit_bytes = 64 * kMiB;
  guaranteed.resources.compute_request = 0.25;
  guaranteed.resources.compute_limit = 0.25;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> gold, ConnectWith(guaranteed));
  EXPECT_EQ(gold->qos_class(), "Guaranteed");
  ClientOptions burstable;
  burstable.tenant = "burst-tenant";
  burstable.resources.memory_limit_bytes = 32 * kMiB;  // the request follows the limit
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> burst, ConnectWith(burstable));
  EXPECT_EQ(burst->qos_class(), "Burstable");
  ClientOptions best_effort;
  best_effort.tenant = "free-tenant";
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> free_client, ConnectWith(best_effort));
  EXPECT_EQ(free_client->qos_class(), "BestEffort");
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array held, gold->Empty({1024}, DType::kFloat32));

  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult table, Ctl({"sessions"}));
  ASSERT_EQ(table.exit_code, 0) << table.stderr_text;
  ASSERT_EQ(Lines(table.stdout_text).size(), 4u) << table.stdout_text;
  const std::vector<std::string> gold_row = RowOf(table.stdout_text, gold->session_id());
  ASSERT_EQ(gold_row.size(), 14u) << table.stdout_text;
  EXPECT_EQ(gold_row[1], "gold-tenant");
  EXPECT_EQ(gold_row[5], "Guaranteed");
  EXPECT_EQ(gold_row[6], "1");
  EXPECT_EQ(gold_row[7], "64MiB/0.25");
  EXPECT_EQ(gold_row[8], "64MiB/0.25");
  EXPECT_EQ(gold_row[9], "4 KiB");
  const std::vector<std::string> burst_row = RowOf(table.stdout_text, burst->session_id());
  ASSERT_EQ(burst_row.size(), 14u) << table.stdout_text;
  EXPECT_EQ(burst_row[5], "Burstable");
  EXPECT_EQ(burst_row[7], "32MiB/-");
  EXPECT_EQ(burst_row[8], "32MiB/-");
  const std::vector<std::string> free_row = RowOf(table.stdout_text, free_client->session_id());
  ASSERT_EQ(free_row.size(), 14u) << table.stdout_text;
  EXPECT_EQ(free_row[5], "BestEffort");
  EXPECT_EQ(free_row[7], "-");
  EXPECT_EQ(free_row[8], "-");
  EXPECT_EQ(free_row[9], "0 B");

  v1::ListSessionsResponse sessions;
  ASSERT_NO_FATAL_FAILURE(CtlJson("sessions", &sessions));
  ASSERT_EQ(sessions.sessions_size(), 3);
  for (const v1::SessionInfo& s : sessions.sessions()) {
    EXPECT_EQ(s.device_index(), 0);
    EXPECT_EQ(s.spilled_bytes(), 0);
    if (s.session_id() == gold->session_id()) {
      EXPECT_EQ(s.qos_class(), v1::QOS_CLASS_GUARANTEED);
      EXPECT_EQ(s.resources().requests().memory_bytes(), 64 * kMiB);
      EXPECT_EQ(s.resources().limits().memory_bytes(), 64 * kMiB);
      EXPECT_DOUBLE_EQ(s.resources().requests().compute(), 0.25);
      EXPECT_DOUBLE_EQ(s.resources().limits().compute(), 0.25);
      EXPECT_EQ(s.memory_bytes(), 4096);
    } else if (s.session_id() == burst->session_id()) {
      EXPECT_EQ(s.qos_class(), v1::QOS_CLASS_BURSTABLE);
      EXPECT_EQ(s.resources().requests().memory_bytes(), 32 * kMiB);
      EXPECT_FALSE(s.resources().requests().has_compute());
    } else {
      EXPECT_EQ(s.session_id(), free_client->session_id());
      EXPECT_EQ(s.qos_class(), v1::QOS_CLASS_BEST_EFFORT);
      EXPECT_FALSE(s.resources().has_requests());
      EXPECT_FALSE(s.resources().has_limits());
    }
  }
  // The partition counts the requests.
  v1::PartitionStatus status;
  ASSERT_NO_FATAL_FAILURE(ListedPartition("default", &status));
  EXPECT_EQ(status.sessions(), 3);
  EXPECT_EQ(status.memory_requested_bytes(), 96 * kMiB);
  EXPECT_DOUBLE_EQ(status.compute_requested(), 0.25);
}

TEST_F(GpukitctlTest, TopPrintsOneFramePerIterationAndExits) {
  ASSERT_NO_FATAL_FAILURE(ConnectClientWithAnArray());
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult table,
                              Ctl({"top", "--iterations", "2", "--interval", "100ms"}));
  ASSERT_EQ(table.exit_code, 0) << table.stderr_text;
  EXPECT_THAT(table.stdout_text, Not(HasSubstr("\033[")));  // not a terminal: no clearing
  int frames = 0, partition_headers = 0, session_rows = 0;
  for (const std::string& line : Lines(table.stdout_text)) {
    if (absl::StartsWith(line, "gpukitd " GPUKIT_VERSION_STRING " (cpu)")) ++frames;
    if (absl::StartsWith(line, "PARTITION ")) ++partition_headers;
    if (absl::StartsWith(line, client_->session_id())) ++session_rows;
  }
  EXPECT_EQ(frames, 2) << table.stdout_text;
  EXPECT_EQ(partition_headers, 2);
  EXPECT_EQ(session_rows, 2);

  // -o json: one object per line and refresh, each part following the schema.
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      ProgramResult json, Ctl({"-o", "json", "top", "--iterations", "2", "--interval", "100ms"}));
  ASSERT_EQ(json.exit_code, 0) << json.stderr_text;
  const std::vector<std::string> objects = Lines(json.stdout_text);
  ASSERT_EQ(objects.size(), 2u) << json.stdout_text;
  for (const std::string& object : objects) {
    google::protobuf::Struct frame;
    ASSERT_NO_FATAL_FAILURE(ParseJsonStrictly(object, &frame));
    ASSERT_TRUE(frame.fields().contains("time"));
    // Each part, put back under its response's field name, must parse strictly.
    auto part = [&](const std::string& key, const std::string& field,
                    google::protobuf::Message* message) {
      ASSERT_TRUE(frame.fields().contains(key)) << object;
      google::protobuf::Struct wrapper;
      if (field.empty()) {
        wrapper = frame.fields().at(key).struct_value();
      } else {
        (*wrapper.mutable_fields())[field] = frame.fields().at(key);
      }
      std::string text;
      ASSERT_TRUE(google::protobuf::util::MessageToJsonString(wrapper, &text).ok());
      ASSERT_NO_FATAL_FAILURE(ParseJsonStrictly(text, message));
    };
    v1::StatusResponse status;
    v1::ListDevicesResponse devices;
    v1::ListPartitionsResponse partitions;
    v1::ListSessionsResponse sessions;
    ASSERT_NO_FATAL_FAILURE(part("status", "", &status));
    ASSERT_NO_FATAL_FAILURE(part("devices", "devices", &devices));
    ASSERT_NO_FATAL_FAILURE(part("partitions", "partitions", &partitions));
    ASSERT_NO_FATAL_FAILURE(part("sessions", "sessions", &sessions));
    EXPECT_EQ(status.backend(), "cpu");
    ASSERT_EQ(devices.devices_size(), 1);
    EXPECT_EQ(devices.devices(0).memory_used_bytes(), 4096);
    ASSERT_EQ(partitions.partitions_size(), 1);
    EXPECT_EQ(partitions.partitions(0).partition().name(), "default");
    ASSERT_EQ(sessions.sessions_size(), 1);
    EXPECT_EQ(sessions.sessions(0).session_id(), client_->session_id());
  }
}

// Runs a 128 x 128 matmul on `client` (and the uploads and the download around it): tasks
// with some device time on the CPU backend.
void RunAMatmul(Client& client) {
  std::vector<float> values(128 * 128, 0.5f);
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array a, client.FromVector(values, {128, 128}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array product, client.Matmul(a, a));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> out, product.ToVector<float>());
  ASSERT_EQ(out.size(), values.size());
}

TEST_F(GpukitctlTest, TenantsPrintsEachTenantsGpuTimeAndKeepsItAfterItsSessionsClose) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult none, Ctl({"tenants"}));
  EXPECT_EQ(none.exit_code, 0);
  EXPECT_THAT(none.stdout_text, IsEmpty());
  EXPECT_THAT(none.stderr_text, HasSubstr("No tenants."));

  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> busy, Connect("busy-tenant"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> idle, Connect("idle-tenant"));
  ASSERT_NO_FATAL_FAILURE(RunAMatmul(*busy));

  v1::ListTenantsResponse tenants;
  ASSERT_NO_FATAL_FAILURE(CtlJson("tenants", &tenants));
  ASSERT_EQ(tenants.tenants_size(), 2);
  const v1::TenantUsage& busy_usage = tenants.tenants(0);  // by name
  EXPECT_EQ(busy_usage.tenant(), "busy-tenant");
  EXPECT_EQ(busy_usage.sessions(), 1);
  EXPECT_GT(busy_usage.device_time_ns(), 0);
  EXPECT_EQ(busy_usage.device_time_by_qos().best_effort_ns(), busy_usage.device_time_ns());
  EXPECT_GE(busy_usage.tasks_finished(), 3);  // upload, matmul, download
  EXPECT_EQ(tenants.tenants(1).tenant(), "idle-tenant");
  EXPECT_EQ(tenants.tenants(1).device_time_ns(), 0);

  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult table, Ctl({"tenants"}));
  ASSERT_EQ(table.exit_code, 0) << table.stderr_text;
  const std::vector<std::string> lines = Lines(table.stdout_text);
  ASSERT_EQ(lines.size(), 3u) << table.stdout_text;
  EXPECT_THAT(Cells(lines[0]), ElementsAre("TENANT", "SESSIONS", "MEMORY", "GPU-TIME",
                                           "BY-QOS(G/B/BE)", "TASKS", "FAILED"));
  const std::vector<std::string> busy_row = RowOf(table.stdout_text, "busy-tenant");
  ASSERT_EQ(busy_row.size(), 7u) << table.stdout_text;
  EXPECT_EQ(busy_row[1], "1");
  EXPECT_NE(busy_row[3], "0us");
  EXPECT_THAT(busy_row[4], StartsWith("0us/0us/"));  // all of it BestEffort
  EXPECT_EQ(busy_row[5], absl::StrCat(busy_usage.tasks_finished()));
  EXPECT_EQ(busy_row[6], "0");
  EXPECT_THAT(RowOf(table.stdout_text, "idle-tenant"),
              ElementsAre("idle-tenant", "1", "0 B", "0us", "0us/0us/0us", "0", "0"));

  // The session's own time is the tenant's, and stays the tenant's after it closes.
  v1::ListSessionsResponse sessions;
  ASSERT_NO_FATAL_FAILURE(CtlJson("sessions", &sessions));
  for (const v1::SessionInfo& session : sessions.sessions()) {
    if (session.session_id() == busy->session_id()) {
      EXPECT_EQ(session.device_time_ns(), busy_usage.device_time_ns());
    }
  }
  GPUKIT_ASSERT_OK(busy->Close());
  v1::ListTenantsResponse after;
  ASSERT_NO_FATAL_FAILURE(CtlJson("tenants", &after));
  ASSERT_EQ(after.tenants_size(), 2);
  EXPECT_EQ(after.tenants(0).sessions(), 0);
  EXPECT_EQ(after.tenants(0).device_time_ns(), busy_usage.device_time_ns());
  EXPECT_EQ(after.tenants(0).tasks_finished(), busy_usage.tasks_finished());
}

TEST_F(GpukitctlTest, PartitionsSplitGpuTimeByQosAndTopShowsGpuPercentFromTheSecondFrame) {
  ClientOptions guaranteed = ClientOptionsFor("gold-tenant");
  guaranteed.resources.memory_limit_bytes = 64 * kMiB;
  guaranteed.resources.compute_limit = 0.25;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> gold, Client::Connect(guaranteed));
  ASSERT_EQ(gold->qos_class(), "Guaranteed");
  ASSERT_NO_FATAL_FAILURE(RunAMatmul(*gold));

  v1::PartitionStatus status;
  ASSERT_NO_FATAL_FAILURE(ListedPartition("default", &status));
  EXPECT_GT(status.device_time_ns(), 0);
  EXPECT_EQ(status.device_time_by_qos().guaranteed_ns(), status.device_time_ns());
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult table, Ctl({"partitions"}));
  ASSERT_EQ(table.exit_code, 0) << table.stderr_text;
  const std::vector<std::string> row = RowOf(table.stdout_text, "default");
  ASSERT_EQ(row.size(), 12u) << table.stdout_text;
  EXPECT_NE(row[9], "0us");
  EXPECT_EQ(row[10], absl::StrCat(row[9], "/0us/0us"));  // all of it Guaranteed
  EXPECT_EQ(row[11], "132");  // SMS: every SM of the CPU backend's nominal H100

  // top: a tenants table, and per session GPU time and GPU% ("-" until a second frame).
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult top,
                              Ctl({"top", "--iterations", "2", "--interval", "100ms"}));
  ASSERT_EQ(top.exit_code, 0) << top.stderr_text;
  std::vector<std::vector<std::string>> session_rows;
  int tenant_headers = 0;
  for (const std::string& line : Lines(top.stdout_text)) {
    if (absl::StartsWith(line, "TENANT ")) ++tenant_headers;
    if (absl::StartsWith(line, "SESSION ")) {
      EXPECT_THAT(Cells(line), ElementsAre("SESSION", "TENANT", "PARTITION", "QOS", "ARRAYS",
                                           "MEMORY", "SPILLED", "GPU-TIME", "GPU%", "AGE"));
    }
    if (absl::StartsWith(line, gold->session_id())) session_rows.push_back(Cells(line));
  }
  EXPECT_EQ(tenant_headers, 2) << top.stdout_text;
  ASSERT_EQ(session_rows.size(), 2u) << top.stdout_text;
  ASSERT_EQ(session_rows[0].size(), 10u);
  ASSERT_EQ(session_rows[1].size(), 10u);
  EXPECT_EQ(session_rows[0][7], row[9]);  // the session's GPU time is the partition's
  EXPECT_EQ(session_rows[0][8], "-");
  EXPECT_EQ(session_rows[1][8], "0%");  // nothing ran between the two frames

  GPUKIT_ASSERT_OK_AND_ASSIGN(
      ProgramResult json, Ctl({"-o", "json", "top", "--iterations", "2", "--interval", "100ms"}));
  ASSERT_EQ(json.exit_code, 0) << json.stderr_text;
  const std::vector<std::string> objects = Lines(json.stdout_text);
  ASSERT_EQ(objects.size(), 2u) << json.stdout_text;
  for (size_t i = 0; i < objects.size(); ++i) {
    google::protobuf::Struct frame;
    ASSERT_NO_FATAL_FAILURE(ParseJsonStrictly(objects[i], &frame));
    ASSERT_TRUE(frame.fields().contains("tenants")) << objects[i];
    google::protobuf::Struct wrapper;
    (*wrapper.mutable_fields())["tenants"] = frame.fields().at("tenants");
    std::string text;
    ASSERT_TRUE(google::protobuf::util::MessageToJsonString(wrapper, &text).ok());
    v1::ListTenantsResponse tenants;
    ASSERT_NO_FATAL_FAILURE(ParseJsonStrictly(text, &tenants));
    ASSERT_EQ(tenants.tenants_size(), 1);
    EXPECT_EQ(tenants.tenants(0).tenant(), "gold-tenant");
    EXPECT_EQ(tenants.tenants(0).device_time_ns(), status.device_time_ns());
    ASSERT_TRUE(frame.fields().contains("gpuPercent")) << objects[i];
    const google::protobuf::Struct& percent = frame.fields().at("gpuPercent").struct_value();
    const auto& by_session = percent.fields().at("sessions").struct_value().fields();
    const auto& by_tenant = percent.fields().at("tenants").struct_value().fields();
    if (i == 0) {
      EXPECT_TRUE(by_session.empty()) << objects[i];
      EXPECT_TRUE(by_tenant.empty()) << objects[i];
    } else {
      ASSERT_TRUE(by_session.contains(gold->session_id())) << objects[i];
      EXPECT_EQ(by_session.at(gold->session_id()).number_value(), 0);
      ASSERT_TRUE(by_tenant.contains("gold-tenant")) << objects[i];
      EXPECT_EQ(by_tenant.at("gold-tenant").number_value(), 0);
    }
  }
}

TEST_F(GpukitctlTest, TopWithoutIterationsRunsUntilInterruptedThenExitsZero) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      Subprocess top,
      Subprocess::Spawn({{kCtlPath, "--addr", daemon().address(), "top", "--interval", "50ms"},
                         temp_dir() + "/top.out",
                         temp_dir() + "/top.err"}));
  // Several frames, then Ctrl-C.
  ASSERT_TRUE(PollUntil(
      [&] {
        const std::string out = top.Output();
        size_t frames = 0;
        for (size_t at = out.find("\ngpukitd "); at != std::string::npos;
             at = out.find("\ngpukitd ", at + 1)) {
          ++frames;
        }
        return frames >= 2 || !top.Running();
      },
      absl::Seconds(10)));
  ASSERT_TRUE(top.Running()) << top.Output() << ReadFileOrEmpty(temp_dir() + "/top.err");
  GPUKIT_ASSERT_OK(top.Signal(SIGINT));
  EXPECT_THAT(top.WaitForExitCode(absl::Seconds(5)), IsOkAndHolds(0));
}

// Flags are checked before connecting: each mistake exits 1 with a message that names it,
// whether or not a daemon listens.
struct BadFlagCase {
  std::vector<std::string> args;
  std::string message;
};

class GpukitctlBadFlagTest : public ::testing::TestWithParam<BadFlagCase> {};

TEST_P(GpukitctlBadFlagTest, ExitsOneWithAMessageNamingTheMistake) {
  ScopedTempDir dir;
  std::vector<std::string> argv = {kCtlPath, "--addr",
                                   "unix://" + dir.path() + "/nobody-listens.sock"};
  argv.insert(argv.end(), GetParam().args.begin(), GetParam().args.end());
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult result, RunProgram(argv, dir.path(), kCtlTimeout));
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.stderr_text, StartsWith("gpukitctl: "));
  EXPECT_THAT(result.stderr_text, HasSubstr(GetParam().message));
  EXPECT_THAT(result.stderr_text, Not(HasSubstr("cannot connect")));
  EXPECT_THAT(result.stdout_text, IsEmpty());
}

std::vector<std::string> Create(std::vector<std::string> extra) {
  std::vector<std::string> args = {"partition", "create",    "p",  "--memory",
                                   "1GiB",      "--compute", "0.5"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

INSTANTIATE_TEST_SUITE_P(
    Flags, GpukitctlBadFlagTest,
    ::testing::Values(
        BadFlagCase{{"partition", "create", "p", "--compute", "0.5"},
                    "partition create needs --memory SIZE and --compute SHARE"},
        BadFlagCase{{"partition", "create", "p", "--memory", "1GiB"},
                    "partition create needs --memory SIZE and --compute SHARE"},
        BadFlagCase{Create({"--memory", "lots"}), "--memory \"lots\" is not a size"},
        BadFlagCase{Create({"--compute", "half"}), "--compute \"half\" is not a share"},
        BadFlagCase{Create({"--compute", "1.5"}), "--compute \"1.5\" is not a share"},
        BadFlagCase{Create({"--bandwidth", "x"}), "--bandwidth \"x\" is not a share"},
        BadFlagCase{Create({"--max-queued", "-1"}), "--max-queued \"-1\" is not a whole number"},
        BadFlagCase{Create({"--max-queued", "0"}), "--max-queued \"0\" is not a whole number >= 1"},
        BadFlagCase{Create({"--max-running", "2.5"}), "--max-running \"2.5\""},
        BadFlagCase{Create({"--max-sessions", "many"}), "--max-sessions \"many\""},
        BadFlagCase{Create({"--device", "gpu0"}), "--device \"gpu0\" is not a device index"},
        BadFlagCase{Create({"--spill=perhaps"}), "--spill \"perhaps\" is not true or false"},
        BadFlagCase{Create({"--default-memory-request", "1Gx"}),
                    "--default-memory-request \"1Gx\" is not a size"},
        BadFlagCase{Create({"--default-memory-limit", "-5"}),
                    "--default-memory-limit \"-5\" is not a size"},
        BadFlagCase{Create({"--default-compute-request", "nan"}),
                    "--default-compute-request \"nan\" is not a share"},
        BadFlagCase{Create({"--default-compute-limit", "2"}),
                    "--default-compute-limit \"2\" is not a share"},
        BadFlagCase{Create({"--force"}), "flag --force does not apply to \"partition create\""},
        BadFlagCase{{"partition", "create"}, "partition create needs NAME"},
        BadFlagCase{{"partition", "update", "p"}, "partition update needs a flag to change"},
        BadFlagCase{{"partition", "update", "p", "--device", "1"},
                    "flag --device does not apply to \"partition update\""},
        BadFlagCase{{"partition", "delete", "p", "--memory", "1GiB"},
                    "flag --memory does not apply to \"partition delete\""},
        BadFlagCase{{"partition", "delete", "p", "--force=maybe"},
                    "--force \"maybe\" is not true or false"},
        BadFlagCase{{"partition"}, "partition needs a subcommand: create, update, delete"},
        BadFlagCase{{"partition", "rename", "p"}, "unknown command \"partition rename\""},
        BadFlagCase{{"tasks", "--state", "sleeping"},
                    "--state \"sleeping\" is not a task state; states: pending, queued, "
                    "admitted, running, succeeded, failed, cancelled, expired"},
        BadFlagCase{{"tasks", "--limit", "many"}, "--limit \"many\" is not a whole number"},
        BadFlagCase{{"tasks", "--partition"}, "--partition needs a value"},
        BadFlagCase{{"task", "cancel", "abc"}, "task ID \"abc\" is not a task ID"},
        BadFlagCase{{"task", "cancel"}, "task cancel needs ID"},
        BadFlagCase{{"task"}, "task needs a subcommand: cancel"},
        BadFlagCase{{"top", "--interval", "soon"},
                    "--interval \"soon\" is not a positive duration"},
        BadFlagCase{{"top", "--interval", "0s"}, "--interval \"0s\" is not a positive duration"},
        BadFlagCase{{"top", "--iterations", "-2"}, "--iterations \"-2\" is not a whole number"},
        BadFlagCase{{"sessions", "--force"}, "flag --force does not apply to \"sessions\""},
        BadFlagCase{{"partitions", "extra"}, "unexpected argument \"extra\""},
        BadFlagCase{{"queues", "--state", "queued"}, "flag --state does not apply to \"queues\""}));

// ---- Hostile strings and an empty --addr -------------------------------------------------

TEST_F(GpukitctlTest, EmptyAddrIsRefusedInsteadOfFallingBackToGpukitAddr) {
  // $GPUKIT_ADDR names a live daemon: a fallback would succeed, so exit 1 shows the refusal.
  ScopedEnv addr("GPUKIT_ADDR", daemon().address());
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult fallback,
                              RunProgram({kCtlPath, "status"}, temp_dir(), kCtlTimeout));
  EXPECT_EQ(fallback.exit_code, 0) << fallback.stderr_text;
  for (const std::vector<std::string>& argv :
       {std::vector<std::string>{kCtlPath, "--addr", "", "status"},
        std::vector<std::string>{kCtlPath, "--addr=", "status"},
        std::vector<std::string>{kCtlPath, "status", "--addr="}}) {
    SCOPED_TRACE(absl::StrJoin(argv, " "));
    GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult result, RunProgram(argv, temp_dir(), kCtlTimeout));
    EXPECT_EQ(result.exit_code, 1);
    EXPECT_THAT(result.stderr_text, HasSubstr("gpukitctl: --addr is empty"));
    EXPECT_THAT(result.stdout_text, IsEmpty());
  }
}

TEST_F(GpukitctlTest, ClientNameWithEscapesIsRefusedSoSessionsNeverShowsIt) {
  ClientOptions options;
  options.address = daemon().address();
  options.tenant = "ctl-tenant";
  options.client_name = "evil\x1b[2J\a\r";
  EXPECT_THAT(Client::Connect(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("client.name holds control character U+001B")));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult table, Ctl({"sessions"}));
  EXPECT_EQ(table.exit_code, 0);
  EXPECT_THAT(table.stderr_text, HasSubstr("No sessions."));
}

// A daemon that answers with hostile strings (an old gpukitd that stored them, or a hostile
// one): gpukitctl must not hand them to the terminal raw.
constexpr char kHostileName[] =
    "evil\x1b[2J\a\rok\xc2\x9b"
    "31m\x7f\xe2\x80\xaeZ";

class HostileAdmin final : public v1::AdminService::Service {
 public:
  grpc::Status Status(grpc::ServerContext*, const v1::StatusRequest*,
                      v1::StatusResponse* response) override {
    response->set_version(kHostileName);
    response->set_backend(kHostileName);
    response->add_listen_addresses(kHostileName);
    return grpc::Status::OK;
  }
  grpc::Status ListDevices(grpc::ServerContext*, const v1::ListDevicesRequest*,
                           v1::ListDevicesResponse* response) override {
    response->add_devices()->set_name(kHostileName);
    return grpc::Status::OK;
  }
  grpc::Status ListSessions(grpc::ServerContext*, const v1::ListSessionsRequest*,
                            v1::ListSessionsResponse* response) override {
    v1::SessionInfo* s = response->add_sessions();
    s->set_session_id(kHostileName);
    s->set_tenant(kHostileName);
    s->set_partition(kHostileName);
    s->set_client_name(kHostileName);
    s->set_client_hostname(kHostileName);
    return grpc::Status::OK;
  }
  grpc::Status ListPartitions(grpc::ServerContext*, const v1::ListPartitionsRequest*,
                              v1::ListPartitionsResponse* response) override {
    v1::PartitionStatus* p = response->add_partitions();
    p->mutable_partition()->set_name(kHostileName);
    (*p->mutable_rejected())[kHostileName] = 1;
    return grpc::Status::OK;
  }
  grpc::Status ListTenants(grpc::ServerContext*, const v1::ListTenantsRequest*,
                           v1::ListTenantsResponse* response) override {
    response->add_tenants()->set_tenant(kHostileName);
    return grpc::Status::OK;
  }
  grpc::Status ListTasks(grpc::ServerContext*, const v1::ListTasksRequest*,
                         v1::ListTasksResponse* response) override {
    v1::TaskInfo* t = response->add_tasks();
    t->set_session_id(kHostileName);
    t->set_name(kHostileName);
    t->set_kind(kHostileName);
    return grpc::Status::OK;
  }
  grpc::Status DeletePartition(grpc::ServerContext*, const v1::DeletePartitionRequest*,
                               v1::DeletePartitionResponse*) override {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("partition ", kHostileName, " is busy"));
  }
};

// Whether `text` holds a byte a terminal acts on: C0 but newline, DEL, or a C1 as UTF-8.
bool HasRawControl(const std::string& text) {
  for (char c : text) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if ((byte < 0x20 && byte != '\n') || byte == 0x7f) return true;
  }
  return absl::StrContains(text, "\xc2\x9b") || absl::StrContains(text, "\xe2\x80\xae");
}

TEST_F(GpukitctlTest, HostileStringsFromADaemonAreEscapedInTablesAndStayExactInJson) {
  HostileAdmin admin;
  grpc::ServerBuilder builder;
  const std::string address = "unix://" + temp_dir() + "/hostile.sock";
  builder.AddListeningPort(address, grpc::InsecureServerCredentials());
  builder.RegisterService(&admin);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  const auto ctl = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {kCtlPath, "--addr", address});
    return RunProgram(args, temp_dir(), kCtlTimeout);
  };
  for (const std::vector<std::string>& command : {std::vector<std::string>{"status"},
                                                  {"devices"},
                                                  {"sessions"},
                                                  {"partitions"},
                                                  {"queues"},
                                                  {"tasks"},
                                                  {"tenants"},
                                                  {"top", "--iterations", "1"}}) {
    SCOPED_TRACE(absl::StrJoin(command, " "));
    GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult table, ctl(command));
    EXPECT_EQ(table.exit_code, 0) << table.stderr_text;
    EXPECT_FALSE(HasRawControl(table.stdout_text)) << table.stdout_text;
    EXPECT_THAT(table.stdout_text, HasSubstr("evil\\u001b[2J\\u0007\\u000dok\\u009b31m"));
  }
  // JSON: valid, and the same strings once parsed.
  std::vector<std::string> json_command = {"-o", "json", "sessions"};
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult json, ctl(json_command));
  EXPECT_EQ(json.exit_code, 0) << json.stderr_text;
  EXPECT_FALSE(HasRawControl(json.stdout_text)) << json.stdout_text;
  v1::ListSessionsResponse sessions;
  ASSERT_NO_FATAL_FAILURE(ParseJsonStrictly(json.stdout_text, &sessions));
  ASSERT_EQ(sessions.sessions_size(), 1);
  EXPECT_EQ(sessions.sessions(0).client_name(), kHostileName);
  // An error message from the daemon is escaped too.
  GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult refused, ctl({"partition", "delete", "gold"}));
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_FALSE(HasRawControl(refused.stderr_text)) << refused.stderr_text;
  EXPECT_THAT(refused.stderr_text, HasSubstr("partition evil\\u001b[2J"));
  server->Shutdown();
}

}  // namespace
}  // namespace gpukit::testing
