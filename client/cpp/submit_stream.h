// SubmitStream: the client's end of one ComputeService.Submit stream (pipelined submission,
// proto/gpukit/v1/compute.proto), and ArrayResult, the layout of an array that an op of the
// stream will produce.
//
// A session opens one stream, lazily, and sends its pipelined ops and its frees on it: on a
// connection of gpukitd's submit socket where the daemon offers one (OpenOnSocket: no gRPC
// thread on either side, as for a synchronous session's ops), else on a ComputeService.Submit
// call (Open). The messages and their meaning are the same either way. Run()
// and Free() queue the op and return without waiting for the daemon: the result of the op at
// index i is the array `handle_prefix + i`, known as soon as the stream is open. On an idle
// stream (no op sent and unanswered, nobody writing) the caller's thread sends the op itself,
// and Sync its sync point; otherwise a writer thread sends what is queued: every op queued
// while it was writing, or while kMaxUnansweredOps ops sent had no answer yet, goes out in
// its next request (up to 1024 ops), so a fast caller's ops travel in batches. A
// reader thread matches the daemon's OpResults to the ops by index
// and resolves each ArrayResult (the layout, or the refusal as a status naming the op). Sync()
// sends a sync point and waits for its answer; WaitForResults() waits until every run op already
// written has its OpResult (the daemon has then queued it on the session's stream), which orders a
// unary call after them, and turns into a sync point when one of them failed.
//
//   GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<SubmitStream> stream,
//                           SubmitStream::Open(*compute_stub, session_id));
//   GPUKIT_ASSIGN_OR_RETURN(SubmitStream::Submitted c, stream->Run(add_op));  // no wait
//   stream->Free(c.handle);
//   GPUKIT_RETURN_IF_ERROR(stream->Sync());  // "op #3 (add): shapes [2] and [3] ..."
//   GPUKIT_RETURN_IF_ERROR(stream->Close());  // half-closes, waits for the ops to run
//
// Failures: an op the daemon refuses (or that failed on the device) is reported with its
// code and the message "op #<index> (<name>): <daemon's message>", and its reason as the
// payload RejectReason() reads. If the stream itself ends with an error (the daemon went
// away, the session is gone), every op still unanswered fails with the stream's code and
// "op #i (name): not answered: the Submit stream ended: ...", and later calls fail with that
// status; the owner opens a new stream for later ops.
//
// Thread safety: thread-safe. Ops are numbered in the order Run and Free queue them, from any
// thread. They block only while kMaxQueuedOps ops wait to be sent, i.e. while gRPC's flow
// control holds the stream (the daemon stops reading at limits.maxOpsInFlight queued ops).
#ifndef GPUKIT_CLIENT_CPP_SUBMIT_STREAM_H_
#define GPUKIT_CLIENT_CPP_SUBMIT_STREAM_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gpukit/v1/compute.grpc.pb.h"
#include "runtime/base/dtype.h"

