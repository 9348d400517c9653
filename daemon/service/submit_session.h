// SubmitSession: what gpukitd answers to the requests of one Submit stream (pipelined ops,
// compute.proto has the contract), whatever carries the messages: ComputeService.Submit's gRPC
// stream (submit_stream.h) or a connection of the submit socket (submit_socket.h).
//
// The first request must name a session the caller may use (`authorize` says); it opens the
// session's OpPipeline (one per session at a time) and is answered first with the stream's
// handle prefix alone. Each request's ops then run in order through the pipeline, their work
// held in batches for the device (burst_batcher.h), and the request is answered with one
// SubmitResponse of their OpResults, with `synced` and `error` when it ends with a sync point
// (after OpPipeline::Sync).
//
//   SubmitSession session(core, [&](absl::string_view id) { return guard.CheckSessionOf(caller,
//   id); }); for (each request) {
//     absl::StatusOr<bool> answer = session.Answer(request, response, send);
//     if (!answer.ok()) { ... end the stream with answer.status() ... }
//     if (*answer) send(response);
//     if (nothing more waits) session.EndBurst();
//   }
//   session.Close();
//
// Errors of the stream itself (they end it): INVALID_ARGUMENT for a request that breaks the
// protocol (a first request without session_id, another session's id later, more than
// kMaxOpsPerSubmitRequest ops, malformed strings), `authorize`'s refusal, and OpenPipeline's
// (FAILED_PRECONDITION for a second stream of the session). An op's own refusal is its
// OpResult's, not the stream's.
//
// Thread safety: one thread at a time (the stream's worker).
#ifndef GPUKIT_DAEMON_SERVICE_SUBMIT_SESSION_H_
#define GPUKIT_DAEMON_SERVICE_SUBMIT_SESSION_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/core/core.h"
#include "daemon/core/op_pipeline.h"
#include "daemon/service/burst_batcher.h"
#include "gpukit/v1/compute.pb.h"
#include "grpcpp/server_context.h"

namespace gpukit::service {

// Most ops one SubmitRequest may carry; more is INVALID_ARGUMENT for the stream.
inline constexpr int kMaxOpsPerSubmitRequest = 1024;

class SubmitSession {
 public:
  // OK when the stream's caller may use the session `session_id` names.
  using Authorize = std::function<absl::Status(absl::string_view session_id)>;
  // `core` must outlive the session. `context` (may be null) is the gRPC call's: its deadline
  // bounds the ops' queue waits, and a cancelled call stops a request's ops from being queued
  // and cancels the one waiting for admission. Without a context, `cancelled` (may be null)
  // plays that part (the submit socket's shutdown).
  SubmitSession(Core& core, Authorize authorize, grpc::ServerContextBase* context = nullptr,
                std::function<bool()> cancelled = nullptr);
  // Close().
  ~SubmitSession();
  SubmitSession(const SubmitSession&) = delete;
  SubmitSession& operator=(const SubmitSession&) = delete;

  // Answers `request` into `response` (cleared first); returns whether it is to be sent (a
  // request with neither ops nor a sync point gets no answer). The stream's first answer, the
  // handle prefix, goes to `send` before. Errors: the stream's (see the top of this file);
  // the stream ends with them.
  absl::StatusOr<bool> Answer(const v1::SubmitRequest& request, v1::SubmitResponse& response,
                              const std::function<void(v1::SubmitResponse)>& send);
  // Sends the work held for the device: call it when no further request waits.
  void EndBurst() { batcher_.EndBurst(); }
  // Waits for the ops queued to run (their tasks end, their pins drop; their results stay in
  // the session) and frees the session's pipeline slot. Idempotent.
  void Close();

  // Ops answered so far (for logs).
  uint64_t ops() const { return next_index_; }
  // The session's id once the first request opened the pipeline, else empty.
  std::string session_id() const;

 private:
  // Op `index`: queued (the result's layout) or refused (its status).
  void RunOne(const v1::PipelinedOp& op, uint64_t index, v1::OpResult* result);

  Core& core_;
  const Authorize authorize_;
  grpc::ServerContextBase* const context_;
  const std::function<bool()> cancelled_;
  std::unique_ptr<OpPipeline> pipeline_;
  // Declared after pipeline_, so destroyed (its held work sent) before it.
  BurstBatcher batcher_;
  uint64_t next_index_ = 0;
};

}  // namespace gpukit::service

#endif  // GPUKIT_DAEMON_SERVICE_SUBMIT_SESSION_H_
