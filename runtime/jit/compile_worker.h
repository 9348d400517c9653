// The compile worker: the process in which gpukitd runs NVRTC on clients' kernel sources.
//
// NVRTC opens every file a source #includes with its process's rights, and a compile error
// quotes the file back; `#include "/etc/shadow"` in a kernel would read it with gpukitd's
// rights. Filtering the text cannot stop that (macros, __has_include, #line and the like
// build paths NVRTC resolves itself). So gpukitd compiles in worker processes that can open
// no file at all: the worker loads NVRTC and its builtins, compiles one kernel to finish
// NVRTC's lazy loading, then locks itself down for good (LockDownCompileWorker) before it
// reads any client source. Its only channel is the socket it was started with.
//
// The worker's executable (gpukit-compile-worker, compile_worker_main.cc) calls
// RunCompileWorker; CompileSandbox (compile_sandbox.h) starts and supervises workers.
//
// Thread safety: RunCompileWorker owns the process; it is single-threaded by design.
#ifndef GPUKIT_RUNTIME_JIT_COMPILE_WORKER_H_
#define GPUKIT_RUNTIME_JIT_COMPILE_WORKER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace gpukit {

struct CompileWorkerOptions {
  std::string library_dir;  // searched first for libnvrtc; empty: the standard search
  // Address space a compile may add to what the worker has mapped once NVRTC is loaded
  // (RLIMIT_AS): a hostile source cannot make NVRTC take the host's memory. 0: no limit.
  // Not applied in sanitizer builds (their shadow memory).
  int64_t memory_limit_bytes = int64_t{4} << 30;
  // NVRTC's log is cut to this (with a note of how much was cut) before it leaves the worker.
  int64_t max_log_bytes = int64_t{1} << 20;
};

// Serves compile requests on `socket` until gpukitd closes it; returns the process's exit
// status. Sends a WorkerHello first (with the error, and returns 1, when NVRTC cannot be
// loaded or the lock-down fails).
int RunCompileWorker(int socket, const CompileWorkerOptions& options);

// Makes the calling process unable to open, create, stat or execute any file, to start
// processes, to open sockets, to trace or signal other processes, or to gain privileges: a
// seccomp filter (libseccomp) that answers those system calls with EACCES, plus
// PR_SET_NO_NEW_PRIVS, no core dumps, no file writes (RLIMIT_FSIZE 0) and, as root, the
// unprivileged uid 65534. Irreversible. `memory_limit_bytes` > 0 also sets RLIMIT_AS to the
// address space mapped now plus that much.
absl::Status LockDownCompileWorker(int64_t memory_limit_bytes);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_JIT_COMPILE_WORKER_H_
