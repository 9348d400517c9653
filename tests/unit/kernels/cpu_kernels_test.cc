#include "kernels/cpu/cpu_kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iomanip>
#include <limits>
#include <numeric>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/half.h"
#include "runtime/base/dtype.h"
#include "runtime/base/shape.h"

namespace gpukit {

// GoogleTest prints a failing test's parameters; without these it would dump the scoped enums
// as raw bytes. They must sit in the enums' own namespaces for GoogleTest to find them.
inline void PrintTo(DType dtype, std::ostream* os) { *os << DTypeName(dtype); }

namespace kernels {

void PrintTo(BinaryOp op, std::ostream* os) { *os << "BinaryOp(" << static_cast<int>(op) << ")"; }
void PrintTo(ReduceOp op, std::ostream* os) { *os << "ReduceOp(" << static_cast<int>(op) << ")"; }

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr DType kFloatingDTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
constexpr DType kIntegerDTypes[] = {DType::kInt32, DType::kInt64, DType::kUInt8};

int64_t CountOf(absl::Span<const int64_t> shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

// A host array that owns exactly its bytes (so AddressSanitizer sees any overrun) and is
// written and read as doubles, or as int64 where a double cannot hold the value. Writing a
// double rounds it to the dtype the way a test expects: to nearest for the floating types and
// by wrapping (through int64) for integers, so one table of values serves every dtype.
class TestArray {
 public:
  // The contents start as a 0xa5 pattern, so an element a kernel forgets to write shows up.
  TestArray(DType dtype, Shape shape)
      : dtype_(dtype),
        shape_(std::move(shape)),
        bytes_(static_cast<size_t>(CountOf(shape_) * DTypeSize(dtype_)), std::byte{0xa5}) {}

  TestArray(DType dtype, Shape shape, absl::Span<const double> values)
      : TestArray(dtype, std::move(shape)) {
    EXPECT_EQ(static_cast<int64_t>(values.size()), size())
        << "values for " << ShapeToString(shape_);
    for (size_t i = 0; i < values.size() && static_cast<int64_t>(i) < size(); ++i) {
      SetDouble(static_cast<int64_t>(i), values[i]);
    }
  }

  static TestArray FromInt64s(DType dtype, Shape shape, absl::Span<const int64_t> values) {
    TestArray array(dtype, std::move(shape));
    EXPECT_EQ(static_cast<int64_t>(values.size()), array.size());
    for (size_t i = 0; i < values.size(); ++i) array.SetInt64(static_cast<int64_t>(i), values[i]);
    return array;
  }

  ConstHostArray view() const { return {data(), dtype_, shape_}; }
  HostArray mutable_view() { return {data(), dtype_, shape_}; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t size() const { return CountOf(shape_); }

  void SetDouble(int64_t i, double value) {
    switch (dtype_) {
      case DType::kFloat32:
        return Put(i, static_cast<float>(value));
      case DType::kFloat16:
        return Put(i, Float16::FromFloat(static_cast<float>(value)));
      case DType::kBFloat16:
        return Put(i, BFloat16::FromFloat(static_cast<float>(value)));
      default:
        return SetInt64(i, static_cast<int64_t>(value));
    }
  }

  void SetInt64(int64_t i, int64_t value) {
    switch (dtype_) {
      case DType::kInt32:
        return Put(i, static_cast<int32_t>(value));
      case DType::kInt64:
        return Put(i, value);
      case DType::kUInt8:
        return Put(i, static_cast<uint8_t>(value));
      default:
        return SetDouble(i, static_cast<double>(value));
    }
  }

  double GetDouble(int64_t i) const {
    switch (dtype_) {
      case DType::kFloat32:
        return Get<float>(i);
      case DType::kFloat16:
        return Get<Float16>(i).ToFloat();
      case DType::kBFloat16:
        return Get<BFloat16>(i).ToFloat();
      default:
        return static_cast<double>(GetInt64(i));
    }
  }

  int64_t GetInt64(int64_t i) const {
    switch (dtype_) {
      case DType::kInt32:
        return Get<int32_t>(i);
      case DType::kInt64:
        return Get<int64_t>(i);
      case DType::kUInt8:
        return Get<uint8_t>(i);
      default:
        ADD_FAILURE() << "GetInt64 on " << DTypeName(dtype_);
        return 0;
    }
  }

  std::vector<double> ToDoubles() const {
    std::vector<double> values(static_cast<size_t>(size()));
    for (int64_t i = 0; i < size(); ++i) values[i] = GetDouble(i);
    return values;
  }

 private:
  // Arrays with no elements pass a null pointer, as an empty device allocation may.
  void* data() { return bytes_.empty() ? nullptr : bytes_.data(); }
  const void* data() const { return bytes_.empty() ? nullptr : bytes_.data(); }

  template <typename T>
  void Put(int64_t i, T value) {
    ASSERT_EQ(sizeof(T), static_cast<size_t>(DTypeSize(dtype_)));
    std::memcpy(bytes_.data() + i * sizeof(T), &value, sizeof(T));
  }

  template <typename T>
  T Get(int64_t i) const {
    T value;
    std::memcpy(&value, bytes_.data() + i * sizeof(T), sizeof(T));
    return value;
  }

  DType dtype_;
  Shape shape_;
  std::vector<std::byte> bytes_;
};

// `values` as the dtype stores them (rounded or wrapped), for expectations.
std::vector<double> AsStored(DType dtype, std::vector<double> values) {
  const int64_t count = static_cast<int64_t>(values.size());
  return TestArray(dtype, {count}, values).ToDoubles();
}

bool SameValue(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// Exact comparison, NaN equal to NaN; names the first few mismatching elements.
void ExpectValues(const TestArray& actual, absl::Span<const double> expected) {
  ASSERT_EQ(actual.size(), static_cast<int64_t>(expected.size()))
      << "output " << ShapeToString(actual.shape());
  int mismatches = 0;
  for (int64_t i = 0; i < actual.size() && mismatches < 8; ++i) {
    const double got = actual.GetDouble(i);
    if (!SameValue(got, expected[i])) {
      ++mismatches;
      ADD_FAILURE() << DTypeName(actual.dtype()) << " element " << i << ": got "
                    << std::setprecision(17) << got << ", want " << expected[i];
    }
  }
}

std::string DTypeParamName(const testing::TestParamInfo<DType>& info) {
  return std::string(DTypeName(info.param));
}

// "<case name>_<dtype>" for a table of cases crossed with dtypes.
template <typename Case>
std::string CaseAndDTypeName(const testing::TestParamInfo<std::tuple<Case, DType>>& info) {
  return absl::StrCat(std::get<0>(info.param).name, "_", DTypeName(std::get<1>(info.param)));
}

// ---- Index arithmetic for the references (deliberately independent of the kernels') ----

std::vector<int64_t> Unravel(int64_t flat, absl::Span<const int64_t> shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

int64_t Ravel(absl::Span<const int64_t> index, absl::Span<const int64_t> shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
  return flat;
}

// The flat element of an array of `in_shape` that broadcasting reads for `out_index`.
int64_t BroadcastSource(absl::Span<const int64_t> out_index, absl::Span<const int64_t> in_shape) {
  const size_t offset = out_index.size() - in_shape.size();
  std::vector<int64_t> in_index(in_shape.size());
  for (size_t d = 0; d < in_shape.size(); ++d) {
    in_index[d] = in_shape[d] == 1 ? 0 : out_index[offset + d];
  }
  return Ravel(in_index, in_shape);
}

// ---- Random inputs ----

class Rng {
 public:
  Rng() : seed_(std::random_device{}()), engine_(seed_) {}
  uint32_t seed() const { return seed_; }
  std::mt19937_64& engine() { return engine_; }

  int64_t Int(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(engine_);
  }
  double Real(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(engine_);
  }
  bool OneIn(int n) { return Int(0, n - 1) == 0; }

  // Fills `array` with values that have no special structure: uniform in [-limit, limit] for
  // floating types (nonzero when asked); for integers, over a range small enough that sums and
  // products of a few of them are exact in double (uint8: all of it).
  void Fill(TestArray& array, double float_limit, bool nonzero = false) {
    for (int64_t i = 0; i < array.size(); ++i) {
      switch (array.dtype()) {
        case DType::kUInt8:
          array.SetInt64(i, Int(nonzero ? 1 : 0, 255));
          break;
        case DType::kInt32:
          array.SetInt64(i, Int(-(1 << 20), 1 << 20));
          break;
        case DType::kInt64:
          array.SetInt64(i, Int(-(int64_t{1} << 24), int64_t{1} << 24));
          break;
        default:
          do {
            array.SetDouble(i, Real(-float_limit, float_limit));
          } while (nonzero && array.GetDouble(i) == 0);
      }
    }
  }

  // Extents 1..4, occasionally 0.
  Shape RandomShape(int rank) {
    Shape shape(static_cast<size_t>(rank));
    for (int64_t& extent : shape) extent = OneIn(25) ? 0 : Int(1, 4);
    return shape;
  }

  // A suffix of `shape` with some extents replaced by 1: broadcastable to `shape`.
  Shape BroadcastableTo(const Shape& shape) {
    const int rank = static_cast<int>(Int(0, static_cast<int64_t>(shape.size())));
    Shape result(shape.end() - rank, shape.end());
    for (int64_t& extent : result) {
      if (OneIn(3)) extent = 1;
    }
    return result;
  }

 private:
  uint32_t seed_;
  std::mt19937_64 engine_;
};

// ================================== BinaryCpu ==================================

struct BinaryCase {
  std::string name;
  BinaryOp op;
  Shape a_shape;
  std::vector<double> a;
  Shape b_shape;
  std::vector<double> b;
  Shape out_shape;
  std::vector<double> expected;
};

void PrintTo(const BinaryCase& c, std::ostream* os) { *os << c.name; }

// Small non-negative integers: exact in every dtype, uint8 and bfloat16 included.
// clang-format off
const BinaryCase kBinaryCases[] = {
    // name, op, a shape, a, b shape, b, out shape, expected
    {"AddsArraysOfSameShape", BinaryOp::kAdd,
     {2, 3}, {1, 2, 3, 4, 5, 6}, {2, 3}, {10, 20, 30, 40, 50, 60},
     {2, 3}, {11, 22, 33, 44, 55, 66}},
    {"SubtractsArraysOfSameShape", BinaryOp::kSub,
     {3}, {9, 8, 7}, {3}, {1, 2, 3}, {3}, {8, 6, 4}},
    {"MultipliesArraysOfSameShape", BinaryOp::kMul,
     {2, 2}, {1, 2, 3, 4}, {2, 2}, {5, 6, 7, 8}, {2, 2}, {5, 12, 21, 32}},
    {"BroadcastsRowVectorOverMatrix", BinaryOp::kAdd,
     {2, 3}, {1, 2, 3, 4, 5, 6}, {3}, {10, 20, 30}, {2, 3}, {11, 22, 33, 14, 25, 36}},
    {"BroadcastsColumnVectorOverMatrix", BinaryOp::kMul,
     {2, 3}, {1, 2, 3, 4, 5, 6}, {2, 1}, {2, 3}, {2, 3}, {2, 4, 6, 12, 15, 18}},
    {"BroadcastsZeroDimScalarOnTheLeft", BinaryOp::kSub,
     {}, {100}, {2, 2}, {1, 2, 3, 4}, {2, 2}, {99, 98, 97, 96}},
    {"BroadcastsOneElementArrayOnTheRight", BinaryOp::kMul,
     {3}, {2, 4, 6}, {1, 1}, {3}, {1, 3}, {6, 12, 18}},
    {"BroadcastsBothOperands", BinaryOp::kAdd,
     {2, 1, 3}, {1, 2, 3, 4, 5, 6}, {4, 1}, {10, 20, 30, 40}, {2, 4, 3},
     {11, 12, 13, 21, 22, 23, 31, 32, 33, 41, 42, 43,
      14, 15, 16, 24, 25, 26, 34, 35, 36, 44, 45, 46}},
    {"BroadcastsMiddleDimension", BinaryOp::kSub,
     {2, 3, 2}, {10, 11, 12, 13, 14, 15, 20, 21, 22, 23, 24, 25}, {2, 1, 2}, {1, 2, 3, 4},
     {2, 3, 2}, {9, 9, 11, 11, 13, 13, 17, 17, 19, 19, 21, 21}},
    {"BroadcastsOverLeadingOnes", BinaryOp::kAdd,
     {1, 1, 3}, {1, 2, 3}, {2, 1, 1}, {10, 20}, {2, 1, 3}, {11, 12, 13, 21, 22, 23}},
    {"AddsZeroDimArrays", BinaryOp::kAdd, {}, {3}, {}, {4}, {}, {7}},
    {"HandlesSizeZeroDimension", BinaryOp::kAdd, {0, 3}, {}, {3}, {1, 2, 3}, {0, 3}, {}},
    {"BroadcastsSizeZeroAgainstOne", BinaryOp::kMul, {2, 0}, {}, {2, 1}, {1, 2}, {2, 0}, {}},
};
// clang-format on

class BinaryHandComputedTest : public testing::TestWithParam<std::tuple<BinaryCase, DType>> {};

TEST_P(BinaryHandComputedTest, MatchesHandComputedValues) {
  const auto& [c, dtype] = GetParam();
  const TestArray a(dtype, c.a_shape, c.a), b(dtype, c.b_shape, c.b);
  TestArray out(dtype, c.out_shape);
  BinaryCpu(c.op, a.view(), b.view(), out.mutable_view());
  ExpectValues(out, c.expected);
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, BinaryHandComputedTest,
                         testing::Combine(testing::ValuesIn(kBinaryCases),
                                          testing::ValuesIn(kAllDTypes)),
                         CaseAndDTypeName<BinaryCase>);

class BinaryFloatingTest : public testing::TestWithParam<DType> {};

TEST_P(BinaryFloatingTest, DividesElementwise) {
  const TestArray a(GetParam(), {4}, {1, 3, -6, 0.5}), b(GetParam(), {4}, {2, 4, 8, -0.25});
  TestArray out(GetParam(), {4});
  BinaryCpu(BinaryOp::kDiv, a.view(), b.view(), out.mutable_view());
  ExpectValues(out, {0.5, 0.75, -0.75, -2});
}

TEST_P(BinaryFloatingTest, DivisionByZeroFollowsIeee) {
  const TestArray a(GetParam(), {3}, {1, -1, 0}), b(GetParam(), {}, {0});
  TestArray out(GetParam(), {3});
  BinaryCpu(BinaryOp::kDiv, a.view(), b.view(), out.mutable_view());
  ExpectValues(out, {kInf, -kInf, kNan});
}

TEST_P(BinaryFloatingTest, PropagatesNanAndInfinity) {
  const TestArray a(GetParam(), {3}, {kNan, kInf, kInf}), b(GetParam(), {3}, {1, 1, -kInf});
  TestArray out(GetParam(), {3});
  BinaryCpu(BinaryOp::kAdd, a.view(), b.view(), out.mutable_view());
  ExpectValues(out, {kNan, kInf, kNan});
}

INSTANTIATE_TEST_SUITE_P(FloatingDTypes, BinaryFloatingTest, testing::ValuesIn(kFloatingDTypes),
                         DTypeParamName);

TEST(BinaryCpuTest, Float16ResultRoundsToNearestEven) {
  // Above 2048 float16 steps by 2: 2049 is a tie that goes down to the even 2048, 2051 one
  // that goes up to 2052.
  const TestArray a(DType::kFloat16, {2}, {2048, 2048}), b(DType::kFloat16, {2}, {1, 3});
  TestArray out(DType::kFloat16, {2});
  BinaryCpu(BinaryOp::kAdd, a.view(), b.view(), out.mutable_view());
  ExpectValues(out, {2048, 2052});
}

TEST(BinaryCpuTest, BFloat16ResultRoundsToNearestEven) {
  const TestArray a(DType::kBFloat16, {2}, {256, 256}), b(DType::kBFloat16, {2}, {1, 3});
  TestArray out(DType::kBFloat16, {2});
  BinaryCpu(BinaryOp::kAdd, a.view(), b.view(), out.mutable_view());
  ExpectValues(out, {256, 260});
}

TEST(BinaryCpuTest, Float16OverflowsToInfinity) {
  const TestArray a(DType::kFloat16, {2}, {60000, -60000}), b(DType::kFloat16, {}, {2});
  TestArray out(DType::kFloat16, {2});
  BinaryCpu(BinaryOp::kMul, a.view(), b.view(), out.mutable_view());
  ExpectValues(out, {kInf, -kInf});
}

struct WrapCase {
  std::string name;
  DType dtype;
  BinaryOp op;
  int64_t a, b, expected;
};

void PrintTo(const WrapCase& c, std::ostream* os) { *os << c.name; }

class BinaryIntegerWrapTest : public testing::TestWithParam<WrapCase> {};

TEST_P(BinaryIntegerWrapTest, WrapsModuloTwoToTheBits) {
  const WrapCase& c = GetParam();
  const TestArray a = TestArray::FromInt64s(c.dtype, {1}, {c.a});
  const TestArray b = TestArray::FromInt64s(c.dtype, {1}, {c.b});
  TestArray out(c.dtype, {1});
  BinaryCpu(c.op, a.view(), b.view(), out.mutable_view());
  EXPECT_EQ(out.GetInt64(0), c.expected);
}

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();

INSTANTIATE_TEST_SUITE_P(
    HandComputed, BinaryIntegerWrapTest,
    testing::Values(
        WrapCase{"UInt8AddPast255", DType::kUInt8, BinaryOp::kAdd, 250, 10, 4},
        WrapCase{"UInt8SubBelowZero", DType::kUInt8, BinaryOp::kSub, 3, 5, 254},
        WrapCase{"UInt8MulTo256", DType::kUInt8, BinaryOp::kMul, 16, 16, 0},
        WrapCase{"UInt8MulLarge", DType::kUInt8, BinaryOp::kMul, 255, 255, 1},
        WrapCase{"Int32AddPastMax", DType::kInt32, BinaryOp::kAdd, kInt32Max, 1, kInt32Min},
        WrapCase{"Int32SubPastMin", DType::kInt32, BinaryOp::kSub, kInt32Min, 1, kInt32Max},
        WrapCase{"Int32MulTo2To32", DType::kInt32, BinaryOp::kMul, 65536, 65536, 0},
        WrapCase{"Int32MulMinByMinusOne", DType::kInt32, BinaryOp::kMul, kInt32Min, -1, kInt32Min},
        WrapCase{"Int64AddPastMax", DType::kInt64, BinaryOp::kAdd, kInt64Max, 1, kInt64Min},
        WrapCase{"Int64SubPastMin", DType::kInt64, BinaryOp::kSub, kInt64Min, 1, kInt64Max},
        WrapCase{"Int64MulTo2To64", DType::kInt64, BinaryOp::kMul, int64_t{1} << 32,
                 int64_t{1} << 32, 0},
        WrapCase{"Int64MulMinByMinusOne", DType::kInt64, BinaryOp::kMul, kInt64Min, -1, kInt64Min}),
    [](const testing::TestParamInfo<WrapCase>& info) { return info.param.name; });

TEST(BinaryCpuTest, IntegerDivisionIsDefinedAsFloorDivision) {
  // The registry never sends integer division (cpu_kernels.h), but a misuse must not be
  // undefined behaviour: the kernel does NumPy's floor_divide, with x // 0 == 0.
  const TestArray a = TestArray::FromInt64s(DType::kInt32, {5}, {7, -7, 7, kInt32Min, 5});
  const TestArray b = TestArray::FromInt64s(DType::kInt32, {5}, {2, 2, -2, -1, 0});
  TestArray out(DType::kInt32, {5});
  BinaryCpu(BinaryOp::kDiv, a.view(), b.view(), out.mutable_view());
  ExpectValues(out, {3, -4, -4, static_cast<double>(kInt32Min), 0});
}

class BinaryRandomTest : public testing::TestWithParam<std::tuple<BinaryOp, DType>> {};

double ApplyInDouble(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::kAdd:
      return a + b;
    case BinaryOp::kSub:
      return a - b;
    case BinaryOp::kMul:
      return a * b;
    case BinaryOp::kDiv:
      return a / b;
  }
  return kNan;
}

// The float64 reference rounded once to the dtype equals the kernel's float computation
// exactly: for +, -, *, / a result rounded to double and then to a format of at most half
// double's precision (float: 24 <= 53/2 - 1 bits) is rounded correctly, and so is a float
// result rounded again to float16 or bfloat16. Integer operands are small enough that the
// double result is exact and only the wrap-around to the dtype remains.
TEST_P(BinaryRandomTest, MatchesFloat64ReferenceWithBroadcasting) {
  const auto [op, dtype] = GetParam();
  Rng rng;
  SCOPED_TRACE(testing::Message() << "seed " << rng.seed());
  for (int trial = 0; trial < 200; ++trial) {
    const Shape full = rng.RandomShape(static_cast<int>(rng.Int(0, 4)));
    const Shape a_shape = rng.BroadcastableTo(full), b_shape = rng.BroadcastableTo(full);
    const Shape out_shape = *BroadcastShapes(a_shape, b_shape);
    SCOPED_TRACE(absl::StrCat(ShapeToString(a_shape), " op ", ShapeToString(b_shape)));
    TestArray a(dtype, a_shape), b(dtype, b_shape), out(dtype, out_shape);
    rng.Fill(a, 10);
    rng.Fill(b, 10, /*nonzero=*/op == BinaryOp::kDiv);
    BinaryCpu(op, a.view(), b.view(), out.mutable_view());

    std::vector<double> expected(static_cast<size_t>(out.size()));
    for (int64_t i = 0; i < out.size(); ++i) {
      const std::vector<int64_t> index = Unravel(i, out_shape);
      expected[i] = ApplyInDouble(op, a.GetDouble(BroadcastSource(index, a_shape)),
                                  b.GetDouble(BroadcastSource(index, b_shape)));
    }
    ExpectValues(out, AsStored(dtype, expected));
    if (HasFailure()) return;
  }
}

std::vector<std::tuple<BinaryOp, DType>> BinaryRandomParams() {
  std::vector<std::tuple<BinaryOp, DType>> params;
  for (DType dtype : kAllDTypes) {
    for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv}) {
      if (op == BinaryOp::kDiv && !IsFloating(dtype)) continue;  // not a kernel case
      params.emplace_back(op, dtype);
    }
  }
  return params;
}

std::string BinaryOpName(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "Add";
    case BinaryOp::kSub:
      return "Sub";
    case BinaryOp::kMul:
      return "Mul";
    case BinaryOp::kDiv:
      return "Div";
  }
  return "Unknown";
}

INSTANTIATE_TEST_SUITE_P(Seeded, BinaryRandomTest, testing::ValuesIn(BinaryRandomParams()),
                         [](const testing::TestParamInfo<std::tuple<BinaryOp, DType>>& info) {
                           return absl::StrCat(BinaryOpName(std::get<0>(info.param)), "_",
                                               DTypeName(std::get<1>(info.param)));
                         });

// =================================== CastCpu ===================================

struct CastCase {
  std::string name;
  DType from;
  std::vector<double> in;
  DType to;
  std::vector<double> expected;
};

void PrintTo(const CastCase& c, std::ostream* os) { *os << c.name; }

// clang-format off
const CastCase kCastCases[] = {
    {"Float32ToInt32TruncatesTowardZero",
     DType::kFloat32, {1.9, -1.9, 0.5, -0.5, 2, -7.99},
     DType::kInt32, {1, -1, 0, 0, 2, -7}},
    {"Float32ToInt32Saturates",
     DType::kFloat32, {3e9, -3e9, kInf, -kInf, 2147483520, -2147483648.0, 2147483648.0},
     DType::kInt32, {2147483647, -2147483648.0, 2147483647, -2147483648.0, 2147483520,
                     -2147483648.0, 2147483647}},
    {"Float32NanToInt32IsZero", DType::kFloat32, {kNan, -kNan}, DType::kInt32, {0, 0}},
    {"Float32NanToUInt8IsZero", DType::kFloat32, {kNan}, DType::kUInt8, {0}},
    {"Float32NanToInt64IsZero", DType::kFloat32, {kNan}, DType::kInt64, {0}},
    {"Float32ToUInt8TruncatesAndSaturates",
     DType::kFloat32, {-1, -0.9, 0.9, 254.5, 255.9, 256, 1e10, -kInf},
     DType::kUInt8, {0, 0, 0, 254, 255, 255, 255, 0}},
    {"Float32ToInt64Truncates",
     DType::kFloat32, {-1.5, 1e18}, DType::kInt64, {-1, 999999984306749440.0}},
    {"Float16ToUInt8Saturates",
     DType::kFloat16, {65504, -65504, 3.75}, DType::kUInt8, {255, 0, 3}},
    {"Float16ToInt64Truncates",
     DType::kFloat16, {-65504, 1.5, -kInf}, DType::kInt64, {-65504, 1, -9223372036854775808.0}},
    {"BFloat16ToInt32Saturates",
     DType::kBFloat16, {kInf, 1e10, -1e10, -3.5},
     DType::kInt32, {2147483647, 2147483647, -2147483648.0, -3}},
    {"Int64ToUInt8Wraps",
     DType::kInt64, {300, -1, 1099511627781.0, -129, 256}, DType::kUInt8, {44, 255, 5, 127, 0}},
    {"Int64ToInt32Wraps",
     DType::kInt64, {2147483648.0, 4294967303.0, -2147483649.0},
     DType::kInt32, {-2147483648.0, 7, 2147483647}},
    {"Int32ToUInt8Wraps", DType::kInt32, {-1, 256, 511}, DType::kUInt8, {255, 0, 255}},
    {"Int32ToInt64SignExtends",
     DType::kInt32, {-1, -2147483648.0}, DType::kInt64, {-1, -2147483648.0}},
    {"UInt8ToInt32ZeroExtends", DType::kUInt8, {255, 128}, DType::kInt32, {255, 128}},
    {"UInt8ToInt64ZeroExtends", DType::kUInt8, {255}, DType::kInt64, {255}},
    {"Float32ToFloat16RoundsToNearestEven",
     DType::kFloat32, {65520, 65519, 1 + 0x1p-11, 1 + 3 * 0x1p-11, 0x1p-25, 3 * 0x1p-25, -1e-10},
     DType::kFloat16, {kInf, 65504, 1, 1 + 0x1p-9, 0, 0x1p-23, -0.0}},
    {"Float32ToBFloat16RoundsToNearestEven",
     DType::kFloat32, {257, 259, 1 + 0x1p-8, 3.4e38}, DType::kBFloat16, {256, 260, 1, kInf}},
    {"Int32ToFloat16RoundsToNearestEven",
     DType::kInt32, {2049, 2051, 65519, 65520, -70000},
     DType::kFloat16, {2048, 2052, 65504, kInf, -kInf}},
    {"Int32ToBFloat16RoundsToNearestEven",
     DType::kInt32, {257, 259, 16777217}, DType::kBFloat16, {256, 260, 16777216}},
    {"Int32ToFloat32RoundsToNearestEven",
     DType::kInt32, {16777217, 16777219}, DType::kFloat32, {16777216, 16777220}},
    {"UInt8ToBFloat16IsExact", DType::kUInt8, {255, 129}, DType::kBFloat16, {255, 129}},
    {"BFloat16ToFloat16RoundsAndOverflows",
     DType::kBFloat16, {99840, 0x1p-20, 0x1p-30, 1.5}, DType::kFloat16, {kInf, 0x1p-20, 0, 1.5}},
    {"Float16ToBFloat16Rounds",
     DType::kFloat16, {1025, 1 + 0x1p-10, -0.0}, DType::kBFloat16, {1024, 1, -0.0}},
    {"Float16ToFloat32IsExact",
     DType::kFloat16, {0x1p-24, 65504, -kInf}, DType::kFloat32, {0x1p-24, 65504, -kInf}},
    {"NanStaysNanFromFloat32ToFloat16", DType::kFloat32, {kNan}, DType::kFloat16, {kNan}},
    {"NanStaysNanFromFloat16ToBFloat16", DType::kFloat16, {kNan}, DType::kBFloat16, {kNan}},
    {"NanStaysNanFromBFloat16ToFloat32", DType::kBFloat16, {kNan}, DType::kFloat32, {kNan}},
};
// clang-format on

class CastHandComputedTest : public testing::TestWithParam<CastCase> {};

TEST_P(CastHandComputedTest, MatchesHandComputedValues) {
  const CastCase& c = GetParam();
  const int64_t count = static_cast<int64_t>(c.in.size());
  const TestArray in(c.from, {count}, c.in);
  TestArray out(c.to, {count});
  CastCpu(in.view(), out.mutable_view());
  ExpectValues(out, c.expected);
  // -0.0 == 0.0, so check signs separately where it matters.
  for (int64_t i = 0; i < count; ++i) {
    if (c.expected[i] == 0 && IsFloating(c.to)) {
      EXPECT_EQ(std::signbit(out.GetDouble(i)), std::signbit(c.expected[i])) << "element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HandComputed, CastHandComputedTest, testing::ValuesIn(kCastCases),
                         [](const testing::TestParamInfo<CastCase>& info) {
                           return info.param.name;
                         });

class CastAllPairsTest : public testing::TestWithParam<std::tuple<DType, DType>> {};

TEST_P(CastAllPairsTest, KeepsValuesEveryDTypeHolds) {
  const auto [from, to] = GetParam();
  const std::vector<double> values = {0, 1, 2, 7, 100, 255};
  const TestArray in(from, {2, 3}, values);
  TestArray out(to, {2, 3});
  CastCpu(in.view(), out.mutable_view());
  ExpectValues(out, values);
}

TEST_P(CastAllPairsTest, HandlesEmptyArray) {
  const auto [from, to] = GetParam();
  const TestArray in(from, {0, 4});
  TestArray out(to, {0, 4});
  CastCpu(in.view(), out.mutable_view());  // null data, nothing to touch
  EXPECT_EQ(out.size(), 0);
}

INSTANTIATE_TEST_SUITE_P(AllPairs, CastAllPairsTest,
                         testing::Combine(testing::ValuesIn(kAllDTypes),
                                          testing::ValuesIn(kAllDTypes)),
                         [](const testing::TestParamInfo<std::tuple<DType, DType>>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_to_",
                                               DTypeName(std::get<1>(info.param)));
                         });

TEST(CastCpuTest, Float32ToInt64SaturatesAtInt64Range) {
  const TestArray in(DType::kFloat32, {7}, {1e19, -1e19, 0x1p63, -0x1p63, kInf, -kInf, kNan});
  TestArray out(DType::kInt64, {7});
  CastCpu(in.view(), out.mutable_view());
  const int64_t expected[] = {kInt64Max, kInt64Min, kInt64Max, kInt64Min, kInt64Max, kInt64Min, 0};
  for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(out.GetInt64(i), expected[i]) << "element " << i;
}

TEST(CastCpuTest, Int64ToInt32OfMinimumWrapsToZero) {
  const TestArray in = TestArray::FromInt64s(DType::kInt64, {2}, {kInt64Min, kInt64Max});
  TestArray out(DType::kInt32, {2});
  CastCpu(in.view(), out.mutable_view());
  EXPECT_EQ(out.GetInt64(0), 0);
  EXPECT_EQ(out.GetInt64(1), -1);
}

// int64 has more significant bits than double, so going through double would round twice:
// 2^62 + 2^38 + 1 would become the tie 2^62 + 2^38 in double and then the even 2^62 in float.
TEST(CastCpuTest, Int64ToFloat32RoundsOnceToNearestEven) {
  const int64_t p62 = int64_t{1} << 62, p38 = int64_t{1} << 38;
  const TestArray in = TestArray::FromInt64s(
      DType::kInt64, {6},
      {p62 + p38 + 1, p62 + p38, p62 + 3 * p38, -(p62 + p38 + 1), kInt64Max, kInt64Min});
  TestArray out(DType::kFloat32, {6});
  CastCpu(in.view(), out.mutable_view());
  ExpectValues(out,
               {0x1p62 + 0x1p39, 0x1p62, 0x1p62 + 0x1p40, -(0x1p62 + 0x1p39), 0x1p63, -0x1p63});
}

TEST(CastCpuTest, Int64ToBFloat16RoundsOnceToNearestEven) {
  const int64_t p62 = int64_t{1} << 62, p54 = int64_t{1} << 54;
  const TestArray in =
      TestArray::FromInt64s(DType::kInt64, {3}, {p62 + p54 + 1, p62 + p54, -(p62 + p54 + 1)});
  TestArray out(DType::kBFloat16, {3});
  CastCpu(in.view(), out.mutable_view());
  ExpectValues(out, {0x1p62 + 0x1p55, 0x1p62, -(0x1p62 + 0x1p55)});
}

TEST(CastCpuTest, Int64ToFloat16RoundsOnceAndOverflows) {
  const TestArray in =
      TestArray::FromInt64s(DType::kInt64, {4}, {(int64_t{1} << 40) + 1, 65519, -65520, 2051});
  TestArray out(DType::kFloat16, {4});
  CastCpu(in.view(), out.mutable_view());
  ExpectValues(out, {kInf, 65504, -kInf, 2052});
}

TEST(CastCpuTest, SameDTypeCopiesBitsExactly) {
  // A NaN with a payload survives a float32 -> float32 cast bit for bit.
  const float payload_nan = std::bit_cast<float>(0x7fa00001u);
  TestArray in(DType::kFloat32, {2}, {1.5, 0});
  std::memcpy(static_cast<std::byte*>(in.mutable_view().data) + 4, &payload_nan, 4);
  TestArray out(DType::kFloat32, {2});
  CastCpu(in.view(), out.mutable_view());
  uint32_t bits;
  std::memcpy(&bits, static_cast<const std::byte*>(out.view().data) + 4, 4);
  EXPECT_EQ(bits, 0x7fa00001u);
  EXPECT_EQ(out.GetDouble(0), 1.5);
}

// Reference: round an integer to `digits` significant bits, nearest-even, in integer
// arithmetic, then to infinity past `largest`.
double RoundIntegerReference(int64_t value, int digits, double largest) {
  const bool negative = value < 0;
  const uint64_t magnitude =
      negative ? uint64_t{0} - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
  double rounded = static_cast<double>(magnitude);
  const int width = std::bit_width(magnitude);
  if (width > digits) {
    const int shift = width - digits;
    uint64_t kept = magnitude >> shift;
    const uint64_t dropped = magnitude & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    if (dropped > half || (dropped == half && (kept & 1))) ++kept;
    rounded = std::ldexp(static_cast<double>(kept), shift);
  }
  if (rounded > largest) rounded = kInf;
  return negative ? -rounded : rounded;
}

class CastRandomTest : public testing::TestWithParam<DType> {};

TEST_P(CastRandomTest, Int64ToFloatingMatchesIntegerRoundingReference) {
  const DType to = GetParam();
  const int digits = to == DType::kFloat32 ? 24 : to == DType::kFloat16 ? 11 : 8;
  const double largest = to == DType::kFloat16 ? 65504 : std::numeric_limits<float>::max();
  Rng rng;
  SCOPED_TRACE(testing::Message() << "seed " << rng.seed());
  constexpr int64_t kCount = 20000;
  std::vector<int64_t> values(kCount);
  for (int64_t& value : values) {
    // Every bit width equally likely, so that rounding happens at every position.
    const int width = static_cast<int>(rng.Int(1, 63));
    const int64_t high = width == 63 ? kInt64Max : (int64_t{1} << width) - 1;
    value = rng.Int(int64_t{1} << (width - 1), high);
    if (rng.OneIn(2)) value = -value;
  }
  const TestArray in = TestArray::FromInt64s(DType::kInt64, {kCount}, values);
  TestArray out(to, {kCount});
  CastCpu(in.view(), out.mutable_view());
  std::vector<double> expected(kCount);
  for (int64_t i = 0; i < kCount; ++i) {
    expected[i] = RoundIntegerReference(values[i], digits, largest);
  }
  ExpectValues(out, expected);
}

INSTANTIATE_TEST_SUITE_P(Seeded, CastRandomTest, testing::ValuesIn(kFloatingDTypes),
                         DTypeParamName);

class CastFloatToIntRandomTest : public testing::TestWithParam<std::tuple<DType, DType>> {};

TEST_P(CastFloatToIntRandomTest, MatchesTruncateAndClampReference) {
  const auto [from, to] = GetParam();
  Rng rng;
  SCOPED_TRACE(testing::Message() << "seed " << rng.seed());
  constexpr int64_t kCount = 20000;
  TestArray in(from, {kCount});
  for (int64_t i = 0; i < kCount; ++i) {
    // Magnitudes from 2^-4 to 2^70, straddling every integer type's range.
    const double magnitude = std::ldexp(rng.Real(1, 2), static_cast<int>(rng.Int(-4, 70)));
    in.SetDouble(i, rng.OneIn(2) ? -magnitude : magnitude);
  }
  TestArray out(to, {kCount});
  CastCpu(in.view(), out.mutable_view());
  double lo = 0, hi = 255;
  if (to == DType::kInt32) {
    lo = kInt32Min;
    hi = kInt32Max;
  }
  for (int64_t i = 0; i < kCount; ++i) {
    const double truncated = std::trunc(in.GetDouble(i));
    if (to == DType::kInt64) {
      const int64_t want = truncated >= 0x1p63   ? kInt64Max
                           : truncated < -0x1p63 ? kInt64Min
                                                 : static_cast<int64_t>(truncated);
      ASSERT_EQ(out.GetInt64(i), want) << "input " << in.GetDouble(i);
    } else {
      ASSERT_EQ(out.GetDouble(i), std::clamp(truncated, lo, hi)) << "input " << in.GetDouble(i);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Seeded, CastFloatToIntRandomTest,
                         testing::Combine(testing::ValuesIn(kFloatingDTypes),
                                          testing::ValuesIn(kIntegerDTypes)),
                         [](const testing::TestParamInfo<std::tuple<DType, DType>>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_to_",
                                               DTypeName(std::get<1>(info.param)));
                         });

// ================================== ReduceCpu ==================================

// ReduceCpu along one axis, or over every axis (nullopt), as the registry plans an "axis"
// attribute that is an integer or absent.
void ReduceAlong(ReduceOp op, const ConstHostArray& in, std::optional<int> axis,
                 const HostArray& out) {
  std::vector<int> axes(in.shape.size());
  std::iota(axes.begin(), axes.end(), 0);
  if (axis.has_value()) axes = {*axis};
  ReduceCpu(op, in, axes, out);
}

std::vector<double> Iota(int64_t count, double start = 0) {
  std::vector<double> values(static_cast<size_t>(count));
  std::iota(values.begin(), values.end(), start);
  return values;
}

// Mean of an integer array is a float32 array; every other reduction keeps the dtype.
DType ReduceOutDType(ReduceOp op, DType in) {
  return op == ReduceOp::kMean && !IsFloating(in) ? DType::kFloat32 : in;
}

struct ReduceCase {
  std::string name;
  ReduceOp op;
  std::optional<int> axis;
  Shape out_shape;
  std::vector<double> expected;
};

void PrintTo(const ReduceCase& c, std::ostream* os) { *os << c.name; }

// Over in[i][j][k] = 12 i + 4 j + k, shape [2, 3, 4].
// clang-format off
const ReduceCase kReduceCases[] = {
    {"SumsOverAxis0", ReduceOp::kSum, 0, {3, 4}, {12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34}},
    {"SumsOverAxis1", ReduceOp::kSum, 1, {2, 4}, {12, 15, 18, 21, 48, 51, 54, 57}},
    {"SumsOverAxis2", ReduceOp::kSum, 2, {2, 3}, {6, 22, 38, 54, 70, 86}},
    {"SumsAllElements", ReduceOp::kSum, std::nullopt, {}, {276}},  // uint8: wraps to 20
    {"MeansOverAxis0", ReduceOp::kMean, 0, {3, 4}, Iota(12, 6)},
    {"MeansOverAxis1", ReduceOp::kMean, 1, {2, 4}, {4, 5, 6, 7, 16, 17, 18, 19}},
    {"MeansOverAxis2", ReduceOp::kMean, 2, {2, 3}, {1.5, 5.5, 9.5, 13.5, 17.5, 21.5}},
    {"MeansAllElements", ReduceOp::kMean, std::nullopt, {}, {11.5}},
    {"MaxOverAxis0", ReduceOp::kMax, 0, {3, 4}, Iota(12, 12)},
    {"MaxOverAxis1", ReduceOp::kMax, 1, {2, 4}, {8, 9, 10, 11, 20, 21, 22, 23}},
    {"MaxOverAxis2", ReduceOp::kMax, 2, {2, 3}, {3, 7, 11, 15, 19, 23}},
    {"MaxOfAllElements", ReduceOp::kMax, std::nullopt, {}, {23}},
    {"MinOverAxis0", ReduceOp::kMin, 0, {3, 4}, Iota(12, 0)},
    {"MinOverAxis1", ReduceOp::kMin, 1, {2, 4}, {0, 1, 2, 3, 12, 13, 14, 15}},
    {"MinOverAxis2", ReduceOp::kMin, 2, {2, 3}, {0, 4, 8, 12, 16, 20}},
    {"MinOfAllElements", ReduceOp::kMin, std::nullopt, {}, {0}},
};
// clang-format on

class ReduceHandComputedTest : public testing::TestWithParam<std::tuple<ReduceCase, DType>> {};

TEST_P(ReduceHandComputedTest, MatchesHandComputedValues) {
  const auto& [c, dtype] = GetParam();
  const TestArray in(dtype, {2, 3, 4}, Iota(24));
  const DType out_dtype = ReduceOutDType(c.op, dtype);
  TestArray out(out_dtype, c.out_shape);
  ReduceAlong(c.op, in.view(), c.axis, out.mutable_view());
  ExpectValues(out, AsStored(out_dtype, c.expected));
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, ReduceHandComputedTest,
                         testing::Combine(testing::ValuesIn(kReduceCases),
                                          testing::ValuesIn(kAllDTypes)),
                         CaseAndDTypeName<ReduceCase>);

class ReduceFloatingTest : public testing::TestWithParam<DType> {};

TEST_P(ReduceFloatingTest, MaxAndMinPropagateNanWherever) {
  const DType dtype = GetParam();
  for (const std::vector<double>& values :
       {std::vector<double>{1, kNan, 3, -kInf, 2}, std::vector<double>{kNan, 5, 6},
        std::vector<double>{5, 6, kNan}}) {
    const TestArray in(dtype, {static_cast<int64_t>(values.size())}, values);
    for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
      TestArray out(dtype, {});
      ReduceAlong(op, in.view(), std::nullopt, out.mutable_view());
      EXPECT_TRUE(std::isnan(out.GetDouble(0))) << "got " << out.GetDouble(0);
    }
  }
}

TEST_P(ReduceFloatingTest, MaxAndMinAlongAxisPropagateNanPerOutput) {
  const TestArray in(GetParam(), {2, 2}, {1, kNan, 3, 4});
  TestArray max0(GetParam(), {2}), min1(GetParam(), {2});
  ReduceAlong(ReduceOp::kMax, in.view(), 0, max0.mutable_view());
  ReduceAlong(ReduceOp::kMin, in.view(), 1, min1.mutable_view());
  ExpectValues(max0, {3, kNan});
  ExpectValues(min1, {kNan, 3});
}

TEST_P(ReduceFloatingTest, SumAndMeanOfNothingAreZeroAndNan) {
  const TestArray empty(GetParam(), {0});
  TestArray sum(GetParam(), {}), mean(GetParam(), {});
  ReduceAlong(ReduceOp::kSum, empty.view(), std::nullopt, sum.mutable_view());
  ReduceAlong(ReduceOp::kMean, empty.view(), std::nullopt, mean.mutable_view());
  ExpectValues(sum, {0});
  ExpectValues(mean, {kNan});

  const TestArray rows(GetParam(), {2, 0});
  TestArray row_sums(GetParam(), {2}), row_means(GetParam(), {2});
  ReduceAlong(ReduceOp::kSum, rows.view(), 1, row_sums.mutable_view());
  ReduceAlong(ReduceOp::kMean, rows.view(), 1, row_means.mutable_view());
  ExpectValues(row_sums, {0, 0});
  ExpectValues(row_means, {kNan, kNan});
}

INSTANTIATE_TEST_SUITE_P(FloatingDTypes, ReduceFloatingTest, testing::ValuesIn(kFloatingDTypes),
                         DTypeParamName);

TEST(ReduceCpuTest, ReducesZeroDimArrayToItsValue) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const TestArray in(dtype, {}, {5});
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin}) {
      TestArray out(ReduceOutDType(op, dtype), {});
      ReduceAlong(op, in.view(), std::nullopt, out.mutable_view());
      ExpectValues(out, {5});
    }
  }
}

