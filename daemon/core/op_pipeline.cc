#include "daemon/core/op_pipeline.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/thread_name.h"
#include "runtime/executor/spin_wait.h"

namespace gpukit {

OpPipeline::OpPipeline(Core& core, std::shared_ptr<Session> session, int max_ops_in_flight,
                       int64_t growth_bytes)
    : core_(core),
      session_(std::move(session)),
      max_ops_in_flight_(max_ops_in_flight),
      base_window_(BaseWindow(max_ops_in_flight)),
      growth_bytes_(growth_bytes),
      handle_prefix_(NewOpaqueId("a-") + ".") {
  completion_ = std::thread([this] {
    NameThisThread("gk-op-done");
    CompletionLoop();
  });
}

OpPipeline::~OpPipeline() { Close(); }

void OpPipeline::Close() {
  if (closed_) return;
  closed_ = true;
  {
    absl::MutexLock lock(&mu_);
    HandOverLocked();
    closing_ = true;
  }
  completion_.join();
  core_.ClosePipeline(session_->id());
}

void OpPipeline::HoldCompletions(bool hold) {
  absl::MutexLock lock(&mu_);
  holding_ = hold;
  if (!hold) HandOverLocked();
}

void OpPipeline::ReleaseCompletions() {
  absl::MutexLock lock(&mu_);
  HandOverLocked();
}

void OpPipeline::HandOverLocked() {
  if (held_.empty()) return;
  records_queued_ += held_.size();
  for (Record& record : held_) queued_.push_back(std::move(record));
  held_.clear();
}

int OpPipeline::in_flight() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

absl::Status OpPipeline::CheckOpen() const {
  if (closing_) return absl::FailedPreconditionError("the pipeline is closed");
  if (refused_.has_value()) {
    return absl::AbortedError(
        absl::StrCat("not run: op #", refused_->index, " (", refused_->op, ") failed before it"));
  }
  return absl::OkStatus();
}

void OpPipeline::NoteFailure(uint64_t index, absl::string_view op, const absl::Status& status) {
  if (first_failure_.has_value() && first_failure_->index <= index) return;
  first_failure_ = Failure{index, std::string(op), status};
}

void OpPipeline::NoteRefusal(uint64_t index, absl::string_view op, const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  NoteFailure(index, op, status);
  if (!refused_.has_value()) refused_ = Failure{index, std::string(op), status};
}

absl::Status OpPipeline::Refuse(uint64_t index, absl::string_view op, absl::Status status) {
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status open = CheckOpen(); !open.ok()) return open;
  }
  NoteRefusal(index, op, status);
  return status;
}

Device& OpPipeline::device() const {
  return *core_.devices_[session_->admission().device_index].device;
}

void OpPipeline::ReleaseSlot() {
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

absl::StatusOr<ArrayView> OpPipeline::RunOp(uint64_t index, absl::string_view op_name,
                                            absl::Span<const OpInput> inputs, const AttrMap& attrs,
                                            const TaskOptions& options) {
  absl::StatusOr<ArrayView> result = Queue(index, op_name, inputs, attrs, options);
  if (!result.ok()) NoteRefusal(index, op_name, result.status());
  return result;
}

absl::StatusOr<ArrayView> OpPipeline::Queue(uint64_t index, absl::string_view op_name,
                                            absl::Span<const OpInput> inputs, const AttrMap& attrs,
                                            const TaskOptions& options) {
  {
    absl::MutexLock lock(&mu_);
    GPUKIT_RETURN_IF_ERROR(CheckOpen());
  }
  // The lease renews with every op; a session that ended refuses the op (NOT_FOUND).
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, core_.sessions_.Touch(session_->id()));
  {
    // A slot first, then admission: the pipeline never holds more than its cap of tasks.
    absl::MutexLock lock(&mu_);
    // The partition's spare slots are read without the scheduler's lock, so `has_room` may
    // turn false while nothing under mu_ changes. A waiter therefore hands every held op
    // over first: they all complete, under mu_, until fewer than the base window are in
    // flight, which always wakes it.
    auto has_room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (closing_ || in_flight_ < base_window_) return true;
      return in_flight_ < max_ops_in_flight_ && in_flight_bytes_ < growth_bytes_ &&
             core_.scheduler().PartitionHasSpareSlots(session_->ticket());
    };
    if (!has_room()) {
      // The oldest ops complete only once handed over to the completion thread.
      HandOverLocked();
      mu_.Await(absl::Condition(&has_room));
    }
    GPUKIT_RETURN_IF_ERROR(CheckOpen());
    ++in_flight_;
  }
  absl::StatusOr<Core::PreparedOp> op = core_.PrepareOp(*session, op_name, inputs, attrs, options,
                                                        absl::StrCat(handle_prefix_, index));
  if (!op.ok()) {
    ReleaseSlot();
    return op.status();
  }
  Device& device = op->output->device();
  const StreamId stream = session->stream();
  absl::StatusOr<EnqueuedTask> work = op->task.EnqueueOp(device, stream, op->launch);
  if (!work.ok()) {
    // Nothing of this op was queued; the ops before it still pin what they use.
    ReleaseSlot();
    return core_.Conclude(
        *session,
        core_.NoteExecutorFailure(*session, device, absl::StrCat("op ", op_name), work.status()));
  }
  const ArrayView view = Core::View(*op->output);
  // Registered at once, so that the next op may name it; the record's pin keeps it resident
  // until it has run, whatever the client does with the handle meanwhile.
  absl::Status added =
      session->AddArray(std::move(op->output), core_.options_.limits.max_arrays_per_session);
  {
    absl::MutexLock lock(&mu_);
    Record record{index,
                  std::string(op_name),
                  std::move(op->pins),
                  std::move(op->output_pin),
                  *std::move(work),
                  view.bytes};
    in_flight_bytes_ += record.bytes;
    if (holding_) {
      held_.push_back(std::move(record));
    } else {
      queued_.push_back(std::move(record));
      ++records_queued_;
    }
  }
  GPUKIT_RETURN_IF_ERROR(core_.Conclude(*session, std::move(added)));
  return view;
}

