// Reductions: sum, mean, max, min over all elements or one axis. Device twin of ReduceCpu
// (kernels/cpu/reduce.cc): the same accumulation types (double for the floating types, int64
// for integers, double for an integer mean), NaN propagation by max and min, wrapping integer
// sums and the same output dtypes. Only the order of floating additions differs (a tree
// here, a sequence there), so floating sums agree to rounding, not bit for bit.
//
// The input is seen as in[outer][extent][inner] (GkReduceParams). Kernels, for each op in
// sum, mean, max, min and each input dtype <dt>:
//   gk_reduce_rows_<op>_<dt>(Out* out, const T* in, Acc* partial, GkReduceParams p)
//     inner == 1. Block (s, o) reduces slice s of the gridDim.x slices of row o, with
//     warp shuffles. With one slice it stores the row's result; with more it stores its
//     partial accumulator in partial[o * gridDim.x + s] for gk_reduce_partials.
//   gk_reduce_partials_<op>_<dt>(Out* out, const Acc* partial, gk_int64 slices,
//                                GkReduceParams p)
//     One block per row: combines the row's `slices` partials and stores the result.
//   gk_reduce_cols_<op>_<dt>(Out* out, const T* in, GkReduceParams p)
//     inner > 1. One thread per output element walks the extent; neighbouring threads read
//     neighbouring elements.
// Blocks are 256 threads (GK_REDUCE_THREADS); the host launches them so.

#define GK_REDUCE_THREADS 256

__device__ __forceinline__ double gk_shfl_down(double v, int delta) {
  return __shfl_down_sync(0xffffffffu, v, delta);
}
__device__ __forceinline__ gk_int64 gk_shfl_down(gk_int64 v, int delta) {
  return __shfl_down_sync(0xffffffffu, v, delta);
}

__device__ __forceinline__ bool gk_is_nan(double v) { return v != v; }
__device__ __forceinline__ bool gk_is_nan(gk_int64) { return false; }

// Each op: its accumulator type (Acc), the identity every accumulator starts from, how two
// accumulators combine, and how the final accumulator becomes the output element.
// -0.0 is the identity of floating sums, so that a sum of negative zeros stays -0.0.
template <typename T>
struct SumOp {
  typedef typename Traits<T>::Wide Acc;
  typedef T Out;
  static __device__ __forceinline__ Acc identity() { return static_cast<Acc>(-0.0); }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) { return a + b; }
  static __device__ __forceinline__ Out finish(Acc a, const GkReduceParams&) {
    return Traits<T>::from_wide(a);
  }
};
// Integer sums wrap (through uint64) and produce int64.
#define GK_INTEGER_SUM(T)                                                                    \
  template <>                                                                                \
  struct SumOp<T> {                                                                          \
    typedef gk_int64 Acc;                                                                    \
    typedef gk_int64 Out;                                                                    \
    static __device__ __forceinline__ Acc identity() { return 0; }                           \
    static __device__ __forceinline__ Acc combine(Acc a, Acc b) {                            \
      return static_cast<gk_int64>(static_cast<gk_uint64>(a) + static_cast<gk_uint64>(b));   \
    }                                                                                        \
    static __device__ __forceinline__ Out finish(Acc a, const GkReduceParams&) { return a; } \
  };
GK_INTEGER_SUM(gk_int32)
GK_INTEGER_SUM(gk_int64)
GK_INTEGER_SUM(gk_uint8)

// A mean accumulates in double; integer inputs give float32.
template <typename T>
struct MeanOut {
  typedef T type;
};
template <>
struct MeanOut<gk_int32> {
  typedef float type;
};
template <>
struct MeanOut<gk_int64> {
  typedef float type;
};
template <>
struct MeanOut<gk_uint8> {
  typedef float type;
};
template <typename T>
struct MeanOp {
  typedef double Acc;
  typedef typename MeanOut<T>::type Out;
  static __device__ __forceinline__ Acc identity() { return -0.0; }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) { return a + b; }
  static __device__ __forceinline__ Out finish(Acc a, const GkReduceParams& p) {
    return Traits<Out>::from_wide(a / p.divisor);
  }
};

