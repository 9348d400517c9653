// The gRPC server (daemon/server.h) in this process, over a Core whose CPU device the test
// can hold in the middle of a request: the synchronous server's thread cap
// (ServerOptions::max_threads) and what a client sees beyond it, and the streaming RPCs,
// which are on the callback API and outside the cap.
#include "daemon/server.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "daemon/scheduler/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_device.h"
#include "tests/testing/forwarding_device.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace gpukit {
namespace {

using ::gpukit::testing::ForwardingDevice;
using ::gpukit::testing::IsOk;
using ::gpukit::testing::ScopedTempDir;
using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kMaxThreads = 4;

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return context;
}

class ServerThreadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CpuDeviceOptions device_options;
    device_options.memory_bytes = int64_t{1} << 20;
    auto device = std::make_unique<ForwardingDevice>(*CpuDevice::Create(device_options));
    hooks_ = device.get();
    std::vector<std::unique_ptr<Device>> devices;
    devices.push_back(std::move(device));
    GPUKIT_ASSERT_OK_AND_ASSIGN(core_, Core::Create(clock_, std::move(devices), CoreOptions{}));
    ServerOptions options;
    options.listen = {"unix://" + dir_.path() + "/gpukitd.sock"};
    options.max_threads = kMaxThreads;
    options.inline_unary_calls = inline_calls_;  // 0: every RunOp on the capped unary pool
    options.reap_interval = absl::Hours(1);
    GPUKIT_ASSERT_OK_AND_ASSIGN(server_, Server::Start(*core_, clock_, options));
    channel_ = grpc::CreateChannel(server_->addresses()[0], grpc::InsecureChannelCredentials());
    sessions_ = v1::SessionService::NewStub(channel_);
    arrays_ = v1::ArrayService::NewStub(channel_);
    compute_ = v1::ComputeService::NewStub(channel_);
  }

  void TearDown() override {
    hooks_->before_run_op = nullptr;
    hooks_->on_enqueue = nullptr;
    if (server_ != nullptr) server_->Shutdown();
  }

  grpc::Status KeepAlive(const std::string& session) {
    v1::KeepAliveRequest request;
    request.set_session_id(session);
    v1::KeepAliveResponse response;
    return sessions_->KeepAlive(Context().get(), request, &response);
  }

  grpc::Status Upload(const std::string& session, const std::string& handle,
                      const std::string& data) {
    auto context = Context();
    v1::UploadResponse response;
    std::unique_ptr<grpc::ClientWriter<v1::UploadRequest>> writer =
        arrays_->Upload(context.get(), &response);
    v1::UploadRequest header;
    header.mutable_header()->set_session_id(session);
    header.mutable_header()->set_handle(handle);
    v1::UploadRequest chunk;
    chunk.mutable_chunk()->set_data(data);
    writer->Write(header);
    writer->Write(chunk);
    writer->WritesDone();
    return writer->Finish();
  }

  // The array's bytes, through one Download stream.
  grpc::Status Download(const std::string& session, const std::string& handle, std::string* out) {
    auto context = Context();
    v1::DownloadRequest request;
    request.set_session_id(session);
    request.set_handle(handle);
    std::unique_ptr<grpc::ClientReader<v1::DownloadResponse>> reader =
        arrays_->Download(context.get(), request);
    v1::DownloadResponse message;
    out->clear();
    while (reader->Read(&message)) out->append(message.chunk().data());
    return reader->Finish();
  }

  FakeClock clock_;
  ScopedTempDir dir_;
  ForwardingDevice* hooks_ = nullptr;
  int inline_calls_ = 0;  // ServerOptions::inline_unary_calls
  // Opens a session of `tenant` (BestEffort, or Guaranteed with a 64 KiB and 0.25 compute
  // limit) and creates a 4-byte uint8 array in it: {session, handle}.
  std::pair<std::string, std::string> SessionWithArray(const std::string& tenant,
                                                       bool guaranteed = false) {
    v1::OpenSessionRequest open;
    open.set_tenant(tenant);
    if (guaranteed) {
      open.mutable_resources()->mutable_limits()->set_memory_bytes(64 << 10);
      open.mutable_resources()->mutable_limits()->set_compute(0.25);
    }
    v1::OpenSessionResponse opened;
    EXPECT_TRUE(sessions_->Open(Context().get(), open, &opened).ok());
    EXPECT_EQ(opened.qos_class(),
              guaranteed ? v1::QOS_CLASS_GUARANTEED : v1::QOS_CLASS_BEST_EFFORT);
    v1::CreateArrayRequest create;
    create.set_session_id(opened.session_id());
    create.set_dtype(v1::DTYPE_UINT8);
    create.add_shape(4);
    v1::CreateArrayResponse created;
    EXPECT_TRUE(arrays_->Create(Context().get(), create, &created).ok());
    return {opened.session_id(), created.array().handle()};
  }

  // Makes every RunOp wait in the device until release_ is notified; held_ counts them.
  void HoldRunOps() {
    hooks_->before_run_op = [this](const OpLaunch&) {
      {
        absl::MutexLock lock(&held_mu_);
        ++held_;
      }
      release_.WaitForNotification();
    };
  }
  // Waits (up to 30 s) until `n` RunOps are held.
  bool AwaitHeld(int n) {
    absl::MutexLock lock(&held_mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(held_mu_) { return held_ == n; };
    return held_mu_.AwaitWithTimeout(absl::Condition(&reached), absl::Seconds(30));
  }

  static v1::RunOpRequest AddRequest(const std::string& session, const std::string& handle) {
    v1::RunOpRequest request;
    request.set_session_id(session);
    request.set_op("add");
    request.add_inputs()->set_handle(handle);
    request.add_inputs()->set_handle(handle);
    return request;
  }

  absl::Mutex held_mu_;
  int held_ ABSL_GUARDED_BY(held_mu_) = 0;
  absl::Notification release_;

  std::unique_ptr<Core> core_;
  std::unique_ptr<Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::SessionService::Stub> sessions_;
  std::unique_ptr<v1::ArrayService::Stub> arrays_;
  std::unique_ptr<v1::ComputeService::Stub> compute_;
};

