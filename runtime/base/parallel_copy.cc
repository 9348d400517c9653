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

namespace parallel_copy_internal {

// One copy cut into pieces of piece_bytes that every thread on it takes one at a time until
// none are left, so a thread that starts late or loses its core copies less instead of
// holding up the copy.
struct CopyJob {
  CopyJob(void* dst, const void* src, int64_t bytes, const ParallelCopyOptions& options)
      : to(static_cast<char*>(dst)),
        from(static_cast<const char*>(src)),
        bytes(bytes),
        piece_bytes((std::max<int64_t>(options.min_piece_bytes, 1) + kPieceAlignBytes - 1) /
                    kPieceAlignBytes * kPieceAlignBytes),
        pieces((bytes + piece_bytes - 1) / piece_bytes) {}

  void CopyPieces() {
    for (int64_t piece = next_piece.fetch_add(1, std::memory_order_relaxed); piece < pieces;
         piece = next_piece.fetch_add(1, std::memory_order_relaxed)) {
      const int64_t begin = piece * piece_bytes;
      const int64_t end = std::min(bytes, begin + piece_bytes);
      std::memcpy(to + begin, from + begin, static_cast<size_t>(end - begin));
    }
  }

  char* const to;
  const char* const from;
  const int64_t bytes;
  const int64_t piece_bytes;
  const int64_t pieces;
  std::atomic<int64_t> next_piece{0};
};

}  // namespace parallel_copy_internal

using parallel_copy_internal::CopyJob;

int ParallelCopyThreads(int64_t bytes, const ParallelCopyOptions& options) {
  const int64_t min_piece_bytes = std::max<int64_t>(options.min_piece_bytes, 1);
  const int64_t pieces = bytes / min_piece_bytes;
  return static_cast<int>(std::clamp<int64_t>(pieces, 1, MaxThreads(options)));
}

void ParallelCopy(void* dst, const void* src, int64_t bytes, const ParallelCopyOptions& options) {
  if (bytes <= 0) return;
  const int threads = ParallelCopyThreads(bytes, options);
  if (threads == 1) {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    return;
  }
  CopyJob job(dst, src, bytes, options);
  std::vector<std::thread> helpers;
  helpers.reserve(threads - 1);
  // std::thread reports a system out of threads only by throwing; the threads there are
  // (the caller's at least) then copy every piece.
  try {
    for (int i = 1; i < threads; ++i) helpers.emplace_back([&job] { job.CopyPieces(); });
  } catch (const std::system_error&) {
  }
  job.CopyPieces();
  for (std::thread& helper : helpers) helper.join();
}

ParallelCopyWorkers::ParallelCopyWorkers(int helper_threads) {
  threads_.reserve(std::max(helper_threads, 0));
  try {
    for (int i = 0; i < helper_threads; ++i) threads_.emplace_back([this, i] { WorkLoop(i); });
  } catch (const std::system_error&) {
  }
}

ParallelCopyWorkers::~ParallelCopyWorkers() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

void ParallelCopyWorkers::WorkLoop(int index) {
  uint64_t seen = 0;
  mu_.Lock();
  while (true) {
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || generation_ != seen; };
    mu_.Await(absl::Condition(&ready));
    if (stop_) break;
    seen = generation_;
    // A copy needing fewer helpers than there are leaves the rest waiting; the caller counts
    // only the wanted ones in pending_ and waits for them, so none of those misses its copy.
    if (index >= helpers_wanted_) continue;
    CopyJob* job = job_;
    mu_.Unlock();
    job->CopyPieces();
    mu_.Lock();
    --pending_;
  }
  mu_.Unlock();
}

void ParallelCopyWorkers::Copy(void* dst, const void* src, int64_t bytes,
                               const ParallelCopyOptions& options) {
  if (bytes <= 0) return;
  const int threads = std::min(ParallelCopyThreads(bytes, options), helper_threads() + 1);
  if (threads == 1) {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    return;
  }
  absl::MutexLock copy_lock(&copy_mu_);
  CopyJob job(dst, src, bytes, options);
  {
    absl::MutexLock lock(&mu_);
    job_ = &job;
    helpers_wanted_ = threads - 1;
    pending_ = threads - 1;
    ++generation_;
  }
  job.CopyPieces();
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pending_ == 0; };
  mu_.Await(absl::Condition(&done));
  job_ = nullptr;
}

}  // namespace gpukit
