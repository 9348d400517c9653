// The built-in op planners (runtime/op_registry.h, runtime/builtin_ops.cc): dtype promotion,
// broadcasting, attributes and the errors each op reports.
#include "runtime/op_registry.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/unit/runtime/op_plan_helpers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::Array;
using ::gpukit::testing::FloatScalar;
using ::gpukit::testing::IntScalar;
using ::gpukit::testing::IsOk;
using ::gpukit::testing::Plan;
using ::gpukit::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using ::testing::UnorderedElementsAreArray;

constexpr DType kF32 = DType::kFloat32;
constexpr DType kF16 = DType::kFloat16;
constexpr DType kBF16 = DType::kBFloat16;
constexpr DType kI32 = DType::kInt32;
constexpr DType kI64 = DType::kInt64;
constexpr DType kU8 = DType::kUInt8;

// ---- The registry itself ----

TEST(OpRegistryTest, BuiltinHasExactlyTheDocumentedOps) {
  std::vector<std::string> names;
  for (const OpDef& op : OpRegistry::Builtin().ops()) {
    if (!IsTestOnlyOp(op.name)) names.push_back(op.name);
  }
  EXPECT_THAT(
      names, UnorderedElementsAreArray(
                 {"add",     "sub",   "mul",       "div",       "matmul",    "sum",     "mean",
                  "max",     "min",   "astype",    "reshape",   "transpose", "exp",     "log",
                  "sqrt",    "rsqrt", "abs",       "neg",       "relu",      "gelu",    "silu",
                  "sigmoid", "tanh",  "clamp",     "where",     "argmax",    "softmax", "layernorm",
                  "rmsnorm", "rope",  "attention", "embedding", "concat"}));
}

TEST(OpRegistryTest, EveryBuiltinOpHasSummaryPlannerAndSaneArity) {
  for (const OpDef& op : OpRegistry::Builtin().ops()) {
    SCOPED_TRACE(op.name);
    EXPECT_FALSE(op.summary.empty());
    EXPECT_NE(op.plan, nullptr);
    EXPECT_GE(op.min_inputs, 1);
    EXPECT_LE(op.min_inputs, op.max_inputs);
  }
}

