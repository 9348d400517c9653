// AsMatmulMatrices (runtime/base/matmul_shapes.h): how NumPy's matmul views each pair of
// operand shapes as matrices, and the pairs it refuses.
#include "runtime/base/matmul_shapes.h"

#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;

struct ViewCase {
  std::string name;
  Shape a, b;
  Shape a_matrix, b_matrix;  // what the view reads
  size_t out_matrix_rank;
};

class AsMatmulMatricesTest : public ::testing::TestWithParam<ViewCase> {};

TEST_P(AsMatmulMatricesTest, ViewsTheOperandsAsMatrices) {
  const ViewCase& c = GetParam();
  GPUKIT_ASSERT_OK_AND_ASSIGN(const MatmulMatrices mm, AsMatmulMatrices(c.a, c.b));
  EXPECT_EQ(mm.a, c.a_matrix);
  EXPECT_EQ(mm.b, c.b_matrix);
  EXPECT_EQ(mm.out_matrix_rank, c.out_matrix_rank);
}

INSTANTIATE_TEST_SUITE_P(
    Rows, AsMatmulMatricesTest,
    ::testing::Values(
        ViewCase{"MatrixTimesMatrix", {2, 3}, {3, 4}, {2, 3}, {3, 4}, 2},
        ViewCase{"VectorTimesMatrixIsARow", {3}, {3, 4}, {1, 3}, {3, 4}, 1},
        ViewCase{"MatrixTimesVectorIsAColumn", {2, 3}, {3}, {2, 3}, {3, 1}, 1},
        ViewCase{"VectorTimesVectorIsADot", {3}, {3}, {1, 3}, {3, 1}, 0},
        ViewCase{"BatchDimensionsStay", {5, 2, 3}, {7, 1, 3, 4}, {5, 2, 3}, {7, 1, 3, 4}, 2},
        ViewCase{"VectorTimesABatch", {3}, {5, 3, 4}, {1, 3}, {5, 3, 4}, 1},
        ViewCase{"ABatchTimesAVector", {5, 2, 3}, {3}, {5, 2, 3}, {3, 1}, 1},
        ViewCase{"EmptyRowsAndColumns", {0, 3}, {3, 0}, {0, 3}, {3, 0}, 2},
        ViewCase{"AnEmptyInnerDimension", {2, 0}, {0}, {2, 0}, {0, 1}, 1},
        // Batch dimensions that do not broadcast are BroadcastShapes' to refuse, not this view's.
        ViewCase{"BatchesAreNotCheckedHere", {2, 2, 3}, {5, 3, 4}, {2, 2, 3}, {5, 3, 4}, 2}),
    [](const ::testing::TestParamInfo<ViewCase>& info) { return info.param.name; });

struct ErrorCase {
  std::string name;
  Shape a, b;
  std::vector<std::string> message_parts;
};

class AsMatmulMatricesRefusesTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(AsMatmulMatricesRefusesTest, WithNumpysWords) {
  const ErrorCase& c = GetParam();
  const absl::StatusOr<MatmulMatrices> mm = AsMatmulMatrices(c.a, c.b);
  for (const std::string& part : c.message_parts) {
    EXPECT_THAT(mm, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(part)));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Rows, AsMatmulMatricesRefusesTest,
    ::testing::Values(
        ErrorCase{"AZeroDimensionalA",
                  {},
                  {3},
                  {"matmul: Input operand 0 does not have enough dimensions (has 0, gufunc core "
                   "with signature (n?,k),(k,m?)->(n?,m?) requires 1)"}},
        ErrorCase{"AZeroDimensionalB", {2, 3}, {}, {"Input operand 1 does not have enough"}},
        ErrorCase{"BothZeroDimensionalNamesTheFirst", {}, {}, {"Input operand 0"}},
        ErrorCase{"InnerDimensionsDiffer",
                  {2, 3},
                  {4, 5},
                  {"matmul inner dimensions differ", "has 3 columns", "has 4 rows"}},
        ErrorCase{"VectorsOfDifferentLengths", {3}, {4}, {"has 3 columns", "has 4 rows"}},
        ErrorCase{"AVectorAgainstAMatrixsRows", {2, 3}, {2}, {"has 3 columns", "has 2 rows"}}),
    [](const ::testing::TestParamInfo<ErrorCase>& info) { return info.param.name; });

}  // namespace
}  // namespace gpukit
