#include "kernels/cpu/half.h"

#include <bit>
#include <cstdint>

namespace gpukit::kernels {
namespace {

constexpr uint32_t kFloatSignMask = 0x8000'0000u;
constexpr uint32_t kFloatExponentMask = 0x7f80'0000u;  // also the bits of +inf
constexpr uint32_t kFloatFractionMask = 0x007f'ffffu;
constexpr int kFloatFractionBits = 23;
constexpr int kFloatBias = 127;

constexpr uint16_t kHalfExponentMask = 0x7c00;  // also the bits of +inf
constexpr uint16_t kHalfQuietBit = 0x0200;
constexpr int kHalfFractionBits = 10;
constexpr int kHalfBias = 15;
// Float bits of 65520 = 65504 + ulp/2, the first magnitude that rounds to infinity (65504 has
// an odd fraction, so the tie goes up).
constexpr uint32_t kHalfOverflowThreshold = 0x477f'f000u;
// Float bits of 2^-14, the smallest normal float16.
constexpr uint32_t kHalfMinNormal = 0x3880'0000u;

// Shifts `value` right by `shift` (1..31) bits, rounding to nearest with ties to even.
uint32_t ShiftRightRoundEven(uint32_t value, int shift) {
  const uint32_t kept = value >> shift;
  const uint32_t dropped = value & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  return kept + ((dropped > half || (dropped == half && (kept & 1))) ? 1 : 0);
}

}  // namespace

Float16 Float16::FromFloat(float value) {
  const uint32_t f = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((f & kFloatSignMask) >> 16);
  const uint32_t magnitude = f & ~kFloatSignMask;

  if (magnitude > kFloatExponentMask) {  // NaN
    // The quiet bit keeps the result a NaN even when the payload bits that fit are all zero.
    const uint32_t payload = (magnitude & kFloatFractionMask) >> (kFloatFractionBits - 10);
    return Float16{static_cast<uint16_t>(sign | kHalfExponentMask | kHalfQuietBit | payload)};
  }
  if (magnitude >= kHalfOverflowThreshold) {  // includes +-inf
    return Float16{static_cast<uint16_t>(sign | kHalfExponentMask)};
  }
  if (magnitude >= kHalfMinNormal) {
    // Rebias the exponent in place; the fraction then sits 13 bits too far left. A carry out
    // of the rounded fraction correctly bumps the exponent (never to inf: see the threshold).
    const uint32_t rebiased =
        magnitude - (static_cast<uint32_t>(kFloatBias - kHalfBias) << kFloatFractionBits);
    return Float16{static_cast<uint16_t>(
        sign | ShiftRightRoundEven(rebiased, kFloatFractionBits - kHalfFractionBits))};
  }

  // Subnormal float16 (or zero): the result counts units of 2^-24. A normal float is
  // significand * 2^(exponent - 150) with a 24-bit significand, so the count is
  // significand >> (126 - exponent). Float subnormals (exponent 0) are far below 2^-25 and
  // round to zero.
  const int exponent = static_cast<int>(magnitude >> kFloatFractionBits);
  if (exponent == 0) return Float16{sign};
  const int shift = 126 - exponent;      // >= 14 because magnitude < 2^-14
  if (shift > 24) return Float16{sign};  // below 2^-25: rounds to zero
  const uint32_t significand = (magnitude & kFloatFractionMask) | (1u << kFloatFractionBits);
  // A result of 0x400 is the smallest normal float16, which is the correct encoding.
  return Float16{static_cast<uint16_t>(sign | ShiftRightRoundEven(significand, shift))};
}

float Float16::ToFloat() const {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exponent = (bits & kHalfExponentMask) >> kHalfFractionBits;
  const uint32_t fraction = bits & 0x03ffu;
  constexpr int kFractionShift = kFloatFractionBits - kHalfFractionBits;

  if (exponent == 0x1f) {  // inf or NaN: keep the payload
    return std::bit_cast<float>(sign | kFloatExponentMask | (fraction << kFractionShift));
  }
  if (exponent == 0) {
    // Zero or subnormal: fraction * 2^-24, exact in float (a normal float there).
    const float magnitude = static_cast<float>(fraction) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((exponent + kFloatBias - kHalfBias) << kFloatFractionBits) |
                              (fraction << kFractionShift));
}

BFloat16 BFloat16::FromFloat(float value) {
  const uint32_t f = std::bit_cast<uint32_t>(value);
  if ((f & ~kFloatSignMask) > kFloatExponentMask) {  // NaN
    // Truncate and set the quiet bit, so a payload only in the dropped bits stays a NaN.
    return BFloat16{static_cast<uint16_t>((f >> 16) | 0x0040)};
  }
  // bfloat16 is the top half of a float, so rounding is a 16-bit round-to-nearest-even on the
  // bits: add just under half an ulp, plus one more when the kept part is odd (ties to even).
  // A carry runs into the exponent, which turns the largest values into inf as it should;
  // float subnormals become bfloat16 subnormals the same way.
  const uint32_t rounded = f + 0x7fffu + ((f >> 16) & 1u);
  return BFloat16{static_cast<uint16_t>(rounded >> 16)};
}

float BFloat16::ToFloat() const { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

}  // namespace gpukit::kernels
