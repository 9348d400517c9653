// Green contexts on a real GPU: the facts issue 16's "hardware means per partition" rests on,
// measured before the CUDA device uses them, and kept as a regression test.
//
// A green context (CUDA 12.4+) is the device's primary context restricted to a group of SMs
// cut with cuDevSmResourceSplitByCount. Each test asserts what gpukit would rely on and
// prints one or more lines "FACT: [x] ..." with what it measured, for the design:
//   [a] kernels on streams of two green contexts (a group of 16 SMs and the remainder) run
//       on disjoint SMs, each on at most its group's SM count (read with %smid);
//   [b] whether a CUfunction of a module loaded in the primary context launches on a green
//       context's stream, and where its blocks run (either outcome passes);
//   [c] one cuLibraryLoadData library (context-independent) serves the primary and both
//       green contexts, its CUkernel cast to CUfunction or through cuKernelGetFunction, and
//       lands on each context's own SMs;
//   [d] VMM memory of the primary context (cuMemCreate + cuMemMap + cuMemSetAccess, as
//       gpukit's segments are made) is read and written by kernels on green streams;
//   [e] cuBLASLt on a green stream, with a handle made in the primary context and with one
//       made in the green context: does it run, is it bitwise the primary stream's result,
//       and how long a 2048^3 bfloat16 matmul takes on 16 SMs, the remainder and the whole
//       device (times are printed, never asserted);
//   [f] green streams take every priority of the range (cuGreenCtxStreamCreate), and a
//       stream made by cuStreamCreateWithPriority while a green context is current belongs
//       to that green context;
//   [g] whether a primary-context kernel runs on the SMs of a green context that is busy
//       (reserved or shared SMs; either outcome passes).
//
// The kernels are compiled by NVRTC (JitCompiler, in this process). Every green context,
// stream, module, library and buffer is owned by a small RAII wrapper, and each test leaves
// the primary context current, as the fixture checks.
//
// Skipped, visibly, where there is no GPU, no NVRTC, or a driver without the green context
// entry points (the message names those missing); [c] also without the cuLibrary ones, [e]
// without libcublasLt.
#include <cuda.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/base/shape.h"
#include "runtime/base/status_macros.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/jit/jit_compiler.h"
#include "runtime/jit/library_search.h"
#include "tests/gpu/record_smid_kernel.h"
#include "tests/testing/random_seed.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

// record_smid (record_smid_kernel.h), and triple_plus_index: reads and writes.
constexpr char kTriplePlusIndexSource[] = R"(
extern "C" __global__ void triple_plus_index(unsigned int* values, unsigned int n) {
  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) values[i] = values[i] * 3u + i;
}
)";

// 1024 threads a block: at most two blocks fit an SM (2048 threads on sm_80 and sm_90), so
// kBlocksPerSm blocks per SM of the device cannot all be placed at once and every SM a
// context may use receives some.
constexpr unsigned int kThreadsPerBlock = 1024;
constexpr int kBlocksPerSm = 4;
constexpr long long kSpinCycles = 100'000;  // about 50 us at 2 GHz
// The guaranteed partition's size asked for (rounded up to what the split allows).
constexpr unsigned int kGroupSms = 16;
constexpr unsigned int kUnwritten = 0xffffffffu;
constexpr int64_t kMatmulSize = 2048;

const CudaDriver& Cu() { return **CudaDriver::Get(); }  // only after Get() succeeded

void Fact(const std::string& line) {
  std::printf("FACT: %s\n", line.c_str());
  std::fflush(stdout);
}

std::string Name(CUresult result) { return CuErrorName(result); }

// Makes `context` current for its scope and makes current again what was before.
class ScopedCurrent {
 public:
  explicit ScopedCurrent(CUcontext context) {
    Cu().cuCtxGetCurrent(&previous_);
    result_ = Cu().cuCtxSetCurrent(context);
  }
  ~ScopedCurrent() { LogIfFailed(Cu().cuCtxSetCurrent(previous_), "cuCtxSetCurrent"); }
  ScopedCurrent(const ScopedCurrent&) = delete;
  ScopedCurrent& operator=(const ScopedCurrent&) = delete;
  CUresult result() const { return result_; }

 private:
  CUcontext previous_ = nullptr;
  CUresult result_ = CUDA_SUCCESS;
};

struct StreamDeleter {
  void operator()(CUstream s) const { LogIfFailed(Cu().cuStreamDestroy(s), "cuStreamDestroy"); }
};
using Stream = std::unique_ptr<CUstream_st, StreamDeleter>;
struct EventDeleter {
  void operator()(CUevent e) const { LogIfFailed(Cu().cuEventDestroy(e), "cuEventDestroy"); }
};
using Event = std::unique_ptr<CUevent_st, EventDeleter>;
struct LibraryDeleter {
  void operator()(CUlibrary l) const { LogIfFailed(Cu().cuLibraryUnload(l), "cuLibraryUnload"); }
};
using Library = std::unique_ptr<CUlib_st, LibraryDeleter>;
struct GreenCtxDeleter {
  void operator()(CUgreenCtx g) const {
    LogIfFailed(Cu().cuGreenCtxDestroy(g), "cuGreenCtxDestroy");
  }
};

