// Device memory that gpukitd owns and its device executor maps (issue 15), on a real GPU:
//   - CudaVmmSegmentSource allocates VMM segments without a CUDA context; a CudaDevice maps
//     them (MapSegment), makes buffers over ranges of them (BufferInSegment), copies and runs
//     an op on those, and keeps them out of its own accounting;
//   - fault containment across processes: a child process (the executor's stand-in) maps the
//     parent's memory, writes it, then runs a kernel that faults; the fault stays in the child
//     (its WaitEvent and CheckHealth report it) and a second child maps the same memory and
//     finds every byte the first one wrote;
//   - CheckHealth answers at once while another stream is busy.
// Where there is no NVIDIA driver or no usable GPU every test reports itself skipped.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/unix_fd.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/vmm_segment_source.h"
#include "runtime/jit/jit_compiler.h"
#include "runtime/op_registry.h"
#include "tests/testing/status_matchers.h"
#include <sys/socket.h>
#include <sys/wait.h>

extern char** environ;

namespace gpukit {
namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::IsOkAndHolds;
using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;

// Kernels written by hand in PTX, so that no compiler is needed:
//   fill_hash(u32* data, u32 n, u32 salt): data[i] = i * 16777619 + salt for i < n
//   write_null(): stores to address 0, which is never mapped: CUDA_ERROR_ILLEGAL_ADDRESS
//   trap_now(): executes trap: CUDA_ERROR_LAUNCH_FAILED
//   spin_until_set(u32* flag, u32* result, u64 max_cycles): spins until *flag != 0 (then
//     *result = 1) or until max_cycles clock cycles have passed (then *result = 2), so that a
//     test that goes wrong ends instead of hanging the GPU
constexpr char kPtx[] = R"(
.version 7.0
.target sm_80
.address_size 64

.visible .entry fill_hash(
    .param .u64 fill_hash_data,
    .param .u32 fill_hash_n,
    .param .u32 fill_hash_salt
)
{
    .reg .pred  %p<2>;
    .reg .b32   %r<8>;
    .reg .b64   %rd<5>;

    ld.param.u64        %rd1, [fill_hash_data];
    ld.param.u32        %r2, [fill_hash_n];
    ld.param.u32        %r6, [fill_hash_salt];
    mov.u32             %r3, %ctaid.x;
    mov.u32             %r4, %ntid.x;
    mov.u32             %r5, %tid.x;
    mad.lo.s32          %r1, %r3, %r4, %r5;
    setp.ge.u32         %p1, %r1, %r2;
    @%p1 bra            DONE;
    cvta.to.global.u64  %rd2, %rd1;
    mul.wide.u32        %rd3, %r1, 4;
    add.s64             %rd4, %rd2, %rd3;
    mad.lo.u32          %r7, %r1, 16777619, %r6;
    st.global.u32       [%rd4], %r7;
DONE:
    ret;
}

.visible .entry write_null()
{
    .reg .b32   %r<2>;
    .reg .b64   %rd<2>;

    mov.u32             %r1, 42;
    mov.u64             %rd1, 0;
    st.global.u32       [%rd1], %r1;
    ret;
}

.visible .entry trap_now()
{
    trap;
    ret;
}

.visible .entry spin_until_set(
    .param .u64 spin_flag,
    .param .u64 spin_result,
    .param .u64 spin_max_cycles
)
{
    .reg .pred  %p<3>;
    .reg .b32   %r<3>;
    .reg .b64   %rd<8>;

    ld.param.u64        %rd1, [spin_flag];
    ld.param.u64        %rd2, [spin_result];
    ld.param.u64        %rd3, [spin_max_cycles];
    cvta.to.global.u64  %rd1, %rd1;
    cvta.to.global.u64  %rd2, %rd2;
    mov.u64             %rd4, %clock64;
LOOP:
    ld.volatile.global.u32 %r1, [%rd1];
    setp.ne.u32         %p1, %r1, 0;
    @%p1 bra            SEEN;
    mov.u64             %rd5, %clock64;
    sub.s64             %rd6, %rd5, %rd4;
    setp.lt.s64         %p2, %rd6, %rd3;
    @%p2 bra            LOOP;
    mov.u32             %r2, 2;
    st.global.u32       [%rd2], %r2;
    ret;
SEEN:
    mov.u32             %r2, 1;
    st.global.u32       [%rd2], %r2;
    ret;
}
)";

constexpr uint32_t kFillMultiplier = 16777619;

KernelArg BufferArg(BufferId buffer) {
  KernelArg arg;
  arg.kind = KernelArg::Kind::kBuffer;
  arg.buffer = buffer;
  return arg;
}

