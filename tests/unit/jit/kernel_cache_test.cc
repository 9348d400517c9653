// The content-addressed kernel cache (runtime/jit/kernel_cache.h), with a fake compiler:
// no NVRTC needed.
#include "runtime/jit/kernel_cache.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include <sys/stat.h>

namespace gpukit {
namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::ScopedTempDir;
using ::gpukit::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string KeyFor(const std::string& source) {
  return KernelCacheKey(source, {}, "sm_90", "13.0", {"k"});
}

// A stand-in for NVRTC: counts its calls and makes a kernel whose cubin is `cubin_bytes`
// copies of the key's first character.
class FakeCompiler {
 public:
  explicit FakeCompiler(size_t cubin_bytes = 100) : cubin_bytes_(cubin_bytes) {}

  absl::StatusOr<KernelCache::Lookup> Get(KernelCache& cache, const std::string& key) {
    return cache.GetOrCompile(key, [&]() -> absl::StatusOr<CompiledKernel> {
      ++calls_;
      CompiledKernel kernel;
      kernel.cubin = std::string(cubin_bytes_, key[0]);
      kernel.entries = {"scale<float>"};
      kernel.lowered_names = {"_Z5scaleIfEvPT_S0_i"};
      kernel.log = "warning: nothing";
      kernel.compile_time = absl::Milliseconds(42);
      return kernel;
    });
  }
  int calls() const { return calls_; }

 private:
  size_t cubin_bytes_;
  std::atomic<int> calls_{0};
};

TEST(KernelCacheKeyTest, IsSixtyFourHexCharacters) {
  const std::string key = KeyFor("src");
  EXPECT_THAT(key, SizeIs(64));
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(key, KeyFor("src"));
}

TEST(KernelCacheKeyTest, EveryInputChangesTheKey) {
  const std::string base = KernelCacheKey("src", {"-DA"}, "sm_90", "13.0", {"k"});
  const std::vector<std::string> others = {
      KernelCacheKey("src2", {"-DA"}, "sm_90", "13.0", {"k"}),
      KernelCacheKey("src", {"-DB"}, "sm_90", "13.0", {"k"}),
      KernelCacheKey("src", {}, "sm_90", "13.0", {"k"}),
      KernelCacheKey("src", {"-DA"}, "sm_80", "13.0", {"k"}),
      KernelCacheKey("src", {"-DA"}, "sm_90", "12.8", {"k"}),
      KernelCacheKey("src", {"-DA"}, "sm_90", "13.0", {"k2"}),
      KernelCacheKey("src", {"-DA"}, "sm_90", "13.0", {"k", "j"}),
  };
  std::set<std::string> distinct(others.begin(), others.end());
  distinct.insert(base);
  EXPECT_EQ(distinct.size(), others.size() + 1);
}

TEST(KernelCacheKeyTest, DifferentSplitsOfTheSameBytesDoNotCollide) {
  EXPECT_NE(KernelCacheKey("ab", {"c"}, "sm_90", "13.0", {"k"}),
            KernelCacheKey("a", {"bc"}, "sm_90", "13.0", {"k"}));
  EXPECT_NE(KernelCacheKey("s", {"-DA", "-DB"}, "sm_90", "13.0", {"k"}),
            KernelCacheKey("s", {"-DA-DB"}, "sm_90", "13.0", {"k"}));
  EXPECT_NE(KernelCacheKey("s", {"x"}, "sm_90", "13.0", {"k"}),
            KernelCacheKey("s", {}, "sm_90", "13.0", {"x", "k"}));
  EXPECT_NE(KernelCacheKey("s", {}, "sm_9", "013.0", {"k"}),
            KernelCacheKey("s", {}, "sm_90", "13.0", {"k"}));
}

TEST(KernelCacheTest, SecondLookupIsAMemoryHitReturningTheSameObject) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<KernelCache> cache, KernelCache::Create({}));
  FakeCompiler compiler;
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelCache::Lookup first, compiler.Get(*cache, KeyFor("a")));
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelCache::Lookup second, compiler.Get(*cache, KeyFor("a")));
  EXPECT_EQ(first.origin, KernelOrigin::kCompiled);
  EXPECT_EQ(second.origin, KernelOrigin::kMemory);
  EXPECT_EQ(first.kernel.get(), second.kernel.get());
  EXPECT_EQ(first.kernel->key, KeyFor("a"));
  EXPECT_EQ(compiler.calls(), 1);
  const KernelCacheStats stats = cache->stats();
  EXPECT_EQ(stats.compiles, 1);
  EXPECT_EQ(stats.memory_hits, 1);
  EXPECT_EQ(stats.memory_entries, 1);
  EXPECT_EQ(stats.memory_bytes, first.kernel->footprint_bytes());
}

