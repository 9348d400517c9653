// The CPU reference kernels of the element-wise math, clamp, where, argmax, normalisation,
// rope, attention, embedding and concat ops (kernels/cpu/unary.cc, nn.cc, layout.cc):
// known values, NaN and infinity behaviour, and float16 / bfloat16 rounding.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/half.h"
#include "runtime/base/dtype.h"
#include "runtime/base/shape.h"

namespace gpukit::kernels {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr DType kFloatingDTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

// A host array of any dtype, filled from and read back as doubles through CastCpu (float
// values are rounded to the dtype once; integers are exact in the ranges used here).
class Array {
 public:
  Array(DType dtype, Shape shape)
      : dtype_(dtype),
        shape_(std::move(shape)),
        bytes_(static_cast<size_t>(ElementCount(shape_).value() * DTypeSize(dtype_)), 0xa5) {}
  Array(DType dtype, Shape shape, const std::vector<double>& values) : Array(dtype, shape) {
    EXPECT_EQ(static_cast<int64_t>(values.size()), count());
    if (IsFloating(dtype)) {
      std::vector<float> f(values.begin(), values.end());
      CastCpu({f.data(), DType::kFloat32, shape_}, {bytes_.data(), dtype_, shape_});
    } else {
      std::vector<int64_t> i(values.begin(), values.end());
      CastCpu({i.data(), DType::kInt64, shape_}, {bytes_.data(), dtype_, shape_});
    }
  }

  int64_t count() const { return ElementCount(shape_).value(); }
  ConstHostArray in() const { return {bytes_.data(), dtype_, shape_}; }
  HostArray out() { return {bytes_.data(), dtype_, shape_}; }

  std::vector<double> values() const {
    std::vector<double> result(static_cast<size_t>(count()));
    std::vector<float> f(result.size());
    std::vector<int64_t> i(result.size());
    if (IsFloating(dtype_)) {
      CastCpu(in(), {f.data(), DType::kFloat32, shape_});
      for (size_t k = 0; k < result.size(); ++k) result[k] = f[k];
    } else {
      CastCpu(in(), {i.data(), DType::kInt64, shape_});
      for (size_t k = 0; k < result.size(); ++k) result[k] = static_cast<double>(i[k]);
    }
    return result;
  }

 private:
  DType dtype_;
  Shape shape_;
  std::vector<uint8_t> bytes_;
};

// Expects `got` to equal `want` element for element within `rel` of |want| (+ `abs`),
// NaN matching NaN.
void ExpectNear(const std::vector<double>& got, const std::vector<double>& want, double rel,
                double abs = 0) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "element " << i << " = " << got[i];
    } else if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << "element " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], rel * std::fabs(want[i]) + abs) << "element " << i;
    }
  }
}

// The relative error of rounding to `dtype` once.
double Rounding(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return 1.0 / 2048;
    case DType::kBFloat16:
      return 1.0 / 256;
    default:
      return 1e-7;
  }
}

// ---- Unary ----

struct UnaryCase {
  UnaryOp op;
  std::string name;
  std::vector<double> in;
  std::vector<double> want;
};

class UnaryFloatTest : public ::testing::TestWithParam<std::tuple<UnaryCase, DType>> {};

TEST_P(UnaryFloatTest, MatchesKnownValuesRoundedOnceToTheDtype) {
  const auto& [c, dtype] = GetParam();
  const Shape shape = {static_cast<int64_t>(c.in.size())};
  const Array in(dtype, shape, c.in);
  Array out(dtype, shape);
  UnaryCpu(c.op, in.in(), out.out());
  // The inputs are exact in every dtype; the outputs are rounded once to it.
  ExpectNear(out.values(), c.want, Rounding(dtype));
}

