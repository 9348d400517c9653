// Element-wise math, clamp and where: the device twins of UnaryCpu, ClampCpu and WhereCpu
// (kernels/cpu/unary.cc). Floating types compute in float32 with the CUDA math library
// (expf, logf, erff, ...), within a few ulp of the CPU's double reference; integer abs, neg
// and relu, clamp and where are exact and agree bit for bit.
//
// Kernels (<fdt> is f32, f16, bf16; <idt> is i32, i64, u8; <dt> any of the six):
//   gk_<op>_<fdt>(T* out, const T* in, GkUnaryParams p) for op in exp, log, sqrt, rsqrt,
//     abs, neg, relu, gelu, silu, sigmoid, tanh
//   gk_<op>_<idt>(T* out, const T* in, GkUnaryParams p) for op in abs, neg, relu
//   gk_clamp_<dt>(T* out, const T* in, GkClampParams p)
//   gk_where_<dt>(T* out, const void* cond, const T* a, const T* b, GkWhereParams p)

// ---- Unary ----------------------------------------------------------------------------------

#define GK_FLOAT_UNARY(name, expr)                                          \
  struct name {                                                             \
    static __device__ __forceinline__ float apply(float x) { return expr; } \
  };
GK_FLOAT_UNARY(ExpOp, expf(x))
GK_FLOAT_UNARY(LogOp, logf(x))
GK_FLOAT_UNARY(SqrtOp, sqrtf(x))
GK_FLOAT_UNARY(RsqrtOp, 1.0f / sqrtf(x))
GK_FLOAT_UNARY(AbsOp, fabsf(x))
GK_FLOAT_UNARY(NegOp, -x)
GK_FLOAT_UNARY(ReluOp, (x > 0.0f || x != x) ? x : 0.0f)
GK_FLOAT_UNARY(GeluOp, 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)))
GK_FLOAT_UNARY(SiluOp, x / (1.0f + expf(-x)))
GK_FLOAT_UNARY(SigmoidOp, 1.0f / (1.0f + expf(-x)))
GK_FLOAT_UNARY(TanhOp, tanhf(x))

// Integer abs, neg and relu wrap through uint64, as the CPU reference's do through the
// unsigned type; the store narrows modulo 2^bits.
struct IntAbsOp {
  static __device__ __forceinline__ gk_int64 apply(gk_int64 x) {
    return x < 0 ? static_cast<gk_int64>(0ULL - static_cast<gk_uint64>(x)) : x;
  }
};
struct IntNegOp {
  static __device__ __forceinline__ gk_int64 apply(gk_int64 x) {
    return static_cast<gk_int64>(0ULL - static_cast<gk_uint64>(x));
  }
};
struct IntReluOp {
  static __device__ __forceinline__ gk_int64 apply(gk_int64 x) { return x > 0 ? x : 0; }
};

template <typename T, typename Op>
__device__ __forceinline__ void gk_unary_float(T* __restrict__ out, const T* __restrict__ in,
                                               const GkUnaryParams& p) {
  GK_FOR_EACH(i, p.count) {
    out[i] = Traits<T>::from_compute(Op::apply(Traits<T>::to_compute(in[i])));
  }
}

template <typename T, typename Op>
__device__ __forceinline__ void gk_unary_int(T* __restrict__ out, const T* __restrict__ in,
                                             const GkUnaryParams& p) {
  GK_FOR_EACH(i, p.count) {
    out[i] = Traits<T>::from_wide(Op::apply(static_cast<gk_int64>(in[i])));
  }
}

#define GK_FLOAT_UNARY_KERNEL(name, Op, suffix, T)                                        \
  extern "C" __global__ void gk_##name##_##suffix(T* out, const T* in, GkUnaryParams p) { \
    gk_unary_float<T, Op>(out, in, p);                                                    \
  }
#define GK_FLOAT_UNARY_KERNELS(suffix, T)              \
  GK_FLOAT_UNARY_KERNEL(exp, ExpOp, suffix, T)         \
  GK_FLOAT_UNARY_KERNEL(log, LogOp, suffix, T)         \
  GK_FLOAT_UNARY_KERNEL(sqrt, SqrtOp, suffix, T)       \
  GK_FLOAT_UNARY_KERNEL(rsqrt, RsqrtOp, suffix, T)     \
  GK_FLOAT_UNARY_KERNEL(abs, AbsOp, suffix, T)         \
  GK_FLOAT_UNARY_KERNEL(neg, NegOp, suffix, T)         \
  GK_FLOAT_UNARY_KERNEL(relu, ReluOp, suffix, T)       \
  GK_FLOAT_UNARY_KERNEL(gelu, GeluOp, suffix, T)       \
  GK_FLOAT_UNARY_KERNEL(silu, SiluOp, suffix, T)       \
  GK_FLOAT_UNARY_KERNEL(sigmoid, SigmoidOp, suffix, T) \
  GK_FLOAT_UNARY_KERNEL(tanh, TanhOp, suffix, T)
GK_FLOAT_UNARY_KERNELS(f32, float)
GK_FLOAT_UNARY_KERNELS(f16, gk_half)
GK_FLOAT_UNARY_KERNELS(bf16, gk_bf16)