// Device memory from cuMemAlloc in the context current when it was made.
class Buffer {
 public:
  static absl::StatusOr<Buffer> Allocate(size_t bytes) {
    Buffer buffer;
    GPUKIT_RETURN_IF_ERROR(CheckCu(Cu().cuMemAlloc(&buffer.ptr_, bytes), "cuMemAlloc"));
    buffer.bytes_ = bytes;
    return buffer;
  }
  Buffer() = default;
  Buffer(Buffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}
  Buffer& operator=(Buffer&& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  ~Buffer() {
    if (ptr_ != 0) LogIfFailed(Cu().cuMemFree(ptr_), "cuMemFree");
  }
  CUdeviceptr ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

// A module loaded with `context` current, unloaded with it current again.
class Module {
 public:
  static absl::StatusOr<Module> Load(CUcontext context, const std::string& cubin) {
    ScopedCurrent current(context);
    GPUKIT_RETURN_IF_ERROR(CheckCu(current.result(), "cuCtxSetCurrent"));
    Module module;
    module.context_ = context;
    GPUKIT_RETURN_IF_ERROR(
        CheckCu(Cu().cuModuleLoadDataEx(&module.module_, cubin.data(), 0, nullptr, nullptr),
                "cuModuleLoadDataEx"));
    return module;
  }
  Module() = default;
  Module(Module&& other) noexcept
      : context_(other.context_), module_(std::exchange(other.module_, nullptr)) {}
  Module& operator=(Module&& other) noexcept {
    std::swap(context_, other.context_);
    std::swap(module_, other.module_);
    return *this;
  }
  ~Module() {
    if (module_ == nullptr) return;
    ScopedCurrent current(context_);
    LogIfFailed(Cu().cuModuleUnload(module_), "cuModuleUnload");
  }
  absl::StatusOr<CUfunction> Function(const char* name) const {
    CUfunction function = nullptr;
    GPUKIT_RETURN_IF_ERROR(
        CheckCu(Cu().cuModuleGetFunction(&function, module_, name), "cuModuleGetFunction"));
    return function;
  }

 private:
  CUcontext context_ = nullptr;
  CUmodule module_ = nullptr;
};

// A green context over one SM group of a split.
class GreenContext {
 public:
  static absl::StatusOr<GreenContext> Create(CUdevice device, CUdevResource sms) {
    CUdevResourceDesc desc = nullptr;
    GPUKIT_RETURN_IF_ERROR(
        CheckCu(Cu().cuDevResourceGenerateDesc(&desc, &sms, 1), "cuDevResourceGenerateDesc"));
    CUgreenCtx raw = nullptr;
    GPUKIT_RETURN_IF_ERROR(
        CheckCu(Cu().cuGreenCtxCreate(&raw, desc, device, CU_GREEN_CTX_DEFAULT_STREAM),
                "cuGreenCtxCreate"));
    GreenContext green;
    green.green_.reset(raw);
    GPUKIT_RETURN_IF_ERROR(
        CheckCu(Cu().cuCtxFromGreenCtx(&green.context_, raw), "cuCtxFromGreenCtx"));
    CUdevResource own = {};
    GPUKIT_RETURN_IF_ERROR(
        CheckCu(Cu().cuGreenCtxGetDevResource(raw, &own, CU_DEV_RESOURCE_TYPE_SM),
                "cuGreenCtxGetDevResource"));
    green.sm_count_ = own.sm.smCount;
    return green;
  }

  CUgreenCtx green() const { return green_.get(); }
  CUcontext context() const { return context_; }  // cuCtxFromGreenCtx's
  unsigned int sm_count() const { return sm_count_; }

  // A stream of this green context (cuGreenCtxStreamCreate; CU_STREAM_NON_BLOCKING is the
  // only flag it takes).
  absl::StatusOr<Stream> NewStream(int priority = 0) const {
    CUstream raw = nullptr;
    GPUKIT_RETURN_IF_ERROR(
        CheckCu(Cu().cuGreenCtxStreamCreate(&raw, green_.get(), CU_STREAM_NON_BLOCKING, priority),
                "cuGreenCtxStreamCreate"));
    return Stream(raw);
  }

 private:
  std::unique_ptr<CUgreenCtx_st, GreenCtxDeleter> green_;
  CUcontext context_ = nullptr;
  unsigned int sm_count_ = 0;
};

// A stream of the context current now.
absl::StatusOr<Stream> NewCurrentContextStream(int priority = 0) {
  CUstream raw = nullptr;
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(Cu().cuStreamCreateWithPriority(&raw, CU_STREAM_NON_BLOCKING, priority),
              "cuStreamCreateWithPriority"));
  return Stream(raw);
}

// The device's SMs split into a group of at least `group_sms` and the rest.
struct SmSplit {
  CUdevResource device = {};
  CUdevResource group = {};
  CUdevResource remainder = {};
  unsigned int asked_sms = 0;  // the minCount passed: group_sms rounded as the split needs
};

absl::StatusOr<SmSplit> SplitSms(CUdevice device, unsigned int group_sms) {
  SmSplit split;
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(Cu().cuDeviceGetDevResource(device, &split.device, CU_DEV_RESOURCE_TYPE_SM),
              "cuDeviceGetDevResource"));
  // minSmPartitionSize and smCoscheduledAlignment are filled by CUDA 13 drivers; an older
  // driver leaves them zero, and the split then rounds by itself.
  unsigned int asked = std::max(group_sms, split.device.sm.minSmPartitionSize);
  if (const unsigned int align = split.device.sm.smCoscheduledAlignment; align > 1) {
    asked = (asked + align - 1) / align * align;
  }
  split.asked_sms = asked;
  unsigned int groups = 1;
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(Cu().cuDevSmResourceSplitByCount(&split.group, &groups, &split.device,
                                               &split.remainder, 0, asked),
              absl::StrCat("cuDevSmResourceSplitByCount(minCount ", asked, ")")));
  if (groups != 1) {
    return absl::InternalError(absl::StrCat("cuDevSmResourceSplitByCount made ", groups,
                                            " groups of ", asked, " SMs; asked for 1"));
  }
  return split;
}

// The green contexts of a split: `group` (kGroupSms) and `rest` (the remainder).
struct Partitions {
  SmSplit split;
  GreenContext group;
  GreenContext rest;
};

std::string Join(const std::set<unsigned int>& sms) { return absl::StrJoin(sms, ","); }

bool Disjoint(const std::set<unsigned int>& a, const std::set<unsigned int>& b) {
  return std::none_of(a.begin(), a.end(), [&](unsigned int sm) { return b.contains(sm); });
}

class GreenContextTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<const CudaDriver*> cu = CudaDriver::Get();
    if (!cu.ok()) return Skip(absl::StrCat("no CUDA driver: ", cu.status().message()));
    int count = 0;
    if ((*cu)->cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
      return Skip("the CUDA driver shows no GPU");
    }
    std::vector<std::string> missing;
