// SHA-256 (runtime/jit/sha256.h) against the FIPS 180-2 test vectors.
#include "runtime/jit/sha256.h"

#include <algorithm>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/random_seed.h"

namespace gpukit {
namespace {

struct Vector {
  std::string name;
  std::string message;
  std::string digest_hex;
};

class Sha256VectorTest : public ::testing::TestWithParam<Vector> {};

TEST_P(Sha256VectorTest, MatchesFips180Digest) {
  EXPECT_EQ(Sha256Hex(GetParam().message), GetParam().digest_hex);
}

TEST_P(Sha256VectorTest, ByteAtATimeMatchesOneShot) {
  Sha256 hash;
  for (char c : GetParam().message) hash.Update(std::string(1, c));
  EXPECT_EQ(DigestToHex(hash.Finish()), GetParam().digest_hex);
}

INSTANTIATE_TEST_SUITE_P(
    Fips180, Sha256VectorTest,
    ::testing::Values(
        Vector{"abc", "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        Vector{"empty", "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        Vector{"bits448", "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
               "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        Vector{"bits896",
               "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqk"
               "lmnopqrlmnopqrsmnopqrstnopqrstu",
               "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
        Vector{"millionA", std::string(1'000'000, 'a'),
               "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"}),
    [](const ::testing::TestParamInfo<Vector>& info) { return info.param.name; });

// Lengths around the 55/56/64-byte padding boundaries, split into random pieces.
TEST(Sha256Test, RandomSplitsMatchOneShot) {
  const uint32_t seed = testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (GPUKIT_TEST_SEED)");
  std::mt19937 random(seed);
  for (size_t length : {0u, 1u, 55u, 56u, 57u, 63u, 64u, 65u, 119u, 120u, 128u, 1000u}) {
    std::string message(length, '\0');
    for (char& c : message) c = static_cast<char>(random());
    const std::string expected = Sha256Hex(message);
    Sha256 hash;
    size_t offset = 0;
    while (offset < length) {
      const size_t piece = std::min<size_t>(length - offset, random() % 70);
      hash.Update(absl::string_view(message).substr(offset, piece));
      offset += piece;
    }
    EXPECT_EQ(DigestToHex(hash.Finish()), expected) << "length " << length;
  }
}

TEST(Sha256Test, FinishResetsForTheNextMessage) {
  Sha256 hash;
  hash.Update("something else");
  (void)hash.Finish();
  hash.Update("abc");
  EXPECT_EQ(DigestToHex(hash.Finish()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace gpukit
