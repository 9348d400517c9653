#include "client/cpp/submit_stream.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "client/cpp/channel.h"
#include "client/cpp/submit_socket_client.h"
#include "proto/dtype_convert.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/unix_fd.h"
#include <sys/socket.h>

namespace gpukit::internal {
namespace {

// A ComputeService.Submit call.
class GrpcTransport final : public SubmitTransport {
 public:
  GrpcTransport(
      std::unique_ptr<grpc::ClientContext> context,
      std::unique_ptr<grpc::ClientReaderWriter<v1::SubmitRequest, v1::SubmitResponse>> stream)
      : context_(std::move(context)), stream_(std::move(stream)) {}
  bool Write(const v1::SubmitRequest& request) override { return stream_->Write(request); }
  void WritesDone() override { stream_->WritesDone(); }
  bool Read(v1::SubmitResponse* response) override { return stream_->Read(response); }
  absl::Status Finish() override { return FromGrpc(stream_->Finish(), *context_); }
  void Cancel() override { context_->TryCancel(); }

 private:
  const std::unique_ptr<grpc::ClientContext> context_;  // outlives the call
  const std::unique_ptr<grpc::ClientReaderWriter<v1::SubmitRequest, v1::SubmitResponse>> stream_;
};

// The sync point WritesDone sends: its answer says every op sent has run, and ends the stream.
// (Half-closing the socket would not do: gpukitd takes a hang-up for the client's going away
// and cancels an op still waiting for admission, where a gRPC stream's WritesDone lets it run.)
constexpr uint64_t kCloseToken = std::numeric_limits<uint64_t>::max();

// A connection of gpukitd's submit socket: one request or response per datagram.
class SocketTransport final : public SubmitTransport {
 public:
  explicit SocketTransport(ScopedFd socket)
      : socket_(std::move(socket)), buffer_(new char[kMaxSubmitSocketDatagramBytes + 1]) {}

  bool Write(const v1::SubmitRequest& request) override {
    size_t bytes = request.ByteSizeLong();
    if (bytes <= kMaxSubmitSocketDatagramBytes) return Send(request);
    // Several datagrams: as many ops in each as fit, the sync point with the last.
    v1::SubmitRequest part;
    part.set_session_id(request.session_id());
    bytes = part.ByteSizeLong();
    for (const v1::PipelinedOp& op : request.ops()) {
      // The op's bytes with its field's tag and length (at most 6 bytes more).
      const size_t op_bytes = op.ByteSizeLong() + 6;
      if (part.ops_size() > 0 && bytes + op_bytes > kMaxSubmitSocketDatagramBytes - 16) {
        if (!Send(part)) return false;
        part.Clear();
        bytes = 0;
      }
      *part.add_ops() = op;
      bytes += op_bytes;
    }
    part.set_sync(request.sync());
    return Send(part);
  }

  void WritesDone() override {
    v1::SubmitRequest last;
    last.set_sync(kCloseToken);
    Send(last);
  }

  bool Read(v1::SubmitResponse* response) override {
    absl::StatusOr<ReceivedInto> received = ReceiveMessageInto(
        socket_.get(), buffer_.get(), kMaxSubmitSocketDatagramBytes + 1, /*wait=*/true);
    if (!received.ok()) {
      if (!clean_end_) {
        end_ = absl::UnavailableError(
            absl::StrCat("gpukitd's submit socket: ", received.status().message()));
      }
      return false;
    }
    if (!response->ParseFromArray(buffer_.get(), static_cast<int>(received->bytes))) {
      end_ = absl::InternalError(absl::StrCat("gpukitd's submit socket sent ", received->bytes,
                                              " bytes that are not a SubmitResponse"));
      Cancel();
      return false;
    }
    if (response->has_ended() && response->ended().code() != 0) {
      end_ = SubmitSocketStatus(response->ended());
      return false;
    }
    if (response->synced() == kCloseToken) {
      // Every op sent has run: the stream ends here, cleanly (what failed since the last sync
      // point is not reported, as at a gRPC stream's end). The next Read finds the end.
      clean_end_ = true;
      response->clear_synced();
      response->clear_error();
      Cancel();
    }
    return true;
  }

  absl::Status Finish() override { return write_error_.ok() ? end_ : write_error_; }