TEST(OpRegistryTest, FaultInjectionOpsExistExactlyInFaultInjectionBuilds) {
  std::vector<std::string> test_only;
  for (const OpDef& op : OpRegistry::Builtin().ops()) {
    if (IsTestOnlyOp(op.name)) test_only.push_back(op.name);
  }
#if GPUKIT_FAULT_INJECTION
  EXPECT_THAT(test_only, UnorderedElementsAreArray(
                             {"_test_fault", "_test_hang", "_test_abort", "_test_error"}));
  for (const std::string& name : test_only) {
    absl::StatusOr<const OpDef*> op = OpRegistry::Builtin().Find(name);
    ASSERT_THAT(op, IsOk());
    EXPECT_THAT((*op)->summary, HasSubstr("test builds only")) << name;
  }
#else
  EXPECT_THAT(test_only, ::testing::IsEmpty());
  EXPECT_THAT(OpRegistry::Builtin().Find("_test_fault"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown op")));
#endif
}

TEST(OpRegistryTest, FaultInjectionOpsTakeOneArrayAndKeepItsShapeAndDtype) {
#if GPUKIT_FAULT_INJECTION
  for (absl::string_view name : {"_test_fault", "_test_hang", "_test_abort", "_test_error"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<OpPlan> plan = Plan(name, {Array(DType::kInt32, {3, 5})});
    ASSERT_THAT(plan, IsOk());
    EXPECT_EQ(plan->output.dtype, DType::kInt32);
    EXPECT_THAT(plan->output.shape, ::testing::ElementsAre(3, 5));
    EXPECT_THAT(Plan(name, {Array(kF32, {2}), Array(kF32, {2})}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("takes 1 input, got 2")));
  }
#else
  GTEST_SKIP() << "built without GPUKIT_FAULT_INJECTION";
#endif
}

TEST(OpRegistryTest, OnlyTheTestPrefixMarksATestOnlyOp) {
  EXPECT_TRUE(IsTestOnlyOp("_test_fault"));
  EXPECT_TRUE(IsTestOnlyOp("_test_anything"));
  EXPECT_FALSE(IsTestOnlyOp("matmul"));
  EXPECT_FALSE(IsTestOnlyOp("_testfault"));
  EXPECT_FALSE(IsTestOnlyOp("test_fault"));
  EXPECT_FALSE(IsTestOnlyOp(""));
}

TEST(OpRegistryTest, FindReturnsTheNamedOp) {
  absl::StatusOr<const OpDef*> op = OpRegistry::Builtin().Find("matmul");
  ASSERT_THAT(op, IsOk());
  EXPECT_EQ((*op)->name, "matmul");
}

TEST(OpRegistryTest, FindUnknownOpIsInvalidArgumentListingKnownOps) {
  EXPECT_THAT(OpRegistry::Builtin().Find("frobnicate"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("unknown op \"frobnicate\""), HasSubstr("add"),
                                        HasSubstr("transpose"))));
}

TEST(OpRegistryTest, FindIsCaseSensitive) {
  EXPECT_THAT(OpRegistry::Builtin().Find("Add"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(OpRegistryTest, RejectsWrongOperandCountNamingTheExpectedCount) {
  EXPECT_THAT(
      Plan("add", {Array(kF32, {2})}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("op \"add\" takes 2 inputs, got 1")));
  EXPECT_THAT(
      Plan("sum", {Array(kF32, {2}), Array(kF32, {2})}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("op \"sum\" takes 1 input, got 2")));
  EXPECT_THAT(Plan("transpose", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("takes 1 input, got 0")));
}

TEST(OpRegistryTest, RangeOfInputCountsIsSpelledInTheMessage) {
  auto planner = +[](absl::Span<const OperandDesc>, const AttrMap&) -> absl::StatusOr<OpPlan> {
    return OpPlan{};
  };
  const OpRegistry registry(
      {{.name = "pair", .summary = "test op", .min_inputs = 1, .max_inputs = 3, .plan = planner}});
  absl::StatusOr<const OpDef*> op = registry.Find("pair");
  ASSERT_THAT(op, IsOk());
  EXPECT_THAT(registry.Plan(**op, {}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("takes 1 to 3 inputs")));
}

TEST(OpRegistryTest, RejectsUnknownAttributeListingTheAcceptedOnes) {
  EXPECT_THAT(Plan("sum", {Array(kF32, {2})}, {{"axes", int64_t{0}}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("op \"sum\" has no attribute \"axes\""),
                                        HasSubstr("it accepts axis, keepdims"))));
}

TEST(OpRegistryTest, RejectsAnyAttributeOnOpsThatTakeNone) {
  EXPECT_THAT(Plan("add", {Array(kF32, {2}), Array(kF32, {2})}, {{"axis", int64_t{0}}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("op \"add\" has no attribute \"axis\"")));
}

TEST(OpRegistryTest, CustomRegistryPlansThroughItsOwnPlanner) {
  auto planner = +[](absl::Span<const OperandDesc> in, const AttrMap&) -> absl::StatusOr<OpPlan> {
    OpPlan plan;
    plan.output = {DType::kInt64, {static_cast<int64_t>(in.size())}};
    return plan;
  };
  const OpRegistry registry({{.name = "count",
                              .summary = "counts inputs",
                              .min_inputs = 1,
                              .max_inputs = 2,
                              .plan = planner}});
  absl::StatusOr<const OpDef*> op = registry.Find("count");
  ASSERT_THAT(op, IsOk());
  const std::vector<OperandDesc> inputs = {IntScalar(1), IntScalar(2)};
  absl::StatusOr<OpPlan> plan = registry.Plan(**op, inputs, {});
  ASSERT_THAT(plan, IsOk());
  EXPECT_THAT(plan->output.shape, ElementsAre(2));
  EXPECT_THAT(registry.Find("add"), StatusIs(absl::StatusCode::kInvalidArgument));
}

// ---- Binary arithmetic: dtype promotion ----

struct PromotionCase {
  std::string name;
  std::string op;
  OperandDesc a;
  OperandDesc b;
  DType expected;
};

class BinaryPromotionTest : public ::testing::TestWithParam<PromotionCase> {};

TEST_P(BinaryPromotionTest, OutputAndComputeDtypeFollowThePromotionRules) {
  const PromotionCase& c = GetParam();
  absl::StatusOr<OpPlan> plan = Plan(c.op, {c.a, c.b});
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->output.dtype, c.expected) << DTypeName(plan->output.dtype);
  EXPECT_EQ(plan->compute_dtype, c.expected) << DTypeName(plan->compute_dtype);
}

INSTANTIATE_TEST_SUITE_P(
    Table, BinaryPromotionTest,
    ::testing::Values(
        PromotionCase{"SameFloat32", "add", Array(kF32, {2}), Array(kF32, {2}), kF32},
        PromotionCase{"SameFloat16", "mul", Array(kF16, {2}), Array(kF16, {2}), kF16},
        PromotionCase{"Float16WithBFloat16GivesFloat32", "add", Array(kF16, {2}), Array(kBF16, {2}),
                      kF32},
        PromotionCase{"Float16WithFloat32GivesFloat32", "sub", Array(kF16, {2}), Array(kF32, {2}),
                      kF32},
        PromotionCase{"UInt8WithInt32GivesInt32", "add", Array(kU8, {2}), Array(kI32, {2}), kI32},
        PromotionCase{"Int32WithInt64GivesInt64", "mul", Array(kI32, {2}), Array(kI64, {2}), kI64},
        PromotionCase{"IntegerWithFloat16GivesFloat16", "add", Array(kI64, {2}), Array(kF16, {2}),
                      kF16},
        PromotionCase{"UInt8WithBFloat16GivesBFloat16", "sub", Array(kBF16, {2}), Array(kU8, {2}),
                      kBF16},
        PromotionCase{"Int32ArrayWithIntScalarStaysInt32", "add", Array(kI32, {2}), IntScalar(7),
                      kI32},
        PromotionCase{"UInt8ArrayWithIntScalarStaysUInt8", "mul", IntScalar(3), Array(kU8, {2}),
                      kU8},
        PromotionCase{"Int32ArrayWithFloatScalarGivesFloat32", "add", Array(kI32, {2}),
                      FloatScalar(0.5), kF32},
        PromotionCase{"FloatScalarFirstWithInt64ArrayGivesFloat32", "sub", FloatScalar(1.5),
                      Array(kI64, {2}), kF32},
        PromotionCase{"Float16ArrayWithFloatScalarStaysFloat16", "mul", Array(kF16, {2}),
                      FloatScalar(2.0), kF16},
        PromotionCase{"BFloat16ArrayWithIntScalarStaysBFloat16", "add", Array(kBF16, {2}),
                      IntScalar(2), kBF16},
        PromotionCase{"DivOfIntegersGivesFloat32", "div", Array(kI32, {2}), Array(kI32, {2}), kF32},
        PromotionCase{"DivOfUInt8ByIntScalarGivesFloat32", "div", Array(kU8, {2}), IntScalar(2),
                      kF32},
        PromotionCase{"DivOfFloat16StaysFloat16", "div", Array(kF16, {2}), Array(kF16, {2}), kF16},
        PromotionCase{"DivOfFloat16ByIntScalarStaysFloat16", "div", IntScalar(1), Array(kF16, {2}),
                      kF16}),
    [](const ::testing::TestParamInfo<PromotionCase>& info) { return info.param.name; });

// ---- Binary arithmetic: broadcasting ----

struct BroadcastCase {
  std::string name;
  OperandDesc a;
  OperandDesc b;
  Shape expected;
};

class BinaryBroadcastTest : public ::testing::TestWithParam<BroadcastCase> {};

TEST_P(BinaryBroadcastTest, OutputShapeIsTheNumpyBroadcast) {
  for (absl::string_view op : {"add", "sub", "mul", "div"}) {
    SCOPED_TRACE(op);
    absl::StatusOr<OpPlan> plan = Plan(op, {GetParam().a, GetParam().b});
    ASSERT_THAT(plan, IsOk());
    EXPECT_THAT(plan->output.shape, ElementsAreArray(GetParam().expected));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, BinaryBroadcastTest,
    ::testing::Values(
        BroadcastCase{"SameShape", Array(kF32, {2, 3}), Array(kF32, {2, 3}), {2, 3}},
        BroadcastCase{"RowVector", Array(kF32, {2, 3}), Array(kF32, {3}), {2, 3}},
        BroadcastCase{"OnesOnBothSides", Array(kF32, {2, 1, 3}), Array(kF32, {4, 3}), {2, 4, 3}},
        BroadcastCase{"ColumnTimesRow", Array(kF32, {3, 1}), Array(kF32, {1, 4}), {3, 4}},
        BroadcastCase{"ZeroDimArrayWithVector", Array(kF32, {}), Array(kF32, {5}), {5}},
        BroadcastCase{"ZeroExtentAgainstOne", Array(kF32, {0, 3}), Array(kF32, {1, 3}), {0, 3}},
        BroadcastCase{"ArrayAndScalar", Array(kF32, {2, 3}), FloatScalar(1), {2, 3}},
        BroadcastCase{"ScalarAndArray", IntScalar(1), Array(kI32, {4}), {4}},
        BroadcastCase{"ScalarAndZeroDimArray", IntScalar(1), Array(kI32, {}), {}}),
    [](const ::testing::TestParamInfo<BroadcastCase>& info) { return info.param.name; });

TEST(BinaryPlanTest, RejectsShapesThatDoNotBroadcastNamingBoth) {
  EXPECT_THAT(Plan("add", {Array(kF32, {2, 3}), Array(kF32, {3, 2})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shapes [2, 3] and [3, 2] cannot be broadcast together")));
  EXPECT_THAT(Plan("div", {Array(kF32, {4}), Array(kF32, {0})}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot be broadcast")));
}

TEST(BinaryPlanTest, RejectsTwoScalars) {
  EXPECT_THAT(Plan("mul", {IntScalar(2), FloatScalar(3)}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("two scalars")));
}

// ---- matmul ----

struct MatmulCase {
  std::string name;
  Shape a;
  Shape b;
  Shape expected;
};

class MatmulShapeTest : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(MatmulShapeTest, OutputIsBatchBroadcastThenMByN) {
  absl::StatusOr<OpPlan> plan =
      Plan("matmul", {Array(kF32, GetParam().a), Array(kF32, GetParam().b)});
  ASSERT_THAT(plan, IsOk());
  EXPECT_THAT(plan->output.shape, ElementsAreArray(GetParam().expected));
  EXPECT_EQ(plan->output.dtype, kF32);
}

INSTANTIATE_TEST_SUITE_P(
    Table, MatmulShapeTest,
    ::testing::Values(MatmulCase{"Plain", {2, 3}, {3, 4}, {2, 4}},
                      MatmulCase{"RowTimesColumn", {1, 5}, {5, 1}, {1, 1}},
                      MatmulCase{"Batched", {7, 2, 3}, {7, 3, 4}, {7, 2, 4}},
                      MatmulCase{"BatchOnOneSide", {7, 2, 3}, {3, 4}, {7, 2, 4}},
                      MatmulCase{"BatchBroadcast", {2, 1, 3, 4}, {5, 4, 2}, {2, 5, 3, 2}},
                      MatmulCase{"EmptyInnerDimension", {2, 0}, {0, 3}, {2, 3}}),
    [](const ::testing::TestParamInfo<MatmulCase>& info) { return info.param.name; });

TEST(MatmulPlanTest, PromotesDtypes) {
  absl::StatusOr<OpPlan> plan = Plan("matmul", {Array(kF16, {2, 2}), Array(kBF16, {2, 2})});
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->output.dtype, kF32);
  EXPECT_EQ(plan->compute_dtype, kF32);
  plan = Plan("matmul", {Array(kU8, {2, 2}), Array(kI32, {2, 2})});
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->output.dtype, kI32);
}

TEST(MatmulPlanTest, RejectsZeroDimOperandsWithNumpysMessage) {
  EXPECT_THAT(Plan("matmul", {Array(kF32, {}), Array(kF32, {3, 2})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("matmul: Input operand 0 does not have enough dimensions (has 0, "
                                 "gufunc core with signature (n?,k),(k,m?)->(n?,m?) requires 1)")));
  EXPECT_THAT(Plan("matmul", {Array(kF32, {3}), Array(kF32, {})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Input operand 1 does not have enough dimensions")));
}

TEST(MatmulPlanTest, RejectsInnerDimensionMismatchNamingBoth) {
  EXPECT_THAT(Plan("matmul", {Array(kF32, {2, 3}), Array(kF32, {4, 5})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("inner dimensions differ"),
                                        HasSubstr("[2, 3] has 3 columns"),
                                        HasSubstr("[4, 5] has 4 rows"))));
}

TEST(MatmulPlanTest, RejectsBatchDimensionsThatDoNotBroadcast) {
  EXPECT_THAT(Plan("matmul", {Array(kF32, {2, 3, 4}), Array(kF32, {3, 4, 5})}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[2] and [3]")));
}

TEST(MatmulPlanTest, RejectsScalarOperandNamingIt) {
  EXPECT_THAT(Plan("matmul", {Array(kF32, {2, 2}), FloatScalar(2)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("inputs[1] of \"matmul\" must be an array, not a scalar")));
}

// ---- Reductions ----

struct ReduceShapeCase {
  std::string name;
  Shape in;
  std::optional<int64_t> axis;
  std::optional<bool> keepdims;
  Shape expected;
  std::vector<int> expected_axes;
};

class ReduceShapeTest : public ::testing::TestWithParam<ReduceShapeCase> {};

TEST_P(ReduceShapeTest, OutputShapeDropsOrKeepsTheReducedAxis) {
  const ReduceShapeCase& c = GetParam();
  AttrMap attrs;
  if (c.axis.has_value()) attrs["axis"] = *c.axis;
  if (c.keepdims.has_value()) attrs["keepdims"] = *c.keepdims;
  for (absl::string_view op : {"sum", "mean", "max", "min"}) {
    SCOPED_TRACE(op);
    absl::StatusOr<OpPlan> plan = Plan(op, {Array(kF32, c.in)}, attrs);
    ASSERT_THAT(plan, IsOk());
    EXPECT_THAT(plan->output.shape, ElementsAreArray(c.expected));
    EXPECT_THAT(plan->params.reduce_axes, ElementsAreArray(c.expected_axes));
    EXPECT_EQ(plan->params.keepdims, c.keepdims.value_or(false));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, ReduceShapeTest,
    ::testing::Values(
        ReduceShapeCase{"AllElements", {2, 3, 4}, std::nullopt, std::nullopt, {}, {0, 1, 2}},
        ReduceShapeCase{"AllElementsKeepdims", {2, 3, 4}, std::nullopt, true, {1, 1, 1}, {0, 1, 2}},
        ReduceShapeCase{"Axis0", {2, 3, 4}, 0, std::nullopt, {3, 4}, {0}},
        ReduceShapeCase{"Axis1", {2, 3, 4}, 1, false, {2, 4}, {1}},
        ReduceShapeCase{"Axis2Keepdims", {2, 3, 4}, 2, true, {2, 3, 1}, {2}},
        ReduceShapeCase{"NegativeAxisCountsFromTheEnd", {2, 3, 4}, -1, std::nullopt, {2, 3}, {2}},
        ReduceShapeCase{"MostNegativeAxis", {2, 3, 4}, -3, true, {1, 3, 4}, {0}},
        ReduceShapeCase{"ZeroDimArray", {}, std::nullopt, true, {}, {}},
        ReduceShapeCase{"Vector", {5}, 0, std::nullopt, {}, {0}}),
    [](const ::testing::TestParamInfo<ReduceShapeCase>& info) { return info.param.name; });

struct ReduceDtypeCase {
  std::string name;
  std::string op;
  DType in;
  DType out;
};

class ReduceDtypeTest : public ::testing::TestWithParam<ReduceDtypeCase> {};

TEST_P(ReduceDtypeTest, OutputDtypeFollowsTheOp) {
  absl::StatusOr<OpPlan> plan = Plan(GetParam().op, {Array(GetParam().in, {3})});
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->output.dtype, GetParam().out) << DTypeName(plan->output.dtype);
  EXPECT_EQ(plan->compute_dtype, GetParam().in);  // kernels read the input as it is
}

INSTANTIATE_TEST_SUITE_P(
    Table, ReduceDtypeTest,
    ::testing::Values(ReduceDtypeCase{"SumFloat32", "sum", kF32, kF32},
                      ReduceDtypeCase{"SumFloat16StaysFloat16", "sum", kF16, kF16},
                      ReduceDtypeCase{"SumInt32IntoInt64", "sum", kI32, kI64},
                      ReduceDtypeCase{"SumUInt8IntoInt64", "sum", kU8, kI64},
                      ReduceDtypeCase{"MeanBFloat16StaysBFloat16", "mean", kBF16, kBF16},
                      ReduceDtypeCase{"MeanInt64GivesFloat32", "mean", kI64, kF32},
                      ReduceDtypeCase{"MeanUInt8GivesFloat32", "mean", kU8, kF32},
                      ReduceDtypeCase{"MaxInt32StaysInt32", "max", kI32, kI32},
                      ReduceDtypeCase{"MinUInt8StaysUInt8", "min", kU8, kU8},
                      ReduceDtypeCase{"MaxFloat16StaysFloat16", "max", kF16, kF16}),
    [](const ::testing::TestParamInfo<ReduceDtypeCase>& info) { return info.param.name; });

TEST(ReducePlanTest, RejectsAxisOutOfRangeNamingTheAttribute) {
  for (int64_t axis : {int64_t{3}, int64_t{-4}, int64_t{1} << 40}) {
    SCOPED_TRACE(axis);
    EXPECT_THAT(Plan("sum", {Array(kF32, {2, 3, 4})}, {{"axis", axis}}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::AllOf(HasSubstr("attribute \"axis\""),
                                          HasSubstr("out of range for an array of rank 3"))));
  }
}

TEST(ReducePlanTest, RejectsAxisOnZeroDimArray) {
  EXPECT_THAT(Plan("mean", {Array(kF32, {})}, {{"axis", int64_t{0}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 0")));
}

TEST(ReducePlanTest, RejectsAttributesOfTheWrongType) {
  EXPECT_THAT(Plan("sum", {Array(kF32, {2})}, {{"axis", 0.0}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("attribute \"axis\" must be an integer")));
  EXPECT_THAT(Plan("sum", {Array(kF32, {2})}, {{"axis", true}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("attribute \"axis\" must be an integer")));
  EXPECT_THAT(Plan("max", {Array(kF32, {2})}, {{"keepdims", int64_t{1}}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("attribute \"keepdims\" must be a bool")));
}

TEST(ReducePlanTest, RejectsScalarOperand) {
  EXPECT_THAT(Plan("sum", {FloatScalar(1)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("inputs[0] of \"sum\" must be an array")));
}

TEST(ReducePlanTest, MaxAndMinOfEmptyExtentHaveNoIdentity) {
  for (absl::string_view op : {"max", "min"}) {
    SCOPED_TRACE(op);
    EXPECT_THAT(Plan(op, {Array(kF32, {0})}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no identity")));
    EXPECT_THAT(
        Plan(op, {Array(kF32, {3, 0})}, {{"axis", int64_t{1}}}),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty extent (shape [3, 0])")));
  }
}

TEST(ReducePlanTest, MaxAlongANonEmptyAxisOfAnEmptyArrayIsAllowed) {
  // Reducing axis 0 of [3, 0] has extent 3 and produces zero outputs: nothing needs an identity.
  absl::StatusOr<OpPlan> plan = Plan("max", {Array(kF32, {3, 0})}, {{"axis", int64_t{0}}});
  ASSERT_THAT(plan, IsOk());
  EXPECT_THAT(plan->output.shape, ElementsAre(0));
}

TEST(ReducePlanTest, SumAndMeanOfEmptyArrayAreAllowed) {
  EXPECT_THAT(Plan("sum", {Array(kF32, {0})}), IsOk());
  EXPECT_THAT(Plan("mean", {Array(kI32, {2, 0})}, {{"axis", int64_t{1}}}), IsOk());
}

// ---- astype ----

TEST(AstypePlanTest, OutputHasTheRequestedDtypeAndTheInputShape) {
  for (DType to : kAllDTypes) {
    SCOPED_TRACE(DTypeName(to));
    absl::StatusOr<OpPlan> plan = Plan("astype", {Array(kI32, {2, 3})}, {{"dtype", to}});
    ASSERT_THAT(plan, IsOk());
    EXPECT_EQ(plan->output.dtype, to);
    EXPECT_THAT(plan->output.shape, ElementsAre(2, 3));
    EXPECT_EQ(plan->compute_dtype, kI32);
  }
}

TEST(AstypePlanTest, RequiresTheDtypeAttribute) {
  EXPECT_THAT(
      Plan("astype", {Array(kF32, {2})}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("astype needs attribute \"dtype\"")));
}

TEST(AstypePlanTest, RejectsDtypeGivenAsAString) {
  EXPECT_THAT(Plan("astype", {Array(kF32, {2})}, {{"dtype", std::string("int32")}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("attribute \"dtype\" must be a dtype")));
}

// ---- reshape ----

struct ReshapeCase {
  std::string name;
  Shape in;
  std::vector<int64_t> shape_attr;
  Shape expected;
};

class ReshapeTest : public ::testing::TestWithParam<ReshapeCase> {};

TEST_P(ReshapeTest, KeepsElementsAndInfersASingleMinusOne) {
  absl::StatusOr<OpPlan> plan =
      Plan("reshape", {Array(kBF16, GetParam().in)}, {{"shape", GetParam().shape_attr}});
  ASSERT_THAT(plan, IsOk());
  EXPECT_THAT(plan->output.shape, ElementsAreArray(GetParam().expected));
  EXPECT_EQ(plan->output.dtype, kBF16);
}

INSTANTIATE_TEST_SUITE_P(
    Table, ReshapeTest,
    ::testing::Values(ReshapeCase{"Flatten", {2, 3, 4}, {24}, {24}},
                      ReshapeCase{"Split", {24}, {2, 3, 4}, {2, 3, 4}},
                      ReshapeCase{"InferLeading", {2, 3, 4}, {-1, 4}, {6, 4}},
                      ReshapeCase{"InferMiddle", {2, 3, 4}, {2, -1, 2}, {2, 6, 2}},
                      ReshapeCase{"InferAll", {2, 3}, {-1}, {6}},
                      ReshapeCase{"ToZeroDim", {1, 1}, {}, {}},
                      ReshapeCase{"FromZeroDim", {}, {1, -1, 1}, {1, 1, 1}},
                      ReshapeCase{"EmptyWithInference", {0, 3}, {-1, 5}, {0, 5}},
                      ReshapeCase{"EmptyToOtherEmpty", {0, 3}, {3, 0, 7}, {3, 0, 7}}),
    [](const ::testing::TestParamInfo<ReshapeCase>& info) { return info.param.name; });

struct BadReshapeCase {
  std::string name;
  Shape in;
  std::vector<int64_t> shape_attr;
  std::string message;
};

class BadReshapeTest : public ::testing::TestWithParam<BadReshapeCase> {};

TEST_P(BadReshapeTest, IsInvalidArgument) {
  EXPECT_THAT(Plan("reshape", {Array(kF32, GetParam().in)}, {{"shape", GetParam().shape_attr}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(GetParam().message)));
}

INSTANTIATE_TEST_SUITE_P(
    Table, BadReshapeTest,
    ::testing::Values(
        BadReshapeCase{"CountMismatch", {2, 3}, {4, 2}, "cannot reshape [2, 3] (6 elements)"},
        BadReshapeCase{"TwoMinusOnes", {2, 3}, {-1, -1}, "shape\"[1] = -1 must be >= 0"},
        BadReshapeCase{"OtherNegative", {2, 3}, {-2, 3}, "shape\"[0] = -2 must be >= 0"},
        BadReshapeCase{"InferenceDoesNotDivide", {2, 3}, {-1, 4}, "cannot reshape [2, 3] into"},
        BadReshapeCase{"InferenceAgainstZero", {0, 3}, {-1, 0}, "cannot reshape [0, 3] into"},
        BadReshapeCase{"Overflow", {2}, {int64_t{1} << 40, int64_t{1} << 40}, "overflows"},
        BadReshapeCase{
            "RankAboveMaximum", {1}, {1, 1, 1, 1, 1, 1, 1, 1, 1}, "9 dimensions; at most 8"}),
    [](const ::testing::TestParamInfo<BadReshapeCase>& info) { return info.param.name; });

TEST(ReshapePlanTest, RequiresTheShapeAttribute) {
  EXPECT_THAT(Plan("reshape", {Array(kF32, {2})}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs attribute \"shape\"")));
  EXPECT_THAT(Plan("reshape", {Array(kF32, {2})}, {{"shape", int64_t{2}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a list of integers")));
}

// ---- transpose ----

struct TransposeCase {
  std::string name;
  Shape in;
  std::optional<std::vector<int64_t>> perm;
  std::vector<int> expected_perm;
  Shape expected;
};

class TransposeTest : public ::testing::TestWithParam<TransposeCase> {};

TEST_P(TransposeTest, PermutesTheShape) {
  AttrMap attrs;
  if (GetParam().perm.has_value()) attrs["perm"] = *GetParam().perm;
  absl::StatusOr<OpPlan> plan = Plan("transpose", {Array(kU8, GetParam().in)}, attrs);
  ASSERT_THAT(plan, IsOk());
  EXPECT_THAT(plan->params.perm, ElementsAreArray(GetParam().expected_perm));
  EXPECT_THAT(plan->output.shape, ElementsAreArray(GetParam().expected));
  EXPECT_EQ(plan->output.dtype, kU8);
}

INSTANTIATE_TEST_SUITE_P(
    Table, TransposeTest,
    ::testing::Values(
        TransposeCase{"DefaultReversesAxes", {2, 3, 4}, std::nullopt, {2, 1, 0}, {4, 3, 2}},
        TransposeCase{"DefaultOfMatrix", {2, 3}, std::nullopt, {1, 0}, {3, 2}},
        TransposeCase{
            "ExplicitPerm", {2, 3, 4}, std::vector<int64_t>{1, 2, 0}, {1, 2, 0}, {3, 4, 2}},
        TransposeCase{
            "NegativeAxesInPerm", {2, 3, 4}, std::vector<int64_t>{-1, 0, -2}, {2, 0, 1}, {4, 2, 3}},
        TransposeCase{"IdentityPerm", {2, 3}, std::vector<int64_t>{0, 1}, {0, 1}, {2, 3}},
        TransposeCase{"ZeroDim", {}, std::nullopt, {}, {}}),
    [](const ::testing::TestParamInfo<TransposeCase>& info) { return info.param.name; });

TEST(TransposePlanTest, RejectsPermOfTheWrongLength) {
  EXPECT_THAT(Plan("transpose", {Array(kF32, {2, 3})}, {{"perm", std::vector<int64_t>{0}}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"perm\" has 1 entries; the array has rank 2")));
}

TEST(TransposePlanTest, RejectsRepeatedAxis) {
  EXPECT_THAT(Plan("transpose", {Array(kF32, {2, 3})}, {{"perm", std::vector<int64_t>{1, -1}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"perm\" repeats axis 1")));
}

TEST(TransposePlanTest, RejectsAxisOutOfRangeNamingTheEntry) {
  EXPECT_THAT(Plan("transpose", {Array(kF32, {2, 3})}, {{"perm", std::vector<int64_t>{0, 2}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("attribute \"perm\"[1] = 2")));
}

// ---- Element-wise math ----

struct UnaryDtypeCase {
  std::string op;
  DType in;
  DType out;
};

class UnaryDtypeTest : public ::testing::TestWithParam<UnaryDtypeCase> {};

TEST_P(UnaryDtypeTest, FloatsStayIntegersStayOnlyForAbsNegRelu) {
  const UnaryDtypeCase& c = GetParam();
  absl::StatusOr<OpPlan> plan = Plan(c.op, {Array(c.in, {2, 3})});
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->output.dtype, c.out);
  EXPECT_EQ(plan->compute_dtype, c.out);
  EXPECT_THAT(plan->output.shape, ElementsAre(2, 3));
}

INSTANTIATE_TEST_SUITE_P(
    Ops, UnaryDtypeTest,
    ::testing::Values(UnaryDtypeCase{"exp", kF16, kF16}, UnaryDtypeCase{"exp", kI32, kF32},
                      UnaryDtypeCase{"log", kBF16, kBF16}, UnaryDtypeCase{"sqrt", kU8, kF32},
                      UnaryDtypeCase{"rsqrt", kI64, kF32}, UnaryDtypeCase{"gelu", kF32, kF32},
                      UnaryDtypeCase{"silu", kI32, kF32}, UnaryDtypeCase{"sigmoid", kF16, kF16},
                      UnaryDtypeCase{"tanh", kU8, kF32}, UnaryDtypeCase{"abs", kI32, kI32},
                      UnaryDtypeCase{"neg", kU8, kU8}, UnaryDtypeCase{"relu", kI64, kI64},
                      UnaryDtypeCase{"relu", kBF16, kBF16}),
    [](const auto& info) { return info.param.op + "_" + std::string(DTypeName(info.param.in)); });

TEST(UnaryPlanTest, RejectsScalarAndAttributes) {
  EXPECT_THAT(Plan("exp", {FloatScalar(1)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("inputs[0] of \"exp\" must be an array")));
  EXPECT_THAT(Plan("tanh", {Array(kF32, {2})}, {{"axis", int64_t{0}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no attribute \"axis\"")));
}

TEST(ClampPlanTest, BoundsAreOptionalAndAFloatBoundMakesIntegersFloat32) {
  absl::StatusOr<OpPlan> plan = Plan("clamp", {Array(kI32, {4})}, {{"min", int64_t{-3}}});
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->output.dtype, kI32);
  ASSERT_TRUE(plan->params.clamp_min.has_value());
  EXPECT_EQ(plan->params.clamp_min->int_value, -3);
  EXPECT_FALSE(plan->params.clamp_max.has_value());
  plan = Plan("clamp", {Array(kU8, {4})}, {{"max", 0.5}});
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->output.dtype, kF32);
  plan = Plan("clamp", {Array(kBF16, {4})}, {{"min", int64_t{0}}, {"max", 6.0}});
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->output.dtype, kBF16);
  EXPECT_THAT(Plan("clamp", {Array(kF32, {4})}), IsOk());
}

TEST(ClampPlanTest, RejectsBadBoundsNamingTheAttribute) {
  EXPECT_THAT(Plan("clamp", {Array(kU8, {4})}, {{"max", int64_t{300}}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("attribute \"max\" = 300 is out of range for uint8")));
  EXPECT_THAT(Plan("clamp", {Array(kF32, {4})}, {{"min", std::nan("")}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"min\" is NaN")));
  EXPECT_THAT(Plan("clamp", {Array(kF32, {4})}, {{"min", true}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("attribute \"min\" must be a number")));
}

TEST(WherePlanTest, BroadcastsAllThreeAndPromotesTheValuesOnly) {
  absl::StatusOr<OpPlan> plan =
      Plan("where", {Array(kU8, {2, 1}), Array(kI32, {3}), Array(kF16, {1})});
  ASSERT_THAT(plan, IsOk());
  EXPECT_THAT(plan->output.shape, ElementsAre(2, 3));
  EXPECT_EQ(plan->output.dtype, kF16);
  plan = Plan("where", {Array(kF32, {4}), Array(kI64, {4}), IntScalar(0)});
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->output.dtype, kI64);
  EXPECT_THAT(Plan("where", {Array(kU8, {2}), Array(kF32, {3}), Array(kF32, {3})}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot be broadcast")));
  EXPECT_THAT(Plan("where", {IntScalar(1), Array(kF32, {3}), Array(kF32, {3})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("inputs[0] of \"where\" must be an array")));
}

// ---- argmax, softmax, norms ----

TEST(ArgmaxPlanTest, GivesInt64IndicesShapedLikeAReduction) {
  absl::StatusOr<OpPlan> plan = Plan("argmax", {Array(kBF16, {2, 3})}, {{"axis", int64_t{-1}}});
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->output.dtype, kI64);
  EXPECT_EQ(plan->compute_dtype, kBF16);
  EXPECT_THAT(plan->output.shape, ElementsAre(2));
  plan = Plan("argmax", {Array(kU8, {2, 3})});
  ASSERT_THAT(plan, IsOk());
  EXPECT_TRUE(plan->output.shape.empty());
  EXPECT_THAT(Plan("argmax", {Array(kF32, {0, 3})}, {{"axis", int64_t{0}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("argmax of an empty extent")));
}

TEST(SoftmaxPlanTest, DefaultsToTheLastAxis) {
  absl::StatusOr<OpPlan> plan = Plan("softmax", {Array(kF16, {2, 3})});
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->params.axis, 1);
  EXPECT_EQ(plan->output.dtype, kF16);
  plan = Plan("softmax", {Array(kI32, {2, 3})}, {{"axis", int64_t{0}}});
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->params.axis, 0);
  EXPECT_EQ(plan->output.dtype, kF32);
  EXPECT_THAT(Plan("softmax", {Array(kF32, {})}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank >= 1")));
  EXPECT_THAT(Plan("softmax", {Array(kF32, {2})}, {{"axis", int64_t{1}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("attribute \"axis\"")));
}

TEST(NormPlanTest, WeightAndBiasAreVectorsOfTheLastDimension) {
  absl::StatusOr<OpPlan> plan =
      Plan("layernorm", {Array(kBF16, {4, 8}), Array(kBF16, {8}), Array(kBF16, {8})});
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->output.dtype, kBF16);
  EXPECT_DOUBLE_EQ(plan->params.eps, 1e-5);
  plan = Plan("rmsnorm", {Array(kF16, {4, 8}), Array(kF32, {8})}, {{"eps", 1e-3}});
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->output.dtype, kF32) << "promoted with the weight";
  EXPECT_DOUBLE_EQ(plan->params.eps, 1e-3);
  plan = Plan("rmsnorm", {Array(kF32, {8})});
  ASSERT_THAT(plan, IsOk());
  EXPECT_DOUBLE_EQ(plan->params.eps, 1e-6);
  EXPECT_THAT(Plan("layernorm", {Array(kF32, {4, 8}), Array(kF32, {4})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("inputs[1] (weight) must have shape [8], got [4]")));
  EXPECT_THAT(Plan("layernorm", {Array(kF32, {4, 8}), Array(kF32, {8}), Array(kF32, {1, 8})}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("inputs[2] (bias)")));
  EXPECT_THAT(Plan("rmsnorm", {Array(kF32, {4, 8})}, {{"eps", -1.0}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("attribute \"eps\" = -1 must be finite and >= 0")));
  EXPECT_THAT(Plan("rmsnorm", {Array(kF32, {4}), Array(kF32, {4}), Array(kF32, {4})}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("takes 1 to 2 inputs")));
}

// ---- rope, attention, embedding, concat ----

TEST(RopePlanTest, NeedsAnEvenLastDimensionAndSaneAttributes) {
  absl::StatusOr<OpPlan> plan =
      Plan("rope", {Array(kF16, {2, 5, 8})}, {{"base", 500000.0}, {"offset", int64_t{7}}});
  ASSERT_THAT(plan, IsOk());
  EXPECT_DOUBLE_EQ(plan->params.rope_base, 500000.0);
  EXPECT_EQ(plan->params.rope_offset, 7);
  plan = Plan("rope", {Array(kF32, {5, 8})});
  ASSERT_THAT(plan, IsOk());
  EXPECT_DOUBLE_EQ(plan->params.rope_base, 10000.0);
  EXPECT_EQ(plan->params.rope_offset, 0);
  EXPECT_THAT(Plan("rope", {Array(kF32, {5, 7})}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("even dim, got [5, 7]")));
  EXPECT_THAT(Plan("rope", {Array(kF32, {8})}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[..., seq, dim]")));
  EXPECT_THAT(Plan("rope", {Array(kF32, {5, 8})}, {{"offset", int64_t{-1}}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("attribute \"offset\" = -1 must be >= 0")));
  EXPECT_THAT(Plan("rope", {Array(kF32, {5, 8})}, {{"base", 0.0}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("attribute \"base\"")));
}

TEST(AttentionPlanTest, OutputIsHeadsByQuerySeqByValueDim) {
  absl::StatusOr<OpPlan> plan = Plan(
      "attention", {Array(kBF16, {4, 3, 16}), Array(kBF16, {4, 10, 16}), Array(kBF16, {4, 10, 8})},
      {{"causal", true}});
  ASSERT_THAT(plan, IsOk());
  EXPECT_THAT(plan->output.shape, ElementsAre(4, 3, 8));
  EXPECT_EQ(plan->output.dtype, kBF16);
  EXPECT_TRUE(plan->params.causal);
  EXPECT_DOUBLE_EQ(plan->params.scale, 0.25);
  plan = Plan("attention", {Array(kF32, {1, 2, 4}), Array(kF32, {1, 2, 4}), Array(kF32, {1, 2, 4})},
              {{"scale", 2.0}});
  ASSERT_THAT(plan, IsOk());
  EXPECT_DOUBLE_EQ(plan->params.scale, 2.0);
  EXPECT_FALSE(plan->params.causal);
}

TEST(AttentionPlanTest, RejectsMismatchedShapesNamingTheOperands) {
  EXPECT_THAT(
      Plan("attention", {Array(kF32, {2, 4}), Array(kF32, {1, 2, 4}), Array(kF32, {1, 2, 4})}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("inputs[0] (q) must be [heads, seq, dim]")));
  EXPECT_THAT(
      Plan("attention", {Array(kF32, {2, 3, 4}), Array(kF32, {1, 5, 4}), Array(kF32, {2, 5, 4})}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("heads differ")));
  EXPECT_THAT(
      Plan("attention", {Array(kF32, {2, 3, 4}), Array(kF32, {2, 5, 8}), Array(kF32, {2, 5, 4})}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("differ in dim")));
  EXPECT_THAT(
      Plan("attention", {Array(kF32, {2, 3, 4}), Array(kF32, {2, 5, 4}), Array(kF32, {2, 6, 4})}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("differ in seq")));
  EXPECT_THAT(
      Plan("attention", {Array(kF32, {1, 2, 4}), Array(kF32, {1, 2, 4}), Array(kF32, {1, 2, 4})},
           {{"causal", int64_t{1}}}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("attribute \"causal\" must be a bool")));
}

TEST(EmbeddingPlanTest, AppendsTheRowDimensionToTheIndicesShape) {
  absl::StatusOr<OpPlan> plan = Plan("embedding", {Array(kF16, {100, 16}), Array(kI32, {2, 5})});
  ASSERT_THAT(plan, IsOk());
  EXPECT_THAT(plan->output.shape, ElementsAre(2, 5, 16));
  EXPECT_EQ(plan->output.dtype, kF16);
  EXPECT_THAT(Plan("embedding", {Array(kF16, {100, 16}), Array(kF32, {2})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("inputs[1] (indices) must be int32 or int64, got float32")));
  EXPECT_THAT(Plan("embedding", {Array(kF16, {100}), Array(kI64, {2})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("inputs[0] (table) must be [vocab, dim]")));
  EXPECT_THAT(Plan("embedding", {Array(kF16, {100, 4}), Array(kI64, {1, 1, 1, 1, 1, 1, 1, 1})}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most 8")));
}

TEST(ConcatPlanTest, SumsTheAxisAndPromotesDtypes) {
  absl::StatusOr<OpPlan> plan =
      Plan("concat", {Array(kI32, {2, 3}), Array(kF16, {2, 1}), Array(kI32, {2, 0})},
           {{"axis", int64_t{-1}}});
  ASSERT_THAT(plan, IsOk());
  EXPECT_THAT(plan->output.shape, ElementsAre(2, 4));
  EXPECT_EQ(plan->output.dtype, kF16);
  EXPECT_EQ(plan->params.axis, 1);
  plan = Plan("concat", {Array(kU8, {2}), Array(kU8, {3})});
  ASSERT_THAT(plan, IsOk());
  EXPECT_THAT(plan->output.shape, ElementsAre(5));
  EXPECT_THAT(
      Plan("concat", {Array(kF32, {2, 3}), Array(kF32, {3, 3})}, {{"axis", int64_t{1}}}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("inputs[1] [3, 3] does not match inputs[0] [2, 3] outside axis 1")));
  EXPECT_THAT(Plan("concat", {Array(kF32, {2, 3}), Array(kF32, {6})}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not match")));
  EXPECT_THAT(Plan("concat", {Array(kF32, {2})}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("takes 2 to 64 inputs")));
  EXPECT_THAT(Plan("concat", {Array(kF32, {}), Array(kF32, {})}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0-d")));
}

}  // namespace
}  // namespace gpukit