TEST(ReduceCpuTest, ReducingSizeZeroArrayAlongNonEmptyAxisWritesNothing) {
  const TestArray in(DType::kFloat32, {0, 3});
  TestArray out(DType::kFloat32, {0});
  ReduceAlong(ReduceOp::kMax, in.view(), 1, out.mutable_view());
  EXPECT_EQ(out.size(), 0);
  TestArray sums(DType::kFloat32, {3});
  ReduceAlong(ReduceOp::kSum, in.view(), 0, sums.mutable_view());
  ExpectValues(sums, {0, 0, 0});
}

TEST(ReduceCpuTest, SumOfInt32IntoInt64DoesNotWrapAtInt32) {
  const TestArray in = TestArray::FromInt64s(DType::kInt32, {3}, {kInt32Max, kInt32Max, 2});
  TestArray out(DType::kInt64, {});
  ReduceAlong(ReduceOp::kSum, in.view(), std::nullopt, out.mutable_view());
  EXPECT_EQ(out.GetInt64(0), int64_t{1} << 32);
}

TEST(ReduceCpuTest, SumOfInt64WrapsModuloTwoTo64) {
  const TestArray in = TestArray::FromInt64s(DType::kInt64, {3}, {kInt64Max, 1, 1});
  TestArray out(DType::kInt64, {});
  ReduceAlong(ReduceOp::kSum, in.view(), std::nullopt, out.mutable_view());
  EXPECT_EQ(out.GetInt64(0), kInt64Min + 1);
}