  void Cancel() override { ::shutdown(socket_.get(), SHUT_RDWR); }

  size_t max_op_bytes() const override { return kMaxSubmitSocketDatagramBytes - 256; }

 private:
  // Sends one datagram; on a failure the connection ends (Read sees it) and Finish says why.
  bool Send(const v1::SubmitRequest& request) {
    if (!write_error_.ok()) return false;
    const std::string bytes = request.SerializeAsString();
    if (bytes.size() > kMaxSubmitSocketDatagramBytes) {
      write_error_ = absl::InvalidArgumentError(absl::StrCat(
          "a pipelined op of ", bytes.size(), " bytes; gpukitd's submit socket takes at most ",
          kMaxSubmitSocketDatagramBytes));
      Cancel();
      return false;
    }
    const absl::Status sent = SendMessage(socket_.get(), bytes.data(), bytes.size());
    if (sent.ok()) return true;
    write_error_ =
        absl::UnavailableError(absl::StrCat("gpukitd's submit socket: ", sent.message()));
    Cancel();
    return false;
  }

  const ScopedFd socket_;
  const std::unique_ptr<char[]> buffer_;  // the reader's
  absl::Status write_error_;              // the writer's
  absl::Status end_;                      // the reader's
  bool clean_end_ = false;                // the reader's
};

}  // namespace

std::shared_ptr<ArrayResult> ArrayResult::Known(ArrayLayout layout) {
  auto result = std::make_shared<ArrayResult>();
  result->Resolve(std::move(layout));
  return result;
}

void ArrayResult::Resolve(absl::StatusOr<ArrayLayout> outcome) {
  absl::MutexLock lock(&mu_);
  if (resolved_.load(std::memory_order_relaxed)) return;
  outcome_ = std::move(outcome);
  resolved_.store(true, std::memory_order_release);
}

const absl::StatusOr<ArrayLayout>& ArrayResult::Wait() const {
  if (!resolved_.load(std::memory_order_acquire)) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](const std::atomic<bool>* resolved) { return resolved->load(); }, &resolved_));
  }
  return outcome_;
}

SubmitStream::SubmitStream(std::unique_ptr<SubmitTransport> transport, absl::Duration close_timeout)
    : transport_(std::move(transport)), close_timeout_(close_timeout) {}

absl::StatusOr<std::unique_ptr<SubmitStream>> SubmitStream::Open(v1::ComputeService::Stub& stub,
                                                                 const std::string& session_id,
                                                                 absl::Duration close_timeout) {
  // No deadline: the stream lives as long as the session uses it.
  auto context = std::make_unique<grpc::ClientContext>();
  // The call's metadata goes with the first request: one write instead of two.
  context->set_initial_metadata_corked(true);
  std::unique_ptr<grpc::ClientReaderWriter<v1::SubmitRequest, v1::SubmitResponse>> call =
      stub.Submit(context.get());
  if (call == nullptr) return absl::UnavailableError("cannot start a Submit stream");
  std::unique_ptr<SubmitStream> stream(new SubmitStream(
      std::make_unique<GrpcTransport>(std::move(context), std::move(call)), close_timeout));
  {
    absl::MutexLock lock(&stream->mu_);
    stream->outbox_.emplace_back().set_session_id(session_id);
  }
  stream->Start();
  return stream;
}

absl::StatusOr<std::unique_ptr<SubmitStream>> SubmitStream::OpenOnSocket(
    const std::string& path, const std::string& session_id, absl::Duration open_timeout,
    absl::Duration close_timeout) {
  GPUKIT_ASSIGN_OR_RETURN(ScopedFd socket, ConnectUnixSocket(path, /*wait_for_room=*/false));
  // The opening, before the threads: gpukitd answers the first request with the prefix alone.
  const int fd = socket.get();
  timeval wait = absl::ToTimeval(std::max(open_timeout, absl::Milliseconds(1)));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  auto transport = std::make_unique<SocketTransport>(std::move(socket));
  v1::SubmitRequest first;
  first.set_session_id(session_id);
  v1::SubmitResponse answer;
  if (!transport->Write(first) || !transport->Read(&answer)) {
    absl::Status refused = transport->Finish();
    return refused.ok() ? absl::UnavailableError("gpukitd's submit socket closed the stream")
                        : refused;
  }
  if (answer.handle_prefix().empty()) {
    return absl::InternalError("gpukitd's submit socket answered the opening without a prefix");
  }
  timeval forever = {};  // from here on the reader waits as long as the stream lives
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &forever, sizeof(forever));
  return OnOpenedTransport(std::move(transport), answer.handle_prefix(), close_timeout);
}

