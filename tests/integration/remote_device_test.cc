// RemoteDevice (runtime/executor/remote_device.h) driven directly through the Device
// interface, no gRPC: a CPU device run by a real gpukit-executor child, made to fault
// (_test_fault), hang (_test_hang) and die (SIGKILL). Checks what the restart promises:
// every buffer keeps its bytes, host memory shared with the executor stays zero-copy,
// streams survive, faults are blamed on the work that faulted and no one else, copies the
// dead executor never made are never written later, and no executor outlives the device.
// The fault-injection ops exist only with GPUKIT_FAULT_INJECTION; without it the tests skip.
#include "runtime/executor/remote_device.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/unix_fd.h"
#include "runtime/device.h"
#include "runtime/executor/shareable_segment_source.h"
#include "runtime/executor/spin_wait.h"
#include "runtime/op_registry.h"
#include "tests/integration/binary_path.h"
#include "tests/testing/status_matchers.h"
#include "tests/unit/runtime/device_conformance.h"
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>

namespace gpukit {
namespace {

#if GPUKIT_FAULT_INJECTION

using ::gpukit::testing::StatusIs;
using ::testing::AnyOf;
using ::testing::Eq;
using ::testing::HasSubstr;

// The executor binary: in the build tree (build/daemon/, beside gpukitd), or beside this test
// in a bundle.
std::string ExecutorPath() { return ::gpukit::testing::FindBinary(GPUKIT_EXECUTOR_PATH); }

// The kind an executor failure left on a status ("fault", "hang", "exited", "restart"), or
// "none".
std::string KindOf(const absl::Status& status) {
  const auto kind = status.GetPayload(kExecutorFaultPayload);
  return kind.has_value() ? std::string(*kind) : "none";
}

// A wait the restart answered: UNAVAILABLE (its work may not have run; a retry is safe),
// marked "restart", or "exited" for the oldest wait when the executor died.
void ExpectTheRestartsAnswer(const absl::Status& waited) {
  EXPECT_THAT(waited, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(KindOf(waited), AnyOf(Eq("restart"), Eq("exited"))) << waited;
}

// `bytes` bytes that differ with `seed` and along the range (no run of equal bytes a lost or
// shifted copy could hide in).
std::vector<char> Pattern(int64_t bytes, int seed) {
  std::vector<char> data(static_cast<size_t>(bytes));
  for (size_t i = 0; i < data.size(); ++i) {
    data[i] = static_cast<char>((i * 131 + static_cast<size_t>(seed) * 7919 + i / 251) & 0xff);
  }
  return data;
}

// True when this process has no child, running or unreaped.
bool HasNoChildren() {
  int status = 0;
  const pid_t pid = ::waitpid(-1, &status, WNOHANG);
  return pid == -1 && errno == ECHILD;
}

class RemoteDeviceTest : public ::testing::Test {
 protected:
  // A CPU device as gpukitd makes one (executor_devices.cc): 2 MiB segments, so small buffers
  // share a slab and large ones get their own.
  static RemoteDeviceOptions CpuOptions() {
    RemoteDeviceOptions options;
    options.executor_path = ExecutorPath();
    options.executor_args = {"--backend=cpu", "--index=0", "--log-level=warn"};
    options.memory = std::make_unique<MemfdSegmentSource>(int64_t{256} << 20, int64_t{2} << 20);
    options.memory_pool.max_cached_bytes = int64_t{16} << 20;
    options.host_cache_bytes = int64_t{16} << 20;
    return options;
  }

  void SetUp() override { ASSERT_TRUE(HasNoChildren()) << "a child from an earlier test"; }

  void TearDown() override {
    device_.reset();
    EXPECT_TRUE(HasNoChildren()) << "an executor outlived its RemoteDevice";
  }

  void Start(RemoteDeviceOptions options = CpuOptions()) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(device_, RemoteDevice::Create(std::move(options)));
    ASSERT_GT(device_->executor_state().pid, 0);
  }

  // A float32 [4] buffer holding 1, 2, 3, 4 (an op's input) and one for its output.
  void MakeOpBuffers(StreamId stream) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(op_input_, device_->Allocate(16));
    GPUKIT_ASSERT_OK_AND_ASSIGN(op_output_, device_->Allocate(16));
    const std::vector<float> values = {1, 2, 3, 4};
    GPUKIT_ASSERT_OK(device_->CopyHostToDevice(op_input_, 0, values.data(), 16, stream));
    GPUKIT_ASSERT_OK(Sync(stream));
  }

  // Enqueues the built-in `op` over the op input into the op output (or `output`).
  absl::Status RunOp(absl::string_view op, StreamId stream, BufferId output = BufferId{}) {
    GPUKIT_ASSIGN_OR_RETURN(OpLaunch launch, Launch(op, output));
    return device_->RunOp(launch, stream);
  }
  // `op` of the op buffers' input, into `output` (default: the op output buffer).
  absl::StatusOr<OpLaunch> Launch(absl::string_view op, BufferId output = BufferId{}) {
    const OpRegistry& registry = OpRegistry::Builtin();
    OpLaunch launch;
    GPUKIT_ASSIGN_OR_RETURN(launch.op, registry.Find(op));
    OperandDesc desc;
    desc.tensor = {DType::kFloat32, {4}};
    GPUKIT_ASSIGN_OR_RETURN(launch.plan, registry.Plan(*launch.op, {desc}, {}));
    OpOperand operand;
    operand.buffer = op_input_;
    operand.desc = desc.tensor;
    launch.inputs = {operand};
    launch.output = output.value != 0 ? output : op_output_;
    return launch;
  }

  // Records an event on `stream`, waits for it and destroys it: the wait's status.
  absl::Status Sync(StreamId stream) {
    GPUKIT_ASSIGN_OR_RETURN(EventId event, device_->RecordEvent(stream));
    absl::Status status = device_->WaitEvent(event);
    GPUKIT_RETURN_IF_ERROR(device_->DestroyEvent(event));
    return status;
  }

  // Records an event on `stream` and asks (QueryEvent) until the device says its work is
  // done, without waiting for it: a copy into host memory the executor maps (zero-copy) has
  // landed by then; a staged one lands only when a wait copies it out. Returns the event.
  absl::StatusOr<EventId> QueryUntilDone(StreamId stream) {
    GPUKIT_ASSIGN_OR_RETURN(EventId event, device_->RecordEvent(stream));
    for (;;) {
      GPUKIT_ASSIGN_OR_RETURN(bool done, device_->QueryEvent(event));
      if (done) return event;
      std::this_thread::yield();
    }
  }

  // Returns once `stream` serves again after an executor failure: a wait that the restart
  // cost fails UNAVAILABLE (its work may not have run; a retry is safe), so this
  // retries until one succeeds. A wait that succeeds ran on the new executor, so the restart
  // is over (its state says the new pid). Fails the test on any other error.
  void AwaitServing(StreamId stream) {
    for (int attempt = 0; attempt < 5; ++attempt) {
      absl::Status status = Sync(stream);
      if (status.ok()) return;
      ASSERT_THAT(status, StatusIs(absl::StatusCode::kUnavailable)) << "attempt " << attempt;
      // "exited": the oldest wait when the executor died (named in the last fault only).
      ASSERT_THAT(KindOf(status), AnyOf(Eq("restart"), Eq("exited"))) << status;
    }
    FAIL() << "stream " << stream.value << " did not serve after 5 waits";
  }

