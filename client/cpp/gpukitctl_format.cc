#include "client/cpp/gpukitctl_format.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/units.h"
#include "runtime/base/utf8.h"

namespace gpukit::ctl {
namespace {

std::string OneDecimal(double value) { return absl::StrCat(std::round(value * 10) / 10); }

std::string Share(double share) { return absl::StrCat(share); }

std::string MemoryCell(int64_t used_bytes, int64_t total_bytes) {
  return absl::StrCat(CompactBytes(used_bytes), "/", CompactBytes(total_bytes));
}

std::string ComputeCell(const v1::PartitionStatus& s) {
  return absl::StrCat(Share(s.compute_requested()), "/", Share(s.partition().compute_share()));
}

// Resident and spilled bytes, then arrays: what a session holds.
bool Busier(const v1::SessionInfo& a, const v1::SessionInfo& b) {
  const int64_t a_bytes = a.memory_bytes() + a.spilled_bytes();
  const int64_t b_bytes = b.memory_bytes() + b.spilled_bytes();
  if (a_bytes != b_bytes) return a_bytes > b_bytes;
  if (a.arrays() != b.arrays()) return a.arrays() > b.arrays();
  return a.session_id() < b.session_id();
}

// "[a,b,...]" of the messages' compact JSON.
template <typename Messages>
absl::StatusOr<std::string> JsonArray(const Messages& messages) {
  std::vector<std::string> items;
  for (const auto& message : messages) {
    absl::StatusOr<std::string> json = ToJson(message, /*pretty=*/false);
    if (!json.ok()) return json.status();
    items.push_back(*std::move(json));
  }
  return absl::StrCat("[", absl::StrJoin(items, ","), "]");
}

// EscapeForTerminal, or with `json` the pass over protobuf's JSON text: there backslashes are
// JSON's own escapes and C0 characters are already escaped inside strings (a raw newline is
// the pretty form's whitespace), so only the code points above U+007F that protobuf leaves
// raw (the isolates U+2066-U+2069) get a "\u" escape, which JSON reads as the same string.
std::string Escape(absl::string_view text, bool json) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    char32_t cp = c;
    size_t length = 1;
    if (c >= 0x80) {
      length = static_cast<size_t>(DecodeUtf8(text.substr(i), &cp));
      if (length == 0) {  // not UTF-8: the byte itself
        absl::StrAppendFormat(&out, "\\x%02x", c);
        ++i;
        continue;
      }
    }
    if (cp == '\\' && !json) {
      out += "\\\\";
    } else if (IsDisplayControl(cp) && !(json && cp < 0x80)) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<uint32_t>(cp));
    } else {
      out.append(text.data() + i, length);
    }
    i += length;
  }
  return out;
}

}  // namespace

std::string EscapeForTerminal(absl::string_view text) { return Escape(text, /*json=*/false); }

std::string RenderTable(const Table& rows) {
  Table escaped;
  escaped.reserve(rows.size());
  for (const auto& row : rows) {
    std::vector<std::string>& cells = escaped.emplace_back();
    for (const std::string& cell : row) cells.push_back(EscapeForTerminal(cell));
  }
  std::vector<size_t> widths;
  for (const auto& row : escaped) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : escaped) {
    for (size_t i = 0; i < row.size(); ++i) {
      out += row[i];
      if (i + 1 < row.size()) out += std::string(widths[i] - row[i].size() + 3, ' ');
    }
    out += "\n";
  }
  return out;
}

std::string Age(int64_t ms) {
  const int64_t s = ms / 1000;
  if (s < 120) return absl::StrCat(s, "s");
  if (s < 2 * 3600) return absl::StrCat(s / 60, "m");
  if (s < 2 * 86400) return absl::StrCat(s / 3600, "h");
  return absl::StrCat(s / 86400, "d");
}

