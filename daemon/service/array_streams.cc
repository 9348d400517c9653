#include "daemon/service/array_streams.h"

#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/service/convert.h"
#include "daemon/service/worker_pool.h"
#include "runtime/base/status_macros.h"

namespace gpukit::service {
namespace {

grpc::Status InvalidArgument(std::string message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::move(message));
}

class UploadReactor final : public grpc::ServerReadReactor<v1::UploadRequest> {
 public:
  UploadReactor(Core& core, const AccessGuard& guard, WorkerPool& workers,
                grpc::CallbackServerContext* context, v1::UploadResponse* response)
      : core_(core), guard_(guard), workers_(workers), context_(context), response_(response) {
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client half-closed, or went away (then no one hears the answer).
      Finish(context_->IsCancelled() ? grpc::Status::CANCELLED : Complete());
      return;
    }
    if (std::optional<grpc::Status> failed = Take(message_); failed.has_value()) {
      Finish(*failed);
      return;
    }
    if (message_.has_chunk()) {
      // The chunk's write may wait (array_streams.h): on a worker, not on this thread.
      // message_ is not read into again before the write is done.
      workers_.Schedule([this] { WriteChunk(); });
      return;
    }
    StartRead(&message_);
  }

  // gRPC's reactor contract: nothing else owns a reactor, and gRPC calls this last.
  void OnDone() override { delete this; }

 private:
  // Checks one message and takes the header; returns the status to end the stream with if
  // it fails. Waits for nothing.
  std::optional<grpc::Status> Take(const v1::UploadRequest& message) {
    if (!header_.has_value()) {
      if (!message.has_header()) {
        return InvalidArgument("the first upload message must carry the header");
      }
      // The strings' rule, then who may name the session: before anything is looked up.
      if (grpc::Status s = ValidateStrings(message, context_); !s.ok()) return s;
      if (grpc::Status denied = guard_.CheckSession(context_, message.header().session_id());
          !denied.ok()) {
        return denied;
      }
      header_ = message.header();
      // Resolves the session and the array (and renews the lease) before any data comes.
      absl::StatusOr<ArrayView> view =
          core_.DescribeArray(header_->session_id(), header_->handle());
      if (!view.ok()) return ToGrpc(view.status(), context_);
      return std::nullopt;
    }
    if (!message.has_chunk()) {
      return InvalidArgument("upload messages after the first must carry a chunk");
    }
    const v1::DataChunk& chunk = message.chunk();
    if (chunk.offset() != written_) {
      return InvalidArgument(absl::StrCat("chunk.offset = ", chunk.offset(), " but ", written_,
                                          " bytes were written so far; chunks go in order"));
    }
    if (static_cast<int64_t>(chunk.data().size()) > kMaxChunkBytes) {
      return InvalidArgument(absl::StrCat("chunk.data has ", chunk.data().size(),
                                          " bytes; at most ", kMaxChunkBytes, " per chunk"));
    }
    return std::nullopt;
  }

  // On a worker: writes message_'s chunk (its transfer task), then reads on or finishes.
  void WriteChunk() {
    const v1::DataChunk& chunk = message_.chunk();
    absl::Status status = core_.WriteArray(header_->session_id(), header_->handle(), chunk.offset(),
                                           chunk.data(), TaskOptionsFrom({}, context_));
    if (absl::IsOutOfRange(status)) {
      Finish(InvalidArgument(absl::StrCat("upload exceeds the array: ", status.message())));
      return;
    }
    if (!status.ok()) {
      Finish(ToGrpc(status, context_));
      return;
    }
    written_ += static_cast<int64_t>(chunk.data().size());
    StartRead(&message_);
  }

  // The answer to the client's half-close.
  grpc::Status Complete() {
    if (!header_.has_value()) return InvalidArgument("upload stream is empty");
    // The session may have ended since the last chunk (closed, or its lease lapsed while the
    // client held the stream open without sending): the bytes went into an array that is
    // freed, so the upload fails rather than report them written.
    absl::StatusOr<ArrayView> view = core_.DescribeArray(header_->session_id(), header_->handle());
    if (!view.ok()) {
      return ToGrpc(PrefixStatus(view.status(),
                                 absl::StrCat("upload of ", written_, " bytes not completed: ")),
                    context_);
    }
    if (written_ != view->bytes) {
      return InvalidArgument(absl::StrCat("upload wrote ", written_, " bytes but array ",
                                          view->handle, " has ", view->bytes));
    }
    ToProto(*view, response_->mutable_array());
    response_->set_bytes_written(written_);
    return grpc::Status::OK;
  }

