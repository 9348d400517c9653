#include "runtime/jit/nvrtc.h"

#include <dlfcn.h>
#include <nvrtc.h>  // types and declarations only; libnvrtc is dlopen'd

#include <atomic>
#include <chrono>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/base/status_macros.h"
#include "runtime/jit/library_search.h"
#include "spdlog/spdlog.h"

namespace gpukit {

// Every entry point Nvrtc resolves. REQUIRED ones must exist for Load() to succeed;
// OPTIONAL ones are left null when the library is too old to have them.
#define GPUKIT_NVRTC_FUNCTIONS(REQUIRED, OPTIONAL) \
  REQUIRED(nvrtcGetErrorString)                    \
  REQUIRED(nvrtcVersion)                           \
  REQUIRED(nvrtcCreateProgram)                     \
  REQUIRED(nvrtcDestroyProgram)                    \
  REQUIRED(nvrtcCompileProgram)                    \
  REQUIRED(nvrtcGetProgramLogSize)                 \
  REQUIRED(nvrtcGetProgramLog)                     \
  REQUIRED(nvrtcGetPTXSize)                        \
  REQUIRED(nvrtcGetPTX)                            \
  REQUIRED(nvrtcGetCUBINSize)                      \
  REQUIRED(nvrtcGetCUBIN)                          \
  REQUIRED(nvrtcAddNameExpression)                 \
  REQUIRED(nvrtcGetLoweredName)                    \
  OPTIONAL(nvrtcGetNumSupportedArchs)              \
  OPTIONAL(nvrtcGetSupportedArchs)                 \
  OPTIONAL(nvrtcSetFlowCallback)

struct Nvrtc::Functions {
// NOLINTNEXTLINE(bugprone-macro-parentheses): `name` is a declarator, not an expression
#define GPUKIT_NVRTC_FIELD(name) decltype(&::name) name = nullptr;
  GPUKIT_NVRTC_FUNCTIONS(GPUKIT_NVRTC_FIELD, GPUKIT_NVRTC_FIELD)
#undef GPUKIT_NVRTC_FIELD
};

namespace {

constexpr char kProgramName[] = "kernel.cu";

absl::Status NotAvailable(absl::string_view why) {
  return absl::FailedPreconditionError(
      absl::StrCat("NVRTC JIT compiler not available (", why, ")"));
}

// What the flow callback reads while NVRTC compiles. NVRTC may call it from its own
// threads, so it only touches atomics and the immutable deadline.
struct FlowState {
  std::chrono::steady_clock::time_point deadline;
  std::atomic<bool> cancelled{false};
};

// Returns 1 (cancel) once the deadline has passed, and from then on always 1, as NVRTC
// requires.
int CancelAtDeadline(void* payload, void* /*reserved*/) {
  auto* state = static_cast<FlowState*>(payload);
  if (state->cancelled.load(std::memory_order_relaxed)) return 1;
  if (std::chrono::steady_clock::now() < state->deadline) return 0;
  state->cancelled.store(true, std::memory_order_relaxed);
  return 1;
}

// Keeps an already loaded library mapped until the process exits, whatever dlclose calls
// follow. NVRTC keeps process-wide state (heap blocks reachable only from its own globals,
// thread-local data) that unmapping would orphan: each load/unload cycle would leak it, and
// a thread-local destructor pointing into unmapped code would crash at thread exit. libcuda
// is never closed either (cuda_driver.h).
void KeepLoaded(const std::string& path) {
  if (dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE) == nullptr) {
    const char* error = dlerror();
    spdlog::debug("NVRTC: cannot pin {}: {}", path, error != nullptr ? error : "unknown error");
  }
}

// Owns an nvrtcProgram for one Compile call.
class Program {
 public:
  Program(decltype(&::nvrtcDestroyProgram) destroy, nvrtcProgram program)
      : destroy_(destroy), program_(program) {}
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  ~Program() {
    if (program_ != nullptr) destroy_(&program_);
  }
  nvrtcProgram get() const { return program_; }