TEST(ReduceCpuTest, SumOfInt32IntoInt32Wraps) {
  const TestArray in = TestArray::FromInt64s(DType::kInt32, {2, 2}, {kInt32Max, 7, 1, 8});
  TestArray out(DType::kInt32, {2});
  ReduceAlong(ReduceOp::kSum, in.view(), 0, out.mutable_view());
  ExpectValues(out, {static_cast<double>(kInt32Min), 15});
}

TEST(ReduceCpuTest, MeanOfIntegersIntoFloat32) {
  const TestArray in = TestArray::FromInt64s(DType::kInt64, {2, 2}, {1, 2, -3, 4});
  TestArray out(DType::kFloat32, {2});
  ReduceAlong(ReduceOp::kMean, in.view(), 1, out.mutable_view());
  ExpectValues(out, {1.5, 0.5});
}

TEST(ReduceCpuTest, MaxAndMinOfIntegersUseFullRange) {
  const TestArray in = TestArray::FromInt64s(DType::kInt64, {4}, {kInt64Min, 0, kInt64Max, -1});
  TestArray max(DType::kInt64, {}), min(DType::kInt64, {});
  ReduceAlong(ReduceOp::kMax, in.view(), std::nullopt, max.mutable_view());
  ReduceAlong(ReduceOp::kMin, in.view(), std::nullopt, min.mutable_view());
  EXPECT_EQ(max.GetInt64(0), kInt64Max);
  EXPECT_EQ(min.GetInt64(0), kInt64Min);
}

