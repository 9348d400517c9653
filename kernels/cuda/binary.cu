// Binary element-wise built-in kernels: add, sub, mul, div with broadcasting. Device twins
// of BinaryCpu (kernels/cpu/elementwise.cc); the results agree element for element (float
// arithmetic is IEEE on both sides, and rounding and wrapping follow prelude.cuh).
//
// Kernels (extern "C", one per op and dtype; all operands are in the op's compute dtype):
//   gk_add_<dt>, gk_sub_<dt>, gk_mul_<dt>, gk_div_<dt>(T* out, const T* a, const T* b,
//                                                      GkBinaryParams p)

struct AddOp {
  template <typename C>
  __device__ __forceinline__ C operator()(C a, C b) const {
    return a + b;
  }
};
struct SubOp {
  template <typename C>
  __device__ __forceinline__ C operator()(C a, C b) const {
    return a - b;
  }
};
struct MulOp {
  template <typename C>
  __device__ __forceinline__ C operator()(C a, C b) const {
    return a * b;
  }
};
struct DivOp {
  template <typename C>
  __device__ __forceinline__ C operator()(C a, C b) const {
    return a / b;
  }
};

// Integer arithmetic goes through uint64, whose wrapping is defined; the store narrows it
// modulo 2^bits, as the CPU reference's does.
template <typename Op, typename C>
__device__ __forceinline__ C gk_apply(Op op, C a, C b) {
  return op(a, b);
}
template <typename Op>
__device__ __forceinline__ gk_int32 gk_apply(Op op, gk_int32 a, gk_int32 b) {
  return static_cast<gk_int32>(static_cast<gk_uint32>(
      op(static_cast<gk_uint64>(static_cast<gk_int64>(a)),
         static_cast<gk_uint64>(static_cast<gk_int64>(b)))));
}
template <typename Op>
__device__ __forceinline__ gk_int64 gk_apply(Op op, gk_int64 a, gk_int64 b) {
  return static_cast<gk_int64>(op(static_cast<gk_uint64>(a), static_cast<gk_uint64>(b)));
}
template <typename Op>
__device__ __forceinline__ gk_uint8 gk_apply(Op op, gk_uint8 a, gk_uint8 b) {
  return static_cast<gk_uint8>(op(static_cast<gk_uint64>(a), static_cast<gk_uint64>(b)));
}
// Integer division never reaches the device (the registry computes it in float32); NumPy's
// floor division is still defined here so that no input can be undefined behaviour.
__device__ __forceinline__ gk_int64 gk_floor_div(gk_int64 a, gk_int64 b) {
  if (b == 0) return 0;
  if (b == -1) return static_cast<gk_int64>(0ULL - static_cast<gk_uint64>(a));
  gk_int64 q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}
__device__ __forceinline__ gk_int32 gk_apply(DivOp, gk_int32 a, gk_int32 b) {
  return static_cast<gk_int32>(static_cast<gk_uint32>(
      static_cast<gk_uint64>(gk_floor_div(a, b))));
}
__device__ __forceinline__ gk_int64 gk_apply(DivOp, gk_int64 a, gk_int64 b) {
  return gk_floor_div(a, b);
}
__device__ __forceinline__ gk_uint8 gk_apply(DivOp, gk_uint8 a, gk_uint8 b) {
  return b == 0 ? 0 : static_cast<gk_uint8>(a / b);
}


// The input element of operand `op` for output element `i`.
template <typename T>
__device__ __forceinline__ T gk_load(const T* data, const GkOperand& op, T scalar, gk_int64 i,
                                     const GkBinaryParams& p) {
  if (op.mode == GK_OPERAND_CONTIGUOUS) return data[i];
  if (op.mode == GK_OPERAND_SCALAR) return scalar;
  if (op.mode == GK_OPERAND_REPEAT) return data[0];
  gk_int64 offset = 0;
  gk_int64 rest = i;
  for (int d = p.rank - 1; d >= 0; --d) {
    const gk_int64 index = rest % p.dims[d];
    rest /= p.dims[d];
    offset += index * op.strides[d];
  }
  return data[offset];
}