#define GPUKIT_NEEDS_(name) \
  if ((*cu)->name == nullptr) missing.push_back(#name);
    GPUKIT_NEEDS_(cuDeviceGetDevResource)
    GPUKIT_NEEDS_(cuDevSmResourceSplitByCount)
    GPUKIT_NEEDS_(cuDevResourceGenerateDesc)
    GPUKIT_NEEDS_(cuGreenCtxCreate)
    GPUKIT_NEEDS_(cuGreenCtxDestroy)
    GPUKIT_NEEDS_(cuCtxFromGreenCtx)
    GPUKIT_NEEDS_(cuGreenCtxGetDevResource)
    GPUKIT_NEEDS_(cuStreamGetGreenCtx)
    GPUKIT_NEEDS_(cuGreenCtxStreamCreate)
    if (!missing.empty()) {
      return Skip(absl::StrCat("CUDA driver ", (*cu)->driver_version,
                               " lacks the green context entry points ",
                               absl::StrJoin(missing, ", ")));
    }
    missing.clear();
    GPUKIT_NEEDS_(cuLibraryLoadData)
    GPUKIT_NEEDS_(cuLibraryUnload)
    GPUKIT_NEEDS_(cuLibraryGetKernel)
    GPUKIT_NEEDS_(cuKernelGetFunction)
#undef GPUKIT_NEEDS_
    if (!missing.empty()) {
      no_library_ = new std::string(absl::StrCat("CUDA driver ", (*cu)->driver_version, " lacks ",
                                                 absl::StrJoin(missing, ", ")));
    }
    const CudaDriver& d = **cu;
    if (d.cuDeviceGet(&device_, 0) != CUDA_SUCCESS ||
        d.cuDevicePrimaryCtxRetain(&primary_, device_) != CUDA_SUCCESS) {
      return Skip("cannot retain GPU 0's primary context");
    }
    int major = 0, minor = 0;
    d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_);
    d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_);
    int sms = 0;
    d.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device_);
    device_sms_ = static_cast<unsigned int>(sms);
    char name[256] = {};
    d.cuDeviceGetName(name, sizeof(name), device_);
    std::printf("GPU 0: %s, sm_%d%d, %d SMs, CUDA driver %d\n", name, major, minor, sms,
                d.driver_version);

    absl::StatusOr<std::unique_ptr<JitCompiler>> jit = JitCompiler::Create({});
    if (!jit.ok()) return Skip(absl::StrCat("no NVRTC JIT compiler: ", jit.status().message()));
    CompileRequest request;
    request.source = std::string(::gpukit::testing::kRecordSmidSource) + kTriplePlusIndexSource;
    request.entries = {"record_smid", "triple_plus_index"};
    absl::StatusOr<JitResult> compiled =
        (*jit)->Compile(request, absl::StrCat("sm_", major * 10 + minor));
    if (!compiled.ok()) {
      return Skip(absl::StrCat("NVRTC cannot compile for this GPU: ", compiled.status().message()));
    }
    cubin_ = new std::string(compiled->kernel->cubin);
  }

  static void TearDownTestSuite() {
    if (primary_ != nullptr) Cu().cuDevicePrimaryCtxRelease(device_);
  }

  static void Skip(std::string why) { skip_ = new std::string(std::move(why)); }

  void SetUp() override {
    if (skip_ != nullptr) GTEST_SKIP() << *skip_;
    ASSERT_EQ(Cu().cuCtxGetCurrent(&found_current_), CUDA_SUCCESS);
    ASSERT_EQ(Cu().cuCtxSetCurrent(primary_), CUDA_SUCCESS);
    seed_ = ::gpukit::testing::TestSeed();
    rng_.seed(seed_);
  }

  void TearDown() override {
    if (skip_ != nullptr) return;
    CUcontext current = nullptr;
    Cu().cuCtxGetCurrent(&current);
    EXPECT_EQ(current, primary_) << "the test left another context current";
    Cu().cuCtxSetCurrent(found_current_);
  }

  // A split of kGroupSms and the remainder, and a green context over each.
  absl::StatusOr<Partitions> MakePartitions() {
    GPUKIT_ASSIGN_OR_RETURN(SmSplit split, SplitSms(device_, kGroupSms));
    if (split.remainder.sm.smCount == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("GPU 0 has no SMs beyond a group of ", split.group.sm.smCount));
    }
    GPUKIT_ASSIGN_OR_RETURN(GreenContext group, GreenContext::Create(device_, split.group));
    GPUKIT_ASSIGN_OR_RETURN(GreenContext rest, GreenContext::Create(device_, split.remainder));
    return Partitions{split, std::move(group), std::move(rest)};
  }

  int Blocks() const { return kBlocksPerSm * static_cast<int>(device_sms_); }

  // A buffer of one SM id per block, every entry kUnwritten (in the primary context).
  absl::StatusOr<Buffer> SmidBuffer() {
    GPUKIT_ASSIGN_OR_RETURN(Buffer buffer, Buffer::Allocate(Blocks() * sizeof(unsigned int)));
    GPUKIT_RETURN_IF_ERROR(ResetSmids(buffer));
    return buffer;
  }
  absl::Status ResetSmids(const Buffer& buffer) {
    const std::vector<unsigned int> unwritten(Blocks(), kUnwritten);
    return CheckCu(Cu().cuMemcpyHtoD(buffer.ptr(), unwritten.data(), buffer.bytes()),
                   "cuMemcpyHtoD");
  }

  // Enqueues record_smid (`function`: a CUfunction, or a CUkernel cast to one) over
  // `blocks` blocks (Blocks() when 0) on `stream` with `context` current; the launch's own
  // result.
  CUresult LaunchRecord(CUcontext context, CUfunction function, CUstream stream,
                        const Buffer& smids, int blocks = 0, long long spin_cycles = kSpinCycles) {
    ScopedCurrent current(context);
    if (current.result() != CUDA_SUCCESS) return current.result();
    CUdeviceptr out = smids.ptr();
    long long spin = spin_cycles;
    void* params[] = {&out, &spin};
    return Cu().cuLaunchKernel(function, blocks > 0 ? blocks : Blocks(), 1, 1, kThreadsPerBlock, 1,
                               1, 0, stream, params, nullptr);
  }

  // The SMs the `blocks` blocks (Blocks() when 0) of the last launch into `smids` ran on
  // (its stream must be done); INTERNAL when a block wrote nothing. Resets the buffer for
  // the next launch.
  absl::StatusOr<std::set<unsigned int>> SmsRun(const Buffer& smids, int blocks = 0) {
    std::vector<unsigned int> ids(Blocks());
    GPUKIT_RETURN_IF_ERROR(
        CheckCu(Cu().cuMemcpyDtoH(ids.data(), smids.ptr(), smids.bytes()), "cuMemcpyDtoH"));
    ids.resize(blocks > 0 ? blocks : Blocks());
    const int64_t unwritten = std::count(ids.begin(), ids.end(), kUnwritten);
    if (unwritten != 0) {
      return absl::InternalError(
          absl::StrCat(unwritten, " of ", ids.size(), " blocks recorded no SM id"));
    }
    GPUKIT_RETURN_IF_ERROR(ResetSmids(smids));
    return std::set<unsigned int>(ids.begin(), ids.end());
  }

  // Launches, waits and reads where the blocks ran.
  absl::StatusOr<std::set<unsigned int>> RecordOn(CUcontext context, CUfunction function,
                                                  CUstream stream, const Buffer& smids) {
    GPUKIT_RETURN_IF_ERROR(
        CheckCu(LaunchRecord(context, function, stream, smids), "cuLaunchKernel"));
    GPUKIT_RETURN_IF_ERROR(CheckCu(Cu().cuStreamSynchronize(stream), "cuStreamSynchronize"));
    return SmsRun(smids);
  }

  static std::string* skip_;
  static std::string* no_library_;  // why [c] cannot run, when it cannot
  static std::string* cubin_;       // record_smid and triple_plus_index for GPU 0
  static CUdevice device_;
  static CUcontext primary_;
  static unsigned int device_sms_;

  CUcontext found_current_ = nullptr;
  uint32_t seed_ = 0;
  std::mt19937 rng_;
};