TEST(ReduceCpuTest, Float32SumAccumulatesInDouble) {
  // In float, 1e8 + 1 is 1e8 again (its ulp is 8) and the sum would come out 0.
  const TestArray in(DType::kFloat32, {3}, {1e8, 1, -1e8});
  TestArray out(DType::kFloat32, {});
  ReduceAlong(ReduceOp::kSum, in.view(), std::nullopt, out.mutable_view());
  ExpectValues(out, {1});
}

// 1 + 2^-11 + 2^-24 lies just above the float16 tie 1 + 2^-11, so it rounds up to 1 + 2^-10.
// Rounding the double sum to float first would land exactly on the tie (2^-24 is half a float
// ulp at 1) and the tie would then go down to 1.
TEST(ReduceCpuTest, Float16SumRoundsOnceFromDouble) {
  const TestArray in(DType::kFloat16, {3}, {1, 0x1p-11, 0x1p-24});
  TestArray out(DType::kFloat16, {});
  ReduceAlong(ReduceOp::kSum, in.view(), std::nullopt, out.mutable_view());
  ExpectValues(out, {1 + 0x1p-10});
}

TEST(ReduceCpuTest, BFloat16SumRoundsOnceFromDouble) {
  const TestArray in(DType::kBFloat16, {3}, {1, 0x1p-8, 0x1p-24});
  TestArray out(DType::kBFloat16, {});
  ReduceAlong(ReduceOp::kSum, in.view(), std::nullopt, out.mutable_view());
  ExpectValues(out, {1 + 0x1p-7});
}