TEST_F(ServerThreadsTest, UnaryRequestsBeyondTheCapAreResourceExhaustedWhileStreamsRun) {
  const auto [session, handle] = SessionWithArray("capped");
  ASSERT_FALSE(handle.empty());

  // Ops that stay inside the device until released, each holding a thread of the unary
  // calls' pool (RunOp is a callback method; service::InlineUnary).
  HoldRunOps();
  constexpr int kHandlers = kMaxThreads;
  std::vector<grpc::Status> results(kHandlers);
  std::vector<std::thread> clients;
  for (int i = 0; i < kHandlers; ++i) {
    clients.emplace_back([&, i] {
      const v1::RunOpRequest request = AddRequest(session, handle);
      v1::RunOpResponse response;
      // gRPC's sync server may refuse a request while its threads are between requests (a
      // loaded machine shows it): such a refusal comes before the handler, so try again.
      for (int attempt = 0; attempt < 100; ++attempt) {
        results[i] = compute_->RunOp(Context().get(), request, &response);
        if (results[i].error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) break;
        absl::SleepFor(absl::Milliseconds(10));
      }
    });
  }
  ASSERT_TRUE(AwaitHeld(kHandlers)) << "not all " << kHandlers << " ops reached the device";

  // Every thread the cap allows is busy: the next unary request is refused at once, as gRPC's
  // synchronous server refuses its own beyond the cap (the same text)...
  const grpc::Status refused = KeepAlive(session);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("Threadpool Exhausted"));
  // ... while streams, on the callback API, take no thread of the cap.
  EXPECT_TRUE(Upload(session, handle, "abcd").ok());
  std::string downloaded;
  const grpc::Status download = Download(session, handle, &downloaded);
  EXPECT_TRUE(download.ok()) << download.error_message();
  EXPECT_EQ(downloaded, "abcd");

  release_.Notify();
  for (std::thread& client : clients) client.join();
  for (const grpc::Status& result : results) {
    EXPECT_TRUE(result.ok()) << result.error_code() << ": " << result.error_message();
  }
  // Served again once the handlers' threads are back: a client that retries gets through.
  // (They go back just after their replies, so the first retry may still find none.)
  grpc::Status renewed = KeepAlive(session);
  for (const absl::Time deadline = absl::Now() + absl::Seconds(30);
       renewed.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED && absl::Now() < deadline;
       renewed = KeepAlive(session)) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(renewed.ok()) << renewed.error_message();
}

