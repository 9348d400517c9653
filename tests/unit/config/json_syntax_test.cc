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

}  // namespace
}  // namespace gpukit