template <typename T>
KernelArg ScalarArg(T value) {
  static_assert(sizeof(T) <= 8);
  KernelArg arg;
  arg.kind = KernelArg::Kind::kScalar;
  std::memcpy(arg.bytes, &value, sizeof(T));
  arg.size_bytes = sizeof(T);
  return arg;
}

// Launches fill_hash over the `bytes / 4` words of `buffer`.
absl::Status FillHash(Device& device, FunctionId fill, BufferId buffer, int64_t bytes,
                      uint32_t salt, StreamId stream) {
  const auto n = static_cast<uint32_t>(bytes / 4);
  LaunchConfig config;
  config.block[0] = 256;
  config.grid[0] = (n + 255) / 256;
  return device.Launch(fill, config, {BufferArg(buffer), ScalarArg(n), ScalarArg(salt)}, stream);
}

// What fill_hash writes, computed here.
std::vector<uint32_t> ExpectedHash(int64_t bytes, uint32_t salt) {
  std::vector<uint32_t> words(static_cast<size_t>(bytes / 4));
  for (size_t i = 0; i < words.size(); ++i) {
    words[i] = static_cast<uint32_t>(i) * kFillMultiplier + salt;
  }
  return words;
}

// Pseudo-random bytes from a seed, for patterns copied from the host.
std::vector<uint8_t> Pattern(int64_t bytes, uint32_t seed) {
  std::vector<uint8_t> v(static_cast<size_t>(bytes));
  uint32_t x = seed;
  for (uint8_t& byte : v) byte = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  return v;
}

absl::StatusOr<std::unique_ptr<CudaVmmSegmentSource>> SourceOrSkipReason(std::string* skip) {
  absl::StatusOr<std::unique_ptr<CudaVmmSegmentSource>> source = CudaVmmSegmentSource::Create(0);
  if (absl::IsFailedPrecondition(source.status())) {
    *skip = absl::StrCat("no GPU with exportable VMM memory here: ", source.status().ToString());
  }
  return source;
}

// ---- Cross-process fault containment ----
//
// The parent plays gpukitd: it owns the segments (CudaVmmSegmentSource, no CUDA context) and
// sends their descriptors with SCM_RIGHTS over a socketpair, as gpukitd does to its executor.
// Each child is this very binary, run again (posix_spawn of /proc/self/exe) with only the
// disabled test ExecutorMemoryChild.DISABLED_Role selected and the role in an environment
// variable; the child's end of the socket is its descriptor 3. A fresh exec, not a fork: a
// forked CUDA process cannot use the driver, and a fault must not be able to reach the parent.

constexpr char kRoleVariable[] = "GPUKIT_EXECUTOR_MEMORY_TEST_ROLE";
constexpr int kChildSocket = 3;
// The child's exit codes: 0 when what it saw is what the role expects.
constexpr int kChildFailed = 1;
constexpr int kChildNoDevice = 77;

// One message per segment, with the segment's descriptor attached.
struct SegmentMessage {
  uint64_t key = 0;
  int64_t bytes = 0;
};

constexpr int kSegments = 2;
constexpr uint32_t kCopySeed = 7;      // segment 0: bytes copied from the host
constexpr uint32_t kKernelSalt = 99;   // segment 1: words a kernel wrote
constexpr uint32_t kVerifySalt = 123;  // what the second child's kernel writes in the end

// What a child did, for the parent's log: one line per step.
class ChildReport {
 public:
  void Add(absl::string_view step, const absl::Status& status) {
    absl::StrAppend(&text_, step, ": ", status.ToString(), "\n");
  }
  void Note(absl::string_view line) { absl::StrAppend(&text_, line, "\n"); }
  // Sends it (cut to a message's 4 KiB) and exits with `code`; no destructor of gtest's runs.
  [[noreturn]] void SendAndExit(int code) {
    if (text_.size() > 4000) text_.resize(4000);
    if (!SendMessage(kChildSocket, text_.data(), text_.size()).ok()) {
      std::fprintf(stderr, "child: cannot send its report:\n%s", text_.c_str());
    }
    std::fflush(stderr);
    _exit(code);
  }

 private:
  std::string text_;
};

// The executor's stand-in: a CudaDevice with the parent's segments mapped and a buffer over
// each whole segment.
struct ChildDevice {
  std::unique_ptr<CudaDevice> device;
  StreamId stream;
  ModuleId module;
  FunctionId fill;
  BufferId buffers[kSegments];
  int64_t bytes[kSegments] = {};
};

