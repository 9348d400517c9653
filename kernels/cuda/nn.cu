// Reductions to indices, normalisations and transformer building blocks: the device twins
// of ArgmaxCpu, SoftmaxCpu, LayerNormCpu, RmsNormCpu, RopeCpu and AttentionCpu
// (kernels/cpu/nn.cc). argmax is exact; the floating kernels compute in float32 (rope's
// angles in double, as positions times frequencies lose too much in float), where the CPU
// reference computes in double, so they agree to float32 rounding.
//
// Blocks are GK_NN_THREADS (256) threads; the host launches them so. Kernels (<dt> any
// dtype, <fdt> f32, f16 or bf16):
//   gk_argmax_rows_<dt>(gk_int64* out, const T* in, GkLaneParams p)
//     inner == 1: one block per row (grid-stride over the rows).
//   gk_argmax_cols_<dt>(gk_int64* out, const T* in, GkLaneParams p)
//     any inner: one thread per lane.
//   gk_softmax_<fdt>(T* out, const T* in, GkLaneParams p): one block per lane.
//   gk_layernorm_<fdt>(T* out, const T* x, const T* weight, const T* bias, GkNormParams p)
//   gk_rmsnorm_<fdt>(T* out, const T* x, const T* weight, GkNormParams p)
//     One block per row; weight and bias may be null (has_weight, has_bias say).
//   gk_rope_<fdt>(T* out, const T* x, GkRopeParams p): one thread per rotated pair.
//   gk_attention_<fdt>(T* out, const T* q, const T* k, const T* v, GkAttentionParams p)
//     One block per (head, query row): the scores' maximum in one pass over the visible
//     keys, then exp(score - max) for a tile of 256 keys at a time in shared memory, which
//     each thread folds into its output columns (at most GK_ATTENTION_MAX_DIM / 256 each).

#define GK_NN_THREADS 256

__device__ __forceinline__ float gk_inf() { return __int_as_float(0x7f800000); }

struct SumF {
  static __device__ __forceinline__ float identity() { return 0.0f; }
  static __device__ __forceinline__ float combine(float a, float b) { return a + b; }
};
// NaN-propagating maximum.
struct MaxF {
  static __device__ __forceinline__ float identity() { return -gk_inf(); }
  static __device__ __forceinline__ float combine(float a, float b) {
    return (b > a || b != b) ? b : a;
  }
};

// Combines every thread's value of the block and returns the result to every thread. The
// caller's `scratch` holds 32 floats; it may be reused once this returns.
template <typename Op>
__device__ __forceinline__ float gk_block_all(float v, float* scratch) {
  for (int delta = 16; delta > 0; delta /= 2) {
    v = Op::combine(v, __shfl_down_sync(0xffffffffu, v, delta));
  }
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? scratch[lane] : Op::identity();
    for (int delta = 16; delta > 0; delta /= 2) {
      v = Op::combine(v, __shfl_down_sync(0xffffffffu, v, delta));
    }
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  const float result = scratch[0];
  __syncthreads();
  return result;
}

// ---- argmax ---------------------------------------------------------------------------------

__device__ __forceinline__ bool gk_nan(double v) { return v != v; }
__device__ __forceinline__ bool gk_nan(gk_int64) { return false; }

template <typename T>
struct ArgLowest {
  static __device__ __forceinline__ double value() { return -static_cast<double>(gk_inf()); }
};
template <>
struct ArgLowest<gk_int32> {
  static __device__ __forceinline__ gk_int64 value() { return -2147483647 - 1; }
};
template <>
struct ArgLowest<gk_int64> {
  static __device__ __forceinline__ gk_int64 value() { return -9223372036854775807LL - 1; }
};
template <>
struct ArgLowest<gk_uint8> {
  static __device__ __forceinline__ gk_int64 value() { return 0; }
};

// Whether (v2, i2) beats (v1, i1): a NaN beats any number, a larger value a smaller one,
// and among equals (two NaNs included) the smaller index wins.
template <typename W>
__device__ __forceinline__ bool gk_arg_better(W v1, gk_int64 i1, W v2, gk_int64 i2) {
  const bool n1 = gk_nan(v1), n2 = gk_nan(v2);
  if (n1 || n2) return n1 && n2 ? i2 < i1 : n2;
  return v2 > v1 || (v2 == v1 && i2 < i1);
}

