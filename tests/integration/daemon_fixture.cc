#include "tests/integration/daemon_fixture.h"

#include <iostream>
#include <thread>

#include "gmock/gmock.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {

bool PollUntil(const std::function<bool()>& condition, absl::Duration timeout,
               absl::Duration interval) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(interval);
  }
  return true;
}

void DaemonTest::SetUp() {
  ASSERT_FALSE(temp_dir().empty());
  DaemonOptions options;
  options.dir = temp_dir();
  options.config_json = DaemonConfigJson();
  ConfigureDaemon(options);
  GPUKIT_ASSERT_OK_AND_ASSIGN(daemon_, DaemonProcess::Start(options));
  GPUKIT_ASSERT_OK_AND_ASSIGN(RawApi api, RawApi::Connect(daemon_->address()));
  api_.emplace(std::move(api));
}

void DaemonTest::TearDown() {
  if (daemon_ == nullptr) return;
  api_.reset();
  const bool failed_before = HasFailure();
  GPUKIT_EXPECT_OK(daemon_->Stop());  // its message carries the log
  if (failed_before) {
    std::cout << "---- gpukitd log (" << daemon_->log_path() << ") ----\n"
              << daemon_->Log() << "---- end of gpukitd log ----\n";
  }
  daemon_.reset();
}

absl::StatusOr<std::unique_ptr<Client>> DaemonTest::Connect(const std::string& tenant,
                                                            absl::Duration lease) {
  return Client::Connect(ClientOptionsFor(tenant, lease));
}

ClientOptions DaemonTest::ClientOptionsFor(const std::string& tenant, absl::Duration lease) {
  ClientOptions options;
  options.address = daemon_->address();
  options.tenant = tenant;
  options.lease = lease;
  options.client_name = "integration-test";
  options.call_timeout = absl::Seconds(10);
  return options;
}

std::string DaemonTest::TcpAddress() {
  const std::string listening = "listening on 127.0.0.1:";
  std::string log;
  PollUntil(
      [&] {
        log = daemon_->Log();
        return log.find(listening) != std::string::npos;
      },
      absl::Seconds(10));
  const size_t at = log.find(listening);
  if (at == std::string::npos) return "";
  const size_t start = at + std::string("listening on ").size();
  const size_t end = log.find_first_not_of("0123456789", at + listening.size());
  return log.substr(start, end - start);
}

void DaemonTest::ExpectDaemonServesAnotherClient() {
  SCOPED_TRACE("the daemon still serves another client");
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect("another-client"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array a, client->FromVector<int32_t>({1, 2, 3}, {3}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array b, client->Add(a, 40));
  EXPECT_THAT(b.ToVector<int32_t>(), IsOkAndHolds(::testing::ElementsAre(41, 42, 43)));
}

bool DaemonTest::WaitUntilDaemonHoldsNothing(absl::Duration timeout) {
  return PollUntil(
      [this] {
        absl::StatusOr<v1::ListSessionsResponse> sessions = api().ListSessions();
        absl::StatusOr<int64_t> used_bytes = api().MemoryUsedBytes();
        return sessions.ok() && sessions->sessions().empty() && used_bytes.ok() && *used_bytes == 0;
      },
      timeout);
}

}  // namespace gpukit::testing
