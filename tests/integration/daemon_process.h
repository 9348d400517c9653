// DaemonProcess: the real gpukitd binary (DaemonPath(): the build tree's, or the one beside
// the test in a bundle), started for one test on a unix socket in that test's temporary
// directory, with its stdout and stderr captured in a log file there.
//
//   ScopedTempDir dir;
//   DaemonOptions options;
//   options.dir = dir.path();
//   options.config_json = R"({"sessions": {"minLease": "200ms"}})";
//   GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon,
//                               DaemonProcess::Start(options));
//   ... talk to daemon->address() ...
//   GPUKIT_EXPECT_OK(daemon->Stop());  // SIGTERM; OK only if gpukitd exits with status 0
//
// Start returns once the socket accepts connections, or fails with the daemon's log in the
// message if gpukitd exits or does not accept within the deadline. Destroying a running
// DaemonProcess kills it (SIGKILL), so a failed test leaves no daemon behind.
//
// Thread safety: one owner; address() may be read from any thread.
#ifndef GPUKIT_TESTS_INTEGRATION_DAEMON_PROCESS_H_
#define GPUKIT_TESTS_INTEGRATION_DAEMON_PROCESS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/integration/binary_path.h"  // kDaemonPath, ..., DaemonPath()
#include "tests/integration/subprocess.h"

namespace gpukit::testing {

struct DaemonOptions {
  // Required: the directory for the socket, the config file and the log.
  std::string dir;
  // The gpukitd binary; empty: DaemonPath() (the build's, or the one beside this program).
  std::string daemon_path;
  // Empty: dir + "/gpukitd.sock".
  std::string socket_path;
  // When not empty, written to dir + "/gpukitd.json" and passed as --config.
  std::string config_json;
  // Passed as --backend; empty passes none, so gpukitd picks (auto).
  std::string backend = "cpu";
  std::vector<std::string> extra_args;
  // Log file name within dir; a test that runs two daemons in one dir names them apart.
  std::string log_name = "gpukitd.log";
  // How long Start waits for the socket to accept.
  absl::Duration ready_timeout = absl::Seconds(10);
};

class DaemonProcess {
 public:
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start(DaemonOptions options);
  ~DaemonProcess() = default;  // the Subprocess kills a daemon still running

  // "unix:///tmp/.../gpukitd.sock", for --addr, ClientOptions::address and channels.
  const std::string& address() const { return address_; }
  const std::string& socket_path() const { return options_.socket_path; }
  const std::string& log_path() const { return log_path_; }
  pid_t pid() const { return process_.pid(); }
  // Everything gpukitd has logged so far.
  std::string Log() const { return ReadFileOrEmpty(log_path_); }
  bool Running() { return process_.Running(); }

  // Sends SIGTERM and waits up to `timeout`. OK only if gpukitd exits with status 0;
  // otherwise the error says how it ended and carries the log.
  absl::Status Stop(absl::Duration timeout = absl::Seconds(10));
  // SIGKILL, as if the machine took the daemon away; leaves its socket file behind.
  absl::Status Kill();

 private:
  DaemonProcess(DaemonOptions options, std::string log_path, Subprocess process);

  const DaemonOptions options_;
  const std::string address_;
  const std::string log_path_;
  Subprocess process_;
};

// True if a unix socket at `path` accepts a connection now.
bool UnixSocketAccepts(const std::string& path);

}  // namespace gpukit::testing

#endif  // GPUKIT_TESTS_INTEGRATION_DAEMON_PROCESS_H_