template <typename T>
__device__ __forceinline__ void gk_argmax_rows(gk_int64* __restrict__ out, const T* __restrict__ in,
                                               const GkLaneParams& p) {
  typedef typename Traits<T>::Wide W;
  __shared__ W values[GK_NN_THREADS];
  __shared__ gk_int64 indices[GK_NN_THREADS];
  for (gk_int64 row = blockIdx.x; row < p.outer; row += gridDim.x) {
    const T* data = in + row * p.extent;
    W best = ArgLowest<T>::value();
    gk_int64 best_index = 9223372036854775807LL;  // loses every tie with a real element
    for (gk_int64 k = threadIdx.x; k < p.extent; k += blockDim.x) {
      const W v = gk_widen(data[k]);
      if (gk_arg_better(best, best_index, v, k)) {
        best = v;
        best_index = k;
      }
    }
    values[threadIdx.x] = best;
    indices[threadIdx.x] = best_index;
    __syncthreads();
    for (int half = GK_NN_THREADS / 2; half > 0; half /= 2) {
      if (threadIdx.x < half &&
          gk_arg_better(values[threadIdx.x], indices[threadIdx.x], values[threadIdx.x + half],
                        indices[threadIdx.x + half])) {
        values[threadIdx.x] = values[threadIdx.x + half];
        indices[threadIdx.x] = indices[threadIdx.x + half];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) out[row] = indices[0];
    __syncthreads();
  }
}

template <typename T>
__device__ __forceinline__ void gk_argmax_cols(gk_int64* __restrict__ out, const T* __restrict__ in,
                                               const GkLaneParams& p) {
  typedef typename Traits<T>::Wide W;
  GK_FOR_EACH(lane, p.outer * p.inner) {
    const T* data = in + (lane / p.inner) * p.extent * p.inner + lane % p.inner;
    W best = gk_widen(data[0]);
    gk_int64 best_index = 0;
    for (gk_int64 k = 1; k < p.extent && !gk_nan(best); ++k) {
      const W v = gk_widen(data[k * p.inner]);
      if (v > best || gk_nan(v)) {
        best = v;
        best_index = k;
      }
    }
    out[lane] = best_index;
  }
}

#define GK_ARGMAX_KERNELS(suffix, T)                                                               \
  extern "C" __global__ void __launch_bounds__(GK_NN_THREADS)                                      \
      gk_argmax_rows_##suffix(gk_int64* out, const T* in, GkLaneParams p) {                        \
    gk_argmax_rows<T>(out, in, p);                                                                 \
  }                                                                                                \
  extern "C" __global__ void gk_argmax_cols_##suffix(gk_int64* out, const T* in, GkLaneParams p) { \
    gk_argmax_cols<T>(out, in, p);                                                                 \
  }
GK_FOR_EACH_DTYPE(GK_ARGMAX_KERNELS)

// ---- softmax, layernorm, rmsnorm ------------------------------------------------------------

template <typename T>
__device__ __forceinline__ void gk_softmax(T* __restrict__ out, const T* __restrict__ in,
                                           const GkLaneParams& p) {
  typedef Traits<T> Tr;
  __shared__ float scratch[32];
  for (gk_int64 lane = blockIdx.x; lane < p.outer * p.inner; lane += gridDim.x) {
    const gk_int64 base = (lane / p.inner) * p.extent * p.inner + lane % p.inner;
    const T* x = in + base;
    T* y = out + base;
    float m = MaxF::identity();
    for (gk_int64 k = threadIdx.x; k < p.extent; k += blockDim.x) {
      m = MaxF::combine(m, Tr::to_compute(x[k * p.inner]));
    }
    m = gk_block_all<MaxF>(m, scratch);
    float sum = 0.0f;
    for (gk_int64 k = threadIdx.x; k < p.extent; k += blockDim.x) {
      sum += expf(Tr::to_compute(x[k * p.inner]) - m);
    }
    sum = gk_block_all<SumF>(sum, scratch);
    for (gk_int64 k = threadIdx.x; k < p.extent; k += blockDim.x) {
      y[k * p.inner] = Tr::from_compute(expf(Tr::to_compute(x[k * p.inner]) - m) / sum);
    }
  }
}

