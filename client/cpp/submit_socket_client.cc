#include "client/cpp/submit_socket_client.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "client/cpp/channel.h"
#include "runtime/base/host_load.h"
#include "runtime/base/status_macros.h"
#include "runtime/executor/spin_wait.h"
#include <sys/socket.h>

namespace gpukit::internal {
absl::Status SubmitSocketStatus(const v1::OpResult& result) {
  absl::Status status(static_cast<absl::StatusCode>(result.code()), result.message());
  if (!result.reason().empty()) status.SetPayload(kReasonPayloadUrl, absl::Cord(result.reason()));
  return status;
}

std::chrono::microseconds ClientSpinTime() {
  static const std::chrono::microseconds spin = [] {
    if (const char* text = std::getenv("GPUKIT_CLIENT_SPIN_US")) {
      return std::chrono::microseconds(std::max(0L, std::atol(text)));
    }
    return std::chrono::microseconds(std::thread::hardware_concurrency() >= 8 ? 20000 : 0);
  }();
  return spin;
}

absl::StatusOr<std::unique_ptr<SubmitSocketClient>> SubmitSocketClient::Connect(
    const std::string& path, std::string session_id, absl::Duration timeout) {
  GPUKIT_ASSIGN_OR_RETURN(ScopedFd socket, ConnectUnixSocket(path, /*wait_for_room=*/false));
  std::unique_ptr<SubmitSocketClient> client(
      new SubmitSocketClient(std::move(socket), std::move(session_id)));
  // The stream opens before the first op: a refusal (a connection gpukitd closed, past its
  // limit; a session it does not let this process use) fails Connect, and the owner stays on
  // gRPC, instead of failing an op that never ran.
  absl::MutexLock lock(&client->mu_);
  const absl::Time deadline = absl::Now() + timeout;
  v1::SubmitRequest first;
  GPUKIT_RETURN_IF_ERROR(client->SendLocked(first, deadline));
  while (!client->handle_prefix_seen_) {
    GPUKIT_RETURN_IF_ERROR(client->ReadOneLocked(deadline, /*wait=*/true, nullptr, 0));
  }
  return client;
}

SubmitSocketClient::SubmitSocketClient(ScopedFd socket, std::string session_id)
    : socket_(std::move(socket)), session_id_(std::move(session_id)) {}

absl::Status SubmitSocketClient::BreakLocked(absl::Status status) {
  if (broken_.ok()) {
    broken_ = status;
    broken_flag_.store(true, std::memory_order_release);
    // gpukitd sees the end at once and lets the ops sent run.
    ::shutdown(socket_.get(), SHUT_RDWR);
  }
  return status;
}

absl::Status SubmitSocketClient::SendLocked(v1::SubmitRequest& request, absl::Time deadline) {
  if (!named_) request.set_session_id(session_id_);
  std::string bytes = request.SerializeAsString();
  if (bytes.size() > kMaxSubmitSocketDatagramBytes) {
    // Not the stream's end: the caller may send this op over gRPC.
    return absl::InvalidArgumentError(absl::StrCat("a request of ", bytes.size(),
                                                   " bytes; the submit socket takes at most ",
                                                   kMaxSubmitSocketDatagramBytes));
  }
  for (;;) {
    const ssize_t sent =
        ::send(socket_.get(), bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent == static_cast<ssize_t>(bytes.size())) break;
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // gpukitd reads no more until its answers are read: read them while waiting for room.
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        return BreakLocked(absl::DeadlineExceededError(
            "gpukitd's submit socket took no request in time (the call's timeout)"));
      }
      pollfd fds = {socket_.get(), POLLIN | POLLOUT, 0};
      ::poll(&fds, 1,
             static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30)));
      if ((fds.revents & POLLIN) != 0) {
        absl::Status read = ReadOneLocked(absl::InfiniteFuture(), /*wait=*/false, nullptr, 0);
        if (!read.ok() && !absl::IsDeadlineExceeded(read)) return read;
      }
      continue;
    }
    return BreakLocked(absl::UnavailableError(absl::StrCat(
        "gpukitd's submit socket: send: ", sent < 0 ? std::strerror(errno) : "short")));
  }
  named_ = true;
  return absl::OkStatus();
}

