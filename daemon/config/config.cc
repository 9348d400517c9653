#include "daemon/config/config.h"

#include <fstream>
#include <cstdlib>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/config/json_syntax.h"
#include "google/protobuf/util/json_util.h"
#include "gpukit/config/v1/daemon_config.pb.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/units.h"

namespace gpukit {
namespace {

constexpr absl::string_view kDefaultConfig = R"json({
  "listen": [],
  "backend": "auto",
  "logLevel": "info",
  "cpu": {"memory": "4GiB"},
  "limits": {"maxArraySize": "2GiB", "maxSessions": 1024, "maxArraysPerSession": 65536,
             "maxKernelsPerSession": 256, "maxOpsInFlight": 128},
  "sessions": {"defaultLease": "30s", "minLease": "1s", "maxLease": "10m"},
  "streamsPerPartition": 2,
  "partitions": [],
  "scheduler": {"pacingBurst": "20ms", "taskHistory": 1000, "bestEffortInFlight": "1ms",
                "burstableInFlight": "4ms", "pacingAnticipation": "0s"},
  "jit": {"cacheDir": "", "memoryCache": "256MiB", "compileTimeout": "30s", "cpuArch": "sm_90"},
  "server": {"maxThreads": 256, "submitSocket": true},
  "executor": {"mode": "process", "launchDeadline": "30s", "standby": true},
  "qos": {"bestEffortSlice": "100us", "burstableSlice": "500us", "bestEffortSmShare": 1}
}
)json";

absl::Status CheckLogLevel(absl::string_view level) {
  for (absl::string_view known : {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
    if (level == known) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "log level \"", level, "\" is not one of trace, debug, info, warn, error, critical, off"));
}

absl::StatusOr<absl::Duration> ParsePositiveDuration(const std::string& text,
                                                     absl::string_view field) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = \"", text, "\" is not a positive duration such as 30s or 5m"));
  }
  return d;
}

absl::StatusOr<absl::Duration> ParseNonNegativeDuration(const std::string& text,
                                                        absl::string_view field) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = \"", text, "\" is not a duration of 0s or more, such as 250us"));
  }
  return d;
}

absl::StatusOr<absl::Duration> ParseSliceLength(const std::string& text, absl::string_view field) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d < absl::ZeroDuration() || d > absl::Seconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " = \"", text, "\" is not a duration from 0s (never slice) to 1s, such as 100us"));
  }
  return d;
}

absl::StatusOr<int64_t> ParsePositiveBytes(const std::string& text, absl::string_view field) {
  absl::StatusOr<int64_t> bytes = ParseBytes(text);
  if (!bytes.ok())
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", bytes.status().message()));
  if (*bytes <= 0)
    return absl::InvalidArgumentError(absl::StrCat(field, " = \"", text, "\" must be > 0"));
  return *bytes;
}

absl::StatusOr<std::optional<int64_t>> OptionalBytes(const std::string& text,
                                                     absl::string_view field) {
  if (text.empty()) return std::optional<int64_t>();
  absl::StatusOr<int64_t> bytes = ParseBytes(text);
  if (!bytes.ok())
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", bytes.status().message()));
  return std::optional<int64_t>(*bytes);
}

absl::StatusOr<PartitionSpec> PartitionFromConfig(
    const gpukit::config::v1::PartitionConfig& in) {
  PartitionSpec spec;
  spec.name = in.name();
  spec.device_index = in.device();
  if (in.memory().empty()) return absl::InvalidArgumentError("memory is required, e.g. \"8GiB\"");
  GPUKIT_ASSIGN_OR_RETURN(spec.memory_quota_bytes, ParsePositiveBytes(in.memory(), "memory"));
  spec.compute_share = in.compute();
  spec.bandwidth_cap = in.bandwidth();
  if (in.max_queued_tasks() != 0) spec.max_queued_tasks = in.max_queued_tasks();
  if (in.max_running_tasks() != 0) spec.max_running_tasks = in.max_running_tasks();
  spec.max_sessions = in.max_sessions();
  spec.spill = in.spill();
  spec.reserve_sms = in.reserve_sms();
  ResourceSpec& defaults = spec.session_defaults;
  GPUKIT_ASSIGN_OR_RETURN(defaults.memory_request_bytes,
                          OptionalBytes(in.default_requests().memory(), "defaultRequests.memory"));
  GPUKIT_ASSIGN_OR_RETURN(defaults.memory_limit_bytes,
                          OptionalBytes(in.default_limits().memory(), "defaultLimits.memory"));
  if (in.default_requests().has_compute()) {
    defaults.compute_request = in.default_requests().compute();
  }
  if (in.default_limits().has_compute()) defaults.compute_limit = in.default_limits().compute();
  GPUKIT_RETURN_IF_ERROR(ValidatePartitionSpec(spec));
  return spec;
}

