// What of the cuBLASLt matmul path runs without a GPU: which planned matmuls go to cuBLASLt
// (RouteMatmul), the row-major -> column-major description handed to it (ToColumnMajor,
// checked by carrying out that column-major GEMM on the host exactly as cuBLASLt defines it
// and comparing with a row-major matmul), shape validation, the plan cache's key, the
// matmul op's allow_tf32 attribute, and loading libcublasLt from the CUDA toolkit.
#include <cublasLt.h>  // the tile ids

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/matmul_plan.h"
#include "runtime/jit/library_search.h"
#include "runtime/op_registry.h"
#include "tests/testing/random_seed.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;

TensorDesc T(DType dtype, Shape shape) { return {dtype, std::move(shape)}; }

// Plans the matmul through the registry, as the daemon does, and routes it.
MatmulRoute Route(const TensorDesc& a, const TensorDesc& b, AttrMap attrs = {}) {
  const OpRegistry& registry = OpRegistry::Builtin();
  const OpDef* op = registry.Find("matmul").value();
  std::vector<OperandDesc> inputs(2);
  inputs[0].tensor = a;
  inputs[1].tensor = b;
  absl::StatusOr<OpPlan> plan = registry.Plan(*op, inputs, attrs);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return RouteMatmul(a, b, plan.value_or(OpPlan{}));
}

// ---- Routing ----

struct RouteCase {
  std::string name;
  TensorDesc a, b;
  MatmulRoute::Kind kind;
  int64_t m, n, k, batch, a_stride, b_stride;  // when kCublasLt
};

class RouteMatmulTest : public ::testing::TestWithParam<RouteCase> {};

TEST_P(RouteMatmulTest, SendsWhatCublasLtTakesAndSaysWhyNot) {
  const RouteCase& c = GetParam();
  const MatmulRoute route = Route(c.a, c.b);
  ASSERT_EQ(route.kind, c.kind) << route.reason;
  if (c.kind == MatmulRoute::Kind::kFallback) {
    EXPECT_FALSE(route.reason.empty());
  }
  if (c.kind != MatmulRoute::Kind::kCublasLt) return;
  EXPECT_EQ(route.shape.dtype, c.a.dtype);
  EXPECT_EQ(route.shape.m, c.m);
  EXPECT_EQ(route.shape.n, c.n);
  EXPECT_EQ(route.shape.k, c.k);
  EXPECT_EQ(route.shape.batch, c.batch);
  EXPECT_EQ(route.shape.a_batch_stride, c.a_stride);
  EXPECT_EQ(route.shape.b_batch_stride, c.b_stride);
  EXPECT_FALSE(route.shape.transpose_a);
  EXPECT_FALSE(route.shape.transpose_b);
  EXPECT_EQ(route.shape.epilogue, MatmulEpilogue::kNone);
  EXPECT_FALSE(route.shape.allow_tf32);
}

using K = MatmulRoute::Kind;
constexpr DType F32 = DType::kFloat32, F16 = DType::kFloat16, BF16 = DType::kBFloat16;

