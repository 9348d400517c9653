#include "client/cpp/gpukitctl_args.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "runtime/base/units.h"

namespace gpukit::ctl {
namespace {

// Command flags that take a value, and those that do not.
const std::vector<std::string>& ValueFlags() {
  static const auto* const kFlags = new std::vector<std::string>{
      "--device",
      "--memory",
      "--compute",
      "--bandwidth",
      "--max-queued",
      "--max-running",
      "--max-sessions",
      "--default-memory-request",
      "--default-memory-limit",
      "--default-compute-request",
      "--default-compute-limit",
      "--partition",
      "--state",
      "--limit",
      "--interval",
      "--iterations",
  };
  return *kFlags;
}

const std::vector<std::string>& BoolFlags() {
  static const auto* const kFlags =
      new std::vector<std::string>{"--spill", "--reserve-sms", "--force"};
  return *kFlags;
}

bool Contains(const std::vector<std::string>& list, absl::string_view name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

absl::Status Invalid(absl::string_view flag, absl::string_view value, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(flag, " \"", value, "\" is not ", what));
}

absl::StatusOr<int64_t> Bytes(absl::string_view flag, const std::string& value) {
  absl::StatusOr<int64_t> bytes = ParseBytes(value);
  if (!bytes.ok()) return Invalid(flag, value, "a size (e.g. 512MiB, 8GiB, 4096)");
  return *bytes;
}

absl::StatusOr<double> Share(absl::string_view flag, const std::string& value) {
  double share = 0;
  // Written so that NaN fails too.
  if (!absl::SimpleAtod(value, &share) || !(share >= 0.0 && share <= 1.0)) {
    return Invalid(flag, value, "a share of the device between 0 and 1 (e.g. 0.25)");
  }
  return share;
}

absl::StatusOr<int32_t> Count(absl::string_view flag, const std::string& value, int32_t min = 0) {
  int32_t count = 0;
  if (!absl::SimpleAtoi(value, &count) || count < min) {
    return Invalid(flag, value, absl::StrCat("a whole number >= ", min));
  }
  return count;
}

absl::StatusOr<bool> Bool(absl::string_view flag, const std::string& value) {
  bool b = false;
  if (!absl::SimpleAtob(value, &b)) return Invalid(flag, value, "true or false");
  return b;
}

}  // namespace

absl::StatusOr<CommandLine> ParseCommandLine(int argc, const char* const* argv) {
  CommandLine line;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    const size_t eq = arg.find('=');
    const bool inline_value = absl::StartsWith(arg, "--") && eq != std::string::npos;
    if (inline_value) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    auto next = [&]() -> absl::StatusOr<std::string> {
      if (inline_value) return value;
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(arg, " needs a value"));
      return std::string(argv[++i]);
    };
    if (arg == "--help" || arg == "-h") {
      line.help = true;
    } else if (arg == "--version") {
      line.version = true;
    } else if (arg == "--addr") {
      absl::StatusOr<std::string> v = next();
      if (!v.ok()) return v.status();
      // An empty value is a mistake (an unset shell variable), not a request for the default:
      // falling back to $GPUKIT_ADDR would talk to a daemon the operator did not name.
      if (v->empty()) {
        return absl::InvalidArgumentError(
            "--addr is empty; give an address (unix:///path.sock or host:port), or leave --addr "
            "out to use $GPUKIT_ADDR or the default socket");
      }
      line.global.addr = *v;
    } else if (arg == "-o" || arg == "--output") {
      absl::StatusOr<std::string> v = next();
      if (!v.ok()) return v.status();
      if (*v == "table") {
        line.global.output = OutputFormat::kTable;
      } else if (*v == "json") {
        line.global.output = OutputFormat::kJson;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("output format \"", *v, "\" is not table or json"));
      }
    } else if (arg == "--token" || arg == "--tls-ca" || arg == "--tls-cert" || arg == "--tls-key") {
      absl::StatusOr<std::string> v = next();
      if (!v.ok()) return v.status();
      if (v->empty()) return absl::InvalidArgumentError(absl::StrCat(arg, " is empty"));
      (arg == "--token"      ? line.global.token
       : arg == "--tls-ca"   ? line.global.tls_ca_file
       : arg == "--tls-cert" ? line.global.tls_cert_file
                             : line.global.tls_key_file) = *v;
    } else if (arg == "--timeout") {
      absl::StatusOr<std::string> v = next();
      if (!v.ok()) return v.status();
      if (!absl::ParseDuration(*v, &line.global.timeout) ||
          line.global.timeout <= absl::ZeroDuration()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--timeout \"", *v, "\" is not a positive duration"));
      }
    } else if (Contains(ValueFlags(), arg)) {
      absl::StatusOr<std::string> v = next();
      if (!v.ok()) return v.status();
      line.flags[arg] = *v;
    } else if (Contains(BoolFlags(), arg)) {
      line.flags[arg] = inline_value ? value : "true";
    } else if (arg == "--no-spill" && !inline_value) {
      line.flags["--spill"] = "false";
    } else if (arg == "--no-reserve-sms" && !inline_value) {
      line.flags["--reserve-sms"] = "false";
    } else if (arg.size() > 1 && arg[0] == '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag ", arg, " (see gpukitctl --help)"));
    } else {
      line.words.push_back(arg);
    }
  }
  return line;
}

