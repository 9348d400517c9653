// What gpukit-device-plugin advertises to the kubelet: one extended resource per gpukitd
// partition, "gpukit.io/<partition>", with a number of interchangeable device ids.
//
// A device id is not a GPU: it is one slot of the partition, and a pod that is given one
// opens its session(s) in that partition. How many slots a partition has:
//
//   the partition's max_sessions when it sets one (more pods than sessions could not all
//   open one), else DeviceOptions::devices_per_partition (gpukit-device-plugin's
//   --devices-per-partition, 16 by default).
//
//   std::vector<AdvertisedResource> want = AdvertisedResources(partitions, options);
//   // want[i].resource_name == "gpukit.io/default", want[i].endpoint == "gpukit-default.sock",
//   // want[i].device_ids == {"default-0", "default-1", ...}
//
// Thread safety: pure functions.
#ifndef GPUKIT_DAEMON_DEVICE_PLUGIN_RESOURCES_H_
#define GPUKIT_DAEMON_DEVICE_PLUGIN_RESOURCES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gpukit::device_plugin {

// The resource domain every name is advertised under.
inline constexpr absl::string_view kResourceDomain = "gpukit.io";
// The device plugin API version this plugin speaks (RegisterRequest.version).
inline constexpr absl::string_view kApiVersion = "v1beta1";
// Device health values of the API.
inline constexpr absl::string_view kHealthy = "Healthy";
inline constexpr absl::string_view kUnhealthy = "Unhealthy";

// The part of a gpukitd partition the plugin reads (from AdminService.ListPartitions).
struct PartitionView {
  std::string name;
  // 0: the partition sets no limit.
  int32_t max_sessions = 0;
};

struct DeviceOptions {
  // Slots of a partition whose max_sessions is 0. >= 1.
  int32_t devices_per_partition = 16;
};

// One resource name the plugin serves and registers.
struct AdvertisedResource {
  std::string partition;
  std::string resource_name;  // "gpukit.io/<partition>"
  std::string endpoint;       // socket file name in the plugin directory
  std::vector<std::string> device_ids;

  friend bool operator==(const AdvertisedResource&, const AdvertisedResource&) = default;
};

// OK if "gpukit.io/<partition>" is a valid Kubernetes extended resource name: the partition
// name (gpukitd allows 1-63 of [A-Za-z0-9._-]) must also begin and end with a letter or
// digit. INVALID_ARGUMENT naming the partition otherwise.
absl::Status CheckResourceable(absl::string_view partition);

// "gpukit.io/<partition>".
std::string ResourceName(absl::string_view partition);

// "gpukit-<partition>.sock": the plugin's socket for that partition's resource.
std::string EndpointName(absl::string_view partition);

// "<partition>-0" ... "<partition>-<count-1>".
std::vector<std::string> DeviceIds(absl::string_view partition, int32_t count);

// The resources to advertise for `partitions`, in the order given; partitions whose names
// CheckResourceable refuses are left out (the caller logs them, see Unadvertisable).
std::vector<AdvertisedResource> AdvertisedResources(const std::vector<PartitionView>& partitions,
                                                    const DeviceOptions& options);

// The names of `partitions` that AdvertisedResources leaves out.
std::vector<std::string> Unadvertisable(const std::vector<PartitionView>& partitions);

}  // namespace gpukit::device_plugin

#endif  // GPUKIT_DAEMON_DEVICE_PLUGIN_RESOURCES_H_
