#include "runtime/jit/sha256.h"

#include <algorithm>
#include <cstring>

namespace gpukit {
namespace {

// The first 32 bits of the fractional parts of the cube roots of the first 64 primes.
constexpr uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr uint32_t RotateRight(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

}  // namespace

void Sha256::Reset() {
  // The first 32 bits of the fractional parts of the square roots of the first 8 primes.
  state_ = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
            0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  buffered_bytes_ = 0;
  message_bytes_ = 0;
}

void Sha256::ProcessBlock(const uint8_t* block) {
  uint32_t w[64];
  for (size_t i = 0; i < 16; ++i) {
    w[i] = (uint32_t{block[4 * i]} << 24) | (uint32_t{block[4 * i + 1]} << 16) |
           (uint32_t{block[4 * i + 2]} << 8) | uint32_t{block[4 * i + 3]};
  }
  for (int i = 16; i < 64; ++i) {
    const uint32_t s0 = RotateRight(w[i - 15], 7) ^ RotateRight(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const uint32_t s1 = RotateRight(w[i - 2], 17) ^ RotateRight(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int i = 0; i < 64; ++i) {
    const uint32_t s1 = RotateRight(e, 6) ^ RotateRight(e, 11) ^ RotateRight(e, 25);
    const uint32_t choose = (e & f) ^ (~e & g);
    const uint32_t t1 = h + s1 + choose + kRoundConstants[i] + w[i];
    const uint32_t s0 = RotateRight(a, 2) ^ RotateRight(a, 13) ^ RotateRight(a, 22);
    const uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    const uint32_t t2 = s0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

void Sha256::Update(absl::string_view data) {
  if (data.empty()) return;  // data() may be null; memcpy must not see it
  const auto* bytes = reinterpret_cast<const uint8_t*>(data.data());
  size_t remaining = data.size();
  message_bytes_ += remaining;
  if (buffered_bytes_ > 0) {
    const size_t take = std::min(remaining, buffer_.size() - buffered_bytes_);
    std::memcpy(buffer_.data() + buffered_bytes_, bytes, take);
    buffered_bytes_ += take;
    bytes += take;
    remaining -= take;
    if (buffered_bytes_ < buffer_.size()) return;
    ProcessBlock(buffer_.data());
    buffered_bytes_ = 0;
  }
  for (; remaining >= 64; remaining -= 64, bytes += 64) ProcessBlock(bytes);
  if (remaining > 0) {
    std::memcpy(buffer_.data(), bytes, remaining);
    buffered_bytes_ = remaining;
  }
}

Sha256Digest Sha256::Finish() {
  const uint64_t message_bits = message_bytes_ * 8;
  // Padding: one 1 bit, zeros up to 56 bytes mod 64, then the length in bits, big-endian.
  uint8_t padding[72] = {0x80};
  const size_t pad_bytes = (buffered_bytes_ < 56 ? 56 : 120) - buffered_bytes_;
  for (int i = 0; i < 8; ++i) {
    padding[pad_bytes + i] = static_cast<uint8_t>(message_bits >> (56 - 8 * i));
  }
  Update(absl::string_view(reinterpret_cast<const char*>(padding), pad_bytes + 8));
  Sha256Digest digest;
  for (size_t i = 0; i < 8; ++i) {
    digest[4 * i] = static_cast<uint8_t>(state_[i] >> 24);
    digest[4 * i + 1] = static_cast<uint8_t>(state_[i] >> 16);
    digest[4 * i + 2] = static_cast<uint8_t>(state_[i] >> 8);
    digest[4 * i + 3] = static_cast<uint8_t>(state_[i]);
  }
  Reset();
  return digest;
}

Sha256Digest Sha256Of(absl::string_view data) {
  Sha256 hash;
  hash.Update(data);
  return hash.Finish();
}

std::string DigestToHex(const Sha256Digest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex(2 * digest.size(), '0');
  for (size_t i = 0; i < digest.size(); ++i) {
    hex[2 * i] = kHex[digest[i] >> 4];
    hex[2 * i + 1] = kHex[digest[i] & 0xf];
  }
  return hex;
}

std::string Sha256Hex(absl::string_view data) { return DigestToHex(Sha256Of(data)); }

}  // namespace gpukit