absl::Status CheckFlagsAllowed(const FlagMap& flags, const std::vector<std::string>& allowed,
                               absl::string_view command) {
  for (const auto& [name, value] : flags) {
    if (!Contains(allowed, name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "flag ", name, " does not apply to \"", command, "\"",
          allowed.empty() ? std::string(", which takes no flags")
                          : absl::StrCat("; its flags: ", absl::StrJoin(allowed, " "))));
    }
  }
  return absl::OkStatus();
}

const std::vector<std::string>& PartitionFlagNames() {
  static const auto* const kFlags = new std::vector<std::string>{
      "--device",
      "--memory",
      "--compute",
      "--bandwidth",
      "--max-queued",
      "--max-running",
      "--max-sessions",
      "--spill",
      "--reserve-sms",
      "--default-memory-request",
      "--default-memory-limit",
      "--default-compute-request",
      "--default-compute-limit",
  };
  return *kFlags;
}

absl::StatusOr<PartitionFlags> ParsePartitionFlags(const std::string& name, const FlagMap& flags) {
  PartitionFlags out;
  v1::Partition& p = out.partition;
  p.set_name(name);
  auto get = [&](absl::string_view flag) -> const std::string* {
    auto it = flags.find(std::string(flag));
    return it == flags.end() ? nullptr : &it->second;
  };
  if (const std::string* v = get("--device")) {
    int32_t device = 0;
    if (!absl::SimpleAtoi(*v, &device) || device < 0) {
      return Invalid("--device", *v, "a device index (0, 1, ...)");
    }
    p.set_device_index(device);
    out.fields.push_back("device_index");
  }
  if (const std::string* v = get("--memory")) {
    absl::StatusOr<int64_t> bytes = Bytes("--memory", *v);
    if (!bytes.ok()) return bytes.status();
    p.set_memory_quota_bytes(*bytes);
    out.fields.push_back("memory_quota_bytes");
  }
  if (const std::string* v = get("--compute")) {
    absl::StatusOr<double> share = Share("--compute", *v);
    if (!share.ok()) return share.status();
    p.set_compute_share(*share);
    out.fields.push_back("compute_share");
  }
  if (const std::string* v = get("--bandwidth")) {
    absl::StatusOr<double> share = Share("--bandwidth", *v);
    if (!share.ok()) return share.status();
    p.set_bandwidth_cap(*share);
    out.fields.push_back("bandwidth_cap");
  }
  struct CountFlag {
    const char* flag;
    const char* field;
    void (v1::Partition::*set)(int32_t);
    // The daemon reads 0 queued or running tasks as "the default" (1024, 64), also in an
    // update: refuse it rather than surprise.
    int32_t min;
  };
  for (const CountFlag& c :
       {CountFlag{"--max-queued", "max_queued_tasks", &v1::Partition::set_max_queued_tasks, 1},
        CountFlag{"--max-running", "max_running_tasks", &v1::Partition::set_max_running_tasks, 1},
        CountFlag{"--max-sessions", "max_sessions", &v1::Partition::set_max_sessions, 0}}) {
    if (const std::string* v = get(c.flag)) {
      absl::StatusOr<int32_t> count = Count(c.flag, *v, c.min);
      if (!count.ok()) return count.status();
      (p.*c.set)(*count);
      out.fields.push_back(c.field);
    }
  }
  if (const std::string* v = get("--spill")) {
    absl::StatusOr<bool> spill = Bool("--spill", *v);
    if (!spill.ok()) return spill.status();
    p.set_spill(*spill);
    out.fields.push_back("spill");
  }
  v1::ResourceRequirements& d = out.session_defaults;
  bool any_default = false;
  if (const std::string* v = get("--default-memory-request")) {
    absl::StatusOr<int64_t> bytes = Bytes("--default-memory-request", *v);
    if (!bytes.ok()) return bytes.status();
    d.mutable_requests()->set_memory_bytes(*bytes);
    any_default = true;
  }
  if (const std::string* v = get("--default-memory-limit")) {
    absl::StatusOr<int64_t> bytes = Bytes("--default-memory-limit", *v);
    if (!bytes.ok()) return bytes.status();
    d.mutable_limits()->set_memory_bytes(*bytes);
    any_default = true;
  }
  if (const std::string* v = get("--default-compute-request")) {
    absl::StatusOr<double> share = Share("--default-compute-request", *v);
    if (!share.ok()) return share.status();
    d.mutable_requests()->set_compute(*share);
    any_default = true;
  }
  if (const std::string* v = get("--default-compute-limit")) {
    absl::StatusOr<double> share = Share("--default-compute-limit", *v);
    if (!share.ok()) return share.status();
    d.mutable_limits()->set_compute(*share);
    any_default = true;
  }
  if (any_default) {
    *p.mutable_session_defaults() = d;
    out.fields.push_back("session_defaults");
  }
  if (const std::string* v = get("--reserve-sms")) {
    absl::StatusOr<bool> reserve = Bool("--reserve-sms", *v);
    if (!reserve.ok()) return reserve.status();
    p.set_reserve_sms(*reserve);
    out.fields.push_back("reserve_sms");
  }
  return out;
}

