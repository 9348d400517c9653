// ConfigReloader: what gpukitd does on SIGHUP. It reads the --config file again (with the
// same command line, whose flags still win), validates all of it, and only then applies it:
// the file's partitions (daemon/scheduler/partition_reload.h: created, updated, deleted when
// they have no sessions, else kept with the reason), the log level, and every callback of
// ReloadTargets. Sessions stay open throughout. A file that cannot be read or is not valid
// is refused as a whole, with the parser's "path:line:column: ..." (or the field it names),
// logged at error; the running configuration stays.
//
// Settings that shape what was built at start (listen addresses, backend, CPU memory,
// server threads, executor, JIT, limits, streams, scheduler) take effect at the next
// restart; a reload logs which of those the file changed.
//
//   ReloadTargets targets;
//   targets.on_reload.push_back([&](const DaemonConfig& c) { return policy.Swap(c); });
//   ConfigReloader reloader(*core, flags, config, std::move(targets));
//   ... on SIGHUP:
//   absl::StatusOr<std::string> summary = reloader.Reload();
//
// Thread safety: Reload from one thread at a time (gpukitd's main thread, which takes the
// signals); it runs beside requests, through the core's thread-safe calls.
#ifndef GPUKIT_DAEMON_CONFIG_RELOAD_H_
#define GPUKIT_DAEMON_CONFIG_RELOAD_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/config/config.h"
#include "daemon/core/core.h"

namespace gpukit {

// What a reload hands a new, validated configuration to, besides the core's partitions.
struct ReloadTargets {
  // Called in order, after the partitions are applied, with the new configuration. An
  // error is logged at error and the other callbacks still run; the new configuration
  // becomes the running one either way (it was valid).
  //
  // The access policy (tenants, uid/gid mappings and bearer-token hashes: issue 17's
  // identity and roles) is swapped here: its owner registers a callback in main.cc that
  // builds the new policy from the DaemonConfig and swaps it in atomically, so a reload
  // changes who may do what without dropping sessions. It should fail without swapping
  // when the new policy cannot be built, and validate in ApplyConfigJson so that a bad
  // access block refuses the whole file before anything is applied.
  std::vector<std::function<absl::Status(const DaemonConfig&)>> on_reload;
};

class ConfigReloader {
 public:
  // `running`: the configuration gpukitd started with (ResolveConfig(flags)).
  ConfigReloader(Core& core, CommandLine flags, DaemonConfig running, ReloadTargets targets);

  // Reloads (see the top of this file). Returns a one-line summary ("reloaded PATH: 1
  // partition created, 1 updated"), also logged. Errors, each logged at error, the running
  // configuration unchanged: FAILED_PRECONDITION without a --config file; the file's
  // (NOT_FOUND, INVALID_ARGUMENT "path:line:column: ..."); INVALID_ARGUMENT when its
  // partitions do not fit the devices. A step of the plan that fails when applied (a
  // session opened in a partition to delete meanwhile) is logged and the rest goes on.
  absl::StatusOr<std::string> Reload();

  const DaemonConfig& config() const { return running_; }

 private:
  Core& core_;
  const CommandLine flags_;
  DaemonConfig running_;
  ReloadTargets targets_;
  // The partitions the file answers for: those the last applied file named (with an implied
  // "default"), and those it removed that were kept for their sessions, so that a later
  // reload deletes them once they are empty.
  std::vector<std::string> file_partitions_;
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_CONFIG_RELOAD_H_
