// RpcMetricsInterceptorFactory: a gRPC server interceptor that records every call's method,
// status code and latency in an RpcMetrics, for every service of the server (unary, streaming,
// synchronous and callback alike), so no handler counts anything itself.
//
//   RpcMetrics rpc;
//   std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> f;
//   f.push_back(std::make_unique<RpcMetricsInterceptorFactory>(rpc));
//   builder.experimental().SetInterceptorCreators(std::move(f));
//
// A call's latency runs from its interceptor's creation (gRPC makes it when the call starts
// in the server, before the handler) to the moment its status is sent; its code is that
// status's. A call that ends without sending a status (its client went away first) is
// counted as CANCELLED when gRPC destroys it. Cost per call: one small allocation (the
// interceptor) and RpcMetrics::Record.
//
// Thread safety: the factory is called by gRPC on any thread; `metrics` must outlive the
// server.
#ifndef GPUKIT_DAEMON_METRICS_RPC_INTERCEPTOR_H_
#define GPUKIT_DAEMON_METRICS_RPC_INTERCEPTOR_H_

#include "daemon/metrics/rpc_metrics.h"
#include "grpcpp/support/server_interceptor.h"

namespace gpukit {

class RpcMetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcMetricsInterceptorFactory(RpcMetrics& metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  RpcMetrics& metrics_;
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_METRICS_RPC_INTERCEPTOR_H_