  // The bytes of `buffer` copied out (staged: the vector is not the device's host memory).
  // Waits for an event of `stream` (a wait sends what is held: nothing is held after it),
  // then makes the next datagram to the executor fail as an ENOBUFS from sendmsg would.
  // Returns the event, to be destroyed.
  EventId SettleAndFailTheNextSend(StreamId stream) {
    absl::StatusOr<EventId> settled = device_->RecordEvent(stream);
    EXPECT_TRUE(settled.ok()) << settled.status();
    if (settled.ok()) {
      GPUKIT_EXPECT_OK(device_->WaitEvent(*settled));
    }
    device_->FailSendsForTesting(1, absl::InternalError("sendmsg: No buffer space available"));
    return settled.value_or(EventId{});
  }
  // The op output's 4 floats (MakeOpBuffers), read back on `stream`.
  std::vector<float> OpOutput(StreamId stream) {
    const std::vector<char> bytes = ReadBack(op_output_, stream);
    std::vector<float> values(4);
    if (bytes.size() >= 16) std::memcpy(values.data(), bytes.data(), 16);
    return values;
  }
  // The stream serves: `neg` of the op input (1, 2, 3, 4) runs, and its output reads back.
  void ExpectNegRunsOn(StreamId stream) {
    {
      DeviceBatch batch(*device_);
      GPUKIT_ASSERT_OK(RunOp("neg", stream));
      GPUKIT_ASSERT_OK(Sync(stream));
    }
    EXPECT_EQ(OpOutput(stream), (std::vector<float>{-1, -2, -3, -4}));
  }
  std::vector<char> ReadBack(BufferId buffer, StreamId stream) {
    absl::StatusOr<int64_t> bytes = device_->BufferBytes(buffer);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    std::vector<char> out(static_cast<size_t>(bytes.value_or(0)), '\0');
    EXPECT_TRUE(device_->CopyDeviceToHost(out.data(), buffer, 0, bytes.value_or(0), stream).ok());
    absl::Status synced = Sync(stream);
    EXPECT_TRUE(synced.ok()) << synced;
    return out;
  }

  std::unique_ptr<RemoteDevice> device_;
  BufferId op_input_, op_output_;
};

// A device-to-host copy into memory the device does not share (a heap vector) goes through
// a staging block, copied out when a later wait on its stream succeeds. If the executor dies
// before making the copy, the staging block holds nothing of the buffer's and the vector may
// belong to someone else by then: the copy-out must never happen, whether the copy's own
// wait came before the restart or after it, and however many waits succeed on the stream
// later. Regression test: such a copy was written out by the first successful wait on the
// stream after the restart.
class StaleStagedCopyTest : public RemoteDeviceTest, public ::testing::WithParamInterface<bool> {};

TEST_P(StaleStagedCopyTest, IsNeverWrittenAfterARestart) {
  const bool wait_after_restart = GetParam();
  Start();
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device_->CreateStream(StreamPriority::kNormal));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId other, device_->CreateStream(StreamPriority::kNormal));
  MakeOpBuffers(stream);
  constexpr int64_t kBytes = 64 << 10;
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId source, device_->Allocate(kBytes));
  const std::vector<char> contents = Pattern(kBytes, 1);
  GPUKIT_ASSERT_OK(device_->CopyHostToDevice(source, 0, contents.data(), kBytes, stream));
  GPUKIT_ASSERT_OK(Sync(stream));

  // The stream blocks in _test_hang; the copy behind it is never made.
  GPUKIT_ASSERT_OK(RunOp("_test_hang", stream));
  std::vector<char> host(kBytes, '\0');
  GPUKIT_ASSERT_OK(device_->CopyDeviceToHost(host.data(), source, 0, kBytes, stream));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId copied, device_->RecordEvent(stream));
  const ExecutorState before = device_->executor_state();
  ASSERT_GT(before.pid, 0);
  ASSERT_EQ(::kill(static_cast<pid_t>(before.pid), SIGKILL), 0);
  if (wait_after_restart) {
    // Another stream's waits fail until the restart is over and then succeed: the copy's own
    // wait below finds its event of the old executor.
    AwaitServing(other);
    ASSERT_EQ(device_->executor_state().restarts, 1);
  }
  const absl::Status waited = device_->WaitEvent(copied);
  ExpectTheRestartsAnswer(waited);
  GPUKIT_EXPECT_OK(device_->DestroyEvent(copied));

  // The vector is the caller's again: nothing of the dead copy may land in it.
  const std::vector<char> mine = Pattern(kBytes, 2);
  host = mine;
  AwaitServing(stream);
  const ExecutorState after = device_->executor_state();
  EXPECT_EQ(after.restarts, 1);
  EXPECT_GT(after.pid, 0);
  EXPECT_NE(after.pid, before.pid);
  // More staged work on the stream, each waited for successfully: a copy in, an op, a copy
  // out into another vector (which must get the buffer's bytes).
  const std::vector<char> updated = Pattern(kBytes, 3);
  GPUKIT_ASSERT_OK(device_->CopyHostToDevice(source, 0, updated.data(), kBytes, stream));
  GPUKIT_ASSERT_OK(RunOp("neg", stream));
  GPUKIT_ASSERT_OK(Sync(stream));
  EXPECT_TRUE(host == mine) << "the dead executor's copy was written after the restart";
  std::vector<char> fresh(kBytes, '\0');
  GPUKIT_ASSERT_OK(device_->CopyDeviceToHost(fresh.data(), source, 0, kBytes, stream));
  GPUKIT_ASSERT_OK(Sync(stream));
  EXPECT_TRUE(fresh == updated) << "a staged copy after the restart lost its bytes";
  EXPECT_TRUE(host == mine) << "the dead executor's copy was written after the restart";
}

INSTANTIATE_TEST_SUITE_P(WaitBeforeOrAfterTheRestart, StaleStagedCopyTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "WaitAfterRestart" : "WaitAtOnce";
                         });

// Host memory mapped by this process and shared with the executor through `fd`.
struct SharedRegion {
  ScopedFd fd;
  char* data = nullptr;
  int64_t bytes = 0;
  ~SharedRegion() {
    if (data != nullptr) ::munmap(data, static_cast<size_t>(bytes));
  }
};

