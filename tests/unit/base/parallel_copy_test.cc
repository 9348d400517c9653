// ParallelCopy: how many threads a copy uses, and that every byte lands where memcpy would put
// it whatever the size, the piece size and the thread count; the same for ParallelCopyWorkers
// (kept threads), copy after copy, from several callers at once.
#include "runtime/base/parallel_copy.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/random_seed.h"

namespace gpukit {
namespace {

struct ThreadsCase {
  const char* name;
  int64_t bytes;
  int64_t min_piece_bytes;
  int max_threads;
  int threads;
};

class ParallelCopyThreadsTest : public ::testing::TestWithParam<ThreadsCase> {};

TEST_P(ParallelCopyThreadsTest, OneThreadPerWholePieceWithinTheCap) {
  const ThreadsCase& c = GetParam();
  ParallelCopyOptions options;
  options.min_piece_bytes = c.min_piece_bytes;
  options.max_threads = c.max_threads;
  EXPECT_EQ(ParallelCopyThreads(c.bytes, options), c.threads);
}

constexpr int64_t kMiB = int64_t{1} << 20;

INSTANTIATE_TEST_SUITE_P(
    Table, ParallelCopyThreadsTest,
    ::testing::Values(ThreadsCase{"Empty", 0, 4 * kMiB, 8, 1},
                      ThreadsCase{"Negative", -5, 4 * kMiB, 8, 1},
                      ThreadsCase{"BelowOnePiece", 4 * kMiB - 1, 4 * kMiB, 8, 1},
                      ThreadsCase{"OnePiece", 4 * kMiB, 4 * kMiB, 8, 1},
                      ThreadsCase{"JustBelowTwoPieces", 8 * kMiB - 1, 4 * kMiB, 8, 1},
                      ThreadsCase{"TwoPieces", 8 * kMiB, 4 * kMiB, 8, 2},
                      ThreadsCase{"FivePiecesAndABit", 20 * kMiB + 7, 4 * kMiB, 8, 5},
                      ThreadsCase{"CappedByMaxThreads", 256 * kMiB, 4 * kMiB, 3, 3},
                      ThreadsCase{"MaxThreadsOneIsSerial", 256 * kMiB, 4 * kMiB, 1, 1},
                      ThreadsCase{"TinyPieces", 10, 1, 16, 10},
                      ThreadsCase{"ZeroPieceSizeCountsAsOneByte", 3, 0, 16, 3}),
    [](const ::testing::TestParamInfo<ThreadsCase>& info) { return info.param.name; });

TEST(ParallelCopyTest, DefaultCapIsHardwareThreadsUpToTheConstant) {
  const int hardware = static_cast<int>(std::thread::hardware_concurrency());
  const int expected = hardware <= 0 ? 1 : std::min(hardware, kParallelCopyDefaultMaxThreads);
  EXPECT_EQ(ParallelCopyThreads(int64_t{1} << 40), expected);
}

struct CopyCase {
  int64_t bytes;
  int64_t min_piece_bytes;
  int max_threads;
};

// Copies into a larger buffer whose guard bytes before and after must stay untouched, with
// `workers` when given, else with ParallelCopy.
void ExpectCopiesExactly(const CopyCase& c, std::mt19937& rng,
                         ParallelCopyWorkers* workers = nullptr) {
  SCOPED_TRACE(::testing::Message() << "bytes " << c.bytes << ", pieces of " << c.min_piece_bytes
                                    << ", max_threads " << c.max_threads);
  constexpr int64_t kGuard = 64;
  std::vector<unsigned char> source(static_cast<size_t>(c.bytes));
  for (unsigned char& byte : source) byte = static_cast<unsigned char>(rng());
  std::vector<unsigned char> target(static_cast<size_t>(c.bytes + 2 * kGuard), 0xA5);
  ParallelCopyOptions options;
  options.min_piece_bytes = c.min_piece_bytes;
  options.max_threads = c.max_threads;
  if (workers != nullptr) {
    workers->Copy(target.data() + kGuard, source.data(), c.bytes, options);
  } else {
    ParallelCopy(target.data() + kGuard, source.data(), c.bytes, options);
  }
  for (int64_t i = 0; i < c.bytes; ++i) {
    ASSERT_EQ(target[kGuard + i], source[i]) << "byte " << i;
  }
  for (int64_t i = 0; i < kGuard; ++i) {
    ASSERT_EQ(target[i], 0xA5) << "guard byte " << i << " before";
    ASSERT_EQ(target[kGuard + c.bytes + i], 0xA5) << "guard byte " << i << " after";
  }
}

TEST(ParallelCopyTest, CopiesEveryByteForSizesThatAreNoMultipleOfThePiece) {
  const uint32_t seed = ::gpukit::testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (GPUKIT_TEST_SEED)");
  std::mt19937 rng(seed);
  // Pieces of 4 KiB to 64 KiB keep the buffers small while cutting them into many pieces;
  // the sizes straddle page and piece boundaries.
  const CopyCase cases[] = {
      {1, 1, 4},
      {4095, 1, 4},  // threads for a few bytes: one piece (rounded up to a page), idle helpers
      {int64_t{4096} * 3 + 1, 4096, 8},
      {int64_t{65536} * 2 - 1, 65536, 8},
      {int64_t{65536} * 2, 65536, 8},
      {int64_t{65536} * 5 + 333, 65536, 3},
      {int64_t{65536} * 7 + 4095, 65536, 16},
      {(int64_t{9} << 20) + 17, int64_t{4} << 20, 0},  // the defaults' piece, default cap
  };
  for (const CopyCase& c : cases) ExpectCopiesExactly(c, rng);
  // And random sizes and splits.
  std::uniform_int_distribution<int64_t> size(1, 1 << 20);
  std::uniform_int_distribution<int64_t> piece(1, 1 << 18);
  std::uniform_int_distribution<int> threads(1, 12);
  for (int i = 0; i < 20; ++i) ExpectCopiesExactly({size(rng), piece(rng), threads(rng)}, rng);
}

TEST(ParallelCopyTest, ZeroBytesTouchNothingAndMayNameNullPointers) {
  ParallelCopy(nullptr, nullptr, 0);
  unsigned char target[4] = {1, 2, 3, 4};
  const unsigned char source[4] = {9, 9, 9, 9};
  ParallelCopy(target, source, 0, ParallelCopyOptions{1, 8});
  EXPECT_EQ(target[0], 1);
  EXPECT_EQ(target[3], 4);
}

// The same cases through one set of kept threads, copy after copy: more helpers than a copy
// wants (those stay idle), fewer (the cap), and exactly as many.
TEST(ParallelCopyWorkersTest, CopiesEveryByteCopyAfterCopy) {
  const uint32_t seed = ::gpukit::testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (GPUKIT_TEST_SEED)");
  std::mt19937 rng(seed);
  for (int helpers : {0, 1, 3, 7}) {
    SCOPED_TRACE(::testing::Message() << helpers << " helper threads");
    ParallelCopyWorkers workers(helpers);
    ASSERT_EQ(workers.helper_threads(), helpers);
    const CopyCase cases[] = {
        {1, 1, 4},
        {int64_t{4096} * 3 + 1, 4096, 8},
        {int64_t{65536} * 5 + 333, 65536, 3},
        {int64_t{65536} * 7 + 4095, 65536, 16},
        {int64_t{65536} * 2, 65536, 0},
    };
    for (const CopyCase& c : cases) ExpectCopiesExactly(c, rng, &workers);
    std::uniform_int_distribution<int64_t> size(1, 1 << 20);
    std::uniform_int_distribution<int64_t> piece(1, 1 << 18);
    std::uniform_int_distribution<int> threads(1, 12);
    for (int i = 0; i < 10; ++i) {
      ExpectCopiesExactly({size(rng), piece(rng), threads(rng)}, rng, &workers);
    }
  }
}

// Copies from several threads through one set of workers run one at a time, each whole.
TEST(ParallelCopyWorkersTest, CopiesFromSeveralCallersEachArriveWhole) {
  ParallelCopyWorkers workers(3);
  constexpr int kCallers = 4;
  constexpr int64_t kBytes = int64_t{65536} * 9 + 17;
  std::vector<std::vector<unsigned char>> sources(kCallers), targets(kCallers);
  for (int c = 0; c < kCallers; ++c) {
    sources[c].assign(kBytes, static_cast<unsigned char>(c + 1));
    for (int64_t i = 0; i < kBytes; i += 4099) sources[c][i] = static_cast<unsigned char>(i);
  }
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      targets[c].assign(kBytes, 0);
      for (int round = 0; round < 20; ++round) {
        workers.Copy(targets[c].data(), sources[c].data(), kBytes, ParallelCopyOptions{65536, 4});
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  for (int c = 0; c < kCallers; ++c) EXPECT_TRUE(targets[c] == sources[c]) << "caller " << c;
}

TEST(ParallelCopyWorkersTest, ZeroBytesTouchNothingAndNegativeHelpersAreNone) {
  ParallelCopyWorkers workers(-2);
  EXPECT_EQ(workers.helper_threads(), 0);
  workers.Copy(nullptr, nullptr, 0);
  unsigned char target[4] = {1, 2, 3, 4};
  const unsigned char source[4] = {9, 9, 9, 9};
  workers.Copy(target, source, 0, ParallelCopyOptions{1, 8});
  EXPECT_EQ(target[0], 1);
  workers.Copy(target, source, 4, ParallelCopyOptions{1, 8});
  EXPECT_EQ(target[3], 9);
}

}  // namespace
}  // namespace gpukit
