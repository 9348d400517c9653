#include "daemon/metrics/rpc_interceptor.h"

#include <chrono>

namespace gpukit {
namespace {

class RpcMetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  RpcMetricsInterceptor(RpcMetrics& metrics, const char* method)
      : metrics_(metrics), method_(method == nullptr ? "unknown" : method) {}

  // gRPC destroys the interceptor with its call.
  ~RpcMetricsInterceptor() override {
    if (!recorded_) Record(grpc::StatusCode::CANCELLED);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (!recorded_ && methods->QueryInterceptionHookPoint(
                          grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      Record(methods->GetSendStatus().error_code());
    }
    methods->Proceed();
  }

 private:
  void Record(grpc::StatusCode code) {
    recorded_ = true;
    metrics_.Record(method_, static_cast<int>(code),
                    absl::FromChrono(std::chrono::steady_clock::now() - start_));
  }

  RpcMetrics& metrics_;
  const absl::string_view method_;  // gRPC's registered method name, which outlives the call
  // Monotonic: a latency must not jump with the wall clock.
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  bool recorded_ = false;
};

}  // namespace

grpc::experimental::Interceptor* RpcMetricsInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  // gRPC owns what this returns and deletes it with the call (its API takes a raw pointer).
  return new RpcMetricsInterceptor(metrics_, info->method());
}

}  // namespace gpukit