TEST(KernelCacheTest, EvictsTheLeastRecentlyUsedKernelWhenOverTheByteBudget) {
  FakeCompiler compiler(1000);
  CompiledKernel probe;  // same shape as the fake's kernels
  probe.key = KeyFor("a");
  probe.cubin = std::string(1000, 'x');
  probe.entries = {"scale<float>"};
  probe.lowered_names = {"_Z5scaleIfEvPT_S0_i"};
  probe.log = "warning: nothing";
  const int64_t footprint = probe.footprint_bytes();
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<KernelCache> cache,
                              KernelCache::Create({.memory_budget_bytes = 2 * footprint + 10}));

  const std::string a = KeyFor("a"), b = KeyFor("b"), c = KeyFor("c");
  ASSERT_THAT(compiler.Get(*cache, a), IsOk());
  ASSERT_THAT(compiler.Get(*cache, b), IsOk());
  ASSERT_THAT(compiler.Get(*cache, a), IsOk());  // a is now the most recently used
  ASSERT_THAT(compiler.Get(*cache, c), IsOk());  // over budget: b goes
  EXPECT_EQ(cache->stats().evictions, 1);
  EXPECT_EQ(cache->stats().memory_entries, 2);
  EXPECT_LE(cache->stats().memory_bytes, 2 * footprint + 10);

  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelCache::Lookup again_a, compiler.Get(*cache, a));
  EXPECT_EQ(again_a.origin, KernelOrigin::kMemory);
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelCache::Lookup again_b, compiler.Get(*cache, b));
  EXPECT_EQ(again_b.origin, KernelOrigin::kCompiled);
  EXPECT_EQ(compiler.calls(), 4);
}

TEST(KernelCacheTest, EvictsByEntryCount) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<KernelCache> cache,
                              KernelCache::Create({.max_memory_entries = 2}));
  FakeCompiler compiler;
  for (const char* source : {"a", "b", "c", "d"})
    ASSERT_THAT(compiler.Get(*cache, KeyFor(source)), IsOk());
  EXPECT_EQ(cache->stats().memory_entries, 2);
  EXPECT_EQ(cache->stats().evictions, 2);
}

TEST(KernelCacheTest, AKernelLargerThanTheBudgetIsReturnedButNotKept) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<KernelCache> cache,
                              KernelCache::Create({.memory_budget_bytes = 500}));
  FakeCompiler compiler(1000);
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelCache::Lookup found, compiler.Get(*cache, KeyFor("a")));
  EXPECT_THAT(found.kernel->cubin, SizeIs(1000));
  EXPECT_EQ(cache->stats().memory_entries, 0);
}

TEST(KernelCacheTest, CompileErrorsAreReturnedAndNotCached) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<KernelCache> cache, KernelCache::Create({}));
  int calls = 0;
  auto failing = [&]() -> absl::StatusOr<CompiledKernel> {
    ++calls;
    return absl::InvalidArgumentError("kernel.cu(1): error: nope");
  };
  EXPECT_THAT(cache->GetOrCompile(KeyFor("a"), failing),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nope")));
  EXPECT_THAT(cache->GetOrCompile(KeyFor("a"), failing),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(cache->stats().memory_entries, 0);
}

TEST(KernelCacheTest, RefusesKeysThatAreNotHexDigests) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<KernelCache> cache, KernelCache::Create({}));
  FakeCompiler compiler;
  for (const std::string& key : {std::string("../../etc/passwd"), std::string(64, 'A'),
                                 std::string(63, 'a'), std::string()}) {
    EXPECT_THAT(compiler.Get(*cache, key), StatusIs(absl::StatusCode::kInvalidArgument)) << key;
  }
  EXPECT_EQ(compiler.calls(), 0);
}