  Core& core_;
  const AccessGuard& guard_;
  WorkerPool& workers_;
  grpc::CallbackServerContext* const context_;
  v1::UploadResponse* const response_;
  v1::UploadRequest message_;  // the message being read
  std::optional<v1::UploadRequest::Header> header_;
  int64_t written_ = 0;
};

class DownloadReactor final : public grpc::ServerWriteReactor<v1::DownloadResponse> {
 public:
  DownloadReactor(Core& core, const AccessGuard& guard, WorkerPool& workers,
                  grpc::CallbackServerContext* context, const v1::DownloadRequest& request)
      : core_(core),
        workers_(workers),
        context_(context),
        session_id_(request.session_id()),
        handle_(request.handle()) {
    if (grpc::Status s = ValidateStrings(request, context_); !s.ok()) {
      Finish(s);
      return;
    }
    if (grpc::Status denied = guard.CheckSession(context_, request.session_id()); !denied.ok()) {
      Finish(denied);
      return;
    }
    if (request.chunk_bytes() < 0) {
      Finish(
          InvalidArgument(absl::StrCat("chunk_bytes = ", request.chunk_bytes(), " must be >= 0")));
      return;
    }
    chunk_bytes_ = request.chunk_bytes() == 0 ? kMaxChunkBytes
                                              : std::min(request.chunk_bytes(), kMaxChunkBytes);
    absl::StatusOr<ArrayView> view = core_.DescribeArray(session_id_, handle_);
    if (!view.ok()) {
      Finish(ToGrpc(view.status(), context_));
      return;
    }
    view_ = *std::move(view);
    workers_.Schedule([this] { WriteNext(); });
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client stopped reading"));
      return;
    }
    if (offset_ >= view_.bytes) {
      Finish(grpc::Status::OK);
      return;
    }
    workers_.Schedule([this] { WriteNext(); });
  }

  void OnDone() override { delete this; }  // as UploadReactor's

 private:
  // On a worker: reads the chunk at offset_ (its transfer task) and starts sending it, or
  // finishes with the read's error.
  void WriteNext() {
    message_.Clear();
    if (offset_ == 0) ToProto(view_, message_.mutable_array());
    const int64_t bytes = std::min(chunk_bytes_, view_.bytes - offset_);
    std::string* data = message_.mutable_chunk()->mutable_data();
    data->resize(static_cast<size_t>(bytes));
    absl::Status status = core_.ReadArray(session_id_, handle_, offset_, absl::MakeSpan(*data),
                                          TaskOptionsFrom({}, context_));
    if (!status.ok()) {
      Finish(ToGrpc(status, context_));
      return;
    }
    message_.mutable_chunk()->set_offset(offset_);
    offset_ += bytes;
    StartWrite(&message_);
  }

  Core& core_;
  WorkerPool& workers_;
  grpc::CallbackServerContext* const context_;
  const std::string session_id_;
  const std::string handle_;
  int64_t chunk_bytes_ = kMaxChunkBytes;
  ArrayView view_;
  int64_t offset_ = 0;            // of the next chunk to read
  v1::DownloadResponse message_;  // the message being sent
};

}  // namespace

grpc::ServerReadReactor<v1::UploadRequest>* NewUploadReactor(Core& core, const AccessGuard& guard,
                                                             WorkerPool& workers,
                                                             grpc::CallbackServerContext* context,
                                                             v1::UploadResponse* response) {
  return new UploadReactor(core, guard, workers, context, response);
}

grpc::ServerWriteReactor<v1::DownloadResponse>* NewDownloadReactor(
    Core& core, const AccessGuard& guard, WorkerPool& workers,
    grpc::CallbackServerContext* context, const v1::DownloadRequest& request) {
  return new DownloadReactor(core, guard, workers, context, request);
}

}  // namespace gpukit::service
