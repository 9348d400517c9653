// Sha256: the SHA-256 hash (FIPS 180-4), streaming, for content addressing.
//
// The kernel cache names compiled kernels by the SHA-256 of everything that determines
// them, and checks its disk entries against a SHA-256 of their bytes. This is a small,
// portable implementation so that gpukit needs no crypto library for it; it is not
// hardened against timing attacks (nothing secret is hashed).
//
//   Sha256 hash;
//   hash.Update("ab");
//   hash.Update("c");
//   std::string hex = DigestToHex(hash.Finish());  // "ba7816bf..."
//   std::string same = Sha256Hex("abc");
//
// Thread safety: a Sha256 object is used by one thread at a time; the free functions are
// thread-safe.
#ifndef GPUKIT_RUNTIME_JIT_SHA256_H_
#define GPUKIT_RUNTIME_JIT_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace gpukit {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256() { Reset(); }

  // Appends `data` to the message.
  void Update(absl::string_view data);

  // Pads the message, returns its digest and resets the object for a new message.
  Sha256Digest Finish();

  // Forgets everything hashed so far.
  void Reset();

 private:
  void ProcessBlock(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_;  // the partial block not yet processed
  size_t buffered_bytes_ = 0;
  uint64_t message_bytes_ = 0;
};

// The digest of `data` in one call.
Sha256Digest Sha256Of(absl::string_view data);

// 64 lowercase hexadecimal characters.
std::string DigestToHex(const Sha256Digest& digest);

// DigestToHex(Sha256Of(data)).
std::string Sha256Hex(absl::string_view data);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_JIT_SHA256_H_
