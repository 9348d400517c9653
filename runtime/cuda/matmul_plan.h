// Matmul planning for cuBLASLt: which gpukit matmuls cuBLASLt can run, and how a row-major
// gpukit matmul is described to cuBLASLt's column-major GEMM. Pure arithmetic, no CUDA: it
// runs and is tested on any host.
//
// Row-major arrays through a column-major GEMM: a row-major [r, c] matrix with row stride c
// is, read column-major, its own transpose: a [c, r] matrix with leading dimension c. So
// gpukit's out = a @ b (row-major) is cuBLASLt's out^T = b^T a^T (column-major) with the
// operands swapped: cuBLASLt's A is gpukit's b, its B is gpukit's a, and its D ([n, m],
// leading dimension n) is gpukit's out, byte for byte. Every matrix keeps
// CUBLASLT_ORDER_COL, the order every cuBLASLt algorithm and epilogue supports (ORDER_ROW
// would narrow the heuristic's choice and rules out some epilogues). A consequence worth
// knowing: the bias of the bias epilogue runs along D's rows, which are gpukit's output
// columns, so the bias has n elements, one per output column, as in a linear layer.
//
//   MatmulRoute route = RouteMatmul(a_desc, b_desc, plan);
//   if (route.kind == MatmulRoute::Kind::kCublasLt) {
//     LtGemmLayout lt = ToColumnMajor(route.shape);  // what the layouts and desc are set to
//   }
//
// Thread safety: plain functions and values.
#ifndef GPUKIT_RUNTIME_CUDA_MATMUL_PLAN_H_
#define GPUKIT_RUNTIME_CUDA_MATMUL_PLAN_H_

#include <cstdint>
#include <string>
#include <utility>

#include "runtime/base/dtype.h"
#include "runtime/op_registry.h"

namespace gpukit {

// What cuBLASLt applies to the product before it stores it.
enum class MatmulEpilogue {
  kNone,
  kBias,      // out[i, j] = acc[i, j] + bias[j]
  kBiasGelu,  // out[i, j] = gelu(acc[i, j] + bias[j]), GELU's tanh approximation
};

// One (batched) matmul in gpukit's row-major terms: out[b] = op(a[b]) @ op(b[b]), with
// op(a) of shape [m, k], op(b) of shape [k, n] and out of shape [m, n], all contiguous.
struct MatmulShape {
  DType dtype = DType::kFloat32;  // of a, b, out (and bias); f32, f16 or bf16
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  int64_t batch = 1;
  // Elements from one matrix of the batch to the next; 0 uses the same matrix for every
  // entry of the batch (broadcast). out's stride is always m * n.
  int64_t a_batch_stride = 0;
  int64_t b_batch_stride = 0;
  bool transpose_a = false;  // a is stored [k, m] and used transposed
  bool transpose_b = false;  // b is stored [n, k] and used transposed
  MatmulEpilogue epilogue = MatmulEpilogue::kNone;
  // float32 only: lets cuBLASLt round the inputs to TF32 (CUBLAS_COMPUTE_32F_FAST_TF32,
  // about 1e-3 relative error). Off, float32 is computed in full float32.
  bool allow_tf32 = false;

  friend bool operator==(const MatmulShape&, const MatmulShape&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const MatmulShape& s) {
    return H::combine(std::move(h), s.dtype, s.m, s.n, s.k, s.batch, s.a_batch_stride,
                      s.b_batch_stride, s.transpose_a, s.transpose_b, s.epilogue, s.allow_tf32);
  }
};

// "bfloat16 [8 x 17x9 @ 9x33] strides a 153 b 0, bias+gelu, tf32": for messages and logs.
std::string DescribeMatmul(const MatmulShape& shape);

// INVALID_ARGUMENT naming the field when `shape` is not a matmul cuBLASLt can be asked for:
// a dtype other than f32/f16/bf16, m, n, k or batch < 1 or above INT32_MAX (cuBLASLt's
// dimensions and batch count are int32 in practice), a negative batch stride, tf32 on a
// 16-bit dtype, or a batch stride that makes matrices of one operand overlap partially.
absl::Status ValidateMatmulShape(const MatmulShape& shape);

// One matrix as cuBLASLt's layout describes it: column-major, `rows` x `cols` as stored
// (before the descriptor's transpose), column stride `ld`, and its strided batch.
struct LtMatrix {
  uint64_t rows = 0;
  uint64_t cols = 0;
  int64_t ld = 0;
  int32_t batch_count = 1;
  int64_t batch_stride = 0;  // elements