absl::StatusOr<AccessRules> AccessFromConfig(const gpukit::config::v1::Access& in) {
  AccessRules rules;
  rules.uid_tenants.insert(in.uids().begin(), in.uids().end());
  rules.gid_tenants.insert(in.gids().begin(), in.gids().end());
  for (int i = 0; i < in.tenants_size(); ++i) {
    const auto& tenant = in.tenants(i);
    if (!rules.tenant_partitions
             .emplace(tenant.name(), std::vector<std::string>(tenant.partitions().begin(),
                                                              tenant.partitions().end()))
             .second) {
      return absl::InvalidArgumentError(
          absl::StrCat("access.tenants[", i, "]: tenant \"", tenant.name(), "\" is listed twice"));
    }
  }
  rules.admin_uids.insert(in.admin_uids().begin(), in.admin_uids().end());
  rules.admin_gids.insert(in.admin_gids().begin(), in.admin_gids().end());
  for (int i = 0; i < in.tokens_size(); ++i) {
    const auto& token = in.tokens(i);
    std::string hash = absl::AsciiStrToLower(token.sha256());
    if (!rules.tokens.emplace(hash, AccessRules::TokenGrant{token.tenant(), token.admin()})
             .second) {
      return absl::InvalidArgumentError(
          absl::StrCat("access.tokens[", i, "]: the same sha256 is listed twice"));
    }
  }
  // The names' and hashes' rules are the policy's own.
  GPUKIT_RETURN_IF_ERROR(AccessPolicy::Create(0, rules).status());
  return rules;
}

}  // namespace

absl::string_view EmbeddedDefaultConfigJson() { return kDefaultConfig; }

std::string KernelCacheDir(absl::string_view configured) {
  if (configured == "none") return "";
  if (!configured.empty()) return std::string(configured);
  if (const char* systemd = std::getenv("CACHE_DIRECTORY"); systemd != nullptr && *systemd) {
    // systemd may list several, separated by ':'; the first is ours.
    return absl::StrCat(absl::string_view(systemd).substr(0, absl::string_view(systemd).find(':')),
                        "/kernels");
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg == '/') {
    return absl::StrCat(xdg, "/gpukit/kernels");
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/') {
    return absl::StrCat(home, "/.cache/gpukit/kernels");
  }
  return "";
}

absl::Status ValidateListenAddress(absl::string_view address) {
  if (absl::StartsWith(address, "unix://")) {
    absl::string_view path = address.substr(7);
    if (path.empty() || path[0] != '/') {
      return absl::InvalidArgumentError(absl::StrCat("listen address \"", address,
                                                     "\": a unix socket needs an absolute path, "
                                                     "unix:///path/to.sock"));
    }
    if (path.size() > 107) {  // sun_path holds 108 bytes with the terminator
      return absl::InvalidArgumentError(
          absl::StrCat("listen address \"", address, "\": socket path longer than 107 bytes"));
    }
    return absl::OkStatus();
  }
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address \"", address, "\" is neither unix:///path nor host:port"));
  }
  return absl::OkStatus();
}

