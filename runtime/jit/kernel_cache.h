// KernelCache: compiled kernels by content, in memory (LRU, bounded in bytes and entries)
// and optionally on disk, so that a kernel is compiled once per host, not once per request
// or per daemon start.
//
// A kernel's key is the SHA-256 of everything that determines its binary: the source, the
// normalised options, the architecture, the NVRTC version and the entry names, each field
// length-prefixed so that no two different inputs encode alike (KernelCacheKey).
//
// On disk, each kernel is <disk_dir>/<key>.cubin, written to a temporary file in the same
// directory, fsync'd and renamed into place, so a reader sees a whole entry or none. An entry
// holds a magic string, a format version, its key, the entry and lowered names, the cubin and
// a SHA-256 of all of it; an entry that is truncated, corrupt or for another key is logged
// with a warning, deleted and compiled again. The directory is created with mode 0700 when
// missing and refused when other users can write to it (a planted cubin would run as the
// daemon's code on the GPU). The disk cache is not bounded in size: one cubin is a few KiB to
// a few MiB, and the operator owns the directory.
//
//   GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<KernelCache> cache,
//                           KernelCache::Create({.disk_dir = "/var/cache/gpukit/kernels"}));
//   const std::string key = KernelCacheKey(source, options, "sm_90", "13.0", entries);
//   GPUKIT_ASSIGN_OR_RETURN(KernelCache::Lookup found, cache->GetOrCompile(key, [&] {
//     return CompileWithNvrtc(...);  // absl::StatusOr<CompiledKernel>
//   }));
//
// Concurrent GetOrCompile calls for one key compile once: the others wait for that compile
// and share its result (or its error; errors are not cached beyond that).
//
// Thread safety: all methods are thread-safe. The mutex is never held during compilation or
// disk I/O.
#ifndef GPUKIT_RUNTIME_JIT_KERNEL_CACHE_H_
#define GPUKIT_RUNTIME_JIT_KERNEL_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gpukit {

// A compiled module: what the CUDA backend loads with cuModuleLoadData and looks up with
// cuModuleGetFunction(lowered_names[i]) for entries[i].
struct CompiledKernel {
  std::string key;  // 64 hex characters (KernelCacheKey)
  std::string cubin;
  std::vector<std::string> entries;        // as the client named them: "scale<float>"
  std::vector<std::string> lowered_names;  // as the module names them: "_Z5scaleIfEvPT_S0_i"
  std::string log;                         // NVRTC's warnings; usually empty
  absl::Duration compile_time;             // of the NVRTC run that produced the cubin

  // What the entry costs the memory cache.
  int64_t footprint_bytes() const;
};

// Where a lookup found its kernel.
enum class KernelOrigin {
  kCompiled,  // compiled by this call
  kMemory,    // the memory cache (or a concurrent call's compile, which this one waited for)
  kDisk,      // read from the disk cache
};
absl::string_view KernelOriginName(KernelOrigin origin);  // "compiled", "memory", "disk"

// SHA-256 (hex) over a length-prefixed encoding of every input. `options` must already be
// normalised (NormalizeCompileOptions) so that equivalent spellings share a key.
std::string KernelCacheKey(absl::string_view source, const std::vector<std::string>& options,
                           absl::string_view arch, absl::string_view nvrtc_version,
                           const std::vector<std::string>& entries);

struct KernelCacheOptions {
  // 256 MiB: thousands of typical cubins (a few KiB to a few hundred KiB each).
  int64_t memory_budget_bytes = int64_t{256} << 20;
  int64_t max_memory_entries = 4096;
  // Empty: memory only.
  std::string disk_dir;
};

struct KernelCacheStats {
  int64_t memory_hits = 0;
  int64_t disk_hits = 0;
  int64_t compiles = 0;  // successful ones
  int64_t evictions = 0;
  int64_t corrupt_disk_entries = 0;
  int64_t memory_entries = 0;
  int64_t memory_bytes = 0;
};

class KernelCache {
 public:
  // INVALID_ARGUMENT for a non-positive budget; FAILED_PRECONDITION when disk_dir cannot be
  // created, is not a directory, is not the daemon's own, or is writable by other users.
  static absl::StatusOr<std::unique_ptr<KernelCache>> Create(const KernelCacheOptions& options);

  struct Lookup {
    std::shared_ptr<const CompiledKernel> kernel;
    KernelOrigin origin;
  };

  // The kernel for `key`: from memory, else from disk, else from `compile` (whose result
  // gets `key` set, goes to memory and to disk). A memory hit returns the very object the
  // first lookup returned. `compile`'s error is returned as it is. A disk write that fails
  // is logged and does not fail the call. INVALID_ARGUMENT when `key` is not 64 lowercase
  // hex characters (it names a file).
  absl::StatusOr<Lookup> GetOrCompile(const std::string& key,
                                      absl::FunctionRef<absl::StatusOr<CompiledKernel>()> compile);

  KernelCacheStats stats() const;

  // <disk_dir>/<key>.cubin; empty without a disk cache.
  std::string DiskPath(absl::string_view key) const;

 private:
  struct InFlight;
  struct MemoryEntry {
    std::shared_ptr<const CompiledKernel> kernel;
    std::list<std::string>::iterator lru_position;
    int64_t bytes = 0;
  };

  explicit KernelCache(const KernelCacheOptions& options) : options_(options) {}

  absl::StatusOr<CompiledKernel> LoadFromDisk(const std::string& key);
  void StoreOnDisk(const CompiledKernel& kernel);
  void InsertInMemory(std::shared_ptr<const CompiledKernel> kernel)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const KernelCacheOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, MemoryEntry> memory_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);  // most recently used first
  int64_t memory_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, std::shared_ptr<InFlight>> in_flight_ ABSL_GUARDED_BY(mu_);
  KernelCacheStats stats_ ABSL_GUARDED_BY(mu_);
};

// The disk entry format, exposed for tests and tools. Encode never fails; Decode returns
// DATA_LOSS naming what is wrong (short file, bad magic, unknown version, checksum, key).
std::string EncodeDiskEntry(const CompiledKernel& kernel);
absl::StatusOr<CompiledKernel> DecodeDiskEntry(absl::string_view bytes,
                                               absl::string_view expected_key);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_JIT_KERNEL_CACHE_H_