INSTANTIATE_TEST_SUITE_P(
    Cases, RouteMatmulTest,
    ::testing::Values(
        RouteCase{"Plain2d", T(F32, {17, 9}), T(F32, {9, 33}), K::kCublasLt, 17, 33, 9, 1, 0, 0},
        RouteCase{"OneByOne", T(F16, {1, 1}), T(F16, {1, 1}), K::kCublasLt, 1, 1, 1, 1, 0, 0},
        RouteCase{"Batched", T(BF16, {4, 5, 3}), T(BF16, {4, 3, 2}), K::kCublasLt, 5, 2, 3, 4, 15,
                  6},
        RouteCase{"MultiDimBatch", T(F32, {2, 3, 5, 3}), T(F32, {2, 3, 3, 2}), K::kCublasLt, 5, 2,
                  3, 6, 15, 6},
        RouteCase{"BBroadcast", T(F32, {4, 5, 3}), T(F32, {3, 2}), K::kCublasLt, 5, 2, 3, 4, 15, 0},
        RouteCase{"ABroadcast", T(F32, {5, 3}), T(F32, {4, 3, 2}), K::kCublasLt, 5, 2, 3, 4, 0, 6},
        RouteCase{"ABroadcastWithOnes", T(F32, {1, 1, 5, 3}), T(F32, {2, 2, 3, 2}), K::kCublasLt, 5,
                  2, 3, 4, 0, 6},
        RouteCase{"LeadingOneIsNoBroadcast", T(F32, {1, 4, 5, 3}), T(F32, {4, 3, 2}), K::kCublasLt,
                  5, 2, 3, 4, 15, 6},
        RouteCase{"BatchOfOne", T(F32, {1, 5, 3}), T(F32, {1, 3, 2}), K::kCublasLt, 5, 2, 3, 1, 0,
                  0},
        // NumPy's 1-d operands are viewed in place: a [k] as [1, k], b [k] as [k, 1].
        RouteCase{"VectorTimesMatrix", T(F32, {3}), T(F32, {3, 5}), K::kCublasLt, 1, 5, 3, 1, 0, 0},
        RouteCase{"MatrixTimesVector", T(F16, {4, 3}), T(F16, {3}), K::kCublasLt, 4, 1, 3, 1, 0, 0},
        RouteCase{"VectorDotVector", T(BF16, {7}), T(BF16, {7}), K::kCublasLt, 1, 1, 7, 1, 0, 0},
        RouteCase{"VectorTimesBatch", T(F32, {3}), T(F32, {4, 3, 2}), K::kCublasLt, 1, 2, 3, 4, 0,
                  6},
        RouteCase{"BatchTimesVector", T(F32, {2, 4, 5, 3}), T(F32, {3}), K::kCublasLt, 5, 1, 3, 8,
                  15, 0},
        RouteCase{"EmptyVectorIsZeroK", T(F32, {0}), T(F32, {0, 3}), K::kFallback},
        RouteCase{"CrossBroadcastFallsBack", T(F32, {2, 1, 5, 3}), T(F32, {1, 3, 3, 2}),
                  K::kFallback},
        RouteCase{"PartialBroadcastFallsBack", T(F32, {2, 3, 5, 3}), T(F32, {3, 3, 2}),
                  K::kFallback},
        RouteCase{"IntegersFallBack", T(DType::kInt32, {2, 2}), T(DType::kInt32, {2, 2}),
                  K::kFallback},
        RouteCase{"MixedDtypesFallBack", T(F16, {2, 2}), T(F32, {2, 2}), K::kFallback},
        RouteCase{"ZeroKFallsBack", T(F32, {2, 0}), T(F32, {0, 3}), K::kFallback},
        RouteCase{"EmptyOutputIsNothingToDo", T(F32, {0, 4}), T(F32, {4, 3}), K::kNothingToDo},
        RouteCase{"EmptyBatchIsNothingToDo", T(F32, {0, 2, 4}), T(F32, {4, 3}), K::kNothingToDo}),
    [](const ::testing::TestParamInfo<RouteCase>& info) { return info.param.name; });

TEST(RouteMatmulTest, Tf32OnlyWhenAskedAndOnlyForFloat32) {
  EXPECT_FALSE(Route(T(F32, {4, 4}), T(F32, {4, 4})).shape.allow_tf32);
  EXPECT_FALSE(Route(T(F32, {4, 4}), T(F32, {4, 4}), {{"allow_tf32", false}}).shape.allow_tf32);
  EXPECT_TRUE(Route(T(F32, {4, 4}), T(F32, {4, 4}), {{"allow_tf32", true}}).shape.allow_tf32);
  const MatmulRoute half = Route(T(BF16, {4, 4}), T(BF16, {4, 4}), {{"allow_tf32", true}});
  EXPECT_EQ(half.kind, K::kCublasLt);
  EXPECT_FALSE(half.shape.allow_tf32);
}

TEST(MatmulOpDefTest, AllowTf32IsABoolAttribute) {
  const OpRegistry& registry = OpRegistry::Builtin();
  const OpDef* op = registry.Find("matmul").value();
  std::vector<OperandDesc> inputs(2);
  inputs[0].tensor = T(F32, {2, 3});
  inputs[1].tensor = T(F32, {3, 4});
  GPUKIT_ASSERT_OK_AND_ASSIGN(OpPlan plain, registry.Plan(*op, inputs, {}));
  EXPECT_FALSE(plain.params.allow_tf32);
  GPUKIT_ASSERT_OK_AND_ASSIGN(OpPlan tf32, registry.Plan(*op, inputs, {{"allow_tf32", true}}));
  EXPECT_TRUE(tf32.params.allow_tf32);
  EXPECT_THAT(registry.Plan(*op, inputs, {{"allow_tf32", int64_t{1}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("allow_tf32")));
}

// ---- The column-major description ----

// cuBLASLt's definition, carried out on the host: D[b] = op(A[b]) op(B[b]), every matrix
// column-major (element (r, c) at r + c * ld), matrix b of a batch `batch_stride` further.
void ColumnMajorGemm(const LtGemmLayout& lt, const std::vector<double>& a,
                     const std::vector<double>& b, std::vector<double>& d) {
  const int64_t rows = static_cast<int64_t>(lt.d.rows), cols = static_cast<int64_t>(lt.d.cols);
  const int64_t inner = static_cast<int64_t>(lt.transpose_a ? lt.a.rows : lt.a.cols);
  auto at = [](const LtMatrix& m, const std::vector<double>& data, int64_t batch, int64_t r,
               int64_t c) {
    EXPECT_LT(r, static_cast<int64_t>(m.rows));
    EXPECT_LT(c, static_cast<int64_t>(m.cols));
    return data.at(batch * m.batch_stride + r + c * m.ld);
  };
  for (int64_t batch = 0; batch < lt.d.batch_count; ++batch) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < inner; ++l) {
          const double x = lt.transpose_a ? at(lt.a, a, batch, l, i) : at(lt.a, a, batch, i, l);
          const double y = lt.transpose_b ? at(lt.b, b, batch, j, l) : at(lt.b, b, batch, l, j);
          sum += x * y;
        }
        d.at(batch * lt.d.batch_stride + i + j * lt.d.ld) = sum;
      }
    }
  }
}

