#include "runtime/jit/compile_sandbox.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/jit/compile_worker_protocol.h"
#include "spdlog/spdlog.h"
#include <sys/socket.h>
#include <sys/wait.h>

extern char** environ;

namespace gpukit {
namespace {

// What ended a worker, for messages: "exit status 1", "signal 9 (Killed)".
std::string DescribeExit(pid_t pid) {
  int status = 0;
  pid_t reaped;
  do {
    reaped = waitpid(pid, &status, 0);
  } while (reaped < 0 && errno == EINTR);
  if (reaped != pid) return "an unknown end";
  if (WIFEXITED(status)) return absl::StrCat("exit status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  }
  return "an unknown end";
}

}  // namespace

absl::StatusOr<std::unique_ptr<CompileSandbox>> CompileSandbox::Start(
    const CompileSandboxOptions& options) {
  if (options.worker_path.empty()) {
    return absl::InvalidArgumentError("compile sandbox: no worker executable given");
  }
  if (options.max_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("compile sandbox: max_workers = ", options.max_workers, " must be >= 1"));
  }
  std::unique_ptr<CompileSandbox> sandbox(new CompileSandbox(options));
  WorkerHello hello;
  GPUKIT_ASSIGN_OR_RETURN(Worker first, sandbox->Spawn(&hello));
  sandbox->nvrtc_major_ = hello.nvrtc_major;
  sandbox->nvrtc_minor_ = hello.nvrtc_minor;
  sandbox->library_path_ = hello.library_path;
  sandbox->supported_archs_ = hello.supported_archs;
  {
    absl::MutexLock lock(&sandbox->mu_);
    sandbox->live_ = 1;
  }
  sandbox->Release(std::move(first));
  return sandbox;
}

CompileSandbox::~CompileSandbox() {
  absl::MutexLock lock(&mu_);
  for (Worker& worker : idle_) {
    kill(worker.pid, SIGKILL);
    worker.socket.Reset();
    DescribeExit(worker.pid);
  }
  idle_.clear();
}

std::string CompileSandbox::version_string() const {
  return absl::StrCat(nvrtc_major_, ".", nvrtc_minor_);
}

absl::StatusOr<CompileSandbox::Worker> CompileSandbox::Spawn(WorkerHello* hello_out) const {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("compile worker: socketpair: ", std::strerror(errno)));
  }
  ScopedFd ours(pair[0]);
  ScopedFd theirs(pair[1]);
  // The worker finds its socket at descriptor 3; dup2 onto it clears close-on-exec, unless
  // it is already 3, where dup2 would do nothing.
  if (theirs.get() == 3) theirs = ScopedFd(fcntl(3, F_DUPFD_CLOEXEC, 4));

  std::vector<std::string> args = {
      options_.worker_path, absl::StrCat("--memory-limit-bytes=", options_.memory_limit_bytes),
      absl::StrCat("--max-log-bytes=", options_.max_log_bytes)};
  if (!options_.library_dir.empty()) args.push_back("--nvrtc-dir=" + options_.library_dir);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, theirs.get(), 3);
  pid_t pid = -1;
  const int rc =
      posix_spawn(&pid, options_.worker_path.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return absl::FailedPreconditionError(absl::StrCat("compile worker ", options_.worker_path,
                                                      " cannot be started: ", std::strerror(rc)));
  }
  theirs.Reset();
  {
    absl::MutexLock lock(&mu_);
    ++started_;
  }
  Worker worker{pid, std::move(ours)};
  absl::StatusOr<std::string> frame =
      ReadFrame(worker.socket.get(), kMaxWorkerFrameBytes, absl::Now() + options_.start_timeout);
  absl::StatusOr<WorkerHello> hello =
      frame.ok() ? DecodeWorkerHello(*frame) : absl::StatusOr<WorkerHello>(frame.status());
  if (!hello.ok() || !hello->status.ok()) {
    kill(pid, SIGKILL);
    const std::string end = DescribeExit(pid);
    if (hello.ok()) return hello->status;  // "NVRTC JIT compiler not available (...)" and such
    return absl::FailedPreconditionError(absl::StrCat("compile worker ", options_.worker_path,
                                                      " did not start (", end,
                                                      "): ", hello.status().message()));
  }
  if (hello_out != nullptr) *hello_out = *std::move(hello);
  return worker;
}

