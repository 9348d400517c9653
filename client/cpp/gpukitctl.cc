// gpukitctl: the operator's view of a running gpukitd, and its partitions and tasks.
//
//   gpukitctl [--addr ADDR] [-o table|json] COMMAND [ARGS] [FLAGS]
//
// The command line is checked in full before connecting (gpukitctl_args.h); the commands
// live in gpukitctl_commands.h. Exit status 0 on success, 1 on any error (the reason goes to
// stderr).
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cpp/channel.h"
#include "client/cpp/gpukitctl_args.h"
#include "client/cpp/gpukitctl_commands.h"
#include "client/cpp/gpukitctl_format.h"

namespace gpukit::ctl {
namespace {

constexpr char kUsage[] = R"(Usage: gpukitctl [--addr ADDR] [-o table|json] COMMAND [ARGS] [FLAGS]

Commands:
  status                       daemon version, backend, uptime, sessions, listen addresses
  version                      gpukitctl's version and gpukitd's; warns when their major
                               versions differ
  devices                      devices with memory in use and total
  sessions                     open sessions: tenant, partition, client, QoS class, requests
                               and limits (memory/compute), memory resident and spilled,
                               GPU time, age, lease left
  partitions                   partitions: device, memory used/quota, compute requested/share,
                               bandwidth cap, sessions, tasks queued and running, spill, GPU
                               time and its split Guaranteed/Burstable/BestEffort
  tenants                      tenants since gpukitd started: sessions open, memory, GPU time
                               and its split by QoS class, tasks finished and failed
  partition create NAME --memory SIZE --compute SHARE [PARTITION FLAGS]
                               creates a partition
  partition update NAME [PARTITION FLAGS]
                               changes the given settings only (not the device)
  partition delete NAME [--force]
                               deletes a partition; --force closes its open sessions
                               (freeing their arrays) instead of refusing
  queues                       per partition: tasks queued and running, totals admitted,
                               succeeded and failed, refusals by reason
  tasks [--partition P] [--state S] [--limit N]
                               tasks waiting or running, then recently finished ones; S is
                               pending, queued, admitted, running, succeeded, failed,
                               cancelled or expired
  task cancel ID               cancels a waiting task (its request fails with CANCELLED)
  top [--interval DUR] [--iterations N]
                               devices, partitions with their queues, tenants and the
                               busiest sessions with their GPU time and GPU% (GPU time over
                               the last refresh interval as a share of wall time; tasks on
                               different streams overlap, so it can pass 100%), refreshed
                               every DUR (default 2s) until Ctrl-C or N refreshes (0, the
                               default: no end); with -o json, one JSON object per line
                               and refresh

Partition flags:
  --device N                   device index (create only; default 0)
  --memory SIZE                memory quota, e.g. 512MiB, 8GiB (required by create)
  --compute SHARE              compute share guaranteed under contention, in (0, 1]
                               (required by create)
  --bandwidth SHARE            most of the device it may take, in [compute, 1]; 0: no cap
  --max-queued N               tasks that may wait at once (default 1024)
  --max-running N              tasks that may run at once (default 1024)
  --max-sessions N             sessions that may be open at once (0: no limit)
  --spill, --no-spill          spill reclaimed memory to host memory, or refuse allocations
  --reserve-sms, --no-reserve-sms
                               reserve about its compute share of the SMs for its kernels
                               alone, or share the SMs no partition reserves
  --default-memory-request SIZE, --default-memory-limit SIZE,
  --default-compute-request SHARE, --default-compute-limit SHARE
                               requests and limits of sessions that open without any
                               (update changes only the ones given)

Global flags:
  --addr ADDR                  gpukitd address: unix:///path.sock or host:port
                               (default: $GPUKIT_ADDR, else the default socket)
  -o, --output F               table (default) or json
  --timeout DUR                deadline of each call, e.g. 5s (default 10s)
  --token TOKEN                bearer token for a daemon over TCP (default: $GPUKIT_TOKEN)
  --tls-ca FILE                PEM of the CA that signed the daemon's certificate (TCP + TLS)
  --tls-cert FILE, --tls-key FILE
                               this client's certificate and key, for a daemon that requires
                               client certificates
  --help                       this help
  --version                    print the version

Examples:
  gpukitctl partition update default --memory 2GiB --compute 0.5
  gpukitctl partition create batch --memory 1GiB --compute 0.25 --bandwidth 0.5 --spill
  gpukitctl tasks --partition batch --state queued
  gpukitctl -o json top --interval 1s --iterations 10
)";

// A command: its words, the operands after them, and the flags it takes.
struct Command {
  std::vector<std::string> words;
  std::vector<std::string> operands;
  std::vector<std::string> flags;
};

const std::vector<Command>& Commands() {
  static const auto* const kCommands = [] {
    std::vector<std::string> update_flags;
    for (const std::string& flag : PartitionFlagNames()) {
      if (flag != "--device") update_flags.push_back(flag);
    }
    return new std::vector<Command>{
        {{"status"}, {}, {}},
        {{"version"}, {}, {}},
        {{"devices"}, {}, {}},
        {{"sessions"}, {}, {}},
        {{"partitions"}, {}, {}},
        {{"partition", "create"}, {"NAME"}, PartitionFlagNames()},
        {{"partition", "update"}, {"NAME"}, update_flags},
        {{"partition", "delete"}, {"NAME"}, {"--force"}},
        {{"queues"}, {}, {}},
        {{"tenants"}, {}, {}},
        {{"tasks"}, {}, {"--partition", "--state", "--limit"}},
        {{"task", "cancel"}, {"ID"}, {}},
        {{"top"}, {}, {"--interval", "--iterations"}},
    };
  }();
  return *kCommands;
}

int UsageError(const std::string& message) {
  std::cerr << "gpukitctl: " << EscapeForTerminal(message) << "\n";
  return 1;
}

// The command `words` starts with, or nullptr after printing why there is none.
const Command* FindCommand(const std::vector<std::string>& words) {
  for (const Command& command : Commands()) {
    if (words.size() >= command.words.size() &&
        std::equal(command.words.begin(), command.words.end(), words.begin())) {
      return &command;
    }
  }
  std::vector<std::string> subcommands;
  std::vector<std::string> names;
  for (const Command& command : Commands()) {
    if (command.words.size() > 1 && command.words[0] == words[0]) {
      subcommands.push_back(command.words[1]);
    }
    if (names.empty() || names.back() != command.words[0]) names.push_back(command.words[0]);
  }
  if (!subcommands.empty()) {
    UsageError(
        words.size() == 1
            ? absl::StrCat(words[0], " needs a subcommand: ", absl::StrJoin(subcommands, ", "))
            : absl::StrCat("unknown command \"", words[0], " ", words[1], "\"; ", words[0],
                           " subcommands: ", absl::StrJoin(subcommands, ", ")));
  } else {
    UsageError(
        absl::StrCat("unknown command \"", words[0], "\"; commands: ", absl::StrJoin(names, ", ")));
  }
  return nullptr;
}

int Main(int argc, char** argv) {
  absl::StatusOr<CommandLine> line = ParseCommandLine(argc, argv);
  if (!line.ok()) return UsageError(std::string(line.status().message()));
  if (line->help) {
    std::cout << kUsage;
    return 0;
  }
  if (line->version) {
    std::cout << "gpukitctl " << GPUKIT_VERSION_STRING << "\n";
    return 0;
  }
  if (line->words.empty()) {
    std::cerr << kUsage;
    return 1;
  }
  const Command* command = FindCommand(line->words);
  if (command == nullptr) return 1;
  const std::string name = absl::StrJoin(command->words, " ");
  const std::vector<std::string> operands(line->words.begin() + command->words.size(),
                                          line->words.end());
  if (operands.size() < command->operands.size()) {
    return UsageError(absl::StrCat(name, " needs ", absl::StrJoin(command->operands, " "),
                                   " (see gpukitctl --help)"));
  }
  if (operands.size() > command->operands.size()) {
    return UsageError(
        absl::StrCat("unexpected argument \"", operands[command->operands.size()], "\""));
  }
  if (absl::Status s = CheckFlagsAllowed(line->flags, command->flags, name); !s.ok()) {
    return UsageError(std::string(s.message()));
  }

  // Everything the command sends is parsed before connecting.
  PartitionFlags partition;
  v1::ListTasksRequest tasks;
  uint64_t task_id = 0;
  TopOptions top;
  bool force = false;
  absl::Status parsed;
  if (command->words[0] == "partition" && command->words[1] != "delete") {
    absl::StatusOr<PartitionFlags> flags = ParsePartitionFlags(operands[0], line->flags);
    parsed = flags.status();
    if (flags.ok()) partition = *std::move(flags);
    if (parsed.ok() && command->words[1] == "create" &&
        (!line->flags.count("--memory") || !line->flags.count("--compute"))) {
      return UsageError(
          "partition create needs --memory SIZE and --compute SHARE, e.g. partition create " +
          operands[0] + " --memory 1GiB --compute 0.25 (see gpukitctl --help)");
    }
    if (parsed.ok() && command->words[1] == "update" && partition.fields.empty()) {
      return UsageError(
          "partition update needs a flag to change, e.g. --memory 2GiB (see "
          "gpukitctl --help)");
    }
  } else if (name == "partition delete") {
    if (auto it = line->flags.find("--force"); it != line->flags.end()) {
      if (!absl::SimpleAtob(it->second, &force)) {
        parsed = absl::InvalidArgumentError(
            absl::StrCat("--force \"", it->second, "\" is not true or false"));
      }
    }
  } else if (name == "tasks") {
    absl::StatusOr<v1::ListTasksRequest> request = ParseListTasksFlags(line->flags);
    parsed = request.status();
    if (request.ok()) tasks = *std::move(request);
  } else if (name == "task cancel") {
    absl::StatusOr<uint64_t> id = ParseTaskId(operands[0]);
    parsed = id.status();
    if (id.ok()) task_id = *id;
  } else if (name == "top") {
    absl::StatusOr<TopOptions> options = ParseTopFlags(line->flags);
    parsed = options.status();
    if (options.ok()) top = *options;
  }
  if (!parsed.ok()) return UsageError(std::string(parsed.message()));

  GlobalOptions global = line->global;
  if (global.addr.empty()) global.addr = DefaultClientTarget();
  if (global.token.empty()) global.token = DefaultClientToken();
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = ConnectChannel(
      global.addr, global.timeout,
      ChannelSecurity{global.token, global.tls_ca_file, global.tls_cert_file, global.tls_key_file});
  if (!channel.ok()) {
    if (name == "version") {  // the client's version, whether or not the daemon answers
      std::cout << VersionText({.client = GPUKIT_VERSION_STRING},
                               global.output == OutputFormat::kJson)
                       .value_or("");
    }
    return Fail("connect", channel.status());
  }
  Ctl ctl(*channel, global);
  if (name == "status") return ctl.Status();
  if (name == "version") return ctl.Version();
  if (name == "devices") return ctl.Devices();
  if (name == "sessions") return ctl.Sessions();
  if (name == "partitions") return ctl.Partitions();
  if (name == "partition create") return ctl.CreatePartition(partition);
  if (name == "partition update") return ctl.UpdatePartition(partition);
  if (name == "partition delete") return ctl.DeletePartition(operands[0], force);
  if (name == "queues") return ctl.Queues();
  if (name == "tenants") return ctl.Tenants();
  if (name == "tasks") return ctl.Tasks(tasks);
  if (name == "task cancel") return ctl.CancelTask(task_id);
  return ctl.Top(top);
}

}  // namespace
}  // namespace gpukit::ctl

int main(int argc, char** argv) { return gpukit::ctl::Main(argc, argv); }
