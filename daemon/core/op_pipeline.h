// OpPipeline: one session's ops that run without waiting (ComputeService.Submit, below
// gRPC). A unary RunOp waits for its op to run before it answers; a pipeline queues the op
// on the session's stream and answers at once, so a client sends its next op while the
// device still runs the last one, and the round trip per op disappears from the chain.
//
//   GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<OpPipeline> p, core.OpenPipeline(session_id));
//   GPUKIT_ASSIGN_OR_RETURN(ArrayView c, p->RunOp(0, "add", {a, b}, {}));
//   // c.handle == p->handle_prefix() + "0", usable by the next op before op 0 has run:
//   GPUKIT_ASSIGN_OR_RETURN(ArrayView d, p->RunOp(1, "mul", {OpInput{.handle = c.handle},
//                                                           b}, {}));
//   GPUKIT_RETURN_IF_ERROR(p->Free(2, c.handle));
//   if (std::optional<OpPipeline::Failure> f = p->Sync()) { ... f->index, f->status ... }
//
// Semantics. An op goes through the same checks, planning, admission, pinning and output
// allocation as Core::RunOp (Core::PrepareOp, one code path), then is queued on the session's
// stream between two events, and its output is registered with the session at once under
// the handle handle_prefix() + index. The ops of a session's stream run in the order queued,
// so a later op may name that handle before its producer ran. Each op is a task of kind op of
// the session's partition, running from its admission until its end event completed: the
// completion thread then charges the device time the events measured (pacing, ListSessions,
// ListTenants) and ends the task with the op's device status; Sync completes the ops that
// the completion thread has not taken yet itself, so that a synchronous client's op is
// waited for and finished by the thread that answers it. Inputs and the output stay
// pinned (resident, alive) until then, even if freed meanwhile (Free takes effect at once
// for new ops; memory comes back once the ops that used the array have run).
//
// Errors. An op refused before it was queued (RunOp's or Free's error: Core::RunOp's
// errors, NOT_FOUND for a handle the session does not hold) makes the pipeline "failed":
// every later RunOp and Free is refused with ABORTED "not run: op #i (name) failed before it"
// until the next Sync. An op that fails on the device is known only once it has run: Sync
// reports it. Sync returns the first failure (lowest index) since the previous Sync, refused
// or failed on the device, and clears the failed state. A sticky device fault (one that
// poisons the device, as a CUDA illegal address does) fails every op whose completion is
// seen after it, so Sync may name an op queued before the one that faulted; its message
// then says the device was poisoned by an earlier fault.
//
// Cost per op: the op's checks and admission, as Core::RunOp, and one call to the device
// (RunOpBetweenEvents: the op between its two events; one request to a device executor)
// with no wait; the completion thread (or Sync, for the ops it finds not taken) waits once
// per batch of ops queued meanwhile (they share one stream, so the last end event covers
// all), measures each op's device time, and ends the batch's tasks in one scheduler call and
// its events in one DestroyEvents (OpPipeline::CompleteBatch).
//
// Flow control: every op queued holds a task of the session's partition until it completes.
// A pipeline may always hold its base window of them (BaseWindow: a quarter of
// CoreOptions::max_ops_in_flight, 32 by default); past it, up to max_ops_in_flight, only
// while its partition has fewer than half its maxRunningTasks tasks running or queued
// (Scheduler::PartitionHasSpareSlots) and its ops in flight hold fewer than
// CoreOptions::pipeline_growth_bytes of outputs (64 MiB: large ops keep the device busy with
// the base window, and their outputs stay resident while in flight). RunOp waits for the
// oldest beyond that. A lone session gets the larger window, which a chain of small ops needs
// to keep the device fed (one session's chains 1.12-1.15x with 128 against 32 on the GPU
// host, docs/benchmarks.md "One session's window"), and busy sessions together cannot fill
// the partition's slots and queue (QUEUE_FULL) with ops past their base windows.
//
// Thread safety: RunOp, Free and Sync are called by one thread at a time (the stream's
// owner), with increasing indices; Close and the destructor by that thread, or by another
// once it has stopped calling. handle_prefix, session_id, in_flight, HoldCompletions and
// ReleaseCompletions may be called from any thread. One completion thread per pipeline, started by
// OpenPipeline, joined by Close.
#ifndef GPUKIT_DAEMON_CORE_OP_PIPELINE_H_
#define GPUKIT_DAEMON_CORE_OP_PIPELINE_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "daemon/core/core.h"
#include "daemon/core/running_task.h"
#include "daemon/session/device_array.h"
#include "daemon/session/session_manager.h"

namespace gpukit {

class OpPipeline {
 public:
  // The first failure since the previous Sync.
  struct Failure {
    uint64_t index = 0;
    std::string op;  // "add", "free"
    absl::Status status;
  };

  OpPipeline(const OpPipeline&) = delete;
  OpPipeline& operator=(const OpPipeline&) = delete;
  // Close().
  ~OpPipeline();

  // Every output's handle is this followed by the op's index: "a-<32 hex digits>.".
  const std::string& handle_prefix() const { return handle_prefix_; }
  const std::string& session_id() const { return session_->id(); }
  // The session's device. A DeviceBatch on it around a burst of RunOp calls sends their work
  // to a device executor in fewer messages; end it before waiting for the client. Sync may
  // come inside it: its own wait carries the work held, and a wait of the completion thread's
  // carries whatever is still held then (a device executor sends what any thread holds
  // before a request that waits), so nothing held is left behind while Sync waits.
  Device& device() const;