absl::Status SubmitSocketClient::ReadOneLocked(absl::Time deadline, bool wait,
                                               v1::SubmitResponse* answer, uint64_t wanted) {
  if (buffer_.size() < kMaxSubmitSocketDatagramBytes + 1)
    buffer_.resize(kMaxSubmitSocketDatagramBytes + 1);
  absl::StatusOr<ReceivedInto> received =
      ReceiveMessageInto(socket_.get(), buffer_.data(), buffer_.size(), /*wait=*/false);
  if (wait && absl::IsDeadlineExceeded(received.status())) {
    // Polls for ClientSpinTime() (never past the deadline, and while the host has a core to
    // spare: HostLoad), then sleeps until the socket is readable.
    const auto spin_end = std::chrono::steady_clock::now() + ClientSpinTime();
    while (absl::IsDeadlineExceeded(received.status()) &&
           std::chrono::steady_clock::now() < spin_end && absl::Now() < deadline &&
           HostLoad::Process().SpareCore()) {
      for (int i = 0; i < 32; ++i) CpuRelax();
      received = ReceiveMessageInto(socket_.get(), buffer_.data(), buffer_.size(), false);
    }
    while (absl::IsDeadlineExceeded(received.status())) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) break;
      pollfd fds = {socket_.get(), POLLIN, 0};
      const int64_t ms = std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30);
      if (::poll(&fds, 1, static_cast<int>(ms)) < 0 && errno != EINTR) break;
      received = ReceiveMessageInto(socket_.get(), buffer_.data(), buffer_.size(), false);
    }
    if (absl::IsDeadlineExceeded(received.status())) {
      return BreakLocked(absl::DeadlineExceededError(
          "no answer from gpukitd's submit socket in time (the call's timeout)"));
    }
  }
  if (absl::IsDeadlineExceeded(received.status())) return received.status();  // none waiting
  if (!received.ok()) {
    return BreakLocked(absl::UnavailableError(
        absl::StrCat("gpukitd's submit socket: ", received.status().message())));
  }
  v1::SubmitResponse response;
  if (!response.ParseFromArray(buffer_.data(), static_cast<int>(received->bytes))) {
    return BreakLocked(absl::InternalError(absl::StrCat(
        "gpukitd's submit socket sent ", received->bytes, " bytes that are not a SubmitResponse")));
  }
  if (response.has_ended() && response.ended().code() != 0) {
    return BreakLocked(SubmitSocketStatus(response.ended()));
  }
  if (response.synced() == 0) {  // the handle prefix, or the first part of a split answer
    if (!response.handle_prefix().empty()) handle_prefix_seen_ = true;
    for (v1::OpResult& result : *response.mutable_results()) partial_.push_back(std::move(result));
    return absl::OkStatus();
  }
  const uint64_t token = response.synced();
  unanswered_.erase(token);
  unanswered_count_.store(static_cast<int64_t>(unanswered_.size()), std::memory_order_release);
  if (frees_.erase(token) > 0 && response.error().code() != 0 && free_failure_.ok()) {
    free_failure_ = SubmitSocketStatus(response.error());
  }
  if (token == wanted && answer != nullptr) {
    answer->Swap(&response);
    if (!partial_.empty()) {
      // The answer's results in order: the parts read before, then the last part's.
      google::protobuf::RepeatedPtrField<v1::OpResult> last;
      last.Swap(answer->mutable_results());
      for (v1::OpResult& result : partial_) answer->add_results()->Swap(&result);
      for (v1::OpResult& result : last) answer->add_results()->Swap(&result);
    }
  }
  partial_.clear();
  return absl::OkStatus();
}

