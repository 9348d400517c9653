// gpukit's own batched matmul: the device twin of MatmulCpu (kernels/cpu/matmul.cc) and the
// fallback when cuBLASLt is not available. Floating types accumulate in float32 (the CPU
// reference in double, so results agree to rounding); integers accumulate in uint64 and wrap
// on the store, exactly as the CPU's do.
//
// Kernels: gk_matmul_<dt>(T* out, const T* a, const T* b, GkMatmulParams p). Each 16 x 16
// thread block computes a 16 x 16 tile of one output matrix (blockIdx.z walks the batch,
// with a grid-stride loop past 65535), staging 16 x 16 tiles of a and b in shared memory.

#define GK_MATMUL_TILE 16

template <typename T>
struct MatmulAcc {
  typedef float type;
  static __device__ __forceinline__ float load(T v) { return Traits<T>::to_compute(v); }
  static __device__ __forceinline__ T store(float v) { return Traits<T>::from_compute(v); }
};
#define GK_INTEGER_MATMUL_ACC(T)                                                        \
  template <>                                                                           \
  struct MatmulAcc<T> {                                                                 \
    typedef gk_uint64 type;                                                             \
    static __device__ __forceinline__ gk_uint64 load(T v) {                             \
      return static_cast<gk_uint64>(static_cast<gk_int64>(v));                          \
    }                                                                                   \
    static __device__ __forceinline__ T store(gk_uint64 v) {                            \
      return Traits<T>::from_wide(static_cast<gk_int64>(v));                            \
    }                                                                                   \
  };
GK_INTEGER_MATMUL_ACC(gk_int32)
GK_INTEGER_MATMUL_ACC(gk_int64)
GK_INTEGER_MATMUL_ACC(gk_uint8)

template <typename T>
__device__ __forceinline__ void gk_matmul(T* __restrict__ out, const T* __restrict__ a,
                                          const T* __restrict__ b, const GkMatmulParams& p) {
  typedef MatmulAcc<T> A;
  typedef typename A::type Acc;
  __shared__ Acc a_tile[GK_MATMUL_TILE][GK_MATMUL_TILE];
  __shared__ Acc b_tile[GK_MATMUL_TILE][GK_MATMUL_TILE + 1];
  const gk_int64 row = static_cast<gk_int64>(blockIdx.y) * GK_MATMUL_TILE + threadIdx.y;
  const gk_int64 col = static_cast<gk_int64>(blockIdx.x) * GK_MATMUL_TILE + threadIdx.x;
  for (gk_int64 batch = blockIdx.z; batch < p.batch; batch += gridDim.z) {
    gk_int64 a_index = 0, b_index = 0, rest = batch;
    for (int d = p.batch_rank - 1; d >= 0; --d) {
      const gk_int64 index = rest % p.batch_dims[d];
      rest /= p.batch_dims[d];
      a_index += index * p.a_batch_strides[d];
      b_index += index * p.b_batch_strides[d];
    }
    const T* a_matrix = a + a_index * p.m * p.k;
    const T* b_matrix = b + b_index * p.k * p.n;
    Acc acc = 0;
    for (gk_int64 k0 = 0; k0 < p.k; k0 += GK_MATMUL_TILE) {
      const gk_int64 ak = k0 + threadIdx.x;
      const gk_int64 bk = k0 + threadIdx.y;
      a_tile[threadIdx.y][threadIdx.x] =
          row < p.m && ak < p.k ? A::load(a_matrix[row * p.k + ak]) : Acc(0);
      b_tile[threadIdx.y][threadIdx.x] =
          bk < p.k && col < p.n ? A::load(b_matrix[bk * p.n + col]) : Acc(0);
      __syncthreads();
      for (int kk = 0; kk < GK_MATMUL_TILE; ++kk) {
        acc += a_tile[threadIdx.y][kk] * b_tile[kk][threadIdx.x];
      }
      __syncthreads();
    }
    if (row < p.m && col < p.n) out[(batch * p.m + row) * p.n + col] = A::store(acc);
  }
}

#define GK_MATMUL_KERNEL(suffix, T)                                                       \
  extern "C" __global__ void __launch_bounds__(GK_MATMUL_TILE * GK_MATMUL_TILE)           \
      gk_matmul_##suffix(T* out, const T* a, const T* b, GkMatmulParams p) {              \
    gk_matmul<T>(out, a, b, p);                                                           \
  }
GK_FOR_EACH_DTYPE(GK_MATMUL_KERNEL)
