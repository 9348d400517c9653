#include "tests/integration/daemon_process.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

namespace gpukit::testing {

bool UnixSocketAccepts(const std::string& path) {
  sockaddr_un address{};
  if (path.size() >= sizeof(address.sun_path)) return false;
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool accepted =
      connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return accepted;
}

DaemonProcess::DaemonProcess(DaemonOptions options, std::string log_path, Subprocess process)
    : options_(std::move(options)),
      address_(absl::StrCat("unix://", options_.socket_path)),
      log_path_(std::move(log_path)),
      process_(std::move(process)) {}

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(DaemonOptions options) {
  if (options.dir.empty()) return absl::InvalidArgumentError("DaemonOptions.dir is empty");
  if (options.socket_path.empty()) options.socket_path = options.dir + "/gpukitd.sock";
  std::vector<std::string> argv = {options.daemon_path.empty() ? DaemonPath() : options.daemon_path, "--listen", "unix://" + options.socket_path,
                                   "--log-level", "debug"};
  if (!options.backend.empty()) argv.push_back("--backend=" + options.backend);
  if (!options.config_json.empty()) {
    const std::string config_path = options.dir + "/gpukitd.json";
    std::ofstream(config_path) << options.config_json;
    argv.push_back("--config");
    argv.push_back(config_path);
  }
  argv.insert(argv.end(), options.extra_args.begin(), options.extra_args.end());
  const std::string log_path = options.dir + "/" + options.log_name;
  SpawnOptions spawn;
  spawn.argv = std::move(argv);
  spawn.stdout_path = log_path;  // stderr too: the log is one file
  absl::StatusOr<Subprocess> process = Subprocess::Spawn(spawn);
  if (!process.ok()) return process.status();
  std::unique_ptr<DaemonProcess> daemon(
      new DaemonProcess(std::move(options), log_path, *std::move(process)));

  const absl::Time deadline = absl::Now() + daemon->options_.ready_timeout;
  while (!UnixSocketAccepts(daemon->socket_path())) {
    if (!daemon->process_.Running()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "gpukitd ", DescribeWaitStatus(daemon->process_.wait_status().value_or(-1)),
          " before accepting on ", daemon->socket_path(), "; its log:\n", daemon->Log()));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "gpukitd did not accept on ", daemon->socket_path(), " within ",
          absl::FormatDuration(daemon->options_.ready_timeout), "; its log:\n", daemon->Log()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // poll interval
  }
  return daemon;
}

absl::Status DaemonProcess::Stop(absl::Duration timeout) {
  if (absl::Status sent = process_.Signal(SIGTERM); !sent.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gpukitd was gone before SIGTERM (",
        DescribeWaitStatus(process_.wait_status().value_or(-1)), "); its log:\n", Log()));
  }
  absl::StatusOr<int> status = process_.Wait(timeout);
  if (!status.ok()) {
    return absl::Status(status.status().code(),
                        absl::StrCat(status.status().message(), "; its log:\n", Log()));
  }
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    return absl::InternalError(
        absl::StrCat("gpukitd ", DescribeWaitStatus(*status), " after SIGTERM; its log:\n", Log()));
  }
  return absl::OkStatus();
}

absl::Status DaemonProcess::Kill() {
  if (absl::Status sent = process_.Signal(SIGKILL); !sent.ok()) return sent;
  return process_.Wait(absl::Seconds(10)).status();
}

}  // namespace gpukit::testing
