#include "client/cpp/gpukitctl_commands.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <iostream>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/cpp/channel.h"
#include "client/cpp/gpukitctl_format.h"
#include "gpukit/client.h"

namespace gpukit::ctl {
namespace {

// Sessions `top` shows, busiest first.
constexpr int kTopSessions = 10;

int PrintJson(const google::protobuf::Message& message) {
  absl::StatusOr<std::string> json = ToJson(message, /*pretty=*/true);
  if (!json.ok()) return Fail("output", json.status());
  std::cout << *json;
  return 0;
}

void PrintTable(const Table& rows) { std::cout << RenderTable(rows); }

// SIGINT and SIGTERM end `top` between two refreshes.
volatile std::sig_atomic_t g_stop = 0;

void OnStopSignal(int) { g_stop = 1; }

void InstallStopHandler() {
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

// Sleeps `duration` in small steps; false if a stop signal came meanwhile.
bool SleepUnlessStopped(absl::Duration duration) {
  const absl::Time until = absl::Now() + duration;
  while (!g_stop) {
    const absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) return true;
    absl::SleepFor(std::min(left, absl::Milliseconds(50)));
  }
  return false;
}

}  // namespace

int Fail(absl::string_view what, const absl::Status& status) {
  // The message comes from the daemon (or names what the operator typed): escaped like all
  // else gpukitctl prints.
  std::cerr << "gpukitctl: " << what << ": " << EscapeForTerminal(status.message());
  if (const std::string reason = RejectReason(status); !reason.empty()) {
    std::cerr << " (reason " << EscapeForTerminal(reason) << ")";
  }
  std::cerr << "\n";
  return 1;
}

Ctl::Ctl(std::shared_ptr<grpc::Channel> channel, const GlobalOptions& options)
    : admin_(v1::AdminService::NewStub(channel)), options_(options) {}

template <typename Response, typename Call>
absl::Status Ctl::Rpc(Call call, Response* response) const {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoMilliseconds(options_.timeout));
  const grpc::Status status = call(&context, response);
  return FromGrpc(status, context);
}

template <typename Response, typename Call, typename IsEmpty, typename ToTable>
int Ctl::List(absl::string_view command, Call call, IsEmpty is_empty, absl::string_view empty_note,
              ToTable to_table) const {
  Response response;
  absl::Status status = Rpc(call, &response);
  if (!status.ok()) return Fail(command, status);
  if (json()) return PrintJson(response);
  if (is_empty(response)) {
    std::cerr << empty_note << "\n";
    return 0;
  }
  PrintTable(to_table(response));
  return 0;
}

int Ctl::Status() {
  v1::StatusResponse response;
  absl::Status status =
      Rpc([&](grpc::ClientContext* c, v1::StatusResponse* r) { return admin_->Status(c, {}, r); },
          &response);
  if (!status.ok()) return Fail("status", status);
  if (json()) return PrintJson(response);
  PrintTable(StatusTable(response));
  return 0;
}

int Ctl::Version() {
  Versions versions{.client = GPUKIT_VERSION_STRING};
  v1::StatusResponse response;
  absl::Status status =
      Rpc([&](grpc::ClientContext* c, v1::StatusResponse* r) { return admin_->Status(c, {}, r); },
          &response);
  if (status.ok()) versions.server = response.version();
  absl::StatusOr<std::string> text = VersionText(versions, json());
  if (!text.ok()) return Fail("output", text.status());
  std::cout << *text;
  if (!status.ok()) return Fail("version", status);
  if (std::optional<std::string> warning = VersionSkewWarning(versions)) {
    std::cerr << *warning << "\n";
  }
  return 0;
}

int Ctl::Devices() {
  v1::ListDevicesResponse response;
  absl::Status status =
      Rpc([&](grpc::ClientContext* c,
              v1::ListDevicesResponse* r) { return admin_->ListDevices(c, {}, r); },
          &response);
  if (!status.ok()) return Fail("devices", status);
  if (json()) return PrintJson(response);
  PrintTable(DevicesTable(response));
  for (const std::string& line : DeviceFaultLines(response)) std::cout << line << "\n";
  return 0;
}