std::string* GreenContextTest::skip_ = nullptr;
std::string* GreenContextTest::no_library_ = nullptr;
std::string* GreenContextTest::cubin_ = nullptr;
CUdevice GreenContextTest::device_ = 0;
CUcontext GreenContextTest::primary_ = nullptr;
unsigned int GreenContextTest::device_sms_ = 0;

// [a]
TEST_F(GreenContextTest, KernelsOfTwoGreenContextsRunOnDisjointSms) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(Partitions parts, MakePartitions());
  const SmSplit& split = parts.split;
  EXPECT_EQ(split.device.sm.smCount, device_sms_);
  EXPECT_GE(split.group.sm.smCount, kGroupSms);
  EXPECT_EQ(parts.group.sm_count(), split.group.sm.smCount);
  EXPECT_EQ(parts.rest.sm_count(), split.remainder.sm.smCount);
  EXPECT_LE(split.group.sm.smCount + split.remainder.sm.smCount, device_sms_);

  GPUKIT_ASSERT_OK_AND_ASSIGN(Module group_module, Module::Load(parts.group.context(), *cubin_));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Module rest_module, Module::Load(parts.rest.context(), *cubin_));
  GPUKIT_ASSERT_OK_AND_ASSIGN(CUfunction group_record, group_module.Function("record_smid"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(CUfunction rest_record, rest_module.Function("record_smid"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Stream group_stream, parts.group.NewStream());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Stream rest_stream, parts.rest.NewStream());
  CUgreenCtx owner = nullptr;
  ASSERT_EQ(Cu().cuStreamGetGreenCtx(group_stream.get(), &owner), CUDA_SUCCESS);
  EXPECT_EQ(owner, parts.group.green());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Buffer group_smids, SmidBuffer());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Buffer rest_smids, SmidBuffer());

  // Both at once: each grid has more blocks than its group can hold.
  ASSERT_EQ(LaunchRecord(parts.group.context(), group_record, group_stream.get(), group_smids),
            CUDA_SUCCESS);
  ASSERT_EQ(LaunchRecord(parts.rest.context(), rest_record, rest_stream.get(), rest_smids),
            CUDA_SUCCESS);
  ASSERT_EQ(Cu().cuStreamSynchronize(group_stream.get()), CUDA_SUCCESS);
  ASSERT_EQ(Cu().cuStreamSynchronize(rest_stream.get()), CUDA_SUCCESS);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::set<unsigned int> group_ran, SmsRun(group_smids));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::set<unsigned int> rest_ran, SmsRun(rest_smids));

  Fact(absl::StrCat("[a] device ", split.device.sm.smCount, " SMs (minSmPartitionSize ",
                    split.device.sm.minSmPartitionSize, ", smCoscheduledAlignment ",
                    split.device.sm.smCoscheduledAlignment, "); asked ", kGroupSms, " -> minCount ",
                    split.asked_sms, ": group ", split.group.sm.smCount, " SMs, remainder ",
                    split.remainder.sm.smCount, " SMs; ", Blocks(), " blocks each ran on ",
                    group_ran.size(), " SMs (group) and ", rest_ran.size(),
                    " SMs (remainder), disjoint: ", Disjoint(group_ran, rest_ran) ? "yes" : "NO",
                    "; group SM ids ", Join(group_ran)));
  EXPECT_TRUE(Disjoint(group_ran, rest_ran))
      << "group " << Join(group_ran) << "; remainder " << Join(rest_ran);
  EXPECT_LE(group_ran.size(), split.group.sm.smCount) << Join(group_ran);
  EXPECT_LE(rest_ran.size(), split.remainder.sm.smCount) << Join(rest_ran);
}

// [b]
TEST_F(GreenContextTest, ReportsWhetherAPrimaryContextFunctionLaunchesOnAGreenStream) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(Partitions parts, MakePartitions());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Module primary_module, Module::Load(primary_, *cubin_));
  GPUKIT_ASSERT_OK_AND_ASSIGN(CUfunction record, primary_module.Function("record_smid"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Stream green_stream, parts.group.NewStream());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Buffer smids, SmidBuffer());

  // The launch with each context current: the executor would have the green one current.
  const std::pair<const char*, CUcontext> currents[] = {{"green", parts.group.context()},
                                                        {"primary", primary_}};
  for (const auto& [current_name, current] : currents) {
    const CUresult launched = LaunchRecord(current, record, green_stream.get(), smids);
    std::string outcome = absl::StrCat("cuLaunchKernel ", Name(launched));
    if (launched == CUDA_SUCCESS) {
      const CUresult synced = Cu().cuStreamSynchronize(green_stream.get());
      absl::StrAppend(&outcome, ", cuStreamSynchronize ", Name(synced));
      if (synced == CUDA_SUCCESS) {
        GPUKIT_ASSERT_OK_AND_ASSIGN(std::set<unsigned int> ran, SmsRun(smids));
        absl::StrAppend(&outcome, ", ran on ", ran.size(), " SMs (group has ",
                        parts.group.sm_count(), ": ",
                        ran.size() <= parts.group.sm_count() ? "within it" : "BEYOND it", ")");
      }
    }
    Fact(absl::StrCat("[b] CUfunction of a module loaded in the primary context, launched on ",
                      "a green stream with the ", current_name, " context current: ", outcome));
  }
  // Whatever the answer, the primary context still works.
  GPUKIT_ASSERT_OK_AND_ASSIGN(Stream primary_stream, NewCurrentContextStream());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::set<unsigned int> ran,
                              RecordOn(primary_, record, primary_stream.get(), smids));
  EXPECT_FALSE(ran.empty());
}