const UnaryCase kUnaryCases[] = {
    {UnaryOp::kExp, "exp", {0, 1, -1, -kInf, kInf, kNan}, {1, M_E, 1 / M_E, 0, kInf, kNan}},
    {UnaryOp::kLog, "log", {1, 4, 0, -1, kInf}, {0, std::log(4.0), -kInf, kNan, kInf}},
    {UnaryOp::kSqrt, "sqrt", {0, 4, 2, -1, kInf}, {0, 2, M_SQRT2, kNan, kInf}},
    {UnaryOp::kRsqrt, "rsqrt", {4, 0.25, 0, -1}, {0.5, 2, kInf, kNan}},
    {UnaryOp::kAbs, "abs", {-1.5, 2, -0.0, -kInf, kNan}, {1.5, 2, 0, kInf, kNan}},
    {UnaryOp::kNeg, "neg", {-1.5, 2, kInf}, {1.5, -2, -kInf}},
    {UnaryOp::kRelu, "relu", {-1.5, 2, 0, -kInf, kInf, kNan}, {0, 2, 0, 0, kInf, kNan}},
    // Exact erf form: gelu(1) = 0.5 (1 + erf(1 / sqrt 2)) = 0.8413447460685429.
    {UnaryOp::kGelu,
     "gelu",
     {0, 1, -1, 2, kInf},
     {0, 0.8413447460685429, -0.15865525393145707, 1.9544997361036416, kInf}},
    {UnaryOp::kSilu, "silu", {0, 1, -1, kInf}, {0, 0.7310585786300049, -0.2689414213699951, kInf}},
    {UnaryOp::kSigmoid,
     "sigmoid",
     {0, 1, -kInf, kInf, kNan},
     {0.5, 0.7310585786300049, 0, 1, kNan}},
    {UnaryOp::kTanh, "tanh", {0, 0.5, -kInf, kInf}, {0, std::tanh(0.5), -1, 1}},
};

INSTANTIATE_TEST_SUITE_P(Ops, UnaryFloatTest,
                         ::testing::Combine(::testing::ValuesIn(kUnaryCases),
                                            ::testing::ValuesIn(kFloatingDTypes)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" +
                                  std::string(DTypeName(std::get<1>(info.param)));
                         });

TEST(UnaryCpuTest, GeluIsTheErfFormNotTheTanhApproximation) {
  // At x = 1 the tanh approximation gives 0.8411919906082768; erf gives 0.8413447460685429.
  const Array in(DType::kFloat32, {1}, {1.0});
  Array out(DType::kFloat32, {1});
  UnaryCpu(UnaryOp::kGelu, in.in(), out.out());
  EXPECT_NEAR(out.values()[0], 0.8413447460685429, 1e-7);
}

TEST(UnaryCpuTest, HalfResultsAreRoundedOnceToNearest) {
  // exp(1) = 2.71828...: float16 neighbours 2.716796875 and 2.71875, nearest 2.71875;
  // bfloat16 neighbours 2.703125 and 2.71875, nearest 2.71875.
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    const Array in(dtype, {1}, {1.0});
    Array out(dtype, {1});
    UnaryCpu(UnaryOp::kExp, in.in(), out.out());
    EXPECT_EQ(out.values()[0], 2.71875) << DTypeName(dtype);
  }
}

TEST(UnaryCpuTest, IntegerAbsNegReluKeepTheDtypeAndWrap) {
  const double min32 = -2147483648.0;
  {
    const Array in(DType::kInt32, {4}, {-5, 7, 0, min32});
    Array out(DType::kInt32, {4});
    UnaryCpu(UnaryOp::kAbs, in.in(), out.out());
    EXPECT_EQ(out.values(), (std::vector<double>{5, 7, 0, min32}));
    UnaryCpu(UnaryOp::kNeg, in.in(), out.out());
    EXPECT_EQ(out.values(), (std::vector<double>{5, -7, 0, min32}));
    UnaryCpu(UnaryOp::kRelu, in.in(), out.out());
    EXPECT_EQ(out.values(), (std::vector<double>{0, 7, 0, 0}));
  }
  const Array u8(DType::kUInt8, {3}, {0, 1, 200});
  Array out(DType::kUInt8, {3});
  UnaryCpu(UnaryOp::kNeg, u8.in(), out.out());
  EXPECT_EQ(out.values(), (std::vector<double>{0, 255, 56}));
  UnaryCpu(UnaryOp::kAbs, u8.in(), out.out());
  EXPECT_EQ(out.values(), (std::vector<double>{0, 1, 200}));
  const Array i64(DType::kInt64, {2}, {-3, 4});
  Array out64(DType::kInt64, {2});
  UnaryCpu(UnaryOp::kRelu, i64.in(), out64.out());
  EXPECT_EQ(out64.values(), (std::vector<double>{0, 4}));
}

// ---- Clamp ----

TEST(ClampCpuTest, FloatBoundsEitherOptionalAndNanStays) {
  for (DType dtype : kFloatingDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const Array in(dtype, {5}, {-2, -0.5, 0.5, 3, kNan});
    Array out(dtype, {5});
    const ClampBound lo{true, -1, 0}, hi{true, 1, 0};
    ClampCpu(in.in(), &lo, &hi, out.out());
    ExpectNear(out.values(), {-1, -0.5, 0.5, 1, kNan}, 0);
    ClampCpu(in.in(), &lo, nullptr, out.out());
    ExpectNear(out.values(), {-1, -0.5, 0.5, 3, kNan}, 0);
    ClampCpu(in.in(), nullptr, &hi, out.out());
    ExpectNear(out.values(), {-2, -0.5, 0.5, 1, kNan}, 0);
    ClampCpu(in.in(), nullptr, nullptr, out.out());
    ExpectNear(out.values(), {-2, -0.5, 0.5, 3, kNan}, 0);
  }
}