struct GemmCase {
  int64_t m, n, k, batch;
  bool broadcast_a, broadcast_b, transpose_a, transpose_b;
};

class ToColumnMajorTest : public ::testing::TestWithParam<GemmCase> {};

// gpukit's a is cuBLASLt's B, its b cuBLASLt's A, and D is the row-major output itself.
TEST_P(ToColumnMajorTest, ComputesTheRowMajorProduct) {
  const GemmCase& c = GetParam();
  const uint32_t seed = ::gpukit::testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (GPUKIT_TEST_SEED)");
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> value(0.25, 2.0);
  MatmulShape s;
  s.m = c.m;
  s.n = c.n;
  s.k = c.k;
  s.batch = c.batch;
  s.transpose_a = c.transpose_a;
  s.transpose_b = c.transpose_b;
  s.a_batch_stride = c.broadcast_a || c.batch == 1 ? 0 : c.m * c.k;
  s.b_batch_stride = c.broadcast_b || c.batch == 1 ? 0 : c.k * c.n;
  GPUKIT_ASSERT_OK(ValidateMatmulShape(s));
  const int64_t a_matrices = c.broadcast_a ? 1 : c.batch, b_matrices = c.broadcast_b ? 1 : c.batch;
  std::vector<double> a(a_matrices * c.m * c.k), b(b_matrices * c.k * c.n);
  for (double& v : a) v = value(rng);
  for (double& v : b) v = value(rng);

  // Row-major reference: a[batch] is [m, k] (or stored [k, m] when transposed), b[batch]
  // [k, n] (or [n, k]).
  std::vector<double> expected(c.batch * c.m * c.n);
  for (int64_t batch = 0; batch < c.batch; ++batch) {
    const double* ab = a.data() + (c.broadcast_a ? 0 : batch * c.m * c.k);
    const double* bb = b.data() + (c.broadcast_b ? 0 : batch * c.k * c.n);
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < c.k; ++l) {
          sum += (c.transpose_a ? ab[l * c.m + i] : ab[i * c.k + l]) *
                 (c.transpose_b ? bb[j * c.k + l] : bb[l * c.n + j]);
        }
        expected[batch * c.m * c.n + i * c.n + j] = sum;
      }
    }
  }

  const LtGemmLayout lt = ToColumnMajor(s);
  EXPECT_EQ(lt.d.batch_count, c.batch);
  EXPECT_GE(lt.a.ld, static_cast<int64_t>(lt.a.rows));  // cuBLASLt's requirement
  EXPECT_GE(lt.b.ld, static_cast<int64_t>(lt.b.rows));
  EXPECT_GE(lt.d.ld, static_cast<int64_t>(lt.d.rows));
  std::vector<double> out(expected.size(), -1e300);
  ColumnMajorGemm(lt, b, a, out);  // cuBLASLt's A is gpukit's b
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_NEAR(out[i], expected[i], 1e-9 * c.k) << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ToColumnMajorTest,
                         ::testing::Values(GemmCase{1, 1, 1, 1, false, false, false, false},
                                           GemmCase{17, 33, 9, 1, false, false, false, false},
                                           GemmCase{17, 33, 9, 1, false, false, true, false},
                                           GemmCase{17, 33, 9, 1, false, false, false, true},
                                           GemmCase{17, 33, 9, 1, false, false, true, true},
                                           GemmCase{5, 7, 3, 4, false, false, false, false},
                                           GemmCase{5, 7, 3, 4, true, false, true, false},
                                           GemmCase{5, 7, 3, 4, false, true, false, true},
                                           GemmCase{6, 2, 8, 3, false, false, true, true},
                                           GemmCase{1, 9, 4, 2, false, true, false, false},
                                           GemmCase{9, 1, 4, 2, true, false, false, true}));

// ---- Slices ----