absl::Status SetUpChildDevice(ChildDevice& child, ChildReport& report) {
  CudaDeviceOptions options;
  options.use_cublaslt = false;  // not needed here; saves loading it
  GPUKIT_ASSIGN_OR_RETURN(child.device, CudaDevice::Create(options));
  GPUKIT_ASSIGN_OR_RETURN(child.stream, child.device->CreateStream(StreamPriority::kNormal));
  GPUKIT_ASSIGN_OR_RETURN(child.module, child.device->LoadModule(kPtx));
  GPUKIT_ASSIGN_OR_RETURN(child.fill, child.device->GetFunction(child.module, "fill_hash"));
  for (int i = 0; i < kSegments; ++i) {
    GPUKIT_ASSIGN_OR_RETURN(
        ReceivedMessage message,
        ReceiveMessage(kChildSocket, sizeof(SegmentMessage), absl::Seconds(60)));
    SegmentMessage segment;
    if (message.bytes.size() != sizeof(segment) || !message.fd.valid()) {
      return absl::InternalError("the parent's segment message is malformed or has no fd");
    }
    std::memcpy(&segment, message.bytes.data(), sizeof(segment));
    GPUKIT_RETURN_IF_ERROR(
        child.device->MapSegment(segment.key, std::move(message.fd), segment.bytes));
    GPUKIT_ASSIGN_OR_RETURN(child.buffers[i],
                            child.device->BufferInSegment(segment.key, 0, segment.bytes));
    child.bytes[i] = segment.bytes;
    report.Note(absl::StrCat("mapped segment ", segment.key, " of ", segment.bytes, " bytes"));
  }
  return absl::OkStatus();
}

// Role "fault:<kernel>": writes both segments (a copy, a kernel), checks the writes completed,
// then launches the faulting kernel and expects the fault at WaitEvent (or earlier) and from
// CheckHealth.
int RunFaultRole(ChildDevice& child, absl::string_view kernel, ChildReport& report) {
  Device& device = *child.device;
  absl::StatusOr<FunctionId> faulting = device.GetFunction(child.module, kernel);
  report.Add(absl::StrCat("GetFunction(", kernel, ")"), faulting.status());
  if (!faulting.ok()) return kChildFailed;
  const std::vector<uint8_t> pattern = Pattern(child.bytes[0], kCopySeed);
  absl::Status written =
      device.CopyHostToDevice(child.buffers[0], 0, pattern.data(), child.bytes[0], child.stream);
  if (written.ok()) {
    written =
        FillHash(device, child.fill, child.buffers[1], child.bytes[1], kKernelSalt, child.stream);
  }
  if (written.ok()) written = SynchronizeStream(device, child.stream);
  report.Add("good copy and kernel", written);
  const absl::Status healthy = device.CheckHealth();
  report.Add("CheckHealth before the fault", healthy);
  if (!written.ok() || !healthy.ok()) return kChildFailed;

  // CheckHealth is asked before anything waits for the faulting work, as the executor's
  // supervisor asks it: the work's completion is polled with QueryEvent, which never blocks.
  // The fault surfaces at whichever call first sees it: usually the wait, but the kernel may
  // already have faulted when the event is recorded.
  absl::Status faulted = device.Launch(*faulting, LaunchConfig{}, {}, child.stream);
  absl::StatusOr<EventId> done =
      faulted.ok() ? device.RecordEvent(child.stream) : absl::StatusOr<EventId>(faulted);
  while (done.ok()) {
    absl::StatusOr<bool> finished = device.QueryEvent(*done);
    if (!finished.ok() || *finished) break;
  }
  const absl::Status health = device.CheckHealth();
  report.Add("CheckHealth after the fault, before any wait", health);
  faulted = done.ok() ? device.WaitEvent(*done) : done.status();
  report.Add("faulting kernel", faulted);
  const absl::Status health_after_wait = device.CheckHealth();
  report.Add("CheckHealth after the wait", health_after_wait);
  auto is_fault = [](const absl::Status& status) {
    return status.code() == absl::StatusCode::kInternal &&
           absl::StrContains(status.message(), "CUDA_ERROR_");
  };
  return is_fault(faulted) && is_fault(health) && is_fault(health_after_wait) ? 0 : kChildFailed;
}