// [c]
TEST_F(GreenContextTest, LibraryKernelRunsInEveryContextOnItsOwnSms) {
  if (no_library_ != nullptr) GTEST_SKIP() << *no_library_;
  GPUKIT_ASSERT_OK_AND_ASSIGN(Partitions parts, MakePartitions());
  CUlibrary raw_library = nullptr;
  ASSERT_EQ(Cu().cuLibraryLoadData(&raw_library, cubin_->data(), nullptr, nullptr, 0, nullptr,
                                   nullptr, 0),
            CUDA_SUCCESS);
  const Library library(raw_library);
  CUkernel kernel = nullptr;
  ASSERT_EQ(Cu().cuLibraryGetKernel(&kernel, library.get(), "record_smid"), CUDA_SUCCESS);
  GPUKIT_ASSERT_OK_AND_ASSIGN(Stream group_stream, parts.group.NewStream());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Stream rest_stream, parts.rest.NewStream());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Stream primary_stream, NewCurrentContextStream());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Buffer smids, SmidBuffer());

  struct Target {
    const char* name;
    CUcontext context;
    CUstream stream;
    std::set<unsigned int> ran;  // over every way of launching
    CUfunction function = nullptr;
  };
  Target targets[] = {{"group", parts.group.context(), group_stream.get(), {}},
                      {"remainder", parts.rest.context(), rest_stream.get(), {}},
                      {"primary", primary_, primary_stream.get(), {}}};
  for (Target& target : targets) {
    SCOPED_TRACE(target.name);
    // The CUkernel cast to a CUfunction: the context comes from the stream.
    GPUKIT_ASSERT_OK_AND_ASSIGN(
        std::set<unsigned int> cast,
        RecordOn(target.context, reinterpret_cast<CUfunction>(kernel), target.stream, smids));
    // The same with the primary context current: still the stream's context.
    GPUKIT_ASSERT_OK_AND_ASSIGN(
        std::set<unsigned int> cast_from_primary,
        RecordOn(primary_, reinterpret_cast<CUfunction>(kernel), target.stream, smids));
    {
      ScopedCurrent current(target.context);
      ASSERT_EQ(current.result(), CUDA_SUCCESS);
      ASSERT_EQ(Cu().cuKernelGetFunction(&target.function, kernel), CUDA_SUCCESS);
    }
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::set<unsigned int> function,
                                RecordOn(target.context, target.function, target.stream, smids));
    target.ran.insert(cast.begin(), cast.end());
    target.ran.insert(cast_from_primary.begin(), cast_from_primary.end());
    target.ran.insert(function.begin(), function.end());
  }
  const Target& group = targets[0];
  const Target& rest = targets[1];
  const Target& primary = targets[2];
  Fact(absl::StrCat(
      "[c] cuLibraryLoadData kernel (cast and cuKernelGetFunction): group context ran on ",
      group.ran.size(), " SMs (of ", parts.group.sm_count(), "), remainder on ", rest.ran.size(),
      " (of ", parts.rest.sm_count(), "), primary on ", primary.ran.size(), " (of ", device_sms_,
      "); cuKernelGetFunction gives the ",
      group.function == primary.function ? "same" : "a different",
      " CUfunction in the group and the primary context"));
  EXPECT_LE(group.ran.size(), parts.group.sm_count()) << Join(group.ran);
  EXPECT_LE(rest.ran.size(), parts.rest.sm_count()) << Join(rest.ran);
  EXPECT_TRUE(Disjoint(group.ran, rest.ran))
      << "group " << Join(group.ran) << "; remainder " << Join(rest.ran);
  EXPECT_GT(primary.ran.size(), parts.group.sm_count()) << Join(primary.ran);
}

// VMM memory as gpukit's segments are made (vmm_segment_source.cc): cuMemCreate of pinned
// device memory, mapped into a reserved range and opened read-write for the device.
class VmmBuffer {
 public:
  static absl::StatusOr<std::unique_ptr<VmmBuffer>> Create(CUdevice device, size_t min_bytes) {
    auto buffer = std::unique_ptr<VmmBuffer>(new VmmBuffer);
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t granularity = 0;
    GPUKIT_RETURN_IF_ERROR(CheckCu(Cu().cuMemGetAllocationGranularity(
                                       &granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
                                   "cuMemGetAllocationGranularity"));
    buffer->bytes_ = (min_bytes + granularity - 1) / granularity * granularity;
    GPUKIT_RETURN_IF_ERROR(
        CheckCu(Cu().cuMemAddressReserve(&buffer->address_, buffer->bytes_, granularity, 0, 0),
                "cuMemAddressReserve"));
    GPUKIT_RETURN_IF_ERROR(
        CheckCu(Cu().cuMemCreate(&buffer->handle_, buffer->bytes_, &prop, 0), "cuMemCreate"));
    buffer->created_ = true;
    GPUKIT_RETURN_IF_ERROR(CheckCu(
        Cu().cuMemMap(buffer->address_, buffer->bytes_, 0, buffer->handle_, 0), "cuMemMap"));
    buffer->mapped_ = true;
    CUmemAccessDesc access = {};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    GPUKIT_RETURN_IF_ERROR(CheckCu(
        Cu().cuMemSetAccess(buffer->address_, buffer->bytes_, &access, 1), "cuMemSetAccess"));
    return buffer;
  }
  ~VmmBuffer() {
    if (mapped_) LogIfFailed(Cu().cuMemUnmap(address_, bytes_), "cuMemUnmap");
    if (created_) LogIfFailed(Cu().cuMemRelease(handle_), "cuMemRelease");
    if (address_ != 0) LogIfFailed(Cu().cuMemAddressFree(address_, bytes_), "cuMemAddressFree");
  }
  VmmBuffer(const VmmBuffer&) = delete;
  VmmBuffer& operator=(const VmmBuffer&) = delete;
  CUdeviceptr address() const { return address_; }

 private:
  VmmBuffer() = default;
  CUdeviceptr address_ = 0;
  size_t bytes_ = 0;
  CUmemGenericAllocationHandle handle_ = 0;
  bool created_ = false;
  bool mapped_ = false;
};

// [d]
TEST_F(GreenContextTest, KernelsOnGreenStreamsReadAndWriteVmmMemoryOfThePrimaryContext) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(Partitions parts, MakePartitions());
  constexpr unsigned int n = 1 << 20;  // 4 MiB: two 2 MiB granules
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<VmmBuffer> memory,
                              VmmBuffer::Create(device_, n * sizeof(unsigned int)));
  std::vector<unsigned int> values(n);
  std::uniform_int_distribution<unsigned int> any;
  for (unsigned int& v : values) v = any(rng_);
  ASSERT_EQ(Cu().cuMemcpyHtoD(memory->address(), values.data(), n * sizeof(unsigned int)),
            CUDA_SUCCESS);

  // The group's pass through a module loaded in its green context; the remainder's through
  // the library's kernel where the driver has it, else its own module.
  GPUKIT_ASSERT_OK_AND_ASSIGN(Module group_module, Module::Load(parts.group.context(), *cubin_));
  GPUKIT_ASSERT_OK_AND_ASSIGN(CUfunction group_fn, group_module.Function("triple_plus_index"));
  Library library;
  Module rest_module;
  CUfunction rest_fn = nullptr;
  if (no_library_ == nullptr) {
    CUlibrary raw = nullptr;
    ASSERT_EQ(
        Cu().cuLibraryLoadData(&raw, cubin_->data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
        CUDA_SUCCESS);
    library.reset(raw);
    CUkernel kernel = nullptr;
    ASSERT_EQ(Cu().cuLibraryGetKernel(&kernel, library.get(), "triple_plus_index"), CUDA_SUCCESS);
    rest_fn = reinterpret_cast<CUfunction>(kernel);
  } else {
    GPUKIT_ASSERT_OK_AND_ASSIGN(Module loaded, Module::Load(parts.rest.context(), *cubin_));
    rest_module = std::move(loaded);
    GPUKIT_ASSERT_OK_AND_ASSIGN(rest_fn, rest_module.Function("triple_plus_index"));
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(Stream group_stream, parts.group.NewStream());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Stream rest_stream, parts.rest.NewStream());

  const std::pair<CUcontext, std::pair<CUfunction, CUstream>> passes[] = {
      {parts.group.context(), {group_fn, group_stream.get()}},
      {parts.rest.context(), {rest_fn, rest_stream.get()}}};
  for (const auto& [context, launch] : passes) {
    ScopedCurrent current(context);
    ASSERT_EQ(current.result(), CUDA_SUCCESS);
    CUdeviceptr ptr = memory->address();
    unsigned int count = n;
    void* params[] = {&ptr, &count};
    ASSERT_EQ(Cu().cuLaunchKernel(launch.first, n / 256, 1, 1, 256, 1, 1, 0, launch.second, params,
                                  nullptr),
              CUDA_SUCCESS);
    ASSERT_EQ(Cu().cuStreamSynchronize(launch.second), CUDA_SUCCESS);
  }

  std::vector<unsigned int> got(n);
  ASSERT_EQ(Cu().cuMemcpyDtoH(got.data(), memory->address(), n * sizeof(unsigned int)),
            CUDA_SUCCESS);
  int64_t wrong = 0;
  for (unsigned int i = 0; i < n; ++i) {
    const unsigned int once = values[i] * 3u + i;
    if (got[i] != once * 3u + i) ++wrong;
  }
  Fact(absl::StrCat("[d] VMM memory of the primary context (cuMemCreate/cuMemMap/",
                    "cuMemSetAccess), two kernels on green streams (group: module of the green ",
                    "context; remainder: ", no_library_ == nullptr ? "library kernel" : "module",
                    "): ", wrong, " of ", n, " values wrong"));
  EXPECT_EQ(wrong, 0) << "seed " << seed_ << " (GPUKIT_TEST_SEED)";
}

