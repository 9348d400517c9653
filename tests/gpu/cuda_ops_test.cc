// Every built-in op on the CUDA device against the CPU reference, on fresh random inputs
// (never zeros), for every dtype: the same OpLaunch runs on a CudaDevice (NVRTC-compiled
// kernels/cuda) and on a CpuDevice (kernels/cpu), and the outputs are compared. Outputs are
// poisoned before each run, so an element a kernel forgets to write cannot pass.
//
// Tolerances: integers and conversions exactly (NaN equal to NaN); element-wise float ops
// exactly (IEEE arithmetic in float32 on both sides); reductions and matmul relative to the
// sum of magnitudes involved: 1e-5 for float32, 1e-2 for float16 and bfloat16. The math and
// nn ops (exp, gelu, softmax, layernorm, rope, attention, ...) compute in float32 with the
// CUDA math library on the device and in double on the CPU, so they are held to the same
// 1e-5 / 1e-2 relative to |result| + 1 (their inputs and results are of order 1 here); an
// infinity must match exactly.
//
// Skipped, visibly, where there is no GPU or no NVRTC.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/base/shape.h"
#include "runtime/base/status_macros.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/jit/jit_compiler.h"
#include "runtime/op_registry.h"
#include "tests/testing/random_seed.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

// An operand: a scalar, or an array with its values (as doubles, converted to its dtype).
struct Input {
  bool is_scalar = false;
  ScalarValue scalar;
  TensorDesc desc;
  std::vector<double> values;
};

// Host bytes of `values` in `dtype`, converted as the CPU kernels convert float64 values.
std::vector<uint8_t> ToBytes(const std::vector<double>& values, DType dtype) {
  std::vector<float> as_float(values.begin(), values.end());
  std::vector<uint8_t> bytes(std::max<size_t>(values.size() * DTypeSize(dtype), 1));
  if (!values.empty()) {
    kernels::CastCpu({as_float.data(), DType::kFloat32, {static_cast<int64_t>(values.size())}},
                     {bytes.data(), dtype, {static_cast<int64_t>(values.size())}});
  }
  return bytes;
}

// `n` values for `dtype`, never 0: floats in +-[0.25, 2], integers in the type's small range.
std::vector<double> RandomValues(std::mt19937& rng, DType dtype, int64_t n) {
  std::vector<double> values(n);
  std::uniform_real_distribution<double> magnitude(0.25, 2.0);
  std::uniform_int_distribution<int> small(1, 100);
  std::bernoulli_distribution negative(0.5);
  for (double& v : values) {
    if (IsFloating(dtype)) {
      v = magnitude(rng) * (negative(rng) ? -1 : 1);
    } else {
      v = small(rng) * (dtype != DType::kUInt8 && negative(rng) ? -1 : 1);
    }
  }
  return values;
}

// Element `i` of `bytes` in `dtype`, widened to double.
double Element(const std::vector<uint8_t>& bytes, DType dtype, int64_t i) {
  double out = 0;
  float f = 0;
  int64_t n = 0;
  if (IsFloating(dtype)) {
    kernels::CastCpu({bytes.data() + i * DTypeSize(dtype), dtype, {}}, {&f, DType::kFloat32, {}});
    out = f;
  } else {
    kernels::CastCpu({bytes.data() + i * DTypeSize(dtype), dtype, {}}, {&n, DType::kInt64, {}});
    out = static_cast<double>(n);
  }
  return out;
}

class CudaOpsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<JitCompiler>> jit = JitCompiler::Create({});
    if (!jit.ok()) {
      skip_ = new std::string(absl::StrCat("no NVRTC: ", jit.status().message()));
      return;
    }
    CudaDeviceOptions options;
    options.jit = std::shared_ptr<JitCompiler>(*std::move(jit));
    absl::StatusOr<std::unique_ptr<CudaDevice>> cuda = CudaDevice::Create(options);
    if (!cuda.ok()) {
      skip_ = new std::string(absl::StrCat("no CUDA device: ", cuda.status().message()));
      return;
    }
    cuda_ = cuda->release();
    cpu_ = CpuDevice::Create({}).value().release();
  }

  void SetUp() override {
    if (skip_ != nullptr) GTEST_SKIP() << *skip_;
    rng_.seed(::gpukit::testing::TestSeed());
  }

  Input Array(DType dtype, Shape shape) {
    Input in;
    in.desc = {dtype, shape};
    in.values = RandomValues(rng_, dtype, ElementCount(shape).value());
    return in;
  }
  static Input FloatScalar(double v) {
    Input in;
    in.is_scalar = true;
    in.scalar.is_float = true;
    in.scalar.float_value = v;
    return in;
  }
  static Input IntScalar(int64_t v) {
    Input in;
    in.is_scalar = true;
    in.scalar.int_value = v;
    return in;
  }

  // Runs the op on `device`; returns the output's bytes.
  static absl::StatusOr<std::vector<uint8_t>> RunOn(Device& device, const OpDef& op,
                                                    const OpPlan& plan,
                                                    const std::vector<Input>& inputs) {
    GPUKIT_ASSIGN_OR_RETURN(StreamId stream, device.CreateStream(StreamPriority::kNormal));
    OpLaunch launch;
    launch.op = &op;
    launch.plan = plan;
    std::vector<BufferId> buffers;
    for (const Input& in : inputs) {
      OpOperand operand;
      operand.is_scalar = in.is_scalar;
      operand.scalar = in.scalar;
      if (!in.is_scalar) {
        const std::vector<uint8_t> bytes = ToBytes(in.values, in.desc.dtype);
        GPUKIT_ASSIGN_OR_RETURN(BufferId buffer, device.Allocate(bytes.size()));
        GPUKIT_RETURN_IF_ERROR(
            device.CopyHostToDevice(buffer, 0, bytes.data(), bytes.size(), stream));
        operand.buffer = buffer;
        operand.desc = in.desc;
        buffers.push_back(buffer);
      }
      launch.inputs.push_back(operand);
    }
    GPUKIT_ASSIGN_OR_RETURN(int64_t out_bytes, ByteSize(plan.output.shape, plan.output.dtype));
    const int64_t size = std::max<int64_t>(out_bytes, 1);
    GPUKIT_ASSIGN_OR_RETURN(launch.output, device.Allocate(size));
    buffers.push_back(launch.output);
    const std::vector<uint8_t> poison(size, 0xA5);
    GPUKIT_RETURN_IF_ERROR(device.CopyHostToDevice(launch.output, 0, poison.data(), size, stream));
    GPUKIT_RETURN_IF_ERROR(device.RunOp(launch, stream));
    std::vector<uint8_t> out(size);
    GPUKIT_RETURN_IF_ERROR(device.CopyDeviceToHost(out.data(), launch.output, 0, size, stream));
    GPUKIT_RETURN_IF_ERROR(SynchronizeStream(device, stream));
    for (BufferId b : buffers) GPUKIT_RETURN_IF_ERROR(device.Free(b));
    GPUKIT_RETURN_IF_ERROR(device.DestroyStream(stream));
    out.resize(out_bytes);
    return out;
  }

  enum class Tolerance { kExact, kAccumulated, kClose };

  // Runs `op` on both devices and compares. For kAccumulated, `magnitude(i)` bounds the
  // sum of |terms| of output element i (the scale of its rounding error).
  void Compare(const std::string& op_name, const std::vector<Input>& inputs, AttrMap attrs,
               Tolerance tolerance, const std::function<double(int64_t)>& magnitude = nullptr) {
    SCOPED_TRACE(op_name);
    const OpRegistry& registry = OpRegistry::Builtin();
    const OpDef* op = registry.Find(op_name).value();
    std::vector<OperandDesc> descs;
    for (const Input& in : inputs) {
      OperandDesc d;
      d.is_scalar = in.is_scalar;
      d.scalar = in.scalar;
      d.tensor = in.desc;
      descs.push_back(d);
    }
    absl::StatusOr<OpPlan> plan = registry.Plan(*op, descs, attrs);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<std::vector<uint8_t>> want = RunOn(*cpu_, *op, *plan, inputs);
    ASSERT_TRUE(want.ok()) << want.status();
    absl::StatusOr<std::vector<uint8_t>> got = RunOn(*cuda_, *op, *plan, inputs);
    ASSERT_TRUE(got.ok()) << got.status();
    const DType dtype = plan->output.dtype;
    const int64_t count = ElementCount(plan->output.shape).value();
    ASSERT_EQ(got->size(), want->size());
    double rel = 0;
    if (tolerance == Tolerance::kAccumulated || tolerance == Tolerance::kClose) {
      rel = dtype == DType::kFloat32 ? 1e-5 : (IsFloating(dtype) ? 1e-2 : 0);
    } else if (dtype == DType::kFloat16 || dtype == DType::kBFloat16) {
      rel = 0;
    }
    int failures = 0;
    for (int64_t i = 0; i < count && failures < 10; ++i) {
      const double w = Element(*want, dtype, i), g = Element(*got, dtype, i);
      if (std::isnan(w) && std::isnan(g)) continue;
      double allowed = rel * (magnitude ? magnitude(i) : std::fabs(w));
      if (tolerance == Tolerance::kClose) allowed = rel * (std::fabs(w) + 1);
      if (std::isinf(w) && g == w) continue;
      if (!(std::fabs(g - w) <= allowed)) {
        ADD_FAILURE() << op_name << " " << DTypeName(dtype) << " element " << i << ": cuda " << g
                      << ", cpu " << w << " (allowed difference " << allowed << ")";
        ++failures;
      }
    }
  }

  static Device* cuda_;
  static Device* cpu_;
  static std::string* skip_;
  std::mt19937 rng_;
};
Device* CudaOpsTest::cuda_ = nullptr;
Device* CudaOpsTest::cpu_ = nullptr;
std::string* CudaOpsTest::skip_ = nullptr;

