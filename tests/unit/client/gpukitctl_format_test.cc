// gpukitctl's output against hostile strings: what a terminal would act on is escaped in
// tables, plain lines and `top` frames, JSON stays JSON with the same strings, and an empty
// --addr is refused.
#include "client/cpp/gpukitctl_format.h"

#include <random>
#include <string>

#include "client/cpp/gpukitctl_args.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/testing/random_seed.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::ctl {
namespace {

using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

// A client name as a hostile tenant would choose it: clear the screen, ring the bell, go back
// to the line's start, a C1 CSI (as UTF-8 and as a lone byte), a right-to-left override.
constexpr char kHostileBytes[] =
    "evil\x1b[2J\a\rok\xc2\x9b"
    "31m\x9b\xe2\x80\xaeZ\0!";
const std::string kHostile(kHostileBytes, sizeof(kHostileBytes) - 1);

// Whether `text` holds something a terminal would act on: a C0 or C1 control or DEL (as a
// byte or as UTF-8), or a byte that is not UTF-8 at all (a lone 0x9b is CSI to an 8-bit
// terminal). Newlines are allowed: they end a table's rows.
bool HasRawControl(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7f) return true;
    if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      return true;
    }
    if (c >= 0x80 && c < 0xc2) {
      // Only a continuation byte of a sequence is fine: check that one precedes it.
      size_t lead = i;
      while (lead > 0 && (static_cast<unsigned char>(text[lead]) & 0xc0) == 0x80) --lead;
      if (lead == i || static_cast<unsigned char>(text[lead]) < 0xc2) return true;
    }
  }
  return false;
}

struct EscapeCase {
  std::string name;
  std::string text;
  std::string escaped;
};

class EscapeForTerminalTest : public ::testing::TestWithParam<EscapeCase> {};

TEST_P(EscapeForTerminalTest, EscapesWhatATerminalWouldActOnAndKeepsTheRest) {
  EXPECT_EQ(EscapeForTerminal(GetParam().text), GetParam().escaped);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, EscapeForTerminalTest,
    ::testing::Values(
        EscapeCase{"Plain", "inference-worker_1.2", "inference-worker_1.2"},
        EscapeCase{"Empty", "", ""}, EscapeCase{"EscClearScreen", "a\x1b[2Jb", "a\\u001b[2Jb"},
        EscapeCase{"BellCarriageReturnTabNewline", "\a\r\t\n", "\\u0007\\u000d\\u0009\\u000a"},
        EscapeCase{"Nul", std::string("a\0b", 3), "a\\u0000b"},
        EscapeCase{"Del", "a\x7f", "a\\u007f"},
        EscapeCase{"C1CsiAsUtf8",
                   "\xc2\x9b"
                   "31m",
                   "\\u009b31m"},
        EscapeCase{"C1NextLineAsUtf8", "\xc2\x85", "\\u0085"},
        EscapeCase{"LoneC1Byte",
                   "\x9b"
                   "31m",
                   "\\x9b31m"},
        EscapeCase{"Backslash", "a\\u001b", "a\\\\u001b"},
        EscapeCase{"RightToLeftOverride", "abc\xe2\x80\xaetxt.exe", "abc\\u202etxt.exe"},
        EscapeCase{"Isolate", "\xe2\x81\xa6x\xe2\x81\xa9", "\\u2066x\\u2069"},
        EscapeCase{"LineSeparator", "\xe2\x80\xa8", "\\u2028"},
        EscapeCase{"LatinAndCjkAndEmojiStay", "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x9a\x80",
                   "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x9a\x80"},
        EscapeCase{"OverlongSlash", "\xc0\xaf", "\\xc0\\xaf"},
        EscapeCase{"TruncatedSequence", "ab\xe2\x80", "ab\\xe2\\x80"},
        EscapeCase{"Surrogate", "\xed\xa0\x80", "\\xed\\xa0\\x80"},
        EscapeCase{"AboveUnicode", "\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"}),
    [](const ::testing::TestParamInfo<EscapeCase>& info) { return info.param.name; });

TEST(EscapeForTerminalPropertyTest, RandomBytesComeOutWithoutRawControls) {
  const uint32_t seed = gpukit::testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (GPUKIT_TEST_SEED)");
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> length(0, 40);
  for (int i = 0; i < 20000; ++i) {
    std::string text(length(rng), '\0');
    for (char& c : text) c = static_cast<char>(byte(rng));
    const std::string escaped = EscapeForTerminal(text);
    ASSERT_FALSE(HasRawControl(escaped)) << "escaped: " << escaped;
    ASSERT_EQ(escaped.find('\n'), std::string::npos);
  }
}

v1::ListSessionsResponse HostileSessions() {
  v1::ListSessionsResponse response;
  v1::SessionInfo* s = response.add_sessions();
  s->set_session_id("s-1");
  s->set_tenant(kHostile);
  s->set_partition(kHostile);
  s->set_client_name(kHostile);
  s->set_client_hostname(kHostile);
  s->set_client_library_version(kHostile);
  return response;
}