// A CublasLtMatmul made with `context` current and destroyed with it current again.
struct ContextBlas {
  ContextBlas(CUcontext context, std::unique_ptr<CublasLtMatmul> blas)
      : context(context), blas(std::move(blas)) {}
  ~ContextBlas() {
    ScopedCurrent current(context);
    blas.reset();
  }
  ContextBlas(const ContextBlas&) = delete;
  ContextBlas& operator=(const ContextBlas&) = delete;
  CUcontext context;
  std::unique_ptr<CublasLtMatmul> blas;
};

absl::StatusOr<std::unique_ptr<ContextBlas>> CreateBlasIn(CUcontext context) {
  ScopedCurrent current(context);
  GPUKIT_RETURN_IF_ERROR(CheckCu(current.result(), "cuCtxSetCurrent"));
  GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<CublasLtMatmul> blas,
                          CublasLtMatmul::Create(CudaLibrarySearchDirs({})));
  return std::make_unique<ContextBlas>(context, std::move(blas));
}

// [e]
TEST_F(GreenContextTest, CublasLtMatmulOnGreenStreams) {
  absl::StatusOr<std::unique_ptr<ContextBlas>> primary_blas = CreateBlasIn(primary_);
  if (!primary_blas.ok()) GTEST_SKIP() << primary_blas.status().message();
  GPUKIT_ASSERT_OK_AND_ASSIGN(Partitions parts, MakePartitions());

  const MatmulShape shape{
      .dtype = DType::kBFloat16, .m = kMatmulSize, .n = kMatmulSize, .k = kMatmulSize};
  const int64_t elements = kMatmulSize * kMatmulSize;
  const size_t bytes = elements * DTypeSize(DType::kBFloat16);
  // Operands as bfloat16, values in +-[0.25, 2], and as the doubles they round to.
  auto random_operand = [&](std::vector<uint8_t>& bf16, std::vector<float>& exact) {
    std::uniform_real_distribution<float> magnitude(0.25f, 2.0f);
    std::bernoulli_distribution negative(0.5);
    std::vector<float> values(elements);
    for (float& v : values) v = magnitude(rng_) * (negative(rng_) ? -1.0f : 1.0f);
    bf16.resize(bytes);
    kernels::CastCpu({values.data(), DType::kFloat32, {elements}},
                     {bf16.data(), DType::kBFloat16, {elements}});
    exact.resize(elements);
    kernels::CastCpu({bf16.data(), DType::kBFloat16, {elements}},
                     {exact.data(), DType::kFloat32, {elements}});
  };
  std::vector<uint8_t> a_bytes, b_bytes;
  std::vector<float> a, b;
  random_operand(a_bytes, a);
  random_operand(b_bytes, b);
  GPUKIT_ASSERT_OK_AND_ASSIGN(Buffer a_dev, Buffer::Allocate(bytes));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Buffer b_dev, Buffer::Allocate(bytes));
  ASSERT_EQ(Cu().cuMemcpyHtoD(a_dev.ptr(), a_bytes.data(), bytes), CUDA_SUCCESS);
  ASSERT_EQ(Cu().cuMemcpyHtoD(b_dev.ptr(), b_bytes.data(), bytes), CUDA_SUCCESS);

  // Random sampled elements of the product against a double-precision reference: the
  // output's relative error over them, as cublaslt_test bounds bfloat16 (1e-2).
  std::vector<std::pair<int64_t, int64_t>> samples(512);
  std::uniform_int_distribution<int64_t> index(0, kMatmulSize - 1);
  for (auto& [i, j] : samples) i = index(rng_), j = index(rng_);
  auto sampled_error = [&](const std::vector<uint8_t>& out_bytes) {
    std::vector<float> out(elements);
    kernels::CastCpu({out_bytes.data(), DType::kBFloat16, {elements}},
                     {out.data(), DType::kFloat32, {elements}});
    double diff = 0, norm = 0;
    for (const auto& [i, j] : samples) {
      double ref = 0;
      for (int64_t l = 0; l < kMatmulSize; ++l) {
        ref += static_cast<double>(a[i * kMatmulSize + l]) * b[l * kMatmulSize + j];
      }
      const double got = out[i * kMatmulSize + j];
      diff += (got - ref) * (got - ref);
      norm += ref * ref;
    }
    return std::sqrt(diff / norm);
  };

  // Runs `reps` matmuls of `blas` on `stream` with `context` current into `out`; the mean
  // time per matmul from events recorded around them (after one untimed matmul).
  auto run = [&](const ContextBlas& blas, CUcontext context, CUstream stream, const Buffer& out,
                 const Buffer& workspace, int reps) -> absl::StatusOr<double> {
    ScopedCurrent current(context);
    GPUKIT_RETURN_IF_ERROR(CheckCu(current.result(), "cuCtxSetCurrent"));
    const MatmulBuffers buffers{.a = a_dev.ptr(),
                                .b = b_dev.ptr(),
                                .out = out.ptr(),
                                .workspace = workspace.ptr(),
                                .workspace_bytes = CublasLtMatmul::kWorkspaceBytes};
    GPUKIT_RETURN_IF_ERROR(blas.blas->Matmul(stream, shape, buffers));
    CUevent raw_start = nullptr, raw_end = nullptr;
    GPUKIT_RETURN_IF_ERROR(
        CheckCu(Cu().cuEventCreate(&raw_start, CU_EVENT_DEFAULT), "cuEventCreate"));
    const Event start(raw_start);
    GPUKIT_RETURN_IF_ERROR(
        CheckCu(Cu().cuEventCreate(&raw_end, CU_EVENT_DEFAULT), "cuEventCreate"));
    const Event end(raw_end);
    GPUKIT_RETURN_IF_ERROR(CheckCu(Cu().cuEventRecord(start.get(), stream), "cuEventRecord"));
    for (int rep = 0; rep < reps; ++rep) {
      GPUKIT_RETURN_IF_ERROR(blas.blas->Matmul(stream, shape, buffers));
    }
    GPUKIT_RETURN_IF_ERROR(CheckCu(Cu().cuEventRecord(end.get(), stream), "cuEventRecord"));
    GPUKIT_RETURN_IF_ERROR(CheckCu(Cu().cuStreamSynchronize(stream), "cuStreamSynchronize"));
    float ms = 0;
    GPUKIT_RETURN_IF_ERROR(
        CheckCu(Cu().cuEventElapsedTime(&ms, start.get(), end.get()), "cuEventElapsedTime"));
    return reps > 0 ? ms / reps : 0.0;
  };
  auto download = [&](const Buffer& out) {
    std::vector<uint8_t> host(bytes);
    EXPECT_EQ(Cu().cuMemcpyDtoH(host.data(), out.ptr(), bytes), CUDA_SUCCESS);
    return host;
  };

  GPUKIT_ASSERT_OK_AND_ASSIGN(Stream primary_stream, NewCurrentContextStream());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Stream group_stream, parts.group.NewStream());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Stream rest_stream, parts.rest.NewStream());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Buffer primary_ws, Buffer::Allocate(CublasLtMatmul::kWorkspaceBytes));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Buffer group_ws, Buffer::Allocate(CublasLtMatmul::kWorkspaceBytes));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Buffer rest_ws, Buffer::Allocate(CublasLtMatmul::kWorkspaceBytes));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Buffer reference_out, Buffer::Allocate(bytes));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Buffer out, Buffer::Allocate(bytes));

  const ContextBlas& primary = **primary_blas;
  GPUKIT_ASSERT_OK(run(primary, primary_, primary_stream.get(), reference_out, primary_ws, 0));
  const std::vector<uint8_t> reference = download(reference_out);
  const double reference_error = sampled_error(reference);
  ASSERT_LE(reference_error, 1e-2) << "the primary context's own matmul, seed " << seed_;

  // On the group's stream with the green context current: the primary context's handle,
  // then one made in the green context.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<ContextBlas> group_blas,
                              CreateBlasIn(parts.group.context()));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<ContextBlas> rest_blas,
                              CreateBlasIn(parts.rest.context()));
  const std::pair<const char*, const ContextBlas*> handles[] = {{"primary", &primary},
                                                                {"green", group_blas.get()}};
  bool primary_handle_ran_on_green = false;
  for (const auto& [handle_name, blas] : handles) {
    SCOPED_TRACE(handle_name);
    ASSERT_EQ(Cu().cuMemcpyHtoD(out.ptr(), std::vector<uint8_t>(bytes, 0xff).data(), bytes),
              CUDA_SUCCESS);
    const absl::Status status =
        run(*blas, parts.group.context(), group_stream.get(), out, group_ws, 0).status();
    std::string outcome = status.ok() ? "ran" : status.ToString();
    if (status.ok()) {
      if (blas == &primary) primary_handle_ran_on_green = true;
      const std::vector<uint8_t> result = download(out);
      const double error = sampled_error(result);
      absl::StrAppend(
          &outcome, ", bitwise equal to the primary stream's: ", result == reference ? "yes" : "NO",
          ", sampled relative error ", error, " (primary ", reference_error, ")");
      EXPECT_LE(error, 1e-2) << "seed " << seed_;
    }
    Fact(absl::StrCat("[e] cuBLASLt ", shape.m, "^3 bf16 with a handle made in the ", handle_name,
                      " context, on the ", parts.group.sm_count(),
                      "-SM group's stream with the green context current: ", outcome));
  }

  // Times: each context's own handle on its own stream, and the primary handle on the green
  // streams where it ran there (the same algorithm everywhere).
  constexpr int kReps = 20;
  struct Timing {
    const char* what;
    const ContextBlas* blas;
    CUcontext context;
    CUstream stream;
    const Buffer* workspace;
    unsigned int sms;
  };
  std::vector<Timing> timings = {
      {"whole device, primary handle", &primary, primary_, primary_stream.get(), &primary_ws,
       device_sms_},
      {"group, its own handle", group_blas.get(), parts.group.context(), group_stream.get(),
       &group_ws, parts.group.sm_count()},
      {"remainder, its own handle", rest_blas.get(), parts.rest.context(), rest_stream.get(),
       &rest_ws, parts.rest.sm_count()}};
  if (primary_handle_ran_on_green) {
    timings.push_back({"group, primary handle", &primary, parts.group.context(), group_stream.get(),
                       &group_ws, parts.group.sm_count()});
    timings.push_back({"remainder, primary handle", &primary, parts.rest.context(),
                       rest_stream.get(), &rest_ws, parts.rest.sm_count()});
  }
  const double flops = 2.0 * kMatmulSize * kMatmulSize * kMatmulSize;
  for (const Timing& t : timings) {
    absl::StatusOr<double> ms = run(*t.blas, t.context, t.stream, out, *t.workspace, kReps);
    Fact(absl::StrCat("[e] time of one ", kMatmulSize, "^3 bf16 matmul, ", t.what, " (", t.sms,
                      " SMs): ",
                      ms.ok() ? absl::StrCat(*ms * 1e3, " us, ", flops / (*ms * 1e-3) / 1e12,
                                             " TFLOP/s (mean of ", kReps, ")")
                              : ms.status().ToString()));
    EXPECT_TRUE(ms.ok()) << t.what << ": " << ms.status();
  }
}

