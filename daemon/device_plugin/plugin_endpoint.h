// PluginEndpoint: the DevicePlugin service of one resource name (one gpukitd partition),
// served on its own unix socket in the kubelet's plugin directory.
//
// The kubelet dials the endpoint after Registration.Register and keeps one ListAndWatch
// stream open; SetDevices changes what that stream reports. Allocate answers with the mount
// of gpukitd's socket directory and GPUKIT_ADDR / GPUKIT_PARTITION (allocate.h).
//
//   GPUKIT_ASSIGN_OR_RETURN(
//       std::unique_ptr<PluginEndpoint> endpoint,
//       PluginEndpoint::Start({.socket_path = dir + "/gpukit-default.sock",
//                              .partition = "default", .mount = mount},
//                             {"default-0", "default-1"}));
//   endpoint->SetHealthy(false);  // gpukitd is gone: every stream sends the list Unhealthy
//   endpoint->Stop();             // streams send what they have not sent, then end
//
// Thread safety: SetDevices, SetHealthy, devices and SocketExists may be called from any
// thread; Stop (and the destructor) from one thread, once no other call is running. The
// gRPC handlers run on the server's threads.
#ifndef GPUKIT_DAEMON_DEVICE_PLUGIN_PLUGIN_ENDPOINT_H_
#define GPUKIT_DAEMON_DEVICE_PLUGIN_PLUGIN_ENDPOINT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/device_plugin/allocate.h"
#include "grpcpp/grpcpp.h"

namespace gpukit::device_plugin {

struct EndpointOptions {
  // Where to listen: <plugin dir>/<endpoint name>. A file already there is removed first
  // (a socket left by an earlier run).
  std::string socket_path;
  std::string partition;
  SocketMount mount;
};

class PluginEndpoint {
 public:
  // Starts serving `device_ids`, all Healthy. INVALID_ARGUMENT if the path is too long for a
  // unix socket; UNAVAILABLE naming the path if gRPC cannot listen there.
  static absl::StatusOr<std::unique_ptr<PluginEndpoint>> Start(const EndpointOptions& options,
                                                               std::vector<std::string> device_ids);

  PluginEndpoint(const PluginEndpoint&) = delete;
  PluginEndpoint& operator=(const PluginEndpoint&) = delete;
  ~PluginEndpoint();

  // Replaces the device ids (health unchanged). Streams send the new list if it differs.
  void SetDevices(std::vector<std::string> device_ids);
  // Marks every device Healthy or Unhealthy. Streams send the list if that changes it.
  void SetHealthy(bool healthy);
  std::vector<std::string> devices() const;

  // Whether the socket file is still there (a restarting kubelet deletes every socket in
  // its plugin directory). One stat call.
  bool SocketExists() const;

  // Removes the socket file, ends every ListAndWatch stream (each first sends a list it has
  // not sent yet) and stops the server (waiting up to a second for calls in flight).
  // Idempotent.
  void Stop();

  const EndpointOptions& options() const { return options_; }

 private:
  class State;
  class Service;
  PluginEndpoint(const EndpointOptions& options, std::shared_ptr<State> state);

  const EndpointOptions options_;
  std::shared_ptr<State> state_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace gpukit::device_plugin

#endif  // GPUKIT_DAEMON_DEVICE_PLUGIN_PLUGIN_ENDPOINT_H_
