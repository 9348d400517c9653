// "The session ended while the request was in flight", for every Core call that changes
// state: the request is held inside the device (a ForwardingDevice hook) while the session
// is closed, or its lease lapses (FakeClock) and is reaped, or lapses and is not reaped yet.
// Each request must fail with NOT_FOUND, never OK (core.h, "No request reports OK"), and
// nothing may be left behind: the device's memory and the scheduler's ledger back to zero,
// no session.
//
// Calls with no device work to hold (KeepAlive, Describe, RegisterHostMemory's bookkeeping)
// have nothing in flight; the session's own lock orders them against a close
// (session_manager_test). CompileKernel and LaunchKernel are in core_kernel_test (they need
// NVRTC).
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/core/core.h"
#include "daemon/scheduler/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/unix_fd.h"
#include "runtime/cpu/cpu_device.h"
#include "tests/testing/forwarding_device.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::ForwardingDevice;
using ::gpukit::testing::IsOk;
using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int64_t kDeviceBytes = int64_t{1} << 20;
constexpr absl::Duration kLease = absl::Seconds(30);  // SessionOptions' default

// How the session ends while the request is inside the device.
enum class Ending {
  kClosed,              // the client (or an operator) closes it
  kLeaseLapsedReaped,   // the lease lapses and the reaper closes it
  kLeaseLapsedUnreaped  // the lease lapses; the reaper has not run yet
};

std::string EndingName(Ending ending) {
  switch (ending) {
    case Ending::kClosed:
      return "Closed";
    case Ending::kLeaseLapsedReaped:
      return "LeaseLapsedReaped";
    case Ending::kLeaseLapsedUnreaped:
      return "LeaseLapsedUnreaped";
  }
  return "?";
}

class SessionEndTest;

// One request: prepares what it needs on `session`, arranges for `end` to run once while the
// request is inside the device, makes the request and returns its status.
struct InFlightCase {
  std::string name;
  std::function<absl::Status(SessionEndTest& t, const std::string& session,
                             const std::function<void()>& end)>
      run;
};

// gtest prints parameters in failure messages: the name says which request it was.
void PrintTo(const InFlightCase& request, std::ostream* os) { *os << request.name; }

class SessionEndTest : public ::testing::TestWithParam<std::tuple<InFlightCase, Ending>> {
 public:
  SessionEndTest() {
    options_.limits.max_array_bytes = kDeviceBytes;
    CpuDeviceOptions device_options;
    device_options.memory_bytes = kDeviceBytes;
    auto device = std::make_unique<ForwardingDevice>(*CpuDevice::Create(device_options));
    hooks_ = device.get();
    std::vector<std::unique_ptr<Device>> devices;
    devices.push_back(std::move(device));
    absl::StatusOr<std::unique_ptr<Core>> core = Core::Create(clock_, std::move(devices), options_);
    EXPECT_THAT(core, IsOk());
    core_ = *std::move(core);
  }

  Core& core() { return *core_; }
  ForwardingDevice& hooks() { return *hooks_; }

  // An array of `bytes` bytes (uint8), written with 7s.
  absl::StatusOr<std::string> Array(const std::string& session, int64_t bytes) {
    GPUKIT_ASSIGN_OR_RETURN(ArrayView view, core().CreateArray(session, {DType::kUInt8, {bytes}}));
    const std::string data(static_cast<size_t>(bytes), '\7');
    GPUKIT_RETURN_IF_ERROR(core().WriteArray(session, view.handle, 0, data));
    return view.handle;
  }

  // A host memory region of `bytes` with its shared memory delivered.
  absl::StatusOr<std::string> Region(const std::string& session, int64_t bytes) {
    GPUKIT_ASSIGN_OR_RETURN(HostRegionGrant grant, core().RegisterHostMemory(session, bytes));
    GPUKIT_ASSIGN_OR_RETURN(ScopedFd memory, CreateSharedMemory("session-end-test", bytes));
    GPUKIT_RETURN_IF_ERROR(core().DeliverDescriptor(grant.token, std::move(memory)));
    return grant.handle;
  }

  // `end` as a hook may run only once: the session's end itself calls the device (freeing
  // buffers), which must not end it again.
  static std::function<void()> Once(std::function<void()> end) {
    auto fired = std::make_shared<bool>(false);
    return [end = std::move(end), fired] {
      if (*fired) return;
      *fired = true;
      end();
    };
  }

