#include "daemon/metrics/metrics_server.h"

#include <atomic>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/metrics/exposition.h"
#include "httplib.h"
#include <sys/socket.h>

namespace gpukit {

struct MetricsServer::Http {
  httplib::Server server;
  std::atomic<bool> listen_returned{false};
};

namespace {

// Scrapes are rare (every few seconds) and cheap; two threads let one wait on a slow client
// while another answers. httplib's default pool is one thread per core.
constexpr int kHttpThreads = 2;

}  // namespace

MetricsServer::MetricsServer(std::unique_ptr<Http> http, int port, std::string url)
    : http_(std::move(http)), port_(port), url_(std::move(url)) {}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(absl::string_view address,
                                                                    Render render) {
  const size_t colon = address.rfind(':');
  int port = 0;
  // As the configuration's check (daemon/config/config.cc): "unix:9400" would otherwise be
  // host "unix", and fail later as an unknown host.
  if (colon == absl::string_view::npos || colon == 0 || absl::StartsWith(address, "unix:") ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address \"", address,
                     "\" is not host:port (e.g. 127.0.0.1:9400, port 0 for any)"));
  }
  absl::string_view host = address.substr(0, colon);
  const std::string url_host(host);
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);  // httplib takes an IPv6 host bare
  }
  auto http = std::make_unique<Http>();
  // httplib owns the pool it asks for (its API takes a raw pointer).
  http->server.new_task_queue = [] { return new httplib::ThreadPool(kHttpThreads); };
  // SO_REUSEADDR only (a restart may bind while old connections linger), not httplib's default
  // SO_REUSEPORT, with which a second gpukitd could bind the same port and take half the
  // scrapes instead of failing.
  http->server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  http->server.Get("/metrics", [render = std::move(render)](const httplib::Request& /*request*/,
                                                            httplib::Response& response) {
    response.set_content(render(), std::string(kExpositionContentType).c_str());
  });
  const std::string bind_host(host);
  if (port == 0) {
    port = http->server.bind_to_any_port(bind_host);
  } else if (!http->server.bind_to_port(bind_host, port)) {
    port = -1;
  }
  if (port <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address,
                                               " (address in use, no permission, or unknown "
                                               "host)"));
  }
  std::unique_ptr<MetricsServer> server(new MetricsServer(
      std::move(http), port, absl::StrCat("http://", url_host, ":", port, "/metrics")));
  Http* raw = server->http_.get();
  server->thread_ = std::thread([raw] {
    raw->server.listen_after_bind();
    raw->listen_returned = true;
  });
  // httplib's stop() does nothing until its accept loop runs, so Stop could not end a server
  // whose loop had not started yet: wait for it here (microseconds, once at start-up).
  while (!raw->server.is_running() && !raw->listen_returned) {
    absl::SleepFor(absl::Microseconds(100));
  }
  return server;
}

void MetricsServer::Stop() {
  if (http_ != nullptr) http_->server.stop();
  if (thread_.joinable()) thread_.join();
}

MetricsServer::~MetricsServer() { Stop(); }

}  // namespace gpukit