  friend bool operator==(const LtMatrix&, const LtMatrix&) = default;
};

// The column-major GEMM D = op(A) op(B) that computes `shape` (see the header comment):
// A is gpukit's b, B is gpukit's a, D is gpukit's out.
struct LtGemmLayout {
  bool transpose_a = false;  // CUBLASLT_MATMUL_DESC_TRANSA
  bool transpose_b = false;  // CUBLASLT_MATMUL_DESC_TRANSB
  LtMatrix a;
  LtMatrix b;
  LtMatrix d;  // also C (beta is 0)
};
LtGemmLayout ToColumnMajor(const MatmulShape& shape);

// The plan cache's key: the shape, plus what the heuristic's choice also depends on, the
// alignment of each pointer (a power of two up to 256 bytes; cuBLASLt assumes 256 unless
// told) and the workspace it may use.
struct MatmulKey {
  MatmulShape shape;
  uint32_t a_alignment_bytes = 256;
  uint32_t b_alignment_bytes = 256;
  uint32_t d_alignment_bytes = 256;
  uint32_t bias_alignment_bytes = 256;  // 256 when there is no bias
  uint64_t workspace_bytes = 0;

  friend bool operator==(const MatmulKey&, const MatmulKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const MatmulKey& key) {
    return H::combine(std::move(h), key.shape, key.a_alignment_bytes, key.b_alignment_bytes,
                      key.d_alignment_bytes, key.bias_alignment_bytes, key.workspace_bytes);
  }
};

// The largest power of two, at most 256, that divides `address` (256 for 0).
uint32_t AddressAlignment(uint64_t address);

// Where a planned "matmul" op runs on the CUDA device.
struct MatmulRoute {
  enum class Kind {
    kCublasLt,     // `shape` says what to ask cuBLASLt for
    kNothingToDo,  // the output has no elements
    kFallback,     // gpukit's own kernel; `reason` says why
  };
  Kind kind = Kind::kFallback;
  MatmulShape shape;   // when kCublasLt
  std::string reason;  // when kFallback: "inputs[1] is float32, the matmul computes in ..."
};

// Decides the route of a matmul planned by the OpRegistry (inputs `a` and `b`, its plan).
// cuBLASLt takes it when the compute dtype is f32, f16 or bf16, both inputs already have
// that dtype (mixed dtypes are cast by the fallback kernel's lowering instead), k >= 1,
// every dimension fits cuBLASLt's limits, and each input's batch either matches the
// output's batch element for element or is a single matrix broadcast to all of it (stride
// 0). Batches broadcast along some batch dimensions only ([B1, 1] against [1, B2]) have no
// single stride and fall back. plan.params.allow_tf32 becomes the shape's allow_tf32 for
// float32. A 1-d input (NumPy's vector) is viewed in place: a [k] as [1, k], b [k] as [k, 1].
MatmulRoute RouteMatmul(const TensorDesc& a, const TensorDesc& b, const OpPlan& plan);


// ---- Slices ------------------------------------------------------------------------------
// A large matmul on a stream that must yield the GPU quickly (a low-priority stream: the
// BestEffort class's work) runs as several cuBLASLt calls, each computing a block of output
// rows or of batch entries, so that the work of higher-priority streams starts between two
// slices instead of after the whole product (a large GEMM keeps every SM busy until it
// ends; the GPU's priorities act only where a kernel ends and the next begins).
//
// A tenant's results must not depend on who else is on the GPU, so slicing never changes a
// value: slices never split the reduction dimension k, and every slice runs the algorithm
// the heuristic chose for the whole shape, chosen with split-K excluded for every shape that
// may be sliced (MatmulMaySlice), whether it runs sliced or not. Each output element is then
// computed by the same kernel with the same k-loop either way.
//
//   const MatmulSlicing slicing = PlanMatmulSlices(shape, /*max_slice_flops=*/7.6e10);
//   for (int64_t i = 0; i < slicing.count; ++i) {
//     const MatmulSlice slice = SliceOfMatmul(shape, slicing, i);
//     // run slice.shape at a + slice.a_offset, b + slice.b_offset, out + slice.out_offset
//   }

// Rows of a row slice are a multiple of this. Every slice's start is then a multiple of
// 128 * k (or * n) elements from the matrix's, at least 256 bytes for every dtype, so a
// slice's pointers are as aligned as the whole matrix's and its algorithm applies.
inline constexpr int64_t kMatmulSliceRowQuantum = 128;
// Matmuls of fewer FLOPs (2 m n k batch) are never sliced: the largest of them takes about
// 40 us in float32 on an H100, less in every other dtype.
inline constexpr double kMinSliceableMatmulFlops = 2e9;
// At most this many slices, however small the target.
inline constexpr int64_t kMaxMatmulSlices = 256;

// 2 m n k batch: the product's floating-point operations.
double MatmulFlops(const MatmulShape& shape);

// Whether `shape` may be sliced: at least kMinSliceableMatmulFlops, and either a batch of
// two or more matrices or at least two row quanta of rows in an `a` that is not transposed
// (a transposed a's rows are not contiguous blocks).
bool MatmulMaySlice(const MatmulShape& shape);

// How a matmul is cut: along its output rows or its batch entries, `per_slice` of them in
// every slice but the last (which has the rest), `count` slices. kNone: one call, count 1.
struct MatmulSlicing {
  enum class Axis { kNone, kRows, kBatch };
  Axis axis = Axis::kNone;
  int64_t per_slice = 0;
  int64_t count = 1;

