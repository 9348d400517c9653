// RunningTask and EnqueuedTask: a task of the scheduler for the length of one piece of device
// work, from its admission to its Finish, as RAII owners, so that no error path leaves a
// task in the scheduler's running set.
//
// A request makes a RunningTask (submitted and admitted), then either runs its work and
// waits for it (Run: the unary calls), or only enqueues it (Enqueue: pipelined ops), getting
// an EnqueuedTask that a completion thread finishes once the work's end event completed.
//
//   GPUKIT_ASSIGN_OR_RETURN(RunningTask task,
//                           RunningTask::Create(scheduler, session, TaskKind::kOp, "add", {}));
//   // waits:
//   GPUKIT_RETURN_IF_ERROR(task.Run(device, stream, [&] { return device.RunOp(l, stream); }));
//   // an op, waiting (RunOp) or not (EnqueueOp: the op between its events in one call):
//   GPUKIT_RETURN_IF_ERROR(task.RunOp(device, stream, launch));
//   // other work, not waiting:
//   GPUKIT_ASSIGN_OR_RETURN(EnqueuedTask work, task.Enqueue(device, stream, enqueue));
//   ... later, on another thread:
//   absl::Status status = device.WaitEvent(work.end_event());
//   work.Finish(status, DeviceTimeBetween(device, work.start_event(), work.end_event()));
//
// An op that allocates its output starts with the output's reservation instead:
//
//   GPUKIT_ASSIGN_OR_RETURN(MemoryReservation r, task.StartWithMemory(bytes, &plan));
//   ... allocate the output ...
//   GPUKIT_RETURN_IF_ERROR(task.RunOp(device, stream, launch));  // not started again
//
// Cost: Enqueue is two RecordEvent calls and the work's own enqueue (messages to the
// device; no wait); EnqueueOp is one (Device::RunOpBetweenEvents); Run and RunOp add one
// WaitEvent and one EventElapsedNs.
//
// Thread safety: each object is used by one thread at a time (it may move between threads);
// the scheduler and the device are thread-safe.
#ifndef GPUKIT_DAEMON_CORE_RUNNING_TASK_H_
#define GPUKIT_DAEMON_CORE_RUNNING_TASK_H_

#include <functional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/scheduler/scheduler.h"
#include "daemon/session/session_manager.h"
#include "runtime/device.h"

namespace gpukit {

class EnqueuedTask;

// How a request's task waits in its partition's queue.
struct TaskOptions {
  int priority = 0;
  // How long it may wait, from its submission (TaskRequest::queue_timeout): the scheduler
  // resolves it against its clock. The services pass the smaller of the request's queue
  // timeout and the time left of its call, both durations.
  absl::Duration queue_timeout = absl::InfiniteDuration();
  // Polled while the task waits; true cancels it (the client went away).
  std::function<bool()> cancelled = [] { return false; };
  // Called once before the task waits in its queue (not when it is admitted at once): a
  // caller that holds work back sends it here, as the task may wait for that very work (a
  // pipeline's held batch, whose running ops hold the partition's slots). May be empty.
  std::function<void()> before_wait;
};

// A task submitted and admitted by Create, finished (Failed, unless it ran) when it goes
// out of scope.
class RunningTask {
 public:
  // Submits the task to the session's partition and waits for its admission. Errors: the
  // scheduler's (RESOURCE_EXHAUSTED QUEUE_FULL, DEADLINE_EXCEEDED, CANCELLED, NOT_FOUND
  // after the session ended).
  static absl::StatusOr<RunningTask> Create(Scheduler& scheduler, const Session& session,
                                            TaskKind kind, absl::string_view name,
                                            const TaskOptions& options);
  RunningTask(RunningTask&& other) noexcept
      : scheduler_(other.scheduler_),
        task_(std::move(other.task_)),
        higher_class_open_(other.higher_class_open_),
        started_(other.started_) {}
  RunningTask& operator=(RunningTask&&) = delete;
  ~RunningTask();

  // Ends the task as Failed with `status` (what the task history shows) before its work
  // ran, and returns `status`.
  absl::Status Fail(absl::Status status);

