// MetricsServer: serves Prometheus metrics over HTTP on one address: GET /metrics answers
// with what `render` returns, as the text exposition format 0.0.4; every other path is 404.
// The HTTP protocol is cpp-httplib's (Debian's libcpp-httplib), on a small pool of its own
// threads, apart from the gRPC server's, so a slow scraper holds no request thread.
//
//   GPUKIT_ASSIGN_OR_RETURN(
//       std::unique_ptr<MetricsServer> metrics,
//       MetricsServer::Start("127.0.0.1:0", [&] { return daemon_metrics.Render(); }));
//   spdlog::info("port {}", metrics->port());  // the bound port, also for port 0
//   metrics->Stop();  // or destroy it
//
// Thread safety: Start and Stop from one thread; `render` is called on the server's threads,
// several at once when scrapes overlap, and must be thread-safe.
#ifndef GPUKIT_DAEMON_METRICS_METRICS_SERVER_H_
#define GPUKIT_DAEMON_METRICS_METRICS_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpukit {

class MetricsServer {
 public:
  using Render = std::function<std::string()>;

  // Binds `address` ("host:port", "[::1]:port"; port 0 takes a free one) and serves until
  // Stop. UNAVAILABLE when the address cannot be bound (in use, no permission, unknown
  // host); INVALID_ARGUMENT naming it when it is not host:port (no colon, no host, a port
  // that is not 0-65535, a unix: address).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(absl::string_view address,
                                                              Render render);
  ~MetricsServer();  // Stop()

  // Closes the listening socket and waits for the scrapes in progress. Idempotent.
  void Stop();

  int port() const { return port_; }
  // "http://host:port/metrics" with the bound port.
  const std::string& url() const { return url_; }

 private:
  struct Http;  // the httplib server, kept out of this header
  MetricsServer(std::unique_ptr<Http> http, int port, std::string url);

  std::unique_ptr<Http> http_;
  int port_ = 0;
  std::string url_;
  std::thread thread_;
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_METRICS_METRICS_SERVER_H_