// Largest rounding error of a value of the dtype, relative to the value.
double RelativeEpsilon(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return 0x1p-11;
    case DType::kBFloat16:
      return 0x1p-8;
    default:
      return 0x1p-24;
  }
}

// For a float result computed from `terms` values of magnitude up to `scale`: the final
// rounding to the dtype, plus the double accumulation's error and the dtype's subnormal spacing.
void ExpectClose(const TestArray& actual, absl::Span<const double> expected, int64_t terms,
                 double scale) {
  ASSERT_EQ(actual.size(), static_cast<int64_t>(expected.size()));
  const double spacing = actual.dtype() == DType::kFloat16 ? 0x1p-24 : 0x1p-126;
  for (int64_t i = 0; i < actual.size(); ++i) {
    const double tolerance = RelativeEpsilon(actual.dtype()) * std::fabs(expected[i]) +
                             static_cast<double>(terms) * scale * 0x1p-50 + spacing;
    ASSERT_NEAR(actual.GetDouble(i), expected[i], tolerance) << "element " << i;
  }
}

class ReduceRandomTest : public testing::TestWithParam<std::tuple<ReduceOp, DType>> {};

TEST_P(ReduceRandomTest, MatchesFloat64ReferenceOverEveryAxis) {
  const auto [op, dtype] = GetParam();
  // Integer sums go to int64 as NumPy's do; the values keep them exact in double.
  const DType out_dtype =
      op == ReduceOp::kSum && !IsFloating(dtype) ? DType::kInt64 : ReduceOutDType(op, dtype);
  Rng rng;
  SCOPED_TRACE(testing::Message() << "seed " << rng.seed());
  for (int trial = 0; trial < 60; ++trial) {
    Shape shape = rng.RandomShape(static_cast<int>(rng.Int(0, 4)));
    for (int64_t& extent : shape) extent = std::max<int64_t>(extent, 1) + rng.Int(0, 3);
    TestArray in(dtype, shape);
    rng.Fill(in, 100);
    const int rank = static_cast<int>(shape.size());
    for (int axis = -1; axis < rank; ++axis) {  // -1: all elements
      SCOPED_TRACE(absl::StrCat(ShapeToString(shape), " axis ", axis));
      // The reduced extent in the middle of [outer, extent, inner].
      const auto dims = absl::MakeConstSpan(shape);
      const int64_t outer = axis < 0 ? 1 : CountOf(dims.first(axis));
      const int64_t extent = axis < 0 ? in.size() : shape[axis];
      const int64_t inner = axis < 0 ? 1 : CountOf(dims.subspan(axis + 1));
      Shape out_shape;
      if (axis >= 0) {
        out_shape = shape;
        out_shape.erase(out_shape.begin() + axis);
      }
      TestArray out(out_dtype, out_shape);
      ReduceAlong(op, in.view(), axis < 0 ? std::nullopt : std::optional<int>(axis),
                  out.mutable_view());

      std::vector<double> expected(static_cast<size_t>(outer * inner));
      double scale = 0;
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          double acc = op == ReduceOp::kMax ? -kInf : op == ReduceOp::kMin ? kInf : 0;
          for (int64_t k = 0; k < extent; ++k) {
            const double x = in.GetDouble((o * extent + k) * inner + i);
            scale = std::max(scale, std::fabs(x));
            acc = op == ReduceOp::kMax   ? std::max(acc, x)
                  : op == ReduceOp::kMin ? std::min(acc, x)
                                         : acc + x;
          }
          expected[o * inner + i] = op == ReduceOp::kMean ? acc / extent : acc;
        }
      }
      if (op == ReduceOp::kMax || op == ReduceOp::kMin || !IsFloating(out_dtype)) {
        ExpectValues(out, expected);
      } else {
        ExpectClose(out, expected, extent, scale);
      }
      if (HasFailure()) return;
    }
  }
}

