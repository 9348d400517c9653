#include "runtime/jit/kernel_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "runtime/base/status_macros.h"
#include "runtime/jit/sha256.h"
#include "spdlog/spdlog.h"
#include <sys/stat.h>

namespace gpukit {
namespace {

constexpr char kDiskMagic[8] = {'G', 'P', 'U', 'K', 'I', 'T', 'J', 'K'};
constexpr uint32_t kDiskFormatVersion = 1;
constexpr size_t kDigestBytes = 32;
// A cubin is at most tens of MiB; anything far larger is not one of ours.
constexpr int64_t kMaxDiskEntryBytes = int64_t{1} << 30;

std::string ErrnoMessage(int error) { return std::strerror(error); }

// ---- Encoding helpers: little-endian integers and length-prefixed strings. ----

void PutU32(std::string& out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(value >> (8 * i)));
}

void PutU64(std::string& out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(value >> (8 * i)));
}

void PutString(std::string& out, absl::string_view value) {
  PutU64(out, value.size());
  out.append(value.data(), value.size());
}

// Reads what the Put* functions wrote, refusing to run past the end.
class Reader {
 public:
  explicit Reader(absl::string_view bytes) : rest_(bytes) {}

  bool U32(uint32_t& value) {
    uint64_t wide = 0;
    if (!Fixed(4, wide)) return false;
    value = static_cast<uint32_t>(wide);
    return true;
  }
  bool U64(uint64_t& value) { return Fixed(8, value); }
  bool String(std::string& value) {
    uint64_t length = 0;
    if (!U64(length) || length > rest_.size()) return false;
    value.assign(rest_.data(), length);
    rest_.remove_prefix(length);
    return true;
  }
  bool Bytes(size_t count, absl::string_view& value) {
    if (count > rest_.size()) return false;
    value = rest_.substr(0, count);
    rest_.remove_prefix(count);
    return true;
  }
  bool empty() const { return rest_.empty(); }

 private:
  bool Fixed(int bytes, uint64_t& value) {
    if (rest_.size() < static_cast<size_t>(bytes)) return false;
    value = 0;
    for (int i = 0; i < bytes; ++i) {
      value |= uint64_t{static_cast<unsigned char>(rest_[i])} << (8 * i);
    }
    rest_.remove_prefix(bytes);
    return true;
  }

  absl::string_view rest_;
};

// ---- Files ----

// NOT_FOUND when the file does not exist.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) return absl::NotFoundError(path);
    return absl::UnavailableError(absl::StrCat("open ", path, ": ", ErrnoMessage(error)));
  }
  std::string bytes;
  struct stat info {};
  if (fstat(fd, &info) == 0 && info.st_size > kMaxDiskEntryBytes) {
    close(fd);
    return absl::DataLossError(absl::StrCat("file is ", info.st_size, " bytes"));
  }
  char buffer[64 * 1024];
  while (true) {
    const ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int error = errno;
      close(fd);
      return absl::UnavailableError(absl::StrCat("read ", path, ": ", ErrnoMessage(error)));
    }
    if (got == 0) break;
    bytes.append(buffer, got);
    if (static_cast<int64_t>(bytes.size()) > kMaxDiskEntryBytes) {
      close(fd);
      return absl::DataLossError("file is too large");
    }
  }
  close(fd);
  return bytes;
}

absl::Status WriteAll(int fd, absl::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t wrote = write(fd, bytes.data(), bytes.size());
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0) return absl::UnavailableError(absl::StrCat("write: ", ErrnoMessage(errno)));
    bytes.remove_prefix(wrote);
  }
  return absl::OkStatus();
}