MatmulShape Big(DType dtype, int64_t m, int64_t n, int64_t k, int64_t batch = 1) {
  MatmulShape s;
  s.dtype = dtype;
  s.m = m;
  s.n = n;
  s.k = k;
  s.batch = batch;
  s.a_batch_stride = batch > 1 ? m * k : 0;
  s.b_batch_stride = batch > 1 ? k * n : 0;
  return s;
}

TEST(PlanMatmulSlicesTest, CutsRowsInQuantaNearTheTarget) {
  const MatmulShape s = Big(BF16, 8192, 8192, 8192);
  ASSERT_TRUE(MatmulMaySlice(s));
  // 7.6e10 FLOPs is about 100 us of an H100 in bfloat16; a row costs 2 * 8192 * 8192.
  const MatmulSlicing slicing = PlanMatmulSlices(s, 7.6e10);
  EXPECT_EQ(slicing.axis, MatmulSlicing::Axis::kRows);
  EXPECT_EQ(slicing.per_slice % kMatmulSliceRowQuantum, 0);
  EXPECT_EQ(slicing.per_slice, 512);  // 566 rows fit; 512 is the quantum multiple below
  EXPECT_EQ(slicing.count, 16);
  MatmulShape one_slice = s;
  one_slice.m = slicing.per_slice;
  EXPECT_LE(MatmulFlops(one_slice), 7.6e10);
}

TEST(PlanMatmulSlicesTest, NothingToCut) {
  const MatmulShape s = Big(BF16, 8192, 8192, 8192);
  EXPECT_EQ(PlanMatmulSlices(s, 0), MatmulSlicing{});             // no target
  EXPECT_EQ(PlanMatmulSlices(s, -1), MatmulSlicing{});            // no target
  EXPECT_EQ(PlanMatmulSlices(s, MatmulFlops(s)), MatmulSlicing{});  // fits in one
  // Below kMinSliceableMatmulFlops: never sliced, whatever the target.
  const MatmulShape small = Big(BF16, 1024, 512, 512);
  EXPECT_FALSE(MatmulMaySlice(small));
  EXPECT_EQ(PlanMatmulSlices(small, 1), MatmulSlicing{});
  // A transposed a has no contiguous row blocks; too few rows for two quanta.
  MatmulShape transposed = s;
  transposed.transpose_a = true;
  EXPECT_FALSE(MatmulMaySlice(transposed));
  EXPECT_EQ(PlanMatmulSlices(transposed, 1e9), MatmulSlicing{});
  const MatmulShape thin = Big(F32, 255, 1 << 20, 1 << 12);
  EXPECT_FALSE(MatmulMaySlice(thin));
  // Two quanta of rows and a target between one and two: two slices of one quantum.
  const MatmulShape rows_256 = Big(F32, 256, 1 << 14, 1 << 14);
  EXPECT_EQ(PlanMatmulSlices(rows_256, MatmulFlops(rows_256) * 0.75),
            (MatmulSlicing{MatmulSlicing::Axis::kRows, 128, 2}));
}

TEST(PlanMatmulSlicesTest, AtLeastOneQuantumAndAtMostTheCap) {
  const MatmulShape s = Big(F32, 4096, 4096, 4096);
  const MatmulSlicing tiny = PlanMatmulSlices(s, 1);
  EXPECT_EQ(tiny.per_slice, kMatmulSliceRowQuantum);
  EXPECT_EQ(tiny.count, 4096 / kMatmulSliceRowQuantum);
  const MatmulShape tall = Big(BF16, 1 << 20, 256, 64);
  const MatmulSlicing capped = PlanMatmulSlices(tall, 1);
  EXPECT_LE(capped.count, kMaxMatmulSlices);
  EXPECT_EQ(capped.per_slice % kMatmulSliceRowQuantum, 0);
  EXPECT_GE(capped.per_slice * capped.count, tall.m);
}

TEST(PlanMatmulSlicesTest, BatchesAreCutIntoWholeEntries) {
  const MatmulShape s = Big(F16, 2048, 2048, 2048, /*batch=*/12);
  MatmulShape entry = s;
  entry.batch = 1;
  const MatmulSlicing slicing = PlanMatmulSlices(s, 2.5 * MatmulFlops(entry));
  EXPECT_EQ(slicing.axis, MatmulSlicing::Axis::kBatch);
  EXPECT_EQ(slicing.per_slice, 2);
  EXPECT_EQ(slicing.count, 6);
  // One entry above the target is not cut further.
  const MatmulSlicing each = PlanMatmulSlices(s, 1);
  EXPECT_EQ(each.per_slice, 1);
  EXPECT_EQ(each.count, 12);
  // A transposed a is no obstacle to batch slices.
  MatmulShape transposed = s;
  transposed.transpose_a = true;
  EXPECT_EQ(PlanMatmulSlices(transposed, 1).count, 12);
}

