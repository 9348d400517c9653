// SourceCompiler: CUDA C++ source in, device code out. Two implementations: Nvrtc (nvrtc.h)
// runs NVRTC in the calling process, for sources gpukit trusts and inside the compile worker;
// CompileSandbox (compile_sandbox.h) runs it in worker processes that can open no file, which
// is how gpukitd compiles every kernel (clients' sources can be hostile, see docs/security.md).
// JitCompiler (jit_compiler.h) puts validation and the kernel cache in front of either.
//
//   NvrtcInput input{.source = src, .name_expressions = {"add"}, .arch = "sm_90",
//                    .time_budget = absl::Seconds(30)};
//   GPUKIT_ASSIGN_OR_RETURN(NvrtcOutput out, compiler.Compile(input));
//
// Thread safety: implementations allow concurrent calls of every method.
#ifndef GPUKIT_RUNTIME_JIT_SOURCE_COMPILER_H_
#define GPUKIT_RUNTIME_JIT_SOURCE_COMPILER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gpukit {

struct NvrtcInput {
  std::string source;  // named "kernel.cu" in messages
  // Headers the source may #include by these exact names (NVRTC's named headers): the only
  // files a compile can see besides the source.
  std::vector<std::pair<std::string, std::string>> headers;  // (include name, text)
  // Each is registered with nvrtcAddNameExpression; its lowered name comes back in order.
  std::vector<std::string> name_expressions;
  std::vector<std::string> options;  // passed as they are, plus --gpu-architecture=<arch>
  std::string arch;                  // "sm_90" gives a cubin, "compute_90" PTX
  absl::Duration time_budget = absl::InfiniteDuration();
};

struct NvrtcOutput {
  std::string cubin;  // ELF image; set when the arch is a real one (sm_XX)
  std::string ptx;    // set instead when the arch is virtual (compute_XX)
  // The mangled name of each name expression, in the order given. For an extern "C" kernel
  // it is the kernel's own name.
  std::vector<std::string> lowered_names;
  std::string log;  // NVRTC's warnings; empty when there are none
  absl::Duration compile_time;
};

class SourceCompiler {
 public:
  virtual ~SourceCompiler() = default;

  virtual std::string version_string() const = 0;       // NVRTC's: "13.0"
  virtual const std::string& library_path() const = 0;  // where libnvrtc was loaded from
  // The SM versions it can compile for ({80, 86, 90, ...}); empty when NVRTC cannot say.
  virtual const std::vector<int>& supported_archs() const = 0;

  // Errors (both implementations):
  //   INVALID_ARGUMENT: the source does not compile, an option is refused by NVRTC, or a
  //     name expression names no kernel; the message holds NVRTC's log.
  //   DEADLINE_EXCEEDED: the compile ran past input.time_budget.
  //   RESOURCE_EXHAUSTED: NVRTC ran out of memory (in the sandbox: its memory limit).
  //   FAILED_PRECONDITION: NVRTC's installation is broken (builtins missing).
  //   INTERNAL: any other NVRTC failure; in the sandbox also a worker that died.
  virtual absl::StatusOr<NvrtcOutput> Compile(const NvrtcInput& input) const = 0;
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_JIT_SOURCE_COMPILER_H_
