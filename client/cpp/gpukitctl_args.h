// gpukitctl's command line: global flags, the command's words and its flags, parsed and
// checked before any connection is made, so a typo costs no round trip and exits 1 even
// when no daemon runs. Also turns a command's flags into the request it sends.
//
//   absl::StatusOr<CommandLine> line = ParseCommandLine(argc, argv);
//   // gpukitctl -o json partition create gold --memory 1GiB --compute 0.5 --spill
//   //   line->global.output == OutputFormat::kJson
//   //   line->words == {"partition", "create", "gold"}
//   //   line->flags == {{"--memory", "1GiB"}, {"--compute", "0.5"}, {"--spill", "true"}}
//   absl::StatusOr<PartitionFlags> p = ParsePartitionFlags("gold", line->flags);
//
// Every error is INVALID_ARGUMENT with a message that names the flag and the value, ready to
// print after "gpukitctl: ".
//
// Thread safety: pure functions.
#ifndef GPUKIT_CLIENT_CPP_GPUKITCTL_ARGS_H_
#define GPUKIT_CLIENT_CPP_GPUKITCTL_ARGS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gpukit/v1/admin.pb.h"

namespace gpukit::ctl {

enum class OutputFormat { kTable, kJson };

struct GlobalOptions {
  // Not given: $GPUKIT_ADDR, else the default socket. An empty --addr is refused.
  std::string addr;
  OutputFormat output = OutputFormat::kTable;
  // Deadline of each call.
  absl::Duration timeout = absl::Seconds(10);
  // --token (not given: $GPUKIT_TOKEN) and --tls-ca: for a daemon reached over TCP.
  std::string token;
  std::string tls_ca_file;
  // --tls-cert and --tls-key: a client certificate, for a daemon that requires one.
  std::string tls_cert_file;
  std::string tls_key_file;
};

// Command flags by their name with dashes ("--memory"); a boolean flag maps to "true" or
// "false" (--no-spill is "--spill" = "false").
using FlagMap = std::map<std::string, std::string>;

struct CommandLine {
  GlobalOptions global;
  bool help = false;
  bool version = false;
  // The words that are not flags: command, subcommand and operands, in order.
  std::vector<std::string> words;
  FlagMap flags;
};

// Global flags may stand anywhere; a value follows its flag ("--memory 1GiB") or an equals
// sign ("--memory=1GiB"). INVALID_ARGUMENT for an unknown flag, a missing value or a bad
// global value (-o yaml, --timeout -1s).
absl::StatusOr<CommandLine> ParseCommandLine(int argc, const char* const* argv);

// INVALID_ARGUMENT naming the first flag in `flags` that is not in `allowed`.
absl::Status CheckFlagsAllowed(const FlagMap& flags, const std::vector<std::string>& allowed,
                               absl::string_view command);

// The flags that set a partition's fields, for `partition create` and `partition update`.
const std::vector<std::string>& PartitionFlagNames();

// What `partition create` / `partition update` flags ask for.
struct PartitionFlags {
  // The partition named `name` with every given value set.
  v1::Partition partition;
  // Proto names of the fields given, in the order of v1::Partition: the update_mask.
  // "session_defaults" stands for any --default-* flag.
  std::vector<std::string> fields;
  // The --default-* values given; `partition.session_defaults` holds them too. Update merges
  // them into the partition's current defaults, so one flag changes one value.
  v1::ResourceRequirements session_defaults;
};

// Parses --device, --memory, --compute, --bandwidth, --max-queued, --max-running,
// --max-sessions, --spill and --default-{memory,compute}-{request,limit}. Sizes as
// ParseBytes reads them ("512MiB"), shares as decimals in [0, 1].
absl::StatusOr<PartitionFlags> ParsePartitionFlags(const std::string& name, const FlagMap& flags);

// Overwrites in `current` each request and limit that `given` sets.
void MergeResources(const v1::ResourceRequirements& given, v1::ResourceRequirements* current);

// "queued", "Queued", "QUEUED" or "TASK_STATE_QUEUED" -> TASK_STATE_QUEUED; INVALID_ARGUMENT
// listing the states for anything else.
absl::StatusOr<v1::TaskState> ParseTaskState(absl::string_view text);

// --partition, --state and --limit of `tasks`.
absl::StatusOr<v1::ListTasksRequest> ParseListTasksFlags(const FlagMap& flags);

// The ID operand of `task cancel`.
absl::StatusOr<uint64_t> ParseTaskId(absl::string_view text);

struct TopOptions {
  // Time between two refreshes.
  absl::Duration interval = absl::Seconds(2);
  // Refreshes before exiting; 0: until interrupted.
  int64_t iterations = 0;
};

// --interval and --iterations of `top`.
absl::StatusOr<TopOptions> ParseTopFlags(const FlagMap& flags);

}  // namespace gpukit::ctl

#endif  // GPUKIT_CLIENT_CPP_GPUKITCTL_ARGS_H_
