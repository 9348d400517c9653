#include "runtime/jit/compile_worker.h"

#include <grp.h>
#include <seccomp.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/utf8.h"
#include "runtime/jit/compile_worker_protocol.h"
#include "runtime/jit/library_search.h"
#include "runtime/jit/nvrtc.h"
#include <linux/sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>

namespace gpukit {
namespace {

// System calls that name a file by path or create one: answered with EACCES, so NVRTC
// reports "cannot open source file ...: Permission denied" for every #include that is not a
// named header. Names the architecture lacks (open on aarch64) are skipped.
constexpr const char* kFileCalls[] = {
    "open",
    "openat",
    "openat2",
    "creat",
    "open_by_handle_at",
    "name_to_handle_at",
    "uselib",
    "stat",
    "lstat",
    "statx",
    "newfstatat",
    "fstatat64",
    "statfs",
    "access",
    "faccessat",
    "faccessat2",
    "readlink",
    "readlinkat",
    "getxattr",
    "lgetxattr",
    "listxattr",
    "llistxattr",
    "setxattr",
    "lsetxattr",
    "removexattr",
    "lremovexattr",
    "truncate",
    "mkdir",
    "mkdirat",
    "mknod",
    "mknodat",
    "unlink",
    "unlinkat",
    "rmdir",
    "rename",
    "renameat",
    "renameat2",
    "link",
    "linkat",
    "symlink",
    "symlinkat",
    "chmod",
    "fchmodat",
    "chown",
    "lchown",
    "fchownat",
    "utime",
    "utimes",
    "utimensat",
    "futimesat",
    "chdir",
    "chroot",
    "inotify_add_watch",
    "fanotify_mark",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "mount",
    "umount2",
    "pivot_root",
    "fsopen",
    "fsmount",
    "fspick",
    "open_tree",
    "move_mount",
    "mount_setattr",
};
// Everything else a compiler never needs and an attacker would want.
constexpr const char* kOtherCalls[] = {
    "execve",
    "execveat",
    "fork",
    "vfork",
    "socket",
    "socketpair",
    "connect",
    "bind",
    "listen",
    "accept",
    "accept4",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_open",
    "pidfd_getfd",
    "pidfd_send_signal",
    "tkill",
    "unshare",
    "setns",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "iopl",
    "ioperm",
    "personality",
    "setuid",
    "setgid",
    "setreuid",
    "setregid",
    "setresuid",
    "setresgid",
    "setgroups",
    "setfsuid",
    "setfsgid",
    "capset",
    "memfd_create",
    "name_to_handle_at",
};

absl::Status Errno(const char* what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::Status InstallFilter() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == nullptr) return absl::InternalError("seccomp_init failed");
  std::unique_ptr<void, void (*)(scmp_filter_ctx)> release(ctx, seccomp_release);
  // A system call of another ABI (int 0x80 on x86-64) would bypass rules written for this one.
  if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) != 0) {
    return absl::InternalError("seccomp: cannot set the bad-architecture action");
  }
  auto deny = [&](const char* name) -> absl::Status {
    const int number = seccomp_syscall_resolve_name(name);
    if (number == __NR_SCMP_ERROR) return absl::OkStatus();
    const int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), number, 0);
    // -EEXIST: listed twice; a pseudo-syscall number of another ABI is refused with -EDOM.
    if (rc != 0 && rc != -EEXIST && rc != -EDOM) {
      return absl::InternalError(absl::StrCat("seccomp: cannot deny ", name, ": ", -rc));
    }
    return absl::OkStatus();
  };
  for (const char* name : kFileCalls) GPUKIT_RETURN_IF_ERROR(deny(name));
  for (const char* name : kOtherCalls) GPUKIT_RETURN_IF_ERROR(deny(name));
  // Threads, yes; new processes, no: clone without CLONE_THREAD is refused. clone3 passes its
  // flags in memory, out of the filter's sight, so it answers ENOSYS: glibc then creates
  // threads with clone. Signals only to itself (raise and abort use tgkill on their own pid).
  const auto self = static_cast<scmp_datum_t>(getpid());
  if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0) != 0 ||
      seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(clone), 1,
                       SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0)) != 0 ||
      seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(kill), 1, SCMP_A0(SCMP_CMP_NE, self)) !=
          0 ||
      seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(tgkill), 1,
                       SCMP_A0(SCMP_CMP_NE, self)) != 0) {
    return absl::InternalError("seccomp: cannot add the clone and signal rules");
  }
  if (int rc = seccomp_load(ctx); rc != 0) {
    return absl::InternalError(absl::StrCat("seccomp_load: ", std::strerror(-rc)));
  }
  return absl::OkStatus();
}

std::string CapLog(std::string text, int64_t max_bytes) {
  if (max_bytes > 0 && static_cast<int64_t>(text.size()) > max_bytes) {
    const int64_t cut = static_cast<int64_t>(text.size()) - max_bytes;
    text.resize(static_cast<size_t>(max_bytes));
    absl::StrAppend(&text, "\n[compile log cut: ", cut, " more bytes]");
  }
  // NVRTC's log may quote any bytes of the source; it travels in a protobuf string, which
  // must be UTF-8.
  return ToValidUtf8(std::move(text));
}