TEST(KernelCacheTest, RefusesNonPositiveBudgets) {
  EXPECT_THAT(KernelCache::Create({.memory_budget_bytes = 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("memory_budget_bytes = 0")));
  EXPECT_THAT(KernelCache::Create({.max_memory_entries = -1}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(KernelCacheTest, ConcurrentLookupsOfOneKeyCompileOnce) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<KernelCache> cache, KernelCache::Create({}));
  constexpr int kThreads = 8;
  std::atomic<int> calls{0};
  absl::Notification release;
  absl::BlockingCounter started(kThreads);
  std::vector<std::shared_ptr<const CompiledKernel>> results(kThreads);
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      started.DecrementCount();
      absl::StatusOr<KernelCache::Lookup> found =
          cache->GetOrCompile(KeyFor("a"), [&]() -> absl::StatusOr<CompiledKernel> {
            ++calls;
            release.WaitForNotification();  // hold the compile so the others queue behind it
            CompiledKernel kernel;
            kernel.cubin = "cubin";
            return kernel;
          });
      if (found.ok()) results[i] = found->kernel;
    });
  }
  started.Wait();
  release.Notify();
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(calls.load(), 1);
  for (const auto& result : results) {
    ASSERT_NE(result, nullptr);
    EXPECT_EQ(result.get(), results[0].get());
  }
  EXPECT_EQ(cache->stats().compiles, 1);
  EXPECT_EQ(cache->stats().memory_hits, kThreads - 1);
}

// ---- The disk format ----

CompiledKernel SampleKernel() {
  CompiledKernel kernel;
  kernel.key = KeyFor("a");
  kernel.cubin = std::string(
                     "\x7f"
                     "ELF",
                     4) +
                 std::string(60, '\x01');
  kernel.entries = {"add", "scale<float>"};
  kernel.lowered_names = {"add", "_Z5scaleIfEvPT_S0_i"};
  kernel.log = "warning";
  kernel.compile_time = absl::Microseconds(12345);
  return kernel;
}

TEST(DiskEntryTest, RoundTrips) {
  const CompiledKernel kernel = SampleKernel();
  GPUKIT_ASSERT_OK_AND_ASSIGN(CompiledKernel decoded,
                              DecodeDiskEntry(EncodeDiskEntry(kernel), kernel.key));
  EXPECT_EQ(decoded.key, kernel.key);
  EXPECT_EQ(decoded.cubin, kernel.cubin);
  EXPECT_EQ(decoded.entries, kernel.entries);
  EXPECT_EQ(decoded.lowered_names, kernel.lowered_names);
  EXPECT_EQ(decoded.log, kernel.log);
  EXPECT_EQ(decoded.compile_time, kernel.compile_time);
}

TEST(DiskEntryTest, EveryTruncationIsDataLoss) {
  const std::string bytes = EncodeDiskEntry(SampleKernel());
  for (size_t length = 0; length < bytes.size(); ++length) {
    EXPECT_THAT(DecodeDiskEntry(bytes.substr(0, length), SampleKernel().key),
                StatusIs(absl::StatusCode::kDataLoss))
        << "length " << length;
  }
}

TEST(DiskEntryTest, EveryFlippedByteIsDataLoss) {
  const std::string bytes = EncodeDiskEntry(SampleKernel());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string corrupt = bytes;
    corrupt[i] = static_cast<char>(corrupt[i] ^ 0x20);
    EXPECT_THAT(DecodeDiskEntry(corrupt, SampleKernel().key), StatusIs(absl::StatusCode::kDataLoss))
        << "byte " << i;
  }
}

TEST(DiskEntryTest, AnEntryFiledUnderAnotherKeyIsDataLoss) {
  EXPECT_THAT(DecodeDiskEntry(EncodeDiskEntry(SampleKernel()), KeyFor("b")),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("entry is for key")));
}

// ---- The disk cache ----

TEST(KernelCacheDiskTest, AFreshCacheOnTheSameDirectoryReadsFromDisk) {
  ScopedTempDir dir;
  FakeCompiler compiler;
  {
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<KernelCache> cache,
                                KernelCache::Create({.disk_dir = dir.path()}));
    ASSERT_THAT(compiler.Get(*cache, KeyFor("a")), IsOk());
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<KernelCache> cache,
                              KernelCache::Create({.disk_dir = dir.path()}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelCache::Lookup found, compiler.Get(*cache, KeyFor("a")));
  EXPECT_EQ(found.origin, KernelOrigin::kDisk);
  EXPECT_EQ(compiler.calls(), 1);
  EXPECT_EQ(found.kernel->key, KeyFor("a"));
  EXPECT_EQ(found.kernel->cubin, std::string(100, KeyFor("a")[0]));
  EXPECT_THAT(found.kernel->lowered_names, ElementsAre("_Z5scaleIfEvPT_S0_i"));
  EXPECT_EQ(found.kernel->compile_time, absl::Milliseconds(42));
  EXPECT_EQ(cache->stats().disk_hits, 1);

  // Now in memory too.
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelCache::Lookup again, compiler.Get(*cache, KeyFor("a")));
  EXPECT_EQ(again.origin, KernelOrigin::kMemory);
}