// FillZero goes to the executor as one Fill request, in the stream's order between copies;
// a range outside the buffer is refused here, before anything is sent.
TEST_F(RemoteDeviceTest, FillZeroZeroesItsRangeInStreamOrder) {
  Start();
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device_->CreateStream(StreamPriority::kNormal));
  for (const int64_t bytes : {int64_t{4096}, int64_t{3} << 20}) {
    SCOPED_TRACE(::testing::Message() << bytes << " bytes");
    GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, device_->Allocate(bytes));
    const std::vector<char> pattern = Pattern(bytes, 7);
    GPUKIT_ASSERT_OK(device_->CopyHostToDevice(buffer, 0, pattern.data(), bytes, stream));
    GPUKIT_ASSERT_OK(device_->FillZero(buffer, 16, bytes - 32, stream));
    std::vector<char> out(static_cast<size_t>(bytes), '\x7f');
    GPUKIT_ASSERT_OK(device_->CopyDeviceToHost(out.data(), buffer, 0, bytes, stream));
    GPUKIT_ASSERT_OK(Sync(stream));
    std::vector<char> expected = pattern;
    std::fill(expected.begin() + 16, expected.end() - 16, '\0');
    EXPECT_TRUE(out == expected);
    EXPECT_THAT(device_->FillZero(buffer, 1, bytes, stream),
                StatusIs(absl::StatusCode::kOutOfRange));
    GPUKIT_ASSERT_OK(device_->Free(buffer));
  }
}

TEST_F(RemoteDeviceTest, EveryBufferKeepsItsBytesAcrossARestart) {
  Start();
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device_->CreateStream(StreamPriority::kNormal));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId faulty, device_->CreateStream(StreamPriority::kHigh));
  MakeOpBuffers(faulty);

  // Small buffers (sharing a 2 MiB slab), a large one (its own segments), a zero-byte one.
  const std::vector<int64_t> sizes = {1, 100, 4096, 65536 + 3, int64_t{5} << 20, 0};
  std::vector<BufferId> buffers;
  std::vector<std::vector<char>> contents;
  for (size_t i = 0; i < sizes.size(); ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, device_->Allocate(sizes[i]));
    buffers.push_back(buffer);
    contents.push_back(Pattern(sizes[i], static_cast<int>(i) + 10));
    GPUKIT_ASSERT_OK(
        device_->CopyHostToDevice(buffer, 0, contents.back().data(), sizes[i], stream));
  }
  // A host buffer of the device and a registered region with its memfd: copies to and from
  // them are zero-copy (the executor maps them).
  constexpr int64_t kHostBytes = 256 << 10;
  GPUKIT_ASSERT_OK_AND_ASSIGN(HostBuffer host_buffer, device_->AllocateHostBuffer(kHostBytes));
  ASSERT_EQ(host_buffer.bytes(), kHostBytes);
  const std::vector<char> host_contents = Pattern(kHostBytes, 20);
  std::memcpy(host_buffer.data(), host_contents.data(), kHostBytes);
  SharedRegion region;
  region.bytes = kHostBytes;
  GPUKIT_ASSERT_OK_AND_ASSIGN(region.fd, CreateSharedMemory("remote-device-test", kHostBytes));
  void* mapped =
      ::mmap(nullptr, kHostBytes, PROT_READ | PROT_WRITE, MAP_SHARED, region.fd.get(), 0);
  ASSERT_NE(mapped, MAP_FAILED) << std::strerror(errno);
  region.data = static_cast<char*>(mapped);
  const std::vector<char> region_contents = Pattern(kHostBytes, 21);
  std::memcpy(region.data, region_contents.data(), kHostBytes);
  GPUKIT_ASSERT_OK(device_->RegisterHostMemory(region.data, kHostBytes, region.fd.get()));
  // A device buffer filled from each, before the restart.
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId from_host_buffer, device_->Allocate(kHostBytes));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId from_region, device_->Allocate(kHostBytes));
  GPUKIT_ASSERT_OK(
      device_->CopyHostToDevice(from_host_buffer, 0, host_buffer.data(), kHostBytes, stream));
  GPUKIT_ASSERT_OK(device_->CopyHostToDevice(from_region, 0, region.data, kHostBytes, stream));
  GPUKIT_ASSERT_OK(Sync(stream));
  const int64_t used = device_->GetMemoryInfo().used_bytes;

  const ExecutorState before = device_->executor_state();
  GPUKIT_ASSERT_OK(RunOp("_test_fault", faulty));
  const absl::Status fault = Sync(faulty);
  EXPECT_THAT(fault, StatusIs(absl::StatusCode::kAborted));
  EXPECT_EQ(KindOf(fault), "fault") << fault;
  AwaitServing(stream);
  const ExecutorState after = device_->executor_state();
  EXPECT_EQ(after.restarts, 1);
  EXPECT_GT(after.pid, 0);
  EXPECT_NE(after.pid, before.pid);
  ASSERT_TRUE(after.last_fault.has_value());
  EXPECT_EQ(after.last_fault->kind, "fault");
  EXPECT_EQ(device_->GetMemoryInfo().used_bytes, used);

  for (size_t i = 0; i < buffers.size(); ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(int64_t bytes, device_->BufferBytes(buffers[i]));
    EXPECT_EQ(bytes, sizes[i]);
    EXPECT_TRUE(ReadBack(buffers[i], stream) == contents[i])
        << "buffer of " << sizes[i] << " bytes";
  }
  EXPECT_TRUE(ReadBack(from_host_buffer, stream) == host_contents);
  EXPECT_TRUE(ReadBack(from_region, stream) == region_contents);
  // The host memory is still shared with the new executor, both ways, on both streams made
  // before the restart (the faulting one too).
  // Copies out land before any wait: the executor writes them there (zero-copy, no staging).
  GPUKIT_ASSERT_OK(
      device_->CopyDeviceToHost(host_buffer.data(), from_region, 0, kHostBytes, faulty));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId into_host_buffer, QueryUntilDone(faulty));
  EXPECT_TRUE(std::memcmp(host_buffer.data(), region_contents.data(), kHostBytes) == 0);
  GPUKIT_ASSERT_OK(device_->WaitEvent(into_host_buffer));
  GPUKIT_ASSERT_OK(device_->DestroyEvent(into_host_buffer));
  GPUKIT_ASSERT_OK(device_->CopyDeviceToHost(region.data, from_host_buffer, 0, kHostBytes, stream));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId into_region, QueryUntilDone(stream));
  EXPECT_TRUE(std::memcmp(region.data, host_contents.data(), kHostBytes) == 0);
  GPUKIT_ASSERT_OK(device_->WaitEvent(into_region));
  GPUKIT_ASSERT_OK(device_->DestroyEvent(into_region));
  const std::vector<char> later = Pattern(kHostBytes, 22);
  std::memcpy(region.data, later.data(), kHostBytes);
  GPUKIT_ASSERT_OK(device_->CopyHostToDevice(buffers[4], 1000, region.data, kHostBytes, faulty));
  GPUKIT_ASSERT_OK(Sync(faulty));
  std::vector<char> expected = contents[4];
  std::memcpy(expected.data() + 1000, later.data(), kHostBytes);
  EXPECT_TRUE(ReadBack(buffers[4], faulty) == expected);
  // A zero-byte copy of the zero-byte buffer is fine.
  GPUKIT_EXPECT_OK(device_->CopyHostToDevice(buffers[5], 0, later.data(), 0, stream));

  GPUKIT_EXPECT_OK(device_->UnregisterHostMemory(region.data));
  for (BufferId buffer : buffers) {
    GPUKIT_EXPECT_OK(device_->Free(buffer));
  }
  GPUKIT_EXPECT_OK(device_->Free(from_host_buffer));
  GPUKIT_EXPECT_OK(device_->Free(from_region));
}

