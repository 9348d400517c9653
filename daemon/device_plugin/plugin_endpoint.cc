#include "daemon/device_plugin/plugin_endpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/device_plugin/resources.h"
#include "k8s/deviceplugin/v1beta1/api.grpc.pb.h"
#include "spdlog/spdlog.h"
#include <sys/stat.h>
#include <sys/un.h>

namespace gpukit::device_plugin {

// The device list that the handlers read and the plugin's loop writes; every change bumps
// `version`, which is how a ListAndWatch stream knows it has something to send.
class PluginEndpoint::State {
 public:
  explicit State(std::vector<std::string> ids) : ids_(std::move(ids)) {}

  void SetDevices(std::vector<std::string> ids) {
    absl::MutexLock lock(&mu_);
    if (ids == ids_) return;
    ids_ = std::move(ids);
    ++version_;
  }
  void SetHealthy(bool healthy) {
    absl::MutexLock lock(&mu_);
    if (healthy == healthy_) return;
    healthy_ = healthy;
    ++version_;
  }
  void SetStopping() {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  std::vector<std::string> ids() const {
    absl::MutexLock lock(&mu_);
    return ids_;
  }

  // The next list to send after `sent_version`: waits up to `wait` for one. Sets *done
  // when the endpoint stops and nothing is left to send.
  bool Next(uint64_t& sent_version, v1beta1::ListAndWatchResponse& out, absl::Duration wait,
            bool& done) {
    absl::MutexLock lock(&mu_);
    auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return stopping_ || version_ != sent_version;
    };
    mu_.AwaitWithTimeout(absl::Condition(&ready), wait);
    done = stopping_ && version_ == sent_version;
    if (version_ == sent_version) return false;
    out.Clear();
    for (const std::string& id : ids_) {
      v1beta1::Device* device = out.add_devices();
      device->set_id(id);
      device->set_health(std::string(healthy_ ? kHealthy : kUnhealthy));
    }
    sent_version = version_;
    return true;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> ids_ ABSL_GUARDED_BY(mu_);
  bool healthy_ ABSL_GUARDED_BY(mu_) = true;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Starts at 1 so that a new stream (sent_version 0) sends the list at once.
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 1;
};

class PluginEndpoint::Service final : public v1beta1::DevicePlugin::Service {
 public:
  Service(const EndpointOptions& options, std::shared_ptr<State> state)
      : options_(options), state_(std::move(state)) {}

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                      v1beta1::DevicePluginOptions* response) override {
    // Slots are interchangeable: no preference to give, and nothing to do before a start.
    response->set_pre_start_required(false);
    response->set_get_preferred_allocation_available(false);
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty*,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override {
    spdlog::info("kubelet watches {} (partition {})", ResourceName(options_.partition),
                 options_.partition);
    uint64_t sent_version = 0;
    while (true) {
      v1beta1::ListAndWatchResponse response;
      bool done = false;
      // The wait is bounded so that a stream the kubelet dropped is noticed (a sync handler
      // hears of cancellation only by asking).
      const bool send = state_->Next(sent_version, response, absl::Seconds(1), done);
      if (send && !writer->Write(response)) return grpc::Status::OK;  // the kubelet left
      if (done) return grpc::Status::OK;
      if (context->IsCancelled()) return grpc::Status::CANCELLED;
    }
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                      const v1beta1::PreferredAllocationRequest* request,
                                      v1beta1::PreferredAllocationResponse* response) override {
    // Any slots will do: the ones that must be in, then the first available others.
    for (const v1beta1::ContainerPreferredAllocationRequest& container :
         request->container_requests()) {
      v1beta1::ContainerPreferredAllocationResponse* out = response->add_container_responses();
      for (const std::string& id : container.must_include_deviceids()) {
        if (out->deviceids_size() < container.allocation_size()) out->add_deviceids(id);
      }
      for (const std::string& id : container.available_deviceids()) {
        if (out->deviceids_size() >= container.allocation_size()) break;
        const auto& chosen = out->deviceids();
        if (std::find(chosen.begin(), chosen.end(), id) == chosen.end()) out->add_deviceids(id);
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* request,
                        v1beta1::AllocateResponse* response) override {
    absl::StatusOr<v1beta1::AllocateResponse> answer =
        AllocateResponseFor(options_.partition, state_->ids(), options_.mount, *request);
    if (!answer.ok()) {
      spdlog::warn("Allocate of {} refused: {}", ResourceName(options_.partition),
                   std::string(answer.status().message()));
      return grpc::Status(static_cast<grpc::StatusCode>(answer.status().code()),
                          std::string(answer.status().message()));
    }
    spdlog::info("Allocate of {}: {} container(s) get {}", ResourceName(options_.partition),
                 request->container_requests_size(), options_.mount.host_socket_dir);
    *response = *std::move(answer);
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                 v1beta1::PreStartContainerResponse*) override {
    return grpc::Status::OK;  // nothing to prepare (and not asked for: pre_start_required)
  }

 private:
  const EndpointOptions options_;
  std::shared_ptr<State> state_;
};

absl::StatusOr<std::unique_ptr<PluginEndpoint>> PluginEndpoint::Start(
    const EndpointOptions& options, std::vector<std::string> device_ids) {
  if (options.socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "socket path ", options.socket_path, " has ", options.socket_path.size(),
        " characters; a unix socket's may have at most ", sizeof(sockaddr_un::sun_path) - 1));
  }
  unlink(options.socket_path.c_str());  // an earlier run's socket, if any
  auto state = std::make_shared<State>(std::move(device_ids));
  std::unique_ptr<PluginEndpoint> endpoint(new PluginEndpoint(options, state));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("unix://", options.socket_path),
                           grpc::InsecureServerCredentials());
  builder.RegisterService(endpoint->service_.get());
  endpoint->server_ = builder.BuildAndStart();
  if (endpoint->server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve the device plugin API on unix://", options.socket_path));
  }
  return endpoint;
}

PluginEndpoint::PluginEndpoint(const EndpointOptions& options, std::shared_ptr<State> state)
    : options_(options),
      state_(std::move(state)),
      service_(std::make_unique<Service>(options_, state_)) {}

PluginEndpoint::~PluginEndpoint() { Stop(); }

void PluginEndpoint::SetDevices(std::vector<std::string> device_ids) {
  state_->SetDevices(std::move(device_ids));
}

void PluginEndpoint::SetHealthy(bool healthy) { state_->SetHealthy(healthy); }

std::vector<std::string> PluginEndpoint::devices() const { return state_->ids(); }

bool PluginEndpoint::SocketExists() const {
  struct stat st;
  return stat(options_.socket_path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

void PluginEndpoint::Stop() {
  if (server_ == nullptr) return;
  // The file goes first, so that once a stream has ended nobody finds the endpoint.
  unlink(options_.socket_path.c_str());
  state_->SetStopping();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  server_.reset();
}

}  // namespace gpukit::device_plugin