// Writes `bytes` to `path` so that readers see the old file, or the whole new one: a
// temporary file in the same directory, fsync'd, renamed over `path`, then the directory
// fsync'd so the rename survives a crash.
absl::Status WriteFileAtomically(const std::string& dir, const std::string& path,
                                 absl::string_view bytes) {
  std::string temp_path = absl::StrCat(dir, "/.tmp-XXXXXX");
  const int fd = mkostemp(temp_path.data(), O_CLOEXEC);  // mode 0600
  if (fd < 0)
    return absl::UnavailableError(absl::StrCat("mkstemp in ", dir, ": ", ErrnoMessage(errno)));
  absl::Status status = WriteAll(fd, bytes);
  if (status.ok() && fsync(fd) != 0) {
    status = absl::UnavailableError(absl::StrCat("fsync: ", ErrnoMessage(errno)));
  }
  if (close(fd) != 0 && status.ok()) {
    status = absl::UnavailableError(absl::StrCat("close: ", ErrnoMessage(errno)));
  }
  if (status.ok() && rename(temp_path.c_str(), path.c_str()) != 0) {
    status = absl::UnavailableError(absl::StrCat("rename to ", path, ": ", ErrnoMessage(errno)));
  }
  if (!status.ok()) {
    unlink(temp_path.c_str());
    return status;
  }
  if (const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir_fd >= 0) {
    fsync(dir_fd);
    close(dir_fd);
  }
  return absl::OkStatus();
}

// Creates `dir` (mode 0700) when missing; refuses one that others could write into.
absl::Status PrepareCacheDir(const std::string& dir) {
  std::error_code error;
  const std::filesystem::path parent = std::filesystem::path(dir).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, error);
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create the kernel cache directory ", dir, ": ", ErrnoMessage(errno)));
  }
  struct stat info {};
  if (stat(dir.c_str(), &info) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("kernel cache directory ", dir, ": ", ErrnoMessage(errno)));
  }
  if (!S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("kernel cache directory ", dir, " is not a directory"));
  }
  if (info.st_uid != geteuid()) {
    return absl::FailedPreconditionError(
        absl::StrCat("kernel cache directory ", dir, " belongs to uid ", info.st_uid,
                     ", not to this process (uid ", geteuid(), ")"));
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "kernel cache directory %s is writable by other users (mode %04o); make it 0700", dir,
        info.st_mode & 07777));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t CompiledKernel::footprint_bytes() const {
  int64_t bytes =
      static_cast<int64_t>(sizeof(CompiledKernel) + key.size() + cubin.size() + log.size());
  for (const std::string& name : entries) bytes += static_cast<int64_t>(name.size());
  for (const std::string& name : lowered_names) bytes += static_cast<int64_t>(name.size());
  return bytes;
}

absl::string_view KernelOriginName(KernelOrigin origin) {
  switch (origin) {
    case KernelOrigin::kCompiled:
      return "compiled";
    case KernelOrigin::kMemory:
      return "memory";
    case KernelOrigin::kDisk:
      return "disk";
  }
  return "unknown";
}

std::string KernelCacheKey(absl::string_view source, const std::vector<std::string>& options,
                           absl::string_view arch, absl::string_view nvrtc_version,
                           const std::vector<std::string>& entries) {
  // Every field is length-prefixed and every list count-prefixed, so moving bytes from one
  // field to the next (or an option into the entries) always changes the encoding.
  std::string encoded;
  PutString(encoded, "gpukit.jit.key.v1");
  PutString(encoded, source);
  PutU64(encoded, options.size());
  for (const std::string& option : options) PutString(encoded, option);
  PutString(encoded, arch);
  PutString(encoded, nvrtc_version);
  PutU64(encoded, entries.size());
  for (const std::string& entry : entries) PutString(encoded, entry);
  return Sha256Hex(encoded);
}

std::string EncodeDiskEntry(const CompiledKernel& kernel) {
  std::string out(kDiskMagic, sizeof(kDiskMagic));
  PutU32(out, kDiskFormatVersion);
  PutString(out, kernel.key);
  PutU64(out, static_cast<uint64_t>(absl::ToInt64Microseconds(kernel.compile_time)));
  PutU64(out, kernel.entries.size());
  for (size_t i = 0; i < kernel.entries.size(); ++i) {
    PutString(out, kernel.entries[i]);
    PutString(out, i < kernel.lowered_names.size() ? kernel.lowered_names[i] : "");
  }
  PutString(out, kernel.log);
  PutString(out, kernel.cubin);
  const Sha256Digest digest = Sha256Of(out);
  out.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  return out;
}

