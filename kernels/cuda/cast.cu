// Dtype casts, the device twin of CastCpu (kernels/cpu/elementwise.cc): the source widens to
// double or int64 and converts from there with one rounding, saturation or wrap.
//
// Kernels: gk_cast_<from>_<to>(To* out, const From* in, GkCastParams p), all 36 pairs.

template <typename From, typename To>
__device__ __forceinline__ void gk_cast(To* __restrict__ out, const From* __restrict__ in,
                                        const GkCastParams& p) {
  // Reads 16 bytes at a time when both sides are aligned; the writes follow the reads.
  typedef GkPack<From> Pack;
  gk_int64 done = 0;
  if (gk_aligned16(in) && gk_aligned16(out)) {
    const gk_int64 packs = p.count / Pack::kCount;
    GK_FOR_EACH(i, packs) {
      const Pack x = reinterpret_cast<const Pack*>(in)[i];
#pragma unroll
      for (int j = 0; j < Pack::kCount; ++j) {
        out[i * Pack::kCount + j] = Traits<To>::from_wide(gk_widen(x.v[j]));
      }
    }
    done = packs * Pack::kCount;
  }
  for (gk_int64 i = done + static_cast<gk_int64>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < p.count; i += static_cast<gk_int64>(gridDim.x) * blockDim.x) {
    out[i] = Traits<To>::from_wide(gk_widen(in[i]));
  }
}

#define GK_CAST_KERNEL(from_suffix, From, to_suffix, To)                                    \
  extern "C" __global__ void gk_cast_##from_suffix##_##to_suffix(To* out, const From* in,   \
                                                                 GkCastParams p) {          \
    gk_cast<From, To>(out, in, p);                                                          \
  }
#define GK_CASTS_FROM(from_suffix, From)              \
  GK_CAST_KERNEL(from_suffix, From, f32, float)       \
  GK_CAST_KERNEL(from_suffix, From, f16, gk_half)     \
  GK_CAST_KERNEL(from_suffix, From, bf16, gk_bf16)    \
  GK_CAST_KERNEL(from_suffix, From, i32, gk_int32)    \
  GK_CAST_KERNEL(from_suffix, From, i64, gk_int64)    \
  GK_CAST_KERNEL(from_suffix, From, u8, gk_uint8)
GK_FOR_EACH_DTYPE(GK_CASTS_FROM)