TEST_F(CudaOpsTest, BinaryOpsForEveryDtypeAndLayout) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    for (const char* op : {"add", "sub", "mul", "div"}) {
      Compare(op, {Array(dtype, {1000}), Array(dtype, {1000})}, {}, Tolerance::kExact);
      Compare(op, {Array(dtype, {64, 33}), Array(dtype, {33})}, {}, Tolerance::kExact);
      Compare(op, {Array(dtype, {7, 1, 5}), Array(dtype, {3, 1})}, {}, Tolerance::kExact);
      Compare(op, {Array(dtype, {2, 3}), Array(dtype, {1})}, {}, Tolerance::kExact);
      Compare(op, {Array(dtype, {300}), FloatScalar(1.7)}, {}, Tolerance::kExact);
      Compare(op, {IntScalar(3), Array(dtype, {300})}, {}, Tolerance::kExact);
    }
  }
  // Mixed dtypes: the inputs are cast to the compute dtype first.
  Compare("add", {Array(DType::kInt32, {100}), Array(DType::kFloat32, {100})}, {},
          Tolerance::kExact);
  Compare("mul", {Array(DType::kUInt8, {10, 10}), Array(DType::kFloat16, {10})}, {},
          Tolerance::kExact);
  Compare("div", {Array(DType::kInt64, {50}), IntScalar(7)}, {}, Tolerance::kExact);
}

// Arrays past kMaxBlocks * 256 * 64 elements get more blocks rather than longer ones: every
// element is still computed once (the output starts poisoned).
TEST_F(CudaOpsTest, ElementWiseOpsOnArraysBeyondTheFixedGrid) {
  const int64_t n = (int64_t{8192} * 256 * 64) + 4099;  // 134 M elements: 268 MB in bfloat16
  Compare("add", {Array(DType::kBFloat16, {n}), FloatScalar(1.5)}, {}, Tolerance::kExact);
  Compare("exp", {Array(DType::kFloat16, {n})}, {}, Tolerance::kClose);
}