// ---- cuBLASLt's tile sizes, read from cublasLt.h at build time ----

TEST(CublasLtTileSizeTest, EveryIdTheHeaderNamesHasItsSize) {
  const std::optional<CublasLtTile> wide = CublasLtTileSize(CUBLASLT_MATMUL_TILE_128x256);
  ASSERT_TRUE(wide.has_value());
  EXPECT_EQ(wide->m, 128);
  EXPECT_EQ(wide->n, 256);
  const std::optional<CublasLtTile> tall = CublasLtTileSize(CUBLASLT_MATMUL_TILE_320x128);
  ASSERT_TRUE(tall.has_value());
  EXPECT_EQ(tall->m, 320);
  EXPECT_EQ(tall->n, 128);
  const std::optional<CublasLtTile> narrow = CublasLtTileSize(CUBLASLT_MATMUL_TILE_256x96);
  ASSERT_TRUE(narrow.has_value());
  EXPECT_EQ(narrow->n, 96);
  EXPECT_FALSE(CublasLtTileSize(CUBLASLT_MATMUL_TILE_UNDEFINED).has_value());
  EXPECT_FALSE(CublasLtTileSize(CUBLASLT_MATMUL_TILE_END).has_value());
}

// ---- Slices along the algorithm's waves ----

// The waves `slicing` of `shape` takes on `grid`.
int64_t WavesOfSlices(const MatmulShape& shape, const MatmulSlicing& slicing,
                      const MatmulGrid& grid) {
  int64_t waves = 0;
  for (int64_t i = 0; i < slicing.count; ++i) {
    waves += MatmulWaves(SliceOfMatmul(shape, slicing, i).shape, grid);
  }
  return waves;
}

// 8192^3 float16 on an H200 (132 SMs), tiles of 128 rows x 320 columns: 64 x 26 of them.
const MatmulGrid kH200Float16{128, 320, 132};

TEST(MatmulWavesTest, TilesOverTheSmsWithRowsOfTilesInPairs) {
  EXPECT_EQ(MatmulWaves(Big(F16, 8192, 8192, 8192), kH200Float16), 13);     // 1664 tiles
  EXPECT_EQ(MatmulWaves(Big(F16, 8192, 8192, 8192, 3), kH200Float16), 38);  // 4992
  EXPECT_EQ(MatmulWaves(Big(F16, 512, 8192, 8192), kH200Float16), 1);       // 4 x 26 = 104
  // 5 rows of tiles cost 6: 156 tiles, two waves (slices of 640 rows ran at half speed).
  EXPECT_EQ(MatmulWaves(Big(F16, 640, 8192, 8192), kH200Float16), 2);
  EXPECT_EQ(MatmulWaves(Big(F16, 8192, 8192, 8192), MatmulGrid{}), 0);
  EXPECT_EQ(MatmulWaves(Big(F16, 8192, 8192, 8192), MatmulGrid{128, 320, 0}), 0);
}

// 8192^3 float32 at a normal-priority stream's 500 us (2.55e10 FLOPs, one quantum of rows):
// cut by FLOPs alone it is 64 slices of 128 rows, a wave each: 64 waves for the whole's 16
// (it ran at a quarter of the whole's speed on an H200). Along the grid (tiles of 256 rows):
// 16 slices of 512 rows, the whole's 16 waves.
TEST(PlanMatmulSlicesTest, SlicesAlongTheGridCostTheWholesWaves) {
  const MatmulShape s = Big(F32, 8192, 8192, 8192);
  const MatmulGrid grid{256, 128, 132};
  ASSERT_EQ(MatmulWaves(s, grid), 16);
  const MatmulSlicing by_flops = PlanMatmulSlices(s, 2.55e10);
  EXPECT_EQ(by_flops, (MatmulSlicing{MatmulSlicing::Axis::kRows, 128, 64}));
  EXPECT_EQ(WavesOfSlices(s, by_flops, grid), 64);
  const MatmulSlicing along = PlanMatmulSlices(s, 2.55e10, grid);
  EXPECT_EQ(along, (MatmulSlicing{MatmulSlicing::Axis::kRows, 512, 16}));
  EXPECT_EQ(WavesOfSlices(s, along, grid), 16);

  // float16 at 500 us (3.76e11 FLOPs: 21 quanta): 4 slices of 2560 rows, the whole's 13
  // waves (2688 rows, the FLOPs' cut, would take 16).
  const MatmulShape h = Big(F16, 8192, 8192, 8192);
  const MatmulSlicing normal = PlanMatmulSlices(h, 3.76e11, kH200Float16);
  EXPECT_EQ(normal, (MatmulSlicing{MatmulSlicing::Axis::kRows, 2560, 4}));
  EXPECT_EQ(WavesOfSlices(h, normal, kH200Float16), 13);
  EXPECT_EQ(WavesOfSlices(h, PlanMatmulSlices(h, 3.76e11), kH200Float16), 16);
}

