// SubmitSocketClient: a synchronous session's end of gpukitd's submit socket
// (daemon/service/submit_socket.h): its ops and frees as Submit requests on a unix
// SOCK_SEQPACKET connection of its own, without gRPC.
//
// Each op is a request of one run op and a sync point: gpukitd answers once the op ran on the
// device, and the caller's own thread reads the answer, polling the socket for a while before
// it sleeps (the wait of a CUDA context's synchronous calls; see ClientSpinTime), so no other
// thread of either process has to wake for it. A free is a request of one free and a sync
// point that nobody waits for: its answer is read by the next call, and a failed free is
// reported by Sync. Each request ends with its sync point, so a failure never outlives its
// own request on gpukitd's side (a refused free does not refuse the next op).
//
//   GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<SubmitSocketClient> socket,
//       SubmitSocketClient::Connect("/run/gpukit/gpukitd.sock.submit", session_id));
//   GPUKIT_ASSIGN_OR_RETURN(v1::ArrayInfo c, socket->Run(add_op, absl::Seconds(60)));
//   GPUKIT_RETURN_IF_ERROR(socket->Free(c.handle()));  // no wait
//
// Failures: an op's refusal or device failure comes back as the op's status (its code, the
// daemon's message and its reason as the payload RejectReason() reads), as the unary RunOp
// returns it. When the stream itself ends (gpukitd sent `ended`, closed the connection, or a
// wait passed its deadline), the call fails and the client is broken(): every later call
// fails at once, and the owner goes back to gRPC.
//
// Thread safety: thread-safe; calls run one at a time: TryRun and TryFree return at once while
// another is in progress (a TryRun is until its op has run), Settle waits for it.
#ifndef GPUKIT_CLIENT_CPP_SUBMIT_SOCKET_CLIENT_H_
#define GPUKIT_CLIENT_CPP_SUBMIT_SOCKET_CLIENT_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gpukit/v1/compute.pb.h"
#include "runtime/base/unix_fd.h"

namespace gpukit::internal {

// The largest datagram gpukitd's submit socket sends or takes (kMaxSubmitSocketMessageBytes
// there).
inline constexpr size_t kMaxSubmitSocketDatagramBytes = 60 * 1024;

// An op's outcome (or a stream's end) as the unary RunOp would give it: its code, the
// daemon's message, its reason.
absl::Status SubmitSocketStatus(const v1::OpResult& result);

// How long a caller polls the submit socket for its answer before it sleeps: 20 ms on hosts
// with 8 or more cores (a large op's whole run), else 0 (on CI's two cores a spinning caller
// would take the core gpukitd needs); GPUKIT_CLIENT_SPIN_US=<us> overrides it.
std::chrono::microseconds ClientSpinTime();

class SubmitSocketClient {
 public:
  // Connects to the submit socket at `path` and opens the stream of the session `session_id`,
  // waiting at most `timeout` for gpukitd's first answer. UNAVAILABLE when nothing accepts
  // there or gpukitd closes the connection (past its connection limit); the stream's refusal
  // (NOT_FOUND for a session this process may not use). The owner uses gRPC then.
  static absl::StatusOr<std::unique_ptr<SubmitSocketClient>> Connect(const std::string& path,
                                                                     std::string session_id,
                                                                     absl::Duration timeout);
  // Closes the connection; gpukitd lets the ops sent run (the frees are applied).
  ~SubmitSocketClient() = default;
  SubmitSocketClient(const SubmitSocketClient&) = delete;
  SubmitSocketClient& operator=(const SubmitSocketClient&) = delete;

  // Runs `op` and waits, at most `timeout`, until it ran: the result's handle and layout, or
  // why it was refused or failed (see the top). DEADLINE_EXCEEDED past `timeout` (the client
  // is broken then: the answer would come out of order). nullopt at once, without sending
  // anything, while another thread's call is in progress on the socket: the caller sends the
  // op another way (gRPC), so that the calls of a session's threads still overlap (one may
  // wait in its partition's queue while another is refused at once).
  std::optional<absl::StatusOr<v1::ArrayInfo>> TryRun(const v1::PipelinedRunOp& op,
                                                      absl::Duration timeout);
  // Sends the free of `handle` and returns without waiting for its answer. Errors: the
  // stream's end only. nullopt, as TryRun, while another call is in progress.
  std::optional<absl::Status> TryFree(const std::string& handle, absl::Duration timeout);
  // Whether a request has no answer read yet (a free); never blocks.
  bool HasUnanswered() const {
    return unanswered_count_.load(std::memory_order_acquire) > 0 && !broken();
  }
  // Waits, at most `timeout`, until every request sent has its answer (the frees were
  // applied); returns the first free that failed since the last call, and forgets it. The
  // stream's end is not a free's failure: a broken client returns OK here.
  absl::Status Settle(absl::Duration timeout);
  // Whether the stream ended (every call fails; use gRPC). Never blocks.
  bool broken() const { return broken_flag_.load(std::memory_order_acquire); }

 private:
  SubmitSocketClient(ScopedFd socket, std::string session_id);
  absl::StatusOr<v1::ArrayInfo> RunLocked(const v1::PipelinedRunOp& op, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status FreeLocked(const std::string& handle, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends `request` (its session_id set on the first), reading answers meanwhile when the
  // socket is full, until `deadline`. Errors end the stream.
  absl::Status SendLocked(v1::SubmitRequest& request, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads answers until the one of sync token `token` came (its response into `*answer`, when
  // given) or `deadline` passed.
  absl::Status AwaitLocked(uint64_t token, absl::Time deadline, v1::SubmitResponse* answer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads one datagram and takes in its answers; waits for it until `deadline` (polling for
  // the first ClientSpinTime()), or not at all when `wait` is false (DEADLINE_EXCEEDED when
  // none is there).
  absl::Status ReadOneLocked(absl::Time deadline, bool wait, v1::SubmitResponse* answer,
                             uint64_t wanted) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the stream with `status` and returns it.
  absl::Status BreakLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  const ScopedFd socket_;
  const std::string session_id_;
  bool named_ ABSL_GUARDED_BY(mu_) = false;  // the session_id went out
  bool handle_prefix_seen_ ABSL_GUARDED_BY(mu_) = false;  // the stream's first answer came
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  uint64_t next_index_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_token_ ABSL_GUARDED_BY(mu_) = 1;
  // Sync tokens of requests without an answer yet, and those of frees among them.
  absl::flat_hash_set<uint64_t> unanswered_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> frees_ ABSL_GUARDED_BY(mu_);
  // unanswered_.size() and !broken_.ok(), for readers that must not wait behind a call.
  std::atomic<int64_t> unanswered_count_{0};
  std::atomic<bool> broken_flag_{false};
  absl::Status free_failure_ ABSL_GUARDED_BY(mu_);
  // Results of a response split over several datagrams, until its last one (with synced).
  std::vector<v1::OpResult> partial_ ABSL_GUARDED_BY(mu_);
  std::string buffer_ ABSL_GUARDED_BY(mu_);  // one datagram
};

}  // namespace gpukit::internal

#endif  // GPUKIT_CLIENT_CPP_SUBMIT_SOCKET_CLIENT_H_