TEST_F(CudaOpsTest, AstypeBetweenEveryPairIncludingSpecialValues) {
  for (DType from : kAllDTypes) {
    for (DType to : kAllDTypes) {
      SCOPED_TRACE(absl::StrCat(DTypeName(from), " -> ", DTypeName(to)));
      Input in = Array(from, {257});
      if (IsFloating(from)) {
        // Rounding ties, saturation, NaN and infinities.
        const double special[] = {NAN, INFINITY, -INFINITY, 1e10, -1e10, 255.5, 256.0, -0.5,
                                  65504, 70000, 1.0009765625, 3.0e38, -2147483649.0};
        for (size_t i = 0; i < std::size(special); ++i) in.values[i] = special[i];
      } else {
        for (size_t i = 0; i < 5; ++i) in.values[i] = 100 + 37 * i;  // wraps into uint8
      }
      Compare("astype", {in}, {{"dtype", to}}, Tolerance::kExact);
    }
  }
}

TEST_F(CudaOpsTest, ReductionsOverEverythingRowsAndColumns) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    for (const char* op : {"sum", "mean", "max", "min"}) {
      const bool accumulates = std::string(op) == "sum" || std::string(op) == "mean";
      const Tolerance tol = accumulates ? Tolerance::kAccumulated : Tolerance::kExact;
      auto bound = [&](int64_t n) {  // |terms| <= 2 (floats) or 100 (integers), n of them
        const double per = IsFloating(dtype) ? 2.0 : 100.0;
        const double scale = std::string(op) == "mean" ? per : per * n;
        return [scale](int64_t) { return scale; };
      };
      Compare(op, {Array(dtype, {1 << 20})}, {}, tol, bound(1 << 20));    // sliced rows
      Compare(op, {Array(dtype, {37, 1000})}, {{"axis", int64_t{1}}}, tol, bound(1000));
      Compare(op, {Array(dtype, {1000, 37})}, {{"axis", int64_t{0}}}, tol, bound(1000));
      Compare(op, {Array(dtype, {3, 4, 5})}, {{"axis", int64_t{1}}, {"keepdims", true}}, tol,
              bound(4));
    }
  }
}

// NumPy's tuple of axes, one op: one run of reduced axes reduces as one axis does (rows or
// columns); runs apart are permuted reduced-last into a temporary and reduced as rows, sliced
// across blocks when there are few; no reduced run (axis = [], or axes of 1) keeps each element.
TEST_F(CudaOpsTest, ReductionsOverSeveralAxesAdjacentAndApart) {
  struct Case {
    Shape shape;
    std::vector<int64_t> axes;
    bool keepdims;
  };
  const Case cases[] = {
      {{8, 300, 5}, {0, 2}, false},      // apart: permuted, 300 rows of 40
      {{2, 3, 4, 5}, {0, 2}, true},      // apart with kept axes between and after
      {{4, 6, 1000}, {1, 2}, false},     // adjacent, last: rows of 6000
      {{64, 3, 50}, {0, 1}, false},      // adjacent, first: columns of 192
      {{5, 7, 9}, {-1, -3}, true},       // negative, apart
      {{4, 2, 1 << 16}, {0, 2}, false},  // apart, 2 rows of 2^18: sliced across blocks
      {{3, 1, 4, 1}, {1, 3}, false},     // only axes of 1: each element its own result
      {{3, 4, 5}, {}, false},            // axis = []
      {{2, 1, 3}, {0, 2}, true},         // apart only by an axis of 1: one run
  };
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    for (const Case& c : cases) {
      SCOPED_TRACE(ShapeToString(c.shape) + " axes " + ShapeToString(c.axes));
      const int64_t rank = static_cast<int64_t>(c.shape.size());
      int64_t reduced = 1;
      for (int64_t axis : c.axes) reduced *= c.shape[(axis + rank) % rank];
      for (const char* op : {"sum", "mean", "max", "min"}) {
        const bool accumulates = std::string(op) == "sum" || std::string(op) == "mean";
        const double per = IsFloating(dtype) ? 2.0 : 100.0;
        const double scale = std::string(op) == "sum" ? per * reduced : per;
        Compare(op, {Array(dtype, c.shape)}, {{"axis", c.axes}, {"keepdims", c.keepdims}},
                accumulates ? Tolerance::kAccumulated : Tolerance::kExact,
                [scale](int64_t) { return scale; });
      }
    }
    // An empty reduced axis: the empty sum and mean (max and min are refused when planned).
    Compare("sum", {Array(dtype, {2, 0, 3})}, {{"axis", std::vector<int64_t>{0, 1}}},
            Tolerance::kExact);
    Compare("mean", {Array(dtype, {2, 0, 3})}, {{"axis", std::vector<int64_t>{0, 1}}},
            Tolerance::kExact);
  }
}