absl::Status SubmitSocketClient::AwaitLocked(uint64_t token, absl::Time deadline,
                                             v1::SubmitResponse* answer) {
  while (unanswered_.contains(token)) {
    GPUKIT_RETURN_IF_ERROR(ReadOneLocked(deadline, /*wait=*/true, answer, token));
  }
  return absl::OkStatus();
}

std::optional<absl::StatusOr<v1::ArrayInfo>> SubmitSocketClient::TryRun(
    const v1::PipelinedRunOp& op, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  if (!mu_.TryLock()) return std::nullopt;
  if (!broken_.ok()) {  // another thread's call ended the stream: this op goes another way
    mu_.Unlock();
    return std::nullopt;
  }
  absl::StatusOr<v1::ArrayInfo> result = RunLocked(op, deadline);
  mu_.Unlock();
  return result;
}

absl::StatusOr<v1::ArrayInfo> SubmitSocketClient::RunLocked(const v1::PipelinedRunOp& op,
                                                            absl::Time deadline) {
  if (!broken_.ok()) return broken_;
  v1::SubmitRequest request;
  *request.add_ops()->mutable_run() = op;
  const uint64_t index = next_index_;
  const uint64_t token = next_token_;
  request.set_sync(token);
  GPUKIT_RETURN_IF_ERROR(SendLocked(request, deadline));
  ++next_index_;
  ++next_token_;
  unanswered_.insert(token);
  unanswered_count_.store(static_cast<int64_t>(unanswered_.size()), std::memory_order_release);
  v1::SubmitResponse answer;
  GPUKIT_RETURN_IF_ERROR(AwaitLocked(token, deadline, &answer));
  for (const v1::OpResult& result : answer.results()) {
    if (result.index() != index) continue;
    if (result.code() != 0) return SubmitSocketStatus(result);
    if (answer.error().code() != 0)
      return SubmitSocketStatus(answer.error());  // failed on the device
    return result.output();
  }
  return BreakLocked(absl::InternalError(
      absl::StrCat("gpukitd's submit socket answered sync point ", token, " without op #", index)));
}

std::optional<absl::Status> SubmitSocketClient::TryFree(const std::string& handle,
                                                        absl::Duration timeout) {
  if (!mu_.TryLock()) return std::nullopt;
  if (!broken_.ok()) {
    mu_.Unlock();
    return std::nullopt;
  }
  absl::Status status = FreeLocked(handle, timeout);
  mu_.Unlock();
  return status;
}

absl::Status SubmitSocketClient::FreeLocked(const std::string& handle, absl::Duration timeout) {
  if (!broken_.ok()) return broken_;
  // Answers nobody waits for are read here now and then, so they never fill the socket.
  while (unanswered_.size() > 64) {
    absl::Status read = ReadOneLocked(absl::InfiniteFuture(), /*wait=*/false, nullptr, 0);
    if (absl::IsDeadlineExceeded(read)) break;
    GPUKIT_RETURN_IF_ERROR(read);
  }
  v1::SubmitRequest request;
  request.add_ops()->set_free(handle);
  const uint64_t token = next_token_;
  request.set_sync(token);
  GPUKIT_RETURN_IF_ERROR(SendLocked(request, absl::Now() + timeout));
  ++next_index_;
  ++next_token_;
  unanswered_.insert(token);
  unanswered_count_.store(static_cast<int64_t>(unanswered_.size()), std::memory_order_release);
  frees_.insert(token);
  return absl::OkStatus();
}

absl::Status SubmitSocketClient::Settle(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (broken_.ok() && !unanswered_.empty()) {
    // A break was reported to the call it failed; here only the frees' outcome is.
    if (!ReadOneLocked(deadline, /*wait=*/true, nullptr, 0).ok()) break;
  }
  return std::exchange(free_failure_, absl::OkStatus());
}

}  // namespace gpukit::internal
