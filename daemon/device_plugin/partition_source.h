// PartitionSource: where gpukit-device-plugin learns which partitions gpukitd has.
//
// GpukitdPartitionSource asks a live gpukitd (AdminService.ListPartitions, over libgpukit's
// channel plumbing); tests of the plugin's loop pass a fake.
//
//   std::unique_ptr<PartitionSource> source =
//       GpukitdPartitionSource::Create({.address = "unix:///run/gpukit/gpukitd.sock"});
//   absl::StatusOr<std::vector<PartitionView>> partitions = source->List();
//   // UNAVAILABLE while gpukitd does not answer: the plugin marks its devices Unhealthy.
//
// Thread safety: List is called from one thread at a time (the plugin's loop).
#ifndef GPUKIT_DAEMON_DEVICE_PLUGIN_PARTITION_SOURCE_H_
#define GPUKIT_DAEMON_DEVICE_PLUGIN_PARTITION_SOURCE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/device_plugin/resources.h"
#include "gpukit/v1/admin.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace gpukit::device_plugin {

class PartitionSource {
 public:
  virtual ~PartitionSource() = default;
  // Every partition, in gpukitd's order. Any error means "gpukitd cannot be asked now".
  virtual absl::StatusOr<std::vector<PartitionView>> List() = 0;
};

struct GpukitdSourceOptions {
  // gpukitd's gRPC target, e.g. "unix:///run/gpukit/gpukitd.sock".
  std::string address;
  // Longest wait for a connection, and for each ListPartitions call.
  absl::Duration timeout = absl::Seconds(2);
};

class GpukitdPartitionSource final : public PartitionSource {
 public:
  // Connects lazily: creating it never fails, List reports an absent daemon.
  static std::unique_ptr<GpukitdPartitionSource> Create(const GpukitdSourceOptions& options);

  // One ListPartitions call (connecting first if no channel is up). UNAVAILABLE when no
  // daemon accepts at the address (then the next call connects afresh, so a restarted
  // gpukitd is found at once rather than after gRPC's reconnect backoff); otherwise the
  // call's error. Costs one round trip, or a connection attempt of at most `timeout`.
  absl::StatusOr<std::vector<PartitionView>> List() override;

 private:
  explicit GpukitdPartitionSource(const GpukitdSourceOptions& options) : options_(options) {}

  const GpukitdSourceOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
};

}  // namespace gpukit::device_plugin

#endif  // GPUKIT_DAEMON_DEVICE_PLUGIN_PARTITION_SOURCE_H_
