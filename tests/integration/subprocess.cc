#include "tests/integration/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include <sys/wait.h>

extern char** environ;

namespace gpukit::testing {
namespace {

// posix_spawn's C structures, released on every path.
class SpawnAttributes {
 public:
  SpawnAttributes() {
    posix_spawnattr_init(&attr_);
    posix_spawn_file_actions_init(&actions_);
  }
  ~SpawnAttributes() {
    posix_spawn_file_actions_destroy(&actions_);
    posix_spawnattr_destroy(&attr_);
  }
  posix_spawnattr_t* attr() { return &attr_; }
  posix_spawn_file_actions_t* actions() { return &actions_; }

 private:
  posix_spawnattr_t attr_;
  posix_spawn_file_actions_t actions_;
};

}  // namespace

absl::StatusOr<Subprocess> Subprocess::Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("argv is empty");
  SpawnAttributes spawn;
  // gRPC's threads may block or ignore signals; the child starts clean so that SIGTERM and
  // SIGKILL mean what the test intends.
  sigset_t empty_mask, defaults;
  sigemptyset(&empty_mask);
  sigemptyset(&defaults);
  for (int signal : {SIGTERM, SIGINT, SIGPIPE, SIGCHLD}) sigaddset(&defaults, signal);
  posix_spawnattr_setsigmask(spawn.attr(), &empty_mask);
  posix_spawnattr_setsigdefault(spawn.attr(), &defaults);
  posix_spawnattr_setflags(spawn.attr(), POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  // No O_CLOEXEC: if open() returned the target descriptor itself, exec would close it.
  constexpr int kOutFlags = O_WRONLY | O_CREAT | O_TRUNC;
  posix_spawn_file_actions_addopen(spawn.actions(), STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(spawn.actions(), STDOUT_FILENO, options.stdout_path.c_str(),
                                   kOutFlags, 0644);
  if (options.stderr_path.empty()) {
    posix_spawn_file_actions_adddup2(spawn.actions(), STDOUT_FILENO, STDERR_FILENO);
  } else {
    posix_spawn_file_actions_addopen(spawn.actions(), STDERR_FILENO, options.stderr_path.c_str(),
                                     kOutFlags, 0644);
  }

  std::vector<char*> argv;
  for (const std::string& arg : options.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int error = posix_spawn(&pid, argv[0], spawn.actions(), spawn.attr(), argv.data(), environ);
  if (error != 0) {
    return absl::InternalError(absl::StrCat("posix_spawn(", absl::StrJoin(options.argv, " "),
                                            "): ", std::strerror(error)));
  }
  return Subprocess(pid, options);
}

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      options_(std::move(other.options_)),
      wait_status_(std::exchange(other.wait_status_, std::nullopt)) {}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    KillAndReap();
    pid_ = std::exchange(other.pid_, -1);
    options_ = std::move(other.options_);
    wait_status_ = std::exchange(other.wait_status_, std::nullopt);
  }
  return *this;
}

Subprocess::~Subprocess() { KillAndReap(); }

void Subprocess::KillAndReap() {
  if (pid_ > 0 && Running()) {
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    wait_status_ = status;
  }
}

bool Subprocess::Running() {
  if (pid_ <= 0 || wait_status_.has_value()) return false;
  int status = 0;
  pid_t reaped = waitpid(pid_, &status, WNOHANG);
  if (reaped == pid_) {
    wait_status_ = status;
    return false;
  }
  return reaped == 0;  // still running (-1: not our child any more; treat as gone)
}

absl::Status Subprocess::Signal(int signal) {
  if (pid_ <= 0 || wait_status_.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat("process ", pid_, " has exited"));
  }
  if (kill(pid_, signal) != 0) {
    return absl::InternalError(
        absl::StrCat("kill(", pid_, ", ", signal, "): ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (Running()) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          options_.argv[0], " (pid ", pid_, ") still runs after ", absl::FormatDuration(timeout)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // poll interval
  }
  if (!wait_status_.has_value()) {
    return absl::InternalError(absl::StrCat("process ", pid_, " cannot be waited for"));
  }
  return *wait_status_;
}

absl::StatusOr<int> Subprocess::WaitForExitCode(absl::Duration timeout) {
  absl::StatusOr<int> status = Wait(timeout);
  if (!status.ok()) return status.status();
  if (!WIFEXITED(*status)) {
    return absl::InternalError(absl::StrCat(options_.argv[0], " ", DescribeWaitStatus(*status)));
  }
  return WEXITSTATUS(*status);
}

std::string Subprocess::Output() const { return ReadFileOrEmpty(options_.stdout_path); }

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exited with code ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(wait_status), " (",
                        strsignal(WTERMSIG(wait_status)), ")");
  }
  return absl::StrCat("ended with wait status ", wait_status);
}

absl::StatusOr<ProgramResult> RunProgram(const std::vector<std::string>& argv,
                                         const std::string& dir, absl::Duration timeout) {
  // Several programs may run in one directory; number their output files.
  static std::atomic<int> next_run{0};
  const std::string prefix = absl::StrCat(dir, "/run", next_run++);
  absl::StatusOr<Subprocess> child =
      Subprocess::Spawn({argv, prefix + ".stdout", prefix + ".stderr"});
  if (!child.ok()) return child.status();
  absl::StatusOr<int> code = child->WaitForExitCode(timeout);
  ProgramResult result;
  result.stdout_text = ReadFileOrEmpty(prefix + ".stdout");
  result.stderr_text = ReadFileOrEmpty(prefix + ".stderr");
  if (!code.ok()) {
    return absl::Status(code.status().code(),
                        absl::StrCat(code.status().message(), "; stdout:\n", result.stdout_text,
                                     "\nstderr:\n", result.stderr_text));
  }
  result.exit_code = *code;
  return result;
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace gpukit::testing