// Role "verify": reads both segments back, expecting every byte the faulting child wrote, then
// computes on them (the GPU is usable again from a fresh process).
int RunVerifyRole(ChildDevice& child, ChildReport& report) {
  Device& device = *child.device;
  std::vector<uint8_t> copied(static_cast<size_t>(child.bytes[0]));
  std::vector<uint32_t> filled(static_cast<size_t>(child.bytes[1] / 4));
  absl::Status read =
      device.CopyDeviceToHost(copied.data(), child.buffers[0], 0, child.bytes[0], child.stream);
  if (read.ok()) {
    read =
        device.CopyDeviceToHost(filled.data(), child.buffers[1], 0, child.bytes[1], child.stream);
  }
  if (read.ok()) read = SynchronizeStream(device, child.stream);
  report.Add("read back", read);
  if (!read.ok()) return kChildFailed;
  const bool copy_intact = copied == Pattern(child.bytes[0], kCopySeed);
  const bool kernel_intact = filled == ExpectedHash(child.bytes[1], kKernelSalt);
  report.Note(absl::StrCat("copied bytes intact: ", copy_intact,
                           ", kernel-written words intact: ", kernel_intact));

  absl::Status computed =
      FillHash(device, child.fill, child.buffers[1], child.bytes[1], kVerifySalt, child.stream);
  if (computed.ok()) {
    computed =
        device.CopyDeviceToHost(filled.data(), child.buffers[1], 0, child.bytes[1], child.stream);
  }
  if (computed.ok()) computed = SynchronizeStream(device, child.stream);
  report.Add("kernel after remapping", computed);
  const bool recomputed = computed.ok() && filled == ExpectedHash(child.bytes[1], kVerifySalt);
  report.Note(absl::StrCat("kernel result right: ", recomputed));
  return copy_intact && kernel_intact && recomputed ? 0 : kChildFailed;
}

// The child's entry: selected only by the parent's command line (it is disabled otherwise).
TEST(ExecutorMemoryChild, DISABLED_Role) {
  const char* role = std::getenv(kRoleVariable);
  if (role == nullptr) GTEST_SKIP() << "runs only as the child of ExecutorMemoryTest's tests";
  ChildReport report;
  ChildDevice child;
  if (absl::Status set_up = SetUpChildDevice(child, report); !set_up.ok()) {
    report.Add("set-up", set_up);
    report.SendAndExit(absl::IsFailedPrecondition(set_up) ? kChildNoDevice : kChildFailed);
  }
  const absl::string_view role_name = role;
  const int code = absl::StartsWith(role_name, "fault:")
                       ? RunFaultRole(child, role_name.substr(6), report)
                       : RunVerifyRole(child, report);
  // The device goes first (a faulted one logs what its release calls say and must not crash).
  child.device.reset();
  report.SendAndExit(code);
}

// A running child and the parent's end of its socket.
struct Child {
  pid_t pid = -1;
  ScopedFd socket;
};

absl::StatusOr<Child> SpawnChild(absl::string_view role) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", std::strerror(errno)));
  }
  Child child;
  child.socket.Reset(pair[0]);
  ScopedFd theirs(pair[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // dup2 clears close-on-exec on the copy: descriptor 3 is the only one the child inherits
  // besides the standard streams.
  posix_spawn_file_actions_adddup2(&actions, theirs.get(), kChildSocket);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!absl::StartsWith(*e, absl::StrCat(kRoleVariable, "="))) env_strings.emplace_back(*e);
  }
  env_strings.push_back(absl::StrCat(kRoleVariable, "=", role));
  std::vector<char*> env;
  for (std::string& s : env_strings) env.push_back(s.data());
  env.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  std::string filter = "--gtest_filter=ExecutorMemoryChild.DISABLED_Role";
  std::string disabled = "--gtest_also_run_disabled_tests";
  std::vector<char*> argv = {exe.data(), filter.data(), disabled.data(), nullptr};
  const int spawned =
      posix_spawn(&child.pid, exe.c_str(), &actions, nullptr, argv.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    return absl::InternalError(absl::StrCat("posix_spawn: ", std::strerror(spawned)));
  }
  return child;
}

// Sends the segments, waits for the child's report and its exit; returns its exit code.
absl::StatusOr<int> RunChild(absl::string_view role, CudaVmmSegmentSource& source,
                             const std::vector<Segment>& segments, std::string* report) {
  GPUKIT_ASSIGN_OR_RETURN(Child child, SpawnChild(role));
  absl::Status sent = absl::OkStatus();
  for (const Segment& segment : segments) {
    absl::StatusOr<ScopedFd> fd = source.Share(segment);
    if (!fd.ok()) {
      sent = fd.status();
      break;
    }
    const SegmentMessage message{segment.handle, segment.bytes};
    sent = SendMessage(child.socket.get(), &message, sizeof(message), fd->get());
    if (!sent.ok()) break;
  }
  // A child that dies early closes its end: the receive then fails at once, no wait for the
  // timeout, which is only there so that a child that hangs fails the test.
  absl::StatusOr<ReceivedMessage> message =
      sent.ok() ? ReceiveMessage(child.socket.get(), 4096, absl::Seconds(300))
                : absl::StatusOr<ReceivedMessage>(sent);
  if (message.ok()) {
    *report = message->bytes;
  } else {
    *report = absl::StrCat("(no report: ", message.status().ToString(), ")");
    ::kill(child.pid, SIGKILL);
  }
  int wait_status = 0;
  if (::waitpid(child.pid, &wait_status, 0) != child.pid) {
    return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
  }
  if (!WIFEXITED(wait_status)) {
    return absl::InternalError(absl::StrCat("the ", role, " child died of signal ",
                                            WTERMSIG(wait_status), "; its report:\n", *report));
  }
  return WEXITSTATUS(wait_status);
}

