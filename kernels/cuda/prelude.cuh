// Device-side element types and conversions shared by every built-in kernel source.
//
// The build embeds op_params.h, then this file, ahead of each kernels/cuda/*.cu source, and
// NVRTC compiles the result with no include path: nothing here includes a header. Half
// precision goes through PTX conversion instructions rather than cuda_fp16.h, so the sources
// compile with any NVRTC, with or without the toolkit's headers on the machine.
//
// The conversions mirror the CPU reference (kernels/cpu/dispatch.h) exactly, so a device
// result can be compared with the CPU's: floating values widen to double and integers to
// int64; float16 and bfloat16 are rounded once, to nearest-even (through a round-to-odd
// float, which makes double -> float -> half a single rounding); float to integer truncates
// toward zero and saturates, NaN becoming 0; integer to integer wraps.

typedef unsigned char gk_uint8;
typedef unsigned int gk_uint32;

struct gk_half {
  unsigned short bits;
};
struct gk_bf16 {
  unsigned short bits;
};

// ---- float <-> half, bfloat16 ------------------------------------------------------------

__device__ __forceinline__ float gk_to_float(gk_half h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
}
__device__ __forceinline__ float gk_to_float(gk_bf16 b) {
  return __uint_as_float(static_cast<gk_uint32>(b.bits) << 16);
}
__device__ __forceinline__ gk_half gk_half_rn(float f) {
  gk_half h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}
__device__ __forceinline__ gk_bf16 gk_bf16_rn(float f) {
  gk_bf16 b;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b.bits) : "f"(f));
  return b;
}

// double -> float rounded to odd: truncate, then set the last bit if anything was dropped.
__device__ __forceinline__ float gk_float_rto(double d) {
  if (!(d - d == 0.0)) return static_cast<float>(d);  // inf or NaN
  float r;
  asm("cvt.rz.f32.f64 %0, %1;" : "=f"(r) : "d"(d));
  if (static_cast<double>(r) == d) return r;
  return __uint_as_float(__float_as_uint(r) | 1u);
}
// int64 -> float rounded to odd.
__device__ __forceinline__ float gk_float_rto(gk_int64 v) {
  float r;
  asm("cvt.rz.f32.s64 %0, %1;" : "=f"(r) : "l"(v));
  gk_int64 back;
  asm("cvt.rzi.s64.f32 %0, %1;" : "=l"(back) : "f"(r));
  if (back == v) return r;
  return __uint_as_float(__float_as_uint(r) | 1u);
}

// ---- Element traits ------------------------------------------------------------------------

// Traits<T>: Compute is the element-wise arithmetic type (float for the floating types, T
// for integers); Wide the accumulation and conversion type (double or int64).
template <typename T>
struct Traits;

template <>
struct Traits<float> {
  typedef float Compute;
  typedef double Wide;
  static __device__ __forceinline__ float to_compute(float v) { return v; }
  static __device__ __forceinline__ float from_compute(float v) { return v; }
  static __device__ __forceinline__ float from_wide(double v) { return static_cast<float>(v); }
  static __device__ __forceinline__ float from_wide(gk_int64 v) { return static_cast<float>(v); }
};
template <>
struct Traits<gk_half> {
  typedef float Compute;
  typedef double Wide;
  static __device__ __forceinline__ float to_compute(gk_half v) { return gk_to_float(v); }
  static __device__ __forceinline__ gk_half from_compute(float v) { return gk_half_rn(v); }
  static __device__ __forceinline__ gk_half from_wide(double v) {
    return gk_half_rn(gk_float_rto(v));
  }
  static __device__ __forceinline__ gk_half from_wide(gk_int64 v) {
    return gk_half_rn(gk_float_rto(v));
  }
};
template <>
struct Traits<gk_bf16> {
  typedef float Compute;
  typedef double Wide;
  static __device__ __forceinline__ float to_compute(gk_bf16 v) { return gk_to_float(v); }
  static __device__ __forceinline__ gk_bf16 from_compute(float v) { return gk_bf16_rn(v); }
  static __device__ __forceinline__ gk_bf16 from_wide(double v) {
    return gk_bf16_rn(gk_float_rto(v));
  }
  static __device__ __forceinline__ gk_bf16 from_wide(gk_int64 v) {
    return gk_bf16_rn(gk_float_rto(v));
  }
};