absl::StatusOr<CompiledKernel> DecodeDiskEntry(absl::string_view bytes,
                                               absl::string_view expected_key) {
  if (bytes.size() < sizeof(kDiskMagic) + 4 + kDigestBytes) {
    return absl::DataLossError(absl::StrCat("entry is only ", bytes.size(), " bytes"));
  }
  if (bytes.substr(0, sizeof(kDiskMagic)) != absl::string_view(kDiskMagic, sizeof(kDiskMagic))) {
    return absl::DataLossError("bad magic");
  }
  const absl::string_view body = bytes.substr(0, bytes.size() - kDigestBytes);
  const Sha256Digest digest = Sha256Of(body);
  if (bytes.substr(body.size()) !=
      absl::string_view(reinterpret_cast<const char*>(digest.data()), digest.size())) {
    return absl::DataLossError("checksum mismatch (truncated or corrupt)");
  }
  Reader reader(body.substr(sizeof(kDiskMagic)));
  uint32_t version = 0;
  if (!reader.U32(version) || version != kDiskFormatVersion) {
    return absl::DataLossError(
        absl::StrCat("format version ", version, ", expected ", kDiskFormatVersion));
  }
  CompiledKernel kernel;
  uint64_t compile_us = 0;
  uint64_t entry_count = 0;
  if (!reader.String(kernel.key) || !reader.U64(compile_us) || !reader.U64(entry_count)) {
    return absl::DataLossError("truncated header");
  }
  if (kernel.key != expected_key) {
    return absl::DataLossError(absl::StrCat("entry is for key ", kernel.key));
  }
  kernel.compile_time = absl::Microseconds(static_cast<int64_t>(compile_us));
  for (uint64_t i = 0; i < entry_count; ++i) {
    std::string entry;
    std::string lowered;
    if (!reader.String(entry) || !reader.String(lowered)) {
      return absl::DataLossError("truncated entry names");
    }
    kernel.entries.push_back(std::move(entry));
    kernel.lowered_names.push_back(std::move(lowered));
  }
  if (!reader.String(kernel.log) || !reader.String(kernel.cubin) || !reader.empty()) {
    return absl::DataLossError("bad payload length");
  }
  return kernel;
}

struct KernelCache::InFlight {
  absl::Notification done;
  absl::StatusOr<std::shared_ptr<const CompiledKernel>> result;
};

absl::StatusOr<std::unique_ptr<KernelCache>> KernelCache::Create(
    const KernelCacheOptions& options) {
  if (options.memory_budget_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory_budget_bytes = ", options.memory_budget_bytes, " must be > 0"));
  }
  if (options.max_memory_entries <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_memory_entries = ", options.max_memory_entries, " must be > 0"));
  }
  if (!options.disk_dir.empty()) GPUKIT_RETURN_IF_ERROR(PrepareCacheDir(options.disk_dir));
  return std::unique_ptr<KernelCache>(new KernelCache(options));
}

std::string KernelCache::DiskPath(absl::string_view key) const {
  if (options_.disk_dir.empty()) return "";
  return absl::StrCat(options_.disk_dir, "/", key, ".cubin");
}

