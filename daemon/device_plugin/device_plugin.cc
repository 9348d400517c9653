#include "daemon/device_plugin/device_plugin.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace gpukit::device_plugin {

DevicePlugin::DevicePlugin(const PluginOptions& options, PartitionSource& source)
    : options_(options), source_(source) {}

DevicePlugin::~DevicePlugin() {
  for (auto& [name, served] : served_) served.endpoint->Stop();
}

void DevicePlugin::Reconcile() {
  absl::StatusOr<std::vector<PartitionView>> partitions = source_.List();
  if (partitions.ok()) {
    if (!gpukitd_answers_) spdlog::info("gpukitd answers again: devices Healthy");
    gpukitd_answers_ = true;
    FollowPartitions(*partitions);
  } else if (gpukitd_answers_) {
    spdlog::warn("gpukitd does not answer ({}): {} resource(s) Unhealthy",
                 std::string(partitions.status().message()), served_.size());
    gpukitd_answers_ = false;
  }
  SetHealthy(gpukitd_answers_);
  FollowKubelet();
}

void DevicePlugin::Run(absl::Notification& stop, absl::Duration poll_interval) {
  do {
    Reconcile();
  } while (!stop.WaitForNotificationWithTimeout(poll_interval));
}

std::vector<std::string> DevicePlugin::ServedResources() const {
  std::vector<std::string> out;
  for (const auto& [name, served] : served_) out.push_back(served.resource.resource_name);
  return out;
}

void DevicePlugin::FollowPartitions(const std::vector<PartitionView>& partitions) {
  for (const std::string& name : Unadvertisable(partitions)) {
    if (warned_names_.insert(name).second) {
      spdlog::warn("{}", std::string(CheckResourceable(name).message()));
    }
  }
  const std::vector<AdvertisedResource> wanted = AdvertisedResources(partitions, options_.devices);
  // Partitions that are gone: an empty list tells the kubelet at once, then the stream ends.
  for (auto it = served_.begin(); it != served_.end();) {
    const bool still_wanted = std::any_of(wanted.begin(), wanted.end(),
                                          [&](const auto& w) { return w.partition == it->first; });
    if (still_wanted) {
      ++it;
      continue;
    }
    spdlog::info("partition {} is gone: {} advertises no device", it->first,
                 it->second.resource.resource_name);
    it->second.endpoint->SetDevices({});
    it->second.endpoint->Stop();
    it = served_.erase(it);
  }
  for (const AdvertisedResource& resource : wanted) {
    auto it = served_.find(resource.partition);
    if (it != served_.end()) {
      if (it->second.resource.device_ids != resource.device_ids) {
        spdlog::info("{} now advertises {} device(s)", resource.resource_name,
                     resource.device_ids.size());
      }
      it->second.resource = resource;
      it->second.endpoint->SetDevices(resource.device_ids);
      continue;
    }
    Served served{.resource = resource};
    if (absl::Status status = StartEndpoint(served); !status.ok()) {
      spdlog::error("cannot serve {}: {}", resource.resource_name, std::string(status.message()));
      continue;
    }
    spdlog::info("serving {} ({} device(s)) on {}", resource.resource_name,
                 resource.device_ids.size(), served.endpoint->options().socket_path);
    served_.emplace(resource.partition, std::move(served));
  }
}

void DevicePlugin::SetHealthy(bool healthy) {
  for (auto& [name, served] : served_) served.endpoint->SetHealthy(healthy);
}

absl::Status DevicePlugin::StartEndpoint(Served& served) {
  if (served.endpoint != nullptr) served.endpoint->Stop();  // before a new one takes its path
  absl::StatusOr<std::unique_ptr<PluginEndpoint>> endpoint = PluginEndpoint::Start(
      {.socket_path = absl::StrCat(options_.plugin_dir, "/", served.resource.endpoint),
       .partition = served.resource.partition,
       .mount = options_.mount},
      served.resource.device_ids);
  if (!endpoint.ok()) {
    served.endpoint.reset();
    return endpoint.status();
  }
  served.endpoint = *std::move(endpoint);
  served.endpoint->SetHealthy(gpukitd_answers_);
  served.registered = false;
  return absl::OkStatus();
}

void DevicePlugin::FollowKubelet() {
  const std::string kubelet_socket = absl::StrCat(options_.plugin_dir, "/", kKubeletSocketName);
  const std::optional<FileId> kubelet = SocketFileId(kubelet_socket);
  if (kubelet != kubelet_id_) {
    // A kubelet that (re)started knows no plugin: every resource registers again.
    if (kubelet_id_.has_value()) {
      spdlog::info(kubelet.has_value() ? "the kubelet restarted: registering again"
                                       : "the kubelet's socket is gone");
    }
    for (auto& [name, served] : served_) served.registered = false;
    kubelet_id_ = kubelet;
  }
  for (auto it = served_.begin(); it != served_.end();) {
    Served& served = it->second;
    if (!served.endpoint->SocketExists()) {
      spdlog::info("{}'s socket is gone: serving it again", served.resource.resource_name);
      if (absl::Status status = StartEndpoint(served); !status.ok()) {
        spdlog::error("cannot serve {}: {}", served.resource.resource_name,
                      std::string(status.message()));
        it = served_.erase(it);  // the next round starts it afresh
        continue;
      }
    }
    ++it;
  }
  if (!kubelet.has_value()) return;  // registered once the kubelet is there
  for (auto& [name, served] : served_) {
    if (served.registered) continue;
    v1beta1::RegisterRequest request;
    request.set_version(std::string(kApiVersion));
    request.set_endpoint(served.resource.endpoint);
    request.set_resource_name(served.resource.resource_name);
    request.mutable_options()->set_pre_start_required(false);
    request.mutable_options()->set_get_preferred_allocation_available(false);
    absl::Status status = RegisterWithKubelet(kubelet_socket, request, options_.kubelet_timeout);
    if (!status.ok()) {
      spdlog::warn("{} (trying again next round)", std::string(status.message()));
      continue;
    }
    served.registered = true;
    spdlog::info("registered {} with the kubelet (endpoint {})", served.resource.resource_name,
                 served.resource.endpoint);
  }
}

}  // namespace gpukit::device_plugin
