// FakeKubelet: the kubelet's side of the device plugin API for tests: a gRPC server on a unix
// socket (<plugin dir>/kubelet.sock) serving v1beta1.Registration from the repository's
// proto/k8s/deviceplugin/v1beta1/api.proto, recording every RegisterRequest.
//
// Unlike a real kubelet it does not dial the plugin back: the test dials the endpoint a
// registration names and calls ListAndWatch and Allocate itself.
//
//   GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<FakeKubelet> kubelet,
//                               FakeKubelet::Start(plugin_dir + "/kubelet.sock"));
//   GPUKIT_ASSERT_OK_AND_ASSIGN(v1beta1::RegisterRequest r,
//                               kubelet->WaitForRegistration("gpukit.io/default", 1,
//                                                            absl::Seconds(30)));
//
// Thread safety: every method may be called from any thread; Register runs on the server's.
#ifndef GPUKIT_TESTS_INTEGRATION_FAKE_KUBELET_H_
#define GPUKIT_TESTS_INTEGRATION_FAKE_KUBELET_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "k8s/deviceplugin/v1beta1/api.grpc.pb.h"

namespace gpukit::testing {

class FakeKubelet final : public v1beta1::Registration::Service {
 public:
  // Serves at `socket_path` (removing a file already there). UNAVAILABLE if it cannot.
  static absl::StatusOr<std::unique_ptr<FakeKubelet>> Start(const std::string& socket_path);
  ~FakeKubelet() override;

  // The `count`-th registration (1: the first) of `resource_name`, once it has arrived;
  // DEADLINE_EXCEEDED naming what did arrive if it does not within `timeout`.
  absl::StatusOr<v1beta1::RegisterRequest> WaitForRegistration(const std::string& resource_name,
                                                               int count, absl::Duration timeout);
  // How many registrations of `resource_name` arrived so far.
  int Registrations(const std::string& resource_name) const;

  // Stops serving and removes the socket file, as a kubelet going away does. Idempotent.
  void Stop();

  grpc::Status Register(grpc::ServerContext* context, const v1beta1::RegisterRequest* request,
                        v1beta1::Empty* response) override;

 private:
  explicit FakeKubelet(std::string socket_path) : socket_path_(std::move(socket_path)) {}

  const std::string socket_path_;
  std::unique_ptr<grpc::Server> server_;
  mutable absl::Mutex mu_;
  std::vector<v1beta1::RegisterRequest> registrations_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpukit::testing

#endif  // GPUKIT_TESTS_INTEGRATION_FAKE_KUBELET_H_