namespace gpukit::internal {

// Most ops of one SubmitRequest (the daemon's limit).
inline constexpr int kMaxOpsPerRequest = 1024;
// Most ops queued and not yet sent; Run and Free wait beyond it.
inline constexpr int kMaxQueuedOps = 4 * kMaxOpsPerRequest;
// Most ops sent and not yet answered (the daemon answers an op once it has queued it on the
// device) before the writer waits for answers: while the daemon is behind, later ops
// gather into one request instead of one each, so a fast caller's chain costs the daemon a
// message per batch rather than per op (gRPC's threads in gpukitd: 19-45 us of CPU per op
// before, 1.4-3.5 us after; docs/benchmarks.md). Twice the daemon's default
// base window (a quarter of limits.maxOpsInFlight), so ops still wait in the daemon for a
// slot while the writer waits.
inline constexpr int kMaxUnansweredOps = 64;
// A caller writes its op itself when the stream has no op unanswered and has written nothing
// for this long: its writer thread then sleeps deeply (on the GPU host, waking it took 35-60
// us after 0.5 ms of quiet, 90-100 us after 5 ms, about 250 us after 50 ms). Sooner, the
// writer thread wakes quickly and gathers what follows into one request.
inline constexpr std::chrono::microseconds kCallerWritesAfterQuiet{200};

// Shape, dtype and size of an array.
struct ArrayLayout {
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat32;
  int64_t size_bytes = 0;
};

// The outcome of the op that produces an array: its layout once the daemon accepted the op,
// or why it did not. Resolved exactly once; readers block until then.
//
// Thread safety: thread-safe; the value returned by Wait() is immutable once resolved.
class ArrayResult {
 public:
  // An array whose layout is known now (made by a unary call).
  static std::shared_ptr<ArrayResult> Known(ArrayLayout layout);
  // An array whose op is in flight; Resolve gives its outcome.
  ArrayResult() = default;
  ArrayResult(const ArrayResult&) = delete;
  ArrayResult& operator=(const ArrayResult&) = delete;

  // Sets the outcome; only the first call counts.
  void Resolve(absl::StatusOr<ArrayLayout> outcome);
  // The outcome, waiting for it if the op's OpResult has not arrived yet (usually it has:
  // the daemon answers once it queued the op, without waiting for it to run).
  const absl::StatusOr<ArrayLayout>& Wait() const;
  // Whether the outcome is known (never blocks).
  bool resolved() const { return resolved_.load(std::memory_order_acquire); }
  // True when resolved with an error: the daemon holds no array to free.
  bool failed() const { return resolved() && !outcome_.ok(); }

 private:
  mutable absl::Mutex mu_;
  std::atomic<bool> resolved_{false};
  // Written once, under mu_, before resolved_ is set.
  absl::StatusOr<ArrayLayout> outcome_ = absl::UnknownError("unresolved");
};

// What a SubmitStream's messages travel on. Write is called by one thread at a time (the
// writer thread, or a caller writing on an idle stream), Read by another (the reader);
// Finish once Read returned false and no Write runs; Cancel from any thread.
class SubmitTransport {
 public:
  virtual ~SubmitTransport() = default;
  // Sends one request; false once the stream is broken (Read then ends, Finish says why).
  virtual bool Write(const v1::SubmitRequest& request) = 0;
  // No more requests: the daemon ends the stream once every op sent has run.
  virtual void WritesDone() = 0;
  // The next response; false at the stream's end.
  virtual bool Read(v1::SubmitResponse* response) = 0;
  // How the stream ended: OK for a clean end after WritesDone.
  virtual absl::Status Finish() = 0;
  // Ends the stream now (Read returns false soon).
  virtual void Cancel() = 0;
  // The largest op a request may carry (the submit socket's datagram, less room for the
  // request around it); larger ones are refused by Run, leaving the stream as it was.
  virtual size_t max_op_bytes() const { return SIZE_MAX; }
};

class SubmitStream {
 public:
  // Starts a Submit call for `session_id` and sends its first request, without waiting for
  // the daemon (the handle prefix arrives later; Run waits for it). `stub` must outlive the
  // stream. Errors: none here but a failure to start the call (UNAVAILABLE); the daemon's
  // refusals of the stream (NOT_FOUND, FAILED_PRECONDITION for a second stream of the
  // session, UNIMPLEMENTED for a daemon without Submit) come back from the first op or sync.
  static absl::StatusOr<std::unique_ptr<SubmitStream>> Open(v1::ComputeService::Stub& stub,
                                                            const std::string& session_id,
                                                            absl::Duration close_timeout);
  // The stream of `session_id` on a connection of gpukitd's submit socket at `path`
  // (daemon/service/submit_socket.h), opened before it returns: it waits, at most
  // `open_timeout`, for the handle prefix, so that a refusal (a connection gpukitd closed,
  // past its limit; a session it does not let this process use) fails here and the owner
  // opens a gRPC stream instead. (A session has one stream at a time whatever carries it: a
  // stream the daemon still holds open refuses the gRPC one too, until it has closed it.) A request above the
  // socket's datagram limit goes as several (its ops in order, the sync point with the last).
  static absl::StatusOr<std::unique_ptr<SubmitStream>> OpenOnSocket(const std::string& path,
                                                                    const std::string& session_id,
                                                                    absl::Duration open_timeout,
                                                                    absl::Duration close_timeout);
  // The stream on `transport`, whose opening the daemon has answered with `handle_prefix`
  // (OpenOnSocket's last step; a test's transport of its own). Starts its threads.
  static std::unique_ptr<SubmitStream> OnOpenedTransport(std::unique_ptr<SubmitTransport> transport,
                                                         const std::string& handle_prefix,
                                                         absl::Duration close_timeout);
  // Closes the stream (Close) and joins its threads.
  ~SubmitStream();
  SubmitStream(const SubmitStream&) = delete;
  SubmitStream& operator=(const SubmitStream&) = delete;