// Max and min: once an accumulator is NaN it stays NaN, and a NaN element wins.
template <typename T>
struct Lowest {
  static __device__ __forceinline__ typename Traits<T>::Wide value() {
    return -__longlong_as_double(0x7ff0000000000000LL);  // -inf
  }
};
template <>
struct Lowest<gk_int32> {
  static __device__ __forceinline__ gk_int64 value() { return -2147483647 - 1; }
};
template <>
struct Lowest<gk_int64> {
  static __device__ __forceinline__ gk_int64 value() { return -9223372036854775807LL - 1; }
};
template <>
struct Lowest<gk_uint8> {
  static __device__ __forceinline__ gk_int64 value() { return 0; }
};
template <typename T>
struct Highest {
  static __device__ __forceinline__ typename Traits<T>::Wide value() {
    return __longlong_as_double(0x7ff0000000000000LL);  // +inf
  }
};
template <>
struct Highest<gk_int32> {
  static __device__ __forceinline__ gk_int64 value() { return 2147483647; }
};
template <>
struct Highest<gk_int64> {
  static __device__ __forceinline__ gk_int64 value() { return 9223372036854775807LL; }
};
template <>
struct Highest<gk_uint8> {
  static __device__ __forceinline__ gk_int64 value() { return 255; }
};

template <typename T>
struct MaxOp {
  typedef typename Traits<T>::Wide Acc;
  typedef T Out;
  static __device__ __forceinline__ Acc identity() { return Lowest<T>::value(); }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) {
    return (b > a || gk_is_nan(b)) ? b : a;
  }
  static __device__ __forceinline__ Out finish(Acc a, const GkReduceParams&) {
    return Traits<T>::from_wide(a);
  }
};
template <typename T>
struct MinOp {
  typedef typename Traits<T>::Wide Acc;
  typedef T Out;
  static __device__ __forceinline__ Acc identity() { return Highest<T>::value(); }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) {
    return (b < a || gk_is_nan(b)) ? b : a;
  }
  static __device__ __forceinline__ Out finish(Acc a, const GkReduceParams&) {
    return Traits<T>::from_wide(a);
  }
};

// What an empty reduction stores: 0 for a sum, NaN otherwise (0 for integer outputs), as
// the CPU reference does. (The registry rejects empty max and min.)
template <typename Op>
__device__ __forceinline__ typename Op::Out gk_empty_result(bool is_sum) {
  typedef typename Op::Out Out;
  return is_sum ? Traits<Out>::from_wide(static_cast<gk_int64>(0))
                : Traits<Out>::from_wide(__longlong_as_double(0x7ff8000000000000LL));
}

// Combines every thread's accumulator of the block; thread 0 gets the result.
template <typename Op>
__device__ __forceinline__ typename Op::Acc gk_block_reduce(typename Op::Acc acc) {
  typedef typename Op::Acc Acc;
  __shared__ Acc warp_results[GK_REDUCE_THREADS / 32];
  for (int delta = 16; delta > 0; delta /= 2) acc = Op::combine(acc, gk_shfl_down(acc, delta));
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0) warp_results[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < static_cast<int>(blockDim.x / 32) ? warp_results[lane] : Op::identity();
    for (int delta = 16; delta > 0; delta /= 2) acc = Op::combine(acc, gk_shfl_down(acc, delta));
  }
  __syncthreads();  // warp_results may be reused by the caller's next row
  return acc;
}

template <typename Op, typename T>
__device__ __forceinline__ void gk_reduce_rows(typename Op::Out* __restrict__ out,
                                               const T* __restrict__ in,
                                               typename Op::Acc* __restrict__ partial,
                                               const GkReduceParams& p, bool is_sum) {
  typedef typename Op::Acc Acc;
  typedef GkPack<T> Pack;
  const gk_int64 slices = gridDim.x;
  // Slices start on pack boundaries, so an aligned row is read 16 bytes at a time.
  gk_int64 slice_length = (p.extent + slices - 1) / slices;
  slice_length = (slice_length + Pack::kCount - 1) / Pack::kCount * Pack::kCount;
  const gk_int64 begin = blockIdx.x * slice_length;
  const gk_int64 end = begin + slice_length < p.extent ? begin + slice_length : p.extent;
  for (gk_int64 row = blockIdx.y; row < p.outer; row += gridDim.y) {
    const T* data = in + row * p.extent;
    Acc acc = Op::identity();
    gk_int64 scalar_begin = begin;
    if (gk_aligned16(data) && end > begin) {
      const gk_int64 packs = (end - begin) / Pack::kCount;
      const Pack* packed = reinterpret_cast<const Pack*>(data + begin);
      const gk_int64 stride = blockDim.x;
      gk_int64 i = threadIdx.x;
      // Four loads in flight per thread before their values are combined.
      for (; i + 3 * stride < packs; i += 4 * stride) {
        Pack x[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) x[u] = packed[i + u * stride];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
#pragma unroll
          for (int j = 0; j < Pack::kCount; ++j) {
            acc = Op::combine(acc, static_cast<Acc>(gk_widen(x[u].v[j])));
          }
        }
      }
      for (; i < packs; i += stride) {
        const Pack x = packed[i];
#pragma unroll
        for (int j = 0; j < Pack::kCount; ++j) {
          acc = Op::combine(acc, static_cast<Acc>(gk_widen(x.v[j])));
        }
      }
      scalar_begin = begin + packs * Pack::kCount;
    }
    for (gk_int64 i = scalar_begin + threadIdx.x; i < end; i += blockDim.x) {
      acc = Op::combine(acc, static_cast<Acc>(gk_widen(data[i])));
    }
    acc = gk_block_reduce<Op>(acc);
    if (threadIdx.x != 0) continue;
    if (slices > 1) {
      partial[row * slices + blockIdx.x] = acc;
    } else {
      out[row] = p.extent == 0 ? gk_empty_result<Op>(is_sum) : Op::finish(acc, p);
    }
  }
}

