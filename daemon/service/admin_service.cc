#include <optional>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "daemon/service/convert.h"
#include "daemon/service/services.h"
#include "runtime/base/units.h"
#include "spdlog/spdlog.h"

namespace gpukit::service {

grpc::Status AdminServiceImpl::Status(grpc::ServerContext* /*context*/,
                                      const v1::StatusRequest* /*request*/,
                                      v1::StatusResponse* response) {
  response->set_version(facts_.version);
  response->set_backend(std::string(core_.backend()));
  response->set_uptime_ms(absl::ToInt64Milliseconds(clock_.Now() - facts_.started_at));
  response->set_sessions(core_.session_count());
  response->set_arrays(core_.array_count());
  for (const std::string& address : facts_.listen_addresses) {
    response->add_listen_addresses(address);
  }
  response->set_device_count(core_.device_count());
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::ListDevices(grpc::ServerContext* /*context*/,
                                           const v1::ListDevicesRequest* /*request*/,
                                           v1::ListDevicesResponse* response) {
  for (const DeviceSummary& device : core_.ListDevices()) {
    v1::DeviceInfo* info = response->add_devices();
    info->set_index(device.properties.index);
    info->set_name(device.properties.name);
    info->set_backend(std::string(BackendName(device.properties.backend)));
    info->set_memory_total_bytes(device.properties.memory_total_bytes);
    info->set_memory_used_bytes(device.memory_used_bytes);
    v1::ExecutorInfo& executor = *info->mutable_executor();
    if (!device.executor.has_value()) {
      executor.set_mode("in-process");
      continue;
    }
    executor.set_mode("process");
    executor.set_pid(device.executor->pid);
    executor.set_restarts(device.executor->restarts);
    executor.set_standby_ready(device.executor->standby_ready);
    for (const std::string& held : device.held_back) executor.add_held_back(held);
    if (device.last_fault.has_value()) {
      v1::ExecutorFault& out = *executor.mutable_last_fault();
      out.set_time_unix_ms(absl::ToUnixMillis(device.last_fault->time));
      out.set_kind(device.last_fault->kind);
      out.set_error(device.last_fault->error);
      out.set_session_id(device.last_fault->session_id);
      out.set_tenant(device.last_fault->tenant);
      out.set_work(device.last_fault->work);
    }
  }
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::ListSessions(grpc::ServerContext* context,
                                            const v1::ListSessionsRequest* /*request*/,
                                            v1::ListSessionsResponse* response) {
  const Principal caller = guard_.Caller(*context);
  for (const SessionSummary& s : core_.ListSessions()) {
    if (!guard_.MaySee(caller, s.owner)) continue;
    v1::SessionInfo* info = response->add_sessions();
    info->set_session_id(s.session_id);
    info->set_tenant(s.tenant);
    info->set_partition(s.partition);
    info->set_client_name(s.client.name);
    info->set_client_pid(s.client.pid);
    info->set_client_hostname(s.client.hostname);
    info->set_client_library_version(s.client.library_version);
    info->set_arrays(s.arrays);
    info->set_memory_bytes(s.memory_bytes);
    info->set_age_ms(absl::ToInt64Milliseconds(s.age));
    info->set_lease_remaining_ms(absl::ToInt64Milliseconds(s.lease_remaining));
    info->set_qos_class(ToProto(s.qos));
    ToProto(s.resources, info->mutable_resources());
    info->set_device_index(s.device_index);
    info->set_spilled_bytes(s.spilled_bytes);
    info->set_device_time_ns(absl::ToInt64Nanoseconds(s.device_time));
    info->set_tasks_finished(s.tasks_finished);
    info->set_owner_network(s.owner.network());
    if (s.owner.local()) {
      info->set_owner_uid(s.owner.uid);
      info->set_owner_gid(s.owner.gid);
      info->set_owner_pid(s.owner.pid);
    } else {
      info->set_owner_address(s.owner.address);
    }
  }
  return grpc::Status::OK;
}

namespace {

// The partition's current status, for Create/Update replies.
grpc::Status PartitionReply(const Core& core, const std::string& name, grpc::ServerContext* context,
                            v1::PartitionStatus* out) {
  // NOT_FOUND if another request deleted it in between.
  absl::StatusOr<PartitionStatus> status = core.GetPartitionStatus(name);
  if (!status.ok()) return ToGrpc(status.status(), context);
  ToProto(*status, out);
  return grpc::Status::OK;
}

}  // namespace

grpc::Status AdminServiceImpl::CreatePartition(grpc::ServerContext* context,
                                               const v1::CreatePartitionRequest* request,
                                               v1::CreatePartitionResponse* response) {
  if (grpc::Status s = guard_.CheckAdmin(context, "CreatePartition"); !s.ok()) return s;
  if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
  absl::StatusOr<PartitionSpec> spec = FromProto(request->partition());
  if (!spec.ok()) return ToGrpc(spec.status(), context);
  if (absl::Status s = core_.CreatePartition(*spec); !s.ok()) return ToGrpc(s, context);
  spdlog::info("partition created: partition={} device={} memory={} compute={}", spec->name,
               spec->device_index, FormatBytes(spec->memory_quota_bytes), spec->compute_share);
  return PartitionReply(core_, spec->name, context, response->mutable_partition());
}

grpc::Status AdminServiceImpl::UpdatePartition(grpc::ServerContext* context,
                                               const v1::UpdatePartitionRequest* request,
                                               v1::UpdatePartitionResponse* response) {
  if (grpc::Status s = guard_.CheckAdmin(context, "UpdatePartition"); !s.ok()) return s;
  if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
  const std::string& name = request->partition().name();
  absl::StatusOr<PartitionSpec> values = FromProto(request->partition());
  absl::StatusOr<PartitionFieldMask> mask = PartitionFieldMaskFromProto(request->update_mask());
  if (!values.ok() || !mask.ok()) {
    // A request that is malformed and names no partition is answered NOT_FOUND, as
    // api.md's order of checks says.
    if (absl::StatusOr<PartitionStatus> known = core_.GetPartitionStatus(name); !known.ok()) {
      return ToGrpc(known.status(), context);
    }
    return ToGrpc(!values.ok() ? values.status() : mask.status(), context);
  }
  absl::StatusOr<PartitionSpec> spec = core_.UpdatePartition(name, *mask, *values);
  if (!spec.ok()) return ToGrpc(spec.status(), context);
  spdlog::info("partition updated: partition={} memory={} compute={} bandwidth={}", spec->name,
               FormatBytes(spec->memory_quota_bytes), spec->compute_share, spec->bandwidth_cap);
  return PartitionReply(core_, spec->name, context, response->mutable_partition());
}

grpc::Status AdminServiceImpl::DeletePartition(grpc::ServerContext* context,
                                               const v1::DeletePartitionRequest* request,
                                               v1::DeletePartitionResponse* response) {
  if (grpc::Status s = guard_.CheckAdmin(context, "DeletePartition"); !s.ok()) return s;
  if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
  absl::StatusOr<int> closed = core_.DeletePartition(request->name(), request->force());
  if (!closed.ok()) return ToGrpc(closed.status(), context);
  spdlog::info("partition deleted: partition={} sessions_closed={}", request->name(), *closed);
  response->set_sessions_closed(*closed);
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::ListPartitions(grpc::ServerContext* /*context*/,
                                              const v1::ListPartitionsRequest* /*request*/,
                                              v1::ListPartitionsResponse* response) {
  for (const PartitionStatus& status : core_.ListPartitions()) {
    ToProto(status, response->add_partitions());
  }
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::ListTenants(grpc::ServerContext* context,
                                           const v1::ListTenantsRequest* /*request*/,
                                           v1::ListTenantsResponse* response) {
  const Principal caller = guard_.Caller(*context);
  const std::shared_ptr<const AccessPolicy> policy = guard_.policy();
  // As for tasks: an admin sees every tenant, another caller the tenants of the open
  // sessions ListSessions shows it.
  std::optional<absl::flat_hash_set<std::string>> visible;
  if (!policy->IsAdmin(caller)) {
    visible.emplace();
    for (const SessionSummary& s : core_.ListSessions()) {
      if (policy->MaySeeSession(caller, s.owner)) visible->insert(s.tenant);
    }
  }
  for (const TenantUsage& usage : core_.ListTenants()) {
    if (visible.has_value() && !visible->contains(usage.tenant)) continue;
    ToProto(usage, response->add_tenants());
  }
  return grpc::Status::OK;
}

bool AdminServiceImpl::MaySeeTask(const Principal& caller, const TaskInfo& task) const {
  // Only a live session has an owner to check; tasks of ended sessions are for admins.
  absl::StatusOr<Principal> owner = core_.SessionOwner(task.session_id);
  return owner.ok() && guard_.MaySee(caller, *owner);
}

grpc::Status AdminServiceImpl::ListTasks(grpc::ServerContext* context,
                                         const v1::ListTasksRequest* request,
                                         v1::ListTasksResponse* response) {
  if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
  TaskFilter filter;
  if (!request->partition().empty()) filter.partition = request->partition();
  absl::StatusOr<std::optional<TaskState>> state = FromProto(request->state());
  if (!state.ok()) return ToGrpc(state.status(), context);
  filter.state = *state;
  if (request->limit() < 0) {
    return ToGrpc(absl::InvalidArgumentError(
                      absl::StrCat("limit = ", request->limit(), " must be >= 0")),
                  context);
  }
  filter.limit = request->limit();
  const Principal caller = guard_.Caller(*context);
  const bool admin = guard_.policy()->IsAdmin(caller);
  if (!admin) filter.limit = 0;  // the limit applies to what the caller may see
  const absl::Time now = clock_.Now();
  for (const TaskInfo& task : core_.ListTasks(filter)) {
    if (!admin && !MaySeeTask(caller, task)) continue;
    if (request->limit() > 0 && response->tasks_size() >= request->limit()) break;
    ToProto(task, now, response->add_tasks());
  }
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::CancelTask(grpc::ServerContext* context,
                                          const v1::CancelTaskRequest* request,
                                          v1::CancelTaskResponse* /*response*/) {
  const Principal caller = guard_.Caller(*context);
  if (!guard_.policy()->IsAdmin(caller)) {
    // Only tasks of the caller's own sessions, and a foreign one reads as unknown.
    bool exists = false;
    bool visible = false;
    for (const TaskInfo& task : core_.ListTasks({})) {
      if (task.id == request->task_id()) {
        exists = true;
        visible = MaySeeTask(caller, task);
        break;
      }
    }
    if (!visible) {
      if (exists) {
        spdlog::warn("task cancel refused: task={} caller=\"{}\"", request->task_id(),
                     caller.Describe());
      }
      return ToGrpc(TaskNotFoundError(request->task_id()), context);
    }
  }
  absl::Status status = core_.CancelTask(request->task_id(), "an operator cancelled it");
  if (!status.ok()) return ToGrpc(status, context);
  spdlog::info("task cancelled by an operator: task={}", request->task_id());
  return grpc::Status::OK;
}

}  // namespace gpukit::service