absl::StatusOr<CompileSandbox::Worker> CompileSandbox::Acquire() const {
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](const CompileSandbox* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
          return !self->idle_.empty() || self->live_ < self->options_.max_workers;
        },
        this));
    if (!idle_.empty()) {
      Worker worker = std::move(idle_.back());
      idle_.pop_back();
      return worker;
    }
    ++live_;  // the room is ours while the new worker starts
  }
  absl::StatusOr<Worker> worker = Spawn(nullptr);
  if (!worker.ok()) {
    absl::MutexLock lock(&mu_);
    --live_;
  }
  return worker;
}

void CompileSandbox::Release(Worker worker) const {
  absl::MutexLock lock(&mu_);
  idle_.push_back(std::move(worker));
}

std::string CompileSandbox::Discard(Worker& worker, absl::string_view why) const {
  kill(worker.pid, SIGKILL);
  worker.socket.Reset();
  const std::string end = DescribeExit(worker.pid);
  spdlog::warn("compile worker {} {} ({})", worker.pid, std::string(why), end);
  absl::MutexLock lock(&mu_);
  --live_;
  return end;
}

absl::StatusOr<NvrtcOutput> CompileSandbox::Compile(const NvrtcInput& input) const {
  const std::string request = EncodeWorkerRequest(input);
  // A worker that died while idle (killed from outside) fails at once with UNAVAILABLE; the
  // compile then goes to a fresh one, once. A second death is the source's doing.
  for (int attempt = 0;; ++attempt) {
    GPUKIT_ASSIGN_OR_RETURN(Worker worker, Acquire());
    const absl::Time deadline = input.time_budget == absl::InfiniteDuration()
                                    ? absl::InfiniteFuture()
                                    : absl::Now() + input.time_budget + options_.start_timeout;
    absl::Status sent = WriteFrame(worker.socket.get(), request);
    absl::StatusOr<std::string> frame =
        sent.ok() ? ReadFrame(worker.socket.get(), kMaxWorkerFrameBytes, deadline)
                  : absl::StatusOr<std::string>(sent);
    if (frame.ok()) {
      absl::StatusOr<WorkerResponse> response = DecodeWorkerResponse(*frame);
      if (!response.ok()) {
        Discard(worker, "replaced: it sent a malformed answer");
        return absl::InternalError(
            absl::StrCat("compile worker sent a malformed answer: ", response.status().message()));
      }
      Release(std::move(worker));
      if (!response->status.ok()) return response->status;
      return std::move(response->output);
    }
    if (frame.status().code() == absl::StatusCode::kDeadlineExceeded) {
      Discard(worker, "replaced: past its compile's budget");
      return absl::DeadlineExceededError(absl::StrCat(
          "kernel compilation took longer than its budget of ",
          absl::FormatDuration(input.time_budget), " and its compiler process was stopped"));
    }
    // The worker died: its memory limit (an allocation failed and NVRTC aborted), a crash of
    // NVRTC on this source, or a kill from outside.
    const std::string end = Discard(
        worker, attempt == 0 ? "died; the compile goes to a fresh worker" : "died compiling");
    if (attempt == 0) continue;
    return absl::ResourceExhaustedError(absl::StrCat(
        "the kernel compiler process died compiling this source (", end,
        "); a compile may use at most ", options_.memory_limit_bytes >> 20, " MiB of memory"));
  }
}

int CompileSandbox::workers_started() const {
  absl::MutexLock lock(&mu_);
  return started_;
}

std::vector<pid_t> CompileSandbox::idle_worker_pids() const {
  absl::MutexLock lock(&mu_);
  std::vector<pid_t> pids;
  for (const Worker& worker : idle_) pids.push_back(worker.pid);
  return pids;
}

}  // namespace gpukit