TEST(ClampCpuTest, MinAboveMaxGivesMaxEverywhere) {
  const Array in(DType::kFloat32, {3}, {-5, 0, 5});
  Array out(DType::kFloat32, {3});
  const ClampBound lo{true, 2, 0}, hi{true, 1, 0};
  ClampCpu(in.in(), &lo, &hi, out.out());
  EXPECT_EQ(out.values(), (std::vector<double>{1, 1, 1}));
}

TEST(ClampCpuTest, FloatBoundIsRoundedLikeTheOutput) {
  const Array in(DType::kFloat16, {1}, {0.0});
  Array out(DType::kFloat16, {1});
  const ClampBound lo{true, 0.1, 0};
  ClampCpu(in.in(), &lo, nullptr, out.out());
  EXPECT_EQ(out.values()[0], Float16::FromFloat(0.1f).ToFloat());
}

TEST(ClampCpuTest, IntegerBoundsCompareExactly) {
  const Array in(DType::kInt64, {3}, {-10, 5, 100});
  Array out(DType::kInt64, {3});
  const ClampBound lo{false, 0, -3}, hi{false, 0, 50};
  ClampCpu(in.in(), &lo, &hi, out.out());
  EXPECT_EQ(out.values(), (std::vector<double>{-3, 5, 50}));
  const Array u8(DType::kUInt8, {3}, {0, 100, 255});
  Array out8(DType::kUInt8, {3});
  const ClampBound lo8{false, 0, 10}, hi8{false, 0, 200};
  ClampCpu(u8.in(), &lo8, &hi8, out8.out());
  EXPECT_EQ(out8.values(), (std::vector<double>{10, 100, 200}));
}

// ---- Where ----

TEST(WhereCpuTest, BroadcastsAllThreeOperands) {
  const Array cond(DType::kUInt8, {2, 1}, {1, 0});
  const Array a(DType::kFloat32, {3}, {1, 2, 3});
  const Array b(DType::kFloat32, {1}, {-1});
  Array out(DType::kFloat32, {2, 3});
  WhereCpu(cond.in(), a.in(), b.in(), out.out());
  EXPECT_EQ(out.values(), (std::vector<double>{1, 2, 3, -1, -1, -1}));
}

TEST(WhereCpuTest, NonzeroIsTrueForEveryConditionDtype) {
  // NaN is nonzero (true); -0.0 is zero (false); 0.5 is true although it truncates to 0.
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const bool floating = IsFloating(dtype);
    const Array cond(dtype, {4},
                     {floating ? kNan : 3.0, floating ? -0.0 : 0.0, floating ? 0.5 : 1.0, 0});
    const Array a(DType::kInt32, {4}, {1, 2, 3, 4});
    const Array b(DType::kInt32, {4}, {-1, -2, -3, -4});
    Array out(DType::kInt32, {4});
    WhereCpu(cond.in(), a.in(), b.in(), out.out());
    EXPECT_EQ(out.values(), (std::vector<double>{1, -2, 3, -4}));
  }
}

// ---- Argmax ----

TEST(ArgmaxCpuTest, FirstIndexOfTheMaximumAlongAnAxisOrOverall) {
  const Array in(DType::kFloat32, {2, 3}, {1, 5, 5, 7, -1, 7});
  Array out(DType::kInt64, {});
  ArgmaxCpu(in.in(), std::nullopt, out.out());
  EXPECT_EQ(out.values(), std::vector<double>{3});
  Array rows(DType::kInt64, {2});
  ArgmaxCpu(in.in(), 1, rows.out());
  EXPECT_EQ(rows.values(), (std::vector<double>{1, 0}));
  Array cols(DType::kInt64, {3});
  ArgmaxCpu(in.in(), 0, cols.out());
  EXPECT_EQ(cols.values(), (std::vector<double>{1, 0, 1}));
}

TEST(ArgmaxCpuTest, NanCountsAsTheMaximumFirstNanWins) {
  for (DType dtype : kFloatingDTypes) {
    const Array in(dtype, {5}, {1, kInf, kNan, 2, kNan});
    Array out(DType::kInt64, {});
    ArgmaxCpu(in.in(), std::nullopt, out.out());
    EXPECT_EQ(out.values()[0], 2) << DTypeName(dtype);
  }
  const Array neg(DType::kFloat32, {3}, {-kInf, -kInf, -kInf});
  Array out(DType::kInt64, {});
  ArgmaxCpu(neg.in(), std::nullopt, out.out());
  EXPECT_EQ(out.values()[0], 0);
}

