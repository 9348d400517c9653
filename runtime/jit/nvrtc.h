// Nvrtc: the NVRTC runtime compiler (CUDA C++ source -> cubin), opened with dlopen.
//
// gpukit links no CUDA library. Load() looks for libnvrtc.so.13, then libnvrtc.so.12, then
// libnvrtc.so in the given directories and then through the system loader path, and
// resolves the entry points it uses. NVRTC needs no GPU, so this works on any host that
// has the library.
//
// NVRTC opens its companion libnvrtc-builtins.so.<major>.<minor> by bare name when it first
// compiles, without looking beside itself; a libnvrtc found outside the loader path (a
// bundle's lib/, a Python wheel, a toolkit not in ld.so.conf) would then fail every compile
// with "failed to open libnvrtc-builtins". Load() therefore opens the builtins from
// libnvrtc's own directory first, so that NVRTC's later dlopen finds them already loaded.
// Both stay mapped until the process exits (RTLD_NODELETE), even after the Nvrtc object
// is gone: NVRTC's process-wide state does not survive being unloaded (see nvrtc.cc).
//
//   GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<Nvrtc> nvrtc,
//                           Nvrtc::Load(CudaLibrarySearchDirs({})));
//   GPUKIT_ASSIGN_OR_RETURN(NvrtcOutput out,
//       nvrtc->Compile(source, {"add", "scale<float>"}, {"--use_fast_math"}, "sm_90",
//                      absl::Seconds(30)));
//   // out.cubin is an ELF image for cuModuleLoadData; out.lowered_names[1] is the
//   // mangled name to pass to cuModuleGetFunction for "scale<float>".
//
// Thread safety: all methods are const and may be called concurrently; NVRTC supports
// concurrent compilation of distinct programs, and each Compile uses its own program.
#ifndef GPUKIT_RUNTIME_JIT_NVRTC_H_
#define GPUKIT_RUNTIME_JIT_NVRTC_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "runtime/dynamic_library.h"
#include "runtime/jit/source_compiler.h"

namespace gpukit {

class Nvrtc : public SourceCompiler {
 public:
  // The library names Load tries by default, newest first: libnvrtc.so.13, libnvrtc.so.12,
  // libnvrtc.so.
  static std::vector<std::string> DefaultLibraryNames();

  // FAILED_PRECONDITION "NVRTC JIT compiler not available (...)" when none of
  // `library_names` loads or the one that does lacks a required entry point; the message
  // lists every place it looked.
  static absl::StatusOr<std::unique_ptr<Nvrtc>> Load(
      const std::vector<std::string>& search_dirs,
      const std::vector<std::string>& library_names = DefaultLibraryNames());

  ~Nvrtc() override;
  Nvrtc(const Nvrtc&) = delete;
  Nvrtc& operator=(const Nvrtc&) = delete;

  int major_version() const { return major_; }
  int minor_version() const { return minor_; }
  std::string version_string() const override;  // "13.0"
  const std::string& library_path() const override { return library_.path(); }

  // The SM versions this NVRTC can compile for, as numbers: {75, 80, 86, ..., 90, 100, ...}.
  // Empty when the library cannot say (nvrtcGetSupportedArchs is missing).
  const std::vector<int>& supported_archs() const override { return supported_archs_; }

  // Whether a compile can be cancelled at its time budget (nvrtcSetFlowCallback, which
  // recent releases such as CUDA 13.0 have). Without it, a compile runs to its end and is
  // only then judged late.
  bool can_cancel() const;

  // Compiles `input` in this process (see SourceCompiler::Compile for the errors). NVRTC
  // opens any file the source #includes, with this process's rights: only for sources gpukit
  // trusts, and inside the compile worker, which can open no file.
  absl::StatusOr<NvrtcOutput> Compile(const NvrtcInput& input) const override;
  // The same, for a source without headers.
  absl::StatusOr<NvrtcOutput> Compile(absl::string_view source,
                                      const std::vector<std::string>& name_expressions,
                                      const std::vector<std::string>& options,
                                      absl::string_view arch, absl::Duration time_budget) const;

 private:
  struct Functions;  // the resolved entry points; defined in nvrtc.cc with nvrtc.h's types

  Nvrtc(DynamicLibrary library, std::optional<DynamicLibrary> builtins,
        std::unique_ptr<const Functions> functions);

  // Declared before library_ so that libnvrtc is closed before its builtins.
  std::optional<DynamicLibrary> builtins_;  // none when the loader path provides them
  DynamicLibrary library_;
  std::unique_ptr<const Functions> functions_;
  int major_ = 0;
  int minor_ = 0;
  std::vector<int> supported_archs_;
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_JIT_NVRTC_H_