  // Queues op `index` (see the top of this file) and returns its output's layout, without
  // waiting for it to run; blocks while its window is full (see Flow control), and while
  // the task waits for admission. Errors: ABORTED while the pipeline is failed, NOT_FOUND
  // once the session ended (its lease renews with every op), FAILED_PRECONDITION after
  // Close, and Core::RunOp's: nothing was queued, but for a refused registration of the
  // output (the session ended, or TOO_MANY_ARRAYS in a race), where the op still runs and
  // its result is dropped.
  absl::StatusOr<ArrayView> RunOp(uint64_t index, absl::string_view op_name,
                                  absl::Span<const OpInput> inputs, const AttrMap& attrs,
                                  const TaskOptions& options = {});
  // Op `index`: frees the session's array `handle` (Core::FreeArray); ops queued before
  // that use it keep it alive until they have run. Errors: ABORTED while failed, NOT_FOUND.
  absl::Status Free(uint64_t index, absl::string_view handle);
  // Op `index` was refused before it reached RunOp or Free (its caller found it malformed).
  // Returns what to answer for it: ABORTED "not run: ..." while the pipeline is failed
  // already; else `status`, and the pipeline is failed from now until the next Sync.
  absl::Status Refuse(uint64_t index, absl::string_view op, absl::Status status);
  // Waits until every op queued so far has run; returns the first failure (lowest index)
  // since the previous Sync, refused or failed on the device, if any, and makes the
  // pipeline clean again. The ops the completion thread has not taken yet it completes
  // itself (one wait for them, from this thread); for those the completion thread holds it
  // spins before it sleeps, as the executor channel's waits do (SpinForAnswer, while slots
  // are free): a synchronous client waits for this answer, and a wake-up at the end would be
  // on its path.
  std::optional<Failure> Sync();
  // Waits for the ops queued to run (they run to their end even if the session closed),
  // joins the completion thread and frees the session's pipeline slot. Idempotent.
  void Close();

  // For a caller that holds its ops' work in a DeviceBatch: while `hold` is on, each op
  // queued waits to be handed to the completion thread until ReleaseCompletions. Its wait
  // would otherwise send the work held at once (a device executor sends what a thread holds
  // before another thread's message), and a batch would end after a few ops, with one more
  // round trip to the executor per few ops. Close, a RunOp that finds its window full and
  // HoldCompletions(false) hand over what is held; Sync completes it itself. Cost: a lock
  // each.
  void HoldCompletions(bool hold);
  // Hands the ops held to the completion thread; call it once their batch has ended.
  void ReleaseCompletions();

  // Ops queued and not yet completed (plus one being queued).
  int in_flight() const;

  // The ops in flight a pipeline may always hold: max(1, max_ops_in_flight / 4).
  static int BaseWindow(int max_ops_in_flight) { return std::max(1, max_ops_in_flight / 4); }

 private:
  friend class Core;
  // What the completion thread finishes: an op queued on the device.
  struct Record {
    uint64_t index = 0;
    std::string op;
    std::vector<ArrayPin> pins;  // the inputs'
    ArrayPin output_pin;
    EnqueuedTask work;
    int64_t bytes = 0;  // the output's
  };

  OpPipeline(Core& core, std::shared_ptr<Session> session, int max_ops_in_flight,
             int64_t growth_bytes);

  absl::StatusOr<ArrayView> Queue(uint64_t index, absl::string_view op_name,
                                  absl::Span<const OpInput> inputs, const AttrMap& attrs,
                                  const TaskOptions& options);
  // ABORTED while failed; FAILED_PRECONDITION once closing.
  absl::Status CheckOpen() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Op `index` was refused: the pipeline is failed until the next Sync.
  void NoteRefusal(uint64_t index, absl::string_view op, const absl::Status& status);
  void NoteFailure(uint64_t index, absl::string_view op, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseSlot();
  // held_ to queued_.
  void HandOverLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The completion thread: takes every record queued, completes them, and again.
  void CompletionLoop();
  // Completes `batch` (CompleteBatch), drops its pins and counts it completed; empties it.
  // Called by the completion thread, and by Sync for the records it finds queued.
  void Complete(std::vector<Record>& batch);
  // Waits for a batch (in queue order, one stream) and ends each op's task with its device
  // status and time. The one place that asks the device about completed ops (from the
  // completion thread and a Sync at once, for two batches of the stream).
  void CompleteBatch(std::vector<Record>& batch);

  Core& core_;
  const std::shared_ptr<Session> session_;  // keeps its stream alive until Close
  const int max_ops_in_flight_;
  const int base_window_;       // BaseWindow(max_ops_in_flight_)
  const int64_t growth_bytes_;  // CoreOptions::pipeline_growth_bytes
  const std::string handle_prefix_;

  mutable absl::Mutex mu_;
  std::vector<Record> queued_ ABSL_GUARDED_BY(mu_);  // not yet taken by the completion thread
  bool holding_ ABSL_GUARDED_BY(mu_) = false;        // HoldCompletions
  std::vector<Record> held_ ABSL_GUARDED_BY(mu_);    // queued while holding, not handed over
  // Slots taken: ops being queued plus records not yet completed (<= max_ops_in_flight_).
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t in_flight_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // the outputs of the records in flight
  uint64_t records_queued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t records_completed_ ABSL_GUARDED_BY(mu_) = 0;
  // records_completed_, for a Sync that spins before it waits on mu_.
  std::atomic<uint64_t> completed_{0};
  // The longest a Sync spins (with a SpinSlots slot) for ops that run long.
  static constexpr std::chrono::microseconds kLongSpin{20'000};
  std::optional<Failure> first_failure_ ABSL_GUARDED_BY(mu_);
  std::optional<Failure> refused_ ABSL_GUARDED_BY(mu_);  // set: the pipeline is failed
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ = false;  // the owner's thread only
  std::thread completion_;
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_CORE_OP_PIPELINE_H_
