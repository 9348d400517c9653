// Where a config file's JSON syntax error is (daemon/config/json_syntax.h).
#include "daemon/config/json_syntax.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpukit {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct SyntaxCase {
  std::string name;
  std::string text;
  int line;
  int column;
};

class JsonSyntaxTest : public ::testing::TestWithParam<SyntaxCase> {};

TEST_P(JsonSyntaxTest, NamesTheLineAndColumn) {
  const SyntaxCase& c = GetParam();
  std::optional<JsonSyntaxError> error = FindJsonSyntaxError(c.text);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->line, c.line);
  EXPECT_EQ(error->column, c.column);
  EXPECT_THAT(error->message, HasSubstr("syntax error"));
  EXPECT_THAT(error->message, Not(HasSubstr("json.exception")));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, JsonSyntaxTest,
    ::testing::Values(SyntaxCase{"MissingColon", "{\n  \"a\": 1,\n  \"b\" 2\n}", 3, 7},
                      SyntaxCase{"TrailingComma", "{\"a\": [1,\n 2,\n]}", 3, 1},
                      SyntaxCase{"FirstByte", "]", 1, 1},
                      SyntaxCase{"Truncated", "{\n\"listen\": [", 2, 12}),
    [](const ::testing::TestParamInfo<SyntaxCase>& info) { return info.param.name; });

TEST(JsonSyntaxTest, AcceptsWellFormedJsonWhateverItsSchema) {
  EXPECT_FALSE(FindJsonSyntaxError("{\"unknownField\": [1, 2, {\"x\": null}]}").has_value());
  EXPECT_FALSE(FindJsonSyntaxError("  {}\n").has_value());
}

constexpr absl::string_view kConfig = R"json({
  "limits": {
    "maxOpsInFlight": -3
  },
  "partitions": [
    {"name": "a", "memory": "1GiB"},
    {
      "name": "b",
      "max_queued_tasks": 0,
      "memory": "lots"
    }
  ]
})json";

struct FieldCase {
  std::string name;
  std::string path;
  std::optional<int> line;
};

class JsonFieldLineTest : public ::testing::TestWithParam<FieldCase> {};

TEST_P(JsonFieldLineTest, FindsTheKeysLine) {
  EXPECT_EQ(FindJsonFieldLine(kConfig, GetParam().path), GetParam().line);
}

INSTANTIATE_TEST_SUITE_P(
    Paths, JsonFieldLineTest,
    ::testing::Values(FieldCase{"TopLevel", "limits", 2},
                      FieldCase{"Nested", "limits.maxOpsInFlight", 3},
                      FieldCase{"ArrayElement", "partitions[0]", 6},
                      FieldCase{"ElementField", "partitions[1].memory", 10},
                      FieldCase{"ProtoNameInTheFile", "partitions[1].maxQueuedTasks", 9},
                      FieldCase{"DeeperThanTheDocument", "partitions[1].defaultLimits.memory", 7},
                      FieldCase{"Absent", "jit.cacheDir", std::nullopt}),
    [](const ::testing::TestParamInfo<FieldCase>& info) { return info.param.name; });

struct MessageCase {
  std::string name;
  std::string message;
  std::optional<int> line;
};

class ConfigErrorLineTest : public ::testing::TestWithParam<MessageCase> {};

// Messages as ApplyConfigJson and protobuf's JSON parser word them.
TEST_P(ConfigErrorLineTest, FindsTheFieldTheMessageNames) {
  EXPECT_EQ(FindConfigErrorLine(kConfig, GetParam().message), GetParam().line);
}

INSTANTIATE_TEST_SUITE_P(
    Messages, ConfigErrorLineTest,
    ::testing::Values(
        MessageCase{"OursWithField", "partitions[1]: memory: \"lots\" is not a size", 10},
        MessageCase{"OursDotted", "limits.maxOpsInFlight = -3 must be > 0", 3},
        MessageCase{"OursElementOnly", "partitions[0]: compute share = 0 must be in (0, 1]", 6},
        MessageCase{"ProtobufValue",
                    "configuration is not valid: (partitions[1].memory): invalid value", 10},
        MessageCase{"ProtobufUnknownField",
                    "configuration is not valid: (partitions[1]) max_queued_tasks: Cannot find "
                    "field.",
                    9},
        MessageCase{"ProtobufTopLevelUnknown",
                    "configuration is not valid: limits: Cannot find field.", 2},
        MessageCase{"NamesNothing", "configuration is not valid: Unexpected token.", std::nullopt}),
    [](const ::testing::TestParamInfo<MessageCase>& info) { return info.param.name; });

}  // namespace
}  // namespace gpukit