  void ClearHooks() {
    hooks().before_allocate = nullptr;
    hooks().before_free = nullptr;
    hooks().before_import_buffer = nullptr;
    hooks().before_register_host_memory = nullptr;
    hooks().export_buffer = nullptr;
    hooks().before_run_op = nullptr;
    hooks().on_enqueue = nullptr;
  }

  // Ends `session` the way `ending` says.
  void End(const std::string& session, Ending ending) {
    switch (ending) {
      case Ending::kClosed:
        EXPECT_THAT(core().CloseSession(session), IsOk());
        break;
      case Ending::kLeaseLapsedReaped:
        clock_.Advance(kLease + absl::Milliseconds(1));
        EXPECT_EQ(core().ExpireLeases(), 1);
        break;
      case Ending::kLeaseLapsedUnreaped:
        clock_.Advance(kLease + absl::Milliseconds(1));
        break;
    }
  }

 protected:
  FakeClock clock_;
  CoreOptions options_;
  std::unique_ptr<Core> core_;
  ForwardingDevice* hooks_ = nullptr;
};

TEST_P(SessionEndTest, RequestFailsAndLeavesNothingBehind) {
  const auto& [request, ending] = GetParam();
  OpenSessionParams params;
  params.tenant = "ending";
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant grant, core().OpenSession(params));
  ASSERT_EQ(grant.lease, kLease);
  const std::string session = grant.session_id;
  bool ended = false;
  const std::function<void()> end = Once([&, ending = ending] {
    ended = true;
    End(session, ending);
  });

  const absl::Status status = request.run(*this, session, end);
  ClearHooks();  // they refer to this test's locals

  ASSERT_TRUE(ended) << "the request never reached the hook that ends its session";
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kNotFound, HasSubstr(session)));
  // What a session whose lease lapsed unnoticed holds goes at the next reap.
  core().ExpireLeases();
  EXPECT_EQ(core().session_count(), 0);
  EXPECT_EQ(core().array_count(), 0);
  EXPECT_EQ(core().ListDevices()[0].memory_used_bytes, 0);
  EXPECT_EQ(core().scheduler().device_memory_used(0), 0);
  // And the session stays gone for the next request.
  EXPECT_THAT(core().KeepAlive(session), StatusIs(absl::StatusCode::kNotFound));
}