void MergeResources(const v1::ResourceRequirements& given, v1::ResourceRequirements* current) {
  if (given.requests().has_memory_bytes()) {
    current->mutable_requests()->set_memory_bytes(given.requests().memory_bytes());
  }
  if (given.requests().has_compute()) {
    current->mutable_requests()->set_compute(given.requests().compute());
  }
  if (given.limits().has_memory_bytes()) {
    current->mutable_limits()->set_memory_bytes(given.limits().memory_bytes());
  }
  if (given.limits().has_compute())
    current->mutable_limits()->set_compute(given.limits().compute());
}

absl::StatusOr<v1::TaskState> ParseTaskState(absl::string_view text) {
  std::string name = absl::AsciiStrToUpper(text);
  if (!absl::StartsWith(name, "TASK_STATE_")) name = absl::StrCat("TASK_STATE_", name);
  v1::TaskState state = v1::TASK_STATE_UNSPECIFIED;
  if (name != "TASK_STATE_UNSPECIFIED" && v1::TaskState_Parse(name, &state)) return state;
  std::vector<std::string> names;
  const google::protobuf::EnumDescriptor* descriptor = v1::TaskState_descriptor();
  for (int i = 0; i < descriptor->value_count(); ++i) {
    if (descriptor->value(i)->number() == v1::TASK_STATE_UNSPECIFIED) continue;
    names.push_back(
        absl::AsciiStrToLower(absl::StripPrefix(descriptor->value(i)->name(), "TASK_STATE_")));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--state \"", text, "\" is not a task state; states: ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<v1::ListTasksRequest> ParseListTasksFlags(const FlagMap& flags) {
  v1::ListTasksRequest request;
  if (auto it = flags.find("--partition"); it != flags.end()) {
    if (it->second.empty()) return Invalid("--partition", it->second, "a partition name");
    request.set_partition(it->second);
  }
  if (auto it = flags.find("--state"); it != flags.end()) {
    absl::StatusOr<v1::TaskState> state = ParseTaskState(it->second);
    if (!state.ok()) return state.status();
    request.set_state(*state);
  }
  if (auto it = flags.find("--limit"); it != flags.end()) {
    absl::StatusOr<int32_t> limit = Count("--limit", it->second);
    if (!limit.ok()) return limit.status();
    request.set_limit(*limit);
  }
  return request;
}

absl::StatusOr<uint64_t> ParseTaskId(absl::string_view text) {
  uint64_t id = 0;
  if (!absl::SimpleAtoi(text, &id) || id == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("task ID \"", text, "\" is not a task ID (see gpukitctl tasks)"));
  }
  return id;
}

absl::StatusOr<TopOptions> ParseTopFlags(const FlagMap& flags) {
  TopOptions options;
  if (auto it = flags.find("--interval"); it != flags.end()) {
    if (!absl::ParseDuration(it->second, &options.interval) ||
        options.interval <= absl::ZeroDuration()) {
      return Invalid("--interval", it->second, "a positive duration (e.g. 500ms, 2s)");
    }
  }
  if (auto it = flags.find("--iterations"); it != flags.end()) {
    if (!absl::SimpleAtoi(it->second, &options.iterations) || options.iterations < 0) {
      return Invalid("--iterations", it->second, "a whole number >= 0 (0: until interrupted)");
    }
  }
  return options;
}

}  // namespace gpukit::ctl
