// How gpukitctl prints the Admin service's answers: kubectl-like tables and JSON.
//
// A Table is a list of rows, the header first; RenderTable pads each column to its widest
// cell and puts three spaces between columns. Cells that hold two values ("used/quota")
// write sizes without a space ("48MiB/64MiB") so that every cell of those tables is one
// word; a column of one size keeps FormatBytes' "4 KiB".
//
//   std::cout << RenderTable(PartitionsTable(response));
//   // NAME      DEVICE   MEMORY(used/quota)   COMPUTE(requested/share)   ...
//   // default   0        4KiB/4GiB            0/1                        ...
//
// Thread safety: pure functions.
#ifndef GPUKIT_CLIENT_CPP_GPUKITCTL_FORMAT_H_
#define GPUKIT_CLIENT_CPP_GPUKITCTL_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "gpukit/v1/admin.pb.h"

namespace gpukit::ctl {

using Table = std::vector<std::vector<std::string>>;

std::string RenderTable(const Table& rows);

// kubectl-style age: 45s, 12m, 3h, 2d.
std::string Age(int64_t ms);
// A duration short enough for a column: 850us, 12.5ms, 3.2s, then as Age.
std::string ShortDuration(int64_t us);
// FormatBytes without its space: "512MiB".
std::string CompactBytes(int64_t bytes);
// "Guaranteed", "Burstable", "BestEffort"; "-" when unspecified.
std::string QosName(v1::QosClass qos);
// TASK_STATE_SUCCEEDED -> "Succeeded".
std::string StateName(v1::TaskState state);
// "64MiB/0.25": memory and compute of a request or limit; "-" for what is not set.
std::string ResourcesCell(const v1::ResourceList& list);
// {"REASON_QUEUE_FULL": 3, ...} -> "QUEUE_FULL=3,..." ordered by name; "-" when empty.
std::string RejectedCell(const google::protobuf::Map<std::string, int64_t>& rejected);

Table StatusTable(const v1::StatusResponse& response);
Table DevicesTable(const v1::ListDevicesResponse& response);
// SESSION TENANT PARTITION CLIENT PID QOS ARRAYS REQUESTS LIMITS MEMORY SPILLED AGE LEASE-LEFT
Table SessionsTable(const v1::ListSessionsResponse& response);
// NAME DEVICE MEMORY(used/quota) COMPUTE(requested/share) BANDWIDTH SESSIONS QUEUED RUNNING
// SPILL; SESSIONS is "open/max" when the partition has a max.
Table PartitionsTable(const v1::ListPartitionsResponse& response);
// PARTITION QUEUED RUNNING ADMITTED SUCCEEDED FAILED REJECTED; `with_usage` adds DEVICE,
// MEMORY(used/quota), COMPUTE(requested/share) and SESSIONS after PARTITION (for `top`).
Table QueuesTable(const v1::ListPartitionsResponse& response, bool with_usage);
// ID PARTITION SESSION QOS KIND NAME PRIO STATE WAIT RUN DEVICE-TIME; RUN and DEVICE-TIME
// are "-" for a task that has not run.
Table TasksTable(const v1::ListTasksResponse& response);

// What one refresh of `top` shows.
struct TopSnapshot {
  absl::Time time;
  v1::StatusResponse status;
  v1::ListDevicesResponse devices;
  v1::ListPartitionsResponse partitions;
  // The busiest sessions (most device memory resident and spilled, then most arrays),
  // busiest first, and how many others there are.
  std::vector<v1::SessionInfo> sessions;
  int sessions_not_shown = 0;
};

// Fills snapshot->sessions with at most `count` of `sessions`, the busiest.
void KeepBusiest(const v1::ListSessionsResponse& sessions, int count, TopSnapshot* snapshot);
// A header line, then the devices, partitions (with queues) and sessions tables.
std::string RenderTopFrame(const TopSnapshot& snapshot);
// One line: {"time": RFC 3339, "status": StatusResponse, "devices": [DeviceInfo],
// "partitions": [PartitionStatus], "sessions": [SessionInfo], "sessionsNotShown": N}, each
// message in its proto3 JSON form.
absl::StatusOr<std::string> TopJson(const TopSnapshot& snapshot);

// The message's proto3 JSON, default values included; `pretty` adds newlines and indents.
absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message, bool pretty);

}  // namespace gpukit::ctl

#endif  // GPUKIT_CLIENT_CPP_GPUKITCTL_FORMAT_H_