  friend bool operator==(const MatmulSlicing&, const MatmulSlicing&) = default;
};

// The work grid of the cuBLASLt algorithm a matmul runs: its output tile, in gpukit's rows
// and columns of `out`, and the GPU's SMs. Measured on an H200 (docs/benchmarks.md, "Matmul
// slices along the tiles"), a product cut into row slices takes as long as
//   sum over slices of ceil(tiles of the slice / SMs)
// times one tile's time, where a slice's rows of tiles count in pairs (an odd row of tiles
// cost a pair's time, as tiles run in clusters of two would; a fit to the H200's figures,
// where cuBLASLt reports its algorithms' cluster shape as AUTO): a slice with
// fewer tiles than SMs ends no sooner than a full wave, and slices cut across a wave run its
// time twice. Cut by FLOPs alone, the slices of 128 rows of an 8192^3 float32 product ran at
// a quarter of its speed, and slices of 640 rows of a float16 one at half. Zero: not known.
struct MatmulGrid {
  int64_t tile_rows = 0;
  int64_t tile_cols = 0;
  int64_t multiprocessors = 0;

  friend bool operator==(const MatmulGrid&, const MatmulGrid&) = default;
};

// The waves `grid` takes for `shape` (by the model above; 0 for a grid not known).
int64_t MatmulWaves(const MatmulShape& shape, const MatmulGrid& grid);

// Slices of at most about `max_slice_flops` each (<= 0: no slicing). A batch is cut into
// groups of whole entries (a single entry above the target is not cut further); a single
// matrix into blocks of rows, a multiple of kMatmulSliceRowQuantum, at least one quantum.
// With a known `grid`, a slice may grow to one wave where that is larger than the target (a
// smaller slice would end no sooner), and among the sizes up to the larger of the two the
// one whose slices take the fewest waves in all is chosen (the largest of equals).
// kNone when the shape may not be sliced or fits in one slice.
MatmulSlicing PlanMatmulSlices(const MatmulShape& shape, double max_slice_flops,
                               const MatmulGrid& grid = {});

// Slice `index` (< slicing.count) of `shape`: its shape and where its a, b and out start,
// in elements from the whole's. A bias is the whole's (it runs along the output columns).
struct MatmulSlice {
  MatmulShape shape;
  int64_t a_offset = 0;
  int64_t b_offset = 0;
  int64_t out_offset = 0;
};
MatmulSlice SliceOfMatmul(const MatmulShape& shape, const MatmulSlicing& slicing, int64_t index);

// Dense matmul throughput a GPU of compute capability `sm_major` with `multiprocessor_count`
// SMs reaches in `dtype` (float32 with or without TF32), in FLOP/s: what cuBLAS reaches on a
// large product, about (an H100 SXM: bfloat16 7.7e14, TF32 3.7e14, float32 5.1e13). Only
// slice sizes come from it, so being off by a factor of two makes slices twice as long or
// short, nothing worse.
double EstimatedMatmulFlopsPerSecond(int sm_major, int multiprocessor_count, DType dtype,
                                     bool tf32);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_CUDA_MATMUL_PLAN_H_