std::string ShortDuration(int64_t us) {
  if (us < 1000) return absl::StrCat(us, "us");
  if (us < 1000 * 1000) return absl::StrCat(OneDecimal(us / 1e3), "ms");
  if (us < 120 * 1000 * 1000) return absl::StrCat(OneDecimal(us / 1e6), "s");
  return Age(us / 1000);
}

std::string CompactBytes(int64_t bytes) {
  return absl::StrReplaceAll(FormatBytes(bytes), {{" ", ""}});
}

std::string QosName(v1::QosClass qos) {
  switch (qos) {
    case v1::QOS_CLASS_GUARANTEED:
      return "Guaranteed";
    case v1::QOS_CLASS_BURSTABLE:
      return "Burstable";
    case v1::QOS_CLASS_BEST_EFFORT:
      return "BestEffort";
    default:
      return "-";
  }
}

std::string StateName(v1::TaskState state) {
  std::string name =
      absl::AsciiStrToLower(absl::StripPrefix(v1::TaskState_Name(state), "TASK_STATE_"));
  if (!name.empty()) name[0] = absl::ascii_toupper(name[0]);
  return name;
}

std::string ResourcesCell(const v1::ResourceList& list) {
  if (!list.has_memory_bytes() && !list.has_compute()) return "-";
  return absl::StrCat(list.has_memory_bytes() ? CompactBytes(list.memory_bytes()) : "-", "/",
                      list.has_compute() ? Share(list.compute()) : "-");
}

std::string DeviceTimeCell(int64_t ns) { return ShortDuration(ns / 1000); }

std::string QosSplitCell(const v1::DeviceTimeByQos& by_qos) {
  return absl::StrCat(DeviceTimeCell(by_qos.guaranteed_ns()), "/",
                      DeviceTimeCell(by_qos.burstable_ns()), "/",
                      DeviceTimeCell(by_qos.best_effort_ns()));
}

std::string PercentCell(std::optional<double> percent) {
  if (!percent.has_value()) return "-";
  return absl::StrCat(OneDecimal(*percent), "%");
}