template <typename T>
__device__ __forceinline__ void gk_norm(T* __restrict__ out, const T* __restrict__ in,
                                        const T* __restrict__ weight, const T* __restrict__ bias,
                                        const GkNormParams& p, bool rms) {
  typedef Traits<T> Tr;
  __shared__ float scratch[32];
  const float n = static_cast<float>(p.dim);
  for (gk_int64 row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const T* x = in + row * p.dim;
    T* y = out + row * p.dim;
    float mean = 0.0f;
    if (!rms) {
      float sum = 0.0f;
      for (gk_int64 j = threadIdx.x; j < p.dim; j += blockDim.x) sum += Tr::to_compute(x[j]);
      mean = gk_block_all<SumF>(sum, scratch) / n;
    }
    // Two passes, so the variance is a sum of squared deviations (no cancellation).
    float squares = 0.0f;
    for (gk_int64 j = threadIdx.x; j < p.dim; j += blockDim.x) {
      const float d = Tr::to_compute(x[j]) - mean;
      squares += d * d;
    }
    const float inv =
        1.0f / sqrtf(gk_block_all<SumF>(squares, scratch) / n + static_cast<float>(p.eps));
    for (gk_int64 j = threadIdx.x; j < p.dim; j += blockDim.x) {
      float v = (Tr::to_compute(x[j]) - mean) * inv;
      if (p.has_weight) v *= Tr::to_compute(weight[j]);
      if (p.has_bias) v += Tr::to_compute(bias[j]);
      y[j] = Tr::from_compute(v);
    }
  }
}

// ---- rope -----------------------------------------------------------------------------------

template <typename T>
__device__ __forceinline__ void gk_rope(T* __restrict__ out, const T* __restrict__ in,
                                        const GkRopeParams& p) {
  typedef Traits<T> Tr;
  const gk_int64 half = p.dim / 2;
  GK_FOR_EACH(t, p.rows * half) {
    const gk_int64 row = t / half;
    const gk_int64 i = t % half;
    const double position = static_cast<double>(p.offset + row % p.seq);
    const double theta =
        position * pow(p.base, -2.0 * static_cast<double>(i) / static_cast<double>(p.dim));
    double s, c;
    sincos(theta, &s, &c);
    const T* x = in + row * p.dim;
    T* y = out + row * p.dim;
    const float x1 = Tr::to_compute(x[i]);
    const float x2 = Tr::to_compute(x[i + half]);
    const float cf = static_cast<float>(c), sf = static_cast<float>(s);
    y[i] = Tr::from_compute(x1 * cf - x2 * sf);
    y[i + half] = Tr::from_compute(x2 * cf + x1 * sf);
  }
}

// ---- attention ------------------------------------------------------------------------------

#define GK_ATTENTION_COLUMNS (GK_ATTENTION_MAX_DIM / GK_NN_THREADS)

template <typename T>
__device__ __forceinline__ float gk_score(const float* q, const T* key, gk_int64 d, float scale) {
  float dot = 0.0f;
  for (gk_int64 e = 0; e < d; ++e) dot += q[e] * Traits<T>::to_compute(key[e]);
  return dot * scale;
}

