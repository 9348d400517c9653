// DaemonTest: a GoogleTest fixture that gives each test its own gpukitd in a fresh temporary
// directory, a RawApi on it, and helpers to connect clients and to wait for the daemon to
// hold nothing.
//
//   class LeaseTest : public DaemonTest {
//    protected:
//     std::string DaemonConfigJson() const override {
//       return R"({"sessions": {"minLease": "200ms"}})";
//     }
//   };
//   TEST_F(LeaseTest, SilentSessionExpires) {
//     GPUKIT_ASSERT_OK_AND_ASSIGN(std::string id, api().OpenSession("t", 500));
//     ...
//   }
//
// TearDown stops the daemon with SIGTERM and fails the test unless it exits with status 0;
// when the test failed it prints the daemon's log.
//
// Thread safety: a fixture runs on the test's thread; api() may be shared with threads the
// test starts.
#ifndef GPUKIT_TESTS_INTEGRATION_DAEMON_FIXTURE_H_
#define GPUKIT_TESTS_INTEGRATION_DAEMON_FIXTURE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "gpukit/client.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/raw_api.h"
#include "tests/testing/temp_dir.h"

namespace gpukit::testing {

// Calls `condition` every `interval` until it returns true or `timeout` has passed; returns
// whether it did. Tests wait for events with this, never with a fixed sleep.
bool PollUntil(const std::function<bool()>& condition, absl::Duration timeout,
               absl::Duration interval = absl::Milliseconds(20));

class DaemonTest : public ::testing::Test {
 protected:
  // The --config JSON of this fixture's daemon; empty: none (the embedded default).
  virtual std::string DaemonConfigJson() const { return ""; }
  // Adjusts the rest of the daemon's options before SetUp starts it (dir and config_json are
  // set by then). The default keeps DaemonOptions' defaults: the CPU backend; a GPU test
  // asks for options.backend = "cuda" here.
  virtual void ConfigureDaemon(DaemonOptions& /*options*/) const {}

  void SetUp() override;
  void TearDown() override;

  const std::string& temp_dir() const { return dir_.path(); }
  DaemonProcess& daemon() { return *daemon_; }
  RawApi& api() { return *api_; }

  // A libgpukit client of this fixture's daemon; `lease` zero takes the daemon's default.
  absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& tenant = "integration",
                                                  absl::Duration lease = absl::ZeroDuration());
  // The options Connect uses, for a test that changes some before Client::Connect.
  ClientOptions ClientOptionsFor(const std::string& tenant,
                                 absl::Duration lease = absl::ZeroDuration());

  // "127.0.0.1:<port>" from the daemon's "listening on" line, waiting up to 10 s for it (gpukitd
  // accepts on its unix socket a moment before it logs its TCP address); "" if none came.
  std::string TcpAddress();

  // Opens a fresh client and runs an op on it, checking the result: the daemon still serves.
  void ExpectDaemonServesAnotherClient();

  // Polls until the daemon lists no session and its devices hold no memory; true if that
  // happened within `timeout`.
  bool WaitUntilDaemonHoldsNothing(absl::Duration timeout);

 private:
  ScopedTempDir dir_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::optional<RawApi> api_;
};

}  // namespace gpukit::testing

#endif  // GPUKIT_TESTS_INTEGRATION_DAEMON_FIXTURE_H_
