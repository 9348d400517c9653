// The seed of a randomised test: $GPUKIT_TEST_SEED when set (to replay a failure), else a
// fresh one. Print it with SCOPED_TRACE so a failure says how to reproduce it:
//
//   const uint32_t seed = TestSeed();
//   SCOPED_TRACE(::testing::Message() << "seed " << seed << " (GPUKIT_TEST_SEED)");
//   std::mt19937 rng(seed);
//
// Thread safety: reads the environment; call from the test's thread.
#ifndef GPUKIT_TESTS_TESTING_RANDOM_SEED_H_
#define GPUKIT_TESTS_TESTING_RANDOM_SEED_H_

#include <cstdint>
#include <cstdlib>
#include <random>

namespace gpukit::testing {

inline uint32_t TestSeed() {
  if (const char* text = std::getenv("GPUKIT_TEST_SEED"); text != nullptr && *text != '\0') {
    return static_cast<uint32_t>(std::strtoul(text, nullptr, 10));
  }
  return std::random_device{}();
}

}  // namespace gpukit::testing

#endif  // GPUKIT_TESTS_TESTING_RANDOM_SEED_H_