template <typename T, typename Op>
__device__ __forceinline__ void gk_binary(T* __restrict__ out, const T* __restrict__ a,
                                          const T* __restrict__ b, const GkBinaryParams& p) {
  typedef Traits<T> Tr;
  const Op op{};
  const T a_scalar = gk_from_bits<T>(p.a.scalar_bits);
  const T b_scalar = gk_from_bits<T>(p.b.scalar_bits);
  if (p.a.mode != GK_OPERAND_STRIDED && p.b.mode != GK_OPERAND_STRIDED) {
    // The common case: no index arithmetic at all.
    const bool a_flat = p.a.mode == GK_OPERAND_CONTIGUOUS;
    const bool b_flat = p.b.mode == GK_OPERAND_CONTIGUOUS;
    const T a_fixed = p.a.mode == GK_OPERAND_REPEAT ? a[0] : a_scalar;
    const T b_fixed = p.b.mode == GK_OPERAND_REPEAT ? b[0] : b_scalar;
    gk_int64 done = 0;
    if (gk_aligned16(out) && (!a_flat || gk_aligned16(a)) && (!b_flat || gk_aligned16(b))) {
      // 16 bytes per access; the tail below takes what does not fill a pack.
      typedef GkPack<T> Pack;
      const gk_int64 packs = p.count / Pack::kCount;
      GK_FOR_EACH(i, packs) {
        Pack x, y, r;
        if (a_flat) x = reinterpret_cast<const Pack*>(a)[i];
        if (b_flat) y = reinterpret_cast<const Pack*>(b)[i];
#pragma unroll
        for (int j = 0; j < Pack::kCount; ++j) {
          const T xj = a_flat ? x.v[j] : a_fixed;
          const T yj = b_flat ? y.v[j] : b_fixed;
          r.v[j] = Tr::from_compute(gk_apply(op, Tr::to_compute(xj), Tr::to_compute(yj)));
        }
        reinterpret_cast<Pack*>(out)[i] = r;
      }
      done = packs * Pack::kCount;
    }
    for (gk_int64 i = done + static_cast<gk_int64>(blockIdx.x) * blockDim.x + threadIdx.x;
         i < p.count; i += static_cast<gk_int64>(gridDim.x) * blockDim.x) {
      const T x = a_flat ? a[i] : a_fixed;
      const T y = b_flat ? b[i] : b_fixed;
      out[i] = Tr::from_compute(gk_apply(op, Tr::to_compute(x), Tr::to_compute(y)));
    }
    return;
  }
  GK_FOR_EACH(i, p.count) {
    const T x = gk_load(a, p.a, a_scalar, i, p);
    const T y = gk_load(b, p.b, b_scalar, i, p);
    out[i] = Tr::from_compute(gk_apply(op, Tr::to_compute(x), Tr::to_compute(y)));
  }
}

#define GK_BINARY_KERNELS(suffix, T)                                                         \
  extern "C" __global__ void gk_add_##suffix(T* out, const T* a, const T* b,                 \
                                             GkBinaryParams p) {                             \
    gk_binary<T, AddOp>(out, a, b, p);                                                       \
  }                                                                                          \
  extern "C" __global__ void gk_sub_##suffix(T* out, const T* a, const T* b,                 \
                                             GkBinaryParams p) {                             \
    gk_binary<T, SubOp>(out, a, b, p);                                                       \
  }                                                                                          \
  extern "C" __global__ void gk_mul_##suffix(T* out, const T* a, const T* b,                 \
                                             GkBinaryParams p) {                             \
    gk_binary<T, MulOp>(out, a, b, p);                                                       \
  }                                                                                          \
  extern "C" __global__ void gk_div_##suffix(T* out, const T* a, const T* b,                 \
                                             GkBinaryParams p) {                             \
    gk_binary<T, DivOp>(out, a, b, p);                                                       \
  }
GK_FOR_EACH_DTYPE(GK_BINARY_KERNELS)