// The fault is the faulting stream's: its wait gets ABORTED "fault", a bystander's work on
// another stream either ran (OK) or may not have (UNAVAILABLE "restart"), never ABORTED.
// Waits in both orders, 20 restarts.
TEST_F(RemoteDeviceTest, AFaultIsBlamedOnItsStreamOnly) {
  Start();
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId faulty, device_->CreateStream(StreamPriority::kNormal));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId bystander, device_->CreateStream(StreamPriority::kNormal));
  MakeOpBuffers(bystander);
  constexpr int kRounds = 20;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    GPUKIT_ASSERT_OK(RunOp("_test_fault", faulty));
    GPUKIT_ASSERT_OK_AND_ASSIGN(EventId faulted, device_->RecordEvent(faulty));
    GPUKIT_ASSERT_OK(RunOp("neg", bystander));
    GPUKIT_ASSERT_OK_AND_ASSIGN(EventId bystood, device_->RecordEvent(bystander));
    absl::Status fault;
    absl::Status other;
    if (round % 2 == 0) {
      fault = device_->WaitEvent(faulted);
      other = device_->WaitEvent(bystood);
    } else {
      other = device_->WaitEvent(bystood);
      fault = device_->WaitEvent(faulted);
    }
    EXPECT_THAT(fault, StatusIs(absl::StatusCode::kAborted));
    EXPECT_EQ(KindOf(fault), "fault") << fault;
    if (!other.ok()) {
      EXPECT_THAT(other, StatusIs(absl::StatusCode::kUnavailable));
      EXPECT_EQ(KindOf(other), "restart") << other;
    }
    GPUKIT_ASSERT_OK(device_->DestroyEvent(faulted));
    GPUKIT_ASSERT_OK(device_->DestroyEvent(bystood));
    AwaitServing(bystander);
    ASSERT_EQ(device_->executor_state().restarts, round + 1);
  }
  // The bystander's data is intact: neg of 1, 2, 3, 4 (the last op ran on the new executor).
  GPUKIT_ASSERT_OK(RunOp("neg", bystander));
  GPUKIT_ASSERT_OK(Sync(bystander));
  std::vector<float> out(4, 0);
  GPUKIT_ASSERT_OK(device_->CopyDeviceToHost(out.data(), op_output_, 0, 16, bystander));
  GPUKIT_ASSERT_OK(Sync(bystander));
  EXPECT_THAT(out, ::testing::ElementsAre(-1, -2, -3, -4));
}

// Pipelined ops: each op's start event is recorded right after the previous op's end event,
// so the executor gives both one device event. The fault is still blamed on the op that
// faulted (its end event), not on the next op, whose start shares that device event.
TEST_F(RemoteDeviceTest, AFaultIsBlamedOnItsOpWhenTheNextOpStartsAtItsEnd) {
  Start();
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device_->CreateStream(StreamPriority::kNormal));
  MakeOpBuffers(stream);
  constexpr int kRounds = 10;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    std::vector<EventId> events;
    for (absl::string_view op : {"_test_fault", "neg", "neg"}) {
      GPUKIT_ASSERT_OK_AND_ASSIGN(EventId start, device_->RecordEvent(stream));
      GPUKIT_ASSERT_OK(RunOp(op, stream));
      GPUKIT_ASSERT_OK_AND_ASSIGN(EventId end, device_->RecordEvent(stream));
      events.push_back(start);
      events.push_back(end);
    }
    // The last op's wait first in odd rounds: the executor sees the fault there and looks
    // for the event that carries it, where the two sharing a device event both do.
    const absl::Status last = round % 2 == 1 ? device_->WaitEvent(events[5]) : absl::Status();
    const absl::Status fault = device_->WaitEvent(events[1]);
    EXPECT_THAT(fault, StatusIs(absl::StatusCode::kAborted));
    EXPECT_EQ(KindOf(fault), "fault") << fault;
    for (const absl::Status& later :
         {device_->WaitEvent(events[3]), round % 2 == 1 ? last : device_->WaitEvent(events[5])}) {
      EXPECT_THAT(later, StatusIs(absl::StatusCode::kUnavailable));
      EXPECT_EQ(KindOf(later), "restart") << later;
    }
    for (EventId event : events) GPUKIT_ASSERT_OK(device_->DestroyEvent(event));
    AwaitServing(stream);
    ASSERT_EQ(device_->executor_state().restarts, round + 1);
  }
}

// A stream synchronized right after a pipelined op that faults (an event recorded and waited
// for with no work after the op's end event: the two share a device event) is not blamed,
// even when its wait is the first to see the fault; the op is.
TEST_F(RemoteDeviceTest, AWaitRightAfterAFaultingOpIsNotBlamedForIt) {
  Start();
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device_->CreateStream(StreamPriority::kNormal));
  MakeOpBuffers(stream);
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    GPUKIT_ASSERT_OK_AND_ASSIGN(EventId start, device_->RecordEvent(stream));
    GPUKIT_ASSERT_OK(RunOp("_test_fault", stream));
    GPUKIT_ASSERT_OK_AND_ASSIGN(EventId end, device_->RecordEvent(stream));
    GPUKIT_ASSERT_OK_AND_ASSIGN(EventId sync, device_->RecordEvent(stream));
    const absl::Status synced = device_->WaitEvent(sync);
    EXPECT_THAT(synced, StatusIs(absl::StatusCode::kUnavailable));
    EXPECT_EQ(KindOf(synced), "restart") << synced;
    const absl::Status fault = device_->WaitEvent(end);
    EXPECT_THAT(fault, StatusIs(absl::StatusCode::kAborted));
    EXPECT_EQ(KindOf(fault), "fault") << fault;
    for (EventId event : {start, end, sync}) GPUKIT_ASSERT_OK(device_->DestroyEvent(event));
    AwaitServing(stream);
  }
}

TEST_F(RemoteDeviceTest, WorkPastTheLaunchDeadlineIsAHang) {
  RemoteDeviceOptions options = CpuOptions();
  options.launch_deadline = absl::Seconds(1);
  Start(std::move(options));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device_->CreateStream(StreamPriority::kNormal));
  MakeOpBuffers(stream);
  const int64_t pid = device_->executor_state().pid;
  GPUKIT_ASSERT_OK(RunOp("_test_hang", stream));
  const absl::Status hang = Sync(stream);
  EXPECT_THAT(hang, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(KindOf(hang), "hang") << hang;
  AwaitServing(stream);
  const ExecutorState after = device_->executor_state();
  EXPECT_EQ(after.restarts, 1);
  EXPECT_NE(after.pid, pid);
  ASSERT_TRUE(after.last_fault.has_value());
  EXPECT_EQ(after.last_fault->kind, "hang");
  // The device serves: the input is intact and an op runs.
  GPUKIT_ASSERT_OK(RunOp("neg", stream));
  GPUKIT_ASSERT_OK(Sync(stream));
  std::vector<float> out(4, 0);
  GPUKIT_ASSERT_OK(device_->CopyDeviceToHost(out.data(), op_output_, 0, 16, stream));
  GPUKIT_ASSERT_OK(Sync(stream));
  EXPECT_THAT(out, ::testing::ElementsAre(-1, -2, -3, -4));
}

