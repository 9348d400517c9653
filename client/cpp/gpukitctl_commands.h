// Ctl: gpukitctl's commands, each one or a few AdminService calls whose answer it prints as
// a kubectl-like table (gpukitctl_format.h) or, with -o json, as the response message in
// proto3 JSON form. Tables go to stdout; "No sessions." and the like to stderr, so that a
// pipe sees an empty table.
//
//   Ctl ctl(channel, options);
//   return ctl.Partitions();  // the process's exit status: 0, or 1 after a message
//
// A failed call prints "gpukitctl: <command>: <daemon's message>" to stderr, followed by
// " (reason REASON_X)" when the daemon sent a "gpukit-reason" trailer, and returns 1.
//
// Cost: one round trip per call; `top` makes five per refresh.
//
// Thread safety: one thread per Ctl.
#ifndef GPUKIT_CLIENT_CPP_GPUKITCTL_COMMANDS_H_
#define GPUKIT_CLIENT_CPP_GPUKITCTL_COMMANDS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/cpp/gpukitctl_args.h"
#include "gpukit/v1/admin.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace gpukit::ctl {

// Prints "gpukitctl: <what>: <message>[ (reason REASON_X)]" to stderr; returns 1.
int Fail(absl::string_view what, const absl::Status& status);

class Ctl {
 public:
  Ctl(std::shared_ptr<grpc::Channel> channel, const GlobalOptions& options);

  int Status();
  // This gpukitctl's version and gpukitd's (VersionText), and VersionSkewWarning's warning
  // to stderr when their major versions differ. When the daemon does not answer, the client
  // version is printed before the failure (1).
  int Version();
  int Devices();
  int Sessions();
  int Partitions();
  int Queues();
  // Tenants with their sessions, memory, GPU time (total and by QoS class) and tasks.
  int Tenants();
  int CreatePartition(const PartitionFlags& flags);
  // Changes only the fields `flags` names; --default-* values are merged into the
  // partition's current session defaults (read first: a concurrent update of the defaults
  // between the two calls is overwritten).
  int UpdatePartition(const PartitionFlags& flags);
  int DeletePartition(const std::string& name, bool force);
  int Tasks(const v1::ListTasksRequest& request);
  int CancelTask(uint64_t task_id);
  // Refreshes until options.iterations have been shown, or until SIGINT/SIGTERM (then
  // returns 0). Clears the screen first when stdout is a terminal and the output is a
  // table (RenderTopFrame); with -o json prints one JSON object per line and refresh
  // (TopJson). The sessions shown are the 10 busiest. GPU% compares each refresh with the
  // one before (AddGpuPercent). Against a daemon without ListTenants (UNIMPLEMENTED), the
  // tenants are left out.
  int Top(const TopOptions& options);

 private:
  // Fills the deadline and runs one call; FromGrpc's status.
  template <typename Response, typename Call>
  absl::Status Rpc(Call call, Response* response) const;
  // A listing command: runs `call`, prints its answer as JSON, or `empty_note` (to stderr)
  // when `is_empty` says it lists nothing, else `to_table`'s table. 0, or Fail(command, ...).
  template <typename Response, typename Call, typename IsEmpty, typename ToTable>
  int List(absl::string_view command, Call call, IsEmpty is_empty, absl::string_view empty_note,
           ToTable to_table) const;
  bool json() const { return options_.output == OutputFormat::kJson; }

  std::unique_ptr<v1::AdminService::Stub> admin_;
  const GlobalOptions options_;
};

}  // namespace gpukit::ctl

#endif  // GPUKIT_CLIENT_CPP_GPUKITCTL_COMMANDS_H_