 private:
  decltype(&::nvrtcDestroyProgram) destroy_;
  nvrtcProgram program_;
};

}  // namespace

std::vector<std::string> Nvrtc::DefaultLibraryNames() {
  return {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
}

absl::StatusOr<std::unique_ptr<Nvrtc>> Nvrtc::Load(const std::vector<std::string>& search_dirs,
                                                   const std::vector<std::string>& library_names) {
  absl::StatusOr<DynamicLibrary> library = OpenFirstLibrary(library_names, search_dirs);
  if (!library.ok()) return NotAvailable(library.status().message());
  KeepLoaded(library->path());

  auto functions = std::make_unique<Functions>();
#define GPUKIT_NVRTC_REQUIRED(name)                                   \
  {                                                                   \
    absl::StatusOr<void*> symbol = library->Symbol(#name);            \
    if (!symbol.ok()) return NotAvailable(symbol.status().message()); \
    functions->name = reinterpret_cast<decltype(&::name)>(*symbol);   \
  }
#define GPUKIT_NVRTC_OPTIONAL(name)                                                  \
  {                                                                                  \
    absl::StatusOr<void*> symbol = library->Symbol(#name);                           \
    if (symbol.ok()) functions->name = reinterpret_cast<decltype(&::name)>(*symbol); \
  }
  GPUKIT_NVRTC_FUNCTIONS(GPUKIT_NVRTC_REQUIRED, GPUKIT_NVRTC_OPTIONAL)
#undef GPUKIT_NVRTC_REQUIRED
#undef GPUKIT_NVRTC_OPTIONAL

  int major = 0;
  int minor = 0;
  if (nvrtcResult result = functions->nvrtcVersion(&major, &minor); result != NVRTC_SUCCESS) {
    return NotAvailable(absl::StrCat(
        library->path(), ": nvrtcVersion failed: ", functions->nvrtcGetErrorString(result)));
  }

  // NVRTC dlopens its builtins by bare name; load them from libnvrtc's own directory first
  // (see the header). A library found through the loader path has its builtins there too.
  std::optional<DynamicLibrary> builtins;
  const std::string dir = std::filesystem::path(library->path()).parent_path().string();
  if (!dir.empty()) {
    const std::string builtins_name = absl::StrCat("libnvrtc-builtins.so.", major, ".", minor);
    std::error_code error;
    if (std::filesystem::exists(dir + "/" + builtins_name, error)) {
      absl::StatusOr<DynamicLibrary> opened = DynamicLibrary::Open(builtins_name, {dir});
      if (opened.ok()) {
        KeepLoaded(opened->path());
        builtins = *std::move(opened);
      } else {
        spdlog::warn("NVRTC: {}", std::string(opened.status().message()));
      }
    } else {
      spdlog::debug("NVRTC: no {} beside {}; relying on the loader path", builtins_name,
                    library->path());
    }
  }

  auto nvrtc = std::unique_ptr<Nvrtc>(
      new Nvrtc(*std::move(library), std::move(builtins), std::move(functions)));
  nvrtc->major_ = major;
  nvrtc->minor_ = minor;
  int count = 0;
  if (nvrtc->functions_->nvrtcGetNumSupportedArchs != nullptr &&
      nvrtc->functions_->nvrtcGetSupportedArchs != nullptr &&
      nvrtc->functions_->nvrtcGetNumSupportedArchs(&count) == NVRTC_SUCCESS && count > 0) {
    std::vector<int> archs(count);
    if (nvrtc->functions_->nvrtcGetSupportedArchs(archs.data()) == NVRTC_SUCCESS) {
      nvrtc->supported_archs_ = std::move(archs);
    }
  }
  spdlog::info("NVRTC {} loaded from {} (architectures: {})", nvrtc->version_string(),
               nvrtc->library_path(),
               nvrtc->supported_archs_.empty()
                   ? std::string("not listed")
                   : absl::StrCat("sm_", absl::StrJoin(nvrtc->supported_archs_, ", sm_")));
  return nvrtc;
}

Nvrtc::Nvrtc(DynamicLibrary library, std::optional<DynamicLibrary> builtins,
             std::unique_ptr<const Functions> functions)
    : builtins_(std::move(builtins)),
      library_(std::move(library)),
      functions_(std::move(functions)) {}

Nvrtc::~Nvrtc() = default;

std::string Nvrtc::version_string() const { return absl::StrCat(major_, ".", minor_); }

bool Nvrtc::can_cancel() const { return functions_->nvrtcSetFlowCallback != nullptr; }

absl::StatusOr<NvrtcOutput> Nvrtc::Compile(absl::string_view source,
                                           const std::vector<std::string>& name_expressions,
                                           const std::vector<std::string>& options,
                                           absl::string_view arch,
                                           absl::Duration time_budget) const {
  return Compile(NvrtcInput{.source = std::string(source),
                            .name_expressions = name_expressions,
                            .options = options,
                            .arch = std::string(arch),
                            .time_budget = time_budget});
}

absl::StatusOr<NvrtcOutput> Nvrtc::Compile(const NvrtcInput& input) const {
  const std::vector<std::string>& name_expressions = input.name_expressions;
  const std::vector<std::string>& options = input.options;
  const absl::string_view arch = input.arch;
  const absl::Duration time_budget = input.time_budget;
  const Functions& fn = *functions_;
  auto call_failed = [&](const char* call, nvrtcResult result) {
    return absl::InternalError(absl::StrCat(call, ": ", fn.nvrtcGetErrorString(result)));
  };
  const auto start = std::chrono::steady_clock::now();

  // nvrtcCreateProgram takes NUL-terminated strings.
  std::vector<const char*> header_texts;
  std::vector<const char*> header_names;
  for (const auto& [name, text] : input.headers) {
    header_names.push_back(name.c_str());
    header_texts.push_back(text.c_str());
  }
  nvrtcProgram raw_program = nullptr;
  if (nvrtcResult result = fn.nvrtcCreateProgram(&raw_program, input.source.c_str(), kProgramName,
                                                 static_cast<int>(header_names.size()),
                                                 header_texts.data(), header_names.data());
      result != NVRTC_SUCCESS) {
    if (result == NVRTC_ERROR_OUT_OF_MEMORY) {
      return absl::ResourceExhaustedError("nvrtcCreateProgram: out of memory");
    }
    return call_failed("nvrtcCreateProgram", result);
  }
  const Program program(fn.nvrtcDestroyProgram, raw_program);

  for (const std::string& name : name_expressions) {
    if (nvrtcResult result = fn.nvrtcAddNameExpression(program.get(), name.c_str());
        result != NVRTC_SUCCESS) {
      return absl::InvalidArgumentError(absl::StrCat("entry name \"", name, "\" was refused by ",
                                                     "NVRTC: ", fn.nvrtcGetErrorString(result)));
    }
  }

  FlowState flow;
  const bool has_deadline = time_budget != absl::InfiniteDuration();
  if (has_deadline) {
    flow.deadline = start + absl::ToChronoNanoseconds(time_budget);
    if (fn.nvrtcSetFlowCallback != nullptr) {
      if (nvrtcResult result = fn.nvrtcSetFlowCallback(program.get(), &CancelAtDeadline, &flow);
          result != NVRTC_SUCCESS) {
        return call_failed("nvrtcSetFlowCallback", result);
      }
    }
  }

  std::vector<std::string> all_options = options;
  all_options.push_back(absl::StrCat("--gpu-architecture=", arch));
  std::vector<const char*> option_pointers;
  option_pointers.reserve(all_options.size());
  for (const std::string& option : all_options) option_pointers.push_back(option.c_str());
  const nvrtcResult compiled = fn.nvrtcCompileProgram(
      program.get(), static_cast<int>(option_pointers.size()), option_pointers.data());
  const absl::Duration compile_time = absl::FromChrono(std::chrono::steady_clock::now() - start);

  NvrtcOutput output;
  output.compile_time = compile_time;
  size_t log_bytes = 0;
  if (fn.nvrtcGetProgramLogSize(program.get(), &log_bytes) == NVRTC_SUCCESS && log_bytes > 1) {
    output.log.resize(log_bytes);
    if (fn.nvrtcGetProgramLog(program.get(), output.log.data()) != NVRTC_SUCCESS) {
      output.log.clear();
    }
    while (!output.log.empty() && (output.log.back() == '\0' || output.log.back() == '\n')) {
      output.log.pop_back();
    }
  }

  if (compiled == NVRTC_ERROR_CANCELLED ||
      (compiled == NVRTC_SUCCESS && has_deadline && compile_time > time_budget)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "kernel compilation took longer than its budget of ", absl::FormatDuration(time_budget),
        " and was ", compiled == NVRTC_ERROR_CANCELLED ? "cancelled" : "discarded"));
  }
  switch (compiled) {
    case NVRTC_SUCCESS:
      break;
    case NVRTC_ERROR_COMPILATION:
      return absl::InvalidArgumentError(
          absl::StrCat("kernel compilation failed for ", arch, ":\n", output.log));
    case NVRTC_ERROR_INVALID_OPTION:
      return absl::InvalidArgumentError(absl::StrCat(
          "NVRTC refused the options [", absl::StrJoin(all_options, " "), "]: ", output.log));
    case NVRTC_ERROR_OUT_OF_MEMORY:
      return absl::ResourceExhaustedError("NVRTC ran out of memory compiling the kernel");
    case NVRTC_ERROR_BUILTIN_OPERATION_FAILURE:
      return absl::FailedPreconditionError(
          absl::StrCat("NVRTC installation at ", library_path(), " is broken: ", output.log));
    default:
      return absl::InternalError(absl::StrCat(
          "nvrtcCompileProgram: ", fn.nvrtcGetErrorString(compiled), ": ", output.log));
  }

  for (const std::string& name : name_expressions) {
    const char* lowered = nullptr;
    if (nvrtcResult result = fn.nvrtcGetLoweredName(program.get(), name.c_str(), &lowered);
        result != NVRTC_SUCCESS || lowered == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "entry name \"", name, "\" names no kernel: ", fn.nvrtcGetErrorString(result)));
    }
    output.lowered_names.emplace_back(lowered);
  }

  if (absl::StartsWith(arch, "compute_")) {
    size_t ptx_bytes = 0;
    if (nvrtcResult result = fn.nvrtcGetPTXSize(program.get(), &ptx_bytes);
        result != NVRTC_SUCCESS) {
      return call_failed("nvrtcGetPTXSize", result);
    }
    output.ptx.resize(ptx_bytes);
    if (nvrtcResult result = fn.nvrtcGetPTX(program.get(), output.ptx.data());
        result != NVRTC_SUCCESS) {
      return call_failed("nvrtcGetPTX", result);
    }
    while (!output.ptx.empty() && output.ptx.back() == '\0') output.ptx.pop_back();
  } else {
    size_t cubin_bytes = 0;
    if (nvrtcResult result = fn.nvrtcGetCUBINSize(program.get(), &cubin_bytes);
        result != NVRTC_SUCCESS) {
      return call_failed("nvrtcGetCUBINSize", result);
    }
    output.cubin.resize(cubin_bytes);
    if (nvrtcResult result = fn.nvrtcGetCUBIN(program.get(), output.cubin.data());
        result != NVRTC_SUCCESS) {
      return call_failed("nvrtcGetCUBIN", result);
    }
  }
  return output;
}

}  // namespace gpukit