// Where the target falls on an odd row of tiles: 640 rows (5 quanta) by FLOPs are 12 slices
// of two waves and one of one, 25; along the grid the slices keep to one wave, 512 rows: 16.
TEST(PlanMatmulSlicesTest, AlongTheGridNeverAcrossAWave) {
  const MatmulShape h = Big(F16, 8192, 8192, 8192);
  const double five_quanta = 5.5 * MatmulFlops(Big(F16, 128, 8192, 8192));
  const MatmulSlicing by_flops = PlanMatmulSlices(h, five_quanta);
  EXPECT_EQ(by_flops.per_slice, 640);
  EXPECT_EQ(WavesOfSlices(h, by_flops, kH200Float16), 25);
  const MatmulSlicing along = PlanMatmulSlices(h, five_quanta, kH200Float16);
  EXPECT_EQ(along, (MatmulSlicing{MatmulSlicing::Axis::kRows, 512, 16}));
  EXPECT_EQ(WavesOfSlices(h, along, kH200Float16), 16);
  // A target below one wave (one quantum, 52 tiles): slices grow to the largest that still
  // takes one wave.
  EXPECT_EQ(PlanMatmulSlices(h, 1, kH200Float16).per_slice, 512);
}

// The QoS benchmark's flood on a green context of 66 SMs, at the whole GPU's 100 us target
// (7.5e10 FLOPs): 16 slices of 512 rows, as by FLOPs alone. A target scaled to 66 SMs gave
// 32 of 256 rows (a wave each, 14 SMs idle), which cost the flood and the victim both.
TEST(PlanMatmulSlicesTest, AGreenContextCountsItsWavesOnItsSms) {
  const MatmulShape h = Big(BF16, 8192, 8192, 8192);
  const MatmulGrid on_66{128, 320, 66};
  EXPECT_EQ(PlanMatmulSlices(h, 7.5e10, on_66),
            (MatmulSlicing{MatmulSlicing::Axis::kRows, 512, 16}));
  EXPECT_EQ(PlanMatmulSlices(h, 7.5e10 / 2, on_66),
            (MatmulSlicing{MatmulSlicing::Axis::kRows, 256, 32}));
}

TEST(PlanMatmulSlicesTest, NoSlicesWhereTheWholeIsOneWave) {
  // 15 (so 16) x 8 = 128 tiles: one wave however it is cut.
  const MatmulShape s = Big(F32, 1920, 4096, 4096);
  ASSERT_TRUE(MatmulMaySlice(s));
  EXPECT_GT(PlanMatmulSlices(s, MatmulFlops(s) / 8).count, 1);
  EXPECT_EQ(PlanMatmulSlices(s, MatmulFlops(s) / 8, MatmulGrid{128, 512, 132}), MatmulSlicing{});
}

TEST(PlanMatmulSlicesTest, BatchSlicesAlongTheGrid) {
  // 12 entries of 64 tiles: two entries fill one wave of 132 SMs.
  const MatmulShape s = Big(F16, 1024, 2048, 1024, /*batch=*/12);
  MatmulShape entry = s;
  entry.batch = 1;
  const MatmulGrid grid{128, 256, 132};
  EXPECT_EQ(PlanMatmulSlices(s, MatmulFlops(entry), grid),
            (MatmulSlicing{MatmulSlicing::Axis::kBatch, 2, 6}));
  EXPECT_EQ(PlanMatmulSlices(s, MatmulFlops(entry)).per_slice, 1);
}

TEST(PlanMatmulSlicesTest, AlongTheGridStillAtMostTheCap) {
  // On 2 SMs a wave is 2 units of 128 rows (2 tiles each), so only the cap keeps the 8192
  // units of this shape from 4096 slices of one wave.
  const MatmulShape tall = Big(BF16, 1 << 20, 256, 64);
  const MatmulSlicing capped = PlanMatmulSlices(tall, 1, MatmulGrid{128, 256, 2});
  EXPECT_EQ(capped.count, kMaxMatmulSlices);
  EXPECT_EQ(capped.per_slice * capped.count, tall.m);
  EXPECT_EQ(capped.per_slice % kMatmulSliceRowQuantum, 0);
}

TEST(PlanMatmulSlicesTest, NoTargetNoSlicesWithAGrid) {
  const MatmulShape s = Big(F16, 8192, 8192, 8192);
  EXPECT_EQ(PlanMatmulSlices(s, 0, kH200Float16), MatmulSlicing{});
  EXPECT_EQ(PlanMatmulSlices(s, std::numeric_limits<double>::quiet_NaN(), kH200Float16),
            MatmulSlicing{});
}