#define GK_INT_UNARY_KERNEL(name, Op, suffix, T)                                          \
  extern "C" __global__ void gk_##name##_##suffix(T* out, const T* in, GkUnaryParams p) { \
    gk_unary_int<T, Op>(out, in, p);                                                      \
  }
#define GK_INT_UNARY_KERNELS(suffix, T)         \
  GK_INT_UNARY_KERNEL(abs, IntAbsOp, suffix, T) \
  GK_INT_UNARY_KERNEL(neg, IntNegOp, suffix, T) \
  GK_INT_UNARY_KERNEL(relu, IntReluOp, suffix, T)
GK_INT_UNARY_KERNELS(i32, gk_int32)
GK_INT_UNARY_KERNELS(i64, gk_int64)
GK_INT_UNARY_KERNELS(u8, gk_uint8)

// ---- Clamp ----------------------------------------------------------------------------------

// The comparison type: float for the floating dtypes, int64 for integers.
template <typename T>
struct ClampTraits {
  typedef float C;
  static __device__ __forceinline__ float load(T v) { return Traits<T>::to_compute(v); }
  static __device__ __forceinline__ T store(float v) { return Traits<T>::from_compute(v); }
  static __device__ __forceinline__ float bound(double f, gk_int64) {
    return static_cast<float>(f);
  }
};
#define GK_INT_CLAMP_TRAITS(T)                                                          \
  template <>                                                                           \
  struct ClampTraits<T> {                                                               \
    typedef gk_int64 C;                                                                 \
    static __device__ __forceinline__ gk_int64 load(T v) { return v; }                  \
    static __device__ __forceinline__ T store(gk_int64 v) { return static_cast<T>(v); } \
    static __device__ __forceinline__ gk_int64 bound(double, gk_int64 i) { return i; }  \
  };
GK_INT_CLAMP_TRAITS(gk_int32)
GK_INT_CLAMP_TRAITS(gk_int64)
GK_INT_CLAMP_TRAITS(gk_uint8)

template <typename T>
__device__ __forceinline__ void gk_clamp(T* __restrict__ out, const T* __restrict__ in,
                                         const GkClampParams& p) {
  typedef ClampTraits<T> Ct;
  typedef typename Ct::C C;
  const C lo = Ct::bound(p.min_float, p.min_int);
  const C hi = Ct::bound(p.max_float, p.max_int);
  GK_FOR_EACH(i, p.count) {
    C v = Ct::load(in[i]);
    if (p.has_min && v < lo) v = lo;
    if (p.has_max && v > hi) v = hi;
    out[i] = Ct::store(v);
  }
}

// ---- Where ----------------------------------------------------------------------------------

// Element offset of operand `op` for output element `i` (GK_OPERAND_SCALAR has none).
__device__ __forceinline__ gk_int64 gk_where_offset(const GkOperand& op, gk_int64 i,
                                                    const GkWhereParams& p) {
  if (op.mode == GK_OPERAND_CONTIGUOUS) return i;
  if (op.mode != GK_OPERAND_STRIDED) return 0;
  gk_int64 offset = 0;
  gk_int64 rest = i;
  for (int d = p.rank - 1; d >= 0; --d) {
    offset += (rest % p.dims[d]) * op.strides[d];
    rest /= p.dims[d];
  }
  return offset;
}

__device__ __forceinline__ bool gk_cond_true(const void* cond, gk_int64 index,
                                             const GkWhereParams& p) {
  gk_uint64 bits;
  if (p.cond_bytes == 1) {
    bits = static_cast<const gk_uint8*>(cond)[index];
  } else if (p.cond_bytes == 2) {
    bits = static_cast<const unsigned short*>(cond)[index];
  } else if (p.cond_bytes == 4) {
    bits = static_cast<const gk_uint32*>(cond)[index];
  } else {
    bits = static_cast<const gk_uint64*>(cond)[index];
  }
  return (bits & p.cond_mask) != 0;
}

template <typename T>
__device__ __forceinline__ void gk_where(T* __restrict__ out, const void* __restrict__ cond,
                                         const T* __restrict__ a, const T* __restrict__ b,
                                         const GkWhereParams& p) {
  const T a_scalar = gk_from_bits<T>(p.a.scalar_bits);
  const T b_scalar = gk_from_bits<T>(p.b.scalar_bits);
  GK_FOR_EACH(i, p.count) {
    if (gk_cond_true(cond, gk_where_offset(p.cond, i, p), p)) {
      out[i] = p.a.mode == GK_OPERAND_SCALAR ? a_scalar : a[gk_where_offset(p.a, i, p)];
    } else {
      out[i] = p.b.mode == GK_OPERAND_SCALAR ? b_scalar : b[gk_where_offset(p.b, i, p)];
    }
  }
}

#define GK_CLAMP_WHERE_KERNELS(suffix, T)                                                        \
  extern "C" __global__ void gk_clamp_##suffix(T* out, const T* in, GkClampParams p) {           \
    gk_clamp<T>(out, in, p);                                                                     \
  }                                                                                              \
  extern "C" __global__ void gk_where_##suffix(T* out, const void* cond, const T* a, const T* b, \
                                               GkWhereParams p) {                                \
    gk_where<T>(out, cond, a, b, p);                                                             \
  }
GK_FOR_EACH_DTYPE(GK_CLAMP_WHERE_KERNELS)
