// Parameter blocks of gpukit's built-in device kernels (kernels/cuda/*.cu).
//
// This header is compiled twice: by the host compiler, where the CUDA device fills these
// structs, and by NVRTC (or nvcc, precompiling), where the build embeds it ahead of every
// built-in kernel source; both device compilers see the same typedefs.
// Each kernel takes its output and input pointers, then one of these structs by value, so
// the host passes the struct's address in cuLaunchKernel's parameter array and both sides
// must agree on its layout: plain fixed-size fields only, 8-byte aligned, no padding holes.
//
// Shapes and strides count elements, not bytes. The output is always contiguous row-major;
// an input stride of 0 repeats the input along that dimension (broadcasting).
//
// Thread safety: plain data.
#ifndef GPUKIT_KERNELS_CUDA_OP_PARAMS_H_
#define GPUKIT_KERNELS_CUDA_OP_PARAMS_H_

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
typedef long long gk_int64;
typedef unsigned long long gk_uint64;
typedef int gk_int32;
#else
#include <cstdint>
typedef int64_t gk_int64;
typedef uint64_t gk_uint64;
typedef int32_t gk_int32;
#endif

#define GK_MAX_RANK 8

// How a binary kernel reads one operand.
#define GK_OPERAND_CONTIGUOUS 0  // the output's layout: element i is at i
#define GK_OPERAND_SCALAR 1      // one value, held in the parameter block (`scalar_bits`)
#define GK_OPERAND_STRIDED 2     // at sum(index[d] * strides[d]) over the output's index
#define GK_OPERAND_REPEAT 3      // element 0 of the buffer, for every output element

struct GkOperand {
  gk_int32 mode;
  gk_int32 unused;
  // The scalar's bytes in the compute dtype, little-endian in the low bytes.
  gk_uint64 scalar_bits;
  gk_int64 strides[GK_MAX_RANK];
};

// out[i] = a[i] (op) b[i] over `count` output elements of shape `dims` (rank <= 8).
struct GkBinaryParams {
  gk_int64 count;
  gk_int32 rank;
  gk_int32 unused;
  gk_int64 dims[GK_MAX_RANK];
  GkOperand a;
  GkOperand b;
};

// out[i] = convert(in[i]) over `count` contiguous elements.
struct GkCastParams {
  gk_int64 count;
};

// in[outer][extent][inner] -> out[outer][inner]; a full reduction is outer = inner = 1.
// `divisor` is the extent for a mean, 1 otherwise.
struct GkReduceParams {
  gk_int64 outer;
  gk_int64 extent;
  gk_int64 inner;
  double divisor;
};

// out (contiguous, shape `dims`) [j...] = in[sum(j[d] * in_strides[d])].
struct GkPermuteParams {
  gk_int64 count;
  gk_int32 rank;
  gk_int32 unused;
  gk_int64 dims[GK_MAX_RANK];
  gk_int64 in_strides[GK_MAX_RANK];
};

// out[batch][m][n] = sum_k a[batch][m][k] * b[batch][k][n]. The batch index is unravelled
// over `batch_dims` and each operand's matrix found at sum(index[d] * *_batch_strides[d])
// matrices (0 on broadcast batch dimensions).
struct GkMatmulParams {
  gk_int64 m;
  gk_int64 n;
  gk_int64 k;
  gk_int64 batch;
  gk_int32 batch_rank;
  gk_int32 unused;
  gk_int64 batch_dims[GK_MAX_RANK];
  gk_int64 a_batch_strides[GK_MAX_RANK];
  gk_int64 b_batch_strides[GK_MAX_RANK];
};

// out[i] = op(in[i]) over `count` contiguous elements (unary.cu).
struct GkUnaryParams {
  gk_int64 count;
};

// out[i] = min(max(in[i], lo), hi) for the bounds present (unary.cu). Floating dtypes use
// the *_float bounds (rounded to float32 on the device), integers the *_int ones.
struct GkClampParams {
  gk_int64 count;
  gk_int32 has_min;
  gk_int32 has_max;
  double min_float;
  double max_float;
  gk_int64 min_int;
  gk_int64 max_int;
};

// out[i] = cond[i] ? a[i] : b[i] over the output's shape `dims`, each operand read as
// GkOperand says (cond is never a scalar). cond's elements are `cond_bytes` wide and true
// when (bits & cond_mask) != 0: the mask drops a floating sign bit, so -0.0 is false.
struct GkWhereParams {
  gk_int64 count;
  gk_int32 rank;
  gk_int32 cond_bytes;
  gk_uint64 cond_mask;
  gk_int64 dims[GK_MAX_RANK];
  GkOperand cond;
  GkOperand a;
  GkOperand b;
};

// Row-wise nn kernels (nn.cu) see the input as in[outer][extent][inner]; a "lane" is one
// (outer, inner) pair, whose `extent` elements lie `inner` apart. argmax and softmax.
struct GkLaneParams {
  gk_int64 outer;
  gk_int64 extent;
  gk_int64 inner;
};

// layernorm and rmsnorm over `rows` contiguous rows of `dim` elements.
struct GkNormParams {
  gk_int64 rows;
  gk_int64 dim;
  double eps;
  gk_int32 has_weight;
  gk_int32 has_bias;
};

// rope over `rows` rows of `dim` elements; row r is at position offset + r % seq.
struct GkRopeParams {
  gk_int64 rows;
  gk_int64 seq;
  gk_int64 dim;
  gk_int64 offset;
  double base;
};

// attention: q [heads][sq][d], k [heads][sk][d], v [heads][sk][dv] -> out [heads][sq][dv].
struct GkAttentionParams {
  gk_int64 heads;
  gk_int64 sq;
  gk_int64 sk;
  gk_int64 d;
  gk_int64 dv;
  gk_int32 causal;
  gk_int32 unused;
  double scale;
};

// The device attention kernel keeps a query row and each thread's output columns on chip:
// d and dv are at most this.
#define GK_ATTENTION_MAX_DIM 1024

// embedding: out[n][j] = table[indices[n]][j] for n < count, j < dim; zeros for an index
// outside [0, vocab) (layout.cu).
struct GkEmbeddingParams {
  gk_int64 count;
  gk_int64 vocab;
  gk_int64 dim;
};

// concat, one launch per input: out[o][offset + j] = in[o][j] for o < outer, j < in_chunk,
// with output rows of out_chunk elements (layout.cu).
struct GkConcatParams {
  gk_int64 outer;
  gk_int64 in_chunk;
  gk_int64 out_chunk;
  gk_int64 offset;
};

#endif  // GPUKIT_KERNELS_CUDA_OP_PARAMS_H_
