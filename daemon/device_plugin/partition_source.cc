#include "daemon/device_plugin/partition_source.h"

#include "client/cpp/channel.h"
#include "runtime/base/status_macros.h"

namespace gpukit::device_plugin {

std::unique_ptr<GpukitdPartitionSource> GpukitdPartitionSource::Create(
    const GpukitdSourceOptions& options) {
  return std::unique_ptr<GpukitdPartitionSource>(new GpukitdPartitionSource(options));
}

absl::StatusOr<std::vector<PartitionView>> GpukitdPartitionSource::List() {
  if (admin_ == nullptr) {
    GPUKIT_ASSIGN_OR_RETURN(channel_, ConnectChannel(options_.address, options_.timeout));
    admin_ = v1::AdminService::NewStub(channel_);
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoMilliseconds(options_.timeout));
  v1::ListPartitionsResponse response;
  absl::Status status = FromGrpc(admin_->ListPartitions(&context, {}, &response), context);
  if (!status.ok()) {
    // Whatever went wrong, the next call starts from a fresh connection.
    admin_.reset();
    channel_.reset();
    return status;
  }
  std::vector<PartitionView> out;
  out.reserve(response.partitions_size());
  for (const v1::PartitionStatus& p : response.partitions()) {
    out.push_back({.name = p.partition().name(), .max_sessions = p.partition().max_sessions()});
  }
  return out;
}

}  // namespace gpukit::device_plugin
