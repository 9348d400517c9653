// `gpukitctl version`'s output and its major-version warning, as a table of cases.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client/cpp/gpukitctl_format.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::ctl {
namespace {

using ::testing::HasSubstr;

TEST(VersionTextTest, TablePrintsClientThenServer) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string text, VersionText({"0.1.0", "0.2.0"}, false));
  EXPECT_EQ(text, "Client Version: 0.1.0\nServer Version: 0.2.0\n");
}

TEST(VersionTextTest, TableLeavesOutAnUnknownServer) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string text, VersionText({"0.1.0", ""}, false));
  EXPECT_EQ(text, "Client Version: 0.1.0\n");
}

TEST(VersionTextTest, TableEscapesAServerVersionThatHoldsControls) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string text, VersionText({"0.1.0", "1\x1b[2J"}, false));
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
}

TEST(VersionTextTest, JsonHasBothFieldsOrOnlyTheClients) {
  for (const auto& [server, expect_server] :
       std::vector<std::pair<std::string, bool>>{{"0.2.0", true}, {"", false}}) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::string text, VersionText({"0.1.0", server}, true));
    google::protobuf::Struct parsed;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(text, &parsed).ok()) << text;
    EXPECT_EQ(parsed.fields().at("clientVersion").string_value(), "0.1.0");
    EXPECT_EQ(parsed.fields().contains("serverVersion"), expect_server) << text;
    if (expect_server) {
      EXPECT_EQ(parsed.fields().at("serverVersion").string_value(), server);
    }
  }
}

struct SkewCase {
  std::string client;
  std::string server;
  bool warns;
};

class VersionSkewWarningTest : public ::testing::TestWithParam<SkewCase> {};

TEST_P(VersionSkewWarningTest, WarnsExactlyWhenMajorVersionsDiffer) {
  const SkewCase& c = GetParam();
  const std::optional<std::string> warning = VersionSkewWarning({c.client, c.server});
  EXPECT_EQ(warning.has_value(), c.warns) << c.client << " vs " << c.server;
  if (warning.has_value()) {
    EXPECT_THAT(*warning, HasSubstr("gpukitctl " + c.client));
    EXPECT_THAT(*warning, HasSubstr("gpukitd " + c.server));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, VersionSkewWarningTest,
    ::testing::Values(SkewCase{"0.1.0", "0.1.0", false},
                      SkewCase{"0.1.0", "0.9.3", false},  // minor only
                      SkewCase{"1.0.0", "1.4.2", false}, SkewCase{"1.0.0", "0.1.0", true},
                      SkewCase{"0.1.0", "2.0.0", true}, SkewCase{"10.0.0", "1.0.0", true},
                      SkewCase{"0.1.0", "", false},  // unknown server
                      SkewCase{"0.1.0", "dev", false}, SkewCase{"x.1.0", "1.0.0", false}));

}  // namespace
}  // namespace gpukit::ctl