// The time between two events: answered from the end's wait when it measured from the start
// (adjacent events), else by asking the executor.
TEST_F(RemoteDeviceTest, EventElapsedNsIsAnsweredCachedOrNot) {
  Start();
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device_->CreateStream(StreamPriority::kNormal));
  MakeOpBuffers(stream);
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId first, device_->RecordEvent(stream));
  GPUKIT_ASSERT_OK(RunOp("neg", stream));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId second, device_->RecordEvent(stream));
  GPUKIT_ASSERT_OK(RunOp("neg", stream));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId third, device_->RecordEvent(stream));

  GPUKIT_ASSERT_OK(device_->WaitEvent(second));
  GPUKIT_ASSERT_OK_AND_ASSIGN(int64_t adjacent, device_->EventElapsedNs(first, second));
  EXPECT_GE(adjacent, 0);
  GPUKIT_ASSERT_OK(device_->WaitEvent(third));
  GPUKIT_ASSERT_OK_AND_ASSIGN(int64_t next, device_->EventElapsedNs(second, third));
  EXPECT_GE(next, 0);
  GPUKIT_ASSERT_OK_AND_ASSIGN(int64_t apart, device_->EventElapsedNs(first, third));
  EXPECT_GE(apart, 0);
  // Asked again (the cache is not consumed), and a span of events not waited for directly.
  GPUKIT_ASSERT_OK_AND_ASSIGN(int64_t again, device_->EventElapsedNs(first, second));
  EXPECT_EQ(again, adjacent);
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId fourth, device_->RecordEvent(stream));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId fifth, device_->RecordEvent(stream));
  GPUKIT_ASSERT_OK(device_->WaitEvent(fifth));
  GPUKIT_ASSERT_OK_AND_ASSIGN(int64_t unwaited, device_->EventElapsedNs(third, fourth));
  EXPECT_GE(unwaited, 0);
  EXPECT_THAT(device_->EventElapsedNs(first, EventId{fifth.value + 1000}),
              StatusIs(absl::StatusCode::kNotFound));
  for (EventId event : {first, second, third, fourth, fifth}) {
    GPUKIT_EXPECT_OK(device_->DestroyEvent(event));
  }
}

// A batch of ops waited for at its last event (WaitEventPairs): each pair's outcome is what
// WaitEvent and EventElapsedNs give one by one, in one round trip (the pairs go with the
// wait); no more than the wait when every pair was measured by its end's wait.
TEST_F(RemoteDeviceTest, WaitEventPairsTakesOneRoundTrip) {
  Start();
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device_->CreateStream(StreamPriority::kNormal));
  MakeOpBuffers(stream);
  // A batch of three ops on `stream`, none waited for yet.
  std::vector<EventId> events;
  for (int i = 0; i < 4; ++i) {
    if (i > 0) {
      GPUKIT_ASSERT_OK(RunOp("neg", stream));
    }
    GPUKIT_ASSERT_OK_AND_ASSIGN(EventId event, device_->RecordEvent(stream));
    events.push_back(event);
  }
  const std::vector<EventPair> pairs = {{events[0], events[1]},
                                        {events[1], events[2]},
                                        {events[2], events[3]},
                                        {events[0], events[3]}};
  const int64_t before = device_->executor_state().round_trips;
  const std::vector<EventPairOutcome> batch = device_->WaitEventPairs(pairs);
  EXPECT_EQ(device_->executor_state().round_trips - before, 1);  // the wait, with the pairs
  ASSERT_EQ(batch.size(), pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    GPUKIT_EXPECT_OK(batch[i].status) << "pair " << i;
    GPUKIT_EXPECT_OK(device_->WaitEvent(pairs[i].end));
    GPUKIT_ASSERT_OK_AND_ASSIGN(int64_t single,
                                device_->EventElapsedNs(pairs[i].start, pairs[i].end));
    EXPECT_EQ(batch[i].elapsed_ns, single) << "pair " << i;
    EXPECT_GE(batch[i].elapsed_ns, 0) << "pair " << i;
  }
  EXPECT_EQ(batch[3].elapsed_ns, batch[0].elapsed_ns + batch[1].elapsed_ns + batch[2].elapsed_ns);

  // The pair the last wait measured (from the event before its end) costs nothing more.
  const int64_t before_cached = device_->executor_state().round_trips;
  const std::vector<EventPairOutcome> cached = device_->WaitEventPairs({{events[2], events[3]}});
  EXPECT_EQ(device_->executor_state().round_trips, before_cached);
  ASSERT_EQ(cached.size(), 1u);
  GPUKIT_EXPECT_OK(cached[0].status);
  EXPECT_EQ(cached[0].elapsed_ns, batch[2].elapsed_ns);

  // Nothing asked, nothing sent.
  const int64_t before_empty = device_->executor_state().round_trips;
  EXPECT_TRUE(device_->WaitEventPairs({}).empty());
  EXPECT_EQ(device_->executor_state().round_trips, before_empty);

  // The batch's events go in one request; an unknown one is named, the others still go.
  std::vector<EventId> doomed = events;
  doomed.insert(doomed.begin() + 1, EventId{987654});
  EXPECT_THAT(device_->DestroyEvents(doomed),
              StatusIs(absl::StatusCode::kNotFound, ::testing::HasSubstr("987654")));
  for (EventId event : events) {
    EXPECT_THAT(device_->WaitEvent(event), StatusIs(absl::StatusCode::kNotFound));
  }
  GPUKIT_ASSERT_OK(RunOp("neg", stream));  // the executor took the request and serves on
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId after, device_->RecordEvent(stream));
  GPUKIT_EXPECT_OK(device_->WaitEvent(after));
  GPUKIT_EXPECT_OK(device_->DestroyEvents({&after, 1}));
}