// One compile of a template kernel: makes NVRTC load everything it loads lazily (its
// builtins library, the name-lowering code) while files can still be opened.
absl::Status WarmUp(const Nvrtc& nvrtc) {
  const std::vector<int>& archs = nvrtc.supported_archs();
  const std::string arch = absl::StrCat("sm_", archs.empty() ? 80 : archs.back());
  absl::StatusOr<NvrtcOutput> out = nvrtc.Compile(NvrtcInput{
      .source = "#include \"gk_warm.h\"\ntemplate <typename T> __global__ void gk_warm(T* x) "
                "{ x[threadIdx.x] = kWarm; }\n",
      .headers = {{"gk_warm.h", "constexpr int kWarm = 1;\n"}},
      .name_expressions = {"gk_warm<float>"},
      .options = {"--std=c++17"},
      .arch = arch,
      .time_budget = absl::Seconds(120)});
  if (!out.ok()) {
    return absl::Status(out.status().code(),
                        absl::StrCat("compile worker warm-up: ", out.status().message()));
  }
  return absl::OkStatus();
}

// The process's mapped address space (VmSize), read before the filter forbids opening
// /proc; 0 when it cannot be read.
[[maybe_unused]] int64_t MappedBytes() {
  std::FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return 0;
  char line[256];
  int64_t kib = 0;
  while (std::fgets(line, sizeof(line), status) != nullptr) {
    if (std::sscanf(line, "VmSize: %" SCNd64 " kB", &kib) == 1) break;
  }
  std::fclose(status);
  return kib * 1024;
}

}  // namespace

absl::Status LockDownCompileWorker(int64_t memory_limit_bytes) {
  const rlimit no_files{0, 0};
  if (setrlimit(RLIMIT_FSIZE, &no_files) != 0) return Errno("setrlimit(RLIMIT_FSIZE)");
  if (setrlimit(RLIMIT_CORE, &no_files) != 0) return Errno("setrlimit(RLIMIT_CORE)");
#if defined(__SANITIZE_ADDRESS__)
  (void)memory_limit_bytes;  // ASan's shadow memory would count against the limit
#else
  if (memory_limit_bytes > 0) {
    // On top of what the process has mapped by now: NVRTC and the C library reserve address
    // space by the host's size (on a 16-core, 128 GiB H100 host a fixed 4 GiB limit left no
    // room for a single compile), so the limit is what a compile may add.
    const int64_t mapped_bytes = MappedBytes();
    const auto limit = static_cast<rlim_t>(mapped_bytes + memory_limit_bytes);
    const rlimit memory{limit, limit};
    if (setrlimit(RLIMIT_AS, &memory) != 0) return Errno("setrlimit(RLIMIT_AS)");
  }
#endif
  if (geteuid() == 0) {
    constexpr uid_t kNobody = 65534;
    if (setgroups(0, nullptr) != 0) return Errno("setgroups");
    if (setresgid(kNobody, kNobody, kNobody) != 0) return Errno("setresgid");
    if (setresuid(kNobody, kNobody, kNobody) != 0) return Errno("setresuid");
  }
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return Errno("prctl(PR_SET_DUMPABLE)");
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return Errno("prctl(PR_SET_NO_NEW_PRIVS)");
  return InstallFilter();
}

int RunCompileWorker(int socket, const CompileWorkerOptions& options) {
  WorkerHello hello;
  absl::StatusOr<std::unique_ptr<Nvrtc>> nvrtc =
      Nvrtc::Load(CudaLibrarySearchDirs({.explicit_dir = options.library_dir}));
  if (nvrtc.ok()) {
    hello.status = WarmUp(**nvrtc);
    if (hello.status.ok()) hello.status = LockDownCompileWorker(options.memory_limit_bytes);
  } else {
    hello.status = nvrtc.status();
  }
  if (hello.status.ok()) {
    hello.nvrtc_major = (*nvrtc)->major_version();
    hello.nvrtc_minor = (*nvrtc)->minor_version();
    hello.library_path = (*nvrtc)->library_path();
    hello.supported_archs = (*nvrtc)->supported_archs();
  }
  if (!WriteFrame(socket, EncodeWorkerHello(hello)).ok() || !hello.status.ok()) return 1;

  while (true) {
    absl::StatusOr<std::string> frame =
        ReadFrame(socket, kMaxWorkerFrameBytes, absl::InfiniteFuture());
    if (!frame.ok()) return 0;  // gpukitd closed the socket: the normal end
    absl::StatusOr<NvrtcInput> input = DecodeWorkerRequest(*frame);
    if (!input.ok()) return 1;
    WorkerResponse response;
    absl::StatusOr<NvrtcOutput> output = (*nvrtc)->Compile(*input);
    if (output.ok()) {
      response.output = *std::move(output);
      response.output.log = CapLog(std::move(response.output.log), options.max_log_bytes);
    } else if (absl::StrContains(output.status().message(), "catastrophic error: out of memory")) {
      // NVRTC hit the address-space limit: the compile asked too much, which is not the
      // source's fault as a syntax error would be.
      response.status = absl::ResourceExhaustedError(
          absl::StrCat("kernel compilation ran out of its memory limit (",
                       options.memory_limit_bytes >> 20, " MiB, jit.workerMemory): ",
                       CapLog(std::string(output.status().message()), options.max_log_bytes)));
    } else {
      response.status =
          absl::Status(output.status().code(),
                       CapLog(std::string(output.status().message()), options.max_log_bytes));
    }
    if (!WriteFrame(socket, EncodeWorkerResponse(response)).ok()) return 0;
  }
}

}  // namespace gpukit
