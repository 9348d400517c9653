#include "tests/integration/fake_kubelet.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpukit::testing {

absl::StatusOr<std::unique_ptr<FakeKubelet>> FakeKubelet::Start(const std::string& socket_path) {
  unlink(socket_path.c_str());
  std::unique_ptr<FakeKubelet> kubelet(new FakeKubelet(socket_path));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("unix://", socket_path), grpc::InsecureServerCredentials());
  builder.RegisterService(kubelet.get());
  kubelet->server_ = builder.BuildAndStart();
  if (kubelet->server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("fake kubelet cannot listen at ", socket_path));
  }
  return kubelet;
}

FakeKubelet::~FakeKubelet() { Stop(); }

void FakeKubelet::Stop() {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  server_.reset();
  unlink(socket_path_.c_str());
}

grpc::Status FakeKubelet::Register(grpc::ServerContext*, const v1beta1::RegisterRequest* request,
                                   v1beta1::Empty*) {
  absl::MutexLock lock(&mu_);
  registrations_.push_back(*request);
  return grpc::Status::OK;
}

int FakeKubelet::Registrations(const std::string& resource_name) const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const v1beta1::RegisterRequest& r : registrations_) n += r.resource_name() == resource_name;
  return n;
}

absl::StatusOr<v1beta1::RegisterRequest> FakeKubelet::WaitForRegistration(
    const std::string& resource_name, int count, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto nth = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> const v1beta1::RegisterRequest* {
    int seen = 0;
    for (const v1beta1::RegisterRequest& r : registrations_) {
      if (r.resource_name() == resource_name && ++seen == count) return &r;
    }
    return nullptr;
  };
  auto arrived = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return nth() != nullptr; };
  mu_.AwaitWithTimeout(absl::Condition(&arrived), timeout);
  if (const v1beta1::RegisterRequest* r = nth(); r != nullptr) return *r;
  std::vector<std::string> names;
  for (const v1beta1::RegisterRequest& r : registrations_) names.push_back(r.resource_name());
  return absl::DeadlineExceededError(absl::StrCat(
      "registration ", count, " of ", resource_name, " did not arrive within ",
      absl::FormatDuration(timeout), "; registrations so far: [", absl::StrJoin(names, ", "), "]"));
}

}  // namespace gpukit::testing