// An op in the middle of the batch fails (_test_error: its work fails, and the event after it
// is recorded fine but carries that error): its pair, and only its pair, gets the error
// WaitEvent gives, still in one round trip.
TEST_F(RemoteDeviceTest, WaitEventPairsGivesAFailingOpsErrorToItsPairOnly) {
  Start();
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device_->CreateStream(StreamPriority::kNormal));
  MakeOpBuffers(stream);
  std::vector<EventId> events;
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId first, device_->RecordEvent(stream));
  events.push_back(first);
  for (int i = 0; i < 3; ++i) {
    GPUKIT_ASSERT_OK(RunOp(i == 1 ? "_test_error" : "neg", stream));
    GPUKIT_ASSERT_OK_AND_ASSIGN(EventId event, device_->RecordEvent(stream));
    events.push_back(event);
  }
  const std::vector<EventPair> pairs = {
      {events[0], events[1]}, {events[1], events[2]}, {events[2], events[3]}};
  const int64_t before = device_->executor_state().round_trips;
  const std::vector<EventPairOutcome> batch = device_->WaitEventPairs(pairs);
  EXPECT_EQ(device_->executor_state().round_trips - before, 1);
  ASSERT_EQ(batch.size(), pairs.size());
  GPUKIT_EXPECT_OK(batch[0].status);
  EXPECT_THAT(batch[1].status, StatusIs(absl::StatusCode::kInternal));
  EXPECT_EQ(batch[1].elapsed_ns, 0);
  GPUKIT_EXPECT_OK(batch[2].status);
  // What the wait of the failing op's event says, code and message.
  const absl::Status single = device_->WaitEvent(events[2]);
  EXPECT_EQ(batch[1].status, single);
  GPUKIT_EXPECT_OK(device_->WaitEvent(events[1]));
  for (EventId event : events) GPUKIT_EXPECT_OK(device_->DestroyEvent(event));
}

// RunOpBetweenEvents sends RecordEvent, RunOp, RecordEvent as one request: each op's pair
// gets its own outcome (a failing op's error on its pair only, as WaitEvent gives it), the
// ops run in order, and an op refused by its checks leaves nothing behind.
TEST_F(RemoteDeviceTest, RunOpBetweenEventsGivesEachOpItsOwnPair) {
  Start();
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device_->CreateStream(StreamPriority::kNormal));
  MakeOpBuffers(stream);
  std::vector<EventPair> pairs(3);
  for (int i = 0; i < 3; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(OpLaunch launch, Launch(i == 2   ? "neg"
                                                        : i == 1 ? "_test_error"
                                                                 : "abs"));
    GPUKIT_ASSERT_OK(device_->RunOpBetweenEvents(launch, stream, &pairs[i].start, &pairs[i].end));
  }
  const std::vector<EventPairOutcome> batch = device_->WaitEventPairs(pairs);
  ASSERT_EQ(batch.size(), pairs.size());
  GPUKIT_EXPECT_OK(batch[0].status);
  EXPECT_THAT(batch[1].status, StatusIs(absl::StatusCode::kInternal));
  GPUKIT_EXPECT_OK(batch[2].status);
  EXPECT_GE(batch[2].elapsed_ns, 0);
  EXPECT_EQ(batch[1].status, device_->WaitEvent(pairs[1].end));
  GPUKIT_EXPECT_OK(device_->WaitEvent(pairs[1].start));  // the error is the op's, after it
  // The last op (neg) ran after the first (abs): the output holds its values.
  EXPECT_EQ(OpOutput(stream), (std::vector<float>{-1, -2, -3, -4}));

  GPUKIT_ASSERT_OK_AND_ASSIGN(OpLaunch unknown, Launch("neg", BufferId{424242}));
  EventId start{7};
  EventId end{7};
  EXPECT_THAT(device_->RunOpBetweenEvents(unknown, stream, &start, &end),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(start.value, 7u);  // untouched: no event was made
  std::vector<EventId> events;
  for (const EventPair& pair : pairs) {
    events.push_back(pair.start);
    events.push_back(pair.end);
  }
  GPUKIT_EXPECT_OK(device_->DestroyEvents(events));
}

// A pair whose end has not run is FAILED_PRECONDITION, answered at once: the batch names its
// last end, which has run, and an earlier pair on another stream stuck behind a hang must not
// hold the call up (the executor answers without waiting for any stream).
TEST_F(RemoteDeviceTest, WaitEventPairsDoesNotWaitForAnEarlierPairsEnd) {
  Start();
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device_->CreateStream(StreamPriority::kNormal));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId other, device_->CreateStream(StreamPriority::kNormal));
  MakeOpBuffers(stream);
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId before, device_->RecordEvent(stream));
  GPUKIT_ASSERT_OK(device_->WaitEvent(before));
  GPUKIT_ASSERT_OK(RunOp("_test_hang", stream));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId after, device_->RecordEvent(stream));
  // Right after `after`, no work between: it shares after's device event, and has not
  // completed either.
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId also_after, device_->RecordEvent(stream));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId first, device_->RecordEvent(other));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId second, device_->RecordEvent(other));
  // Not a batch of one stream (the contract's misuse), but each pair is of one stream.
  const std::vector<EventPairOutcome> batch =
      device_->WaitEventPairs({{before, after}, {after, also_after}, {first, second}});
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_THAT(batch[0].status, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(batch[1].status, StatusIs(absl::StatusCode::kFailedPrecondition));
  GPUKIT_EXPECT_OK(batch[2].status);
  // The device is destroyed with the stream still hanging (the executor is killed).
}

// After a restart the batch's pairs get what WaitEvent gives them (pair by pair: the fault's
// culprit its fault, the others the restart), and a batch of the new executor takes one
// round trip again.
TEST_F(RemoteDeviceTest, WaitEventPairsGoesPairByPairAfterARestart) {
  Start();
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device_->CreateStream(StreamPriority::kNormal));
  MakeOpBuffers(stream);
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId start, device_->RecordEvent(stream));
  GPUKIT_ASSERT_OK(RunOp("neg", stream));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId middle, device_->RecordEvent(stream));
  GPUKIT_ASSERT_OK(RunOp("_test_fault", stream));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId end, device_->RecordEvent(stream));
  const std::vector<EventPair> pairs = {{start, middle}, {middle, end}};
  const std::vector<EventPairOutcome> faulted = device_->WaitEventPairs(pairs);
  ASSERT_EQ(faulted.size(), pairs.size());
  // The fault's own op: ABORTED with the fault, as Sync gives it in DestructionLeavesNoExecutor.
  EXPECT_THAT(faulted[1].status, StatusIs(absl::StatusCode::kAborted));
  EXPECT_EQ(KindOf(faulted[1].status), "fault");
  EXPECT_EQ(faulted[1].elapsed_ns, 0);
  // The op before it ran, but its event's executor is gone: whatever WaitEvent says (OK when
  // that op was seen complete, else the restart), and never the fault.
  EXPECT_NE(KindOf(faulted[0].status), "fault");
  AwaitServing(stream);
  ASSERT_EQ(device_->executor_state().restarts, 1);

  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId fresh_start, device_->RecordEvent(stream));
  GPUKIT_ASSERT_OK(RunOp("neg", stream));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId fresh_middle, device_->RecordEvent(stream));
  GPUKIT_ASSERT_OK(RunOp("neg", stream));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId fresh_end, device_->RecordEvent(stream));
  const std::vector<EventPair> fresh = {{fresh_start, fresh_middle}, {fresh_middle, fresh_end}};
  const int64_t before = device_->executor_state().round_trips;
  const std::vector<EventPairOutcome> again = device_->WaitEventPairs(fresh);
  EXPECT_EQ(device_->executor_state().round_trips - before, 1);
  ASSERT_EQ(again.size(), fresh.size());
  for (const EventPairOutcome& outcome : again) {
    GPUKIT_EXPECT_OK(outcome.status);
    EXPECT_GE(outcome.elapsed_ns, 0);
  }
  for (EventId event : {start, middle, end, fresh_start, fresh_middle, fresh_end}) {
    GPUKIT_EXPECT_OK(device_->DestroyEvent(event));
  }
}