// NumPy's 1-d operands, viewed in place: a [k] as [1, k], b [k] as [k, 1]. Floating inputs of
// one dtype take cuBLASLt where it is loaded; integers and mixed dtypes take gpukit's kernel.
TEST_F(CudaOpsTest, MatmulOfVectors) {
  struct Case {
    Shape a, b;
  };
  const Case cases[] = {{{48}, {48, 80}},    {{64, 48}, {48}},    {{48}, {48}},
                        {{3, 17, 33}, {33}}, {{33}, {3, 33, 9}},  {{2, 1, 8, 8}, {8}},
                        {{1}, {1}},          {{300}, {2, 300, 7}}};
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const double per = IsFloating(dtype) ? 4.0 : 1e4;
    const Tolerance tol = IsFloating(dtype) ? Tolerance::kAccumulated : Tolerance::kExact;
    for (const Case& c : cases) {
      SCOPED_TRACE(ShapeToString(c.a) + " x " + ShapeToString(c.b));
      const double k = static_cast<double>(c.a.back());
      Compare("matmul", {Array(dtype, c.a), Array(dtype, c.b)}, {}, tol,
              [&](int64_t) { return per * k; });
    }
  }
  // Mixed dtypes are cast and run on gpukit's kernel whatever the dtype.
  Compare("matmul", {Array(DType::kFloat16, {48}), Array(DType::kFloat32, {48, 80})}, {},
          Tolerance::kAccumulated, [](int64_t) { return 4.0 * 48; });
  Compare("matmul", {Array(DType::kBFloat16, {3, 17, 33}), Array(DType::kFloat32, {33})}, {},
          Tolerance::kAccumulated, [](int64_t) { return 4.0 * 33; });
}

TEST_F(CudaOpsTest, MatmulPlainBatchedAndBroadcast) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const double per = IsFloating(dtype) ? 4.0 : 1e4;
    const Tolerance tol = IsFloating(dtype) ? Tolerance::kAccumulated : Tolerance::kExact;
    Compare("matmul", {Array(dtype, {64, 48}), Array(dtype, {48, 80})}, {}, tol,
            [&](int64_t) { return per * 48; });
    Compare("matmul", {Array(dtype, {3, 17, 33}), Array(dtype, {3, 33, 9})}, {}, tol,
            [&](int64_t) { return per * 33; });
    Compare("matmul", {Array(dtype, {2, 1, 8, 8}), Array(dtype, {3, 8, 8})}, {}, tol,
            [&](int64_t) { return per * 8; });
  }
}

TEST_F(CudaOpsTest, TransposeAndReshapeMoveEveryElement) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    Compare("transpose", {Array(dtype, {5, 6, 7})}, {{"perm", std::vector<int64_t>{2, 0, 1}}},
            Tolerance::kExact);
    Compare("transpose", {Array(dtype, {33, 65})}, {}, Tolerance::kExact);
    Compare("reshape", {Array(dtype, {6, 10})}, {{"shape", std::vector<int64_t>{3, 20}}},
            Tolerance::kExact);
  }
}

constexpr DType kFloatDTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
constexpr DType kIntDTypes[] = {DType::kInt32, DType::kInt64, DType::kUInt8};

// Puts NaN, infinities and zeros at the front of a floating input.
void WithSpecials(Input& in) {
  const double special[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0};
  for (size_t i = 0; i < std::size(special) && i < in.values.size(); ++i) {
    in.values[i] = special[i];
  }
}