// One fault cycle: the parent (gpukitd) allocates two segments, a child writes them and then
// faults with `kernel`, a second child maps them and finds every byte.
void RunFaultCycle(absl::string_view kernel) {
  std::string skip;
  absl::StatusOr<std::unique_ptr<CudaVmmSegmentSource>> source = SourceOrSkipReason(&skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_THAT(source, IsOk());
  std::vector<Segment> segments;
  for (int i = 0; i < kSegments; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(Segment segment, (*source)->Map((*source)->granularity_bytes()));
    segments.push_back(segment);
  }

  std::string report;
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      int fault_code, RunChild(absl::StrCat("fault:", kernel), **source, segments, &report));
  std::cout << "faulting child:\n" << report;
  if (fault_code == kChildNoDevice) GTEST_SKIP() << "no CUDA device the child can use:\n" << report;
  ASSERT_EQ(fault_code, 0) << "the faulting child did not see what it expected:\n" << report;

  // The owner is untouched: its segments are all there and can still be shared.
  EXPECT_EQ((*source)->segment_count(), kSegments);
  for (const Segment& segment : segments) {
    GPUKIT_EXPECT_OK((*source)->Share(segment).status());
  }

  GPUKIT_ASSERT_OK_AND_ASSIGN(int verify_code, RunChild("verify", **source, segments, &report));
  std::cout << "verifying child:\n" << report;
  EXPECT_EQ(verify_code, 0) << "a fresh process did not find the memory intact:\n" << report;

  for (const Segment& segment : segments) (*source)->Unmap(segment);
  EXPECT_EQ((*source)->mapped_bytes(), 0);
}

// First in the file, so that this process has created no CUDA context yet when it plays
// gpukitd (gtest runs a file's tests in order unless shuffled; with one, the tests still hold).
TEST(ExecutorMemoryTest, OutOfBoundsWriteInOneProcessLeavesMemoryOwnedByAnotherIntact) {
  RunFaultCycle("write_null");
}

TEST(ExecutorMemoryTest, TrapInOneProcessLeavesMemoryOwnedByAnotherIntact) {
  RunFaultCycle("trap_now");
}

// ---- In one process ----

class ExecutorMemoryInProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string skip;
    absl::StatusOr<std::unique_ptr<CudaVmmSegmentSource>> source = SourceOrSkipReason(&skip);
    if (!skip.empty()) GTEST_SKIP() << skip;
    ASSERT_THAT(source, IsOk());
    source_ = *std::move(source);
    CudaDeviceOptions options;
    // The built-in ops come from the build's precompiled kernels, else from NVRTC.
    absl::StatusOr<std::unique_ptr<JitCompiler>> jit = JitCompiler::Create({});
    if (jit.ok()) options.jit = std::shared_ptr<JitCompiler>(*std::move(jit));
    absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create(options);
    if (absl::IsFailedPrecondition(device.status())) {
      GTEST_SKIP() << "no usable CUDA device here: " << device.status();
    }
    ASSERT_THAT(device, IsOk());
    device_ = *std::move(device);
    GPUKIT_ASSERT_OK_AND_ASSIGN(stream_, device_->CreateStream(StreamPriority::kNormal));
  }

  void TearDown() override {
    if (device_ == nullptr) return;
    GPUKIT_EXPECT_OK(device_->DestroyStream(stream_));
    EXPECT_EQ(device_->GetMemoryInfo().used_bytes, 0) << "the test left device memory allocated";
    device_.reset();
    for (const Segment& segment : segments_) source_->Unmap(segment);
  }

  // A new segment of `granules` granules of the source, mapped into the device.
  absl::StatusOr<Segment> MapNewSegment(int64_t granules) {
    GPUKIT_ASSIGN_OR_RETURN(Segment segment, source_->Map(granules * source_->granularity_bytes()));
    segments_.push_back(segment);
    GPUKIT_ASSIGN_OR_RETURN(ScopedFd fd, source_->Share(segment));
    GPUKIT_RETURN_IF_ERROR(device_->MapSegment(segment.handle, std::move(fd), segment.bytes));
    return segment;
  }

  absl::Status Sync() { return SynchronizeStream(*device_, stream_); }

  std::unique_ptr<CudaVmmSegmentSource> source_;
  std::unique_ptr<CudaDevice> device_;
  StreamId stream_;
  std::vector<Segment> segments_;
};

