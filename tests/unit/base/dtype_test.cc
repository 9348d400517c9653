#include "runtime/base/dtype.h"

#include <iterator>
#include <ostream>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace gpukit {

// Readable parameters in failure messages (GoogleTest finds this through the enum's namespace).
inline void PrintTo(DType dtype, std::ostream* os) { *os << DTypeName(dtype); }

namespace {

struct DTypeFacts {
  DType dtype;
  int64_t bytes;
  std::string name;
  std::string short_name;
  bool floating;
};

class DTypeFactsTest : public testing::TestWithParam<DTypeFacts> {};

TEST_P(DTypeFactsTest, SizeIsBytesPerElement) {
  EXPECT_EQ(DTypeSize(GetParam().dtype), GetParam().bytes);
}

TEST_P(DTypeFactsTest, NameIsNumPySpelling) {
  EXPECT_EQ(DTypeName(GetParam().dtype), GetParam().name);
}

TEST_P(DTypeFactsTest, ParsesCanonicalName) {
  const absl::StatusOr<DType> parsed = ParseDType(GetParam().name);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, GetParam().dtype);
}

TEST_P(DTypeFactsTest, ParsesShortForm) {
  const absl::StatusOr<DType> parsed = ParseDType(GetParam().short_name);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, GetParam().dtype);
}

TEST_P(DTypeFactsTest, KnowsWhetherFloating) {
  EXPECT_EQ(IsFloating(GetParam().dtype), GetParam().floating);
}

TEST_P(DTypeFactsTest, PromotesWithItselfToItself) {
  EXPECT_EQ(PromoteTypes(GetParam().dtype, GetParam().dtype), GetParam().dtype);
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, DTypeFactsTest,
                         testing::Values(DTypeFacts{DType::kFloat32, 4, "float32", "f32", true},
                                         DTypeFacts{DType::kFloat16, 2, "float16", "f16", true},
                                         DTypeFacts{DType::kBFloat16, 2, "bfloat16", "bf16", true},
                                         DTypeFacts{DType::kInt32, 4, "int32", "i32", false},
                                         DTypeFacts{DType::kInt64, 8, "int64", "i64", false},
                                         DTypeFacts{DType::kUInt8, 1, "uint8", "u8", false}),
                         [](const testing::TestParamInfo<DTypeFacts>& info) {
                           return info.param.name;
                         });

TEST(DTypeTest, AllDTypesListsEachDTypeOnceWithDistinctNames) {
  std::set<std::string> names;
  for (DType dtype : kAllDTypes) names.insert(std::string(DTypeName(dtype)));
  EXPECT_EQ(names.size(), std::size(kAllDTypes));
  EXPECT_EQ(std::size(kAllDTypes), 6u);
}

class ParseDTypeRejectsTest : public testing::TestWithParam<std::string> {};

TEST_P(ParseDTypeRejectsTest, UnknownNameWithInvalidArgumentNamingIt) {
  const absl::StatusOr<DType> parsed = ParseDType(GetParam());
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("\"" + GetParam() + "\""), absl::string_view::npos)
      << parsed.status();
}

INSTANTIATE_TEST_SUITE_P(Names, ParseDTypeRejectsTest,
                         // Unsupported types, wrong case, stray spaces, nothing at all.
                         testing::Values("float64", "int8", "Float32", "F32", " f32", "f32 ", "",
                                         "bfloat"));

struct PromoteCase {
  DType a;
  DType b;
  DType expected;
};

class PromoteTypesTest : public testing::TestWithParam<PromoteCase> {};

TEST_P(PromoteTypesTest, PromotesEitherOrder) {
  const PromoteCase& c = GetParam();
  EXPECT_EQ(PromoteTypes(c.a, c.b), c.expected);
  EXPECT_EQ(PromoteTypes(c.b, c.a), c.expected);
}

INSTANTIATE_TEST_SUITE_P(Table, PromoteTypesTest,
                         testing::Values(
                             // Two floating types of different kinds meet in float32.
                             PromoteCase{DType::kFloat16, DType::kBFloat16, DType::kFloat32},
                             PromoteCase{DType::kFloat32, DType::kFloat16, DType::kFloat32},
                             PromoteCase{DType::kFloat32, DType::kBFloat16, DType::kFloat32},
                             // A floating type wins over any integer, keeping its own width.
                             PromoteCase{DType::kFloat16, DType::kInt32, DType::kFloat16},
                             PromoteCase{DType::kFloat16, DType::kInt64, DType::kFloat16},
                             PromoteCase{DType::kBFloat16, DType::kUInt8, DType::kBFloat16},
                             PromoteCase{DType::kFloat32, DType::kInt64, DType::kFloat32},
                             // Two integers give the wider.
                             PromoteCase{DType::kUInt8, DType::kInt32, DType::kInt32},
                             PromoteCase{DType::kUInt8, DType::kInt64, DType::kInt64},
                             PromoteCase{DType::kInt32, DType::kInt64, DType::kInt64}));

}  // namespace
}  // namespace gpukit