TEST_F(CudaOpsTest, UnaryMathForFloatDtypesIncludingSpecialValues) {
  for (DType dtype : kFloatDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    for (const char* op : {"exp", "log", "sqrt", "rsqrt", "abs", "neg", "relu", "gelu", "silu",
                           "sigmoid", "tanh"}) {
      Input in = Array(dtype, {1031});
      WithSpecials(in);
      Compare(op, {in}, {}, Tolerance::kClose);
      Compare(op, {Array(dtype, {7, 33})}, {}, Tolerance::kClose);
    }
  }
}

TEST_F(CudaOpsTest, UnaryOfIntegersKeepsOrConvertsTheDtype) {
  for (DType dtype : kIntDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    for (const char* op : {"abs", "neg", "relu"}) {
      Input in = Array(dtype, {300});
      if (dtype == DType::kInt32) in.values[0] = -2147483648.0;  // abs wraps
      Compare(op, {in}, {}, Tolerance::kExact);
    }
    Compare("exp", {Array(dtype, {300})}, {}, Tolerance::kClose);  // float32
    Compare("sqrt", {Array(dtype, {300})}, {}, Tolerance::kClose);
  }
}

TEST_F(CudaOpsTest, ClampWithEitherBoundForEveryDtype) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    Input in = Array(dtype, {517});
    if (IsFloating(dtype)) WithSpecials(in);
    const int64_t lo = dtype == DType::kUInt8 ? 20 : -20;
    Compare("clamp", {in}, {{"min", lo}, {"max", int64_t{50}}}, Tolerance::kExact);
    Compare("clamp", {in}, {{"max", int64_t{30}}}, Tolerance::kExact);
    Compare("clamp", {in}, {{"min", -0.3}, {"max", 0.7}}, Tolerance::kExact);
    Compare("clamp", {in}, {{"min", 1.5}}, Tolerance::kExact);
  }
}

TEST_F(CudaOpsTest, WhereBroadcastsAndReadsAnyConditionDtype) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    for (DType cond_dtype : {DType::kUInt8, DType::kFloat32, DType::kBFloat16, DType::kInt64}) {
      Input cond = Array(cond_dtype, {64, 33});
      for (size_t i = 0; i < cond.values.size(); i += 3) cond.values[i] = 0;  // some false
      if (IsFloating(cond_dtype)) {
        cond.values[1] = -0.0;
        cond.values[2] = NAN;
      }
      Compare("where", {cond, Array(dtype, {64, 33}), Array(dtype, {64, 33})}, {},
              Tolerance::kExact);
      Compare("where", {cond, Array(dtype, {33}), FloatScalar(1.5)}, {}, Tolerance::kExact);
    }
    Input column = Array(DType::kUInt8, {7, 1, 5});
    column.values[0] = 0;
    Compare("where", {column, Array(dtype, {3, 1}), Array(dtype, {1})}, {}, Tolerance::kExact);
  }
}

TEST_F(CudaOpsTest, ArgmaxOverRowsColumnsAndEverythingWithTiesAndNan) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    Input big = Array(dtype, {100000});  // integers repeat: ties go to the first index
    Compare("argmax", {big}, {}, Tolerance::kExact);
    Compare("argmax", {Array(dtype, {37, 1000})}, {{"axis", int64_t{1}}}, Tolerance::kExact);
    Compare("argmax", {Array(dtype, {1000, 37})}, {{"axis", int64_t{0}}}, Tolerance::kExact);
    Compare("argmax", {Array(dtype, {3, 4, 5})}, {{"axis", int64_t{1}}, {"keepdims", true}},
            Tolerance::kExact);
    if (IsFloating(dtype)) {
      Input nan = Array(dtype, {4, 300});
      nan.values[17] = NAN;
      nan.values[250] = NAN;
      nan.values[301] = INFINITY;
      nan.values[900] = NAN;
      Compare("argmax", {nan}, {{"axis", int64_t{-1}}}, Tolerance::kExact);
      Compare("argmax", {nan}, {{"axis", int64_t{0}}}, Tolerance::kExact);
      Compare("argmax", {nan}, {}, Tolerance::kExact);
    }
  }
}

