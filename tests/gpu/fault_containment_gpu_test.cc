// Fault containment on the GPU, end to end through gpukitd --backend=cuda, whose devices each
// run in a child executor process (issue 15). A faulty session compiles JIT kernels and
// launches one that writes a terabyte past its array (an illegal address), one that executes
// `trap;`, and one that spins for ever on a flag nobody sets (under a 2 s launch deadline),
// 20 times in all, a fresh tenant each time (two faults of one tenant within 10 min would hold
// it back). Meanwhile a bystander session runs 1024 x 1024 float32 matmuls on a thread and
// holds arrays it uploaded. Each time:
//   - the faulty launch gets ABORTED (a fault) or DEADLINE_EXCEEDED (a hang) naming the kernel;
//   - the executor restarts, and ListDevices counts it and names the fault, session and kernel;
//   - the bystander's matmuls go on (the one in flight at the fault may get UNAVAILABLE, "retry
//     is safe", and is retried; any other error fails the test), and its arrays keep their
//     exact bytes;
//   - the faulty session stays usable: its other array is intact and a well-behaved kernel of
//     the same compiled module computes the right values on the new executor;
//   - a new session opens and computes.
// The CPU backend's version of these tests, with test-only ops, is
// tests/integration/fault_containment_test.cc.
//
// From a bundle the test finds gpukitd (and gpukitd its gpukit-executor) beside itself in bin/
// (binary_path.h). Skipped, visibly, where there is no GPU that gpukitd accepts or no NVRTC to
// compile the kernels.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "client/cpp/channel.h"
#include "gmock/gmock.h"
#include "gpukit/v1/compute.grpc.pb.h"
#include "gtest/gtest.h"
#include "runtime/base/status_macros.h"
#include "runtime/jit/jit_compiler.h"
#include "tests/gpu/gpu_host.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// The faulty session's module: three ways to break the device, and one kernel that behaves,
// launched after the fault to show the session (and its compiled module) survived it.
constexpr char kKernels[] = R"(
extern "C" __global__ void write_far_out_of_bounds(float* data) {
  // A terabyte past the array: no allocation of gpukitd's is there, so an illegal address.
  volatile float* far = reinterpret_cast<volatile float*>(
      reinterpret_cast<char*>(data) + (1ull << 40));
  *far = 1.0f;
}
extern "C" __global__ void trap_now(float* data) {
  if (threadIdx.x == 0) data[0] = -1.0f;
  asm volatile("trap;");
}
extern "C" __global__ void spin_until_set(volatile int* flag) {
  while (*flag == 0) {
  }
}
extern "C" __global__ void double_it(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}
)";
constexpr char kOutOfBounds[] = "write_far_out_of_bounds";
constexpr char kTrap[] = "trap_now";
constexpr char kSpin[] = "spin_until_set";
constexpr char kDoubleIt[] = "double_it";

// Cycles per kind of fault: 20 in all.
constexpr int kOutOfBoundsCycles = 7;
constexpr int kTrapCycles = 7;
constexpr int kHangCycles = 6;

// The bystander's matmul: [kN, kN] @ [kN, kN] float32.
constexpr int64_t kN = 1024;
// Elements of the faulty session's kept array, which no faulting kernel is given.
constexpr int kKeptElements = 1000;

// A restart on CUDA is a new process creating a context and mapping gpukitd's memory; the
// first compile runs NVRTC; a hang takes the launch deadline first. Generous, for slow hosts:
// nothing waits this long unless something is broken.
constexpr absl::Duration kRecoveryTimeout = absl::Seconds(60);
constexpr auto kCallDeadline = std::chrono::seconds(120);

// Why gpukitd --backend=cuda cannot compile and launch kernels here, or nothing when it can.
const std::optional<std::string>& WhyNoGpu() {
  static const std::optional<std::string> reason = []() -> std::optional<std::string> {
    if (std::optional<std::string> why = WhyNoCudaBackend()) return why;
    absl::StatusOr<std::unique_ptr<JitCompiler>> jit = JitCompiler::Create({});
    if (!jit.ok()) {
      return absl::StrCat("no NVRTC, so gpukitd compiles no kernel: ", jit.status().ToString());
    }
    return std::nullopt;
  }();
  return reason;
}