int Ctl::Sessions() {
  return List<v1::ListSessionsResponse>(
      "sessions",
      [&](grpc::ClientContext* c, v1::ListSessionsResponse* r) {
        return admin_->ListSessions(c, {}, r);
      },
      [](const v1::ListSessionsResponse& r) { return r.sessions().empty(); }, "No sessions.",
      [](const v1::ListSessionsResponse& r) { return SessionsTable(r); });
}

int Ctl::Partitions() {
  return List<v1::ListPartitionsResponse>(
      "partitions",
      [&](grpc::ClientContext* c, v1::ListPartitionsResponse* r) {
        return admin_->ListPartitions(c, {}, r);
      },
      [](const v1::ListPartitionsResponse& r) { return r.partitions().empty(); }, "No partitions.",
      [](const v1::ListPartitionsResponse& r) { return PartitionsTable(r); });
}

int Ctl::Queues() {
  return List<v1::ListPartitionsResponse>(
      "queues",
      [&](grpc::ClientContext* c, v1::ListPartitionsResponse* r) {
        return admin_->ListPartitions(c, {}, r);
      },
      [](const v1::ListPartitionsResponse& r) { return r.partitions().empty(); }, "No partitions.",
      [](const v1::ListPartitionsResponse& r) { return QueuesTable(r, /*with_usage=*/false); });
}

int Ctl::Tenants() {
  return List<v1::ListTenantsResponse>(
      "tenants",
      [&](grpc::ClientContext* c, v1::ListTenantsResponse* r) {
        return admin_->ListTenants(c, {}, r);
      },
      [](const v1::ListTenantsResponse& r) { return r.tenants().empty(); }, "No tenants.",
      [](const v1::ListTenantsResponse& r) { return TenantsTable(r); });
}

int Ctl::CreatePartition(const PartitionFlags& flags) {
  v1::CreatePartitionRequest request;
  *request.mutable_partition() = flags.partition;
  v1::CreatePartitionResponse response;
  absl::Status status =
      Rpc([&](grpc::ClientContext* c,
              v1::CreatePartitionResponse* r) { return admin_->CreatePartition(c, request, r); },
          &response);
  if (!status.ok()) return Fail("partition create", status);
  if (json()) return PrintJson(response);
  std::cout << "partition/" << EscapeForTerminal(response.partition().partition().name())
            << " created\n";
  return 0;
}

int Ctl::UpdatePartition(const PartitionFlags& flags) {
  v1::UpdatePartitionRequest request;
  *request.mutable_partition() = flags.partition;
  for (const std::string& field : flags.fields) request.add_update_mask(field);
  if (std::find(flags.fields.begin(), flags.fields.end(), "session_defaults") !=
      flags.fields.end()) {
    // The mask replaces session_defaults whole: start from the current ones.
    v1::ListPartitionsResponse partitions;
    absl::Status status =
        Rpc([&](grpc::ClientContext* c,
                v1::ListPartitionsResponse* r) { return admin_->ListPartitions(c, {}, r); },
            &partitions);
    if (!status.ok()) return Fail("partition update", status);
    const v1::PartitionStatus* current = nullptr;
    for (const v1::PartitionStatus& s : partitions.partitions()) {
      if (s.partition().name() == flags.partition.name()) current = &s;
    }
    if (current == nullptr) {
      return Fail("partition update",
                  absl::NotFoundError(
                      absl::StrCat("partition \"", flags.partition.name(), "\" does not exist")));
    }
    v1::ResourceRequirements* defaults = request.mutable_partition()->mutable_session_defaults();
    *defaults = current->partition().session_defaults();
    MergeResources(flags.session_defaults, defaults);
  }
  v1::UpdatePartitionResponse response;
  absl::Status status =
      Rpc([&](grpc::ClientContext* c,
              v1::UpdatePartitionResponse* r) { return admin_->UpdatePartition(c, request, r); },
          &response);
  if (!status.ok()) return Fail("partition update", status);
  if (json()) return PrintJson(response);
  std::cout << "partition/" << EscapeForTerminal(response.partition().partition().name())
            << " updated (" << absl::StrJoin(flags.fields, ", ") << ")\n";
  return 0;
}