std::string ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "Sum";
    case ReduceOp::kMean:
      return "Mean";
    case ReduceOp::kMax:
      return "Max";
    case ReduceOp::kMin:
      return "Min";
  }
  return "Unknown";
}

INSTANTIATE_TEST_SUITE_P(Seeded, ReduceRandomTest,
                         testing::Combine(testing::Values(ReduceOp::kSum, ReduceOp::kMean,
                                                          ReduceOp::kMax, ReduceOp::kMin),
                                          testing::ValuesIn(kAllDTypes)),
                         [](const testing::TestParamInfo<std::tuple<ReduceOp, DType>>& info) {
                           return absl::StrCat(ReduceOpName(std::get<0>(info.param)), "_",
                                               DTypeName(std::get<1>(info.param)));
                         });

// ---- Several axes at once ----

struct ReduceAxesCase {
  std::string name;
  ReduceOp op;
  std::vector<int> axes;
  Shape out_shape;
  std::vector<double> expected;
};

void PrintTo(const ReduceAxesCase& c, std::ostream* os) { *os << c.name; }

// Over in[i][j][k] = 12 i + 4 j + k, shape [2, 3, 4], as kReduceCases.
// clang-format off
const ReduceAxesCase kReduceAxesCases[] = {
    // sum over i, k of 12 i + 4 j + k: 48 + 32 j + 12.
    {"SumsOverAxes0And2", ReduceOp::kSum, {0, 2}, {3}, {60, 92, 124}},
    // sum over i, j: 36 + 24 + 6 k.
    {"SumsOverAdjacentAxes0And1", ReduceOp::kSum, {0, 1}, {4}, {60, 66, 72, 78}},
    // sum over j, k: 144 i + 48 + 18.
    {"SumsOverAdjacentAxes1And2", ReduceOp::kSum, {1, 2}, {2}, {66, 210}},
    {"SumsOverEveryAxisNamed", ReduceOp::kSum, {0, 1, 2}, {}, {276}},
    {"MeansOverAxes0And2", ReduceOp::kMean, {0, 2}, {3}, {7.5, 11.5, 15.5}},
    {"MeansOverAxes0And1", ReduceOp::kMean, {0, 1}, {4}, {10, 11, 12, 13}},
    {"MaxOverAxes0And2", ReduceOp::kMax, {0, 2}, {3}, {15, 19, 23}},
    {"MaxOverAxes1And2", ReduceOp::kMax, {1, 2}, {2}, {11, 23}},
    {"MinOverAxes0And2", ReduceOp::kMin, {0, 2}, {3}, {0, 4, 8}},
    {"MinOverAxes0And1", ReduceOp::kMin, {0, 1}, {4}, {0, 1, 2, 3}},
    // No axis: each element is its own result (NumPy's axis=()).
    {"SumOverNoAxisIsTheInput", ReduceOp::kSum, {}, {2, 3, 4}, Iota(24)},
    {"MeanOverNoAxisIsTheInput", ReduceOp::kMean, {}, {2, 3, 4}, Iota(24)},
    {"MaxOverNoAxisIsTheInput", ReduceOp::kMax, {}, {2, 3, 4}, Iota(24)},
};
// clang-format on

class ReduceAxesHandComputedTest
    : public testing::TestWithParam<std::tuple<ReduceAxesCase, DType>> {};

TEST_P(ReduceAxesHandComputedTest, MatchesHandComputedValues) {
  const auto& [c, dtype] = GetParam();
  const TestArray in(dtype, {2, 3, 4}, Iota(24));
  const DType out_dtype = ReduceOutDType(c.op, dtype);
  TestArray out(out_dtype, c.out_shape);
  ReduceCpu(c.op, in.view(), c.axes, out.mutable_view());
  ExpectValues(out, AsStored(out_dtype, c.expected));
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, ReduceAxesHandComputedTest,
                         testing::Combine(testing::ValuesIn(kReduceAxesCases),
                                          testing::ValuesIn(kAllDTypes)),
                         CaseAndDTypeName<ReduceAxesCase>);

TEST(ReduceCpuTest, SeveralAxesOfIntegersSumIntoInt64AndMeanIntoFloat32) {
  // [2, 2, 2] of int32 near the top of the range: the int64 sum does not wrap at int32.
  const TestArray in =
      TestArray::FromInt64s(DType::kInt32, {2, 2, 2}, {kInt32Max, 1, kInt32Max, 2, 3, 4, 5, 6});
  TestArray sums(DType::kInt64, {2}), means(DType::kFloat32, {2});
  ReduceCpu(ReduceOp::kSum, in.view(), std::vector<int>{0, 1}, sums.mutable_view());
  ReduceCpu(ReduceOp::kMean, in.view(), std::vector<int>{0, 2}, means.mutable_view());
  EXPECT_EQ(sums.GetInt64(0), 2 * int64_t{kInt32Max} + 8);
  EXPECT_EQ(sums.GetInt64(1), 13);
  // means over i, k of j = 0: (max + 1 + 3 + 4) / 4; of j = 1: (max + 2 + 5 + 6) / 4.
  ExpectValues(means, AsStored(DType::kFloat32, {(kInt32Max + 8.0) / 4, (kInt32Max + 13.0) / 4}));
}

TEST(ReduceCpuTest, MaxAndMinOverSeveralAxesPropagateNanPerOutput) {
  const TestArray in(DType::kFloat32, {2, 2, 2}, {1, 2, kNan, 4, 5, 6, 7, 8});
  TestArray max(DType::kFloat32, {2}), min(DType::kFloat32, {2});
  ReduceCpu(ReduceOp::kMax, in.view(), std::vector<int>{0, 2}, max.mutable_view());
  ReduceCpu(ReduceOp::kMin, in.view(), std::vector<int>{0, 1}, min.mutable_view());
  ExpectValues(max, {6, kNan});  // j = 1 holds the NaN
  ExpectValues(min, {kNan, 2});  // k = 0 holds it
}

TEST(ReduceCpuTest, SumAndMeanOverSeveralAxesWithAnEmptyOneAreZeroAndNan) {
  const TestArray in(DType::kFloat32, {2, 3, 0});
  TestArray sums(DType::kFloat32, {3}), means(DType::kFloat32, {3});
  ReduceCpu(ReduceOp::kSum, in.view(), std::vector<int>{0, 2}, sums.mutable_view());
  ReduceCpu(ReduceOp::kMean, in.view(), std::vector<int>{0, 2}, means.mutable_view());
  ExpectValues(sums, {0, 0, 0});
  ExpectValues(means, {kNan, kNan, kNan});
}

// `value` rounded once to `dtype` as the kernels store a double (float16 and bfloat16 without
// passing through float32), widened back to double.
double StoredOnce(DType dtype, double value) {
  return internal::DispatchDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return static_cast<double>(internal::Widen(internal::ConvertTo<T>(value)));
  });
}