TEST_F(ServerThreadsTest, StreamsWaitingForTheDeviceDoNotStallOtherStreams) {
  v1::OpenSessionRequest open;
  open.set_tenant("waiting");
  v1::OpenSessionResponse opened;
  ASSERT_TRUE(sessions_->Open(Context().get(), open, &opened).ok());
  const std::string session = opened.session_id();
  v1::CreateArrayRequest create;
  create.set_session_id(session);
  create.set_dtype(v1::DTYPE_UINT8);
  create.add_shape(4);
  v1::CreateArrayResponse created;
  ASSERT_TRUE(arrays_->Create(Context().get(), create, &created).ok());

  // Uploads whose chunks stay inside the device: more of them than gRPC has callback
  // threads on any host this runs on, and more than the stream workers' cap (kMaxThreads).
  constexpr int kWaiting = 8;
  absl::Mutex mu;
  int held = 0;
  absl::Notification release;
  hooks_->on_enqueue = [&](StreamId) {
    {
      absl::MutexLock lock(&mu);
      ++held;
    }
    release.WaitForNotification();
  };
  std::vector<grpc::Status> results(kWaiting);
  std::vector<std::thread> clients;
  for (int i = 0; i < kWaiting; ++i) {
    clients.emplace_back(
        [&, i] { results[i] = Upload(session, created.array().handle(), "abcd"); });
  }
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(
                                        +[](int* n) { return *n == kMaxThreads; }, &held),
                                    absl::Seconds(30)))
        << held << " chunks reached the device";
  }

  // Another stream is served (its reaction waits for nothing), and a unary request too.
  std::string downloaded;
  const grpc::Status other = Download(session, "a-no-such-array", &downloaded);
  EXPECT_EQ(other.error_code(), grpc::StatusCode::NOT_FOUND) << other.error_message();
  EXPECT_THAT(other.error_message(), HasSubstr("a-no-such-array"));
  EXPECT_TRUE(KeepAlive(session).ok());

  release.Notify();
  for (std::thread& client : clients) client.join();
  for (const grpc::Status& result : results) {
    EXPECT_TRUE(result.ok()) << result.error_code() << ": " << result.error_message();
  }
}