  struct Submitted {
    std::string handle;  // handle_prefix + index
    std::shared_ptr<ArrayResult> result;
  };
  // Queues a run op. Waits for the daemon's first answer once per stream (the handle
  // prefix), then never for the daemon. Errors: the stream's own end (its status);
  // INVALID_ARGUMENT for an op above the transport's max_op_bytes (nothing is queued).
  absl::StatusOr<Submitted> Run(const v1::PipelinedRunOp& op);
  // Queues a free of `handle`. Never waits for the daemon. Errors: the stream's end.
  absl::Status Free(const std::string& handle);
  // Sends a sync point and waits for its answer, i.e. until every op sent before it has run
  // on the device. Returns the first op that failed since the previous sync point (refused,
  // or failed on the device), as "op #i (name): ..."; then the stream is clean again. Costs
  // a round trip plus the queued work.
  absl::Status Sync();
  // Waits until every run op written so far has its OpResult (frees written after the last
  // run op are not waited for: they only give memory back). OK when none failed. Otherwise
  // it acts as a sync point: it sends one, waits for its answer and returns the first
  // failure (as Sync does); the stream then takes ops again. A free's failure is left for
  // Sync.
  absl::Status WaitForResults();
  // Whether some op written (a free, say) has no OpResult yet. Never blocks for long.
  bool HasUnanswered() const;
  // Waits until every op written so far, frees included, has its OpResult (the daemon has
  // applied the frees). Nothing is reported: failures stay for Sync.
  void WaitForAllAnswers();
  // Half-closes the stream and waits for its end (the daemon ends it once the ops sent have
  // run); past `close_timeout` it cancels the call. Idempotent; returns the stream's end
  // status (OK for a clean end).
  absl::Status Close();
  // Whether the stream has ended (then every call fails; open a new one).
  bool ended() const;
  // Once ended: how (OK after Close), and the handles of the frees it never answered, which
  // the daemon may not have applied (the owner frees them another way). Empty before.
  absl::Status end_status() const;
  std::vector<std::string> TakeUnansweredFrees();