// Every subset of the axes of random shapes against a reference that combines each output's
// elements in memory order in double (int64 for integer sums) and rounds once: bit for bit.
// Along one axis that is index order, the order ReduceCpu used before it took several axes.
TEST(ReduceCpuTest, EverySubsetOfAxesCombinesInMemoryOrderAndRoundsOnce) {
  Rng rng;
  SCOPED_TRACE(testing::Message() << "seed " << rng.seed());
  for (int trial = 0; trial < 40; ++trial) {
    Shape shape = rng.RandomShape(static_cast<int>(rng.Int(0, 5)));
    const int rank = static_cast<int>(shape.size());
    for (DType dtype : kAllDTypes) {
      TestArray in(dtype, shape);
      rng.Fill(in, 100);
      for (int mask = 0; mask < (1 << rank); ++mask) {
        std::vector<int> axes;
        Shape out_shape;
        for (int d = 0; d < rank; ++d) {
          if (mask & (1 << d)) {
            axes.push_back(d);
          } else {
            out_shape.push_back(shape[d]);
          }
        }
        SCOPED_TRACE(absl::StrCat(ShapeToString(shape), " axes [", absl::StrJoin(axes, ", "), "] ",
                                  DTypeName(dtype)));
        const int64_t out_count = CountOf(out_shape);
        const int64_t per_output = out_count == 0 ? 0 : in.size() / out_count;
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin}) {
          if ((op == ReduceOp::kMax || op == ReduceOp::kMin) && per_output == 0) continue;
          const DType out_dtype = op == ReduceOp::kSum && !IsFloating(dtype)
                                      ? DType::kInt64
                                      : ReduceOutDType(op, dtype);
          TestArray out(out_dtype, out_shape);
          ReduceCpu(op, in.view(), axes, out.mutable_view());

          std::vector<double> acc(static_cast<size_t>(out_count));
          std::vector<int64_t> int_acc(static_cast<size_t>(out_count));
          std::vector<bool> seen(static_cast<size_t>(out_count), false);
          const std::vector<int64_t> out_strides = ContiguousStrides(out_shape);
          for (int64_t flat = 0; flat < in.size(); ++flat) {
            int64_t rest = flat, o = 0;
            for (int d = rank - 1, od = static_cast<int>(out_shape.size()) - 1; d >= 0; --d) {
              const int64_t index = rest % shape[d];
              rest /= shape[d];
              if (!(mask & (1 << d))) o += index * out_strides[od--];
            }
            const double x = in.GetDouble(flat);
            const int64_t xi = IsFloating(dtype) ? 0 : in.GetInt64(flat);
            if (!seen[o]) {
              acc[o] = x;
              int_acc[o] = xi;
              seen[o] = true;
            } else if (op == ReduceOp::kMax) {
              acc[o] = (x > acc[o] || std::isnan(x)) ? x : acc[o];
            } else if (op == ReduceOp::kMin) {
              acc[o] = (x < acc[o] || std::isnan(x)) ? x : acc[o];
            } else {
              acc[o] += x;
              int_acc[o] = static_cast<int64_t>(static_cast<uint64_t>(int_acc[o]) +
                                                static_cast<uint64_t>(xi));
            }
          }
          if (op == ReduceOp::kSum && !IsFloating(dtype)) {
            for (int64_t i = 0; i < out_count; ++i) ASSERT_EQ(out.GetInt64(i), int_acc[i]);
            continue;
          }
          std::vector<double> expected(static_cast<size_t>(out_count));
          for (int64_t i = 0; i < out_count; ++i) {
            expected[i] = StoredOnce(out_dtype, per_output == 0 ? (op == ReduceOp::kSum ? 0 : kNan)
                                                : op == ReduceOp::kMean
                                                    ? acc[i] / static_cast<double>(per_output)
                                                    : acc[i]);
          }
          ExpectValues(out, expected);
          if (HasFailure()) return;
        }
      }
    }
  }
}

struct ReduceRunsCase {
  std::string name;
  Shape shape;
  std::vector<int> axes;
  std::vector<ReduceRun> expected;
};

void PrintTo(const ReduceRunsCase& c, std::ostream* os) { *os << c.name; }

class ReduceRunsTest : public testing::TestWithParam<ReduceRunsCase> {};

TEST_P(ReduceRunsTest, DropsOnesAndMergesNeighboursOfAKind) {
  const ReduceRunsCase& c = GetParam();
  const std::vector<ReduceRun> runs = ReduceRuns(c.shape, c.axes);
  ASSERT_EQ(runs.size(), c.expected.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].extent, c.expected[i].extent) << "run " << i;
    EXPECT_EQ(runs[i].reduced, c.expected[i].reduced) << "run " << i;
  }
}

constexpr bool kReduced = true, kKept = false;
INSTANTIATE_TEST_SUITE_P(
    Table, ReduceRunsTest,
    testing::Values(
        ReduceRunsCase{
            "OneAxisInTheMiddle", {2, 3, 4}, {1}, {{2, kKept}, {3, kReduced}, {4, kKept}}},
        ReduceRunsCase{"AdjacentAxesAreOneRun", {2, 3, 4}, {0, 1}, {{6, kReduced}, {4, kKept}}},
        ReduceRunsCase{
            "AxesApartAreTwoRuns", {2, 3, 4}, {0, 2}, {{2, kReduced}, {3, kKept}, {4, kReduced}}},
        ReduceRunsCase{"AxesApartOnlyByAOneAreOneRun", {2, 1, 4}, {0, 2}, {{8, kReduced}}},
        ReduceRunsCase{"EveryAxisIsOneRun", {2, 3, 4}, {0, 1, 2}, {{24, kReduced}}},
        ReduceRunsCase{"NoAxisIsOneKeptRun", {2, 3, 4}, {}, {{24, kKept}}},
        ReduceRunsCase{"ReducedOneIsDropped", {5, 1, 3}, {1}, {{15, kKept}}},
        ReduceRunsCase{"Alternating",
                       {2, 3, 4, 5},
                       {1, 3},
                       {{2, kKept}, {3, kReduced}, {4, kKept}, {5, kReduced}}},
        ReduceRunsCase{"ZeroDim", {}, {}, {}}, ReduceRunsCase{"OnlyOnes", {1, 1}, {0, 1}, {}}),
    [](const testing::TestParamInfo<ReduceRunsCase>& info) { return info.param.name; });

// ================================== MatmulCpu ==================================

class MatmulAllDTypesTest : public testing::TestWithParam<DType> {};

TEST_P(MatmulAllDTypesTest, MultipliesTwoByThreeByThreeByTwo) {
  const TestArray a(GetParam(), {2, 3}, {1, 2, 3, 4, 5, 6});
  const TestArray b(GetParam(), {3, 2}, {7, 8, 9, 10, 11, 12});
  TestArray out(GetParam(), {2, 2});
  MatmulCpu(a.view(), b.view(), out.mutable_view());
  // [1 2 3] . [7 9 11] = 58, [1 2 3] . [8 10 12] = 64, [4 5 6] . [7 9 11] = 139, ... = 154.
  ExpectValues(out, {58, 64, 139, 154});
}

TEST_P(MatmulAllDTypesTest, BroadcastsBatchDimensions) {
  // a: [2, 1, 2, 2] holds I and 2I; b: [3, 2, 2] holds B0, B1, B2; out[i][j] = a[i] b[j].
  const TestArray a(GetParam(), {2, 1, 2, 2}, {1, 0, 0, 1, 2, 0, 0, 2});
  const TestArray b(GetParam(), {3, 2, 2}, {1, 2, 3, 4, 0, 1, 1, 0, 5, 0, 0, 5});
  TestArray out(GetParam(), {2, 3, 2, 2});
  MatmulCpu(a.view(), b.view(), out.mutable_view());
  ExpectValues(out, {1, 2, 3, 4, 0, 1, 1, 0, 5,  0, 0, 5,  // I B0, I B1, I B2
                     2, 4, 6, 8, 0, 2, 2, 0, 10, 0, 0, 10});
}

TEST_P(MatmulAllDTypesTest, BroadcastsMatrixWithoutBatchOverBatchedOperand) {
  // a [2, 2] = [[0, 1], [1, 0]] swaps the rows of each b[i].
  const TestArray a(GetParam(), {2, 2}, {0, 1, 1, 0});
  const TestArray b(GetParam(), {2, 2, 3}, Iota(12));
  TestArray out(GetParam(), {2, 2, 3});
  MatmulCpu(a.view(), b.view(), out.mutable_view());
  ExpectValues(out, {3, 4, 5, 0, 1, 2, 9, 10, 11, 6, 7, 8});
}

TEST_P(MatmulAllDTypesTest, MultipliesMatrixVectorShapedOperands) {
  // [3, 1, 2] x [2, 1] -> [3, 1, 1]: one dot product per batch.
  const TestArray a(GetParam(), {3, 1, 2}, {1, 2, 3, 4, 5, 6});
  const TestArray b(GetParam(), {2, 1}, {10, 1});
  TestArray out(GetParam(), {3, 1, 1});
  MatmulCpu(a.view(), b.view(), out.mutable_view());
  ExpectValues(out, {12, 34, 56});
}

// NumPy's 1-d operands: a [k] is a row and b [k] a column, and out lacks that dimension.
TEST_P(MatmulAllDTypesTest, VectorOperandsAreARowOnTheLeftAndAColumnOnTheRight) {
  const TestArray row(GetParam(), {3}, {1, 2, 3});
  const TestArray matrix(GetParam(), {3, 2}, {7, 8, 9, 10, 11, 12});
  TestArray row_out(GetParam(), {2});
  MatmulCpu(row.view(), matrix.view(), row_out.mutable_view());
  ExpectValues(row_out, {58, 64});

  const TestArray wide(GetParam(), {2, 3}, {1, 2, 3, 4, 5, 6});
  const TestArray column(GetParam(), {3}, {1, 1, 2});
  TestArray column_out(GetParam(), {2});
  MatmulCpu(wide.view(), column.view(), column_out.mutable_view());
  ExpectValues(column_out, {9, 21});

  TestArray dot(GetParam(), {});
  MatmulCpu(row.view(), column.view(), dot.mutable_view());
  ExpectValues(dot, {9});  // 1 + 2 + 6
}

