#include "daemon/service/convert.h"
#include "daemon/service/services.h"

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
  }
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::ListSessions(grpc::ServerContext* /*context*/,
                                            const v1::ListSessionsRequest* /*request*/,
                                            v1::ListSessionsResponse* response) {
  for (const SessionSummary& s : core_.ListSessions()) {
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
  }
  return grpc::Status::OK;
}

}  // namespace gpukit::service