absl::Status ValidateMetricsAddress(absl::string_view address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 || absl::StartsWith(address, "unix:") ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics address \"", address, "\" is not host:port (e.g. 127.0.0.1:9400, port 0 for any)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DaemonConfig> ApplyConfigJson(absl::string_view json, DaemonConfig config) {
  gpukit::config::v1::DaemonConfig file;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &file, options);
  if (!parsed.ok()) {
    std::string message = parsed.message().as_string();
    if (absl::StrContains(message, "streamsPerDevice")) {
      // The one field renamed so far: say what replaced it rather than only "unknown".
      absl::StrAppend(&message,
                      " (streamsPerDevice was replaced by streamsPerPartition: streams per "
                      "partition and QoS class)");
    }
    return absl::InvalidArgumentError(absl::StrCat("configuration is not valid: ", message));
  }
  if (file.listen_size() > 0) {
    config.listen.assign(file.listen().begin(), file.listen().end());
    for (const std::string& address : config.listen) {
      GPUKIT_RETURN_IF_ERROR(ValidateListenAddress(address));
    }
  }
  if (!file.backend().empty()) {
    GPUKIT_ASSIGN_OR_RETURN(config.backend, ParseBackendChoice(file.backend()));
  }
  if (!file.log_level().empty()) {
    GPUKIT_RETURN_IF_ERROR(CheckLogLevel(file.log_level()));
    config.log_level = file.log_level();
  }
  if (!file.cpu().memory().empty()) {
    GPUKIT_ASSIGN_OR_RETURN(config.cpu_memory_bytes,
                            ParsePositiveBytes(file.cpu().memory(), "cpu.memory"));
  }
  const auto& limits = file.limits();
  if (!limits.max_array_size().empty()) {
    GPUKIT_ASSIGN_OR_RETURN(config.core.limits.max_array_bytes,
                            ParsePositiveBytes(limits.max_array_size(), "limits.maxArraySize"));
  }
  if (limits.max_sessions() < 0 || limits.max_arrays_per_session() < 0) {
    return absl::InvalidArgumentError(
        "limits.maxSessions and limits.maxArraysPerSession must be > 0");
  }
  if (limits.max_sessions() > 0) config.core.limits.max_sessions = limits.max_sessions();
  if (limits.max_kernels_per_session() < 0) {
    return absl::InvalidArgumentError("limits.maxKernelsPerSession must be > 0");
  }
  if (limits.max_kernels_per_session() > 0) {
    config.core.max_kernels_per_session = limits.max_kernels_per_session();
  }
  if (limits.max_arrays_per_session() > 0) {
    config.core.limits.max_arrays_per_session = limits.max_arrays_per_session();
  }
  if (limits.max_ops_in_flight() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("limits.maxOpsInFlight = ", limits.max_ops_in_flight(), " must be > 0"));
  }
  if (limits.max_ops_in_flight() > 0) config.core.max_ops_in_flight = limits.max_ops_in_flight();
  const auto& sessions = file.sessions();
  SessionOptions& leases = config.core.sessions;
  if (!sessions.default_lease().empty()) {
    GPUKIT_ASSIGN_OR_RETURN(leases.default_lease, ParsePositiveDuration(sessions.default_lease(),
                                                                        "sessions.defaultLease"));
  }
  if (!sessions.min_lease().empty()) {
    GPUKIT_ASSIGN_OR_RETURN(leases.min_lease,
                            ParsePositiveDuration(sessions.min_lease(), "sessions.minLease"));
  }
  if (!sessions.max_lease().empty()) {
    GPUKIT_ASSIGN_OR_RETURN(leases.max_lease,
                            ParsePositiveDuration(sessions.max_lease(), "sessions.maxLease"));
  }
  if (leases.min_lease > leases.max_lease) {
    return absl::InvalidArgumentError("sessions.minLease is longer than sessions.maxLease");
  }
  if (leases.default_lease < leases.min_lease || leases.default_lease > leases.max_lease) {
    return absl::InvalidArgumentError(
        "sessions.defaultLease must lie between sessions.minLease and sessions.maxLease");
  }
  if (file.streams_per_partition() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("streamsPerPartition = ", file.streams_per_partition(), " must be > 0"));
  }
  if (file.streams_per_partition() > 0) {
    config.core.streams_per_partition = file.streams_per_partition();
  }
  if (file.partitions_size() > 0) {
    config.core.partitions.clear();
    for (int i = 0; i < file.partitions_size(); ++i) {
      absl::StatusOr<PartitionSpec> spec = PartitionFromConfig(file.partitions(i));
      if (!spec.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("partitions[", i, "]: ", spec.status().message()));
      }
      config.core.partitions.push_back(*std::move(spec));
    }
  }
  const auto& scheduler = file.scheduler();
  if (!scheduler.pacing_burst().empty()) {
    GPUKIT_ASSIGN_OR_RETURN(config.core.pacing_burst,
                            ParsePositiveDuration(scheduler.pacing_burst(),
                                                  "scheduler.pacingBurst"));
  }
  if (!scheduler.best_effort_in_flight().empty()) {
    GPUKIT_ASSIGN_OR_RETURN(config.core.best_effort_in_flight,
                            ParsePositiveDuration(scheduler.best_effort_in_flight(),
                                                  "scheduler.bestEffortInFlight"));
  }
  if (!scheduler.pacing_anticipation().empty()) {
    GPUKIT_ASSIGN_OR_RETURN(
        config.core.pacing_anticipation,
        ParseNonNegativeDuration(scheduler.pacing_anticipation(), "scheduler.pacingAnticipation"));
  }
  if (!scheduler.burstable_in_flight().empty()) {
    GPUKIT_ASSIGN_OR_RETURN(config.core.burstable_in_flight,
                            ParsePositiveDuration(scheduler.burstable_in_flight(),
                                                  "scheduler.burstableInFlight"));
  }
  if (config.core.burstable_in_flight < config.core.best_effort_in_flight) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scheduler.burstableInFlight = ", absl::FormatDuration(config.core.burstable_in_flight),
        " must be at least scheduler.bestEffortInFlight = ",
        absl::FormatDuration(config.core.best_effort_in_flight),
        ": Burstable work ranks above BestEffort"));
  }
  if (scheduler.task_history() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scheduler.taskHistory = ", scheduler.task_history(), " must be >= 0"));
  }
  if (scheduler.has_task_history()) config.core.task_history = scheduler.task_history();
  const auto& jit = file.jit();
  if (!jit.cache_dir().empty()) {
    if (jit.cache_dir() != "none" && jit.cache_dir()[0] != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("jit.cacheDir = \"", jit.cache_dir(), "\" must be an absolute path or \"none\""));
    } else {
      config.jit.cache_dir = jit.cache_dir();
    }
  }
  if (!jit.nvrtc_dir().empty()) config.jit.library_dir = jit.nvrtc_dir();
  if (!jit.worker_path().empty()) {
    if (jit.worker_path()[0] != '/') {
      return absl::InvalidArgumentError(absl::StrCat(
          "jit.workerPath = \"", jit.worker_path(), "\" must be an absolute path"));
    }
    config.jit.worker_path = jit.worker_path();
  }
  if (jit.has_compile_workers()) {
    if (jit.compile_workers() < 1 || jit.compile_workers() > 64) {
      return absl::InvalidArgumentError(absl::StrCat(
          "jit.compileWorkers = ", jit.compile_workers(), " must be between 1 and 64"));
    }
    config.jit.compile_workers = jit.compile_workers();
  }
  if (!jit.worker_memory().empty()) {
    GPUKIT_ASSIGN_OR_RETURN(config.jit.worker_memory_bytes,
                            ParsePositiveBytes(jit.worker_memory(), "jit.workerMemory"));
  }
  if (!jit.memory_cache().empty()) {
    GPUKIT_ASSIGN_OR_RETURN(config.jit.memory_budget_bytes,
                            ParsePositiveBytes(jit.memory_cache(), "jit.memoryCache"));
  }
  if (!jit.compile_timeout().empty()) {
    GPUKIT_ASSIGN_OR_RETURN(config.jit.compile_time_budget,
                            ParsePositiveDuration(jit.compile_timeout(), "jit.compileTimeout"));
  }
  if (!jit.cpu_arch().empty()) {
    int sm = 0;
    if (!absl::StartsWith(jit.cpu_arch(), "sm_") ||
        !absl::SimpleAtoi(absl::string_view(jit.cpu_arch()).substr(3), &sm) || sm < 80) {
      return absl::InvalidArgumentError(absl::StrCat(
          "jit.cpuArch = \"", jit.cpu_arch(), "\" must be sm_XX with XX >= 80, e.g. sm_90"));
    }
    config.core.cpu_kernel_arch = jit.cpu_arch();
  }
  const auto& executor = file.executor();
  if (!executor.mode().empty()) {
    if (executor.mode() != "process" && executor.mode() != "inprocess") {
      return absl::InvalidArgumentError(absl::StrCat(
          "executor.mode = \"", executor.mode(), "\" must be \"process\" or \"inprocess\""));
    }
    config.executor.in_process = executor.mode() == "inprocess";
  }
  if (!executor.path().empty()) {
    if (executor.path()[0] != '/') {
      return absl::InvalidArgumentError(absl::StrCat(
          "executor.path = \"", executor.path(), "\" must be an absolute path"));
    }
    config.executor.path = executor.path();
  }
  if (!executor.launch_deadline().empty()) {
    GPUKIT_ASSIGN_OR_RETURN(
        config.executor.launch_deadline,
        ParsePositiveDuration(executor.launch_deadline(), "executor.launchDeadline"));
  }
  if (executor.has_standby()) config.executor.standby = executor.standby();
  if (!file.qos().best_effort_slice().empty()) {
    GPUKIT_ASSIGN_OR_RETURN(config.qos.best_effort_slice,
                            ParseSliceLength(file.qos().best_effort_slice(), "qos.bestEffortSlice"));
  }
  if (file.qos().has_best_effort_sm_share()) {
    const double share = file.qos().best_effort_sm_share();
    if (!(share > 0 && share <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("qos.bestEffortSmShare = ", share, " must be in (0, 1]"));
    }
    config.core.best_effort_sm_share = share;
  }
  if (!file.qos().burstable_slice().empty()) {
    GPUKIT_ASSIGN_OR_RETURN(config.qos.burstable_slice,
                            ParseSliceLength(file.qos().burstable_slice(), "qos.burstableSlice"));
  }
  if (!file.metrics_address().empty()) {
    GPUKIT_RETURN_IF_ERROR(ValidateMetricsAddress(file.metrics_address()));
    config.metrics_address = file.metrics_address();
  }
  if (file.server().has_max_threads()) {
    if (file.server().max_threads() < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("server.maxThreads = ", file.server().max_threads(),
                       " must be >= 2: one thread waits for requests while the others run them"));
    }
    config.server_max_threads = file.server().max_threads();
  }
  if (file.server().has_submit_socket())
    config.server_submit_socket = file.server().submit_socket();
  if (file.has_access()) {
    GPUKIT_ASSIGN_OR_RETURN(config.access, AccessFromConfig(file.access()));
    const auto& tls = file.access().tls();
    if (tls.cert_file().empty() != tls.key_file().empty() ||
        (!tls.client_ca_file().empty() && tls.cert_file().empty())) {
      return absl::InvalidArgumentError(
          "access.tls needs both certFile and keyFile (and clientCaFile only with them)");
    }
    config.tcp.cert_file = tls.cert_file();
    config.tcp.key_file = tls.key_file();
    config.tcp.client_ca_file = tls.client_ca_file();
    config.tcp.insecure = file.access().insecure_tcp();
  }
  return config;
}