int Ctl::DeletePartition(const std::string& name, bool force) {
  v1::DeletePartitionRequest request;
  request.set_name(name);
  request.set_force(force);
  v1::DeletePartitionResponse response;
  absl::Status status =
      Rpc([&](grpc::ClientContext* c,
              v1::DeletePartitionResponse* r) { return admin_->DeletePartition(c, request, r); },
          &response);
  if (!status.ok()) return Fail("partition delete", status);
  if (json()) return PrintJson(response);
  std::cout << "partition/" << EscapeForTerminal(name) << " deleted";
  if (response.sessions_closed() > 0) {
    std::cout << " (" << response.sessions_closed() << " session(s) closed)";
  }
  std::cout << "\n";
  return 0;
}

int Ctl::Tasks(const v1::ListTasksRequest& request) {
  v1::ListTasksResponse response;
  absl::Status status =
      Rpc([&](grpc::ClientContext* c,
              v1::ListTasksResponse* r) { return admin_->ListTasks(c, request, r); },
          &response);
  if (!status.ok()) return Fail("tasks", status);
  if (json()) return PrintJson(response);
  if (response.tasks().empty()) {
    std::cerr << "No tasks.\n";
    return 0;
  }
  PrintTable(TasksTable(response));
  return 0;
}

int Ctl::CancelTask(uint64_t task_id) {
  v1::CancelTaskRequest request;
  request.set_task_id(task_id);
  v1::CancelTaskResponse response;
  absl::Status status =
      Rpc([&](grpc::ClientContext* c,
              v1::CancelTaskResponse* r) { return admin_->CancelTask(c, request, r); },
          &response);
  if (!status.ok()) return Fail("task cancel", status);
  if (json()) return PrintJson(response);
  std::cout << "task/" << task_id << " cancelled\n";
  return 0;
}

int Ctl::Top(const TopOptions& options) {
  InstallStopHandler();
  const bool clear = !json() && isatty(STDOUT_FILENO);
  TopSnapshot previous;
  for (int64_t i = 0; options.iterations == 0 || i < options.iterations; ++i) {
    if (i > 0 && !SleepUnlessStopped(options.interval)) break;
    TopSnapshot snapshot;
    v1::ListSessionsResponse sessions;
    absl::Status status =
        Rpc([&](grpc::ClientContext* c, v1::StatusResponse* r) { return admin_->Status(c, {}, r); },
            &snapshot.status);
    if (status.ok()) {
      status = Rpc([&](grpc::ClientContext* c,
                       v1::ListDevicesResponse* r) { return admin_->ListDevices(c, {}, r); },
                   &snapshot.devices);
    }
    if (status.ok()) {
      status = Rpc([&](grpc::ClientContext* c,
                       v1::ListPartitionsResponse* r) { return admin_->ListPartitions(c, {}, r); },
                   &snapshot.partitions);
    }
    if (status.ok()) {
      status = Rpc([&](grpc::ClientContext* c,
                       v1::ListSessionsResponse* r) { return admin_->ListSessions(c, {}, r); },
                   &sessions);
    }
    if (status.ok()) {
      status = Rpc([&](grpc::ClientContext* c,
                       v1::ListTenantsResponse* r) { return admin_->ListTenants(c, {}, r); },
                   &snapshot.tenants);
      snapshot.has_tenants = status.ok();
      if (absl::IsUnimplemented(status)) status = absl::OkStatus();  // an older gpukitd
    }
    if (!status.ok()) return Fail("top", status);
    snapshot.time = absl::Now();
    KeepBusiest(sessions, kTopSessions, &snapshot);
    if (i > 0) AddGpuPercent(previous, &snapshot);
    if (json()) {
      absl::StatusOr<std::string> line = TopJson(snapshot);
      if (!line.ok()) return Fail("top", line.status());
      std::cout << *line << std::endl;
    } else {
      // Frames follow each other in a log or a pipe; on a terminal each replaces the last.
      std::cout << (clear ? "\033[H\033[2J" : "") << RenderTopFrame(snapshot) << (clear ? "" : "\n")
                << std::flush;
    }
    previous = std::move(snapshot);
  }
  return 0;
}

}  // namespace gpukit::ctl
