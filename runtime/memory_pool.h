// MemoryPool: a caching allocator of device memory over segments that a SegmentSource maps.
//
// Asking the driver for memory is slow (cuMemAlloc or cuMemCreate + cuMemMap take tens of
// microseconds to milliseconds, and cuMemFree waits for the whole device), so a device keeps
// what its buffers free and hands it out again:
// - small requests (up to `small_block_limit_bytes`) are rounded up to a size class (quarter
//   steps between powers of two, so at most 25% is lost to rounding) and served from slabs:
//   segments carved into equal blocks of one class;
// - larger requests are rounded up to the source's granularity and each gets a segment of
//   its own ("exact large blocks"), so it can be exported to another process without
//   exposing anyone else's memory. A freed large segment is cached and reused for a request
//   of the same rounded size (or up to 1/8 larger).
// Freed memory stays mapped up to `max_cached_bytes`; beyond that, wholly free segments go
// back to the source. When the source is out of memory, the pool trims (returns every wholly
// free segment) and tries once more before it reports RESOURCE_EXHAUSTED: the pool gives
// way under pressure rather than failing while it holds free memory.
//
//   GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<MemoryPool> pool,
//                           MemoryPool::Create(std::move(source), MemoryPoolOptions{}));
//   GPUKIT_ASSIGN_OR_RETURN(PoolBlock block, pool->Allocate(4096));
//   ... use block.address ...
//   GPUKIT_RETURN_IF_ERROR(pool->Free(block.address));
//
// Freeing a block makes it available at once: the caller must know that no queued device
// work still uses it (the Device contract: the session layer waits before it frees).
//
// The policy knows nothing of CUDA: tests run it on a fake source in CI, and
// runtime/cuda/device_memory.h supplies the VMM source the CUDA device uses.
//
// Thread safety: all methods are thread-safe. The pool's lock is never held across a call
// into the source (mapping and unmapping run outside it).
#ifndef GPUKIT_RUNTIME_MEMORY_POOL_H_
#define GPUKIT_RUNTIME_MEMORY_POOL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace gpukit {

// A range of device address space backed by memory of its own.
struct Segment {
  uint64_t address = 0;
  int64_t bytes = 0;
  // The source's handle of the memory (a CUmemGenericAllocationHandle for VMM memory): what a
  // later export of the segment needs. 0 when the source has none.
  uint64_t handle = 0;
};

// Where a pool's memory comes from. Implementations must be thread-safe.
class SegmentSource {
 public:
  virtual ~SegmentSource() = default;
  // Segments are multiples of this (a power of two, > 0).
  virtual int64_t granularity_bytes() const = 0;
  // Maps a segment of `bytes` (a multiple of the granularity). RESOURCE_EXHAUSTED when the
  // device has no memory for it; other errors as they come.
  virtual absl::StatusOr<Segment> Map(int64_t bytes) = 0;
  // Returns a segment Map gave. Failures have no caller to go to: the source logs them.
  virtual void Unmap(const Segment& segment) = 0;
};

struct MemoryPoolOptions {
  // Requests up to this size come from slabs of size-class blocks; larger ones get segments
  // of their own. 1 MiB keeps slabs small on GPUs whose granularity is 2 MiB.
  int64_t small_block_limit_bytes = int64_t{1} << 20;
  // Free memory kept mapped for reuse. 2 GiB holds the working set of a busy inference host's
  // temporaries without hiding much of an 80 GB GPU from other processes; under pressure
  // the pool trims whatever the cap leaves.
  int64_t max_cached_bytes = int64_t{2} << 30;
};

// A block the pool handed out.
struct PoolBlock {
  uint64_t address = 0;
  int64_t bytes = 0;  // what the block spans: the request rounded up to its class
  // The segment the block lies in: for a large block, the block itself; for a small one, a
  // slab shared with other blocks.
  Segment segment;
  bool shares_segment = false;
};

struct MemoryPoolStats {
  int64_t mapped_bytes = 0;  // held from the source
  int64_t in_use_bytes = 0;  // spanned by blocks handed out
  int64_t segments = 0;
  int64_t allocations = 0;  // Allocate calls that succeeded
  int64_t reused = 0;       // ... of them served without mapping a segment
  int64_t maps = 0;         // segments mapped, and returned to the source
  int64_t unmaps = 0;
  int64_t trims = 0;  // times the pool trimmed because the source was out of memory
};

