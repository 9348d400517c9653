// Subprocess: a child process started with posix_spawn, its output captured in files.
//
// Integration tests run the real gpukitd, gpukitctl and worker binaries. A test process has
// initialised gRPC (threads, file descriptors), so it must never fork(); posix_spawn starts
// the child with a fresh image instead.
//
//   GPUKIT_ASSERT_OK_AND_ASSIGN(
//       Subprocess child, Subprocess::Spawn({{"/bin/echo", "hi"}, dir + "/echo.out", ""}));
//   GPUKIT_ASSERT_OK_AND_ASSIGN(int code, child.WaitForExitCode(absl::Seconds(5)));
//   EXPECT_EQ(ReadFileOrEmpty(dir + "/echo.out"), "hi\n");
//
//   // Or in one call, with stdout and stderr apart:
//   GPUKIT_ASSERT_OK_AND_ASSIGN(ProgramResult r,
//                               RunProgram({kCtlPath, "status"}, dir, absl::Seconds(10)));
//
// Thread safety: a Subprocess has one owner; use it from one thread.
#ifndef GPUKIT_TESTS_INTEGRATION_SUBPROCESS_H_
#define GPUKIT_TESTS_INTEGRATION_SUBPROCESS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include <sys/types.h>

namespace gpukit::testing {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is the program's path
  std::string stdout_path;        // created or truncated
  std::string stderr_path;        // empty: into stdout_path as well
};

class Subprocess {
 public:
  // Starts argv[0] with the test's environment, stdin from /dev/null, default signal
  // dispositions and an empty signal mask. INTERNAL if posix_spawn fails.
  static absl::StatusOr<Subprocess> Spawn(const SpawnOptions& options);

  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  // Kills (SIGKILL) and reaps the child if it still runs, so no test leaves one behind.
  ~Subprocess();

  pid_t pid() const { return pid_; }
  const SpawnOptions& options() const { return options_; }

  // True until the child has exited and been reaped (by this call, if it just exited).
  bool Running();
  // Sends `signal`; FAILED_PRECONDITION if the child was reaped already.
  absl::Status Signal(int signal);
  // Waits (polling) up to `timeout` for the child to exit; returns its raw wait status.
  // DEADLINE_EXCEEDED if it still runs then.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  // Like Wait, but the exit code; INTERNAL naming the signal if a signal ended the child.
  absl::StatusOr<int> WaitForExitCode(absl::Duration timeout);
  // Wait status once reaped.
  std::optional<int> wait_status() const { return wait_status_; }

  // What the child wrote so far to stdout (and stderr, when they share a file).
  std::string Output() const;

 private:
  Subprocess(pid_t pid, SpawnOptions options) : pid_(pid), options_(std::move(options)) {}
  void KillAndReap();

  pid_t pid_ = -1;
  SpawnOptions options_;
  std::optional<int> wait_status_;
};

// "exited with code 3" or "killed by signal 9 (Killed)".
std::string DescribeWaitStatus(int wait_status);

struct ProgramResult {
  int exit_code = -1;
  std::string stdout_text;
  std::string stderr_text;
};

// Runs argv to completion with its stdout and stderr in files under `dir`. DEADLINE_EXCEEDED
// (after killing it) if it runs longer than `timeout`; INTERNAL if a signal ended it.
absl::StatusOr<ProgramResult> RunProgram(const std::vector<std::string>& argv,
                                         const std::string& dir, absl::Duration timeout);

// The file's contents, or "" if it cannot be read.
std::string ReadFileOrEmpty(const std::string& path);

}  // namespace gpukit::testing

#endif  // GPUKIT_TESTS_INTEGRATION_SUBPROCESS_H_