TEST(ArgmaxCpuTest, IntegersCompareExactly) {
  const Array in(DType::kUInt8, {4}, {3, 255, 0, 255});
  Array out(DType::kInt64, {});
  ArgmaxCpu(in.in(), std::nullopt, out.out());
  EXPECT_EQ(out.values()[0], 1);
}

// ---- Softmax, layernorm, rmsnorm ----

TEST(SoftmaxCpuTest, RowsSumToOneAndLargeValuesDoNotOverflow) {
  for (DType dtype : kFloatingDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const Array in(dtype, {2, 3}, {0, 0, 0, 1000, 1000, -kInf});
    Array out(dtype, {2, 3});
    SoftmaxCpu(in.in(), 1, out.out());
    ExpectNear(out.values(), {1.0 / 3, 1.0 / 3, 1.0 / 3, 0.5, 0.5, 0}, Rounding(dtype));
  }
}

TEST(SoftmaxCpuTest, AlongAnInnerAxisAndNanPoisonsOnlyItsLane) {
  const Array in(DType::kFloat32, {2, 2}, {0, kNan, std::log(3.0), 1});
  Array out(DType::kFloat32, {2, 2});
  SoftmaxCpu(in.in(), 0, out.out());
  ExpectNear(out.values(), {0.25, kNan, 0.75, kNan}, 1e-6);
}

TEST(LayerNormCpuTest, NormalisesEachRowThenScalesAndShifts) {
  for (DType dtype : kFloatingDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const Array x(dtype, {2, 4}, {1, 2, 3, 4, 2, 2, 2, 2});
    const Array w(dtype, {4}, {1, 2, 1, 1});
    const Array b(dtype, {4}, {0, 0, 0, 1});
    Array out(dtype, {2, 4});
    // Row 0: mean 2.5, variance 1.25.
    const double s = 1 / std::sqrt(1.25 + 1e-5);
    LayerNormCpu(x.in(), nullptr, nullptr, 1e-5, out.out());
    ExpectNear(out.values(), {-1.5 * s, -0.5 * s, 0.5 * s, 1.5 * s, 0, 0, 0, 0}, Rounding(dtype));
    const ConstHostArray wv = w.in(), bv = b.in();
    LayerNormCpu(x.in(), &wv, &bv, 1e-5, out.out());
    ExpectNear(out.values(), {-1.5 * s, -1.0 * s, 0.5 * s, 1.5 * s + 1, 0, 0, 0, 1},
               Rounding(dtype));
  }
}

TEST(RmsNormCpuTest, DividesByTheRootMeanSquare) {
  for (DType dtype : kFloatingDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const Array x(dtype, {1, 2}, {3, 4});
    const Array w(dtype, {2}, {1, 0.5});
    Array out(dtype, {1, 2});
    const double r = 1 / std::sqrt(12.5 + 1e-6);
    RmsNormCpu(x.in(), nullptr, 1e-6, out.out());
    ExpectNear(out.values(), {3 * r, 4 * r}, Rounding(dtype));
    const ConstHostArray wv = w.in();
    RmsNormCpu(x.in(), &wv, 1e-6, out.out());
    ExpectNear(out.values(), {3 * r, 2 * r}, Rounding(dtype));
  }
}

// ---- Rope ----

TEST(RopeCpuTest, RotatesTheHalvesByPositionTimesFrequency) {
  // dim 4: frequencies 1 and base^(-1/2) = 0.01. Row s is at position offset + s.
  const Array x(DType::kFloat32, {2, 4}, {1, 2, 3, 4, 1, 2, 3, 4});
  Array out(DType::kFloat32, {2, 4});
  RopeCpu(x.in(), 10000, 0, out.out());
  std::vector<double> want = {1, 2, 3, 4};  // position 0: unchanged
  for (double p : {1.0}) {
    const double t0 = p, t1 = p * 0.01;
    want.push_back(1 * std::cos(t0) - 3 * std::sin(t0));
    want.push_back(2 * std::cos(t1) - 4 * std::sin(t1));
    want.push_back(3 * std::cos(t0) + 1 * std::sin(t0));
    want.push_back(4 * std::cos(t1) + 2 * std::sin(t1));
  }
  ExpectNear(out.values(), want, 1e-6, 1e-7);
}