std::string RejectedCell(const google::protobuf::Map<std::string, int64_t>& rejected) {
  std::vector<std::pair<std::string, int64_t>> sorted(rejected.begin(), rejected.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::string> parts;
  for (const auto& [reason, count] : sorted) {
    parts.push_back(absl::StrCat(absl::StripPrefix(reason, "REASON_"), "=", count));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, ",");
}

Table StatusTable(const v1::StatusResponse& response) {
  return {{"VERSION", "BACKEND", "UPTIME", "DEVICES", "SESSIONS", "ARRAYS", "LISTEN"},
          {response.version(), response.backend(), Age(response.uptime_ms()),
           absl::StrCat(response.device_count()), absl::StrCat(response.sessions()),
           absl::StrCat(response.arrays()), absl::StrJoin(response.listen_addresses(), ",")}};
}

namespace {

std::string ExecutorCell(const v1::ExecutorInfo& executor) {
  if (executor.mode() != "process") return executor.mode().empty() ? "-" : executor.mode();
  if (executor.pid() == 0) return "restarting";
  return absl::StrCat("pid ", executor.pid(), executor.standby_ready() ? " +standby" : "");
}

}  // namespace

Table DevicesTable(const v1::ListDevicesResponse& response) {
  Table rows = {{"INDEX", "NAME", "BACKEND", "MEMORY-USED", "MEMORY-TOTAL", "EXECUTOR",
                 "RESTARTS", "LAST-FAULT"}};
  for (const v1::DeviceInfo& d : response.devices()) {
    const v1::ExecutorFault& fault = d.executor().last_fault();
    rows.push_back({absl::StrCat(d.index()), d.name(), d.backend(),
                    FormatBytes(d.memory_used_bytes()), FormatBytes(d.memory_total_bytes()),
                    ExecutorCell(d.executor()), absl::StrCat(d.executor().restarts()),
                    fault.kind().empty() ? "-"
                                         : absl::StrCat(fault.kind(), " at ",
                                                        absl::FormatTime(
                                                            "%Y-%m-%d %H:%M:%S",
                                                            absl::FromUnixMillis(fault.time_unix_ms()),
                                                            absl::LocalTimeZone()))});
  }
  return rows;
}

std::vector<std::string> DeviceFaultLines(const v1::ListDevicesResponse& response) {
  std::vector<std::string> lines;
  for (const v1::DeviceInfo& d : response.devices()) {
    const v1::ExecutorFault& fault = d.executor().last_fault();
    if (!fault.kind().empty()) {
      lines.push_back(EscapeForTerminal(absl::StrCat(
          "device ", d.index(), " last fault: ", fault.kind(),
          fault.work().empty() ? "" : absl::StrCat(" in ", fault.work()),
          fault.session_id().empty()
              ? ""
              : absl::StrCat(" of session ", fault.session_id(), " (tenant ", fault.tenant(), ")"),
          ": ", fault.error())));
    }
    for (const std::string& held : d.executor().held_back()) {
      lines.push_back(EscapeForTerminal(absl::StrCat("device ", d.index(), " held back: ", held)));
    }
  }
  return lines;
}

Table SessionsTable(const v1::ListSessionsResponse& response) {
  Table rows = {{"SESSION", "TENANT", "PARTITION", "CLIENT", "PID", "QOS", "ARRAYS", "REQUESTS",
                 "LIMITS", "MEMORY", "SPILLED", "GPU-TIME", "AGE", "LEASE-LEFT"}};
  for (const v1::SessionInfo& s : response.sessions()) {
    rows.push_back({s.session_id(), s.tenant(), s.partition(), s.client_name(),
                    absl::StrCat(s.client_pid()), QosName(s.qos_class()), absl::StrCat(s.arrays()),
                    ResourcesCell(s.resources().requests()), ResourcesCell(s.resources().limits()),
                    FormatBytes(s.memory_bytes()), FormatBytes(s.spilled_bytes()),
                    DeviceTimeCell(s.device_time_ns()), Age(s.age_ms()),
                    Age(s.lease_remaining_ms())});
  }
  return rows;
}

// The SMs a partition's streams run on and whether they are reserved for it: "64 reserved",
// "132"; "-" (or "reserved") before its first session has streams of its placement.
std::string SmsCell(const v1::PartitionStatus& s) {
  const std::string sms = s.sm_count() > 0 ? absl::StrCat(s.sm_count()) : "";
  if (!s.partition().reserve_sms()) return sms.empty() ? "-" : sms;
  return sms.empty() ? "reserved" : absl::StrCat(sms, " reserved");
}

Table PartitionsTable(const v1::ListPartitionsResponse& response) {
  Table rows = {{"NAME", "DEVICE", "MEMORY(used/quota)", "COMPUTE(requested/share)", "BANDWIDTH",
                 "SESSIONS", "QUEUED", "RUNNING", "SPILL", "GPU-TIME", "BY-QOS(G/B/BE)", "SMS"}};
  for (const v1::PartitionStatus& s : response.partitions()) {
    const v1::Partition& p = s.partition();
    rows.push_back({p.name(), absl::StrCat(p.device_index()),
                    MemoryCell(s.memory_used_bytes(), p.memory_quota_bytes()), ComputeCell(s),
                    p.bandwidth_cap() > 0 ? Share(p.bandwidth_cap()) : "-",
                    p.max_sessions() > 0 ? absl::StrCat(s.sessions(), "/", p.max_sessions())
                                         : absl::StrCat(s.sessions()),
                    absl::StrCat(s.queued_tasks()), absl::StrCat(s.running_tasks()),
                    p.spill() ? "yes" : "no", DeviceTimeCell(s.device_time_ns()),
                    QosSplitCell(s.device_time_by_qos()), SmsCell(s)});
  }
  return rows;
}

Table QueuesTable(const v1::ListPartitionsResponse& response, bool with_usage) {
  Table rows;
  if (with_usage) {
    rows.push_back({"PARTITION", "DEVICE", "MEMORY(used/quota)", "COMPUTE(requested/share)",
                    "SESSIONS", "GPU-TIME", "QUEUED", "RUNNING", "ADMITTED", "SUCCEEDED", "FAILED",
                    "REJECTED"});
  } else {
    rows.push_back(
        {"PARTITION", "QUEUED", "RUNNING", "ADMITTED", "SUCCEEDED", "FAILED", "REJECTED"});
  }
  for (const v1::PartitionStatus& s : response.partitions()) {
    std::vector<std::string> row = {s.partition().name()};
    if (with_usage) {
      row.push_back(absl::StrCat(s.partition().device_index()));
      row.push_back(MemoryCell(s.memory_used_bytes(), s.partition().memory_quota_bytes()));
      row.push_back(ComputeCell(s));
      row.push_back(absl::StrCat(s.sessions()));
      row.push_back(DeviceTimeCell(s.device_time_ns()));
    }
    for (int64_t n : {int64_t{s.queued_tasks()}, int64_t{s.running_tasks()}, s.admitted_total(),
                      s.succeeded_total(), s.failed_total()}) {
      row.push_back(absl::StrCat(n));
    }
    row.push_back(RejectedCell(s.rejected()));
    rows.push_back(std::move(row));
  }
  return rows;
}

Table TasksTable(const v1::ListTasksResponse& response) {
  Table rows = {{"ID", "PARTITION", "SESSION", "QOS", "KIND", "NAME", "PRIO", "STATE", "WAIT",
                 "RUN", "DEVICE-TIME"}};
  for (const v1::TaskInfo& t : response.tasks()) {
    const bool ended = t.state() == v1::TASK_STATE_SUCCEEDED || t.state() == v1::TASK_STATE_FAILED;
    const bool ran = ended || t.state() == v1::TASK_STATE_RUNNING;
    rows.push_back({absl::StrCat(t.task_id()), t.partition(), t.session_id(),
                    QosName(t.qos_class()), t.kind(), t.name(), absl::StrCat(t.priority()),
                    StateName(t.state()), ShortDuration(t.wait_us()),
                    ran ? ShortDuration(t.run_us()) : "-",
                    ended ? ShortDuration(t.device_time_ns() / 1000) : "-"});
  }
  return rows;
}

Table TenantsTable(const v1::ListTenantsResponse& response) {
  Table rows = {{"TENANT", "SESSIONS", "MEMORY", "GPU-TIME", "BY-QOS(G/B/BE)", "TASKS", "FAILED"}};
  for (const v1::TenantUsage& t : response.tenants()) {
    rows.push_back({t.tenant(), absl::StrCat(t.sessions()), FormatBytes(t.memory_used_bytes()),
                    DeviceTimeCell(t.device_time_ns()), QosSplitCell(t.device_time_by_qos()),
                    absl::StrCat(t.tasks_finished()), absl::StrCat(t.tasks_failed())});
  }
  return rows;
}

void KeepBusiest(const v1::ListSessionsResponse& sessions, int count, TopSnapshot* snapshot) {
  snapshot->session_device_time_ns.clear();
  for (const v1::SessionInfo& s : sessions.sessions()) {
    snapshot->session_device_time_ns[s.session_id()] = s.device_time_ns();
  }
  snapshot->sessions.assign(sessions.sessions().begin(), sessions.sessions().end());
  std::sort(snapshot->sessions.begin(), snapshot->sessions.end(), Busier);
  const int total = static_cast<int>(snapshot->sessions.size());
  snapshot->sessions_not_shown = std::max(0, total - count);
  snapshot->sessions.resize(std::min(total, count));
}

void AddGpuPercent(const TopSnapshot& previous, TopSnapshot* current) {
  current->session_gpu_percent.clear();
  current->tenant_gpu_percent.clear();
  const int64_t wall_ns = (current->status.uptime_ms() - previous.status.uptime_ms()) * 1000000;
  if (wall_ns <= 0) return;
  auto percent = [&](int64_t now_ns, int64_t before_ns) {
    return 100.0 * static_cast<double>(std::max<int64_t>(0, now_ns - before_ns)) /
           static_cast<double>(wall_ns);
  };
  for (const auto& [id, ns] : current->session_device_time_ns) {
    auto it = previous.session_device_time_ns.find(id);
    current->session_gpu_percent[id] =
        percent(ns, it == previous.session_device_time_ns.end() ? 0 : it->second);
  }
  std::map<std::string, int64_t> before;
  for (const v1::TenantUsage& t : previous.tenants.tenants())
    before[t.tenant()] = t.device_time_ns();
  for (const v1::TenantUsage& t : current->tenants.tenants()) {
    auto it = before.find(t.tenant());
    current->tenant_gpu_percent[t.tenant()] =
        percent(t.device_time_ns(), it == before.end() ? 0 : it->second);
  }
}

namespace {

std::optional<double> Find(const std::map<std::string, double>& map, const std::string& key) {
  auto it = map.find(key);
  if (it == map.end()) return std::nullopt;
  return it->second;
}

}  // namespace

std::string RenderTopFrame(const TopSnapshot& s) {
  std::string frame =
      absl::StrCat("gpukitd ", EscapeForTerminal(s.status.version()), " (",
                   EscapeForTerminal(s.status.backend()), ")   up ", Age(s.status.uptime_ms()),
                   "   ", s.status.sessions(), " session(s)   ", s.status.arrays(), " array(s)   ",
                   absl::FormatTime("%H:%M:%S", s.time, absl::LocalTimeZone()), "\n\n");
  Table devices = {{"DEVICE", "NAME", "BACKEND", "MEMORY(used/total)"}};
  for (const v1::DeviceInfo& d : s.devices.devices()) {
    devices.push_back({absl::StrCat(d.index()), d.name(), d.backend(),
                       MemoryCell(d.memory_used_bytes(), d.memory_total_bytes())});
  }
  absl::StrAppend(&frame, RenderTable(devices), "\n",
                  RenderTable(QueuesTable(s.partitions, /*with_usage=*/true)), "\n");
  if (s.has_tenants && !s.tenants.tenants().empty()) {
    Table tenants = {
        {"TENANT", "SESSIONS", "MEMORY", "GPU-TIME", "BY-QOS(G/B/BE)", "GPU%", "TASKS"}};
    for (const v1::TenantUsage& t : s.tenants.tenants()) {
      tenants.push_back({t.tenant(), absl::StrCat(t.sessions()), FormatBytes(t.memory_used_bytes()),
                         DeviceTimeCell(t.device_time_ns()), QosSplitCell(t.device_time_by_qos()),
                         PercentCell(Find(s.tenant_gpu_percent, t.tenant())),
                         absl::StrCat(t.tasks_finished())});
    }
    absl::StrAppend(&frame, RenderTable(tenants), "\n");
  }
  if (s.sessions.empty()) {
    frame += "No sessions.\n";
    return frame;
  }
  Table sessions = {{"SESSION", "TENANT", "PARTITION", "QOS", "ARRAYS", "MEMORY", "SPILLED",
                     "GPU-TIME", "GPU%", "AGE"}};
  for (const v1::SessionInfo& session : s.sessions) {
    sessions.push_back(
        {session.session_id(), session.tenant(), session.partition(), QosName(session.qos_class()),
         absl::StrCat(session.arrays()), FormatBytes(session.memory_bytes()),
         FormatBytes(session.spilled_bytes()), DeviceTimeCell(session.device_time_ns()),
         PercentCell(Find(s.session_gpu_percent, session.session_id())), Age(session.age_ms())});
  }
  frame += RenderTable(sessions);
  if (s.sessions_not_shown > 0) {
    absl::StrAppend(&frame, "... and ", s.sessions_not_shown, " more session(s)\n");
  }
  return frame;
}

absl::StatusOr<std::string> TopJson(const TopSnapshot& s) {
  absl::StatusOr<std::string> status = ToJson(s.status, /*pretty=*/false);
  absl::StatusOr<std::string> devices = JsonArray(s.devices.devices());
  absl::StatusOr<std::string> partitions = JsonArray(s.partitions.partitions());
  absl::StatusOr<std::string> sessions = JsonArray(s.sessions);
  absl::StatusOr<std::string> tenants = JsonArray(s.tenants.tenants());
  // Keys are session ids and tenant names from the daemon: a Struct has protobuf escape them.
  google::protobuf::Struct percent;
  for (const auto& [key, map] : {std::pair{"sessions", &s.session_gpu_percent},
                                 std::pair{"tenants", &s.tenant_gpu_percent}}) {
    google::protobuf::Struct& part = *(*percent.mutable_fields())[key].mutable_struct_value();
    for (const auto& [name, value] : *map) {
      (*part.mutable_fields())[name].set_number_value(value);
    }
  }
  absl::StatusOr<std::string> gpu_percent = ToJson(percent, /*pretty=*/false);
  for (const auto* part : {&status, &devices, &partitions, &sessions, &tenants, &gpu_percent}) {
    if (!part->ok()) return part->status();
  }
  return absl::StrCat(
      "{\"time\":\"", absl::FormatTime(absl::RFC3339_sec, s.time, absl::UTCTimeZone()),
      "\",\"status\":", *status, ",\"devices\":", *devices, ",\"partitions\":", *partitions,
      ",\"sessions\":", *sessions, ",\"sessionsNotShown\":", s.sessions_not_shown,
      ",\"tenants\":", *tenants, ",\"gpuPercent\":", *gpu_percent, "}");
}

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.always_print_primitive_fields = true;
  std::string json;
  auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("cannot print JSON: ", status.message().ToString()));
  }
  return Escape(json, /*json=*/true);
}