TEST_F(ExecutorMemoryInProcessTest, SourceDescribesVmmMemoryAndSyntheticDisjointAddresses) {
  EXPECT_THAT(source_->Describe(), HasSubstr("POSIX file descriptors"));
  EXPECT_EQ(source_->capacity_bytes(), device_->properties().memory_total_bytes);
  const int64_t granule = source_->granularity_bytes();
  EXPECT_GT(granule, 0);
  EXPECT_EQ(granule & (granule - 1), 0) << "granularity " << granule << " is not a power of 2";
  GPUKIT_ASSERT_OK_AND_ASSIGN(Segment a, source_->Map(granule));
  segments_.push_back(a);
  GPUKIT_ASSERT_OK_AND_ASSIGN(Segment b, source_->Map(2 * granule));
  segments_.push_back(b);
  EXPECT_NE(a.handle, b.handle);
  EXPECT_TRUE(a.address + static_cast<uint64_t>(a.bytes) <= b.address ||
              b.address + static_cast<uint64_t>(b.bytes) <= a.address)
      << "segments overlap: " << a.address << "+" << a.bytes << ", " << b.address << "+" << b.bytes;
  EXPECT_EQ(source_->mapped_bytes(), 3 * granule);
  EXPECT_THAT(source_->Map(granule + 1), StatusIs(absl::StatusCode::kInvalidArgument));
  // The GPU's memory need not be a multiple of the granularity.
  const int64_t beyond_capacity = (source_->capacity_bytes() / granule + 1) * granule;
  EXPECT_THAT(source_->Map(beyond_capacity),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("out of device memory")));
  EXPECT_THAT(source_->Share(Segment{0, granule, 9999}).status(),
              StatusIs(absl::StatusCode::kNotFound));
  // Shared descriptors are close-on-exec, as gpukitd needs when it spawns executors.
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd fd, source_->Share(a));
  EXPECT_NE(::fcntl(fd.get(), F_GETFD) & FD_CLOEXEC, 0);
}