  // Starts the task with `bytes` reserved for its session, in one scheduler call
  // (Scheduler::StartWithMemory): for an op's output, allocated just before its work is
  // queued. Enqueue and EnqueueOp then do not start it again. On an error the task is not
  // started (a refusal leaves `plan` as ReserveMemory does).
  absl::StatusOr<MemoryReservation> StartWithMemory(int64_t bytes, ReclaimPlan* plan);

  // Starts the task and enqueues `enqueue` (work on `stream`) between two events, without
  // waiting. The returned EnqueuedTask owns the task and the events from then on. On an
  // error (the task was cancelled after admission, an event could not be recorded, or
  // `enqueue` failed) nothing is left queued under the task: it has ended as Failed with
  // that error, which is returned.
  absl::StatusOr<EnqueuedTask> Enqueue(Device& device, StreamId stream,
                                       const std::function<absl::Status()>& enqueue);
  // Enqueue of an op: Device::RunOpBetweenEvents (to a device executor one request, not
  // three).
  absl::StatusOr<EnqueuedTask> EnqueueOp(Device& device, StreamId stream, const OpLaunch& launch);

  // Enqueue, then waits for the work and finishes the task with its status and the device
  // time the events measured (also stored in `measured` when given).
  absl::Status Run(Device& device, StreamId stream, const std::function<absl::Status()>& enqueue,
                   absl::Duration* measured = nullptr);

  // Run of an op, through EnqueueOp.
  absl::Status RunOp(Device& device, StreamId stream, const OpLaunch& launch,
                     absl::Duration* measured = nullptr);

  // Scheduler::HigherClassSessionOpen for the task's session when it was submitted.
  bool higher_class_open() const { return higher_class_open_; }

 private:
  RunningTask(Scheduler& scheduler, TaskRef task) : scheduler_(scheduler), task_(std::move(task)) {}
  // Starts the task and queues its work with `queue`, which fills in the work's two events
  // (Enqueue and EnqueueOp).
  absl::StatusOr<EnqueuedTask> StartBetweenEvents(
      Device& device, const std::function<absl::Status(EventId*, EventId*)>& queue);

  Scheduler& scheduler_;
  TaskRef task_;
  bool higher_class_open_ = false;
  bool started_ = false;  // by StartWithMemory
};

// Work of a started task queued on a stream between two events. Finish ends the task and
// destroys the events; an EnqueuedTask dropped unfinished waits for its end event first
// (a safety net: owners finish it themselves). Move-only.
class EnqueuedTask {
 public:
  EnqueuedTask(EnqueuedTask&& other) noexcept;
  EnqueuedTask& operator=(EnqueuedTask&&) = delete;
  EnqueuedTask(const EnqueuedTask&) = delete;
  ~EnqueuedTask();

  Device& device() const { return *device_; }
  EventId start_event() const { return start_; }
  EventId end_event() const { return end_; }
  bool finished() const { return task_ == nullptr; }

  // Ends the task with the work's `status`, charging `device_time` (failed or not: a failed
  // task used the device too), and destroys both events. Call once the end event completed.
  void Finish(const absl::Status& status, absl::Duration device_time);
  // Finish for each of `works` (with statuses[i] and device_times[i]; those finished already
  // are skipped): one scheduler call and one DestroyEvents for each run of works of one
  // scheduler and device (a pipeline's completion batch is one run).
  static void FinishAll(absl::Span<EnqueuedTask* const> works,
                        absl::Span<const absl::Status> statuses,
                        absl::Span<const absl::Duration> device_times);
  // Waits for the end event, then finishes with the wait's status and the events' device
  // time (into `measured` when given); returns the status.
  absl::Status WaitAndFinish(absl::Duration* measured = nullptr);

 private:
  friend class RunningTask;
  EnqueuedTask(Scheduler& scheduler, TaskRef task, Device& device, EventId start, EventId end)
      : scheduler_(&scheduler),
        task_(std::move(task)),
        device_(&device),
        start_(start),
        end_(end) {}

  Scheduler* scheduler_;
  TaskRef task_;  // null once finished
  Device* device_;
  EventId start_;
  EventId end_;
};

// The device time between two completed events of one stream (Device::EventElapsedNs);
// zero when the device cannot tell (a restarted executor, a faulted device).
absl::Duration DeviceTimeBetween(Device& device, EventId start, EventId end);

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_CORE_RUNNING_TASK_H_