// [f]
TEST_F(GreenContextTest, GreenStreamsTakeEveryPriorityOfTheRange) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(Partitions parts, MakePartitions());
  int least = 0, greatest = 0;
  ASSERT_EQ(Cu().cuCtxGetStreamPriorityRange(&least, &greatest), CUDA_SUCCESS);
  int green_least = 0, green_greatest = 0;
  {
    ScopedCurrent current(parts.group.context());
    ASSERT_EQ(current.result(), CUDA_SUCCESS);
    ASSERT_EQ(Cu().cuCtxGetStreamPriorityRange(&green_least, &green_greatest), CUDA_SUCCESS);
  }
  EXPECT_EQ(green_least, least);
  EXPECT_EQ(green_greatest, greatest);

  // Every priority of the range, and one beyond each end (clamped, as for other streams).
  std::vector<std::string> read_back;
  for (int asked = greatest - 1; asked <= least + 1; ++asked) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(Stream stream, parts.group.NewStream(asked));
    int priority = 1000;
    ASSERT_EQ(Cu().cuStreamGetPriority(stream.get(), &priority), CUDA_SUCCESS);
    EXPECT_EQ(priority, std::clamp(asked, greatest, least)) << "asked " << asked;
    read_back.push_back(absl::StrCat(asked, "->", priority));
  }

  // Kernels run on the highest-priority green stream, within the group.
  GPUKIT_ASSERT_OK_AND_ASSIGN(Module module, Module::Load(parts.group.context(), *cubin_));
  GPUKIT_ASSERT_OK_AND_ASSIGN(CUfunction record, module.Function("record_smid"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Buffer smids, SmidBuffer());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Stream urgent, parts.group.NewStream(greatest));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::set<unsigned int> urgent_ran,
                              RecordOn(parts.group.context(), record, urgent.get(), smids));
  EXPECT_LE(urgent_ran.size(), parts.group.sm_count()) << Join(urgent_ran);

  // A stream made the way CudaDevice makes its streams, with the green context current.
  Stream plain;
  {
    ScopedCurrent current(parts.group.context());
    ASSERT_EQ(current.result(), CUDA_SUCCESS);
    GPUKIT_ASSERT_OK_AND_ASSIGN(plain, NewCurrentContextStream(greatest));
  }
  CUgreenCtx owner = nullptr;
  ASSERT_EQ(Cu().cuStreamGetGreenCtx(plain.get(), &owner), CUDA_SUCCESS);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::set<unsigned int> plain_ran,
                              RecordOn(parts.group.context(), record, plain.get(), smids));
  Fact(absl::StrCat(
      "[f] stream priorities: primary range [", greatest, " (greatest), ", least,
      " (least)], green context range [", green_greatest, ", ", green_least,
      "]; cuGreenCtxStreamCreate asked->got ", absl::StrJoin(read_back, " "),
      "; highest-priority green stream ran on ", urgent_ran.size(), " SMs (group ",
      parts.group.sm_count(), "); cuStreamCreateWithPriority with the green context current ",
      owner == parts.group.green() ? "belongs to that green context" : "is NOT a green stream",
      " and ran on ", plain_ran.size(), " SMs"));
  EXPECT_EQ(owner, parts.group.green());
  EXPECT_LE(plain_ran.size(), parts.group.sm_count()) << Join(plain_ran);
}