std::unique_ptr<SubmitStream> SubmitStream::OnOpenedTransport(
    std::unique_ptr<SubmitTransport> transport, const std::string& handle_prefix,
    absl::Duration close_timeout) {
  std::unique_ptr<SubmitStream> stream(new SubmitStream(std::move(transport), close_timeout));
  {
    absl::MutexLock lock(&stream->mu_);
    stream->handle_prefix_ = handle_prefix;
    stream->opened_ = true;
  }
  stream->Start();
  return stream;
}

void SubmitStream::Start() {
  reader_ = std::thread([this] { ReadLoop(); });
  writer_ = std::thread([this] { WriteLoop(); });
}

SubmitStream::~SubmitStream() {
  Close().IgnoreError();
  if (writer_.joinable()) writer_.join();
  if (reader_.joinable()) reader_.join();
}

void SubmitStream::WriteLoop() {
  std::vector<v1::SubmitRequest> batch;
  bool half_close = false;
  while (!half_close) {
    {
      absl::MutexLock lock(&mu_);
      // A caller may be writing (CallerWritesLocked): the writes, WritesDone and the
      // reader's Finish never overlap.
      auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !writing_ && (closing_ || read_done_ ||
                             (!outbox_.empty() && sent_ < answered_ + kMaxUnansweredOps));
      };
      mu_.Await(absl::Condition(&work));
      if (read_done_) break;  // the stream ended: nothing more goes out
      batch = TakeOutboxLocked();
      // Close refuses new ops: once this batch is out, the writes are done.
      half_close = closing_;
    }
    const bool written = WriteTaken(batch);
    if (!written) break;
    if (half_close) transport_->WritesDone();
  }
  absl::MutexLock lock(&mu_);
  writer_stopped_ = true;
}

bool SubmitStream::CallerWritesLocked(bool waits) const {
  return !writing_ && !outbox_.empty() && !closing_ && !read_done_ && !writer_stopped_ &&
         sent_ < answered_ + kMaxUnansweredOps &&
         (waits || (answered_ >= sent_ &&
                    std::chrono::steady_clock::now() - last_take_ >= kCallerWritesAfterQuiet));
}

std::vector<v1::SubmitRequest> SubmitStream::TakeOutboxLocked() {
  std::vector<v1::SubmitRequest> taken;
  taken.swap(outbox_);
  outbox_ops_ = 0;
  sent_ = written_;
  if (!taken.empty()) {
    writing_ = true;
    last_take_ = std::chrono::steady_clock::now();
  }
  return taken;
}

bool SubmitStream::WriteTaken(const std::vector<v1::SubmitRequest>& taken) {
  if (taken.empty()) return true;
  bool written = true;
  for (const v1::SubmitRequest& request : taken) {
    // A failed write means the stream broke: the reader sees its end and its status.
    if (written = transport_->Write(request); !written) break;
  }
  absl::MutexLock lock(&mu_);
  writing_ = false;
  return written;
}

absl::StatusOr<v1::SubmitRequest*> SubmitStream::RoomForOp() {
  auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return outbox_ops_ < kMaxQueuedOps || ended_ || closing_;
  };
  mu_.Await(absl::Condition(&room));
  if (ended_) return EndedStatus();
  if (closing_) return absl::FailedPreconditionError("the Submit stream was closed");
  if (outbox_.empty() || outbox_.back().sync() != 0 ||
      outbox_.back().ops_size() >= kMaxOpsPerRequest) {
    outbox_.emplace_back();
  }
  ++outbox_ops_;
  return &outbox_.back();
}

uint64_t SubmitStream::EpochOf(uint64_t index) const {
  return static_cast<uint64_t>(
      std::upper_bound(sync_boundaries_.begin(), sync_boundaries_.end(), index) -
      sync_boundaries_.begin());
}

absl::Status SubmitStream::EndedStatus() const {
  if (!end_status_.ok()) return end_status_;
  return absl::FailedPreconditionError("the Submit stream was closed");
}