// Lapsed leases are collected on the server's clock: an hour of FakeClock time (the reap
// interval) collects a session whose 10 s lease lapsed, though no real time passes.
TEST_F(ServerThreadsTest, TheLeaseReaperRunsOnTheServersClock) {
  v1::OpenSessionRequest open;
  open.set_tenant("leased");
  open.set_lease_ms(10'000);
  v1::OpenSessionResponse opened;
  ASSERT_TRUE(sessions_->Open(Context().get(), open, &opened).ok());
  ASSERT_EQ(core_->session_count(), 1);
  clock_.Advance(absl::Hours(1));
  // Waits for the reaper (an event), bounded only so that a broken reaper fails the test.
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (core_->session_count() > 0 && absl::Now() < give_up) std::this_thread::yield();
  EXPECT_EQ(core_->session_count(), 0) << "the reaper did not run on the server's clock";
  EXPECT_EQ(KeepAlive(opened.session_id()).error_code(), grpc::StatusCode::NOT_FOUND);
}

// What systemd's watchdog probe asks (daemon/systemd/watchdog.h): the core's locks are free
// and gRPC answers its health check through the server, until the server shuts down.
// One RunOp of a Guaranteed or Burstable session may run on gRPC's callback thread itself
// (service::InlineUnary); while it is held in the device there, other unary calls go to the
// pool and are answered. A BestEffort session's does not while a session of a higher class
// is open on the device.
class InlineUnaryTest : public ServerThreadsTest {
 protected:
  InlineUnaryTest() { inline_calls_ = 1; }
};

TEST_F(InlineUnaryTest, ACallHeldInlineLeavesTheOthersServed) {
  const auto [session, handle] = SessionWithArray("inline", /*guaranteed=*/true);
  ASSERT_FALSE(handle.empty());
  ASSERT_TRUE(Upload(session, handle, std::string("\x01\x02\x03\x04", 4)).ok());
  const v1::RunOpRequest add = AddRequest(session, handle);

  absl::Notification held, release;
  std::atomic<int> ops{0};
  hooks_->before_run_op = [&](const OpLaunch&) {
    if (ops.fetch_add(1) == 0) {  // the first op only
      held.Notify();
      release.WaitForNotification();
    }
  };
  v1::RunOpResponse first_result;
  grpc::Status first;
  std::thread client([&] { first = compute_->RunOp(Context().get(), add, &first_result); });
  held.WaitForNotification();
  // The first RunOp holds the one inline place: these run on the pool.
  EXPECT_TRUE(KeepAlive(session).ok());
  v1::RunOpResponse second_result;
  const grpc::Status second = compute_->RunOp(Context().get(), add, &second_result);
  ASSERT_TRUE(second.ok()) << second.error_message();
  release.Notify();
  client.join();
  ASSERT_TRUE(first.ok()) << first.error_message();
  EXPECT_EQ(ops.load(), 2);
  for (const v1::RunOpResponse* result : {&first_result, &second_result}) {
    std::string bytes;
    ASSERT_TRUE(Download(session, result->output().handle(), &bytes).ok());
    EXPECT_EQ(bytes, std::string("\x02\x04\x06\x08", 4));
  }
}

// With a Guaranteed session open, BestEffort RunOps fill the pool (kMaxThreads) and the next
// is refused: none took the inline place, which the Guaranteed session's RunOp still finds.
TEST_F(InlineUnaryTest, BestEffortCallsNeverTakeTheInlinePlace) {
  const auto [flood, flood_array] = SessionWithArray("flood");
  const auto [victim, victim_array] = SessionWithArray("victim", /*guaranteed=*/true);
  ASSERT_FALSE(flood_array.empty());
  ASSERT_FALSE(victim_array.empty());
  HoldRunOps();
  std::vector<grpc::Status> results(kMaxThreads);
  std::vector<std::thread> clients;
  for (int i = 0; i < kMaxThreads; ++i) {
    clients.emplace_back([&, i] {
      v1::RunOpResponse response;
      results[i] = compute_->RunOp(Context().get(), AddRequest(flood, flood_array), &response);
    });
  }
  ASSERT_TRUE(AwaitHeld(kMaxThreads));
  v1::RunOpResponse refused_response;
  const grpc::Status refused =
      compute_->RunOp(Context().get(), AddRequest(flood, flood_array), &refused_response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  // The Guaranteed session's RunOp runs inline (it, too, waits in the device until released).
  v1::RunOpResponse victim_response;
  grpc::Status victim_status;
  std::thread victim_client([&] {
    victim_status =
        compute_->RunOp(Context().get(), AddRequest(victim, victim_array), &victim_response);
  });
  EXPECT_TRUE(AwaitHeld(kMaxThreads + 1));
  release_.Notify();
  victim_client.join();
  for (std::thread& client : clients) client.join();
  EXPECT_TRUE(victim_status.ok()) << victim_status.error_message();
  for (const grpc::Status& result : results) EXPECT_TRUE(result.ok()) << result.error_message();
}

TEST_F(ServerThreadsTest, HealthProbeAnswersUntilShutdown) {
  core_->CheckLiveness();
  EXPECT_THAT(server_->CheckServing(absl::Seconds(10)), IsOk());
  server_->Shutdown();
  EXPECT_THAT(server_->CheckServing(absl::Seconds(10)), StatusIs(absl::StatusCode::kUnavailable));
}

TEST(ServerOptionsTest, MaxThreadsBelowTwoIsRefused) {
  FakeClock clock;
  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(*CpuDevice::Create({}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Core> core,
                              Core::Create(clock, std::move(devices), CoreOptions{}));
  ScopedTempDir dir;
  ServerOptions options;
  options.listen = {"unix://" + dir.path() + "/gpukitd.sock"};
  options.max_threads = 1;
  EXPECT_THAT(Server::Start(*core, clock, options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("server.maxThreads = 1")));
}

}  // namespace
}  // namespace gpukit
