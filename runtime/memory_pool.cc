#include "runtime/memory_pool.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "spdlog/spdlog.h"

namespace gpukit {
namespace {

// Smallest block and alignment of every block: what device kernels' vector loads assume.
constexpr int64_t kMinBlockBytes = 256;
// A slab holds at least this many blocks of its class, so large classes waste little of it.
constexpr int64_t kMinBlocksPerSlab = 8;

int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

std::string Hex(uint64_t address) { return absl::StrCat("0x", absl::Hex(address)); }

}  // namespace

absl::StatusOr<std::unique_ptr<MemoryPool>> MemoryPool::Create(
    std::unique_ptr<SegmentSource> source, const MemoryPoolOptions& options) {
  if (source == nullptr) return absl::InvalidArgumentError("MemoryPool needs a segment source");
  const int64_t granularity = source->granularity_bytes();
  if (granularity <= 0 || !std::has_single_bit(static_cast<uint64_t>(granularity))) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment granularity ", granularity, " bytes is not a power of two"));
  }
  if (options.small_block_limit_bytes < 0 || options.max_cached_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("small_block_limit_bytes = ", options.small_block_limit_bytes,
                     " and max_cached_bytes = ", options.max_cached_bytes, " must both be >= 0"));
  }
  return std::unique_ptr<MemoryPool>(new MemoryPool(std::move(source), options));
}

MemoryPool::MemoryPool(std::unique_ptr<SegmentSource> source, const MemoryPoolOptions& options)
    : source_(std::move(source)),
      options_(options),
      granularity_bytes_(source_->granularity_bytes()) {}

MemoryPool::~MemoryPool() {
  std::vector<Segment> all;
  int64_t live_blocks = 0;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [address, state] : segments_) {
      live_blocks += state.live_blocks;
      all.push_back(state.segment);
    }
    segments_.clear();
  }
  if (live_blocks > 0) {
    spdlog::warn("memory pool destroyed with {} block(s) still handed out", live_blocks);
  }
  UnmapAll(all);
}

bool MemoryPool::IsSmall(int64_t bytes) const { return bytes <= options_.small_block_limit_bytes; }

int64_t MemoryPool::RoundedBytes(int64_t bytes) const {
  if (!IsSmall(bytes)) return RoundUp(bytes, granularity_bytes_);
  if (bytes <= kMinBlockBytes) return kMinBlockBytes;
  // Quarter steps between powers of two: 1024, 1280, 1536, 1792, 2048, 2560, ...
  const int64_t power = static_cast<int64_t>(std::bit_floor(static_cast<uint64_t>(bytes)));
  return RoundUp(bytes, std::max(power / 4, kMinBlockBytes));
}

int64_t MemoryPool::SlabBytes(int64_t block_bytes) const {
  return RoundUp(std::max(granularity_bytes_, block_bytes * kMinBlocksPerSlab), granularity_bytes_);
}

