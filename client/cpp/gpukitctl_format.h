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
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "gpukit/v1/admin.pb.h"

namespace gpukit::ctl {

using Table = std::vector<std::vector<std::string>>;

// `text` made safe to print on a terminal: what a terminal would act on instead of showing is
// written as an escape, so a name that a client or a daemon chose cannot clear the screen,
// move the cursor or change the window title (the class of kubectl's CVE-2021-25743).
// Code points of C0 (U+0000-U+001F), DEL (U+007F), C1 (U+0080-U+009F), the bidirectional
// overrides and isolates (U+200E, U+200F, U+202A-U+202E, U+2066-U+2069) and the line and
// paragraph separators (U+2028, U+2029) become "\u" and four hex digits ("\u001b" for ESC,
// as JSON writes them); a byte that is not part of valid UTF-8 becomes "\x" and two hex digits
// ("\x9b"); a backslash becomes "\\", so the escaped text reads back unambiguously. Other
// text is returned as it is. O(size of text).
std::string EscapeForTerminal(absl::string_view text);

// Pads each column to its widest cell; every cell is printed through EscapeForTerminal.
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
// Device time in nanoseconds as ShortDuration writes it: "850us", "12.5ms", "3.2s".
std::string DeviceTimeCell(int64_t ns);
// Guaranteed/Burstable/BestEffort device time: "1.2s/0us/3.5ms".
std::string QosSplitCell(const v1::DeviceTimeByQos& by_qos);
// "37.5%"; "-" when there is no value (the first refresh of `top`).
std::string PercentCell(std::optional<double> percent);
// {"REASON_QUEUE_FULL": 3, ...} -> "QUEUE_FULL=3,..." ordered by name; "-" when empty.
std::string RejectedCell(const google::protobuf::Map<std::string, int64_t>& rejected);

Table StatusTable(const v1::StatusResponse& response);
Table DevicesTable(const v1::ListDevicesResponse& response);
// Under the devices table: each device's last executor fault in full (which work, whose,
// the error) and the tenants held back for faulting again and again; escaped for a terminal.
std::vector<std::string> DeviceFaultLines(const v1::ListDevicesResponse& response);
// SESSION TENANT PARTITION CLIENT PID QOS ARRAYS REQUESTS LIMITS MEMORY SPILLED GPU-TIME AGE
// LEASE-LEFT
Table SessionsTable(const v1::ListSessionsResponse& response);
// NAME DEVICE MEMORY(used/quota) COMPUTE(requested/share) BANDWIDTH SESSIONS QUEUED RUNNING
// SPILL GPU-TIME BY-QOS(G/B/BE); SESSIONS is "open/max" when the partition has a max.
Table PartitionsTable(const v1::ListPartitionsResponse& response);
// PARTITION QUEUED RUNNING ADMITTED SUCCEEDED FAILED REJECTED; `with_usage` adds DEVICE,
// MEMORY(used/quota), COMPUTE(requested/share), SESSIONS and GPU-TIME after PARTITION (for
// `top`).
Table QueuesTable(const v1::ListPartitionsResponse& response, bool with_usage);
// TENANT SESSIONS MEMORY GPU-TIME BY-QOS(G/B/BE) TASKS FAILED
Table TenantsTable(const v1::ListTenantsResponse& response);
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
  // Every tenant (ListTenants); has_tenants is false when the daemon does not offer it.
  v1::ListTenantsResponse tenants;
  bool has_tenants = false;
  // Device time of every session, shown or not, by id: the next refresh's GPU% needs it.
  std::map<std::string, int64_t> session_device_time_ns;
  // GPU time over the last refresh interval as a percentage of its wall time, by session id
  // and by tenant (AddGpuPercent); empty on the first refresh. Device times of tasks on
  // different streams overlap, so it can exceed 100%.
  std::map<std::string, double> session_gpu_percent;
  std::map<std::string, double> tenant_gpu_percent;
};

// Fills snapshot->sessions with at most `count` of `sessions`, the busiest, and
// snapshot->session_device_time_ns with all of them.
void KeepBusiest(const v1::ListSessionsResponse& sessions, int count, TopSnapshot* snapshot);
// Fills current->session_gpu_percent and tenant_gpu_percent: the device time each session
// and tenant gained since `previous`, over the daemon's uptime between the two (its own
// clock, so the RPCs' latency does not count). A session or tenant that `previous` did not
// have gained all its time in between. Nothing when no uptime passed.
void AddGpuPercent(const TopSnapshot& previous, TopSnapshot* current);
// A header line, then the devices, partitions (with queues), tenants (with GPU%) and
// sessions (with GPU time and GPU%) tables; every string from the daemon goes through
// EscapeForTerminal.
std::string RenderTopFrame(const TopSnapshot& snapshot);
// One line: {"time": RFC 3339, "status": StatusResponse, "devices": [DeviceInfo],
// "partitions": [PartitionStatus], "sessions": [SessionInfo], "sessionsNotShown": N,
// "tenants": [TenantUsage], "gpuPercent": {"sessions": {id: %}, "tenants": {name: %}}},
// each message in its proto3 JSON form.
absl::StatusOr<std::string> TopJson(const TopSnapshot& snapshot);

// The message's proto3 JSON, default values included; `pretty` adds newlines and indents.
// Strings hold no raw control character: protobuf writes C0, DEL, C1 and most format
// characters as "\u" escapes, and the rest of EscapeForTerminal's set is escaped after it.
absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message, bool pretty);

// `gpukitctl version`, as kubectl's: this gpukitctl's version and the daemon's (from its
// Status RPC); `server` is empty when the daemon could not be asked.
struct Versions {
  std::string client;
  std::string server;
};
// Table: "Client Version: 0.1.0\nServer Version: 0.1.0\n", the server's line only when
// there is a server version, each through EscapeForTerminal. JSON (`json`): {"clientVersion":
// "0.1.0", "serverVersion": "0.1.0"}, serverVersion likewise only when known.
absl::StatusOr<std::string> VersionText(const Versions& versions, bool json);
// A "WARNING: ..." line (no newline) when gpukitctl and gpukitd differ in major version (the
// number before the first '.'), whose APIs may then differ; nullopt when the majors agree,
// or when either version has no such number (an unknown server version among them).
std::optional<std::string> VersionSkewWarning(const Versions& versions);

}  // namespace gpukit::ctl

#endif  // GPUKIT_CLIENT_CPP_GPUKITCTL_FORMAT_H_