template <typename T>
__device__ __forceinline__ void gk_attention(T* __restrict__ out, const T* __restrict__ q,
                                             const T* __restrict__ k, const T* __restrict__ v,
                                             const GkAttentionParams& p) {
  typedef Traits<T> Tr;
  __shared__ float q_row[GK_ATTENTION_MAX_DIM];
  __shared__ float probs[GK_NN_THREADS];
  __shared__ float scratch[32];
  const float scale = static_cast<float>(p.scale);
  for (gk_int64 row = blockIdx.x; row < p.heads * p.sq; row += gridDim.x) {
    const gk_int64 head = row / p.sq;
    const gk_int64 i = row % p.sq;
    gk_int64 visible = p.sk;
    if (p.causal) {
      visible = i + p.sk - p.sq + 1;
      visible = visible < 0 ? 0 : (visible > p.sk ? p.sk : visible);
    }
    T* y = out + row * p.dv;
    if (visible == 0) {  // sees no key: zeros
      for (gk_int64 e = threadIdx.x; e < p.dv; e += blockDim.x) y[e] = Tr::from_compute(0.0f);
      continue;
    }
    for (gk_int64 e = threadIdx.x; e < p.d; e += blockDim.x) {
      q_row[e] = Tr::to_compute(q[row * p.d + e]);
    }
    __syncthreads();
    const T* keys = k + head * p.sk * p.d;
    const T* values = v + head * p.sk * p.dv;
    float m = MaxF::identity();
    for (gk_int64 j = threadIdx.x; j < visible; j += blockDim.x) {
      m = MaxF::combine(m, gk_score(q_row, keys + j * p.d, p.d, scale));
    }
    m = gk_block_all<MaxF>(m, scratch);
    float acc[GK_ATTENTION_COLUMNS];
#pragma unroll
    for (int c = 0; c < GK_ATTENTION_COLUMNS; ++c) acc[c] = 0.0f;
    float sum = 0.0f;
    for (gk_int64 tile = 0; tile < visible; tile += blockDim.x) {
      const gk_int64 j = tile + threadIdx.x;
      const float prob = j < visible ? expf(gk_score(q_row, keys + j * p.d, p.d, scale) - m) : 0.0f;
      probs[threadIdx.x] = prob;
      sum += prob;
      __syncthreads();
      const gk_int64 n = visible - tile < blockDim.x ? visible - tile : blockDim.x;
#pragma unroll
      for (int c = 0; c < GK_ATTENTION_COLUMNS; ++c) {
        const gk_int64 e = threadIdx.x + c * static_cast<gk_int64>(blockDim.x);
        if (e >= p.dv) break;
        float a = acc[c];
        for (gk_int64 jj = 0; jj < n; ++jj) {
          a += probs[jj] * Tr::to_compute(values[(tile + jj) * p.dv + e]);
        }
        acc[c] = a;
      }
      __syncthreads();
    }
    sum = gk_block_all<SumF>(sum, scratch);
#pragma unroll
    for (int c = 0; c < GK_ATTENTION_COLUMNS; ++c) {
      const gk_int64 e = threadIdx.x + c * static_cast<gk_int64>(blockDim.x);
      if (e < p.dv) y[e] = Tr::from_compute(acc[c] / sum);
    }
  }
}

#define GK_NN_FLOAT_KERNELS(suffix, T)                                                            \
  extern "C" __global__ void __launch_bounds__(GK_NN_THREADS)                                     \
      gk_softmax_##suffix(T* out, const T* in, GkLaneParams p) {                                  \
    gk_softmax<T>(out, in, p);                                                                    \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(GK_NN_THREADS)                                     \
      gk_layernorm_##suffix(T* out, const T* x, const T* weight, const T* bias, GkNormParams p) { \
    gk_norm<T>(out, x, weight, bias, p, false);                                                   \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(GK_NN_THREADS)                                     \
      gk_rmsnorm_##suffix(T* out, const T* x, const T* weight, GkNormParams p) {                  \
    gk_norm<T>(out, x, weight, 0, p, true);                                                       \
  }                                                                                               \
  extern "C" __global__ void gk_rope_##suffix(T* out, const T* x, GkRopeParams p) {               \
    gk_rope<T>(out, x, p);                                                                        \
  }                                                                                               \
  extern "C" __global__ void __launch_bounds__(GK_NN_THREADS)                                     \
      gk_attention_##suffix(T* out, const T* q, const T* k, const T* v, GkAttentionParams p) {    \
    gk_attention<T>(out, q, k, v, p);                                                             \
  }
GK_NN_FLOAT_KERNELS(f32, float)
GK_NN_FLOAT_KERNELS(f16, gk_half)
GK_NN_FLOAT_KERNELS(bf16, gk_bf16)
