#include "client/cpp/channel.h"

#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/support/client_interceptor.h"
#include "runtime/base/default_address.h"
#include "runtime/base/read_file.h"
#include "runtime/base/status_macros.h"

namespace gpukit {

std::string DefaultClientTarget() { return DefaultClientAddress(); }

std::string SessionPartition(const std::string& requested) {
  if (!requested.empty()) return requested;
  const char* from_env = std::getenv("GPUKIT_PARTITION");
  return from_env != nullptr ? from_env : "";
}

namespace {

// Adds the bearer token to every call's initial metadata. gRPC's call credentials would do
// this only on TLS channels; a loopback test daemon serves plain TCP.
class TokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(const std::string& header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", header_});
    }
    methods->Proceed();
  }

 private:
  const std::string& header_;  // owned by the factory, which the channel keeps
};

class TokenInterceptorFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(const std::string& token) : header_("Bearer " + token) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new TokenInterceptor(header_);  // gRPC owns and deletes it
  }

 private:
  const std::string header_;
};

}  // namespace

std::string DefaultClientToken() {
  const char* token = std::getenv("GPUKIT_TOKEN");
  return token == nullptr ? "" : token;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> ConnectChannel(const std::string& target,
                                                              absl::Duration timeout,
                                                              const ChannelSecurity& security) {
  // The options are checked before the address is tried: a wrong option is the same mistake
  // whether or not a daemon is there.
  if (security.tls_cert_file.empty() != security.tls_key_file.empty() ||
      (!security.tls_cert_file.empty() && security.tls_ca_file.empty())) {
    return absl::InvalidArgumentError(
        "a client certificate needs its key and the daemon's CA (tls_ca_file)");
  }
  // "unix:path", "unix:///path" and "unix-abstract:name" alike: gpukitd serves no TLS on a
  // unix socket (the socket tells it the caller's uid), so a handshake there could only time
  // out.
  if (!security.tls_ca_file.empty() &&
      (absl::StartsWith(target, "unix:") || absl::StartsWith(target, "unix-abstract:"))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a TLS CA is for TCP addresses; ", target,
        " is a unix socket (drop the TLS files, or connect to gpukitd's TCP address)"));
  }
  // A socket file that does not exist will not appear by waiting: say so at once instead of
  // retrying until the timeout.
  if (absl::StartsWith(target, "unix://") && access(target.c_str() + 7, F_OK) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to gpukitd at ", target,
                     ": no such socket (is gpukitd running? pass --addr or set GPUKIT_ADDR)"));
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!security.tls_ca_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    for (const auto& [path, pem] :
         {std::pair<const std::string&, std::string&>{security.tls_ca_file, ssl.pem_root_certs},
          {security.tls_cert_file, ssl.pem_cert_chain},
          {security.tls_key_file, ssl.pem_private_key}}) {
      if (path.empty()) continue;
      GPUKIT_ASSIGN_OR_RETURN(pem, ReadSettingFile("the TLS file", path));
    }
    credentials = grpc::SslCredentials(ssl);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  if (!security.token.empty()) {
    interceptors.push_back(std::make_unique<TokenInterceptorFactory>(security.token));
  }
  std::shared_ptr<grpc::Channel> channel = grpc::experimental::CreateCustomChannelWithInterceptors(
      target, credentials, grpc::ChannelArguments(), std::move(interceptors));
  if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                 absl::ToChronoMilliseconds(timeout))) {
    return absl::UnavailableError(absl::StrCat("cannot connect to gpukitd at ", target,
                                               " (is it running? pass --addr or set GPUKIT_ADDR)"));
  }
  return channel;
}

absl::Status FromGrpc(const grpc::Status& status, const grpc::ClientContext& context) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  const auto& trailers = context.GetServerTrailingMetadata();
  if (auto it = trailers.find("gpukit-reason"); it != trailers.end()) {
    out.SetPayload(kReasonPayloadUrl,
                   absl::Cord(absl::string_view(it->second.data(), it->second.size())));
  }
  return out;
}

}  // namespace gpukit