// Waits until the supervisor has a standby executor ready; false if it never has. Polls the
// state (the standby's start is not observable otherwise); no time is asserted.
bool AwaitStandby(const RemoteDevice& device) {
  const absl::Time give_up = absl::Now() + absl::Seconds(120);
  while (!device.executor_state().standby_ready) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

// Destroying the device ends the executor and the standby (and reaps them), whether it
// restarted or not and whether the standby is up or still starting.
// In a DeviceBatch, an op's events, the op and the wait go to the executor as one datagram,
// with the frees and event destroys held since the last one; outside, each piece of work is
// a datagram of its own (what was held rides with the first).
TEST_F(RemoteDeviceTest, ABatchSendsAnOpAndItsWaitAsOneMessage) {
  Start();
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device_->CreateStream(StreamPriority::kNormal));
  MakeOpBuffers(stream);
  // Zero bytes: defined by id in the executor, so its free is a request (a buffer of the pool
  // is named by its place and needs none).
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId scratch, device_->Allocate(0));
  auto run_and_wait = [&](bool batched) -> absl::Status {
    std::unique_ptr<DeviceBatch> batch;
    if (batched) batch = std::make_unique<DeviceBatch>(*device_);
    GPUKIT_ASSIGN_OR_RETURN(EventId start, device_->RecordEvent(stream));
    GPUKIT_RETURN_IF_ERROR(RunOp("neg", stream));
    GPUKIT_ASSIGN_OR_RETURN(EventId end, device_->RecordEvent(stream));
    GPUKIT_RETURN_IF_ERROR(device_->WaitEvent(end));
    GPUKIT_RETURN_IF_ERROR(device_->DestroyEvent(start));
    return device_->DestroyEvent(end);
  };

  GPUKIT_ASSERT_OK(device_->Free(scratch));  // held: it goes with the next message
  const ExecutorState before = device_->executor_state();
  GPUKIT_ASSERT_OK(run_and_wait(/*batched=*/true));
  const ExecutorState after = device_->executor_state();
  EXPECT_EQ(after.messages - before.messages, 1);
  EXPECT_EQ(after.round_trips - before.round_trips, 1);

  GPUKIT_ASSERT_OK(run_and_wait(/*batched=*/false));
  const ExecutorState unbatched = device_->executor_state();
  EXPECT_EQ(unbatched.messages - after.messages, 4);  // event, op, event, wait
  EXPECT_EQ(unbatched.round_trips - after.round_trips, 1);

  EXPECT_EQ(OpOutput(stream), (std::vector<float>{-1, -2, -3, -4}));
}

// A launch without an op is refused before anything is encoded or sent, on both paths, and
// the device serves on.
TEST_F(RemoteDeviceTest, ALaunchWithoutAnOpIsRefused) {
  Start();
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device_->CreateStream(StreamPriority::kNormal));
  MakeOpBuffers(stream);
  GPUKIT_ASSERT_OK_AND_ASSIGN(OpLaunch launch, Launch("neg"));
  launch.op = nullptr;
  EXPECT_THAT(device_->RunOp(launch, stream),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("without an op")));
  EventId start, end;
  EXPECT_THAT(device_->RunOpBetweenEvents(launch, stream, &start, &end),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("without an op")));
  ExpectNegRunsOn(stream);
}

// ExpectWork sends a quiet channel's executor one Wake (where its reader polls at all: the
// _inline variant of this test, with GPUKIT_EXECUTOR_SPIN_US=50) and nothing while traffic is
// recent; the executor takes it without a reply and serves on.
TEST_F(RemoteDeviceTest, ExpectWorkWakesAQuietExecutorOnce) {
  Start();
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device_->CreateStream(StreamPriority::kNormal));
  MakeOpBuffers(stream);
  const bool polls = ExecutorReaderPollTime().count() > 0;
  // Quiet for longer than half the reader's polling time (1 ms at 50 us of spinning).
  absl::SleepFor(absl::Milliseconds(5));
  const ExecutorState before = device_->executor_state();
  device_->ExpectWork();
  const ExecutorState after = device_->executor_state();
  EXPECT_EQ(after.wakes - before.wakes, polls ? 1 : 0);
  // The channel is no longer quiet: calls in a row send (next to) nothing. (A thread held off
  // the CPU for half a millisecond between two of them would find it quiet again.)
  for (int i = 0; i < 100; ++i) device_->ExpectWork();
  const ExecutorState again = device_->executor_state();
  EXPECT_LE(again.wakes - after.wakes, polls ? 5 : 0);
  EXPECT_EQ(again.round_trips, before.round_trips);  // no reply is waited for

  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId start, device_->RecordEvent(stream));
  GPUKIT_ASSERT_OK(RunOp("neg", stream));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId end, device_->RecordEvent(stream));
  GPUKIT_ASSERT_OK(device_->WaitEvent(end));
  GPUKIT_ASSERT_OK(device_->DestroyEvent(start));
  GPUKIT_ASSERT_OK(device_->DestroyEvent(end));
  EXPECT_EQ(OpOutput(stream), (std::vector<float>{-1, -2, -3, -4}));
  EXPECT_EQ(device_->executor_state().restarts, 0);
}

// Work held in a batch that ends without a wait goes out when it ends, and in stream order
// before another thread's work on the stream, which sends what was held first.
TEST_F(RemoteDeviceTest, HeldWorkGoesOutAtTheBatchsEndOrBeforeAnotherThreadsWork) {
  Start();
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device_->CreateStream(StreamPriority::kNormal));
  MakeOpBuffers(stream);
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId second, device_->Allocate(16));
  EventId end;
  {
    DeviceBatch batch(*device_);
    const int64_t before = device_->executor_state().messages;
    GPUKIT_ASSERT_OK(RunOp("neg", stream));
    EXPECT_EQ(device_->executor_state().messages, before);  // held
    // Another thread, no batch: a copy of the op's output behind it on the stream. Its
    // message carries the held op first, so the copy sees the op's result.
    std::thread other([&] {
      GPUKIT_EXPECT_OK(device_->CopyDeviceToDevice(second, 0, op_output_, 0, 16, stream));
    });
    other.join();
    EXPECT_EQ(device_->executor_state().messages, before + 1);
    GPUKIT_ASSERT_OK(RunOp("exp", stream, op_output_));
    GPUKIT_ASSERT_OK_AND_ASSIGN(end, device_->RecordEvent(stream));
    EXPECT_EQ(device_->executor_state().messages, before + 1);
  }
  GPUKIT_ASSERT_OK(device_->WaitEvent(end));
  GPUKIT_ASSERT_OK(device_->DestroyEvent(end));
  const std::vector<char> bytes = ReadBack(second, stream);
  std::vector<float> values(4);
  std::memcpy(values.data(), bytes.data(), 16);
  EXPECT_EQ(values, (std::vector<float>{-1, -2, -3, -4}));
}