class MemoryPool {
 public:
  // INVALID_ARGUMENT for options that make no sense (a negative cache, a granularity that is
  // not a power of two).
  static absl::StatusOr<std::unique_ptr<MemoryPool>> Create(std::unique_ptr<SegmentSource> source,
                                                            const MemoryPoolOptions& options);
  // Returns every segment to the source. Blocks still handed out are lost with them (logged).
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // A block of at least `bytes` (> 0), aligned to at least 256 bytes. RESOURCE_EXHAUSTED
  // when the source has no memory even after a trim (the message names what the pool holds).
  absl::StatusOr<PoolBlock> Allocate(int64_t bytes);
  // A block that is a segment of its own whatever its size (rounded to the granularity): what
  // memory shared with another process must be, so that it exposes nothing else.
  absl::StatusOr<PoolBlock> AllocateOwnSegment(int64_t bytes);
  // The live block at `address`; NOT_FOUND as Free.
  absl::StatusOr<PoolBlock> Lookup(uint64_t address) const;
  // Marks the segment of the large block at `address` as shared with another process: when the
  // block is freed, its segment goes back to the source at once instead of being reused, since
  // the other process may still map it. NOT_FOUND for an address that is not a live large
  // block.
  absl::Status MarkShared(uint64_t address);
  // Returns a block by the address Allocate gave. NOT_FOUND for an address that is not a live
  // block's (never handed out, or freed already): nothing changes then.
  absl::Status Free(uint64_t address);
  // Returns every wholly free segment to the source; returns the bytes returned.
  int64_t Trim();

  // Whether [address, address + bytes) lies inside one segment of the pool: whether memory a
  // caller names is the pool's (a copy from it can skip staging, say).
  bool Owns(uint64_t address, int64_t bytes) const;

  MemoryPoolStats stats() const;
  // The size a request of `bytes` takes: its size class, or the granularity multiple.
  int64_t RoundedBytes(int64_t bytes) const;

 private:
  struct SegmentState {
    Segment segment;
    int64_t block_bytes = 0;            // slab: its class; large: 0
    int64_t live_blocks = 0;            // large: 0 or 1
    bool shared = false;                // large: MarkShared; never reused
    std::vector<bool> in_use;           // slab: one flag per block
    std::vector<int64_t> free_offsets;  // slab: offsets of free blocks (a stack)
  };

  MemoryPool(std::unique_ptr<SegmentSource> source, const MemoryPoolOptions& options);
  bool IsSmall(int64_t rounded_bytes) const;
  int64_t SlabBytes(int64_t block_bytes) const;
  // A free block of the class, or a cached segment of about the size; address 0 when there
  // is none.
  PoolBlock TakeCached(int64_t rounded_bytes, bool small) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // INVALID_ARGUMENT or RESOURCE_EXHAUSTED for a request size no segment can serve.
  absl::Status CheckRequest(int64_t bytes) const;
  absl::StatusOr<PoolBlock> AllocateRounded(int64_t rounded_bytes, bool small);
  // The segment holding `address` in `segments` (segments_, const or not), or its end().
  template <typename Segments>
  static auto SegmentAt(Segments& segments, uint64_t address) {
    auto it = segments.upper_bound(address);
    if (it == segments.begin()) return segments.end();
    --it;
    const Segment& segment = it->second.segment;
    return address - segment.address < static_cast<uint64_t>(segment.bytes) ? it : segments.end();
  }
  // Whether `address`, inside `state`'s segment, is where a live block of it starts.
  static bool StartsLiveBlock(const SegmentState& state, uint64_t address);
  // Maps a new segment (trimming and retrying once when the source is out of memory).
  absl::StatusOr<Segment> MapSegment(int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Adds a freshly mapped segment and takes a block from it.
  PoolBlock AddSegment(const Segment& segment, int64_t rounded_bytes, bool small)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes wholly free segments until at most `keep_bytes` of free memory stay mapped, and
  // returns them (to be unmapped outside the lock).
  std::vector<Segment> ReleaseFreeSegments(int64_t keep_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnmapAll(const std::vector<Segment>& segments);

  const std::unique_ptr<SegmentSource> source_;
  const MemoryPoolOptions options_;
  const int64_t granularity_bytes_;

  mutable absl::Mutex mu_;
  // Every mapped segment by its address (a block's segment is the last one at or below it).
  std::map<uint64_t, SegmentState> segments_ ABSL_GUARDED_BY(mu_);
  // Slab segments with a free block, by class.
  std::map<int64_t, std::set<uint64_t>> slabs_with_room_ ABSL_GUARDED_BY(mu_);
  // Wholly free large segments by size (then address).
  std::multimap<int64_t, uint64_t> free_large_ ABSL_GUARDED_BY(mu_);
  MemoryPoolStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_MEMORY_POOL_H_
