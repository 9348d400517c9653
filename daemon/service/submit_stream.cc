#include "daemon/service/submit_stream.h"

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/core/op_pipeline.h"
#include "daemon/service/burst_batcher.h"
#include "daemon/service/convert.h"
#include "daemon/service/request_strings.h"
#include "spdlog/spdlog.h"

namespace gpukit::service {
namespace {

grpc::Status InvalidArgument(std::string message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::move(message));
}

// Messages a stream keeps for reuse, of each kind (see Memory in the header).
constexpr size_t kSpareMessages = 2;

// Keeps `message` (done with) in `spares` for the next one to be read or built into, unless
// enough are kept already.
template <typename M>
void Keep(std::vector<M>& spares, M&& message) {
  if (spares.size() < kSpareMessages) spares.push_back(std::move(message));
}

class SubmitReactor final : public grpc::ServerBidiReactor<v1::SubmitRequest, v1::SubmitResponse> {
 public:
  SubmitReactor(Core& core, const AccessGuard& guard, grpc::CallbackServerContext* context)
      : core_(core), guard_(guard), context_(context) {
    {
      absl::MutexLock lock(&mu_);
      read_outstanding_ = true;
      // Under the lock: the worker reads worker_ (to detach itself) under it too.
      worker_ = std::thread([this] { Work(); });
    }
    StartRead(&reading_);
  }

  void OnReadDone(bool ok) override {
    bool read_on = false;
    {
      absl::MutexLock lock(&mu_);
      read_outstanding_ = false;
      if (!ok) {
        // The client half-closed, or went away (OnCancel tells which).
        reads_ended_ = true;
        return;
      }
      inbox_.push_back(std::move(reading_));  // leaves reading_ empty
      if (!spare_requests_.empty()) {
        reading_ = std::move(spare_requests_.back());  // cleared by the worker
        spare_requests_.pop_back();
      }
      read_on = MayReadLocked();
      if (read_on) read_outstanding_ = true;
    }
    if (read_on) StartRead(&reading_);
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      if (!ok) {
        // The client went away: nothing more will be sent.
        write_failed_ = true;
        writing_ = false;
        outbox_.clear();
        return;
      }
      if (outbox_.empty()) {
        writing_ = false;
        return;
      }
      sending_.Swap(&outbox_.front());
      Keep(spare_responses_, std::move(outbox_.front()));  // the one just sent
      outbox_.pop_front();
    }
    StartWrite(&sending_);
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }

  // gRPC's last call. The worker is past Finish by now, waiting for this: it is joined here
  // and the reactor deleted, so no thread of a stream outlives the server's Wait. (Should
  // gRPC ever run this inline in Finish, on the worker itself, the worker deletes it.)
  void OnDone() override {
    std::thread worker;
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
      if (worker_.get_id() != std::this_thread::get_id()) worker = std::move(worker_);
    }
    if (!worker.joinable()) return;
    worker.join();
    delete this;
  }

 private:
  // Whether to read the next request now: not after the end, a Finish or a cancellation,
  // and not beyond kMaxQueuedRequests waiting for the worker.
  bool MayReadLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !reads_ended_ && !read_outstanding_ && !cancelled_ && !finishing_ &&
           static_cast<int>(inbox_.size()) < kMaxQueuedRequests;
  }

  // The worker: takes the requests in order and answers them, then ends the stream.
  void Work() {
    grpc::Status status = Serve();
    // The ops queued run to their end whatever happened; their tasks end and pins drop.
    if (pipeline_ != nullptr) {
      pipeline_->Close();
      spdlog::debug("submit stream closed: session={} requests={} ops={} status={}",
                    pipeline_->session_id(), requests_read_, next_index_,
                    static_cast<int>(status.error_code()));
      pipeline_.reset();
    }
    {
      absl::MutexLock lock(&mu_);
      // What was answered goes out before the status (unless the client is gone).
      auto sent = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return (!writing_ && outbox_.empty()) || write_failed_ || cancelled_;
      };
      mu_.Await(absl::Condition(&sent));
      finishing_ = true;
      if (cancelled_ || write_failed_) {
        status = grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      }
    }
    Finish(status);
    bool delete_here = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&done_));
      // Still ours: OnDone ran on this thread and left the reactor to it.
      delete_here = worker_.joinable();
      if (delete_here) worker_.detach();
    }
    if (delete_here) delete this;
  }

  // Answers requests until the stream ends; returns its status.
  grpc::Status Serve() {
    // Held while more requests wait to be answered: their ops' work goes to a device
    // executor together (a few messages per batch, not several per op).
    // The completion thread gets each batch's ops once it was sent (OpPipeline::HoldCompletions).
    BurstBatcher batcher([this] {
      if (pipeline_ != nullptr) pipeline_->ReleaseCompletions();
    });
    // The request being answered and the response being built: each a message done with,
    // when there is one (their parts are reused).
    v1::SubmitRequest request;
    v1::SubmitResponse response;
    for (;;) {
      bool read_on = false;
      if (!MoreQueued()) batcher.EndBurst();
      request.Clear();
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          if (cancelled_ || write_failed_) return true;
          if (static_cast<int>(outbox_.size()) >= kMaxQueuedResponses) return false;
          return !inbox_.empty() || reads_ended_;
        };
        mu_.Await(absl::Condition(&ready));
        if (cancelled_ || write_failed_) return grpc::Status::CANCELLED;
        if (inbox_.empty()) return grpc::Status::OK;  // half-closed, all answered
        Keep(spare_requests_, std::move(request));    // leaves request empty
        request.Swap(&inbox_.front());
        inbox_.pop_front();
        if (!spare_responses_.empty()) {
          response = std::move(spare_responses_.back());
          spare_responses_.pop_back();
        }
        read_on = MayReadLocked();
        if (read_on) read_outstanding_ = true;
      }
      if (read_on) StartRead(&reading_);
      ++requests_read_;
      if (grpc::Status status = Answer(request, batcher, response); !status.ok()) return status;
    }
  }

  bool MoreQueued() {
    absl::MutexLock lock(&mu_);
    return !inbox_.empty();
  }

  // One request: opens the pipeline on the first, runs the ops, answers the sync point,
  // building the answer in `response` (which it clears first, and sends).
  grpc::Status Answer(const v1::SubmitRequest& request, BurstBatcher& batcher,
                      v1::SubmitResponse& response) {
    if (absl::Status s = ValidateSubmitRequestStrings(request); !s.ok()) {
      return ToGrpc(s, context_);
    }
    if (pipeline_ == nullptr) {
      if (request.session_id().empty()) {
        return InvalidArgument("the first Submit request must name the session (session_id)");
      }
      if (grpc::Status denied = guard_.CheckSession(context_, request.session_id()); !denied.ok()) {
        return denied;
      }
      absl::StatusOr<std::unique_ptr<OpPipeline>> pipeline =
          core_.OpenPipeline(request.session_id());
      if (!pipeline.ok()) return ToGrpc(pipeline.status(), context_);
      pipeline_ = *std::move(pipeline);
      pipeline_->HoldCompletions(true);
      spdlog::debug("submit stream opened: session={} prefix={}", pipeline_->session_id(),
                    pipeline_->handle_prefix());
      v1::SubmitResponse opened;
      opened.set_handle_prefix(pipeline_->handle_prefix());
      Send(std::move(opened));
    } else if (!request.session_id().empty() && request.session_id() != pipeline_->session_id()) {
      return InvalidArgument(absl::StrCat("session_id \"", request.session_id(),
                                          "\" differs from the stream's session \"",
                                          pipeline_->session_id(), "\""));
    }
    if (request.ops_size() > kMaxOpsPerSubmitRequest) {
      return InvalidArgument(absl::StrCat("ops has ", request.ops_size(), " ops; at most ",
                                          kMaxOpsPerSubmitRequest, " per request"));
    }
    if (request.ops_size() == 0 && request.sync() == 0) return grpc::Status::OK;
    response.Clear();
    for (const v1::PipelinedOp& op : request.ops()) {
      // A client that went away gets no more of its ops queued (the request may hold 1024).
      if (context_->IsCancelled()) return grpc::Status::CANCELLED;
      batcher.BeforeOp(pipeline_->device());
      v1::OpResult* result = response.add_results();
      RunOne(op, next_index_++, result);
    }
    if (request.sync() > 0) {
      batcher.EndBurst();
      std::optional<OpPipeline::Failure> failure = pipeline_->Sync();
      response.set_synced(request.sync());
      if (failure.has_value()) {
        v1::OpResult* error = response.mutable_error();
        error->set_index(failure->index);
        error->set_op(failure->op);
        ToProto(failure->status, error);
      }
    }
    Send(std::move(response));
    return grpc::Status::OK;
  }

  // Op `index`: queued (the result's layout) or refused (its status).
  void RunOne(const v1::PipelinedOp& op, uint64_t index, v1::OpResult* result) {
    result->set_index(index);
    absl::Status status;
    switch (op.kind_case()) {
      case v1::PipelinedOp::kRun: {
        const v1::PipelinedRunOp& run = op.run();
        result->set_op(run.op());
        absl::StatusOr<std::vector<OpInput>> inputs = FromProto(run.inputs());
        absl::StatusOr<AttrMap> attrs = FromProto(run.attrs());
        if (!inputs.ok()) {
          status = pipeline_->Refuse(index, run.op(), inputs.status());
        } else if (!attrs.ok()) {
          status = pipeline_->Refuse(index, run.op(), attrs.status());
        } else if (absl::Status task = ValidateTaskOptions(run.task()); !task.ok()) {
          status = pipeline_->Refuse(index, run.op(), std::move(task));
        } else {
          absl::StatusOr<ArrayView> output = pipeline_->RunOp(
              index, run.op(), *inputs, *attrs, TaskOptionsFrom(run.task(), context_));
          if (output.ok()) ToProto(*output, result->mutable_output());
          status = output.status();
        }
        break;
      }
      case v1::PipelinedOp::kFree:
        result->set_op("free");
        status = pipeline_->Free(index, op.free());
        break;
      case v1::PipelinedOp::KIND_NOT_SET:
        // Named in later ops' ABORTED messages as "op #i (unset)".
        status = pipeline_->Refuse(
            index, "unset",
            absl::InvalidArgumentError(absl::StrCat("op #", index, " has no kind (run or free)")));
        break;
    }
    ToProto(status, result);
  }

  // Queues `response` for sending; starts the write when none is outstanding.
  void Send(v1::SubmitResponse response) {
    {
      absl::MutexLock lock(&mu_);
      if (write_failed_ || cancelled_) return;
      if (writing_) {
        outbox_.push_back(std::move(response));
        return;
      }
      writing_ = true;
      sending_.Swap(&response);
      Keep(spare_responses_, std::move(response));  // the one sent before
    }
    StartWrite(&sending_);
  }

  Core& core_;
  const AccessGuard& guard_;
  grpc::CallbackServerContext* const context_;
  std::thread worker_ ABSL_GUARDED_BY(mu_);
  // The worker's own.
  std::unique_ptr<OpPipeline> pipeline_;
  uint64_t next_index_ = 0;
  uint64_t requests_read_ = 0;  // for the closing log line

  absl::Mutex mu_;
  v1::SubmitRequest reading_;  // the read outstanding, if read_outstanding_
  bool read_outstanding_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_ended_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<v1::SubmitRequest> inbox_ ABSL_GUARDED_BY(mu_);
  v1::SubmitResponse sending_;  // the write outstanding, if writing_
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<v1::SubmitResponse> outbox_ ABSL_GUARDED_BY(mu_);
  // Messages done with, kept for reuse (Keep): requests cleared, responses not yet.
  std::vector<v1::SubmitRequest> spare_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::SubmitResponse> spare_responses_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerBidiReactor<v1::SubmitRequest, v1::SubmitResponse>* NewSubmitReactor(
    Core& core, const AccessGuard& guard, grpc::CallbackServerContext* context) {
  return new SubmitReactor(core, guard, context);
}

}  // namespace gpukit::service
