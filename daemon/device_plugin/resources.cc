#include "daemon/device_plugin/resources.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace gpukit::device_plugin {

absl::Status CheckResourceable(absl::string_view partition) {
  // Kubernetes: the name part of a resource is a qualified name, at most 63 characters of
  // [A-Za-z0-9._-] beginning and ending with a letter or digit.
  const bool ends_ok = !partition.empty() && absl::ascii_isalnum(partition.front()) &&
                       absl::ascii_isalnum(partition.back());
  bool chars_ok = partition.size() <= 63;
  for (char c : partition) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') chars_ok = false;
  }
  if (ends_ok && chars_ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "partition \"", absl::CEscape(partition), "\" cannot be advertised as ", kResourceDomain,
      "/<partition>: a resource name is 1-63 of [A-Za-z0-9._-] that begin and end "
      "with a letter or digit"));
}

std::string ResourceName(absl::string_view partition) {
  return absl::StrCat(kResourceDomain, "/", partition);
}

std::string EndpointName(absl::string_view partition) {
  return absl::StrCat("gpukit-", partition, ".sock");
}

std::vector<std::string> DeviceIds(absl::string_view partition, int32_t count) {
  std::vector<std::string> ids;
  ids.reserve(count > 0 ? count : 0);
  for (int32_t i = 0; i < count; ++i) ids.push_back(absl::StrCat(partition, "-", i));
  return ids;
}

std::vector<AdvertisedResource> AdvertisedResources(const std::vector<PartitionView>& partitions,
                                                    const DeviceOptions& options) {
  std::vector<AdvertisedResource> out;
  for (const PartitionView& p : partitions) {
    if (!CheckResourceable(p.name).ok()) continue;
    const int32_t count = p.max_sessions > 0 ? p.max_sessions : options.devices_per_partition;
    out.push_back({.partition = p.name,
                   .resource_name = ResourceName(p.name),
                   .endpoint = EndpointName(p.name),
                   .device_ids = DeviceIds(p.name, count)});
  }
  return out;
}

std::vector<std::string> Unadvertisable(const std::vector<PartitionView>& partitions) {
  std::vector<std::string> out;
  for (const PartitionView& p : partitions) {
    if (!CheckResourceable(p.name).ok()) out.push_back(p.name);
  }
  return out;
}

}  // namespace gpukit::device_plugin
