// NumPy's meaning in the planners, as one op each: reductions over a list of axes (NumPy's
// tuple) with keepdims, and matmul of 1-d and batched operands. Tables of (input, attribute)
// -> (output shape, dtype, the axes the kernels reduce), and the refusals NumPy makes.
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/op_registry.h"
#include "tests/testing/status_matchers.h"
#include "tests/unit/runtime/op_plan_helpers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::Array;
using ::gpukit::testing::IsOk;
using ::gpukit::testing::Plan;
using ::gpukit::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr DType kF32 = DType::kFloat32;
constexpr DType kF16 = DType::kFloat16;
constexpr DType kI32 = DType::kInt32;
constexpr DType kI64 = DType::kInt64;
constexpr DType kU8 = DType::kUInt8;

// ---- Reductions over a list of axes ----

struct ReduceAxesCase {
  std::string name;
  Shape in;
  std::vector<int64_t> axis;  // the "axis" attribute, a list
  bool keepdims;
  Shape expected;
  std::vector<int> expected_axes;
};

class ReduceAxesTest : public ::testing::TestWithParam<ReduceAxesCase> {};

TEST_P(ReduceAxesTest, OneOpReducesEveryListedAxis) {
  const ReduceAxesCase& c = GetParam();
  const AttrMap attrs = {{"axis", c.axis}, {"keepdims", c.keepdims}};
  for (absl::string_view op : {"sum", "mean", "max", "min"}) {
    SCOPED_TRACE(op);
    absl::StatusOr<OpPlan> plan = Plan(op, {Array(kF32, c.in)}, attrs);
    ASSERT_THAT(plan, IsOk());
    EXPECT_THAT(plan->output.shape, ElementsAreArray(c.expected));
    EXPECT_THAT(plan->params.reduce_axes, ElementsAreArray(c.expected_axes));
    EXPECT_EQ(plan->params.keepdims, c.keepdims);
    EXPECT_EQ(plan->params.axis, std::nullopt);  // argmax's, not the reductions'
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, ReduceAxesTest,
    ::testing::Values(
        ReduceAxesCase{"AxesApart", {2, 3, 4}, {0, 2}, false, {3}, {0, 2}},
        ReduceAxesCase{"AxesApartKeepdims", {2, 3, 4}, {0, 2}, true, {1, 3, 1}, {0, 2}},
        ReduceAxesCase{"AdjacentAxes", {2, 3, 4}, {1, 2}, false, {2}, {1, 2}},
        ReduceAxesCase{"AnyOrder", {2, 3, 4}, {2, 0}, false, {3}, {0, 2}},
        ReduceAxesCase{"NegativeAxes", {2, 3, 4}, {-1, -3}, true, {1, 3, 1}, {0, 2}},
        ReduceAxesCase{"OneAxisAsAList", {2, 3, 4}, {1}, false, {2, 4}, {1}},
        ReduceAxesCase{"EveryAxis", {2, 3, 4}, {0, 1, 2}, false, {}, {0, 1, 2}},
        ReduceAxesCase{"EveryAxisKeepdims", {2, 3, 4}, {2, 1, 0}, true, {1, 1, 1}, {0, 1, 2}},
        // NumPy's axis=(): nothing is reduced, each element is its own result.
        ReduceAxesCase{"NoAxis", {2, 3, 4}, {}, false, {2, 3, 4}, {}},
        ReduceAxesCase{"NoAxisKeepdims", {2, 3}, {}, true, {2, 3}, {}},
        ReduceAxesCase{"NoAxisOfAZeroDimArray", {}, {}, false, {}, {}},
        ReduceAxesCase{"RankEight",
                       {2, 1, 2, 1, 2, 1, 2, 1},
                       {0, 3, 4, 7},
                       false,
                       {1, 2, 1, 2},
                       {0, 3, 4, 7}}),
    [](const ::testing::TestParamInfo<ReduceAxesCase>& info) { return info.param.name; });

TEST(ReduceAxesPlanTest, DtypesFollowTheOpWhateverTheAxes) {
  for (const AttrMap& attrs :
       {AttrMap{{"axis", std::vector<int64_t>{0, 1}}}, AttrMap{{"axis", std::vector<int64_t>{}}}}) {
    EXPECT_EQ(Plan("sum", {Array(kI32, {2, 3})}, attrs)->output.dtype, kI64);
    EXPECT_EQ(Plan("sum", {Array(kU8, {2, 3})}, attrs)->output.dtype, kI64);
    EXPECT_EQ(Plan("sum", {Array(kF16, {2, 3})}, attrs)->output.dtype, kF16);
    EXPECT_EQ(Plan("mean", {Array(kI64, {2, 3})}, attrs)->output.dtype, kF32);
    EXPECT_EQ(Plan("max", {Array(kU8, {2, 3})}, attrs)->output.dtype, kU8);
    EXPECT_EQ(Plan("min", {Array(kI32, {2, 3})}, attrs)->compute_dtype, kI32);
  }
}

TEST(ReduceAxesPlanTest, RejectsARepeatedAxisNamingItAsNumpyDoes) {
  for (const std::vector<int64_t>& axes :
       {std::vector<int64_t>{1, 1}, std::vector<int64_t>{1, -2}, std::vector<int64_t>{2, 0, -1}}) {
    SCOPED_TRACE(::testing::PrintToString(axes));
    EXPECT_THAT(
        Plan("sum", {Array(kF32, {2, 3, 4})}, {{"axis", axes}}),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 ::testing::AllOf(HasSubstr("attribute \"axis\" = ["), HasSubstr("repeats axis"))));
  }
  EXPECT_THAT(Plan("mean", {Array(kF32, {2, 3, 4})}, {{"axis", std::vector<int64_t>{0, -3}}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("attribute \"axis\" = [0, -3] repeats axis 0 (rank 3)")));
}

TEST(ReduceAxesPlanTest, RejectsAnAxisOutOfRangeNamingTheEntry) {
  EXPECT_THAT(Plan("max", {Array(kF32, {2, 3, 4})}, {{"axis", std::vector<int64_t>{0, 3}}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("attribute \"axis\"[1] = 3 is out of range for an array of "
                                 "rank 3")));
  EXPECT_THAT(Plan("sum", {Array(kF32, {})}, {{"axis", std::vector<int64_t>{0}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 0")));
}

TEST(ReduceAxesPlanTest, RejectsAnAxisThatIsNeitherAnIntegerNorAList) {
  for (const AttrValue& value : {AttrValue(1.0), AttrValue(std::string("0")), AttrValue(true)}) {
    EXPECT_THAT(Plan("sum", {Array(kF32, {2, 3})}, {{"axis", value}}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("attribute \"axis\" must be an integer or a list of integers")));
  }
}

TEST(ReduceAxesPlanTest, MaxAndMinNeedAnIdentityOnlyWhereAReducedAxisIsEmpty) {
  for (absl::string_view op : {"max", "min"}) {
    SCOPED_TRACE(op);
    EXPECT_THAT(Plan(op, {Array(kF32, {2, 0, 3})}, {{"axis", std::vector<int64_t>{0, 1}}}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("of an empty extent (shape [2, 0, 3]) has no identity")));
    absl::StatusOr<OpPlan> kept_empty =
        Plan(op, {Array(kF32, {2, 0, 3})}, {{"axis", std::vector<int64_t>{0, 2}}});
    ASSERT_THAT(kept_empty, IsOk());
    EXPECT_THAT(kept_empty->output.shape, ElementsAre(0));
    // axis = [] reduces nothing, so an empty array needs no identity (as in NumPy).
    absl::StatusOr<OpPlan> none = Plan(op, {Array(kF32, {0})}, {{"axis", std::vector<int64_t>{}}});
    ASSERT_THAT(none, IsOk());
    EXPECT_THAT(none->output.shape, ElementsAre(0));
  }
}

TEST(ReduceAxesPlanTest, ArgmaxTakesOneAxisOnlyAsNumpysDoes) {
  EXPECT_THAT(Plan("argmax", {Array(kF32, {2, 3})}, {{"axis", std::vector<int64_t>{0, 1}}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("attribute \"axis\" must be an integer")));
  absl::StatusOr<OpPlan> plan =
      Plan("argmax", {Array(kF32, {2, 3})}, {{"axis", int64_t{-1}}, {"keepdims", true}});
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->params.axis, 1);
  EXPECT_THAT(plan->params.reduce_axes, IsEmpty());
  EXPECT_THAT(plan->output.shape, ElementsAre(2, 1));
}

// ---- matmul with NumPy's rules ----

struct MatmulCase {
  std::string name;
  Shape a;
  Shape b;
  Shape expected;
};

class NumpyMatmulTest : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(NumpyMatmulTest, VectorsAreARowOrAColumnDroppedFromTheResult) {
  const MatmulCase& c = GetParam();
  absl::StatusOr<OpPlan> plan = Plan("matmul", {Array(kF16, c.a), Array(kF32, c.b)});
  ASSERT_THAT(plan, IsOk());
  EXPECT_THAT(plan->output.shape, ElementsAreArray(c.expected));
  EXPECT_EQ(plan->output.dtype, kF32);
  EXPECT_EQ(plan->compute_dtype, kF32);
}

INSTANTIATE_TEST_SUITE_P(
    Table, NumpyMatmulTest,
    ::testing::Values(MatmulCase{"VectorTimesMatrix", {3}, {3, 4}, {4}},
                      MatmulCase{"MatrixTimesVector", {2, 3}, {3}, {2}},
                      MatmulCase{"VectorDotVector", {3}, {3}, {}},
                      MatmulCase{"BatchTimesVector", {5, 2, 3}, {3}, {5, 2}},
                      MatmulCase{"VectorTimesBatch", {3}, {5, 3, 4}, {5, 4}},
                      MatmulCase{"BroadcastBatchTimesVector", {2, 1, 3, 4}, {4}, {2, 1, 3}},
                      MatmulCase{"EmptyVectors", {0}, {0}, {}},
                      MatmulCase{"EmptyVectorTimesMatrix", {0}, {0, 2}, {2}},
                      MatmulCase{"BatchesBroadcast", {2, 1, 3, 4}, {5, 4, 2}, {2, 5, 3, 2}}),
    [](const ::testing::TestParamInfo<MatmulCase>& info) { return info.param.name; });

TEST(NumpyMatmulPlanTest, RejectsZeroDimOperandsWithNumpysMessage) {
  EXPECT_THAT(Plan("matmul", {Array(kF32, {}), Array(kF32, {3})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("matmul: Input operand 0 does not have enough dimensions")));
  EXPECT_THAT(Plan("matmul", {Array(kF32, {2, 3}), Array(kF32, {})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("matmul: Input operand 1 does not have enough dimensions")));
}

TEST(NumpyMatmulPlanTest, RejectsVectorsOfOtherLengthsNamingBoth) {
  EXPECT_THAT(Plan("matmul", {Array(kF32, {3}), Array(kF32, {4})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("inner dimensions differ"),
                                        HasSubstr("inputs[0] [3] has 3 columns"),
                                        HasSubstr("inputs[1] [4] has 4 rows"))));
  EXPECT_THAT(Plan("matmul", {Array(kF32, {2, 3}), Array(kF32, {2})}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[2, 3] has 3 columns")));
}

}  // namespace
}  // namespace gpukit
