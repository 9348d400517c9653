#include "daemon/service/submit_session.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/service/convert.h"
#include "daemon/service/request_strings.h"
#include "runtime/base/status_macros.h"
#include "spdlog/spdlog.h"

namespace gpukit::service {

SubmitSession::SubmitSession(Core& core, Authorize authorize, grpc::ServerContextBase* context,
                             std::function<bool()> cancelled)
    : core_(core),
      authorize_(std::move(authorize)),
      context_(context),
      cancelled_(std::move(cancelled)),
      // The completion thread gets each batch's ops once it was sent
      // (OpPipeline::HoldCompletions).
      batcher_([this] {
        if (pipeline_ != nullptr) pipeline_->ReleaseCompletions();
      }) {}

SubmitSession::~SubmitSession() { Close(); }

std::string SubmitSession::session_id() const {
  return pipeline_ != nullptr ? pipeline_->session_id() : std::string();
}

void SubmitSession::Close() {
  batcher_.EndBurst();
  if (pipeline_ == nullptr) return;
  // The ops queued run to their end whatever happened; their tasks end and pins drop.
  pipeline_->Close();
  spdlog::debug("submit stream closed: session={} ops={}", pipeline_->session_id(), next_index_);
  pipeline_.reset();
}

absl::StatusOr<bool> SubmitSession::Answer(const v1::SubmitRequest& request,
                                           v1::SubmitResponse& response,
                                           const std::function<void(v1::SubmitResponse)>& send) {
  GPUKIT_RETURN_IF_ERROR(ValidateSubmitRequestStrings(request));
  if (pipeline_ == nullptr) {
    if (request.session_id().empty()) {
      return absl::InvalidArgumentError(
          "the first Submit request must name the session (session_id)");
    }
    GPUKIT_RETURN_IF_ERROR(authorize_(request.session_id()));
    GPUKIT_ASSIGN_OR_RETURN(pipeline_, core_.OpenPipeline(request.session_id()));
    pipeline_->HoldCompletions(true);
    spdlog::debug("submit stream opened: session={} prefix={}", pipeline_->session_id(),
                  pipeline_->handle_prefix());
    v1::SubmitResponse opened;
    opened.set_handle_prefix(pipeline_->handle_prefix());
    send(std::move(opened));
  } else if (!request.session_id().empty() && request.session_id() != pipeline_->session_id()) {
    return absl::InvalidArgumentError(absl::StrCat("session_id \"", request.session_id(),
                                                   "\" differs from the stream's session \"",
                                                   pipeline_->session_id(), "\""));
  }
  if (request.ops_size() > kMaxOpsPerSubmitRequest) {
    return absl::InvalidArgumentError(absl::StrCat("ops has ", request.ops_size(), " ops; at most ",
                                                   kMaxOpsPerSubmitRequest, " per request"));
  }
  if (request.ops_size() == 0 && request.sync() == 0) return false;
  if (request.ops_size() > 0) pipeline_->device().ExpectWork();
  response.Clear();
  for (const v1::PipelinedOp& op : request.ops()) {
    // A client that went away gets no more of its ops queued (the request may hold 1024).
    if ((context_ != nullptr && context_->IsCancelled()) || (cancelled_ && cancelled_())) {
      return absl::CancelledError("the stream was cancelled");
    }
    batcher_.BeforeOp(pipeline_->device());
    RunOne(op, next_index_++, response.add_results());
  }
  if (request.sync() > 0) {
    // Sync waits inside the burst's batch: its wait for the ops joins the work held, one
    // message to a device executor (Sync completes what the completion thread has not taken).
    std::optional<OpPipeline::Failure> failure = pipeline_->Sync();
    batcher_.EndBurst();
    response.set_synced(request.sync());
    if (failure.has_value()) {
      v1::OpResult* error = response.mutable_error();
      error->set_index(failure->index);
      error->set_op(failure->op);
      ToProto(failure->status, error);
    }
  }
  return true;
}

void SubmitSession::RunOne(const v1::PipelinedOp& op, uint64_t index, v1::OpResult* result) {
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
        TaskOptions options = TaskOptionsFrom(run.task(), context_);
        if (context_ == nullptr && cancelled_) options.cancelled = cancelled_;
        // An op that must wait for admission may wait for the ops held in the burst's batch
        // (a partition that runs fewer tasks at once than the batch holds): they go first,
        // and their completions with them.
        options.before_wait = [this] { batcher_.EndBurst(); };
        absl::StatusOr<ArrayView> output =
            pipeline_->RunOp(index, run.op(), *inputs, *attrs, options);
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

}  // namespace gpukit::service
