#include "runtime/base/parallel_copy.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

namespace gpukit {
namespace {

// Pieces are multiples of this, so that no two threads write the same page (or cache line)
// when the block is page-aligned.
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
  // Pieces of min_piece_bytes that every thread takes one at a time until none are left, so a
  // thread that starts late or loses its core copies less instead of holding up the copy.
  const int64_t piece_bytes =
      (std::max<int64_t>(options.min_piece_bytes, 1) + kPieceAlignBytes - 1) / kPieceAlignBytes *
      kPieceAlignBytes;
  const int64_t pieces = (bytes + piece_bytes - 1) / piece_bytes;
  std::atomic<int64_t> next_piece{0};
  auto copy_pieces = [&] {
    for (int64_t piece = next_piece.fetch_add(1, std::memory_order_relaxed); piece < pieces;
         piece = next_piece.fetch_add(1, std::memory_order_relaxed)) {
      const int64_t begin = piece * piece_bytes;
      const int64_t end = std::min(bytes, begin + piece_bytes);
      std::memcpy(to + begin, from + begin, static_cast<size_t>(end - begin));
    }
  };
  std::vector<std::thread> helpers;
  helpers.reserve(threads - 1);
  // std::thread reports a system out of threads only by throwing; the threads there are
  // (the caller's at least) then copy every piece.
  try {
    for (int i = 1; i < threads; ++i) helpers.emplace_back(copy_pieces);
  } catch (const std::system_error&) {
  }
  copy_pieces();
  for (std::thread& helper : helpers) helper.join();
}

}  // namespace gpukit