bool SubmitStream::ended() const {
  absl::MutexLock lock(&mu_);
  return ended_;
}

absl::Status SubmitStream::end_status() const {
  absl::MutexLock lock(&mu_);
  return end_status_;
}

std::vector<std::string> SubmitStream::TakeUnansweredFrees() {
  absl::MutexLock lock(&mu_);
  return std::exchange(unanswered_frees_, {});
}

absl::Status SubmitStream::OpStatus(const v1::OpResult& result) {
  absl::Status status(
      static_cast<absl::StatusCode>(result.code()),
      absl::StrCat("op #", result.index(), " (", result.op(), "): ", result.message()));
  if (!result.reason().empty()) status.SetPayload(kReasonPayloadUrl, absl::Cord(result.reason()));
  return status;
}

absl::StatusOr<SubmitStream::Submitted> SubmitStream::Run(const v1::PipelinedRunOp& op) {
  auto result = std::make_shared<ArrayResult>();
  std::vector<v1::SubmitRequest> taken;
  Submitted submitted;
  {
    absl::MutexLock lock(&mu_);
    if (const size_t bytes = op.ByteSizeLong(); bytes > transport_->max_op_bytes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "op ", op.op(), ": ", bytes,
          " bytes; a pipelined op on gpukitd's submit socket takes at most ",
          transport_->max_op_bytes(),
          " (ClientOptions::use_submit_socket = false sends the session's stream over gRPC)"));
    }
    auto opened = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return opened_ || ended_; };
    mu_.Await(absl::Condition(&opened));
    if (!opened_) return EndedStatus();
    GPUKIT_ASSIGN_OR_RETURN(v1::SubmitRequest * request, RoomForOp());
    *request->add_ops()->mutable_run() = op;
    const uint64_t index = next_index_++;
    pending_.emplace(index, Pending{op.op(), result, ""});
    written_ = index + 1;
    run_ops_end_ = index + 1;
    submitted = Submitted{absl::StrCat(handle_prefix_, index), std::move(result)};
    if (CallerWritesLocked(/*waits=*/false)) taken = TakeOutboxLocked();
  }
  WriteTaken(taken);
  return submitted;
}

absl::Status SubmitStream::Free(const std::string& handle) {
  std::vector<v1::SubmitRequest> taken;
  {
    absl::MutexLock lock(&mu_);
    GPUKIT_ASSIGN_OR_RETURN(v1::SubmitRequest * request, RoomForOp());
    request->add_ops()->set_free(handle);
    const uint64_t index = next_index_++;
    pending_.emplace(index, Pending{"free", nullptr, handle});
    written_ = index + 1;
    if (CallerWritesLocked(/*waits=*/false)) taken = TakeOutboxLocked();
  }
  WriteTaken(taken);
  return absl::OkStatus();
}

absl::Status SubmitStream::Sync() {
  uint64_t token;
  std::vector<v1::SubmitRequest> taken;
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return EndedStatus();
    if (closing_) return absl::FailedPreconditionError("the Submit stream was closed");
    token = next_sync_token_++;
    sync_boundaries_.push_back(next_index_);
    if (outbox_.empty() || outbox_.back().sync() != 0) outbox_.emplace_back();
    outbox_.back().set_sync(token);
    if (CallerWritesLocked(/*waits=*/true)) taken = TakeOutboxLocked();
  }
  WriteTaken(taken);
  absl::MutexLock lock(&mu_);
  auto answered = [this, token]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return ended_ || synced_.contains(token);
  };
  mu_.Await(absl::Condition(&answered));
  auto it = synced_.find(token);
  if (it == synced_.end()) return EndedStatus();
  absl::Status status = std::move(it->second);
  synced_.erase(it);
  return status;
}

absl::Status SubmitStream::WaitForResults() {
  absl::Status failure;
  {
    absl::MutexLock lock(&mu_);
    const uint64_t target = run_ops_end_;
    auto answered = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return ended_ || answered_ >= target;
    };
    mu_.Await(absl::Condition(&answered));
    // A stream that ended resolved its unanswered ops with its status: each of their arrays
    // says so, and a call on another array goes ahead.
    for (auto& [epoch, found] : failures_) {
      if (!found.reported) {
        found.reported = true;
        failure = found.status;
        break;
      }
    }
    if (failure.ok() || ended_) return failure;
  }
  // Returning the failure is a sync point for the caller: send one, so that the stream
  // takes ops again, and return its answer (the first failure, which may be an earlier op
  // that failed on the device).
  absl::Status synced = Sync();
  return synced.ok() ? failure : synced;
}

