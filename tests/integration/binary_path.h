// Where the tests find the programs they run: gpukitd, gpukitctl and the worker.
//
// CMake compiles in each program's path in the build tree (kDaemonPath, kCtlPath,
// kWorkerPath). A test run from a bundle (deploy/bundle.sh copies every executable of the
// build into one bin/ directory and runs the GPU tests on another host) finds no build tree
// there; its programs sit beside its own executable instead. DaemonPath(), CtlPath() and
// WorkerPath() return the build-tree path when that file exists, else the file of the same
// name in the directory of /proc/self/exe when that exists, else the build-tree path (so
// that the error of whoever runs it names the path the build expected).
//
//   std::vector<std::string> argv = {WorkerPath(), "--addr", daemon->address()};
//
// Thread safety: all functions may be called from any thread.
#ifndef GPUKIT_TESTS_INTEGRATION_BINARY_PATH_H_
#define GPUKIT_TESTS_INTEGRATION_BINARY_PATH_H_

#include <string>

namespace gpukit::testing {

// Paths of the binaries under test in the build tree, set by tests/integration/CMakeLists.txt.
inline constexpr char kDaemonPath[] = GPUKIT_DAEMON_PATH;
inline constexpr char kCtlPath[] = GPUKIT_CTL_PATH;
inline constexpr char kWorkerPath[] = GPUKIT_WORKER_PATH;

// `build_path` if it names an executable file, else its file name beside this process's own
// executable if that is one, else `build_path`. Costs a few stat calls.
std::string FindBinary(const std::string& build_path);

inline std::string DaemonPath() { return FindBinary(kDaemonPath); }
inline std::string CtlPath() { return FindBinary(kCtlPath); }
inline std::string WorkerPath() { return FindBinary(kWorkerPath); }

}  // namespace gpukit::testing

#endif  // GPUKIT_TESTS_INTEGRATION_BINARY_PATH_H_