TEST_F(CudaOpsTest, SoftmaxLayernormRmsnorm) {
  for (DType dtype : kFloatDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    Compare("softmax", {Array(dtype, {37, 1000})}, {}, Tolerance::kClose);
    Compare("softmax", {Array(dtype, {5, 7, 3})}, {{"axis", int64_t{1}}}, Tolerance::kClose);
    Compare("softmax", {Array(dtype, {3, 5000})}, {}, Tolerance::kClose);
    Compare("layernorm", {Array(dtype, {33, 256})}, {}, Tolerance::kClose);
    Compare("layernorm", {Array(dtype, {4, 5, 96}), Array(dtype, {96}), Array(dtype, {96})},
            {{"eps", 1e-3}}, Tolerance::kClose);
    Compare("rmsnorm", {Array(dtype, {33, 4096})}, {}, Tolerance::kClose);
    Compare("rmsnorm", {Array(dtype, {7, 100}), Array(dtype, {100})}, {}, Tolerance::kClose);
  }
  Compare("softmax", {Array(DType::kInt32, {4, 10})}, {}, Tolerance::kClose);  // float32
  Compare("layernorm", {Array(DType::kFloat16, {4, 64}), Array(DType::kFloat32, {64})}, {},
          Tolerance::kClose);
}

TEST_F(CudaOpsTest, RopeAtLargePositions) {
  for (DType dtype : kFloatDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    Compare("rope", {Array(dtype, {4, 33, 64})}, {}, Tolerance::kClose);
    Compare("rope", {Array(dtype, {2, 3, 17, 128})},
            {{"offset", int64_t{8000}}, {"base", 500000.0}}, Tolerance::kClose);
  }
}

TEST_F(CudaOpsTest, AttentionPlainCausalAndUnequalLengths) {
  for (DType dtype : kFloatDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    for (bool causal : {false, true}) {
      Compare("attention",
              {Array(dtype, {4, 17, 64}), Array(dtype, {4, 300, 64}), Array(dtype, {4, 300, 48})},
              {{"causal", causal}}, Tolerance::kClose);
      Compare("attention",
              {Array(dtype, {2, 40, 32}), Array(dtype, {2, 40, 32}), Array(dtype, {2, 40, 32})},
              {{"causal", causal}, {"scale", 0.05}}, Tolerance::kClose);
      // More queries than keys: with causal, the first queries see nothing (zeros).
      Compare("attention",
              {Array(dtype, {3, 9, 16}), Array(dtype, {3, 4, 16}), Array(dtype, {3, 4, 300})},
              {{"causal", causal}}, Tolerance::kClose);
    }
  }
}

TEST_F(CudaOpsTest, EmbeddingGathersAndZeroesOutOfRangeRows) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    for (DType index_dtype : {DType::kInt32, DType::kInt64}) {
      // Indices in +-[1, 100] against 50 rows: many are out of range.
      Compare("embedding", {Array(dtype, {50, 24}), Array(index_dtype, {7, 30})}, {},
              Tolerance::kExact);
    }
  }
}

TEST_F(CudaOpsTest, ConcatAlongEveryAxisWithPromotion) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    Compare("concat", {Array(dtype, {3, 4, 5}), Array(dtype, {2, 4, 5})}, {}, Tolerance::kExact);
    Compare("concat", {Array(dtype, {3, 1, 5}), Array(dtype, {3, 6, 5}), Array(dtype, {3, 2, 5})},
            {{"axis", int64_t{1}}}, Tolerance::kExact);
    Compare("concat", {Array(dtype, {3, 4, 5}), Array(dtype, {3, 4, 1})}, {{"axis", int64_t{-1}}},
            Tolerance::kExact);
  }
  Compare("concat", {Array(DType::kInt32, {10}), Array(DType::kFloat16, {20})}, {},
          Tolerance::kExact);
}

}  // namespace
}  // namespace gpukit