template <typename Op>
__device__ __forceinline__ void gk_reduce_partials(typename Op::Out* __restrict__ out,
                                                   const typename Op::Acc* __restrict__ partial,
                                                   gk_int64 slices, const GkReduceParams& p) {
  typedef typename Op::Acc Acc;
  for (gk_int64 row = blockIdx.x; row < p.outer; row += gridDim.x) {
    Acc acc = Op::identity();
    for (gk_int64 i = threadIdx.x; i < slices; i += blockDim.x) {
      acc = Op::combine(acc, partial[row * slices + i]);
    }
    acc = gk_block_reduce<Op>(acc);
    if (threadIdx.x == 0) out[row] = Op::finish(acc, p);
  }
}

template <typename Op, typename T>
__device__ __forceinline__ void gk_reduce_cols(typename Op::Out* __restrict__ out,
                                               const T* __restrict__ in,
                                               const GkReduceParams& p, bool is_sum) {
  typedef typename Op::Acc Acc;
  GK_FOR_EACH(i, p.outer * p.inner) {
    const gk_int64 o = i / p.inner;
    const gk_int64 j = i % p.inner;
    const T* data = in + o * p.extent * p.inner + j;
    Acc acc = Op::identity();
    for (gk_int64 k = 0; k < p.extent; ++k) {
      acc = Op::combine(acc, static_cast<Acc>(gk_widen(data[k * p.inner])));
    }
    out[i] = p.extent == 0 ? gk_empty_result<Op>(is_sum) : Op::finish(acc, p);
  }
}

#define GK_REDUCE_KERNELS_FOR_OP(name, OP, is_sum, suffix, T)                              \
  extern "C" __global__ void __launch_bounds__(GK_REDUCE_THREADS)                           \
      gk_reduce_rows_##name##_##suffix(OP<T>::Out* out, const T* in, OP<T>::Acc* partial,   \
                                       GkReduceParams p) {                                  \
    gk_reduce_rows<OP<T>, T>(out, in, partial, p, is_sum);                                  \
  }                                                                                         \
  extern "C" __global__ void __launch_bounds__(GK_REDUCE_THREADS)                           \
      gk_reduce_partials_##name##_##suffix(OP<T>::Out* out, const OP<T>::Acc* partial,      \
                                           gk_int64 slices, GkReduceParams p) {             \
    gk_reduce_partials<OP<T> >(out, partial, slices, p);                                    \
  }                                                                                         \
  extern "C" __global__ void gk_reduce_cols_##name##_##suffix(OP<T>::Out* out, const T* in, \
                                                              GkReduceParams p) {           \
    gk_reduce_cols<OP<T>, T>(out, in, p, is_sum);                                           \
  }

#define GK_REDUCE_KERNELS(suffix, T)                              \
  GK_REDUCE_KERNELS_FOR_OP(sum, SumOp, true, suffix, T)           \
  GK_REDUCE_KERNELS_FOR_OP(mean, MeanOp, false, suffix, T)        \
  GK_REDUCE_KERNELS_FOR_OP(max, MaxOp, false, suffix, T)          \
  GK_REDUCE_KERNELS_FOR_OP(min, MinOp, false, suffix, T)
GK_FOR_EACH_DTYPE(GK_REDUCE_KERNELS)