// Work held when the executor dies never ran: its wait fails as the restart's (UNAVAILABLE,
// a retry is safe) and the stream serves again; the wait never hangs on work nobody sent.
TEST_F(RemoteDeviceTest, WorkHeldWhenTheExecutorDiesFailsItsWaitAsARestart) {
  Start();
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device_->CreateStream(StreamPriority::kNormal));
  MakeOpBuffers(stream);
  absl::Status waited;
  EventId end;
  {
    DeviceBatch batch(*device_);
    GPUKIT_ASSERT_OK(RunOp("neg", stream));
    ASSERT_EQ(::kill(static_cast<pid_t>(device_->executor_state().pid), SIGKILL), 0);
    GPUKIT_ASSERT_OK_AND_ASSIGN(end, device_->RecordEvent(stream));
    waited = device_->WaitEvent(end);
  }
  ExpectTheRestartsAnswer(waited);
  GPUKIT_EXPECT_OK(device_->DestroyEvent(end));
  AwaitServing(stream);
  ExpectNegRunsOn(stream);
}

// A datagram that fails to go while the executor lives on (sendmsg's ENOBUFS, say) carried
// one-way requests whose callers have returned (here a held op and its end event's record):
// the executor is replaced, the wait on the lost event gets the restart's UNAVAILABLE (not
// a hang, nor the old executor's "no event"), and the stream serves again, buffers intact.
TEST_F(RemoteDeviceTest, ADatagramLostWhileTheExecutorLivesRestartsIt) {
  Start();
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device_->CreateStream(StreamPriority::kNormal));
  MakeOpBuffers(stream);
  const EventId settled = SettleAndFailTheNextSend(stream);
  const ExecutorState before = device_->executor_state();
  // The next datagram is the batch's held work, sent at the batch's end (or by the
  // supervisor's tick, which sends what is held, if it comes first).
  EventId end;
  {
    DeviceBatch batch(*device_);
    GPUKIT_ASSERT_OK(RunOp("neg", stream));
    GPUKIT_ASSERT_OK_AND_ASSIGN(end, device_->RecordEvent(stream));
  }
  const absl::Status waited = device_->WaitEvent(end);
  ExpectTheRestartsAnswer(waited);
  GPUKIT_EXPECT_OK(device_->DestroyEvents({settled, end}));
  AwaitServing(stream);
  const ExecutorState after = device_->executor_state();
  EXPECT_EQ(after.restarts, before.restarts + 1);
  EXPECT_NE(after.pid, before.pid);
  ASSERT_TRUE(after.last_fault.has_value());
  EXPECT_THAT(after.last_fault->error, ::testing::HasSubstr("No buffer space"));
  ExpectNegRunsOn(stream);
}

// A request alone in its datagram whose caller gets the send's error (a call that waits for
// its reply) is that caller's failure: no restart, and the executor serves on.
TEST_F(RemoteDeviceTest, ASendErrorItsCallerHearsDoesNotRestartTheExecutor) {
  Start();
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device_->CreateStream(StreamPriority::kNormal));
  MakeOpBuffers(stream);
  const EventId settled = SettleAndFailTheNextSend(stream);
  const ExecutorState before = device_->executor_state();
  EXPECT_THAT(device_->CreateStream(StreamPriority::kNormal),
              StatusIs(absl::StatusCode::kInternal));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId other, device_->CreateStream(StreamPriority::kNormal));
  GPUKIT_EXPECT_OK(Sync(stream));
  const ExecutorState after = device_->executor_state();
  EXPECT_EQ(after.restarts, before.restarts);
  EXPECT_EQ(after.pid, before.pid);
  GPUKIT_EXPECT_OK(device_->DestroyStream(other));
  GPUKIT_EXPECT_OK(device_->DestroyEvent(settled));
}

TEST_F(RemoteDeviceTest, DestructionLeavesNoExecutor) {
  for (const bool wait_for_standby : {true, false}) {
    SCOPED_TRACE(wait_for_standby ? "with a standby" : "while the standby may be starting");
    Start();
    GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device_->CreateStream(StreamPriority::kNormal));
    MakeOpBuffers(stream);
    std::vector<int64_t> pids = {device_->executor_state().pid};
    for (int round = 0; round < 2; ++round) {
      GPUKIT_ASSERT_OK(RunOp("_test_fault", stream));
      EXPECT_THAT(Sync(stream), StatusIs(absl::StatusCode::kAborted));
      AwaitServing(stream);
      pids.push_back(device_->executor_state().pid);
    }
    ASSERT_EQ(device_->executor_state().restarts, 2);
    if (wait_for_standby) {
      ASSERT_TRUE(AwaitStandby(*device_));
    }
    // Work left queued behind a hang must not hold the destruction up.
    GPUKIT_ASSERT_OK(RunOp("_test_hang", stream));
    GPUKIT_ASSERT_OK_AND_ASSIGN(EventId pending, device_->RecordEvent(stream));
    static_cast<void>(pending);
    device_.reset();
    EXPECT_TRUE(HasNoChildren()) << "an executor outlived its RemoteDevice";
    for (int64_t pid : pids) {
      EXPECT_NE(::kill(static_cast<pid_t>(pid), 0), 0) << "executor pid " << pid << " lives on";
    }
  }
}

#else  // !GPUKIT_FAULT_INJECTION

TEST(RemoteDeviceTest, NeedsFaultInjection) {
  GTEST_SKIP() << "built without GPUKIT_FAULT_INJECTION: no _test_fault or _test_hang op";
}

#endif  // GPUKIT_FAULT_INJECTION

// The Device contract through the channel: RemoteDevice over a CPU executor (one process per
// test: no standby).
absl::StatusOr<std::unique_ptr<Device>> MakeRemoteCpuDevice() {
  RemoteDeviceOptions options;
  options.executor_path = ::gpukit::testing::FindBinary(GPUKIT_EXECUTOR_PATH);
  options.executor_args = {"--backend=cpu", "--index=0", "--log-level=warn"};
  options.memory = std::make_unique<MemfdSegmentSource>(int64_t{256} << 20, int64_t{2} << 20);
  options.standby = false;
  GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<RemoteDevice> device,
                          RemoteDevice::Create(std::move(options)));
  return std::unique_ptr<Device>(std::move(device));
}

using ::gpukit::testing::DeviceConformanceParam;
using ::gpukit::testing::DeviceConformanceParamName;
using ::gpukit::testing::DeviceConformanceTest;
INSTANTIATE_TEST_SUITE_P(Remote, DeviceConformanceTest,
                         ::testing::Values(DeviceConformanceParam{"RemoteCpu",
                                                                  &MakeRemoteCpuDevice}),
                         DeviceConformanceParamName);

}  // namespace
}  // namespace gpukit
