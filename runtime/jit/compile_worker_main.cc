// gpukit-compile-worker: started by gpukitd (CompileSandbox), never by hand. Its socket is
// file descriptor 3. See runtime/jit/compile_worker.h.
//
//   gpukit-compile-worker [--nvrtc-dir=DIR] [--memory-limit-bytes=N] [--max-log-bytes=N]
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "runtime/base/mutex_mode.h"
#include "runtime/jit/compile_worker.h"
#include "spdlog/spdlog.h"
#include <linux/close_range.h>
#include <sys/syscall.h>

int main(int argc, char** argv) {
  // Nothing of gpukitd's but the socket stays open here (descriptors it did not mark
  // close-on-exec included); stderr stays for a fatal message.
  syscall(SYS_close_range, 4, ~0U, 0);
  gpukit::UseFastMutexes();
  gpukit::CompileWorkerOptions options;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    bool ok = true;
    if (absl::ConsumePrefix(&arg, "--nvrtc-dir=")) {
      options.library_dir = std::string(arg);
    } else if (absl::ConsumePrefix(&arg, "--memory-limit-bytes=")) {
      ok = absl::SimpleAtoi(arg, &options.memory_limit_bytes);
    } else if (absl::ConsumePrefix(&arg, "--max-log-bytes=")) {
      ok = absl::SimpleAtoi(arg, &options.max_log_bytes);
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "gpukit-compile-worker: bad argument %s (started by gpukitd only)\n",
                   argv[i]);
      return 2;
    }
  }
  spdlog::set_level(spdlog::level::warn);  // gpukitd logs what matters about its workers
  const int status = gpukit::RunCompileWorker(3, options);
  // _exit: no exit handlers, which could try to open files (sanitizers' reports) and be
  // refused by the filter.
  _exit(status);
}