absl::Status OpPipeline::Free(uint64_t index, absl::string_view handle) {
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    status = CheckOpen();
  }
  if (status.ok()) status = core_.FreeArray(session_->id(), handle).status();
  if (!status.ok()) NoteRefusal(index, "free", status);
  return status;
}

std::optional<OpPipeline::Failure> OpPipeline::Sync() {
  uint64_t target = 0;
  std::vector<Record> batch;
  {
    absl::MutexLock lock(&mu_);
    HandOverLocked();
    target = records_queued_;
    batch.swap(queued_);
  }
  // What the completion thread has not taken is completed here, by the thread that waits
  // for it: the wait goes to the device at once and its answer comes back to this thread,
  // without the completion thread's wake-up and a hand-off back on the way (every op of a
  // synchronous client pays both otherwise).
  if (!batch.empty()) Complete(batch);
  // The answer a synchronous client waits for: spin through the ops' run rather than pay a
  // wake-up at its end, as the executor channel's waits do.
  auto completed = [this, target] { return completed_.load(std::memory_order_acquire) >= target; };
  SpinForAnswer(completed, /*long_work=*/true, kLongSpin);
  absl::MutexLock lock(&mu_);
  auto done = [this, target]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return records_completed_ >= target; };
  mu_.Await(absl::Condition(&done));
  std::optional<Failure> failure = std::move(first_failure_);
  first_failure_.reset();
  refused_.reset();
  return failure;
}

void OpPipeline::CompletionLoop() {
  std::vector<Record> batch;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      // Ends once closing with nothing queued and no op being queued (a slot taken).
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !queued_.empty() || (closing_ && in_flight_ == 0);
      };
      mu_.Await(absl::Condition(&ready));
      if (queued_.empty()) return;
      batch.swap(queued_);
    }
    Complete(batch);
  }
}

void OpPipeline::Complete(std::vector<Record>& batch) {
  CompleteBatch(batch);
  const int completed = static_cast<int>(batch.size());
  int64_t completed_bytes = 0;
  for (const Record& record : batch) completed_bytes += record.bytes;
  {
    // Drops the pins outside the lock: an array whose last reference goes frees its
    // memory, and those of the batch return it to the scheduler together.
    MemoryReturnBatch returns;
    batch.clear();
  }
  absl::MutexLock lock(&mu_);
  records_completed_ += completed;
  completed_.store(records_completed_, std::memory_order_release);
  in_flight_ -= completed;
  in_flight_bytes_ -= completed_bytes;
}

void OpPipeline::CompleteBatch(std::vector<Record>& batch) {
  // One wait for the batch: its ops share the session's stream, so once the last end event
  // completed every earlier one has. Each end event still carries its own op's error (the
  // first error since the event before it: a CPU kernel's error is not sticky), and each op
  // has its device time: WaitEventPairs gives both, in one call (on a device executor one
  // round trip for the batch, not one per op).
  Device& device = batch.back().work.device();
  std::vector<EventPair> pairs;
  pairs.reserve(batch.size());
  for (const Record& record : batch) {
    pairs.push_back({record.work.start_event(), record.work.end_event()});
  }
  std::vector<EventPairOutcome> outcomes = device.WaitEventPairs(pairs);
  std::vector<EnqueuedTask*> works;
  std::vector<absl::Status> statuses;
  std::vector<absl::Duration> device_times;
  works.reserve(batch.size());
  statuses.reserve(batch.size());
  device_times.reserve(batch.size());
  std::vector<Failure> failures;
  for (size_t i = 0; i < batch.size(); ++i) {
    Record& record = batch[i];
    absl::Status status = outcomes[i].status;
    if (!status.ok()) {
      status = core_.NoteExecutorFailure(*session_, device, absl::StrCat("op ", record.op),
                                         std::move(status));
      failures.push_back({record.index, record.op, status});
    }
    works.push_back(&record.work);
    statuses.push_back(std::move(status));
    device_times.push_back(absl::Nanoseconds(outcomes[i].elapsed_ns));
  }
  // One scheduler call and one destroy request for the batch, not one per op.
  EnqueuedTask::FinishAll(works, statuses, device_times);
  if (failures.empty()) return;
  absl::MutexLock lock(&mu_);
  for (const Failure& f : failures) NoteFailure(f.index, f.op, f.status);
}

}  // namespace gpukit