bool SubmitStream::HasUnanswered() const {
  absl::MutexLock lock(&mu_);
  return !ended_ && answered_ < written_;
}

void SubmitStream::WaitForAllAnswers() {
  absl::MutexLock lock(&mu_);
  const uint64_t target = written_;
  auto answered = [this, target]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ended_ || answered_ >= target; };
  mu_.Await(absl::Condition(&answered));
}

absl::Status SubmitStream::Close() {
  absl::MutexLock lock(&mu_);
  closing_ = true;  // the writer sends what is queued, then half-closes
  auto ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ended_; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ended), close_timeout_)) {
    transport_->Cancel();  // a daemon that does not end the stream: stop waiting for it
    mu_.Await(absl::Condition(&ended));
  }
  return end_status_;
}

void SubmitStream::HandleResponse(const v1::SubmitResponse& response) {
  absl::MutexLock lock(&mu_);
  if (!opened_ && !response.handle_prefix().empty()) {
    handle_prefix_ = response.handle_prefix();
    opened_ = true;
  }
  for (const v1::OpResult& result : response.results()) {
    const uint64_t index = result.index();
    answered_ = std::max(answered_, index + 1);
    absl::Status failure;
    if (result.code() != 0) {
      failure = OpStatus(result);
      // A free's failure is for Sync only: WaitForResults skips it (reported = true).
      failures_.try_emplace(EpochOf(index), Failure{failure, result.op() == "free"});
    }
    auto it = pending_.find(index);
    if (it == pending_.end()) continue;
    if (it->second.result == nullptr) {  // a free
      pending_.erase(it);
      continue;
    }
    if (!failure.ok()) {
      it->second.result->Resolve(failure);
    } else {
      const v1::ArrayInfo& info = result.output();
      absl::StatusOr<DType> dtype = DTypeFromProto(info.dtype(), "output.dtype");
      if (dtype.ok()) {
        it->second.result->Resolve(
            ArrayLayout{std::vector<int64_t>(info.shape().begin(), info.shape().end()), *dtype,
                        info.size_bytes()});
      } else {
        it->second.result->Resolve(dtype.status());
      }
    }
    pending_.erase(it);
  }
  if (response.synced() != 0) {
    const uint64_t token = response.synced();
    absl::Status status;
    if (response.error().code() != 0) status = OpStatus(response.error());
    // Failures of the epochs this sync point closes (tokens count from 1: sync point k ends
    // epoch k - 1): the daemon's answer names the first; ours is a fallback.
    for (auto it = failures_.begin(); it != failures_.end() && it->first < token;) {
      if (status.ok()) status = it->second.status;
      it = failures_.erase(it);
    }
    synced_[token] = std::move(status);
  }
}

void SubmitStream::ReadLoop() {
  v1::SubmitResponse response;
  while (transport_->Read(&response)) HandleResponse(response);
  {
    // Finish may not overlap a write: stop the writer first (its writes fail now).
    absl::MutexLock lock(&mu_);
    read_done_ = true;
    // Nor a caller's write (none starts once the writer thread stopped: CallerWritesLocked).
    auto stopped = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return writer_stopped_ && !writing_; };
    mu_.Await(absl::Condition(&stopped));
  }
  const absl::Status end = transport_->Finish();
  absl::MutexLock lock(&mu_);
  ended_ = true;
  end_status_ = end;
  for (auto& [index, pending] : pending_) {
    if (pending.result == nullptr) {
      unanswered_frees_.push_back(std::move(pending.freed_handle));
      continue;
    }
    const absl::StatusCode code = end.ok() ? absl::StatusCode::kInternal : end.code();
    pending.result->Resolve(absl::Status(
        code, absl::StrCat(
                  "op #", index, " (", pending.op,
                  "): not answered: the Submit stream ended: ", end.ok() ? "OK" : end.message())));
  }
  pending_.clear();
}

}  // namespace gpukit::internal