absl::StatusOr<CommandLine> ParseCommandLine(int argc, const char* const* argv) {
  CommandLine flags;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string name = arg, value;
    bool has_value = false;
    if (size_t eq = arg.find('='); absl::StartsWith(arg, "--") && eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    auto take_value = [&]() -> absl::StatusOr<std::string> {
      if (has_value) return value;
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
      return std::string(argv[++i]);
    };
    if (name == "--help" || name == "-h") {
      flags.help = true;
    } else if (name == "--version") {
      flags.version = true;
    } else if (name == "--print-default-config") {
      flags.print_default_config = true;
    } else if (name == "--listen") {
      GPUKIT_ASSIGN_OR_RETURN(std::string address, take_value());
      GPUKIT_RETURN_IF_ERROR(ValidateListenAddress(address));
      flags.listen.push_back(std::move(address));
    } else if (name == "--backend") {
      GPUKIT_ASSIGN_OR_RETURN(flags.backend, take_value());
      GPUKIT_RETURN_IF_ERROR(ParseBackendChoice(*flags.backend).status());
    } else if (name == "--config") {
      GPUKIT_ASSIGN_OR_RETURN(flags.config_path, take_value());
    } else if (name == "--metrics-address") {
      GPUKIT_ASSIGN_OR_RETURN(flags.metrics_address, take_value());
      if (!flags.metrics_address->empty()) {  // "" turns off what a config file asks for
        GPUKIT_RETURN_IF_ERROR(ValidateMetricsAddress(*flags.metrics_address));
      }
    } else if (name == "--insecure-tcp") {
      flags.insecure_tcp = true;
    } else if (name == "--log-level") {
      GPUKIT_ASSIGN_OR_RETURN(flags.log_level, take_value());
      GPUKIT_RETURN_IF_ERROR(CheckLogLevel(*flags.log_level));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown argument \"", arg, "\" (see gpukitd --help)"));
    }
  }
  return flags;
}

