// gpukitd under systemd's Type=notify, with a fake NOTIFY_SOCKET (a unix datagram socket the
// test binds) standing in for systemd: STATUS= lines while it starts, READY=1 only once its
// server answers, WATCHDOG=1 again and again while WATCHDOG_USEC is set, STOPPING=1 on
// SIGTERM (daemon/systemd/).
#include <poll.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/raw_api.h"
#include "tests/testing/scoped_env.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include <sys/socket.h>
#include <sys/un.h>

namespace gpukit::testing {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kEventTimeout = absl::Seconds(20);

// The service manager's end of the notify protocol: a bound unix datagram socket.
class FakeNotifySocket {
 public:
  explicit FakeNotifySocket(std::string path) : path_(std::move(path)) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path_.c_str(), sizeof(address.sun_path) - 1);
    bound_ = bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~FakeNotifySocket() {
    close(fd_);
    unlink(path_.c_str());
  }
  bool bound() const { return bound_; }
  const std::string& path() const { return path_; }

  // The next datagram, waiting for it up to `timeout`; "" if none came.
  std::string Receive(absl::Duration timeout = kEventTimeout) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) != 1) return "";
    char buffer[4096];
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : "";
  }
  // Datagrams until one contains `wanted`; returns all of them, the matching one last (or
  // everything received when it never came).
  std::vector<std::string> ReceiveUntil(absl::string_view wanted) {
    std::vector<std::string> messages;
    for (std::string m = Receive(); !m.empty(); m = Receive()) {
      messages.push_back(m);
      if (absl::StrContains(m, wanted)) break;
    }
    return messages;
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool bound_ = false;
};

bool AnyContains(const std::vector<std::string>& messages, absl::string_view text) {
  for (const std::string& m : messages) {
    if (absl::StrContains(m, text)) return true;
  }
  return false;
}

TEST(SystemdNotifyTest, ReadyStatusWatchdogAndStopping) {
  ScopedTempDir dir;
  FakeNotifySocket notify(dir.path() + "/notify.sock");
  ASSERT_TRUE(notify.bound()) << std::strerror(errno);
  const std::string socket_path = dir.path() + "/gpukitd.sock";
  std::optional<Subprocess> daemon;
  {
    // What systemd sets for a Type=notify unit with WatchdogSec=200ms.
    ScopedEnv notify_socket("NOTIFY_SOCKET", notify.path());
    ScopedEnv watchdog_usec("WATCHDOG_USEC", "200000");
    ScopedEnv watchdog_pid("WATCHDOG_PID", std::nullopt);
    GPUKIT_ASSERT_OK_AND_ASSIGN(
        Subprocess started, Subprocess::Spawn({{DaemonPath(), "--listen", "unix://" + socket_path,
                                                "--backend=cpu", "--log-level", "debug"},
                                               dir.path() + "/gpukitd.log",
                                               ""}));
    daemon.emplace(std::move(started));
  }
  const auto log = [&] { return ReadFileOrEmpty(dir.path() + "/gpukitd.log"); };

  // Start-up: STATUS lines, then READY=1, sent only once the server answers. The test has not
  // waited for the socket: when READY=1 is here, a request must succeed at once.
  const std::vector<std::string> startup = notify.ReceiveUntil("READY=1");
  ASSERT_FALSE(startup.empty()) << log();
  ASSERT_THAT(startup.back(), HasSubstr("READY=1")) << absl::StrJoin(startup, " | ") << log();
  EXPECT_TRUE(UnixSocketAccepts(socket_path));
  std::optional<RawApi> api;
  GPUKIT_ASSERT_OK_AND_ASSIGN(api, RawApi::Connect("unix://" + socket_path));
  GPUKIT_EXPECT_OK(api->Status().status());
  EXPECT_TRUE(AnyContains(startup, "STATUS=starting"));
  EXPECT_TRUE(AnyContains(startup, "STATUS=backend cpu: 1 device(s) up"));
  EXPECT_THAT(startup.back(), HasSubstr("STATUS=serving on 1 address(es); 0 session(s)"));

  // The watchdog, fed every 100 ms while the probe passes.
  int pings = 0;
  while (pings < 3) {
    const std::string m = notify.Receive();
    ASSERT_FALSE(m.empty()) << "only " << pings << " WATCHDOG=1 came\n" << log();
    if (absl::StrContains(m, "WATCHDOG=1")) ++pings;
  }
  // The status line follows the sessions.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string session, api->OpenSession("notify"));
  EXPECT_TRUE(AnyContains(notify.ReceiveUntil("1 session(s)"),
                          "STATUS=serving on 1 address(es); 1 session(s)"));
  // Without the client's channel, shutdown need not wait out gRPC's grace period for it.
  api.reset();

  GPUKIT_ASSERT_OK(daemon->Signal(SIGTERM));
  const std::vector<std::string> stopping = notify.ReceiveUntil("STOPPING=1");
  ASSERT_FALSE(stopping.empty());
  EXPECT_THAT(stopping.back(), HasSubstr("STOPPING=1"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(int code, daemon->WaitForExitCode(absl::Seconds(15)));
  EXPECT_EQ(code, 0) << log();
  EXPECT_THAT(log(), HasSubstr("systemd watchdog: 200ms"));
}

// A reload says RELOADING=1, then READY=1 with what happened.
TEST(SystemdNotifyTest, ReloadIsAnnounced) {
  ScopedTempDir dir;
  FakeNotifySocket notify(dir.path() + "/notify.sock");
  ASSERT_TRUE(notify.bound()) << std::strerror(errno);
  std::unique_ptr<DaemonProcess> daemon;
  {
    ScopedEnv notify_socket("NOTIFY_SOCKET", notify.path());
    ScopedEnv watchdog_usec("WATCHDOG_USEC", std::nullopt);
    DaemonOptions options;
    options.dir = dir.path();
    options.config_json = R"({"partitions": []})";
    GPUKIT_ASSERT_OK_AND_ASSIGN(daemon, DaemonProcess::Start(options));
  }
  const std::vector<std::string> startup = notify.ReceiveUntil("READY=1");
  ASSERT_FALSE(startup.empty());
  ASSERT_THAT(startup.back(), HasSubstr("READY=1"));
  ASSERT_EQ(kill(daemon->pid(), SIGHUP), 0);
  const std::vector<std::string> reload = notify.ReceiveUntil("READY=1");
  EXPECT_TRUE(AnyContains(reload, "RELOADING=1\nMONOTONIC_USEC="));
  ASSERT_FALSE(reload.empty());
  EXPECT_THAT(reload.back(), HasSubstr("STATUS=reloaded " + dir.path() + "/gpukitd.json"));
  // No WATCHDOG_USEC: no WATCHDOG=1 among what came.
  EXPECT_FALSE(AnyContains(reload, "WATCHDOG=1"));
  GPUKIT_EXPECT_OK(daemon->Stop());
}

}  // namespace
}  // namespace gpukit::testing
