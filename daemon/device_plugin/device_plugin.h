// DevicePlugin: gpukit-device-plugin's loop. Each round it asks gpukitd for its partitions
// and makes the kubelet's view follow:
//
//   * a new partition: start a PluginEndpoint for gpukit.io/<partition>, then register it;
//   * a deleted one: its stream sends an empty list, then the endpoint stops;
//   * a changed max_sessions: the stream sends the new list;
//   * gpukitd unreachable: every stream sends its devices Unhealthy (Healthy again once it
//     answers);
//   * the kubelet restarted (kubelet.sock is a new file) or an endpoint's socket is gone:
//     serve again where needed and register every resource again;
//   * a registration that failed (no kubelet yet) is tried again next round.
//
//   DevicePlugin plugin(options, *source);
//   plugin.Run(stop, absl::Seconds(5));  // until stop is notified
//
// Thread safety: Reconcile and Run from one thread; the endpoints' gRPC threads only read
// what each endpoint holds.
#ifndef GPUKIT_DAEMON_DEVICE_PLUGIN_DEVICE_PLUGIN_H_
#define GPUKIT_DAEMON_DEVICE_PLUGIN_DEVICE_PLUGIN_H_

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "daemon/device_plugin/allocate.h"
#include "daemon/device_plugin/kubelet_client.h"
#include "daemon/device_plugin/partition_source.h"
#include "daemon/device_plugin/plugin_endpoint.h"
#include "daemon/device_plugin/resources.h"

namespace gpukit::device_plugin {

struct PluginOptions {
  // The kubelet's plugin directory: kubelet.sock is there, and the plugin's sockets go there.
  std::string plugin_dir = "/var/lib/kubelet/device-plugins";
  DeviceOptions devices;
  // What Allocate mounts and which address it gives the container.
  SocketMount mount;
  // Longest wait for the kubelet to accept a Register call.
  absl::Duration kubelet_timeout = absl::Seconds(5);
};

class DevicePlugin {
 public:
  // `source` must outlive the plugin.
  DevicePlugin(const PluginOptions& options, PartitionSource& source);
  DevicePlugin(const DevicePlugin&) = delete;
  DevicePlugin& operator=(const DevicePlugin&) = delete;
  // Stops every endpoint (removing its socket).
  ~DevicePlugin();

  // One round, as above. Costs one ListPartitions call, a stat per socket and a Register call
  // per resource that needs one; errors are logged and tried again next round.
  void Reconcile();

  // Reconcile every `poll_interval` until `stop` is notified.
  void Run(absl::Notification& stop, absl::Duration poll_interval);

  // The resource names served now, registered or not (for logs and tests).
  std::vector<std::string> ServedResources() const;

 private:
  struct Served {
    AdvertisedResource resource;
    std::unique_ptr<PluginEndpoint> endpoint;
    bool registered = false;
  };

  void FollowPartitions(const std::vector<PartitionView>& partitions);
  void SetHealthy(bool healthy);
  absl::Status StartEndpoint(Served& served);
  void FollowKubelet();

  const PluginOptions options_;
  PartitionSource& source_;
  std::map<std::string, Served> served_;  // by partition name
  std::optional<FileId> kubelet_id_;      // the kubelet.sock the registrations went to
  bool gpukitd_answers_ = true;
  std::set<std::string> warned_names_;  // partitions logged as not advertisable
};

}  // namespace gpukit::device_plugin

#endif  // GPUKIT_DAEMON_DEVICE_PLUGIN_DEVICE_PLUGIN_H_