// `count` pseudo-random floats in [-1, 1) from `seed`.
std::vector<float> RandomFloats(int64_t count, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& value : values) value = uniform(random);
  return values;
}

std::string FloatBytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

std::vector<float> BytesToFloats(const std::string& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

// Index of the first byte where a and b differ, -1 if none: a readable failure on megabytes.
int64_t FirstDifference(const std::string& a, const std::string& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  }
  return a.size() == b.size() ? -1 : static_cast<int64_t>(n);
}

// An array a session holds, with the bytes it must keep.
struct HeldArray {
  std::string handle;
  std::string bytes;
};

// The bystander's matmul loop, on its own thread: counts successes and the UNAVAILABLE
// answers it retried; stops at the first other error.
struct BystanderLoop {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> successes{0};
  std::atomic<int64_t> retried{0};
  absl::Mutex mu;
  absl::Status failure ABSL_GUARDED_BY(mu);
  std::thread thread;
};

class FaultContainmentGpuTest : public DaemonTest {
 protected:
  void SetUp() override {
    if (const std::optional<std::string>& why = WhyNoGpu()) GTEST_SKIP() << *why;
    ASSERT_NO_FATAL_FAILURE(DaemonTest::SetUp());
    compute_ = v1::ComputeService::NewStub(api().channel());
    GPUKIT_ASSERT_OK_AND_ASSIGN(v1::StatusResponse status, api().Status());
    ASSERT_EQ(status.backend(), "cuda") << "this test must not pass on the CPU backend";
    GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListDevicesResponse devices, api().ListDevices());
    ASSERT_GE(devices.devices_size(), 1);
    for (const v1::DeviceInfo& device : devices.devices()) {
      std::cout << "device " << device.index() << ": " << device.name() << ", executor "
                << device.executor().ShortDebugString() << std::endl;
      ASSERT_EQ(device.executor().mode(), "process")
          << "device " << device.index() << " runs no executor process";
    }
  }

  void TearDown() override {
    StopBystander();
    compute_.reset();  // lets go of the channel, so the daemon's shutdown waits for nobody
    DaemonTest::TearDown();
  }

  void ConfigureDaemon(DaemonOptions& options) const override {
    options.backend = "cuda";
    // cuInit, a primary context per GPU, cuBLASLt and the executors take a while.
    options.ready_timeout = absl::Seconds(60);
  }

  // ---- calls, with deadlines long enough for a first compile or a restart ----

  static void SetDeadline(grpc::ClientContext& context) {
    context.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  }

  absl::StatusOr<v1::ArrayInfo> RunOp(const std::string& session, const std::string& op,
                                      const std::vector<std::string>& handles) {
    v1::RunOpRequest request;
    request.set_session_id(session);
    request.set_op(op);
    for (const std::string& handle : handles) *request.add_inputs() = HandleOperand(handle);
    grpc::ClientContext context;
    SetDeadline(context);
    v1::RunOpResponse response;
    GPUKIT_RETURN_IF_ERROR(FromGrpc(compute_->RunOp(&context, request, &response), context));
    return response.output();
  }

  // Compiles kKernels for `session`; returns the kernel's handle.
  absl::StatusOr<std::string> Compile(const std::string& session) {
    v1::CompileKernelRequest request;
    request.set_session_id(session);
    request.set_source(kKernels);
    for (const char* entry : {kOutOfBounds, kTrap, kSpin, kDoubleIt}) request.add_entries(entry);
    grpc::ClientContext context;
    SetDeadline(context);
    v1::CompileKernelResponse response;
    GPUKIT_RETURN_IF_ERROR(
        FromGrpc(compute_->CompileKernel(&context, request, &response), context));
    return response.kernel();
  }

  // Launches `entry` of `kernel` on one block of `threads` with `args` (array handles).
  absl::Status Launch(const std::string& session, const std::string& kernel,
                      const std::string& entry, int threads,
                      const std::vector<v1::KernelArgument>& args) {
    v1::LaunchKernelRequest request;
    request.set_session_id(session);
    request.set_kernel(kernel);
    request.set_entry(entry);
    request.mutable_grid()->set_x(1);
    request.mutable_block()->set_x(static_cast<uint32_t>(threads));
    for (const v1::KernelArgument& arg : args) *request.add_args() = arg;
    grpc::ClientContext context;
    SetDeadline(context);
    v1::LaunchKernelResponse response;
    return FromGrpc(compute_->LaunchKernel(&context, request, &response), context);
  }

  static v1::KernelArgument ArrayArg(const std::string& handle) {
    v1::KernelArgument arg;
    arg.set_array(handle);
    return arg;
  }

  absl::StatusOr<HeldArray> Hold(const std::string& session, const std::vector<int64_t>& shape,
                                 v1::DType dtype, std::string bytes) {
    GPUKIT_ASSIGN_OR_RETURN(v1::ArrayInfo info,
                            api().CreateWithBytes(session, shape, dtype, bytes));
    return HeldArray{info.handle(), std::move(bytes)};
  }

  absl::StatusOr<std::string> DownloadBytes(const std::string& session, const std::string& handle) {
    return api().DownloadAll(session, handle);
  }

  // ---- the executors, over all devices (a session may be placed on any) ----

  absl::StatusOr<int64_t> TotalRestarts() {
    GPUKIT_ASSIGN_OR_RETURN(v1::ListDevicesResponse devices, api().ListDevices());
    int64_t restarts = 0;
    for (const v1::DeviceInfo& device : devices.devices()) restarts += device.executor().restarts();
    return restarts;
  }

  // Waits until the executors have restarted `restarts` times in all and each has a process
  // serving; returns the executor whose last fault names `session`.
  absl::StatusOr<v1::ExecutorInfo> WaitForRestart(int64_t restarts, const std::string& session) {
    v1::ListDevicesResponse last;
    const bool reached = PollUntil(
        [&] {
          absl::StatusOr<v1::ListDevicesResponse> devices = api().ListDevices();
          if (!devices.ok()) return false;
          last = *devices;
          int64_t total = 0;
          for (const v1::DeviceInfo& device : last.devices()) {
            if (device.executor().pid() <= 0) return false;
            total += device.executor().restarts();
          }
          return total >= restarts;
        },
        kRecoveryTimeout);
    if (!reached) {
      return absl::DeadlineExceededError(
          absl::StrCat("the executors did not reach ", restarts,
                       " restarts with processes serving: ", last.ShortDebugString()));
    }
    for (const v1::DeviceInfo& device : last.devices()) {
      if (device.executor().last_fault().session_id() == session) return device.executor();
    }
    return absl::NotFoundError(absl::StrCat("no executor's last fault names session ", session,
                                            ": ", last.ShortDebugString()));
  }

  // ---- the bystander ----

  // Opens the bystander's session, uploads its arrays, runs a first matmul (the reference for
  // the last one) and starts its matmul loop.
  void StartBystander() {
    GPUKIT_ASSERT_OK_AND_ASSIGN(bystander_, api().OpenSession("bystander"));
    GPUKIT_ASSERT_OK_AND_ASSIGN(
        a_, Hold(bystander_, {kN, kN}, v1::DTYPE_FLOAT32, FloatBytes(RandomFloats(kN * kN, 1))));
    GPUKIT_ASSERT_OK_AND_ASSIGN(
        b_, Hold(bystander_, {kN, kN}, v1::DTYPE_FLOAT32, FloatBytes(RandomFloats(kN * kN, 2))));
    std::string raw(size_t{6} << 20, '\0');
    std::mt19937_64 random(3);
    for (char& byte : raw) byte = static_cast<char>(random());
    GPUKIT_ASSERT_OK_AND_ASSIGN(HeldArray bytes,
                                Hold(bystander_, {int64_t{6} << 20}, v1::DTYPE_UINT8, raw));
    GPUKIT_ASSERT_OK_AND_ASSIGN(HeldArray small,
                                Hold(bystander_, {5}, v1::DTYPE_UINT8, std::string("fault")));
    bystander_arrays_ = {a_, b_, bytes, small};
    GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ArrayInfo product,
                                RunOp(bystander_, "matmul", {a_.handle, b_.handle}));
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::string product_bytes,
                                DownloadBytes(bystander_, product.handle()));
    reference_product_ = BytesToFloats(product_bytes);
    ASSERT_EQ(reference_product_.size(), static_cast<size_t>(kN * kN));
    GPUKIT_ASSERT_OK(api().Free(bystander_, product.handle()).status());

    loop_ = std::make_unique<BystanderLoop>();
    loop_->thread = std::thread([this, loop = loop_.get()] {
      absl::Status status;
      while (!loop->stop.load()) {
        absl::StatusOr<v1::ArrayInfo> out = RunOp(bystander_, "matmul", {a_.handle, b_.handle});
        if (!out.ok() && absl::IsUnavailable(out.status())) {
          loop->retried.fetch_add(1);  // in flight at a fault: retry is safe
          continue;
        }
        if (!out.ok()) {
          status = out.status();
          break;
        }
        loop->successes.fetch_add(1);
        if (absl::Status freed = api().Free(bystander_, out->handle()).status(); !freed.ok()) {
          status = freed;
          break;
        }
      }
      absl::MutexLock lock(&loop->mu);
      loop->failure = status;
    });
  }

  void StopBystander() {
    if (loop_ == nullptr || !loop_->thread.joinable()) return;
    loop_->stop.store(true);
    loop_->thread.join();
  }

  absl::Status BystanderFailure() {
    absl::MutexLock lock(&loop_->mu);
    return loop_->failure;
  }

  // The bystander's matmuls go on: one more completes after this call.
  void ExpectBystanderComputes() {
    const int64_t before = loop_->successes.load();
    const bool more =
        PollUntil([&] { return loop_->successes.load() > before || !BystanderFailure().ok(); },
                  kRecoveryTimeout);
    GPUKIT_ASSERT_OK(BystanderFailure()) << "the bystander's matmul failed";
    ASSERT_TRUE(more) << "no bystander matmul completed within " << kRecoveryTimeout;
  }

  // The daemon log's lines about executors and host segments, for a failure's message.
  std::string ExecutorLogLines() {
    std::string lines;
    for (absl::string_view line : absl::StrSplit(daemon().Log(), '\n')) {
      if (absl::StrContains(line, "executor") || absl::StrContains(line, "segment") ||
          absl::StrContains(line, "registered")) {
        absl::StrAppend(&lines, line, "\n");
      }
    }
    return lines.size() > 8000 ? lines.substr(lines.size() - 8000) : lines;
  }

  // Every bystander array keeps its exact bytes.
  void ExpectBystanderArraysIntact() {
    SCOPED_TRACE("the bystander's arrays");
    for (const HeldArray& array : bystander_arrays_) {
      GPUKIT_ASSERT_OK_AND_ASSIGN(std::string bytes, DownloadBytes(bystander_, array.handle));
      const int64_t first = FirstDifference(bytes, array.bytes);
      if (first == -1) continue;
      // Tell a read that went wrong from memory that did: read again, and say what the
      // wrong bytes look like (zeros, another array's, ...).
      GPUKIT_ASSERT_OK_AND_ASSIGN(std::string again, DownloadBytes(bystander_, array.handle));
      int64_t differing = 0;
      bool zeros = true;
      for (size_t i = 0; i < bytes.size() && i < array.bytes.size(); ++i) {
        if (bytes[i] != array.bytes[i]) ++differing;
        if (bytes[i] != 0) zeros = false;
      }
      std::string like;
      for (const HeldArray& other : bystander_arrays_) {
        if (&other != &array && other.bytes.size() >= 64 && bytes.size() >= 64 &&
            other.bytes.compare(0, 64, bytes, 0, 64) == 0) {
          like = " (its first 64 bytes are another array's)";
        }
      }
      // Where else the wrong bytes occur: another array's, or elsewhere in this one.
      const std::string wrong = bytes.substr(static_cast<size_t>(first), 48);
      std::string found = "nowhere in the bystander's arrays";
      for (const HeldArray& other : bystander_arrays_) {
        const size_t at = other.bytes.find(wrong);
        if (at != std::string::npos) {
          found = absl::StrCat("at ", at, " of array ", other.handle);
          break;
        }
      }
      std::string hex;
      for (char c : wrong) absl::StrAppend(&hex, absl::Hex(static_cast<uint8_t>(c), absl::kZeroPad2));
      ADD_FAILURE() << "wrong bytes " << hex << " found " << found;
      ADD_FAILURE() << "array " << array.handle << " of " << array.bytes.size()
                    << " bytes read back changed: first difference at " << first << ", "
                    << differing << " bytes differ" << (zeros ? ", all zeros" : "") << like
                    << "; read again: first difference " << FirstDifference(again, array.bytes)
                    << "\n---- gpukitd's executor lines ----\n" << ExecutorLogLines();
    }
  }

  // A matmul after all the faults computes what the first one did (to rounding: the new
  // executor's cuBLASLt may pick another algorithm).
  void ExpectBystanderProductUnchanged() {
    GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ArrayInfo product,
                                RunOp(bystander_, "matmul", {a_.handle, b_.handle}));
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::string bytes, DownloadBytes(bystander_, product.handle()));
    const std::vector<float> values = BytesToFloats(bytes);
    ASSERT_EQ(values.size(), reference_product_.size());
    // Sums of 1024 products of [-1, 1) values: magnitudes up to ~30; TF32 rounding differs
    // by far less than this between algorithms.
    int64_t wrong = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      if (!(std::fabs(values[i] - reference_product_[i]) <= 0.1f)) ++wrong;
    }
    EXPECT_EQ(wrong, 0) << "elements of the product differ from the first matmul's";
  }

  // A new session opens and computes (a small matmul: cuBLASLt, no kernel to compile).
  void ExpectNewSessionsOpen(const std::string& tenant) {
    SCOPED_TRACE("a new session");
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::string session, api().OpenSession(tenant));
    GPUKIT_ASSERT_OK_AND_ASSIGN(HeldArray m,
                                Hold(session, {2, 2}, v1::DTYPE_FLOAT32, FloatBytes({1, 2, 3, 4})));
    GPUKIT_ASSERT_OK_AND_ASSIGN(HeldArray id,
                                Hold(session, {2, 2}, v1::DTYPE_FLOAT32, FloatBytes({1, 0, 0, 1})));
    GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ArrayInfo out, RunOp(session, "matmul", {m.handle, id.handle}));
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::string bytes, DownloadBytes(session, out.handle()));
    EXPECT_EQ(bytes, FloatBytes({1, 2, 3, 4}));
    GPUKIT_EXPECT_OK(api().Close(session).status());
  }

  // ---- the fault cycles ----

  // `cycles` times: a session of a fresh tenant launches `entry` (on `threads` threads of one
  // block), which must fail with `code` naming the kernel and cost one restart of kind
  // `fault_kind`; then everything the file's comment lists is checked.
  void RunFaultCycles(const std::string& entry, int threads, absl::StatusCode code,
                      const std::string& fault_kind, int cycles) {
    ASSERT_NO_FATAL_FAILURE(StartBystander());
    for (int i = 0; i < cycles; ++i) {
      SCOPED_TRACE(absl::StrCat(entry, ", cycle ", i));
      const std::string tenant = absl::StrCat("faulty-", entry, "-", i);
      GPUKIT_ASSERT_OK_AND_ASSIGN(std::string faulty, api().OpenSession(tenant));
      GPUKIT_ASSERT_OK_AND_ASSIGN(std::string kernel, Compile(faulty));
      // What the faulting kernel is given (undefined after the fault) and what it is not.
      GPUKIT_ASSERT_OK_AND_ASSIGN(
          HeldArray target, Hold(faulty, {4}, v1::DTYPE_INT32, std::string(4 * sizeof(int), '\0')));
      const std::vector<float> kept_values = RandomFloats(kKeptElements, 100 + i);
      GPUKIT_ASSERT_OK_AND_ASSIGN(HeldArray kept, Hold(faulty, {kKeptElements}, v1::DTYPE_FLOAT32,
                                                       FloatBytes(kept_values)));
      GPUKIT_ASSERT_OK_AND_ASSIGN(int64_t restarts_before, TotalRestarts());
      // The bystander is computing when the fault comes.
      ASSERT_NO_FATAL_FAILURE(ExpectBystanderComputes());

      const absl::Time launched = absl::Now();
      const absl::Status launch = Launch(faulty, kernel, entry, threads, {ArrayArg(target.handle)});
      const absl::Duration took = absl::Now() - launched;
      EXPECT_THAT(launch, StatusIs(code, HasSubstr(entry)));
      if (code == absl::StatusCode::kAborted) {
        EXPECT_THAT(std::string(launch.message()), HasSubstr("undefined"));
      }

      GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ExecutorInfo after,
                                  WaitForRestart(restarts_before + 1, faulty));
      GPUKIT_ASSERT_OK_AND_ASSIGN(int64_t restarts_after, TotalRestarts());
      EXPECT_EQ(restarts_after, restarts_before + 1);
      EXPECT_EQ(after.last_fault().kind(), fault_kind);
      EXPECT_EQ(after.last_fault().tenant(), tenant);
      EXPECT_THAT(after.last_fault().work(), HasSubstr(entry));
      EXPECT_FALSE(after.last_fault().error().empty());
      std::cout << entry << " cycle " << i << ": " << launch.code() << " after " << took
                << "; restarts " << restarts_after << "; last fault \""
                << after.last_fault().error() << "\"; bystander matmuls " << loop_->successes.load()
                << " (" << loop_->retried.load() << " retried)" << std::endl;

      ASSERT_NO_FATAL_FAILURE(ExpectBystanderComputes());
      ASSERT_NO_FATAL_FAILURE(ExpectBystanderArraysIntact());
      {
        SCOPED_TRACE(absl::StrCat("session ", faulty, " after its fault"));
        GPUKIT_ASSERT_OK_AND_ASSIGN(std::string bytes, DownloadBytes(faulty, kept.handle));
        EXPECT_EQ(FirstDifference(bytes, kept.bytes), -1) << "its kept array changed";
        GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ArrayInfo doubled,
                                    api().CreateArray(faulty, {kKeptElements}, v1::DTYPE_FLOAT32));
        v1::KernelArgument n;
        n.set_i32(kKeptElements);
        GPUKIT_ASSERT_OK(Launch(faulty, kernel, kDoubleIt, 1024,
                                {ArrayArg(kept.handle), ArrayArg(doubled.handle()), n}));
        GPUKIT_ASSERT_OK_AND_ASSIGN(std::string out, DownloadBytes(faulty, doubled.handle()));
        std::vector<float> expected = kept_values;
        for (float& value : expected) value *= 2.0f;
        EXPECT_EQ(FirstDifference(out, FloatBytes(expected)), -1)
            << "double_it computed the wrong values after the fault";
      }
      ASSERT_NO_FATAL_FAILURE(ExpectNewSessionsOpen(absl::StrCat("newcomer-", entry, "-", i)));
      GPUKIT_ASSERT_OK(api().Close(faulty).status());
    }
    StopBystander();
    GPUKIT_EXPECT_OK(BystanderFailure());
    std::cout << "bystander: " << loop_->successes.load() << " matmuls, " << loop_->retried.load()
              << " retried after UNAVAILABLE" << std::endl;
    ASSERT_NO_FATAL_FAILURE(ExpectBystanderArraysIntact());
    ASSERT_NO_FATAL_FAILURE(ExpectBystanderProductUnchanged());
  }

  std::unique_ptr<v1::ComputeService::Stub> compute_;
  std::string bystander_;
  HeldArray a_;
  HeldArray b_;
  std::vector<HeldArray> bystander_arrays_;
  std::vector<float> reference_product_;
  std::unique_ptr<BystanderLoop> loop_;
};

TEST_F(FaultContainmentGpuTest, OutOfBoundsWritesAreContained) {
  RunFaultCycles(kOutOfBounds, 1, absl::StatusCode::kAborted, "fault", kOutOfBoundsCycles);
}

TEST_F(FaultContainmentGpuTest, TrapsAreContained) {
  RunFaultCycles(kTrap, 32, absl::StatusCode::kAborted, "fault", kTrapCycles);
}

// A kernel that never finishes, with a short launch deadline: gpukitd kills the executor.
class HangContainmentGpuTest : public FaultContainmentGpuTest {
 protected:
  std::string DaemonConfigJson() const override {
    return R"({"executor": {"launchDeadline": "2s"}})";
  }
};

TEST_F(HangContainmentGpuTest, KernelsPastTheLaunchDeadlineAreContained) {
  RunFaultCycles(kSpin, 1, absl::StatusCode::kDeadlineExceeded, "hang", kHangCycles);
}

}  // namespace
}  // namespace gpukit::testing
