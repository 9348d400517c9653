// Host-side storage types for IEEE 754 binary16 (float16) and bfloat16.
//
// The host has no arithmetic on these formats: kernels load them as float, compute in float
// (or double) and round back on store. Each type is a trivially copyable 2-byte struct, so a
// buffer of device elements can be read as an array of them. Usage:
//
//   Float16 h = Float16::FromFloat(0.1f);  // h.bits == 0x2e66, nearest to 0.1
//   float f = h.ToFloat();                  // 0.0999755859375f, exact
//   BFloat16 b{0x3f80};                     // 1.0
//
// FromFloat rounds to nearest, ties to even, as IEEE 754's default mode does: values past the
// largest finite one round to infinity, tiny values to subnormals or signed zero, and a NaN
// stays a NaN (made quiet, sign and leading payload bits kept). ToFloat is exact: every
// float16 and bfloat16 value is a float.
//
// Thread safety: values; nothing is shared.
#ifndef GPUKIT_KERNELS_CPU_HALF_H_
#define GPUKIT_KERNELS_CPU_HALF_H_

#include <cstdint>
#include <type_traits>

namespace gpukit::kernels {

// IEEE 754 binary16: 1 sign bit, 5 exponent bits (bias 15), 10 fraction bits.
struct Float16 {
  uint16_t bits = 0;

  static Float16 FromFloat(float value);
  float ToFloat() const;
};

// bfloat16: the upper half of a float32 (1 sign bit, 8 exponent bits, 7 fraction bits).
struct BFloat16 {
  uint16_t bits = 0;

  static BFloat16 FromFloat(float value);
  float ToFloat() const;
};

// Kernels reinterpret device buffers as arrays of these types.
static_assert(sizeof(Float16) == 2 && std::is_trivially_copyable_v<Float16>);
static_assert(sizeof(BFloat16) == 2 && std::is_trivially_copyable_v<BFloat16>);

}  // namespace gpukit::kernels

#endif  // GPUKIT_KERNELS_CPU_HALF_H_