// [g] Whether a green context reserves its SMs: a primary-context kernel launched while the
// group's kernel runs (ten times longer) may or may not be placed on the group's SMs. The
// group's kernel has one block per group SM, so (spread one to an SM, as the block scheduler
// does) each of its SMs keeps room for one more 1024-thread block.
TEST_F(GreenContextTest, ReportsWhetherPrimaryContextKernelsUseTheSmsOfABusyGreenContext) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(Partitions parts, MakePartitions());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Module group_module, Module::Load(parts.group.context(), *cubin_));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Module primary_module, Module::Load(primary_, *cubin_));
  GPUKIT_ASSERT_OK_AND_ASSIGN(CUfunction group_record, group_module.Function("record_smid"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(CUfunction primary_record, primary_module.Function("record_smid"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Stream group_stream, parts.group.NewStream());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Stream primary_stream, NewCurrentContextStream());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Buffer group_smids, SmidBuffer());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Buffer primary_smids, SmidBuffer());

  const int group_blocks = static_cast<int>(parts.group.sm_count());
  ASSERT_EQ(LaunchRecord(parts.group.context(), group_record, group_stream.get(), group_smids,
                         group_blocks, 10 * kSpinCycles),
            CUDA_SUCCESS);
  ASSERT_EQ(LaunchRecord(primary_, primary_record, primary_stream.get(), primary_smids),
            CUDA_SUCCESS);
  // Which stream finished first says whether the two overlapped at all.
  ASSERT_EQ(Cu().cuStreamSynchronize(primary_stream.get()), CUDA_SUCCESS);
  const CUresult group_busy = Cu().cuStreamQuery(group_stream.get());
  ASSERT_EQ(Cu().cuStreamSynchronize(group_stream.get()), CUDA_SUCCESS);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::set<unsigned int> group_ran, SmsRun(group_smids, group_blocks));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::set<unsigned int> primary_ran, SmsRun(primary_smids));
  std::set<unsigned int> shared;
  for (unsigned int sm : primary_ran) {
    if (group_ran.contains(sm)) shared.insert(sm);
  }
  Fact(absl::StrCat("[g] a primary-context kernel launched while the ", parts.group.sm_count(),
                    "-SM group's kernel ran (", group_blocks, " blocks on ", group_ran.size(),
                    " SMs; group still busy when the primary kernel ended: ",
                    group_busy == CUDA_ERROR_NOT_READY ? "yes" : "no", ") ran on ",
                    primary_ran.size(), " SMs, ", shared.size(),
                    " of them the group's: green context SMs are ",
                    shared.empty() ? "not lent to the primary context while busy"
                                   : "shared with the primary context"));
  EXPECT_LE(group_ran.size(), parts.group.sm_count()) << Join(group_ran);
  EXPECT_FALSE(primary_ran.empty());
}

}  // namespace
}  // namespace gpukit