TEST(EstimatedMatmulFlopsTest, MatchesTheH100AndOrdersTheDtypes) {
  // An H100 SXM: 132 SMs; cuBLAS reaches about 7.7e14 in bfloat16 and 5.1e13 in float32.
  EXPECT_NEAR(EstimatedMatmulFlopsPerSecond(9, 132, BF16, false), 7.5e14, 0.5e14);
  EXPECT_NEAR(EstimatedMatmulFlopsPerSecond(9, 132, F32, false), 5.1e13, 0.5e13);
  EXPECT_GT(EstimatedMatmulFlopsPerSecond(9, 132, F32, true),
            EstimatedMatmulFlopsPerSecond(9, 132, F32, false));
  EXPECT_LT(EstimatedMatmulFlopsPerSecond(8, 108, BF16, false),
            EstimatedMatmulFlopsPerSecond(9, 132, BF16, false));
}

// Slices carried out one by one (each a column-major GEMM at its offsets, as cuBLASLt will be
// called) fill exactly the whole product's output, bit for bit: every element is computed
// once, from the same rows and columns, with the same loop over k. Shapes are small, so the
// slicing is given directly rather than planned (the planner leaves such shapes whole).
struct SliceCase {
  GemmCase gemm;
  MatmulSlicing slicing;
};

class SliceOfMatmulTest : public ::testing::TestWithParam<SliceCase> {};

TEST_P(SliceOfMatmulTest, SlicesComposeTheWholeProduct) {
  const GemmCase& c = GetParam().gemm;
  const MatmulSlicing& slicing = GetParam().slicing;
  std::mt19937 rng(::gpukit::testing::TestSeed());
  std::uniform_real_distribution<double> value(-2.0, 2.0);
  MatmulShape s;
  s.m = c.m;
  s.n = c.n;
  s.k = c.k;
  s.batch = c.batch;
  s.transpose_a = c.transpose_a;
  s.transpose_b = c.transpose_b;
  s.a_batch_stride = c.broadcast_a || c.batch == 1 ? 0 : c.m * c.k;
  s.b_batch_stride = c.broadcast_b || c.batch == 1 ? 0 : c.k * c.n;
  std::vector<double> a((c.broadcast_a ? 1 : c.batch) * c.m * c.k);
  std::vector<double> b((c.broadcast_b ? 1 : c.batch) * c.k * c.n);
  for (double& v : a) v = value(rng);
  for (double& v : b) v = value(rng);
  std::vector<double> whole(c.batch * c.m * c.n, -1e300);
  ColumnMajorGemm(ToColumnMajor(s), b, a, whole);

  std::vector<double> sliced(whole.size(), std::nan(""));
  std::vector<int> written(whole.size(), 0);
  for (int64_t i = 0; i < slicing.count; ++i) {
    const MatmulSlice slice = SliceOfMatmul(s, slicing, i);
    GPUKIT_ASSERT_OK(ValidateMatmulShape(slice.shape));
    const std::vector<double> a_part(a.begin() + slice.a_offset, a.end());
    const std::vector<double> b_part(b.begin() + slice.b_offset, b.end());
    std::vector<double> out_part(whole.size() - slice.out_offset, std::nan(""));
    const LtGemmLayout lt = ToColumnMajor(slice.shape);
    ColumnMajorGemm(lt, b_part, a_part, out_part);
    const int64_t elements = slice.shape.batch * slice.shape.m * slice.shape.n;
    for (int64_t e = 0; e < elements; ++e) {
      sliced[slice.out_offset + e] = out_part[e];
      ++written[slice.out_offset + e];
    }
  }
  for (size_t i = 0; i < whole.size(); ++i) {
    ASSERT_EQ(written[i], 1) << "element " << i;
    ASSERT_EQ(sliced[i], whole[i]) << "element " << i;  // bitwise: the same arithmetic
  }
}

using Axis = MatmulSlicing::Axis;
INSTANTIATE_TEST_SUITE_P(
    Shapes, SliceOfMatmulTest,
    ::testing::Values(
        SliceCase{{10, 7, 5, 1, false, false, false, false}, {Axis::kRows, 4, 3}},
        SliceCase{{10, 7, 5, 1, false, false, false, true}, {Axis::kRows, 3, 4}},
        SliceCase{{9, 4, 6, 1, false, false, false, false}, {Axis::kNone, 0, 1}},
        SliceCase{{5, 7, 3, 5, false, false, false, false}, {Axis::kBatch, 2, 3}},
        SliceCase{{5, 7, 3, 5, true, false, true, false}, {Axis::kBatch, 1, 5}},
        SliceCase{{5, 7, 3, 4, false, true, false, true}, {Axis::kBatch, 3, 2}}));