std::string UsageText() {
  return R"(Usage: gpukitd [flags]

gpukitd owns this machine's GPUs and shares them among client processes over gRPC.

Flags:
  --listen ADDR            Listen on ADDR: unix:///path/to.sock or host:port. Repeatable.
                           Default: unix:///run/gpukit/gpukitd.sock when /run/gpukit is
                           writable, else $XDG_RUNTIME_DIR/gpukit/gpukitd.sock, else
                           /tmp/gpukit-$UID/gpukitd.sock.
  --backend auto|cpu|cuda  Device backend (default auto: CUDA when a usable driver is found,
                           else the CPU simulation backend).
  --config FILE            JSON configuration (see --print-default-config); flags override it.
  --log-level LEVEL        trace, debug, info (default), warn, error, critical or off.
  --metrics-address HOST:PORT
                           Serve Prometheus metrics at http://HOST:PORT/metrics (port 0: any
                           free port, logged). Default: off (config key metricsAddress).
  --insecure-tcp           Serve TCP addresses without TLS (loopback addresses only; for
                           tests). Without it a TCP address needs access.tls.
  --print-default-config   Print the embedded default configuration and exit.
  --version                Print the version and exit.
  --help                   Print this help and exit.
)";
}

absl::StatusOr<DaemonConfig> ResolveConfig(const CommandLine& flags) {
  GPUKIT_ASSIGN_OR_RETURN(DaemonConfig config,
                          ApplyConfigJson(EmbeddedDefaultConfigJson(), DaemonConfig{}));
  if (flags.config_path.has_value()) {
    std::ifstream file(*flags.config_path);
    if (!file) {
      return absl::NotFoundError(absl::StrCat("cannot read --config file ", *flags.config_path));
    }
    std::stringstream text;
    text << file.rdbuf();
    // Syntax first, with the parser's position: "path:line:column: ..." (json_syntax.h).
    if (std::optional<JsonSyntaxError> syntax = FindJsonSyntaxError(text.str())) {
      return absl::InvalidArgumentError(absl::StrCat(*flags.config_path, ":", syntax->line, ":",
                                                     syntax->column, ": ", syntax->message));
    }
    absl::StatusOr<DaemonConfig> applied = ApplyConfigJson(text.str(), std::move(config));
    if (!applied.ok()) {
      // "path:line: ..." where the field the message names is found.
      const std::optional<int> line = FindConfigErrorLine(text.str(), applied.status().message());
      return absl::InvalidArgumentError(absl::StrCat(*flags.config_path,
                                                     line ? absl::StrCat(":", *line) : "", ": ",
                                                     applied.status().message()));
    }
    config = *std::move(applied);
  }
  if (!flags.listen.empty()) config.listen = flags.listen;
  if (flags.backend.has_value()) {
    GPUKIT_ASSIGN_OR_RETURN(config.backend, ParseBackendChoice(*flags.backend));
  }
  if (flags.log_level.has_value()) config.log_level = *flags.log_level;
  if (flags.metrics_address.has_value()) config.metrics_address = *flags.metrics_address;
  if (flags.insecure_tcp) config.tcp.insecure = true;
  return config;
}

}  // namespace gpukit