// Truncates toward zero and saturates at [lo, hi]; NaN becomes 0. `hi_plus_one` is hi + 1,
// a power of two and so exact in double.
template <typename I>
__device__ __forceinline__ I gk_saturate(double v, double lo, double hi_plus_one, I min, I max) {
  if (v != v) return 0;
  if (v < lo) return min;
  if (v >= hi_plus_one) return max;
  return static_cast<I>(static_cast<gk_int64>(v));
}

template <>
struct Traits<gk_int32> {
  typedef gk_int32 Compute;
  typedef gk_int64 Wide;
  static __device__ __forceinline__ gk_int32 to_compute(gk_int32 v) { return v; }
  static __device__ __forceinline__ gk_int32 from_compute(gk_int32 v) { return v; }
  static __device__ __forceinline__ gk_int32 from_wide(double v) {
    return gk_saturate<gk_int32>(v, -2147483648.0, 2147483648.0, -2147483647 - 1, 2147483647);
  }
  static __device__ __forceinline__ gk_int32 from_wide(gk_int64 v) {
    return static_cast<gk_int32>(static_cast<gk_uint32>(static_cast<gk_uint64>(v)));
  }
};
template <>
struct Traits<gk_int64> {
  typedef gk_int64 Compute;
  typedef gk_int64 Wide;
  static __device__ __forceinline__ gk_int64 to_compute(gk_int64 v) { return v; }
  static __device__ __forceinline__ gk_int64 from_compute(gk_int64 v) { return v; }
  static __device__ __forceinline__ gk_int64 from_wide(double v) {
    return gk_saturate<gk_int64>(v, -9223372036854775808.0, 9223372036854775808.0,
                                 -9223372036854775807LL - 1, 9223372036854775807LL);
  }
  static __device__ __forceinline__ gk_int64 from_wide(gk_int64 v) { return v; }
};
template <>
struct Traits<gk_uint8> {
  typedef gk_uint8 Compute;
  typedef gk_int64 Wide;
  static __device__ __forceinline__ gk_uint8 to_compute(gk_uint8 v) { return v; }
  static __device__ __forceinline__ gk_uint8 from_compute(gk_uint8 v) { return v; }
  static __device__ __forceinline__ gk_uint8 from_wide(double v) {
    return gk_saturate<gk_uint8>(v, 0.0, 256.0, 0, 255);
  }
  static __device__ __forceinline__ gk_uint8 from_wide(gk_int64 v) {
    return static_cast<gk_uint8>(static_cast<gk_uint64>(v));
  }
};

// A value of T from its bytes, held in the low bytes of `bits` (a scalar operand).
template <typename T>
__device__ __forceinline__ T gk_from_bits(gk_uint64 bits) {
  return static_cast<T>(bits);  // the integers: truncation keeps the low bytes
}
template <>
__device__ __forceinline__ float gk_from_bits<float>(gk_uint64 bits) {
  return __uint_as_float(static_cast<gk_uint32>(bits));
}
template <>
__device__ __forceinline__ gk_half gk_from_bits<gk_half>(gk_uint64 bits) {
  gk_half h;
  h.bits = static_cast<unsigned short>(bits);
  return h;
}
template <>
__device__ __forceinline__ gk_bf16 gk_from_bits<gk_bf16>(gk_uint64 bits) {
  gk_bf16 b;
  b.bits = static_cast<unsigned short>(bits);
  return b;
}

template <typename T>
__device__ __forceinline__ typename Traits<T>::Wide gk_widen(T v) {
  return static_cast<typename Traits<T>::Wide>(Traits<T>::to_compute(v));
}

// 16 bytes of T, loaded and stored as one vector access (ld.global.v4 and the like), which
// is what lets memory-bound kernels approach the device's copy bandwidth.
template <typename T>
struct __align__(16) GkPack {
  static const int kCount = 16 / sizeof(T);
  T v[kCount];
};

__device__ __forceinline__ bool gk_aligned16(const void* p) {
  return (reinterpret_cast<unsigned long long>(p) & 15) == 0;
}

// A grid-stride loop over [0, n).
#define GK_FOR_EACH(i, n)                                                                \
  for (gk_int64 i = static_cast<gk_int64>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<gk_int64>(gridDim.x) * blockDim.x)

// Instantiates MACRO(suffix, type) for every dtype, with the suffix the host uses in kernel
// names (runtime/cuda: "<kernel>_<suffix>").
#define GK_FOR_EACH_DTYPE(MACRO) \
  MACRO(f32, float)              \
  MACRO(f16, gk_half)            \
  MACRO(bf16, gk_bf16)           \
  MACRO(i32, gk_int32)           \
  MACRO(i64, gk_int64)           \
  MACRO(u8, gk_uint8)