TEST(RopeCpuTest, OffsetShiftsThePositionsAndTheSequenceRepeatsPerBatch) {
  const Array x(DType::kFloat32, {2, 1, 2}, {1, 0, 1, 0});  // two batches of one row
  Array out(DType::kFloat32, {2, 1, 2});
  RopeCpu(x.in(), 10000, 3, out.out());
  ExpectNear(out.values(), {std::cos(3.0), std::sin(3.0), std::cos(3.0), std::sin(3.0)}, 1e-6,
             1e-7);
}

// ---- Attention ----

TEST(AttentionCpuTest, WeighsValuesBySoftmaxOfScaledScores) {
  // One head, one query, two keys: scores scale * (q . k) = {0, ln 3}.
  const Array q(DType::kFloat32, {1, 1, 1}, {std::log(3.0)});
  const Array k(DType::kFloat32, {1, 2, 1}, {0, 1});
  const Array v(DType::kFloat32, {1, 2, 2}, {4, 0, 0, 8});
  Array out(DType::kFloat32, {1, 1, 2});
  AttentionCpu(q.in(), k.in(), v.in(), false, 1.0, out.out());
  ExpectNear(out.values(), {1, 6}, 1e-6);
}

TEST(AttentionCpuTest, CausalMaskIsAlignedBottomRightAndBlindQueriesGetZeros) {
  // sq 3, sk 2: query i sees keys j <= i - 1, so query 0 sees none, query 1 key 0, query 2
  // both (equal scores).
  const Array q(DType::kFloat32, {1, 3, 1}, {0, 0, 0});
  const Array k(DType::kFloat32, {1, 2, 1}, {0, 0});
  const Array v(DType::kFloat32, {1, 2, 1}, {2, 4});
  Array out(DType::kFloat32, {1, 3, 1});
  AttentionCpu(q.in(), k.in(), v.in(), true, 1.0, out.out());
  EXPECT_EQ(out.values(), (std::vector<double>{0, 2, 3}));
  AttentionCpu(q.in(), k.in(), v.in(), false, 1.0, out.out());
  EXPECT_EQ(out.values(), (std::vector<double>{3, 3, 3}));
}

TEST(AttentionCpuTest, HalfInputsRoundOnce) {
  const Array q(DType::kBFloat16, {2, 1, 2}, {1, 0, 0, 1});
  const Array k(DType::kBFloat16, {2, 2, 2}, {1, 0, 0, 1, 1, 0, 0, 1});
  const Array v(DType::kBFloat16, {2, 2, 1}, {1, 0, 1, 0});
  Array out(DType::kBFloat16, {2, 1, 1});
  AttentionCpu(q.in(), k.in(), v.in(), false, 1.0, out.out());
  const double p = std::exp(1.0) / (std::exp(1.0) + 1);  // head 0 favours key 0
  ExpectNear(out.values(), {p, 1 - p}, Rounding(DType::kBFloat16));
}

// ---- Embedding, concat ----

TEST(EmbeddingCpuTest, GathersRowsAndZeroesOutOfRangeIndices) {
  const Array table(DType::kFloat16, {3, 2}, {1, 2, 3, 4, 5, 6});
  for (DType index_dtype : {DType::kInt32, DType::kInt64}) {
    SCOPED_TRACE(DTypeName(index_dtype));
    const Array indices(index_dtype, {2, 2}, {2, 0, -1, 3});
    Array out(DType::kFloat16, {2, 2, 2});
    EmbeddingCpu(table.in(), indices.in(), out.out());
    EXPECT_EQ(out.values(), (std::vector<double>{5, 6, 1, 2, 0, 0, 0, 0}));
  }
}

TEST(ConcatCpuTest, JoinsAlongAnyAxis) {
  const Array a(DType::kInt32, {2, 1}, {1, 2});
  const Array b(DType::kInt32, {2, 2}, {3, 4, 5, 6});
  Array cols(DType::kInt32, {2, 3});
  const ConstHostArray inputs[] = {a.in(), b.in()};
  ConcatCpu(inputs, 1, cols.out());
  EXPECT_EQ(cols.values(), (std::vector<double>{1, 3, 4, 2, 5, 6}));
  const Array c(DType::kInt32, {1, 2}, {7, 8});
  const Array empty(DType::kInt32, {0, 2});
  Array rows(DType::kInt32, {3, 2});
  const ConstHostArray row_inputs[] = {b.in(), empty.in(), c.in()};
  ConcatCpu(row_inputs, 0, rows.out());
  EXPECT_EQ(rows.values(), (std::vector<double>{3, 4, 5, 6, 7, 8}));
}

}  // namespace
}  // namespace gpukit::kernels