absl::Status MemoryPool::CheckRequest(int64_t bytes) const {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("pool allocation of ", bytes, " bytes"));
  }
  if (bytes > std::numeric_limits<int64_t>::max() - granularity_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PoolBlock> MemoryPool::Allocate(int64_t bytes) {
  GPUKIT_RETURN_IF_ERROR(CheckRequest(bytes));
  return AllocateRounded(RoundedBytes(bytes), IsSmall(bytes));
}

absl::StatusOr<PoolBlock> MemoryPool::AllocateOwnSegment(int64_t bytes) {
  GPUKIT_RETURN_IF_ERROR(CheckRequest(bytes));
  return AllocateRounded(RoundUp(bytes, granularity_bytes_), /*small=*/false);
}

absl::StatusOr<PoolBlock> MemoryPool::AllocateRounded(int64_t rounded, bool small) {
  {
    absl::MutexLock lock(&mu_);
    PoolBlock block = TakeCached(rounded, small);
    if (block.address != 0) {
      stats_.in_use_bytes += block.bytes;
      ++stats_.allocations;
      ++stats_.reused;
      return block;
    }
  }
  absl::StatusOr<Segment> segment = MapSegment(small ? SlabBytes(rounded) : rounded);
  if (!segment.ok()) return segment.status();
  absl::MutexLock lock(&mu_);
  PoolBlock block = AddSegment(*segment, rounded, small);
  stats_.in_use_bytes += block.bytes;
  ++stats_.allocations;
  return block;
}

PoolBlock MemoryPool::TakeCached(int64_t rounded_bytes, bool small) {
  PoolBlock block;
  if (small) {
    auto slabs = slabs_with_room_.find(rounded_bytes);
    if (slabs == slabs_with_room_.end() || slabs->second.empty()) return block;
    const uint64_t slab_address = *slabs->second.begin();
    SegmentState& slab = segments_.at(slab_address);
    const int64_t offset = slab.free_offsets.back();
    slab.free_offsets.pop_back();
    slab.in_use[offset / slab.block_bytes] = true;
    ++slab.live_blocks;
    if (slab.free_offsets.empty()) slabs->second.erase(slabs->second.begin());
    block.address = slab.segment.address + static_cast<uint64_t>(offset);
    block.bytes = slab.block_bytes;
    block.segment = slab.segment;
    block.shares_segment = true;
    return block;
  }
  auto cached = free_large_.lower_bound(rounded_bytes);
  if (cached == free_large_.end() || cached->first > rounded_bytes + rounded_bytes / 8) {
    return block;
  }
  SegmentState& state = segments_.at(cached->second);
  free_large_.erase(cached);
  state.live_blocks = 1;
  block.address = state.segment.address;
  block.bytes = state.segment.bytes;
  block.segment = state.segment;
  return block;
}

absl::StatusOr<Segment> MemoryPool::MapSegment(int64_t bytes) {
  absl::StatusOr<Segment> segment = source_->Map(bytes);
  if (segment.ok() || !absl::IsResourceExhausted(segment.status())) return segment;
  // Out of memory while the pool may hold free segments: give them back and try once more.
  const int64_t returned = Trim();
  {
    absl::MutexLock lock(&mu_);
    ++stats_.trims;
  }
  spdlog::debug("memory pool: source out of memory for {} bytes; trimmed {} bytes", bytes,
                returned);
  segment = source_->Map(bytes);
  if (segment.ok() || !absl::IsResourceExhausted(segment.status())) return segment;
  const MemoryPoolStats now = stats();
  return absl::ResourceExhaustedError(absl::StrCat(
      segment.status().message(), " (the memory pool holds ", now.in_use_bytes, " bytes in use of ",
      now.mapped_bytes, " mapped, after returning ", returned, " free)"));
}

PoolBlock MemoryPool::AddSegment(const Segment& segment, int64_t rounded_bytes, bool small) {
  ++stats_.maps;
  ++stats_.segments;
  stats_.mapped_bytes += segment.bytes;
  SegmentState& state = segments_[segment.address];
  state.segment = segment;
  PoolBlock block;
  block.address = segment.address;
  block.segment = segment;
  if (!small) {
    state.live_blocks = 1;
    block.bytes = segment.bytes;
    return block;
  }
  const int64_t blocks = segment.bytes / rounded_bytes;
  state.block_bytes = rounded_bytes;
  state.in_use.assign(static_cast<size_t>(blocks), false);
  // A stack with the lowest offset on top: blocks are handed out from the start.
  for (int64_t i = blocks - 1; i >= 1; --i) state.free_offsets.push_back(i * rounded_bytes);
  state.in_use[0] = true;
  state.live_blocks = 1;
  if (!state.free_offsets.empty()) slabs_with_room_[rounded_bytes].insert(segment.address);
  block.bytes = rounded_bytes;
  block.shares_segment = true;
  return block;
}

bool MemoryPool::StartsLiveBlock(const SegmentState& state, uint64_t address) {
  const int64_t offset = static_cast<int64_t>(address - state.segment.address);
  if (state.block_bytes == 0) return offset == 0 && state.live_blocks == 1;
  const int64_t index = offset / state.block_bytes;
  return offset % state.block_bytes == 0 && index < static_cast<int64_t>(state.in_use.size()) &&
         state.in_use[index];
}

absl::StatusOr<PoolBlock> MemoryPool::Lookup(uint64_t address) const {
  absl::MutexLock lock(&mu_);
  auto it = SegmentAt(segments_, address);
  if (it == segments_.end() || !StartsLiveBlock(it->second, address)) {
    return absl::NotFoundError(absl::StrCat("no live pool block at ", Hex(address)));
  }
  const SegmentState& state = it->second;
  PoolBlock block;
  block.address = address;
  block.segment = state.segment;
  block.shares_segment = state.block_bytes > 0;
  block.bytes = block.shares_segment ? state.block_bytes : state.segment.bytes;
  return block;
}

absl::Status MemoryPool::MarkShared(uint64_t address) {
  absl::MutexLock lock(&mu_);
  auto it = SegmentAt(segments_, address);
  if (it == segments_.end() || it->second.block_bytes > 0 ||
      !StartsLiveBlock(it->second, address)) {
    return absl::NotFoundError(absl::StrCat("no live segment-sized block at ", Hex(address)));
  }
  it->second.shared = true;
  return absl::OkStatus();
}

absl::Status MemoryPool::Free(uint64_t address) {
  std::vector<Segment> released;
  {
    absl::MutexLock lock(&mu_);
    auto it = SegmentAt(segments_, address);
    if (it == segments_.end() || !StartsLiveBlock(it->second, address)) {
      return absl::NotFoundError(
          absl::StrCat("no live pool block at ", Hex(address), " (never allocated or freed)"));
    }
    SegmentState& state = it->second;
    const uint64_t start = state.segment.address;
    if (state.block_bytes > 0) {
      const int64_t offset = static_cast<int64_t>(address - start);
      state.in_use[offset / state.block_bytes] = false;
      state.free_offsets.push_back(offset);
      --state.live_blocks;
      slabs_with_room_[state.block_bytes].insert(start);
      stats_.in_use_bytes -= state.block_bytes;
    } else {
      state.live_blocks = 0;
      stats_.in_use_bytes -= state.segment.bytes;
      if (state.shared) {
        // Another process may map it still: it goes back to the source, never to a new owner.
        released.push_back(state.segment);
        stats_.mapped_bytes -= state.segment.bytes;
        --stats_.segments;
        ++stats_.unmaps;
        segments_.erase(it);
      } else {
        free_large_.emplace(state.segment.bytes, start);
      }
    }
    for (Segment& segment : ReleaseFreeSegments(options_.max_cached_bytes)) {
      released.push_back(segment);
    }
  }
  UnmapAll(released);
  return absl::OkStatus();
}

int64_t MemoryPool::Trim() {
  std::vector<Segment> released;
  {
    absl::MutexLock lock(&mu_);
    released = ReleaseFreeSegments(0);
  }
  UnmapAll(released);
  int64_t bytes = 0;
  for (const Segment& segment : released) bytes += segment.bytes;
  return bytes;
}

std::vector<Segment> MemoryPool::ReleaseFreeSegments(int64_t keep_bytes) {
  std::vector<Segment> released;
  // Largest free segments first: the fewest unmaps to get under the cap.
  for (auto it = free_large_.rbegin();
       it != free_large_.rend() && stats_.mapped_bytes - stats_.in_use_bytes > keep_bytes;) {
    auto segment = segments_.find(it->second);
    released.push_back(segment->second.segment);
    stats_.mapped_bytes -= segment->second.segment.bytes;
    segments_.erase(segment);
    it = std::make_reverse_iterator(free_large_.erase(std::next(it).base()));
  }
  // Then slabs with no live block (a scan: this runs only while over the cap).
  for (auto it = segments_.begin();
       it != segments_.end() && stats_.mapped_bytes - stats_.in_use_bytes > keep_bytes;) {
    const SegmentState& state = it->second;
    if (state.block_bytes == 0 || state.live_blocks > 0) {
      ++it;
      continue;
    }
    slabs_with_room_[state.block_bytes].erase(it->first);
    released.push_back(state.segment);
    stats_.mapped_bytes -= state.segment.bytes;
    it = segments_.erase(it);
  }
  stats_.segments -= static_cast<int64_t>(released.size());
  stats_.unmaps += static_cast<int64_t>(released.size());
  return released;
}

void MemoryPool::UnmapAll(const std::vector<Segment>& segments) {
  for (const Segment& segment : segments) source_->Unmap(segment);
}

bool MemoryPool::Owns(uint64_t address, int64_t bytes) const {
  absl::MutexLock lock(&mu_);
  auto it = SegmentAt(segments_, address);
  if (it == segments_.end() || bytes < 0) return false;
  const Segment& segment = it->second.segment;
  return static_cast<uint64_t>(bytes) <=
         static_cast<uint64_t>(segment.bytes) - (address - segment.address);
}

MemoryPoolStats MemoryPool::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace gpukit