TEST_F(ExecutorMemoryInProcessTest, BuffersInMappedSegmentsCopyAndComputeOutsideTheAccounting) {
  ASSERT_TRUE(device_->SupportsOp("add"))
      << "the CUDA device runs no built-in ops here (no precompiled kernels, no NVRTC)";
  GPUKIT_ASSERT_OK_AND_ASSIGN(Segment inputs, MapNewSegment(1));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Segment outputs, MapNewSegment(1));
  const int64_t used_before = device_->GetMemoryInfo().used_bytes;

  constexpr int64_t kCount = 4096;
  constexpr int64_t kBytes = kCount * sizeof(float);
  const int64_t b_offset = inputs.bytes / 2;
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, device_->BufferInSegment(inputs.handle, 0, kBytes));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId b,
                              device_->BufferInSegment(inputs.handle, b_offset, kBytes));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId out,
                              device_->BufferInSegment(outputs.handle, 65536, kBytes));
  EXPECT_EQ(device_->GetMemoryInfo().used_bytes, used_before)
      << "buffers in segments must not count: their owner accounts for them";
  EXPECT_THAT(device_->BufferBytes(b), IsOkAndHolds(kBytes));

  std::vector<float> av(kCount), bv(kCount);
  for (int64_t i = 0; i < kCount; ++i) {
    av[i] = static_cast<float>(i) * 0.5f;
    bv[i] = 1000.0f - static_cast<float>(i);
  }
  GPUKIT_ASSERT_OK(device_->CopyHostToDevice(a, 0, av.data(), kBytes, stream_));
  GPUKIT_ASSERT_OK(device_->CopyHostToDevice(b, 0, bv.data(), kBytes, stream_));

  GPUKIT_ASSERT_OK_AND_ASSIGN(const OpDef* add, OpRegistry::Builtin().Find("add"));
  OperandDesc desc;
  desc.tensor = {DType::kFloat32, {kCount}};
  GPUKIT_ASSERT_OK_AND_ASSIGN(OpPlan plan, OpRegistry::Builtin().Plan(*add, {desc, desc}, {}));
  OpLaunch launch;
  launch.op = add;
  launch.plan = plan;
  OpOperand lhs;
  lhs.buffer = a;
  lhs.desc = desc.tensor;
  OpOperand rhs = lhs;
  rhs.buffer = b;
  launch.inputs = {lhs, rhs};
  launch.output = out;
  GPUKIT_ASSERT_OK(device_->RunOp(launch, stream_));
  std::vector<float> sum(kCount);
  GPUKIT_ASSERT_OK(device_->CopyDeviceToHost(sum.data(), out, 0, kBytes, stream_));
  GPUKIT_ASSERT_OK(Sync());
  for (int64_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(sum[i], av[i] + bv[i]) << "element " << i;
  }

  // A buffer is a view of the segment: a second one over the same range sees the same bytes.
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId alias,
                              device_->BufferInSegment(outputs.handle, 65536, kBytes));
  std::vector<float> through_alias(kCount);
  GPUKIT_ASSERT_OK(device_->CopyDeviceToHost(through_alias.data(), alias, 0, kBytes, stream_));
  GPUKIT_ASSERT_OK(Sync());
  EXPECT_EQ(through_alias, sum);

  // The owner exports segments; the device does not export their ranges.
  EXPECT_THAT(device_->ExportBuffer(a, ExportForm::kDescriptor).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("segment")));
  EXPECT_THAT(device_->ExportBuffer(a, ExportForm::kCudaIpcHandle).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("segment")));

  // Unmapped only once no buffer uses it.
  EXPECT_THAT(device_->UnmapSegment(outputs.handle),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("2 buffer(s)")));
  GPUKIT_ASSERT_OK(device_->Free(out));
  EXPECT_THAT(device_->UnmapSegment(outputs.handle),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("1 buffer(s)")));
  GPUKIT_ASSERT_OK(device_->Free(alias));
  GPUKIT_ASSERT_OK(device_->UnmapSegment(outputs.handle));
  EXPECT_THAT(device_->UnmapSegment(outputs.handle), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(device_->BufferInSegment(outputs.handle, 0, 4).status(),
              StatusIs(absl::StatusCode::kNotFound));

  // The memory is its owner's: mapped again, it still holds the sum.
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd fd, source_->Share(outputs));
  GPUKIT_ASSERT_OK(device_->MapSegment(outputs.handle, std::move(fd), outputs.bytes));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId again,
                              device_->BufferInSegment(outputs.handle, 65536, kBytes));
  std::vector<float> remapped(kCount);
  GPUKIT_ASSERT_OK(device_->CopyDeviceToHost(remapped.data(), again, 0, kBytes, stream_));
  GPUKIT_ASSERT_OK(Sync());
  EXPECT_EQ(remapped, sum);

  for (BufferId buffer : {a, b, again}) GPUKIT_ASSERT_OK(device_->Free(buffer));
  EXPECT_THAT(device_->Free(a), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(device_->GetMemoryInfo().used_bytes, used_before);
  GPUKIT_EXPECT_OK(device_->UnmapSegment(inputs.handle));
  GPUKIT_EXPECT_OK(device_->UnmapSegment(outputs.handle));
}