TEST(KernelCacheDiskTest, WritesOneOwnerOnlyFilePerKeyAndNoTemporaries) {
  ScopedTempDir dir;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<KernelCache> cache,
                              KernelCache::Create({.disk_dir = dir.path()}));
  FakeCompiler compiler;
  ASSERT_THAT(compiler.Get(*cache, KeyFor("a")), IsOk());
  std::vector<std::string> names;
  for (const auto& file : std::filesystem::directory_iterator(dir.path())) {
    names.push_back(file.path().filename().string());
  }
  EXPECT_THAT(names, ElementsAre(KeyFor("a") + ".cubin"));
  struct stat info {};
  ASSERT_EQ(stat(cache->DiskPath(KeyFor("a")).c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
}

TEST(KernelCacheDiskTest, CreatesAMissingDirectoryOwnerOnly) {
  ScopedTempDir root;
  const std::string dir = root.path() + "/nested/kernels";
  ASSERT_THAT(KernelCache::Create({.disk_dir = dir}), IsOk());
  struct stat info {};
  ASSERT_EQ(stat(dir.c_str(), &info), 0);
  EXPECT_TRUE(S_ISDIR(info.st_mode));
  EXPECT_EQ(info.st_mode & 0777, 0700u);
}

TEST(KernelCacheDiskTest, RefusesADirectoryOthersCanWrite) {
  ScopedTempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0777), 0);
  EXPECT_THAT(KernelCache::Create({.disk_dir = dir.path()}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("writable by other users (mode 0777)")));
}

TEST(KernelCacheDiskTest, RefusesAFileAsTheDirectory) {
  ScopedTempDir dir;
  const std::string file = dir.WriteFile("not-a-dir", "x");
  EXPECT_THAT(KernelCache::Create({.disk_dir = file}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not a directory")));
}

struct Damage {
  std::string name;
  std::function<std::string(const std::string&)> apply;
};

class CorruptDiskEntryTest : public ::testing::TestWithParam<Damage> {};

TEST_P(CorruptDiskEntryTest, IsDeletedAndCompiledAgain) {
  ScopedTempDir dir;
  FakeCompiler compiler;
  const std::string key = KeyFor("a");
  {
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<KernelCache> cache,
                                KernelCache::Create({.disk_dir = dir.path()}));
    ASSERT_THAT(compiler.Get(*cache, key), IsOk());
  }
  const std::string path = dir.path() + "/" + key + ".cubin";
  const std::string good = ReadFile(path);
  WriteFile(path, GetParam().apply(good));

  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<KernelCache> cache,
                              KernelCache::Create({.disk_dir = dir.path()}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(KernelCache::Lookup found, compiler.Get(*cache, key));
  EXPECT_EQ(found.origin, KernelOrigin::kCompiled);
  EXPECT_EQ(compiler.calls(), 2);
  EXPECT_EQ(cache->stats().corrupt_disk_entries, 1);
  EXPECT_EQ(ReadFile(path), good);  // rebuilt
}

INSTANTIATE_TEST_SUITE_P(
    Damages, CorruptDiskEntryTest,
    ::testing::Values(Damage{"FlippedCubinByte",
                             [](const std::string& bytes) {
                               std::string out = bytes;
                               out[out.size() - 40] ^= 0x01;
                               return out;
                             }},
                      Damage{"Truncated",
                             [](const std::string& bytes) {
                               return bytes.substr(0, bytes.size() / 2);
                             }},
                      Damage{"Empty", [](const std::string&) { return std::string(); }},
                      Damage{"OtherKeysEntry",
                             [](const std::string&) {
                               CompiledKernel other = SampleKernel();
                               other.key = KeyFor("zzz");
                               return EncodeDiskEntry(other);
                             }}),
    [](const ::testing::TestParamInfo<Damage>& info) { return info.param.name; });

}  // namespace
}  // namespace gpukit