absl::StatusOr<KernelCache::Lookup> KernelCache::GetOrCompile(
    const std::string& key, absl::FunctionRef<absl::StatusOr<CompiledKernel>()> compile) {
  // Keys name files, so only what KernelCacheKey makes is accepted.
  if (key.size() != 64 || key.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel cache key \"", key, "\" is not 64 lowercase hex characters"));
  }
  std::shared_ptr<InFlight> flight;
  bool leader = false;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = memory_.find(key); it != memory_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru_position);
      ++stats_.memory_hits;
      return Lookup{it->second.kernel, KernelOrigin::kMemory};
    }
    std::shared_ptr<InFlight>& slot = in_flight_[key];
    if (slot == nullptr) {
      slot = std::make_shared<InFlight>();
      leader = true;
    }
    flight = slot;
  }

  if (!leader) {
    flight->done.WaitForNotification();
    if (!flight->result.ok()) return flight->result.status();
    absl::MutexLock lock(&mu_);
    ++stats_.memory_hits;
    return Lookup{*flight->result, KernelOrigin::kMemory};
  }

  // This call fetches the kernel; the mutex is not held while it reads, compiles or writes.
  KernelOrigin origin = KernelOrigin::kDisk;
  absl::StatusOr<CompiledKernel> fetched = LoadFromDisk(key);
  if (!fetched.ok()) {
    origin = KernelOrigin::kCompiled;
    fetched = compile();
    if (fetched.ok()) {
      fetched->key = key;
      StoreOnDisk(*fetched);
    }
  }

  absl::StatusOr<std::shared_ptr<const CompiledKernel>> result;
  if (fetched.ok()) {
    result = std::make_shared<const CompiledKernel>(*std::move(fetched));
  } else {
    result = fetched.status();
  }
  {
    absl::MutexLock lock(&mu_);
    in_flight_.erase(key);
    if (result.ok()) {
      InsertInMemory(*result);
      if (origin == KernelOrigin::kDisk) {
        ++stats_.disk_hits;
      } else {
        ++stats_.compiles;
      }
    }
  }
  flight->result = result;
  flight->done.Notify();
  if (!result.ok()) return result.status();
  return Lookup{*std::move(result), origin};
}

void KernelCache::InsertInMemory(std::shared_ptr<const CompiledKernel> kernel) {
  const int64_t bytes = kernel->footprint_bytes();
  if (bytes > options_.memory_budget_bytes) {
    spdlog::debug("kernel cache: {} ({} bytes) is larger than the memory budget; not kept",
                  kernel->key, bytes);
    return;
  }
  // A key is in memory or in flight, never both, so it is not already present.
  const std::string key = kernel->key;
  lru_.push_front(key);
  memory_.emplace(key, MemoryEntry{std::move(kernel), lru_.begin(), bytes});
  memory_bytes_ += bytes;
  while (memory_bytes_ > options_.memory_budget_bytes ||
         static_cast<int64_t>(memory_.size()) > options_.max_memory_entries) {
    auto victim = memory_.find(lru_.back());
    memory_bytes_ -= victim->second.bytes;
    memory_.erase(victim);
    lru_.pop_back();
    ++stats_.evictions;
  }
}

absl::StatusOr<CompiledKernel> KernelCache::LoadFromDisk(const std::string& key) {
  if (options_.disk_dir.empty()) return absl::NotFoundError("no disk cache");
  const std::string path = DiskPath(key);
  absl::StatusOr<std::string> bytes = ReadWholeFile(path);
  if (absl::IsNotFound(bytes.status())) return bytes.status();
  if (!bytes.ok() && !absl::IsDataLoss(bytes.status())) {
    // An I/O problem rather than a bad entry: leave the file alone and compile.
    spdlog::warn("kernel cache: cannot read {}: {}", path, std::string(bytes.status().message()));
    return bytes.status();
  }
  absl::StatusOr<CompiledKernel> kernel =
      bytes.ok() ? DecodeDiskEntry(*bytes, key) : absl::StatusOr<CompiledKernel>(bytes.status());
  if (!kernel.ok()) {
    spdlog::warn("kernel cache: {} is corrupt ({}); deleting it and compiling again", path,
                 std::string(kernel.status().message()));
    unlink(path.c_str());
    absl::MutexLock lock(&mu_);
    ++stats_.corrupt_disk_entries;
  }
  return kernel;
}

void KernelCache::StoreOnDisk(const CompiledKernel& kernel) {
  if (options_.disk_dir.empty()) return;
  const absl::Status status =
      WriteFileAtomically(options_.disk_dir, DiskPath(kernel.key), EncodeDiskEntry(kernel));
  if (!status.ok()) {
    spdlog::warn("kernel cache: cannot store {} on disk: {}", kernel.key,
                 std::string(status.message()));
  }
}

KernelCacheStats KernelCache::stats() const {
  absl::MutexLock lock(&mu_);
  KernelCacheStats stats = stats_;
  stats.memory_entries = static_cast<int64_t>(memory_.size());
  stats.memory_bytes = memory_bytes_;
  return stats;
}

}  // namespace gpukit