absl::StatusOr<std::string> VersionText(const Versions& versions, bool json) {
  if (json) {
    google::protobuf::Struct object;
    (*object.mutable_fields())["clientVersion"].set_string_value(versions.client);
    if (!versions.server.empty()) {
      (*object.mutable_fields())["serverVersion"].set_string_value(versions.server);
    }
    GPUKIT_ASSIGN_OR_RETURN(std::string text, ToJson(object, /*pretty=*/true));
    return text;
  }
  std::string text = absl::StrCat("Client Version: ", EscapeForTerminal(versions.client), "\n");
  if (!versions.server.empty()) {
    absl::StrAppend(&text, "Server Version: ", EscapeForTerminal(versions.server), "\n");
  }
  return text;
}

namespace {

// 1 for "1.2.3"; nullopt for "", "x.1" or "1".
std::optional<int> MajorVersion(absl::string_view version) {
  const size_t dot = version.find('.');
  int major = 0;
  if (dot == absl::string_view::npos || !absl::SimpleAtoi(version.substr(0, dot), &major)) {
    return std::nullopt;
  }
  return major;
}

}  // namespace

std::optional<std::string> VersionSkewWarning(const Versions& versions) {
  const std::optional<int> client = MajorVersion(versions.client);
  const std::optional<int> server = MajorVersion(versions.server);
  if (!client.has_value() || !server.has_value() || *client == *server) return std::nullopt;
  return absl::StrCat("WARNING: gpukitctl ", EscapeForTerminal(versions.client), " and gpukitd ",
                      EscapeForTerminal(versions.server),
                      " differ in major version, so their APIs may differ: use the gpukitctl "
                      "of gpukitd's version");
}

}  // namespace gpukit::ctl
