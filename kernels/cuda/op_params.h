// Parameter blocks of gpukit's built-in device kernels (kernels/cuda/*.cu).
//
// This header is compiled twice: by the host compiler, where the CUDA device fills these
// structs, and by NVRTC, where the build embeds it ahead of every built-in kernel source.
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

#ifdef __CUDACC_RTC__
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

#endif  // GPUKIT_KERNELS_CUDA_OP_PARAMS_H_
