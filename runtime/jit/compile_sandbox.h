// CompileSandbox: NVRTC in worker processes that can open no file (compile_worker.h), behind
// the SourceCompiler interface. This is how gpukitd compiles every kernel source: a client's
// `#include "/etc/shadow"` fails with "cannot open source file ... Permission denied", and a
// compile that runs away in time or memory costs one worker, never the daemon.
//
//   GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<CompileSandbox> sandbox,
//       CompileSandbox::Start({.worker_path = "/usr/libexec/gpukit/gpukit-compile-worker"}));
//   GPUKIT_ASSIGN_OR_RETURN(NvrtcOutput out, sandbox->Compile(input));
//
// Workers are started with posix_spawn on demand, up to max_workers at once (more compiles
// wait for one), and kept for the next compile. A worker that does not answer within the
// compile's budget plus start_timeout's grace is killed (SIGKILL) and the compile fails with
// DEADLINE_EXCEEDED; one that dies (its memory limit, a crash in NVRTC) fails its compile with
// RESOURCE_EXHAUSTED or INTERNAL. Either way the next compile starts a fresh worker, which
// costs NVRTC's loading and one warm-up compile (tens to hundreds of ms).
//
// Thread safety: every method may be called concurrently.
#ifndef GPUKIT_RUNTIME_JIT_COMPILE_SANDBOX_H_
#define GPUKIT_RUNTIME_JIT_COMPILE_SANDBOX_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/base/unix_fd.h"
#include "runtime/jit/source_compiler.h"
#include <sys/types.h>

namespace gpukit {

struct CompileSandboxOptions {
  std::string worker_path;  // the gpukit-compile-worker executable; required
  std::string library_dir;  // searched first for libnvrtc (passed to the worker)
  // Compiles that run at once; more wait for a worker. NVRTC compiles on one core each.
  int max_workers = 2;
  // Address space one compile may add to the worker's (RLIMIT_AS over what the worker has
  // mapped once NVRTC is loaded): NVRTC needs a few hundred MiB for heavy templates; 4 GiB
  // leaves room and still stops a source built to exhaust the host.
  int64_t memory_limit_bytes = int64_t{4} << 30;
  // NVRTC's log is cut to this in the worker; a compile error's message holds the log.
  int64_t max_log_bytes = int64_t{1} << 20;
  // How long a new worker may take to load NVRTC and warm up; also the grace a compile gets
  // past its own budget before its worker is killed.
  absl::Duration start_timeout = absl::Seconds(60);
};

class CompileSandbox : public SourceCompiler {
 public:
  // Starts one worker and learns NVRTC's version from it. FAILED_PRECONDITION "NVRTC JIT
  // compiler not available (...)" when the worker cannot load NVRTC, "compile worker ..."
  // when it cannot be started or locked down.
  static absl::StatusOr<std::unique_ptr<CompileSandbox>> Start(
      const CompileSandboxOptions& options);
  ~CompileSandbox() override;  // ends every worker

  std::string version_string() const override;
  const std::string& library_path() const override { return library_path_; }
  const std::vector<int>& supported_archs() const override { return supported_archs_; }
  absl::StatusOr<NvrtcOutput> Compile(const NvrtcInput& input) const override;

  // Workers started so far, the first included (a replaced worker counts again).
  int workers_started() const;
  // The process ids of the idle workers (for tests that kill one).
  std::vector<pid_t> idle_worker_pids() const;

 private:
  struct Worker {
    pid_t pid = -1;
    ScopedFd socket;
  };

  explicit CompileSandbox(const CompileSandboxOptions& options) : options_(options) {}
  // A new worker, ready to compile; `hello_out` gets its NVRTC facts.
  absl::StatusOr<Worker> Spawn(struct WorkerHello* hello_out) const;
  // Waits for an idle worker, or the room to start one.
  absl::StatusOr<Worker> Acquire() const;
  void Release(Worker worker) const;  // back to the idle list
  // Kills and reaps `worker`, logs `why`; returns how it ended ("signal 9 (Killed)").
  std::string Discard(Worker& worker, absl::string_view why) const;

  const CompileSandboxOptions options_;
  int nvrtc_major_ = 0;
  int nvrtc_minor_ = 0;
  std::string library_path_;
  std::vector<int> supported_archs_;

  mutable absl::Mutex mu_;
  mutable std::vector<Worker> idle_ ABSL_GUARDED_BY(mu_);
  mutable int live_ ABSL_GUARDED_BY(mu_) = 0;  // idle + busy + starting
  mutable int started_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_JIT_COMPILE_SANDBOX_H_