TEST_P(MatmulAllDTypesTest, VectorOperandsBroadcastOverTheOthersBatch) {
  const TestArray vector(GetParam(), {2}, {1, 2});
  const TestArray batch(GetParam(), {2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  TestArray left(GetParam(), {2, 2});  // [1 2] @ batch[b]
  MatmulCpu(vector.view(), batch.view(), left.mutable_view());
  ExpectValues(left, {7, 10, 19, 22});
  TestArray right(GetParam(), {2, 2});  // batch[b] @ [1 2]^T
  MatmulCpu(batch.view(), vector.view(), right.mutable_view());
  ExpectValues(right, {5, 11, 17, 23});
}

TEST_P(MatmulAllDTypesTest, EmptyInnerDimensionGivesZeros) {
  const TestArray a(GetParam(), {2, 0}), b(GetParam(), {0, 3});
  TestArray out(GetParam(), {2, 3});
  MatmulCpu(a.view(), b.view(), out.mutable_view());
  ExpectValues(out, {0, 0, 0, 0, 0, 0});
}

TEST_P(MatmulAllDTypesTest, EmptyOuterOrBatchDimensionWritesNothing) {
  const TestArray a(GetParam(), {0, 3}, {}), b(GetParam(), {3, 2}, {1, 2, 3, 4, 5, 6});
  TestArray out(GetParam(), {0, 2});
  MatmulCpu(a.view(), b.view(), out.mutable_view());
  EXPECT_EQ(out.size(), 0);
  const TestArray batch_a(GetParam(), {0, 2, 2}), batch_b(GetParam(), {2, 2}, {1, 2, 3, 4});
  TestArray batch_out(GetParam(), {0, 2, 2});
  MatmulCpu(batch_a.view(), batch_b.view(), batch_out.mutable_view());
  EXPECT_EQ(batch_out.size(), 0);
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, MatmulAllDTypesTest, testing::ValuesIn(kAllDTypes),
                         DTypeParamName);

TEST(MatmulCpuTest, IntegerProductsWrap) {
  const TestArray a8 = TestArray::FromInt64s(DType::kUInt8, {1, 2}, {16, 255});
  const TestArray b8 = TestArray::FromInt64s(DType::kUInt8, {2, 1}, {16, 255});
  TestArray out8(DType::kUInt8, {1, 1});
  MatmulCpu(a8.view(), b8.view(), out8.mutable_view());
  EXPECT_EQ(out8.GetInt64(0), 1);  // 256 + 65025 = 65281 = 255 * 256 + 1

  const TestArray a32 = TestArray::FromInt64s(DType::kInt32, {1, 2}, {65536, kInt32Max});
  const TestArray b32 = TestArray::FromInt64s(DType::kInt32, {2, 1}, {65536, 2});
  TestArray out32(DType::kInt32, {1, 1});
  MatmulCpu(a32.view(), b32.view(), out32.mutable_view());
  EXPECT_EQ(out32.GetInt64(0), -2);  // 2^32 + 2^32 - 2 = -2 mod 2^32

  const TestArray a64 = TestArray::FromInt64s(DType::kInt64, {1, 1}, {int64_t{1} << 32});
  TestArray out64(DType::kInt64, {1, 1});
  MatmulCpu(a64.view(), a64.view(), out64.mutable_view());
  EXPECT_EQ(out64.GetInt64(0), 0);
}

TEST(MatmulCpuTest, Float32AccumulatesInDouble) {
  const TestArray a(DType::kFloat32, {1, 3}, {1e8, 1, -1e8}), b(DType::kFloat32, {3, 1}, {1, 1, 1});
  TestArray out(DType::kFloat32, {1, 1});
  MatmulCpu(a.view(), b.view(), out.mutable_view());
  ExpectValues(out, {1});
}

TEST(MatmulCpuTest, Float16ResultRoundsOnceFromDouble) {
  const TestArray a(DType::kFloat16, {1, 3}, {1, 0x1p-11, 0x1p-24});
  const TestArray b(DType::kFloat16, {3, 1}, {1, 1, 1});
  TestArray out(DType::kFloat16, {1, 1});
  MatmulCpu(a.view(), b.view(), out.mutable_view());
  ExpectValues(out, {1 + 0x1p-10});
}

class MatmulRandomTest : public testing::TestWithParam<DType> {};

TEST_P(MatmulRandomTest, MatchesFloat64ReferenceWithBroadcastBatches) {
  const DType dtype = GetParam();
  Rng rng;
  SCOPED_TRACE(testing::Message() << "seed " << rng.seed());
  for (int trial = 0; trial < 100; ++trial) {
    const int64_t m = rng.Int(1, 6), k = rng.Int(0, 6), n = rng.Int(1, 6);
    const Shape batch = rng.RandomShape(static_cast<int>(rng.Int(0, 3)));
    Shape a_shape = rng.BroadcastableTo(batch), b_shape = rng.BroadcastableTo(batch);
    const Shape out_batch = *BroadcastShapes(a_shape, b_shape);
    a_shape.insert(a_shape.end(), {m, k});
    b_shape.insert(b_shape.end(), {k, n});
    Shape out_shape = out_batch;
    out_shape.insert(out_shape.end(), {m, n});
    SCOPED_TRACE(absl::StrCat(ShapeToString(a_shape), " x ", ShapeToString(b_shape)));

    TestArray a(dtype, a_shape), b(dtype, b_shape), out(dtype, out_shape);
    rng.Fill(a, 4);
    rng.Fill(b, 4);
    MatmulCpu(a.view(), b.view(), out.mutable_view());

    const int64_t a_batch_rank = static_cast<int64_t>(a_shape.size()) - 2;
    const int64_t b_batch_rank = static_cast<int64_t>(b_shape.size()) - 2;
    std::vector<double> expected(static_cast<size_t>(out.size()));
    for (int64_t flat = 0; flat < out.size(); ++flat) {
      const std::vector<int64_t> index = Unravel(flat, out_shape);
      const auto batch_index = absl::MakeConstSpan(index).first(out_batch.size());
      const int64_t a_matrix =
          BroadcastSource(batch_index, absl::MakeConstSpan(a_shape).first(a_batch_rank));
      const int64_t b_matrix =
          BroadcastSource(batch_index, absl::MakeConstSpan(b_shape).first(b_batch_rank));
      const int64_t i = index[index.size() - 2], j = index.back();
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        acc +=
            a.GetDouble(a_matrix * m * k + i * k + p) * b.GetDouble(b_matrix * k * n + p * n + j);
      }
      expected[flat] = acc;
    }
    if (IsFloating(dtype)) {
      ExpectClose(out, expected, k, 16);
    } else {
      ExpectValues(out, AsStored(dtype, expected));
    }
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Seeded, MatmulRandomTest, testing::ValuesIn(kAllDTypes), DTypeParamName);

// ================================ TransposeCpu =================================

class TransposeAllDTypesTest : public testing::TestWithParam<DType> {};

TEST_P(TransposeAllDTypesTest, PermutesRank3WithPerm201) {
  // out[j0][j1][j2] = in[j1][j2][j0]; out.shape = [4, 2, 3].
  const TestArray in(GetParam(), {2, 3, 4}, Iota(24));
  TestArray out(GetParam(), {4, 2, 3});
  const int perm[] = {2, 0, 1};
  TransposeCpu(in.view(), perm, out.mutable_view());
  ExpectValues(
      out, {0, 4, 8, 12, 16, 20, 1, 5, 9, 13, 17, 21, 2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23});
}

TEST_P(TransposeAllDTypesTest, PermutesRank3WithPerm120) {
  // out[j0][j1][j2] = in[j2][j0][j1]; out.shape = [3, 4, 2].
  const TestArray in(GetParam(), {2, 3, 4}, Iota(24));
  TestArray out(GetParam(), {3, 4, 2});
  const int perm[] = {1, 2, 0};
  TransposeCpu(in.view(), perm, out.mutable_view());
  ExpectValues(
      out, {0, 12, 1, 13, 2, 14, 3, 15, 4, 16, 5, 17, 6, 18, 7, 19, 8, 20, 9, 21, 10, 22, 11, 23});
}

TEST_P(TransposeAllDTypesTest, TransposesMatrix) {
  const TestArray in(GetParam(), {2, 3}, {1, 2, 3, 4, 5, 6});
  TestArray out(GetParam(), {3, 2});
  const int perm[] = {1, 0};
  TransposeCpu(in.view(), perm, out.mutable_view());
  ExpectValues(out, {1, 4, 2, 5, 3, 6});
}

TEST_P(TransposeAllDTypesTest, IdentityPermutationCopies) {
  const TestArray in(GetParam(), {2, 3, 2}, Iota(12, 1));
  TestArray out(GetParam(), {2, 3, 2});
  const int perm[] = {0, 1, 2};
  TransposeCpu(in.view(), perm, out.mutable_view());
  ExpectValues(out, Iota(12, 1));
}

TEST_P(TransposeAllDTypesTest, CopiesZeroDimArray) {
  const TestArray in(GetParam(), {}, {42});
  TestArray out(GetParam(), {});
  TransposeCpu(in.view(), {}, out.mutable_view());
  ExpectValues(out, {42});
}

TEST_P(TransposeAllDTypesTest, HandlesSizeZeroDimension) {
  const TestArray in(GetParam(), {0, 3});
  TestArray out(GetParam(), {3, 0});
  const int perm[] = {1, 0};
  TransposeCpu(in.view(), perm, out.mutable_view());
  EXPECT_EQ(out.size(), 0);
}

TEST_P(TransposeAllDTypesTest, MovesExtentOneDimensions) {
  // [1, 3, 1, 2] with perm {3, 1, 0, 2} -> [2, 3, 1, 1]: out[a][b] = in[b][a] of the [3, 2] core.
  const TestArray in(GetParam(), {1, 3, 1, 2}, {1, 2, 3, 4, 5, 6});
  TestArray out(GetParam(), {2, 3, 1, 1});
  const int perm[] = {3, 1, 0, 2};
  TransposeCpu(in.view(), perm, out.mutable_view());
  ExpectValues(out, {1, 3, 5, 2, 4, 6});
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, TransposeAllDTypesTest, testing::ValuesIn(kAllDTypes),
                         DTypeParamName);

TEST(TransposeCpuTest, MovesBitsWithoutConverting) {
  const uint32_t payload_nan = 0x7fa00001u;
  TestArray in(DType::kFloat32, {2, 1}, {0, 0});
  std::memcpy(in.mutable_view().data, &payload_nan, 4);
  TestArray out(DType::kFloat32, {1, 2});
  const int perm[] = {1, 0};
  TransposeCpu(in.view(), perm, out.mutable_view());
  uint32_t bits;
  std::memcpy(&bits, out.view().data, 4);
  EXPECT_EQ(bits, payload_nan);
}

class TransposeRandomTest : public testing::TestWithParam<DType> {};

TEST_P(TransposeRandomTest, MatchesIndexArithmeticReference) {
  const DType dtype = GetParam();
  Rng rng;
  SCOPED_TRACE(testing::Message() << "seed " << rng.seed());
  for (int trial = 0; trial < 200; ++trial) {
    const int rank = static_cast<int>(rng.Int(1, 5));
    const Shape in_shape = rng.RandomShape(rank);
    std::vector<int> perm(static_cast<size_t>(rank));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng.engine());
    Shape out_shape(static_cast<size_t>(rank));
    for (int j = 0; j < rank; ++j) out_shape[j] = in_shape[perm[j]];
    SCOPED_TRACE(absl::StrCat(ShapeToString(in_shape), " perm ", absl::StrJoin(perm, ",")));

    TestArray in(dtype, in_shape), out(dtype, out_shape);
    rng.Fill(in, 100);
    TransposeCpu(in.view(), perm, out.mutable_view());

    std::vector<double> expected(static_cast<size_t>(out.size()));
    for (int64_t flat = 0; flat < out.size(); ++flat) {
      const std::vector<int64_t> out_index = Unravel(flat, out_shape);
      std::vector<int64_t> in_index(static_cast<size_t>(rank));
      for (int j = 0; j < rank; ++j) in_index[perm[j]] = out_index[j];
      expected[flat] = in.GetDouble(Ravel(in_index, in_shape));
    }
    ExpectValues(out, expected);
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Seeded, TransposeRandomTest, testing::ValuesIn(kAllDTypes),
                         DTypeParamName);

}  // namespace
}  // namespace kernels
}  // namespace gpukit
