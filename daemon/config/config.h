// gpukitd's configuration: the embedded default, the --config file and the command line.
//
// Precedence, lowest first: embedded default < config file < flags. The file is JSON in
// the schema of proto/gpukit/config/v1/daemon_config.proto. Only daemon/main.cc calls
// ParseCommandLine; everything else receives a DaemonConfig.
//
//   GPUKIT_ASSIGN_OR_RETURN(CommandLine flags, ParseCommandLine(argc, argv));
//   GPUKIT_ASSIGN_OR_RETURN(DaemonConfig config, ResolveConfig(flags));
#ifndef GPUKIT_DAEMON_CONFIG_CONFIG_H_
#define GPUKIT_DAEMON_CONFIG_CONFIG_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/core/core.h"
#include "daemon/session/access_policy.h"
#include "runtime/jit/jit_compiler.h"
#include "runtime/device_factory.h"

namespace gpukit {

struct DaemonConfig {
  std::vector<std::string> listen;  // empty: DefaultListenAddress()
  BackendChoice backend = BackendChoice::kAuto;
  std::string log_level = "info";
  int64_t cpu_memory_bytes = 0;
  CoreOptions core;
  // The JIT compiler's options; cache_dir as configured ("", "none" or a path: see
  // KernelCacheDir).
  JitCompilerOptions jit;
  // server.maxThreads: the gRPC server's thread cap (ServerOptions::max_threads).
  int server_max_threads = 256;
  // server.submitSocket: whether to serve the submit socket (ServerOptions::submit_socket).
  bool server_submit_socket = true;
  // metricsAddress: "host:port" of the Prometheus metrics server; empty: none.
  std::string metrics_address;
  // executor.*: how devices run (runtime/executor/executor_devices.h).
  struct Executor {
    bool in_process = false;  // executor.mode = "inprocess"
    std::string path;         // "": found beside gpukitd
    absl::Duration launch_deadline = absl::Seconds(30);
    bool standby = true;
  } executor;
  // qos.*: how long one slice of a large matmul of a BestEffort (low-priority stream) and a
  // Burstable (normal) session runs; zero: never sliced (CudaDeviceOptions).
  struct Qos {
    absl::Duration best_effort_slice = absl::Microseconds(100);
    absl::Duration burstable_slice = absl::Microseconds(500);
  } qos;
  // access: who callers are and what they may do; nullopt when the file has no `access`
  // block (the default policy, AccessPolicy's header).
  std::optional<AccessRules> access;
  // access.tls and access.insecureTcp (or --insecure-tcp): how TCP addresses are served.
  struct TcpSecurity {
    std::string cert_file;       // PEM; with key_file, TLS
    std::string key_file;        // PEM
    std::string client_ca_file;  // PEM; set: client certificates are required
    bool insecure = false;       // no TLS, loopback addresses only
  } tcp;
};

// The kernel cache directory for jit.cacheDir = `configured`: "" for "none" (memory only),
// the path itself when one is given, else systemd's $CACHE_DIRECTORY/kernels, else
// $XDG_CACHE_HOME/gpukit/kernels, else $HOME/.cache/gpukit/kernels ("" when none is set).
std::string KernelCacheDir(absl::string_view configured);

// The configuration gpukitd runs with when given no file, as JSON.
absl::string_view EmbeddedDefaultConfigJson();

// Applies the fields present in `json` on top of `base`. INVALID_ARGUMENT naming the field
// for malformed JSON, unknown fields and bad values.
absl::StatusOr<DaemonConfig> ApplyConfigJson(absl::string_view json, DaemonConfig base);

struct CommandLine {
  std::vector<std::string> listen;  // --listen, repeatable
  std::optional<std::string> backend;
  std::optional<std::string> config_path;
  std::optional<std::string> log_level;
  std::optional<std::string> metrics_address;  // --metrics-address
  bool insecure_tcp = false;  // --insecure-tcp
  bool help = false;
  bool version = false;
  bool print_default_config = false;
};

// Accepts "--flag value" and "--flag=value". INVALID_ARGUMENT for unknown flags and
// missing values.
absl::StatusOr<CommandLine> ParseCommandLine(int argc, const char* const* argv);
std::string UsageText();

// Embedded default, then the --config file, then the flags.
absl::StatusOr<DaemonConfig> ResolveConfig(const CommandLine& flags);

// Checks a "unix:///abs/path" or "host:port" address.
absl::Status ValidateListenAddress(absl::string_view address);

// Checks a metrics address: "host:port" (port 0 to 65535; an IPv6 host in brackets).
absl::Status ValidateMetricsAddress(absl::string_view address);

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_CONFIG_CONFIG_H_
