#include "daemon/core/running_task.h"

#include <utility>
#include <vector>

#include "runtime/base/status_macros.h"

namespace gpukit {

absl::StatusOr<RunningTask> RunningTask::Create(Scheduler& scheduler, const Session& session,
                                                TaskKind kind, absl::string_view name,
                                                const TaskOptions& options) {
  TaskRequest request;
  request.kind = kind;
  request.name = std::string(name);
  request.priority = options.priority;
  request.queue_timeout = options.queue_timeout;
  SubmitNotes notes;
  GPUKIT_ASSIGN_OR_RETURN(TaskRef task, scheduler.Submit(session.ticket(), request, &notes));
  RunningTask running(scheduler, std::move(task));
  running.higher_class_open_ = notes.higher_class_open;
  if (!notes.admitted) {
    if (options.before_wait) options.before_wait();
    GPUKIT_RETURN_IF_ERROR(scheduler.AwaitAdmission(running.task_, options.cancelled));
  }
  return running;
}

RunningTask::~RunningTask() {
  if (task_ != nullptr) {
    scheduler_.Finish(task_, absl::AbortedError("the request failed before the work ran"),
                      absl::ZeroDuration());
  }
}

absl::Status RunningTask::Fail(absl::Status status) {
  if (task_ != nullptr) {
    scheduler_.Finish(task_, status, absl::ZeroDuration());
    task_.reset();
  }
  return status;
}

absl::StatusOr<MemoryReservation> RunningTask::StartWithMemory(int64_t bytes, ReclaimPlan* plan) {
  GPUKIT_ASSIGN_OR_RETURN(MemoryReservation reservation,
                          scheduler_.StartWithMemory(task_, bytes, plan));
  started_ = true;
  return reservation;
}

absl::StatusOr<EnqueuedTask> RunningTask::Enqueue(Device& device, StreamId stream,
                                                  const std::function<absl::Status()>& enqueue) {
  return StartBetweenEvents(device, [&](EventId* start, EventId* end) {
    return EnqueueBetweenEvents(device, stream, enqueue, start, end);
  });
}

absl::StatusOr<EnqueuedTask> RunningTask::EnqueueOp(Device& device, StreamId stream,
                                                    const OpLaunch& launch) {
  return StartBetweenEvents(device, [&](EventId* start, EventId* end) {
    return device.RunOpBetweenEvents(launch, stream, start, end);
  });
}

absl::StatusOr<EnqueuedTask> RunningTask::StartBetweenEvents(
    Device& device, const std::function<absl::Status(EventId*, EventId*)>& queue) {
  if (!started_) GPUKIT_RETURN_IF_ERROR(scheduler_.Start(task_));
  EventId start;
  EventId end;
  // On an error no event is left; the work is queued only when its end event failed, and
  // then the task ends now with that error (as a unary request always did).
  absl::Status status = queue(&start, &end);
  if (!status.ok()) return Fail(std::move(status));
  return EnqueuedTask(scheduler_, std::move(task_), device, start, end);
}

absl::Status RunningTask::Run(Device& device, StreamId stream,
                              const std::function<absl::Status()>& enqueue,
                              absl::Duration* measured) {
  // The events, the work and the wait go to a device executor as one message.
  DeviceBatch batch(device);
  GPUKIT_ASSIGN_OR_RETURN(EnqueuedTask work, Enqueue(device, stream, enqueue));
  return work.WaitAndFinish(measured);
}

absl::Status RunningTask::RunOp(Device& device, StreamId stream, const OpLaunch& launch,
                                absl::Duration* measured) {
  DeviceBatch batch(device);  // see Run
  GPUKIT_ASSIGN_OR_RETURN(EnqueuedTask work, EnqueueOp(device, stream, launch));
  return work.WaitAndFinish(measured);
}

EnqueuedTask::EnqueuedTask(EnqueuedTask&& other) noexcept
    : scheduler_(other.scheduler_),
      task_(std::move(other.task_)),
      device_(other.device_),
      start_(other.start_),
      end_(other.end_) {}

EnqueuedTask::~EnqueuedTask() {
  if (task_ != nullptr) WaitAndFinish().IgnoreError();
}

absl::Status EnqueuedTask::WaitAndFinish(absl::Duration* measured) {
  absl::Status status = device_->WaitEvent(end_);
  const absl::Duration device_time = DeviceTimeBetween(*device_, start_, end_);
  Finish(status, device_time);
  if (measured != nullptr) *measured = device_time;
  return status;
}

void EnqueuedTask::Finish(const absl::Status& status, absl::Duration device_time) {
  EnqueuedTask* self = this;
  FinishAll({&self, 1}, {&status, 1}, {&device_time, 1});
}

void EnqueuedTask::FinishAll(absl::Span<EnqueuedTask* const> works,
                             absl::Span<const absl::Status> statuses,
                             absl::Span<const absl::Duration> device_times) {
  std::vector<TaskEnd> ends;
  std::vector<EventId> events;
  ends.reserve(works.size());
  events.reserve(2 * works.size());
  // Works of one scheduler and device end together (a pipeline's always are); a work of
  // another scheduler or device ends what came before it first.
  Scheduler* scheduler = nullptr;
  Device* device = nullptr;
  auto end_group = [&] {
    if (ends.empty()) return;
    scheduler->Finish(ends);
    device->DestroyEvents(events).IgnoreError();
    ends.clear();
    events.clear();
  };
  for (size_t i = 0; i < works.size(); ++i) {
    EnqueuedTask& work = *works[i];
    if (work.task_ == nullptr) continue;
    if (work.scheduler_ != scheduler || work.device_ != device) {
      end_group();
      scheduler = work.scheduler_;
      device = work.device_;
    }
    ends.push_back(TaskEnd{std::move(work.task_), statuses[i], device_times[i]});  // finished
    events.push_back(work.start_);
    events.push_back(work.end_);
  }
  end_group();
}

absl::Duration DeviceTimeBetween(Device& device, EventId start, EventId end) {
  absl::StatusOr<int64_t> ns = device.EventElapsedNs(start, end);
  return ns.ok() ? absl::Nanoseconds(*ns) : absl::ZeroDuration();
}

}  // namespace gpukit