std::vector<InFlightCase> Cases() {
  using T = SessionEndTest;
  return {
      {"CreateArray",
       [](T& t, const std::string& s, const std::function<void()>& end) {
         t.hooks().before_allocate = [end](int64_t) { end(); };
         return t.core().CreateArray(s, {DType::kFloat32, {256}}).status();
       }},
      {"FreeArray",
       [](T& t, const std::string& s, const std::function<void()>& end) {
         GPUKIT_ASSIGN_OR_RETURN(std::string a, t.Array(s, 256));
         t.hooks().before_free = [end](BufferId) { end(); };
         return t.core().FreeArray(s, a).status();
       }},
      {"WriteArray",  // ArrayService.Upload, chunk by chunk
       [](T& t, const std::string& s, const std::function<void()>& end) {
         GPUKIT_ASSIGN_OR_RETURN(std::string a, t.Array(s, 256));
         t.hooks().on_enqueue = [end](StreamId) { end(); };
         return t.core().WriteArray(s, a, 0, std::string(256, '\1'));
       }},
      {"ReadArray",  // ArrayService.Download, chunk by chunk
       [](T& t, const std::string& s, const std::function<void()>& end) {
         GPUKIT_ASSIGN_OR_RETURN(std::string a, t.Array(s, 256));
         t.hooks().on_enqueue = [end](StreamId) { end(); };
         std::string out(256, '\0');
         return t.core().ReadArray(s, a, 0, absl::MakeSpan(out));
       }},
      {"CopyFromHostMemory",
       [](T& t, const std::string& s, const std::function<void()>& end) {
         GPUKIT_ASSIGN_OR_RETURN(std::string a, t.Array(s, 256));
         GPUKIT_ASSIGN_OR_RETURN(std::string region, t.Region(s, 4096));
         t.hooks().on_enqueue = [end](StreamId) { end(); };
         return t.core().CopyFromHostMemory(s, a, 0, region, 0, 256);
       }},
      {"CopyToHostMemory",
       [](T& t, const std::string& s, const std::function<void()>& end) {
         GPUKIT_ASSIGN_OR_RETURN(std::string a, t.Array(s, 256));
         GPUKIT_ASSIGN_OR_RETURN(std::string region, t.Region(s, 4096));
         t.hooks().on_enqueue = [end](StreamId) { end(); };
         return t.core().CopyToHostMemory(s, a, 0, region, 0, 256);
       }},
      {"RunOp",
       [](T& t, const std::string& s, const std::function<void()>& end) {
         GPUKIT_ASSIGN_OR_RETURN(std::string a, t.Array(s, 256));
         t.hooks().before_run_op = [end](const OpLaunch&) { end(); };
         OpInput in;
         in.handle = a;
         return t.core().RunOp(s, "add", {in, in}, {}).status();
       }},
      {"RunOpOutputAllocation",  // ended before the op runs, while its output is made
       [](T& t, const std::string& s, const std::function<void()>& end) {
         GPUKIT_ASSIGN_OR_RETURN(std::string a, t.Array(s, 256));
         t.hooks().before_allocate = [end](int64_t) { end(); };
         OpInput in;
         in.handle = a;
         return t.core().RunOp(s, "add", {in, in}, {}).status();
       }},
      {"ExportArray",
       [](T& t, const std::string& s, const std::function<void()>& end) {
         GPUKIT_ASSIGN_OR_RETURN(std::string a, t.Array(s, 256));
         t.hooks().export_buffer = [end](BufferId, ExportForm) -> absl::StatusOr<ExportedBuffer> {
           end();
           ExportedBuffer exported;
           GPUKIT_ASSIGN_OR_RETURN(exported.fd, CreateSharedMemory("session-end-export", 256));
           exported.allocation_bytes = exported.bytes = 256;
           return exported;
         };
         return t.core().ExportArray(s, a).status();
       }},
      {"RegisterHostMemoryDelivery",  // the region is usable once its descriptor arrives
       [](T& t, const std::string& s, const std::function<void()>& end) {
         GPUKIT_ASSIGN_OR_RETURN(HostRegionGrant grant, t.core().RegisterHostMemory(s, 4096));
         GPUKIT_ASSIGN_OR_RETURN(ScopedFd memory, CreateSharedMemory("session-end-region", 4096));
         t.hooks().before_register_host_memory = [end](void*, int64_t) { end(); };
         return t.core().DeliverDescriptor(grant.token, std::move(memory));
       }},
      {"ImportArrayByDescriptor",  // the import completes when its descriptor arrives
       [](T& t, const std::string& s, const std::function<void()>& end) {
         GPUKIT_ASSIGN_OR_RETURN(ArrayImportGrant grant, t.core().ImportArrayByDescriptor(
                                                             s, {DType::kUInt8, {256}}, 4096, 0));
         GPUKIT_ASSIGN_OR_RETURN(ScopedFd memory, CreateSharedMemory("session-end-import", 4096));
         t.hooks().before_import_buffer = [end](const ImportedMemory&) { end(); };
         return t.core().DeliverDescriptor(grant.token, std::move(memory));
       }},
  };
}

INSTANTIATE_TEST_SUITE_P(EveryWritePath, SessionEndTest,
                         ::testing::Combine(::testing::ValuesIn(Cases()),
                                            ::testing::Values(Ending::kClosed,
                                                              Ending::kLeaseLapsedReaped,
                                                              Ending::kLeaseLapsedUnreaped)),
                         [](const ::testing::TestParamInfo<SessionEndTest::ParamType>& info) {
                           return std::get<0>(info.param).name + "_" +
                                  EndingName(std::get<1>(info.param));
                         });

// The session's end wins over the request's own error: a failing write into a session that
// ended meanwhile reports the end, which is what the client must act on.
TEST(SessionEndMessageTest, NamesTheSessionAndSaysTheWorkIsLost) {
  FakeClock clock;
  CpuDeviceOptions device_options;
  device_options.memory_bytes = kDeviceBytes;
  auto device = std::make_unique<ForwardingDevice>(*CpuDevice::Create(device_options));
  ForwardingDevice* hooks = device.get();
  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(std::move(device));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Core> core,
                              Core::Create(clock, std::move(devices), CoreOptions{}));
  OpenSessionParams params;
  params.tenant = "ending";
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant s, core->OpenSession(params));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView a, core->CreateArray(s.session_id, {DType::kUInt8, {8}}));
  bool closed = false;
  hooks->on_enqueue = [&](StreamId) {
    if (closed) return;
    closed = true;
    EXPECT_THAT(core->CloseSession(s.session_id), IsOk());
  };
  EXPECT_THAT(core->WriteArray(s.session_id, a.handle, 0, std::string(8, 'x')),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("session \"" + s.session_id +
                                 "\" ended (closed, or its lease lapsed) while the request ran; "
                                 "its arrays are freed, so what the request did is lost")));
}

}  // namespace
}  // namespace gpukit
