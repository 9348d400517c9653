#include "runtime/base/parallel_copy.h"

#include <algorithm>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

namespace gpukit {
namespace {

// Pieces start at multiples of this from the block's start, so that no two threads write
// the same page (or cache line) when the block is page-aligned.
constexpr int64_t kPieceAlignBytes = 4096;

int MaxThreads(const ParallelCopyOptions& options) {
  if (options.max_threads > 0) return options.max_threads;
  const int hardware = static_cast<int>(std::thread::hardware_concurrency());  // 0: unknown
  return std::clamp(hardware, 1, kParallelCopyDefaultMaxThreads);
}

}  // namespace

int ParallelCopyThreads(int64_t bytes, const ParallelCopyOptions& options) {
  const int64_t min_piece_bytes = std::max<int64_t>(options.min_piece_bytes, 1);
  const int64_t pieces = bytes / min_piece_bytes;
  return static_cast<int>(std::clamp<int64_t>(pieces, 1, MaxThreads(options)));
}

void ParallelCopy(void* dst, const void* src, int64_t bytes, const ParallelCopyOptions& options) {
  if (bytes <= 0) return;
  const int threads = ParallelCopyThreads(bytes, options);
  char* to = static_cast<char*>(dst);
  const char* from = static_cast<const char*>(src);
  if (threads == 1) {
    std::memcpy(to, from, static_cast<size_t>(bytes));
    return;
  }
  const int64_t piece_bytes =
      (bytes / threads + kPieceAlignBytes - 1) / kPieceAlignBytes * kPieceAlignBytes;
  auto copy_piece = [=](int piece) {
    const int64_t begin = std::min(bytes, piece * piece_bytes);
    const int64_t end = piece + 1 == threads ? bytes : std::min(bytes, begin + piece_bytes);
    if (end > begin) std::memcpy(to + begin, from + begin, static_cast<size_t>(end - begin));
  };
  std::vector<std::thread> helpers;
  helpers.reserve(threads - 1);
  int piece = 1;
  // std::thread reports a system out of threads only by throwing; the caller then copies
  // the pieces no thread took.
  try {
    for (; piece < threads; ++piece) helpers.emplace_back(copy_piece, piece);
  } catch (const std::system_error&) {
  }
  copy_piece(0);
  for (int rest = piece; rest < threads; ++rest) copy_piece(rest);
  for (std::thread& helper : helpers) helper.join();
}

}  // namespace gpukit