 private:
  SubmitStream(std::unique_ptr<SubmitTransport> transport, absl::Duration close_timeout);
  // Starts the reader and writer threads.
  void Start();
  void ReadLoop();
  void WriteLoop();
  void HandleResponse(const v1::SubmitResponse& response);
  // The status of a failed OpResult: its code, "op #i (name): message", its reason.
  static absl::Status OpStatus(const v1::OpResult& result);
  // Waits for room in the outbox; then the request to append the next op to. Errors: the
  // stream's end, or its close.
  absl::StatusOr<v1::SubmitRequest*> RoomForOp() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the calling thread (Run, Free, Sync) writes the outbox itself instead of leaving
  // it to the writer thread: nobody writes now, the stream is open and not closing, its
  // flow control lets the outbox go, and either the stream is quiet (nothing sent is
  // unanswered and nothing was written for kCallerWritesAfterQuiet: the op would wait for
  // the writer thread's wake-up; docs/benchmarks.md, "A burst's first op: the wake-ups after
  // a pause") or the caller `waits` for the answer anyway (a sync point). A busy stream's ops
  // still gather in the outbox for the writer thread.
  bool CallerWritesLocked(bool waits) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the outbox to write (the caller then calls WriteTaken): counts its ops as sent and,
  // when it holds anything, marks a write in progress.
  std::vector<v1::SubmitRequest> TakeOutboxLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes what TakeOutboxLocked took (nothing when empty), in order, then ends the write in
  // progress. False when a write failed (the stream broke: the reader sees its end).
  bool WriteTaken(const std::vector<v1::SubmitRequest>& taken) ABSL_LOCKS_EXCLUDED(mu_);
  // The epoch (number of sync points written before it) of the op at `index`.
  uint64_t EpochOf(uint64_t index) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status EndedStatus() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Written by one thread at a time (writing_), never after the writer thread stopped; read by
  // the reader thread only, which calls Finish once no write is in progress.
  const std::unique_ptr<SubmitTransport> transport_;
  const absl::Duration close_timeout_;
  std::thread reader_;
  std::thread writer_;

  mutable absl::Mutex mu_;
  // Requests queued for the writer, in order; ops are appended to the last one.
  std::vector<v1::SubmitRequest> outbox_ ABSL_GUARDED_BY(mu_);
  int64_t outbox_ops_ ABSL_GUARDED_BY(mu_) = 0;
  // Close was called: the writer half-closes once the outbox is empty.
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  // A thread (the writer, or a caller: CallerWritesLocked) writes what it took from the
  // outbox; nobody else writes meanwhile.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // When TakeOutboxLocked last took something (a monotonic clock).
  std::chrono::steady_clock::time_point last_take_ ABSL_GUARDED_BY(mu_);
  // The reader saw the stream's end; the writer stopped (it writes no more).
  bool read_done_ ABSL_GUARDED_BY(mu_) = false;
  bool writer_stopped_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_index_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_sync_token_ ABSL_GUARDED_BY(mu_) = 1;
  std::string handle_prefix_ ABSL_GUARDED_BY(mu_);
  bool opened_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status end_status_ ABSL_GUARDED_BY(mu_);
  // Ops without an OpResult yet, by index: a run op with its name and result, or a free
  // (result null) with its handle.
  struct Pending {
    std::string op;
    std::shared_ptr<ArrayResult> result;
    std::string freed_handle;
  };
  std::map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;   // ops queued (their indexes are below)
  uint64_t sent_ ABSL_GUARDED_BY(mu_) = 0;      // of them, handed to the transport
  uint64_t answered_ ABSL_GUARDED_BY(mu_) = 0;  // ops with an OpResult (they come in order)
  // One past the index of the last run op written (0: none).
  uint64_t run_ops_end_ ABSL_GUARDED_BY(mu_) = 0;
  // sync_boundaries_[k]: the index of the first op after sync point k + 1 (token k + 1).
  std::vector<uint64_t> sync_boundaries_ ABSL_GUARDED_BY(mu_);
  // The first failed OpResult of each epoch not yet answered by a sync point, and whether
  // WaitForResults returned it (it never returns a free's: a failed free is found by a sync
  // point only, as the caller's array is gone by then).
  struct Failure {
    absl::Status status;
    bool reported = false;
  };
  std::map<uint64_t, Failure> failures_ ABSL_GUARDED_BY(mu_);
  // Answers of sync points not yet collected, by token.
  absl::flat_hash_map<uint64_t, absl::Status> synced_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> unanswered_frees_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpukit::internal

#endif  // GPUKIT_CLIENT_CPP_SUBMIT_STREAM_H_