TEST(GpukitctlFormatTest, SessionsTableEscapesAHostileClientName) {
  const std::string out = RenderTable(SessionsTable(HostileSessions()));
  EXPECT_FALSE(HasRawControl(out)) << out;
  EXPECT_THAT(out, HasSubstr("evil\\u001b[2J\\u0007\\u000dok\\u009b31m\\x9b\\u202eZ\\u0000!"));
}

TEST(GpukitctlFormatTest, EveryTableEscapesEveryCell) {
  v1::ListPartitionsResponse partitions;
  partitions.add_partitions()->mutable_partition()->set_name(kHostile);
  (*partitions.mutable_partitions(0)->mutable_rejected())[kHostile] = 1;
  v1::ListTasksResponse tasks;
  v1::TaskInfo* task = tasks.add_tasks();
  task->set_partition(kHostile);
  task->set_session_id(kHostile);
  task->set_kind(kHostile);
  task->set_name(kHostile);
  v1::ListDevicesResponse devices;
  devices.add_devices()->set_name(kHostile);
  devices.mutable_devices(0)->set_backend(kHostile);
  v1::StatusResponse status;
  status.set_version(kHostile);
  status.set_backend(kHostile);
  status.add_listen_addresses(kHostile);
  v1::ListTenantsResponse tenants;
  tenants.add_tenants()->set_tenant(kHostile);
  for (const Table& table :
       {StatusTable(status), DevicesTable(devices), SessionsTable(HostileSessions()),
        PartitionsTable(partitions), QueuesTable(partitions, true), QueuesTable(partitions, false),
        TasksTable(tasks), TenantsTable(tenants)}) {
    const std::string out = RenderTable(table);
    EXPECT_FALSE(HasRawControl(out)) << out;
    EXPECT_THAT(out, HasSubstr("\\u001b[2J"));
  }
}

TEST(GpukitctlFormatTest, TableColumnsAlignOnTheEscapedText) {
  const std::string out = RenderTable({{"A", "B"}, {"\x1b", "x"}});
  // "\u001b" is 6 columns wide: B starts after it and three spaces, in both rows.
  EXPECT_EQ(out, "A        B\n\\u001b   x\n");
}

TEST(GpukitctlFormatTest, TopFrameEscapesTheDaemonsStringsAndSessions) {
  TopSnapshot snapshot;
  snapshot.status.set_version(kHostile);
  snapshot.status.set_backend(kHostile);
  snapshot.devices.add_devices()->set_name(kHostile);
  snapshot.partitions.add_partitions()->mutable_partition()->set_name(kHostile);
  KeepBusiest(HostileSessions(), 10, &snapshot);
  snapshot.tenants.add_tenants()->set_tenant(kHostile);
  snapshot.has_tenants = true;
  const std::string frame = RenderTopFrame(snapshot);
  EXPECT_FALSE(HasRawControl(frame)) << frame;
  EXPECT_THAT(frame, HasSubstr("gpukitd evil\\u001b[2J"));
  // The tenants table is there, its hostile name escaped like the rest.
  EXPECT_THAT(frame, HasSubstr("\nTENANT "));
}

TEST(GpukitctlFormatTest, JsonEscapesControlsAndReadsBackAsTheSameStrings) {
  // Valid UTF-8 only: protobuf refuses to serialize anything else, so a daemon cannot send it.
  const std::string hostile =
      "evil\x1b[2J\a\rok\xc2\x9b"
      "31m\x7f\xe2\x80\xae\xe2\x81\xa6Z";
  v1::ListSessionsResponse response;
  v1::SessionInfo* s = response.add_sessions();
  s->set_client_name(hostile);
  s->set_tenant(hostile);
  for (bool pretty : {false, true}) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::string json, ToJson(response, pretty));
    EXPECT_FALSE(HasRawControl(json)) << json;
    EXPECT_THAT(json, Not(HasSubstr("\xe2\x80\xae")));
    EXPECT_THAT(json, Not(HasSubstr("\xe2\x81\xa6")));
    v1::ListSessionsResponse back;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &back).ok()) << json;
    ASSERT_EQ(back.sessions_size(), 1);
    EXPECT_EQ(back.sessions(0).client_name(), hostile);
    EXPECT_EQ(back.sessions(0).tenant(), hostile);
  }
}

TEST(GpukitctlArgsTest, RefusesAnEmptyAddr) {
  for (const auto& argv : {std::vector<const char*>{"gpukitctl", "--addr", "", "status"},
                           std::vector<const char*>{"gpukitctl", "--addr=", "status"}}) {
    EXPECT_THAT(ParseCommandLine(static_cast<int>(argv.size()), argv.data()),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--addr is empty")));
  }
}

TEST(GpukitctlArgsTest, KeepsAGivenAddr) {
  const std::vector<const char*> argv = {"gpukitctl", "--addr=unix:///tmp/g.sock", "status"};
  GPUKIT_ASSERT_OK_AND_ASSIGN(CommandLine line,
                              ParseCommandLine(static_cast<int>(argv.size()), argv.data()));
  EXPECT_EQ(line.global.addr, "unix:///tmp/g.sock");
}

}  // namespace
}  // namespace gpukit::ctl