TEST_F(ExecutorMemoryInProcessTest, MapSegmentAndBufferInSegmentRejectWhatTheyCannotServe) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(Segment segment, MapNewSegment(1));
  // A key in use, whatever the descriptor.
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd again, source_->Share(segment));
  EXPECT_THAT(device_->MapSegment(segment.handle, std::move(again), segment.bytes),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("already mapped")));
  // A descriptor that is not exported device memory (a memfd).
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd memfd, CreateSharedMemory("not-device-memory", 1 << 21));
  EXPECT_THAT(device_->MapSegment(segment.handle + 1000, std::move(memfd), 1 << 21),
              StatusIs(absl::StatusCode::kInvalidArgument));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd fd, source_->Share(segment));
  EXPECT_THAT(device_->MapSegment(segment.handle + 1001, std::move(fd), 0),
              StatusIs(absl::StatusCode::kInvalidArgument));

  EXPECT_THAT(device_->BufferInSegment(segment.handle + 1000, 0, 4).status(),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(device_->BufferInSegment(segment.handle, segment.bytes - 4, 8).status(),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(device_->BufferInSegment(segment.handle, -4, 4).status(),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(device_->BufferInSegment(segment.handle, segment.bytes + 4, 0).status(),
              StatusIs(absl::StatusCode::kOutOfRange));
  // The last bytes of the segment, and a copy into them, are fine.
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId tail,
                              device_->BufferInSegment(segment.handle, segment.bytes - 4, 4));
  const uint32_t word = 0xC0FFEE;
  uint32_t back = 0;
  GPUKIT_ASSERT_OK(device_->CopyHostToDevice(tail, 0, &word, 4, stream_));
  GPUKIT_ASSERT_OK(device_->CopyDeviceToHost(&back, tail, 0, 4, stream_));
  GPUKIT_ASSERT_OK(Sync());
  EXPECT_EQ(back, word);
  EXPECT_THAT(device_->CopyHostToDevice(tail, 2, &word, 4, stream_),
              StatusIs(absl::StatusCode::kOutOfRange));
  GPUKIT_ASSERT_OK(device_->Free(tail));
  GPUKIT_EXPECT_OK(device_->UnmapSegment(segment.handle));
}

// CheckHealth is called while other streams are busy: it must answer without waiting for
// them. A kernel spins on one stream until a flag in device memory is set; CheckHealth is OK
// and the kernel is still running afterwards; then a copy on another stream sets the flag.
TEST_F(ExecutorMemoryInProcessTest, CheckHealthIsOkAndDoesNotWaitWhileAnotherStreamIsBusy) {
  GPUKIT_ASSERT_OK(device_->CheckHealth());
  GPUKIT_ASSERT_OK_AND_ASSIGN(ModuleId module, device_->LoadModule(kPtx));
  GPUKIT_ASSERT_OK_AND_ASSIGN(FunctionId spin, device_->GetFunction(module, "spin_until_set"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Segment segment, MapNewSegment(1));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId flag, device_->BufferInSegment(segment.handle, 0, 4));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId result, device_->BufferInSegment(segment.handle, 256, 4));
  const uint32_t zero = 0, one = 1;
  GPUKIT_ASSERT_OK(device_->CopyHostToDevice(flag, 0, &zero, 4, stream_));
  GPUKIT_ASSERT_OK(device_->CopyHostToDevice(result, 0, &zero, 4, stream_));
  GPUKIT_ASSERT_OK(Sync());

  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId busy, device_->CreateStream(StreamPriority::kNormal));
  // The bound only ends a test that went wrong (tens of seconds at GPU clocks); it decides
  // nothing below.
  const uint64_t max_cycles = uint64_t{1} << 36;
  GPUKIT_ASSERT_OK(device_->Launch(
      spin, LaunchConfig{}, {BufferArg(flag), BufferArg(result), ScalarArg(max_cycles)}, busy));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId spun, device_->RecordEvent(busy));

  GPUKIT_EXPECT_OK(device_->CheckHealth());
  // Still spinning: nothing has set the flag, so CheckHealth cannot have waited for it.
  EXPECT_THAT(device_->QueryEvent(spun), IsOkAndHolds(false));

  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId setter, device_->CreateStream(StreamPriority::kHigh));
  GPUKIT_ASSERT_OK(device_->CopyHostToDevice(flag, 0, &one, 4, setter));
  GPUKIT_ASSERT_OK(SynchronizeStream(*device_, setter));
  GPUKIT_ASSERT_OK(device_->WaitEvent(spun));
  uint32_t outcome = 0;
  GPUKIT_ASSERT_OK(device_->CopyDeviceToHost(&outcome, result, 0, 4, stream_));
  GPUKIT_ASSERT_OK(Sync());
  EXPECT_EQ(outcome, 1u) << "the kernel ran out of cycles instead of seeing the flag";
  GPUKIT_EXPECT_OK(device_->CheckHealth());

  GPUKIT_EXPECT_OK(device_->DestroyEvent(spun));
  GPUKIT_EXPECT_OK(device_->DestroyStream(busy));
  GPUKIT_EXPECT_OK(device_->DestroyStream(setter));
  GPUKIT_EXPECT_OK(device_->UnloadModule(module));
  GPUKIT_EXPECT_OK(device_->Free(flag));
  GPUKIT_EXPECT_OK(device_->Free(result));
  GPUKIT_EXPECT_OK(device_->UnmapSegment(segment.handle));
}

TEST_F(ExecutorMemoryInProcessTest, PropertiesCarryTheKernelArchAndLaunchLimits) {
  const DeviceProperties& properties = device_->properties();
  const CudaDeviceInfo& info = device_->cuda_info();
  EXPECT_EQ(properties.kernel_arch, info.arch);
  EXPECT_THAT(properties.kernel_arch, ::testing::StartsWith("sm_"));
  for (int axis = 0; axis < 3; ++axis) {
    EXPECT_EQ(properties.max_grid_dim[axis], info.max_grid_dim[axis]) << "axis " << axis;
    EXPECT_EQ(properties.max_block_dim[axis], info.max_block_dim[axis]) << "axis " << axis;
    EXPECT_GT(properties.max_grid_dim[axis], 0);
  }
  EXPECT_EQ(properties.max_threads_per_block, info.max_threads_per_block);
  EXPECT_GE(properties.max_threads_per_block, 1024);
  EXPECT_EQ(properties.max_shared_memory_per_block_optin_bytes,
            info.max_shared_memory_per_block_optin_bytes);
  EXPECT_GE(properties.max_shared_memory_per_block_optin_bytes, 48 * 1024);
}

}  // namespace
}  // namespace gpukit