// ---- Validation, key, alignment ----

TEST(ValidateMatmulShapeTest, NamesTheFieldAndValue) {
  MatmulShape s;
  s.m = s.n = s.k = 4;
  GPUKIT_EXPECT_OK(ValidateMatmulShape(s));
  auto rejects = [](MatmulShape bad, const std::string& what) {
    EXPECT_THAT(ValidateMatmulShape(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(what)));
  };
  MatmulShape bad = s;
  bad.dtype = DType::kInt32;
  rejects(bad, "int32");
  bad = s;
  bad.k = 0;
  rejects(bad, "k = 0");
  bad = s;
  bad.m = int64_t{1} << 31;
  rejects(bad, "m = 2147483648");
  bad = s;
  bad.batch = 0;
  rejects(bad, "batch = 0");
  bad = s;
  bad.dtype = DType::kFloat16;
  bad.allow_tf32 = true;
  rejects(bad, "allow_tf32");
  bad = s;
  bad.batch = 2;
  bad.a_batch_stride = 3;  // matrices of 16 elements would overlap
  rejects(bad, "a_batch_stride = 3");
  bad = s;
  bad.b_batch_stride = -1;
  rejects(bad, "b_batch_stride = -1");
}

TEST(MatmulKeyTest, EveryFieldTellsPlansApart) {
  MatmulKey base;
  base.shape.m = base.shape.n = base.shape.k = 8;
  std::vector<MatmulKey> keys(14, base);
  keys[1].shape.dtype = DType::kBFloat16;
  keys[2].shape.m = 9;
  keys[3].shape.n = 9;
  keys[4].shape.k = 9;
  keys[5].shape.batch = 2;
  keys[6].shape.a_batch_stride = 64;
  keys[7].shape.b_batch_stride = 64;
  keys[8].shape.transpose_a = true;
  keys[9].shape.transpose_b = true;
  keys[10].shape.epilogue = MatmulEpilogue::kBiasGelu;
  keys[11].shape.allow_tf32 = true;
  keys[12].a_alignment_bytes = 4;
  keys[13].workspace_bytes = CublasLtMatmul::kWorkspaceBytes;
  absl::flat_hash_set<MatmulKey> set(keys.begin(), keys.end());
  EXPECT_EQ(set.size(), keys.size());
  EXPECT_TRUE(set.contains(base));
  MatmulKey other = keys[10];
  other.shape.epilogue = MatmulEpilogue::kBias;
  EXPECT_FALSE(set.contains(other));
}

TEST(AddressAlignmentTest, LargestPowerOfTwoUpTo256) {
  EXPECT_EQ(AddressAlignment(0), 256u);
  EXPECT_EQ(AddressAlignment(0x7f0000000000), 256u);
  EXPECT_EQ(AddressAlignment(0x7f0000000080), 128u);
  EXPECT_EQ(AddressAlignment(0x7f0000000004), 4u);
  EXPECT_EQ(AddressAlignment(0x7f0000000002), 2u);
  EXPECT_EQ(AddressAlignment(0x7f0000000001), 1u);
}

TEST(DescribeMatmulTest, SaysWhatRuns) {
  MatmulShape s;
  s.dtype = DType::kBFloat16;
  s.m = 17;
  s.n = 33;
  s.k = 9;
  s.batch = 8;
  s.a_batch_stride = 153;
  s.epilogue = MatmulEpilogue::kBiasGelu;
  EXPECT_EQ(DescribeMatmul(s), "bfloat16 [8 x 17x9 @ 9x33] strides a 153 b 0, bias+gelu");
}

// ---- The library ----

// The build image has the CUDA toolkit, whose libcublasLt loads without a GPU or driver.
TEST(LoadCublasLtTest, LoadsTheToolkitsLibrary) {
  if (!std::filesystem::exists("/usr/local/cuda/lib64/libcublasLt.so.13")) {
    GTEST_SKIP() << "no CUDA 13 toolkit here (/usr/local/cuda/lib64/libcublasLt.so.13)";
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(CublasLtLibrary library, LoadCublasLt(CudaLibrarySearchDirs({})));
  EXPECT_GE(library.version, 130000);
  EXPECT_THAT(library.path, HasSubstr("libcublasLt.so.13"));
  // Once loaded, the library stays: a later load answers the same, whatever it is told.
  GPUKIT_ASSERT_OK_AND_ASSIGN(CublasLtLibrary again, LoadCublasLt({"/nonexistent"}));
  EXPECT_EQ(again.path, library.path);
}

}  // namespace
}  // namespace gpukit
