#include "runtime/executor/executor_server.h"

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "google/protobuf/arena.h"
#include "runtime/base/shape.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/thread_name.h"
#include "runtime/executor/executor_protocol.h"
#include "runtime/executor/spin_wait.h"
#include "spdlog/spdlog.h"
#include <sys/mman.h>

namespace gpukit {
namespace {

class WorkQueue;

// What the thread serves: the reader's socket (-1 elsewhere) and a stream thread's queue (its
// enqueue or completion queue; null elsewhere). See OthersWaiting and Impl::NewStream.
thread_local int t_reader_socket = -1;
thread_local const WorkQueue* t_queue = nullptr;

// A datagram's arena: its first block holds a burst of a few ops.
const google::protobuf::ArenaOptions kDatagramArena = [] {
  google::protobuf::ArenaOptions options;
  options.start_block_size = 4096;
  options.max_block_size = 32768;
  return options;
}();

// Whether a request for anyone else waits on this thread: a message on the reader's socket,
// work pushed to this stream thread's queue. A wait spun for here stops at once then and goes
// to its stream's completion thread, so that one session's short wait does not hold up
// another's requests. (Work of other streams in the same message, not yet handed over, is not
// seen.)
bool OthersWaiting();

// A queue served by one thread, in order. `name` (at most 15 characters) names the thread,
// as top -H and /proc/PID/task/*/comm show it.
class WorkQueue {
 public:
  explicit WorkQueue(const char* name)
      : thread_([this, name] {
          NameThisThread(name);
          Run();
        }) {}
  // Runs what was pushed before and joins the thread; never on that thread (NewStream).
  ~WorkQueue() {
    Push(nullptr);
    thread_.join();
  }
  // Whether nothing is queued or running: what was pushed before has run.
  bool idle() const { return queued_.load(std::memory_order_acquire) == 0 && !running_.load(); }
  // Whether work is queued behind what runs now.
  bool has_queued() const { return queued_.load(std::memory_order_acquire) > 0; }
  // Whether the thread has slept (stopped spinning) for at least `pause`: work pushed now
  // waits for its wake-up, which after a long pause is slow (kPausedStream).
  bool asleep_for(std::chrono::nanoseconds pause) const {
    const int64_t since = asleep_since_ns_.load(std::memory_order_relaxed);
    return since != 0 && SteadyNowNs() - since >= pause.count();
  }
  // nullptr stops the thread after what was pushed before it.
  void Push(std::function<void()> work) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(work));
    queued_.fetch_add(1, std::memory_order_release);
  }

 private:
  void Run() {
    t_queue = this;
    for (;;) {
      std::function<void()> work;
      const bool woken = SpinUntil([this] { return queued_.load(std::memory_order_acquire) > 0; });
      {
        absl::MutexLock lock(&mu_);
        if (!woken) asleep_since_ns_.store(SteadyNowNs(), std::memory_order_relaxed);
        mu_.Await(absl::Condition(
            +[](std::deque<std::function<void()>>* q) { return !q->empty(); }, &queue_));
        asleep_since_ns_.store(0, std::memory_order_relaxed);
        work = std::move(queue_.front());
        queue_.pop_front();
        // Running before no longer queued, so idle() never sees neither while work is taken.
        running_.store(true);
        queued_.fetch_sub(1, std::memory_order_release);
      }
      if (!work) return;
      work();
      running_.store(false);
    }
  }

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> queued_{0};  // queue_'s size, read without the lock while spinning
  std::atomic<bool> running_{false};
  std::atomic<int64_t> asleep_since_ns_{0};  // when the thread went to sleep; 0 while awake
  std::thread thread_;
};

bool OthersWaiting() {
  if (t_queue != nullptr) return t_queue->has_queued();
  if (t_reader_socket < 0) return false;
  pollfd fd{t_reader_socket, POLLIN, 0};
  return ::poll(&fd, 1, 0) > 0;
}

// Work of a stream whose last waited-for work took less device time than this is waited for
// by spinning (up to SpinTime()) where it was queued, instead of on the completion thread.
constexpr int64_t kShortWorkNs = 50'000;

// Whether stream work runs on the reading thread when its stream is idle: where the device
// only queues work (a GPU); not where enqueueing runs it (the CPU device runs an idle
// stream's work on the caller's thread, which would hold the reader for the op's whole
// time). GPUKIT_EXECUTOR_INLINE=1 or 0 decides instead (tests run the CPU device so).
bool RunsStreamWorkInline(const Device& device) {
  if (const char* text = std::getenv("GPUKIT_EXECUTOR_INLINE")) return std::string(text) == "1";
  return device.properties().backend != BackendKind::kCpu;
}

// How long a stream's thread must have slept for the reader to run the stream's work itself
// even while other messages wait (RunOrQueue): a thread woken after such a pause took 70-250
// us to start on the GPU host, more than the work takes on the reader. A shorter sleep (a
// busy session's thread between two ops) wakes quickly, and the reader stays free for the
// other sessions' messages. One stream at a time cuts in so, for at most kPausedStream from
// its first cut-in (the rest of its burst, which would otherwise wait for the thread's
// wake-up), and another may once none has for kPausedStream: sessions that pause between
// their ops cannot keep the reader, and every message behind it, busy with their work.
constexpr std::chrono::milliseconds kPausedStream{1};

// The most stream requests of one message the reading thread runs itself: a synchronous op's
// (its events, the op, the wait, the previous op's event destroys). A longer run (a
// pipelined burst) goes to the stream's thread, so the reader reads the next burst while
// this one is enqueued. An op that carries its events counts as the three requests it
// replaces: counted as one, bursts of up to 8 ops ran on the reader, which took one
// session's pipeline 10-15% faster and 8 sessions' 10-18% slower (docs/benchmarks.md).
constexpr size_t kMostInlineWorks = 8;

// Deferred events. An event recorded on the device costs its stream about as much as a small
// op (the device's own ceiling for chains of small adds, 2 threads: 151-158k ops/s with an
// event after each op, 276-280k with one after every 16th; docs/benchmarks.md). With
// deferral on, an op's end event that more of the stream's work follows at once gets no
// device event of its own: it waits for the next event recorded on the stream, at most
// kMostDeferredWorks works later or when the stream's queue runs dry, and then shares it
// (DeferredSpan). What it answers:
// - a wait or query on it records that event at once (no work between, so the wait ends where
//   it would have), and otherwise ends with the later event: a little later than its own work;
// - its error: the error enqueueing returned since the event before it, as before (an error
//   of the device's work shows at a later event on a device that reports it there, the CPU
//   device, where it would reach every op of the span; a GPU's kernel faults are sticky
//   and fail every later wait anyway);
// - its device time: the span's time shared evenly among the span's works, which are all ops
//   that touch at most kSmallOpElements elements (a larger op records its own end event, so
//   that what a large op costs is measured, not averaged).
// On for GPUs unless GPUKIT_EXECUTOR_DEFER_EVENTS=0 (or off, false); =all defers on every
// device (tests of the CPU twin, where a failing kernel's error reaches every op of its span,
// and a fault's culprit is any of the span's events). On the GPU host, under 8 pipelined
// sessions, each stream's thread was 96% busy with an event per op and 83-89% with
// deferral, and 8 C++ chains were not slower with it beyond the noise (docs/benchmarks.md,
// "Deferred end events, on by default for GPUs").
bool DefersEvents(const Device& device) {
  const char* text = std::getenv("GPUKIT_EXECUTOR_DEFER_EVENTS");
  const std::string setting = text != nullptr ? text : "";
  if (setting == "all") return true;
  if (setting == "0" || setting == "off" || setting == "false") return false;
  if (!setting.empty() && setting != "1" && setting != "on" && setting != "true") {
    spdlog::warn(
        "executor: GPUKIT_EXECUTOR_DEFER_EVENTS=\"{}\" is not 0, off, false, 1, on, true or "
        "all; deferring on GPUs, as by default",
        setting);
  }
  return device.properties().backend != BackendKind::kCpu;
}
constexpr uint64_t kMostDeferredWorks = 16;
constexpr int64_t kSmallOpElements = int64_t{1} << 16;

// Whether `launch` touches at most kSmallOpElements elements in every array it reads or
// writes.
bool IsSmallOp(const OpLaunch& launch) {
  auto small = [](const TensorDesc& desc) {
    absl::StatusOr<int64_t> elements = ElementCount(desc.shape);
    return elements.ok() && *elements <= kSmallOpElements;
  };
  if (!small(launch.plan.output)) return false;
  for (const OpOperand& input : launch.inputs) {
    if (!input.is_scalar && !small(input.desc)) return false;
  }
  return true;
}

class DeviceEventOwner;
struct EventState;

// The device events around a run of deferred events: `lower`, recorded before the run (the
// stream's count of works then: lower_works), and `upper`, recorded after it (upper_works).
// Set by the enqueue thread: lower at creation, upper when the run ends; read by others once
// a deferred event of the run is recorded (EventState::recorded, under the stream's error_mu).
struct DeferredSpan {
  std::shared_ptr<DeviceEventOwner> lower;  // held for the span's device time
  uint64_t lower_works = 0;
  EventId upper;
  uint64_t upper_works = 0;
  // The device time from lower to upper, in ns, once asked and known (-1 before).
  std::atomic<int64_t> elapsed_ns{-1};
};

// One of gpukitd's streams: the device's stream, a thread that enqueues its work in order and
// a thread that waits for its events in order.
struct StreamState {
  StreamId device_stream;
  absl::Status create_error;  // the stream could not be created: all its work fails so
  // The first error enqueueing returned since the last RecordEvent: written by the enqueue
  // thread, read there and by a fault's report, under error_mu (as the events' are).
  absl::Mutex error_mu;
  absl::Status enqueue_error ABSL_GUARDED_BY(error_mu);
  // The device time of the stream's last waited-for work, in ns (-1 before any): a wait for
  // work of a stream whose work is short is spun for rather than handed to the completion
  // thread (see kShortWorkNs).
  std::atomic<int64_t> last_work_ns{-1};
  // The last event recorded on the stream, and its id (enqueue thread only).
  std::weak_ptr<EventState> last_event;
  uint64_t last_event_id = 0;
  // Whether work was enqueued since last_event (enqueue thread only): while not, the next
  // event marks the same point of the stream and shares last_event's device event.
  bool work_since_last_event = true;
  // Deferred events (enqueue thread only; see DefersEvents). `works` counts the works
  // enqueued; the last device event recorded (its owner) and the count then; whether every
  // work since was a small op; the events waiting for the next device event, in order; and
  // how many works of the item being run follow the one running (RunStreamWorks).
  uint64_t works = 0;
  std::shared_ptr<DeviceEventOwner> last_device_event;
  uint64_t last_device_event_works = 0;
  bool small_since_device_event = true;
  std::shared_ptr<DeferredSpan> open_span;
  std::vector<std::shared_ptr<EventState>> deferred;
  size_t works_following = 0;
  // Whether more work waits for this enqueue thread behind what it runs now (enqueue thread
  // only): later works of the item being run, or items pushed meanwhile.
  bool work_follows() const { return works_following > 0 || enqueues.has_queued(); }
  // Declared last: destroyed (joined) first, while the fields above are still there.
  WorkQueue completions{"gk-exec-done"};
  WorkQueue enqueues{"gk-exec-enqueue"};
};

// A device event, destroyed with the last of gpukitd's events that share it.
class DeviceEventOwner {
 public:
  DeviceEventOwner(Device& device, EventId event) : device_(device), event_(event) {}
  DeviceEventOwner(const DeviceEventOwner&) = delete;
  DeviceEventOwner& operator=(const DeviceEventOwner&) = delete;
  ~DeviceEventOwner() { device_.DestroyEvent(event_).IgnoreError(); }
  EventId event() const { return event_; }

 private:
  Device& device_;
  const EventId event_;
};

struct EventState {
  std::shared_ptr<StreamState> stream;
  uint64_t stream_id = 0;  // gpukitd's
  EventId device_event;    // set by the enqueue thread; 0 once destroyed
  // Holds device_event. A pipelined op's start event follows the previous op's end event
  // with no work between: it shares that event's device event instead of recording one (a
  // driver call and a destroy fewer per op; the device time between them is zero either way).
  std::shared_ptr<DeviceEventOwner> owner;
  bool shared = false;         // device_event is the previous event's
  absl::Status enqueue_error;  // what enqueueing the work before it returned
  // Set by the enqueue thread once it has recorded the event (or failed to). It, and
  // device_event and enqueue_error, are written under the stream's error_mu, so the reading
  // thread may look at them there (ElapsedNs with pairs).
  bool recorded = false;
  // The event recorded before it on the stream (the device time between the two goes back
  // with the wait's reply).
  std::weak_ptr<EventState> previous;
  uint64_t previous_id = 0;
  // A deferred event (see DefersEvents): its run, and the stream's count of works at it. Its
  // device_event is the run's upper event once recorded. Set by the enqueue thread, span
  // and device_event under error_mu.
  std::shared_ptr<DeferredSpan> span;
  uint64_t works = 0;
  bool destroyed = false;  // under error_mu: a deferred event destroyed before its recording
};

}  // namespace

class ExecutorServer::Impl {
 public:
  Impl(Device& device, ScopedFd socket, const ExecutorServerOptions& options)
      : device_(device),
        socket_(std::move(socket)),
        most_views_(options.most_views),
        inline_work_(RunsStreamWorkInline(device)),
        defer_events_(DefersEvents(device)) {}

  ~Impl() {
    // Streams first: their threads use the tables.
    absl::flat_hash_map<uint64_t, std::shared_ptr<StreamState>> streams;
    absl::flat_hash_map<uint64_t, std::shared_ptr<EventState>> events;
    {
      absl::MutexLock lock(&mu_);
      streams.swap(streams_);
    }
    {
      absl::MutexLock lock(&events_mu_);
      events.swap(events_);
    }
    events.clear();
    streams.clear();
    // Work still queued holds events, and through them their streams, and uses this object
    // and the device: each stream runs out its queues before it is deleted (NewStream), and
    // this waits until every one is.
    absl::MutexLock lock(&alive_mu_);
    alive_mu_.Await(absl::Condition(
        +[](int* alive) { return *alive == 0; }, &streams_alive_));
  }

  absl::Status Serve();
  void SendHello();

  // A new stream's state, counted in streams_alive_ until it is deleted. Its last reference
  // may go on one of its own threads (the destroy of its last event, after the stream was
  // destroyed, runs there): it is then deleted on a thread of its own, as a thread cannot
  // join itself.
  std::shared_ptr<StreamState> NewStream();

 private:
  void Handle(executor::Request& request, ScopedFd fd);
  void Reply(uint64_t seq, const absl::Status& status, int64_t value = 0, uint64_t elapsed_from = 0,
             int64_t elapsed_ns = 0);
  // Answers an ElapsedNs with pairs without waiting for any stream (on the completion thread
  // of its first pair's stream when idle, else the reader): each pair's end event's status
  // (EndEventStatus) and, where OK, its device time; one device call for a pair that went
  // well (Device::ElapsedNsIfCompleted).
  void ReplyPairsElapsed(uint64_t seq, const executor::ElapsedNs& request) {
    ReplyWithPairs(seq, 0, 0, request.pairs());
  }
  // An OK reply (a wait's `elapsed_from` and `elapsed_ns`) that carries each of `pairs`'
  // outcomes, as ReplyPairsElapsed describes.
  void ReplyWithPairs(uint64_t seq, uint64_t elapsed_from, int64_t elapsed_ns,
                      const google::protobuf::RepeatedPtrField<executor::EventPair>& pairs);
  // What a WaitEvent of gpukitd's completed event `id` answers (its enqueue_error, else the
  // device's WaitEvent), without blocking: FAILED_PRECONDITION for an event whose RecordEvent
  // its stream has not reached or whose work has not run, NOT_FOUND for an unknown or
  // destroyed one.
  absl::Status EndEventStatus(uint64_t id, const EventState* event);
  // Where an event lies on its stream: its device event (and whether it is shared with the
  // event before it), and for a deferred event its span and the stream's count of works at
  // it (the device time up to it is then the span's lower event's plus its share).
  struct EventPoint {
    EventId device_event;
    bool shared = false;
    std::shared_ptr<DeferredSpan> span;
    uint64_t works = 0;
  };
  // Where gpukitd's event `id` (`event`, null when unknown) lies, once its stream's enqueue
  // thread has recorded it: FAILED_PRECONDITION before, NOT_FOUND for an unknown or destroyed
  // event, the error of its recording when that failed. `as_end`: also the error of the work
  // before it (EndEventStatus's answer as far as the executor knows it, without asking the
  // device).
  absl::StatusOr<EventPoint> RecordedEvent(uint64_t id, const EventState* event,
                                           bool as_end = false);
  // Where `event` lies now, as its stream's enqueue thread left it: a deferred one that is not
  // recorded yet is FAILED_PRECONDITION, one destroyed while deferred NOT_FOUND; another
  // answers its device event as it is (the device's own calls judge it).
  static absl::StatusOr<EventPoint> CurrentPoint(const EventState& event);
  // The device's wait for `event`'s device event, as it would be for an event of its own: a
  // shared one answers OK after the earlier work failed (not the earlier work's error).
  absl::Status WaitDeviceEvent(EventId device_event, bool shared);
  // A wait failed: if the device took a sticky fault, says so to gpukitd (naming the wait's
  // event, definitely the culprit when its enqueue failed with the fault) and ends the
  // process. Returns when the device is healthy.
  void CheckFault(const absl::Status& failure, uint64_t stream, uint64_t event);
  // Lets every stream's enqueue thread but `stream`'s take what was pushed to it before, for
  // up to a second (one that is itself reporting the fault never gets there): a device that
  // runs work as it is enqueued (the CPU backend) fails the culprit's work with the fault
  // itself, but the event that carries it may still be queued when another stream's wait
  // sees the fault. Returns the streams, to be kept (the process ends without their
  // teardown, which would join threads that may be blocked here).
  std::vector<std::shared_ptr<StreamState>> DrainOtherStreams(uint64_t stream)
      ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<BufferId> FindBuffer(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // The device buffer that stream work names: by its place when it has one (its view, made
  // now if there is none yet), else by id (FindBuffer). The caller holds views_use_mu_
  // shared until the device has enqueued the work (a device resolves a buffer there).
  absl::StatusOr<BufferId> BufferOf(uint64_t id, const executor::Place& place)
      ABSL_SHARED_LOCKS_REQUIRED(views_use_mu_) ABSL_LOCKS_EXCLUDED(views_mu_);
  // Drops the views of segment `segment`, being unmapped: no work names its places then
  // (gpukitd unmaps a segment once no buffer lives in it, and frees a buffer only after the
  // work that uses it). With 0, drops every view once no work uses any.
  void DropViews(uint64_t segment) ABSL_LOCKS_EXCLUDED(views_use_mu_, views_mu_);
  absl::StatusOr<char*> FindHost(const executor::HostRange& range, int64_t bytes)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::shared_ptr<StreamState> FindStream(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  std::shared_ptr<EventState> FindEvent(uint64_t id) ABSL_LOCKS_EXCLUDED(events_mu_);

  // Stream work, on the stream's enqueue thread.
  absl::Status EnqueueCopy(const executor::Copy& copy, const StreamState& stream);
  absl::Status EnqueueLaunch(const executor::Launch& launch, const StreamState& stream);

  // A stream's work of one message, and how many requests' worth it is (an op that carries
  // its events counts as the three requests it replaces).
  struct StreamWorks {
    std::vector<std::function<void()>> works;
    size_t weight = 0;
  };
  // Queues `work` (`weight` requests' worth) on the stream's enqueue thread; inside a Batch,
  // at the batch's end, with the rest of the stream's work of the batch as one item (its
  // thread wakes once).
  void PushWork(const std::shared_ptr<StreamState>& stream, std::function<void()> work,
                size_t weight = 1);
  void PushBatchWork();
  // Runs `works` on the reading thread at once when inline_work_, they weigh at most
  // kMostInlineWorks, the stream's enqueue thread has nothing queued or running (it is the
  // reading thread that queues there, so the stream's order holds) and either no other
  // message waits to be read or that thread has slept for kPausedStream and the stream may
  // cut in (PausedStreamCutsIn); else queues them there as one item. A GPU only
  // queues the work, so the reader is not held long; the hand-off to the stream's thread is saved.
  // With messages waiting (many sessions' streams), the reader is what they all wait for, unless
  // the stream's thread has slept long: its wake-up after a pause costs more than the work does on
  // the reader (docs/benchmarks.md, "A burst's first op: the wake-ups after a pause").
  void RunOrQueue(const std::shared_ptr<StreamState>& stream, StreamWorks works);

  // Registers gpukitd's event `id` of stream `stream_id` (`stream`, null when unknown: the
  // event then carries NOT_FOUND as its error).
  std::shared_ptr<EventState> NewEvent(const std::shared_ptr<StreamState>& stream,
                                       uint64_t stream_id, uint64_t id)
      ABSL_LOCKS_EXCLUDED(events_mu_);
  // Records `event` (gpukitd's `id`) at this point of stream `s`: on its enqueue thread, in
  // its order. It shares the previous event's device event when no work came between; with
  // `may_defer` (an op's end event), it may wait for a later one (DefersEvents).
  void RecordOnStream(StreamState* s, const std::shared_ptr<EventState>& event, uint64_t id,
                      bool may_defer = false);
  // Records a device event on `s` for the events deferred there, if any (enqueue thread).
  void RecordDeferred(StreamState* s);
  // Records a device event on `s` (its owner in `owner`), the stream's last from now on.
  absl::StatusOr<EventId> RecordDeviceEvent(StreamState* s,
                                            std::shared_ptr<DeviceEventOwner>& owner);
  // The events deferred on `s` end with the device event `recorded` (its owner `owner`), or
  // carry its error.
  void EndSpan(StreamState* s, const absl::StatusOr<EventId>& recorded,
               const std::shared_ptr<DeviceEventOwner>& owner);
  // Runs a stream's work item (`works`, in order) on the thread that runs the stream's work,
  // then records what was deferred unless more work is queued.
  void RunStreamWorks(StreamState* s, const std::vector<std::function<void()>>& works);
  // The device time from `start` to `end`: one device call for two events recorded on the
  // device, or within one deferred span once its time is known. With `if_completed`,
  // Device::ElapsedNsIfCompleted's (it fails for work not done), else
  // Device::EventElapsedNs's.
  absl::StatusOr<int64_t> ElapsedBetween(const EventPoint& start, const EventPoint& end,
                                         bool if_completed);
  // ElapsedBetween of two events where they lie now (CurrentPoint), by EventElapsedNs.
  absl::StatusOr<int64_t> ElapsedBetweenNow(const EventState& start, const EventState& end) {
    GPUKIT_ASSIGN_OR_RETURN(const EventPoint from, CurrentPoint(start));
    GPUKIT_ASSIGN_OR_RETURN(const EventPoint to, CurrentPoint(end));
    return ElapsedBetween(from, to, /*if_completed=*/false);
  }
  // Destroys gpukitd's events (each after the work queued before it on its stream; the
  // device event once no later event shares it); NOT_FOUND (replied, with `seq`) names an
  // unknown one, the others are destroyed all the same.
  void DestroyEvents(uint64_t seq, const executor::DestroyEvent& destroy);

  absl::Status MapHostSegment(const executor::MapHostSegment& map, ScopedFd fd);
  absl::Status UnmapHostSegment(uint64_t key);
  absl::Status LoadModule(const executor::LoadModule& load, ScopedFd fd);

  Device& device_;
  const ScopedFd socket_;

  struct HostSegment {
    char* data = nullptr;
    int64_t bytes = 0;
    bool registered = false;
  };

  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, BufferId> buffers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, HostSegment> host_segments_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::shared_ptr<StreamState>> streams_ ABSL_GUARDED_BY(mu_);
  // The events, under a lock of their own: each op adds two and drops two, and every device
  // time asked looks up three, on the reader, the stream threads and the completion threads,
  // which take mu_ for buffers.
  absl::Mutex events_mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<EventState>> events_ ABSL_GUARDED_BY(events_mu_);
  absl::flat_hash_map<uint64_t, ModuleId> modules_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, FunctionId> functions_ ABSL_GUARDED_BY(mu_);
  // The views of gpukitd's device pool, by place (segment, offset, bytes): device buffers over
  // those ranges of mapped segments, made as work names them and kept, since the pool hands
  // the same places out again and again; dropped with their segment (UnmapSegment), or all
  // at once past most_views_. A view is only a range: dropping one frees no memory. Work that
  // names places holds views_use_mu_ shared from their lookup until its enqueue returns;
  // every view is dropped under it held exclusively, so no work is between the two then (a
  // segment's views need not wait: see DropViews).
  const size_t most_views_;
  absl::Mutex views_use_mu_;
  absl::Mutex views_mu_ ABSL_ACQUIRED_AFTER(views_use_mu_);
  absl::flat_hash_map<std::tuple<uint64_t, int64_t, int64_t>, BufferId> views_
      ABSL_GUARDED_BY(views_mu_);
  std::atomic<bool> views_full_{false};
  // Whether stream work runs on the reading thread when its stream is idle (RunOrQueue).
  const bool inline_work_;
  // Whether an op's end event may wait for a later device event (DefersEvents).
  const bool defer_events_;
  // Waits queued to a completion thread whose replies have not gone yet.
  std::atomic<int> waits_owed_{0};
  // The reading thread's polling: while waits are owed, and ExecutorReaderPollTime() after
  // the channel's last traffic either way.
  RecentActivity activity_{ExecutorReaderPollTime(), &waits_owed_};
  // Whether `stream`'s work runs on the reader although other messages wait (RunOrQueue):
  // its thread has slept for kPausedStream, and either it cut in less than kPausedStream ago
  // for the first time in this run of cut-ins, or no stream has cut in for kPausedStream
  // (reader only).
  bool PausedStreamCutsIn(const StreamState& stream) {
    if (!stream.enqueues.asleep_for(kPausedStream)) return false;
    const int64_t now = SteadyNowNs();
    const int64_t window = std::chrono::nanoseconds(kPausedStream).count();
    if (&stream == last_cut_in_) {
      if (now - cut_in_since_ns_ < window) {
        last_cut_in_ns_ = now;
        return true;
      }
      last_cut_in_ = nullptr;  // its run is over: its work goes to its thread now
      return false;
    }
    if (now - last_cut_in_ns_ < window) return false;
    last_cut_in_ = &stream;
    cut_in_since_ns_ = now;
    last_cut_in_ns_ = now;
    return true;
  }

  // The reading thread's own: whether it is handling a Batch, and the batch's stream work.
  bool in_batch_ = false;
  // PausedStreamCutsIn's: the stream of the current run of cut-ins (compared, never
  // dereferenced: it may be gone), when that run began, and the last cut-in.
  const StreamState* last_cut_in_ = nullptr;
  int64_t cut_in_since_ns_ = 0;
  int64_t last_cut_in_ns_ = 0;
  // The arena of the datagram being handled (reader only). Keep(request), for a request of
  // it, shares its ownership: what a queued work item holds stays valid until it is done.
  std::shared_ptr<google::protobuf::Arena> datagram_;
  std::shared_ptr<const executor::Request> Keep(const executor::Request& request) const {
    return std::shared_ptr<const executor::Request>(datagram_, &request);
  }
  std::vector<std::pair<std::shared_ptr<StreamState>, StreamWorks>> batch_work_;
  absl::Mutex alive_mu_;
  int streams_alive_ ABSL_GUARDED_BY(alive_mu_) = 0;
  // Held by the thread that reports a fault until the process ends; set with it.
  absl::Mutex fault_mu_;
  std::atomic<bool> faulted_{false};
};

ExecutorServer::ExecutorServer(Device& device, ScopedFd socket, ExecutorServerOptions options)
    : impl_(std::make_unique<Impl>(device, std::move(socket), options)) {}

ExecutorServer::~ExecutorServer() = default;

absl::Status ExecutorServer::Serve() { return impl_->Serve(); }

void ExecutorServer::SendStartFailure(int socket, const absl::Status& status) {
  executor::FromExecutor message;
  message.mutable_hello()->set_error_code(static_cast<int32_t>(status.code()));
  message.mutable_hello()->set_error(std::string(status.message()));
  SendExecutorMessage(socket, message).IgnoreError();
}

std::shared_ptr<StreamState> ExecutorServer::Impl::NewStream() {
  {
    absl::MutexLock lock(&alive_mu_);
    ++streams_alive_;
  }
  return std::shared_ptr<StreamState>(new StreamState(), [this](StreamState* s) {
    auto remove = [this, s] {
      delete s;
      absl::MutexLock lock(&alive_mu_);
      --streams_alive_;
    };
    if (t_queue == &s->enqueues || t_queue == &s->completions) {
      std::thread(remove).detach();
    } else {
      remove();
    }
  });
}

void ExecutorServer::Impl::SendHello() {
  executor::FromExecutor message;
  executor::Hello& hello = *message.mutable_hello();
  const DeviceProperties& p = device_.properties();
  hello.set_index(p.index);
  hello.set_name(p.name);
  hello.set_backend(static_cast<int32_t>(p.backend));
  hello.set_memory_total_bytes(p.memory_total_bytes);
  hello.set_kernel_arch(p.kernel_arch);
  for (int i = 0; i < 3; ++i) {
    hello.add_max_grid_dim(p.max_grid_dim[i]);
    hello.add_max_block_dim(p.max_block_dim[i]);
  }
  hello.set_max_threads_per_block(p.max_threads_per_block);
  hello.set_max_shared_memory_per_block_optin_bytes(p.max_shared_memory_per_block_optin_bytes);
  for (const OpDef& op : OpRegistry::Builtin().ops()) {
    if (device_.SupportsOp(op.name)) hello.add_supported_ops(op.name);
  }
  SendExecutorMessage(socket_.get(), message).IgnoreError();
}

absl::Status ExecutorServer::Impl::Serve() {
  t_reader_socket = socket_.get();
  SendHello();
  bool active = false;
  for (;;) {
    // Each datagram is parsed into an arena of its own (a few blocks, not an allocation per
    // message that a stream thread would free), which the work holding its requests keeps.
    datagram_ = std::make_shared<google::protobuf::Arena>(kDatagramArena);
    executor::Request& request =
        *google::protobuf::Arena::CreateMessage<executor::Request>(datagram_.get());
    absl::StatusOr<ScopedFd> fd = ReceiveExecutorMessage(socket_.get(), request, &activity_);
    activity_.Touch();
    if (!fd.ok()) {
      // gpukitd closed the channel (it exits, or it let this executor go): done.
      if (fd.status().code() == absl::StatusCode::kUnavailable) return absl::OkStatus();
      return fd.status();
    }
    if (!active) {
      // A standby serves nothing until it is promoted.
      if (request.body_case() != executor::Request::kActivate) {
        return absl::InternalError("the executor was sent work before Activate");
      }
      active = true;
      continue;
    }
    Handle(request, *std::move(fd));
    datagram_.reset();
  }
}

void ExecutorServer::Impl::Reply(uint64_t seq, const absl::Status& status, int64_t value,
                                 uint64_t elapsed_from, int64_t elapsed_ns) {
  if (seq == 0) {
    if (!status.ok()) spdlog::debug("executor: {}", std::string(status.message()));
    return;
  }
  // After a fault only the Fault goes out: gpukitd fails what waited, classified.
  if (faulted_.load()) return;
  executor::FromExecutor message;
  executor::Reply& reply = *message.mutable_reply();
  reply.set_seq(seq);
  SetReplyStatus(status, reply);
  reply.set_int_value(value);
  reply.set_elapsed_from(elapsed_from);
  reply.set_elapsed_ns(elapsed_ns);
  SendExecutorMessage(socket_.get(), message).IgnoreError();
  activity_.Touch();
}

absl::StatusOr<ExecutorServer::Impl::EventPoint> ExecutorServer::Impl::RecordedEvent(
    uint64_t id, const EventState* event, bool as_end) {
  if (event == nullptr) return absl::NotFoundError(absl::StrCat("executor: no event ", id));
  if (event->stream == nullptr) return event->enqueue_error;  // recorded on no stream
  absl::MutexLock lock(&event->stream->error_mu);
  if (!event->recorded) {
    return absl::FailedPreconditionError(absl::StrCat("event ", id, " has not completed"));
  }
  // Recorded fine after failed work, the event carries that work's error all the same.
  if (as_end && !event->enqueue_error.ok()) return event->enqueue_error;
  if (event->device_event.value == 0) {
    if (!event->enqueue_error.ok()) return event->enqueue_error;
    return absl::NotFoundError(absl::StrCat("executor: event ", id, " was destroyed"));
  }
  return EventPoint{event->device_event, event->shared, event->span, event->works};
}

absl::StatusOr<ExecutorServer::Impl::EventPoint> ExecutorServer::Impl::CurrentPoint(
    const EventState& event) {
  absl::MutexLock lock(&event.stream->error_mu);
  if (event.span != nullptr && !event.recorded) {
    return absl::FailedPreconditionError("an event has not completed");
  }
  if (event.span != nullptr && event.destroyed) {
    return absl::NotFoundError("executor: an event was destroyed");
  }
  return EventPoint{event.device_event, event.shared, event.span, event.works};
}

absl::Status ExecutorServer::Impl::EndEventStatus(uint64_t id, const EventState* event) {
  GPUKIT_ASSIGN_OR_RETURN(EventPoint end, RecordedEvent(id, event, /*as_end=*/true));
  // Nothing here may block (the completion thread's next wait, or the reader, would wait):
  // only a completed event is waited for (at once).
  GPUKIT_ASSIGN_OR_RETURN(bool done, device_.QueryEvent(end.device_event));
  if (!done) return absl::FailedPreconditionError(absl::StrCat("event ", id, " has not completed"));
  return WaitDeviceEvent(end.device_event, end.shared);
}

absl::Status ExecutorServer::Impl::WaitDeviceEvent(EventId device_event, bool shared) {
  absl::Status status = device_.WaitEvent(device_event);
  if (status.ok() || !shared || device_event.value == 0) return status;
  // The device event is the previous event's, and its error (a device that reports the work
  // before an event with it: the CPU device) that work's. No work lies before this one: it
  // has only what a fresh event would have, the device's health, said to be an earlier
  // fault's (not the fault itself, so it is not taken for the culprit).
  const absl::Status health = device_.CheckHealth();
  if (health.ok()) return absl::OkStatus();
  return absl::Status(health.code(),
                      absl::StrCat("the device faulted before this event: ", health.message()));
}

void ExecutorServer::Impl::ReplyWithPairs(
    uint64_t seq, uint64_t elapsed_from, int64_t elapsed_ns,
    const google::protobuf::RepeatedPtrField<executor::EventPair>& pairs) {
  if (seq == 0 || faulted_.load()) return;  // see Reply
  executor::FromExecutor message;
  executor::Reply& reply = *message.mutable_reply();
  reply.set_seq(seq);
  reply.set_elapsed_from(elapsed_from);
  reply.set_elapsed_ns(elapsed_ns);
  for (const executor::EventPair& pair : pairs) {
    int64_t pair_ns = 0;
    absl::Status status = [&]() -> absl::Status {
      // Usually both events are recorded with no error before the end: the device answers
      // in one call (a GPU's cuEventElapsedTime; one per deferred span).
      std::shared_ptr<EventState> end_event = FindEvent(pair.end());
      absl::StatusOr<EventPoint> start = RecordedEvent(pair.start(), FindEvent(pair.start()).get());
      absl::StatusOr<EventPoint> end = RecordedEvent(pair.end(), end_event.get(), /*as_end=*/true);
      if (start.ok() && end.ok()) {
        absl::StatusOr<int64_t> ns = ElapsedBetween(*start, *end, true);
        if (ns.ok()) {
          pair_ns = *ns;
          return absl::OkStatus();
        }
      }
      // Else step by step, so that the pair gets the end event's own words.
      GPUKIT_RETURN_IF_ERROR(EndEventStatus(pair.end(), end_event.get()));
      GPUKIT_RETURN_IF_ERROR(start.status());
      GPUKIT_ASSIGN_OR_RETURN(EventPoint recorded_end, RecordedEvent(pair.end(), end_event.get()));
      GPUKIT_ASSIGN_OR_RETURN(pair_ns, ElapsedBetween(*start, recorded_end, false));
      return absl::OkStatus();
    }();
    AddPairOutcome(status, pair_ns, reply);
  }
  SetReplyStatus(absl::OkStatus(), reply);
  // Many long errors could outgrow a datagram (gpukitd asks <= 512 pairs at once): then each
  // message is cut to an even share of the room.
  if (message.ByteSizeLong() > kMaxExecutorMessageBytes && reply.pair_message_size() > 0) {
    const size_t share =
        (kMaxExecutorMessageBytes - 1024) / static_cast<size_t>(reply.pair_message_size());
    const size_t keep = share > 32 ? share - 32 : 0;
    for (std::string& text : *reply.mutable_pair_message()) {
      if (text.size() > keep) text.resize(keep);
    }
  }
  SendExecutorMessage(socket_.get(), message).IgnoreError();
  activity_.Touch();
}

void ExecutorServer::Impl::CheckFault(const absl::Status& failure, uint64_t stream,
                                      uint64_t event) {
  absl::Status health = device_.CheckHealth();
  if (health.ok()) return;
  faulted_.store(true);  // from here on only the Fault goes out (gpukitd answers the waits)
  std::vector<std::shared_ptr<StreamState>> drained;
  if (failure.message() != health.message() && device_.properties().backend == BackendKind::kCpu) {
    drained = DrainOtherStreams(stream);
  }
  // One thread reports and ends the process; any other that sees the fault waits here for
  // the end.
  absl::MutexLock lock(&fault_mu_);
  spdlog::error("executor: the device faulted ({}); the first failed work: {}",
                std::string(health.message()), std::string(failure.message()));
  executor::FromExecutor message;
  executor::Fault& fault = *message.mutable_fault();
  fault.set_error(std::string(health.message()));
  fault.set_stream(stream);
  fault.set_event(event);
  // The wait (or the stream whose enqueue) that got the fault itself is certainly the
  // culprit's. A GPU's fault is asynchronous: the stream is only where it was seen.
  bool definite = failure.message() == health.message();
  if (!definite) {
    fault.set_event(0);  // where it was seen, not where it lies
    absl::ReleasableMutexLock lock(&events_mu_);
    // A device that knows which work faulted (the CPU backend) fails it with the fault
    // itself and later work with a mention of it: the culprit's event, done already, may be
    // behind this one in a queue. (A GPU's errors never match: no need to look.)
    if (device_.properties().backend == BackendKind::kCpu) {
      for (const auto& [id, e] : events_) {
        if (e->stream == nullptr) continue;
        EventId device_event;
        {
          absl::MutexLock error_lock(&e->stream->error_mu);  // see EventState::recorded
          // A shared device event is its first event's: the one after the culprit's work.
          if (!e->shared) device_event = e->device_event;
        }
        if (device_event.value == 0) continue;
        absl::StatusOr<bool> done = device_.QueryEvent(device_event);
        if (done.ok() && !*done) continue;
        if (device_.WaitEvent(device_event).message() == health.message()) {
          fault.set_stream(e->stream_id);
          fault.set_event(id);
          definite = true;
        }
      }
    }
    for (const auto& [id, e] : events_) {
      if (e->stream == nullptr) continue;
      absl::MutexLock error_lock(&e->stream->error_mu);
      if (e->enqueue_error.message() == health.message()) {
        fault.set_stream(e->stream_id);
        definite = true;
      }
    }
    lock.Release();  // the streams are mu_'s (never held with events_mu_)
    absl::ReaderMutexLock streams_lock(&mu_);
    for (const auto& [id, s] : streams_) {
      absl::MutexLock error_lock(&s->error_mu);
      if (s->enqueue_error.message() == health.message()) {
        fault.set_stream(id);
        definite = true;
      }
    }
  }
  fault.set_definite(definite);
  SendExecutorMessage(socket_.get(), message).IgnoreError();
  // Nothing this process holds is worth keeping, and its device cannot run work: gpukitd
  // replaces it. Exiting here (rather than unwinding) spares a teardown that waits on a
  // poisoned context.
  std::_Exit(3);
}

std::vector<std::shared_ptr<StreamState>> ExecutorServer::Impl::DrainOtherStreams(uint64_t stream) {
  std::vector<std::shared_ptr<StreamState>> streams;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, s] : streams_) {
      if (id != stream) streams.push_back(s);
    }
  }
  std::vector<std::shared_ptr<absl::Notification>> taken;
  for (const std::shared_ptr<StreamState>& s : streams) {
    auto done = std::make_shared<absl::Notification>();
    s->enqueues.Push([done] { done->Notify(); });
    taken.push_back(std::move(done));
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(1);
  for (const auto& done : taken) done->WaitForNotificationWithDeadline(deadline);
  return streams;
}

absl::StatusOr<BufferId> ExecutorServer::Impl::FindBuffer(uint64_t id) {
  absl::ReaderMutexLock lock(&mu_);  // each op's buffers, on every stream's thread
  auto it = buffers_.find(id);
  if (it == buffers_.end()) return absl::NotFoundError(absl::StrCat("executor: no buffer ", id));
  return it->second;
}

absl::StatusOr<BufferId> ExecutorServer::Impl::BufferOf(uint64_t id, const executor::Place& place) {
  if (place.segment() == 0) return FindBuffer(id);
  const auto key = std::make_tuple(place.segment(), place.offset(), place.bytes());
  {
    absl::ReaderMutexLock lock(&views_mu_);
    if (auto it = views_.find(key); it != views_.end()) return it->second;
  }
  absl::MutexLock lock(&views_mu_);
  if (auto it = views_.find(key); it != views_.end()) return it->second;
  GPUKIT_ASSIGN_OR_RETURN(BufferId view,
                          device_.BufferInSegment(place.segment(), place.offset(), place.bytes()));
  views_.emplace(key, view);
  if (views_.size() > most_views_) views_full_.store(true, std::memory_order_relaxed);
  return view;
}

void ExecutorServer::Impl::DropViews(uint64_t segment) {
  absl::MutexLockMaybe use(segment == 0 ? &views_use_mu_ : nullptr);
  // The device forgets them under views_mu_ too: a segment's unmap (DropViews of it, then
  // UnmapSegment) must not come between a view leaving the table and the device forgetting
  // it, or the device would refuse the unmap for a view nobody holds.
  absl::MutexLock lock(&views_mu_);
  if (segment == 0 && !views_full_.load(std::memory_order_relaxed)) return;  // dropped already
  for (auto it = views_.begin(); it != views_.end();) {
    if (segment == 0 || std::get<0>(it->first) == segment) {
      device_.Free(it->second).IgnoreError();
      views_.erase(it++);
    } else {
      ++it;
    }
  }
  if (segment == 0) views_full_.store(false, std::memory_order_relaxed);
}

absl::StatusOr<char*> ExecutorServer::Impl::FindHost(const executor::HostRange& range,
                                                     int64_t bytes) {
  absl::MutexLock lock(&mu_);
  auto it = host_segments_.find(range.segment());
  if (it == host_segments_.end()) {
    return absl::NotFoundError(absl::StrCat("executor: no host segment ", range.segment()));
  }
  const HostSegment& segment = it->second;
  if (range.offset() < 0 || bytes < 0 || range.offset() > segment.bytes ||
      bytes > segment.bytes - range.offset()) {
    return absl::OutOfRangeError(absl::StrCat("executor: host range [", range.offset(), ", +",
                                              bytes, ") outside a segment of ", segment.bytes));
  }
  return segment.data + range.offset();
}

std::shared_ptr<StreamState> ExecutorServer::Impl::FindStream(uint64_t id) {
  absl::ReaderMutexLock lock(&mu_);
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : it->second;
}

std::shared_ptr<EventState> ExecutorServer::Impl::FindEvent(uint64_t id) {
  absl::MutexLock lock(&events_mu_);
  auto it = events_.find(id);
  return it == events_.end() ? nullptr : it->second;
}

absl::Status ExecutorServer::Impl::EnqueueCopy(const executor::Copy& copy,
                                               const StreamState& stream) {
  const bool dst_device = copy.dst_buffer() != 0;
  const bool src_device = copy.src_buffer() != 0;
  if (dst_device && src_device) {
    GPUKIT_ASSIGN_OR_RETURN(BufferId dst, BufferOf(copy.dst_buffer(), copy.dst_place()));
    GPUKIT_ASSIGN_OR_RETURN(BufferId src, BufferOf(copy.src_buffer(), copy.src_place()));
    return device_.CopyDeviceToDevice(dst, copy.dst_offset(), src, copy.src_offset(), copy.bytes(),
                                      stream.device_stream);
  }
  if (dst_device) {
    GPUKIT_ASSIGN_OR_RETURN(BufferId dst, BufferOf(copy.dst_buffer(), copy.dst_place()));
    GPUKIT_ASSIGN_OR_RETURN(char* src, FindHost(copy.src_host(), copy.bytes()));
    return device_.CopyHostToDevice(dst, copy.dst_offset(), src, copy.bytes(),
                                    stream.device_stream);
  }
  GPUKIT_ASSIGN_OR_RETURN(BufferId src, BufferOf(copy.src_buffer(), copy.src_place()));
  GPUKIT_ASSIGN_OR_RETURN(char* dst, FindHost(copy.dst_host(), copy.bytes()));
  return device_.CopyDeviceToHost(dst, src, copy.src_offset(), copy.bytes(), stream.device_stream);
}

absl::Status ExecutorServer::Impl::EnqueueLaunch(const executor::Launch& launch,
                                                 const StreamState& stream) {
  FunctionId function;
  {
    absl::MutexLock lock(&mu_);
    auto it = functions_.find(launch.function());
    if (it == functions_.end()) {
      return absl::NotFoundError(absl::StrCat("executor: no function ", launch.function()));
    }
    function = it->second;
  }
  if (launch.grid_size() != 3 || launch.block_size() != 3) {
    return absl::InvalidArgumentError("executor: a launch needs 3 grid and 3 block dimensions");
  }
  LaunchConfig config;
  for (int i = 0; i < 3; ++i) {
    config.grid[i] = launch.grid(i);
    config.block[i] = launch.block(i);
  }
  config.shared_memory_bytes = launch.shared_memory_bytes();
  std::vector<KernelArg> args(static_cast<size_t>(launch.args_size()));
  for (int i = 0; i < launch.args_size(); ++i) {
    const executor::KernelArg& in = launch.args(i);
    KernelArg& arg = args[static_cast<size_t>(i)];
    arg.kind = static_cast<KernelArg::Kind>(in.kind());
    switch (arg.kind) {
      case KernelArg::Kind::kBuffer: {
        GPUKIT_ASSIGN_OR_RETURN(arg.buffer, BufferOf(in.buffer(), in.place()));
        break;
      }
      case KernelArg::Kind::kScalar:
        if (in.bytes().size() > sizeof(arg.bytes)) {
          return absl::InvalidArgumentError("executor: a scalar of more than 8 bytes");
        }
        std::memcpy(arg.bytes, in.bytes().data(), in.bytes().size());
        arg.size_bytes = static_cast<uint32_t>(in.bytes().size());
        break;
      case KernelArg::Kind::kBlock:
        arg.block = in.bytes().data();
        arg.size_bytes = static_cast<uint32_t>(in.bytes().size());
        break;
    }
  }
  return device_.Launch(function, config, args, stream.device_stream);
}

absl::Status ExecutorServer::Impl::MapHostSegment(const executor::MapHostSegment& map,
                                                  ScopedFd fd) {
  if (!fd.valid() || map.bytes() <= 0) {
    return absl::InvalidArgumentError("executor: a host segment needs a descriptor and bytes");
  }
  void* data = ::mmap(nullptr, static_cast<size_t>(map.bytes()), PROT_READ | PROT_WRITE, MAP_SHARED,
                      fd.get(), 0);
  if (data == MAP_FAILED) {
    return absl::InvalidArgumentError(
        absl::StrCat("executor: cannot map a host segment: ", std::strerror(errno)));
  }
  HostSegment segment{static_cast<char*>(data), map.bytes(), false};
  // Pinned on a GPU, so copies go straight to the copy engines; a failure only costs speed.
  absl::Status registered = device_.RegisterHostMemory(data, map.bytes());
  segment.registered = registered.ok();
  if (!registered.ok()) {
    spdlog::warn("executor: host segment {} not registered: {}", map.key(),
                 std::string(registered.message()));
  }
  absl::MutexLock lock(&mu_);
  if (!host_segments_.emplace(map.key(), segment).second) {
    if (segment.registered) device_.UnregisterHostMemory(data).IgnoreError();
    ::munmap(data, static_cast<size_t>(map.bytes()));
    return absl::InvalidArgumentError(
        absl::StrCat("executor: host segment ", map.key(), " is mapped already"));
  }
  return absl::OkStatus();
}

absl::Status ExecutorServer::Impl::UnmapHostSegment(uint64_t key) {
  HostSegment segment;
  {
    absl::MutexLock lock(&mu_);
    auto it = host_segments_.find(key);
    if (it == host_segments_.end()) {
      return absl::NotFoundError(absl::StrCat("executor: no host segment ", key));
    }
    segment = it->second;
    host_segments_.erase(it);
  }
  if (segment.registered) device_.UnregisterHostMemory(segment.data).IgnoreError();
  ::munmap(segment.data, static_cast<size_t>(segment.bytes));
  return absl::OkStatus();
}

absl::Status ExecutorServer::Impl::LoadModule(const executor::LoadModule& load, ScopedFd fd) {
  if (!fd.valid() || load.image_bytes() <= 0) {
    return absl::InvalidArgumentError("executor: a module needs its image");
  }
  std::string image(static_cast<size_t>(load.image_bytes()), '\0');
  int64_t done = 0;
  while (done < load.image_bytes()) {
    const ssize_t got = ::pread(fd.get(), image.data() + done,
                                static_cast<size_t>(load.image_bytes() - done), done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return absl::InternalError("executor: cannot read a module's image");
    done += got;
  }
  GPUKIT_ASSIGN_OR_RETURN(ModuleId module, device_.LoadModule(image));
  absl::MutexLock lock(&mu_);
  modules_[load.module()] = module;
  return absl::OkStatus();
}

std::shared_ptr<EventState> ExecutorServer::Impl::NewEvent(
    const std::shared_ptr<StreamState>& stream, uint64_t stream_id, uint64_t id) {
  auto event = std::make_shared<EventState>();
  event->stream = stream;
  event->stream_id = stream_id;
  if (stream == nullptr) {
    event->enqueue_error = absl::NotFoundError(absl::StrCat("executor: no stream ", stream_id));
  }
  absl::MutexLock lock(&events_mu_);
  events_[id] = event;
  return event;
}

void ExecutorServer::Impl::RecordOnStream(StreamState* s, const std::shared_ptr<EventState>& event,
                                          uint64_t id, bool may_defer) {
  std::shared_ptr<EventState> previous = s->last_event.lock();
  event->previous = std::exchange(s->last_event, event);
  event->previous_id = std::exchange(s->last_event_id, id);
  event->works = s->works;
  const bool same_point = !s->work_since_last_event && previous != nullptr;
  s->work_since_last_event = false;
  // Deferred: it waits for a later device event, as the previous event does when this one
  // marks the same point, or as an op's end may while more small ops follow at once.
  const bool defer =
      (!s->deferred.empty() && same_point)
          ? s->deferred.back() == previous
          : (may_defer && defer_events_ && s->last_device_event != nullptr &&
             s->small_since_device_event &&
             s->works - s->last_device_event_works < kMostDeferredWorks && s->work_follows());
  if (defer) {
    if (s->open_span == nullptr) {
      s->open_span = std::make_shared<DeferredSpan>();
      s->open_span->lower = s->last_device_event;
      s->open_span->lower_works = s->last_device_event_works;
    }
    s->deferred.push_back(event);
    absl::MutexLock lock(&s->error_mu);
    event->span = s->open_span;
    event->enqueue_error = std::exchange(s->enqueue_error, absl::OkStatus());
    return;  // recorded (EventState::recorded) with the device event that ends the span
  }
  std::shared_ptr<DeviceEventOwner> owner;
  EventId device_event;
  if (same_point) {
    absl::MutexLock lock(&s->error_mu);  // a destroy of `previous` takes its owner
    owner = previous->owner;
    device_event = previous->device_event;
  }
  const bool shared = owner != nullptr;
  absl::Status record_error;
  if (!shared) {
    absl::StatusOr<EventId> recorded = RecordDeviceEvent(s, owner);
    if (recorded.ok()) {
      device_event = *recorded;
    } else {
      record_error = recorded.status();
    }
    // The events deferred before this one end with its device event (the work between is
    // theirs: small ops).
    EndSpan(s, recorded, owner);
  }
  absl::MutexLock lock(&s->error_mu);
  event->recorded = true;
  event->enqueue_error = std::exchange(s->enqueue_error, absl::OkStatus());
  if (event->enqueue_error.ok()) event->enqueue_error = record_error;
  event->device_event = device_event;
  event->owner = std::move(owner);
  event->shared = shared;
}

absl::StatusOr<EventId> ExecutorServer::Impl::RecordDeviceEvent(
    StreamState* s, std::shared_ptr<DeviceEventOwner>& owner) {
  GPUKIT_RETURN_IF_ERROR(s->create_error);
  GPUKIT_ASSIGN_OR_RETURN(EventId recorded, device_.RecordEvent(s->device_stream));
  owner = std::make_shared<DeviceEventOwner>(device_, recorded);
  if (defer_events_) {  // the next deferred span's lower event
    s->last_device_event = owner;
    s->last_device_event_works = s->works;
    s->small_since_device_event = true;
  }
  return recorded;
}

void ExecutorServer::Impl::EndSpan(StreamState* s, const absl::StatusOr<EventId>& recorded,
                                   const std::shared_ptr<DeviceEventOwner>& owner) {
  if (s->deferred.empty()) return;
  std::vector<std::shared_ptr<EventState>> deferred = std::move(s->deferred);
  s->deferred.clear();
  std::shared_ptr<DeferredSpan> span = std::move(s->open_span);
  if (recorded.ok()) {
    span->upper = *recorded;
    span->upper_works = s->works;
  }
  absl::MutexLock lock(&s->error_mu);
  for (const std::shared_ptr<EventState>& event : deferred) {
    event->recorded = true;
    if (!recorded.ok()) {
      if (event->enqueue_error.ok()) event->enqueue_error = recorded.status();
      event->span = nullptr;
      continue;
    }
    if (event->destroyed) continue;
    event->device_event = *recorded;
    event->owner = owner;
  }
}

void ExecutorServer::Impl::RecordDeferred(StreamState* s) {
  if (s->deferred.empty()) return;
  std::shared_ptr<DeviceEventOwner> owner;
  absl::StatusOr<EventId> recorded = RecordDeviceEvent(s, owner);
  EndSpan(s, recorded, owner);
}

void ExecutorServer::Impl::RunStreamWorks(StreamState* s,
                                          const std::vector<std::function<void()>>& works) {
  for (size_t i = 0; i < works.size(); ++i) {
    s->works_following = works.size() - 1 - i;
    works[i]();
  }
  s->works_following = 0;
  if (!s->deferred.empty() && !s->enqueues.has_queued()) RecordDeferred(s);
}

absl::StatusOr<int64_t> ExecutorServer::Impl::ElapsedBetween(const EventPoint& start,
                                                             const EventPoint& end,
                                                             bool if_completed) {
  auto elapsed = [&](EventId from, EventId to) {
    return if_completed ? device_.ElapsedNsIfCompleted(from, to) : device_.EventElapsedNs(from, to);
  };
  // Each event as a device event and the device time after it: its own (0 after), or, for a
  // deferred one, its span's lower event and its share of the span's time.
  auto base = [](const EventPoint& p) {
    return p.span == nullptr ? p.device_event : p.span->lower->event();
  };
  auto after_base = [&](const EventPoint& p) -> absl::StatusOr<int64_t> {
    if (p.span == nullptr) return 0;
    DeferredSpan& span = *p.span;
    int64_t total = span.elapsed_ns.load(std::memory_order_acquire);
    if (total < 0) {
      // Also what says whether the span's work is done.
      GPUKIT_ASSIGN_OR_RETURN(total, elapsed(span.lower->event(), span.upper));
      span.elapsed_ns.store(total, std::memory_order_release);
    }
    const uint64_t works = span.upper_works - span.lower_works;
    if (works == 0) return 0;
    return static_cast<int64_t>(static_cast<double>(total) *
                                static_cast<double>(p.works - span.lower_works) /
                                static_cast<double>(works));
  };
  const bool deferred = start.span != nullptr || end.span != nullptr;
  int64_t ns = 0;
  // Two events of the device's own: the device answers (whether the work is done, too).
  if (!deferred || base(start).value != base(end).value) {
    GPUKIT_ASSIGN_OR_RETURN(ns, elapsed(base(start), base(end)));
  }
  if (!deferred) return ns;
  GPUKIT_ASSIGN_OR_RETURN(int64_t to_after, after_base(end));
  GPUKIT_ASSIGN_OR_RETURN(int64_t from_after, after_base(start));
  ns += to_after - from_after;
  if (ns < 0) {
    return absl::InvalidArgumentError("executor: the end event was recorded before the start");
  }
  return ns;
}

void ExecutorServer::Impl::DestroyEvents(uint64_t seq, const executor::DestroyEvent& destroy) {
  std::vector<std::pair<uint64_t, std::shared_ptr<EventState>>> found;
  found.reserve(1 + static_cast<size_t>(destroy.more_events_size()));
  std::vector<uint64_t> unknown;
  {
    absl::MutexLock lock(&events_mu_);
    auto find = [&](uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(events_mu_) {
      auto it = events_.find(id);
      if (it == events_.end()) {
        unknown.push_back(id);
      } else if (it->second->stream == nullptr) {
        events_.erase(it);  // recorded on no stream: nothing was queued for it
      } else {
        found.emplace_back(id, it->second);
      }
    };
    find(destroy.event());
    for (uint64_t id : destroy.more_events()) find(id);
  }
  if (!unknown.empty()) {
    Reply(seq, absl::NotFoundError(absl::StrCat("executor: no event ", unknown.front())));
  }
  // Each after its stream's enqueue thread recorded it and after the waits queued before on
  // its stream's completion thread (at once when none is: destroying an event whose work is
  // pending is allowed). The events of one request are of one stream but for rare cases.
  size_t begin = 0;
  while (begin < found.size()) {
    std::shared_ptr<StreamState> stream = found[begin].second->stream;
    size_t end = begin + 1;
    while (end < found.size() && found[end].second->stream == stream) ++end;
    std::vector<std::pair<uint64_t, std::shared_ptr<EventState>>> events(
        std::make_move_iterator(found.begin() + static_cast<ptrdiff_t>(begin)),
        std::make_move_iterator(found.begin() + static_cast<ptrdiff_t>(end)));
    StreamState* s = stream.get();
    PushWork(stream, [this, s, events = std::move(events)] {
      auto destroy = [this, events] {
        for (const auto& [id, event] : events) {
          std::shared_ptr<DeviceEventOwner> owner;  // released after the lock
          {
            absl::MutexLock lock(&event->stream->error_mu);  // see EventState::recorded
            event->device_event = EventId{};
            event->destroyed = true;
            owner = std::move(event->owner);
          }
          owner.reset();  // destroys the device event unless a later event shares it
        }
        absl::MutexLock lock(&events_mu_);
        for (const auto& [id, event] : events) events_.erase(id);
      };
      if (s->completions.idle()) {
        destroy();
      } else {
        s->completions.Push(std::move(destroy));
      }
    });
    begin = end;
  }
}

void ExecutorServer::Impl::PushWork(const std::shared_ptr<StreamState>& stream,
                                    std::function<void()> work, size_t weight) {
  StreamWorks* works = nullptr;
  StreamWorks single;
  if (!in_batch_) {
    works = &single;
  } else {
    for (auto& [s, batch] : batch_work_) {
      if (s == stream) {
        works = &batch;
        break;
      }
    }
    if (works == nullptr) works = &batch_work_.emplace_back(stream, StreamWorks{}).second;
  }
  works->works.push_back(std::move(work));
  works->weight += weight;
  if (!in_batch_) RunOrQueue(stream, std::move(single));
}

void ExecutorServer::Impl::PushBatchWork() {
  for (auto& [stream, works] : batch_work_) RunOrQueue(stream, std::move(works));
  batch_work_.clear();
}

void ExecutorServer::Impl::RunOrQueue(const std::shared_ptr<StreamState>& stream,
                                      StreamWorks works) {
  if (inline_work_ && works.weight <= kMostInlineWorks && stream->enqueues.idle() &&
      (!OthersWaiting() || PausedStreamCutsIn(*stream))) {
    RunStreamWorks(stream.get(), works.works);
    return;
  }
  if (defer_events_) {
    stream->enqueues.Push(
        [this, s = stream.get(), works = std::move(works.works)] { RunStreamWorks(s, works); });
  } else if (works.works.size() == 1) {
    stream->enqueues.Push(std::move(works.works.front()));
  } else {
    stream->enqueues.Push([works = std::move(works.works)] {
      for (const std::function<void()>& work : works) work();
    });
  }
}

void ExecutorServer::Impl::Handle(executor::Request& request, ScopedFd fd) {
  const uint64_t seq = request.seq();
  switch (request.body_case()) {
    case executor::Request::kMapSegment: {
      const executor::MapSegment& map = request.map_segment();
      Reply(seq, device_.MapSegment(map.key(), std::move(fd), map.bytes()));
      return;
    }
    case executor::Request::kUnmapSegment:
      DropViews(request.unmap_segment().key());
      Reply(seq, device_.UnmapSegment(request.unmap_segment().key()));
      return;
    case executor::Request::kMapHostSegment:
      Reply(seq, MapHostSegment(request.map_host_segment(), std::move(fd)));
      return;
    case executor::Request::kUnmapHostSegment:
      Reply(seq, UnmapHostSegment(request.unmap_host_segment().key()));
      return;
    case executor::Request::kDefineBuffer: {
      const executor::DefineBuffer& define = request.define_buffer();
      absl::StatusOr<BufferId> buffer = device_.Allocate(0);
      if (buffer.ok()) {
        std::optional<BufferId> replaced;
        {
          absl::MutexLock lock(&mu_);
          auto [it, added] = buffers_.try_emplace(define.buffer(), *buffer);
          if (!added) {
            replaced = it->second;
            it->second = *buffer;
          }
        }
        if (replaced) device_.Free(*replaced).IgnoreError();
      }
      Reply(seq, buffer.status());
      return;
    }
    case executor::Request::kImportBuffer: {
      const executor::ImportBuffer& import = request.import_buffer();
      ImportedMemory memory;
      memory.fd = std::move(fd);
      memory.allocation_bytes = import.allocation_bytes();
      memory.cuda_ipc_handle = import.cuda_ipc_handle();
      memory.offset_bytes = import.offset();
      memory.bytes = import.bytes();
      absl::StatusOr<BufferId> buffer = device_.ImportBuffer(std::move(memory));
      if (buffer.ok()) {
        absl::MutexLock lock(&mu_);
        buffers_[import.buffer()] = *buffer;
      }
      Reply(seq, buffer.status());
      return;
    }
    case executor::Request::kFreeBuffer: {
      std::optional<BufferId> buffer;
      {
        absl::MutexLock lock(&mu_);
        auto it = buffers_.find(request.free_buffer().buffer());
        if (it != buffers_.end()) {
          buffer = it->second;
          buffers_.erase(it);
        }
      }
      Reply(seq, buffer ? device_.Free(*buffer)
                        : absl::NotFoundError(absl::StrCat("executor: no buffer ",
                                                           request.free_buffer().buffer())));
      return;
    }
    case executor::Request::kCreateStream: {
      std::shared_ptr<StreamState> stream = NewStream();
      StreamOptions options;
      options.priority = static_cast<StreamPriority>(request.create_stream().priority());
      if (request.create_stream().sm_share() > 0) {
        options.sm_share = request.create_stream().sm_share();
      }
      if (request.create_stream().has_sm_first()) {
        options.sm_first = request.create_stream().sm_first();
      }
      absl::StatusOr<StreamId> created = device_.CreateStream(options);
      absl::StatusOr<int> sms =
          created.ok() ? device_.StreamSmCount(*created) : absl::StatusOr<int>(0);
      if (created.ok()) {
        stream->device_stream = *created;
      } else {
        stream->create_error = created.status();
      }
      {
        absl::MutexLock lock(&mu_);
        streams_[request.create_stream().stream()] = stream;
      }
      Reply(seq, created.status(), sms.value_or(0));  // 0: the device cannot tell
      return;
    }
    case executor::Request::kDestroyStream: {
      std::shared_ptr<StreamState> stream;
      {
        absl::MutexLock lock(&mu_);
        auto it = streams_.find(request.destroy_stream().stream());
        if (it != streams_.end()) {
          stream = std::move(it->second);
          streams_.erase(it);
        }
      }
      if (stream == nullptr) {
        Reply(seq, absl::NotFoundError(
                       absl::StrCat("executor: no stream ", request.destroy_stream().stream())));
        return;
      }
      // After every enqueue and every wait queued before it. The last reference may go with
      // the completion thread's own work item: NewStream deletes the state elsewhere then.
      std::shared_ptr<StreamState> target = stream;
      PushWork(target, [this, seq, stream = std::move(stream)]() mutable {
        StreamState* s = stream.get();
        RecordDeferred(s);  // before the stream goes
        s->completions.Push([this, seq, stream = std::move(stream)] {
          absl::Status status = stream->create_error.ok()
                                    ? device_.DestroyStream(stream->device_stream)
                                    : absl::OkStatus();
          Reply(seq, status);
        });
      });
      return;
    }
    case executor::Request::kCopy:
    case executor::Request::kFill:
    case executor::Request::kRunOp:
    case executor::Request::kLaunch: {
      const uint64_t stream_id =
          request.body_case() == executor::Request::kCopy    ? request.copy().stream()
          : request.body_case() == executor::Request::kFill  ? request.fill().stream()
          : request.body_case() == executor::Request::kRunOp ? request.run_op().stream()
                                                             : request.launch().stream();
      std::shared_ptr<StreamState> stream = FindStream(stream_id);
      // A RunOp may carry the events recorded right before and after it.
      const bool has_events = request.body_case() == executor::Request::kRunOp &&
                              request.run_op().start_event() != 0 &&
                              request.run_op().end_event() != 0;
      std::shared_ptr<EventState> start;
      std::shared_ptr<EventState> end;
      if (has_events) {
        start = NewEvent(stream, stream_id, request.run_op().start_event());
        end = NewEvent(stream, stream_id, request.run_op().end_event());
      }
      if (stream == nullptr) {
        spdlog::warn("executor: work for unknown stream {}", stream_id);
        return;
      }
      StreamState* s = stream.get();
      PushWork(
          stream,
          [this, s, held = Keep(request), start, end] {
            const executor::Request& request = *held;
            if (start != nullptr) RecordOnStream(s, start, request.run_op().start_event());
            absl::Status status = s->create_error;
            // Only small ops lie between deferred events (DefersEvents): other work ends them
            // first.
            bool small = false;
            auto before_work = [&] {
              if (!small && !s->deferred.empty()) RecordDeferred(s);
              ++s->works;
              s->small_since_device_event = s->small_since_device_event && small;
            };
            if (status.ok()) {
              // The views the work names stay until the device has enqueued it (DropViews).
              absl::ReaderMutexLock views(&views_use_mu_);
              switch (request.body_case()) {
                case executor::Request::kCopy:
                  before_work();
                  status = EnqueueCopy(request.copy(), *s);
                  break;
                case executor::Request::kFill: {
                  before_work();
                  absl::StatusOr<BufferId> buffer =
                      BufferOf(request.fill().buffer(), request.fill().place());
                  status = buffer.ok() ? device_.FillZero(*buffer, request.fill().offset(),
                                                          request.fill().bytes(), s->device_stream)
                                       : buffer.status();
                  break;
                }
                case executor::Request::kRunOp: {
                  absl::StatusOr<OpLaunch> launch = DecodeRunOp(
                      request.run_op(), [this](uint64_t id, const executor::Place& place) {
                        return BufferOf(id, place);
                      });
                  small = defer_events_ && launch.ok() && IsSmallOp(*launch);
                  before_work();
                  status = launch.ok() ? device_.RunOp(*launch, s->device_stream) : launch.status();
                  break;
                }
                default:
                  before_work();
                  status = EnqueueLaunch(request.launch(), *s);
                  break;
              }
            } else {
              before_work();
            }
            s->work_since_last_event = true;
            if (!status.ok()) {
              absl::MutexLock lock(&s->error_mu);
              if (s->enqueue_error.ok()) s->enqueue_error = status;
            }
            if (end != nullptr) {
              RecordOnStream(s, end, request.run_op().end_event(), /*may_defer=*/true);
            }
            if (views_full_.load(std::memory_order_relaxed)) DropViews(0);
          },
          has_events ? 3 : 1);
      return;
    }
    case executor::Request::kRecordEvent: {
      const uint64_t stream_id = request.record_event().stream();
      std::shared_ptr<StreamState> stream = FindStream(stream_id);
      std::shared_ptr<EventState> event =
          NewEvent(stream, stream_id, request.record_event().event());
      if (stream == nullptr) return;
      StreamState* s = stream.get();
      PushWork(stream, [this, s, event, id = request.record_event().event()] {
        RecordOnStream(s, event, id);
      });
      return;
    }
    case executor::Request::kDestroyEvent:
      DestroyEvents(seq, request.destroy_event());
      return;
    case executor::Request::kElapsedNs:
      if (request.elapsed_ns().pairs_size() > 0) {
        // A device call per pair (more for one that failed), which contends with the launches
        // for the device's locks: on the completion thread of the first pair's stream when it
        // is idle, so the reader goes on reading.
        // The reader answers when that thread has waits queued (the answer must not wait
        // behind them) or the event is unknown (to answer its error).
        std::shared_ptr<EventState> first = FindEvent(request.elapsed_ns().pairs(0).end());
        if (first == nullptr || first->stream == nullptr || !first->stream->completions.idle()) {
          ReplyPairsElapsed(seq, request.elapsed_ns());
          return;
        }
        first->stream->completions.Push(
            [this, seq, held = Keep(request)] { ReplyPairsElapsed(seq, held->elapsed_ns()); });
        return;
      }
      [[fallthrough]];
    case executor::Request::kWaitEvent: {
      const uint64_t event_id = request.body_case() == executor::Request::kWaitEvent
                                    ? request.wait_event().event()
                                    : request.elapsed_ns().end();
      std::shared_ptr<EventState> event = FindEvent(event_id);
      if (event == nullptr) {
        Reply(seq, absl::NotFoundError(absl::StrCat("executor: no event ", event_id)));
        return;
      }
      if (event->stream == nullptr) {
        Reply(seq, event->enqueue_error);  // recorded on no stream: "no stream N"
        return;
      }
      StreamState* s = event->stream.get();
      if (request.body_case() == executor::Request::kWaitEvent && request.wait_event().query()) {
        // A query answers from the enqueue thread, after the RecordEvent, without waiting.
        PushWork(event->stream, [this, event, seq] {
          RecordDeferred(event->stream.get());  // the event's device event, if deferred
          if (!event->enqueue_error.ok()) {
            Reply(seq, absl::OkStatus(), 1);  // done; WaitEvent reports the error
            return;
          }
          absl::StatusOr<bool> done = device_.QueryEvent(event->device_event);
          Reply(seq, done.status(), done.ok() && *done ? 1 : 0);
        });
        return;
      }
      // Through the enqueue thread (after the RecordEvent) to the completion thread, which
      // may block; a wait whose work has run already (the CPU device runs it as it is
      // enqueued, a GPU's small kernel may be done) is answered by the enqueue thread when no
      // work is queued behind it.
      PushWork(event->stream, [this, s, event, seq, held = Keep(request)] {
        RecordDeferred(s);  // the event's device event, if deferred: recorded here, at once
        const executor::Request::BodyCase kind = held->body_case();
        auto complete = [this, event, seq, held] {
          const executor::Request& request = *held;
          switch (request.body_case()) {
            case executor::Request::kWaitEvent: {
              absl::Status status = event->enqueue_error;
              if (status.ok()) status = WaitDeviceEvent(event->device_event, event->shared);
              // A sticky fault shows as an error of the work, at enqueue (a device that runs
              // work as it is enqueued) or at the wait.
              if (!status.ok()) {
                CheckFault(status, event->stream_id, request.wait_event().event());
              }
              uint64_t elapsed_from = 0;
              int64_t elapsed_ns = 0;
              if (std::shared_ptr<EventState> previous = event->previous.lock();
                  status.ok() && previous != nullptr && previous->device_event.value != 0) {
                absl::StatusOr<int64_t> ns = ElapsedBetweenNow(*previous, *event);
                if (ns.ok()) {
                  elapsed_from = event->previous_id;
                  elapsed_ns = *ns;
                  event->stream->last_work_ns.store(elapsed_ns, std::memory_order_relaxed);
                }
              }
              if (status.ok() && request.wait_event().pairs_size() > 0) {
                ReplyWithPairs(seq, elapsed_from, elapsed_ns, request.wait_event().pairs());
              } else {
                Reply(seq, status, 0, elapsed_from, elapsed_ns);
              }
              break;
            }
            default: {
              std::shared_ptr<EventState> start = FindEvent(request.elapsed_ns().start());
              if (start == nullptr) {
                Reply(seq, absl::NotFoundError("executor: no start event"));
                break;
              }
              if (start->stream == nullptr) {
                Reply(seq, start->enqueue_error);  // recorded on no stream: "no stream N"
                break;
              }
              absl::StatusOr<int64_t> ns = ElapsedBetweenNow(*start, *event);
              Reply(seq, ns.status(), ns.ok() ? *ns : 0);
              break;
            }
          }
        };
        // Answered here only while no work is queued behind the wait on this stream: its
        // answer (a device call per pair) would hold that work's launch, and this thread is
        // the stream's bottleneck under load (docs/benchmarks.md, "Waits off the enqueue
        // thread"); the completion thread answers it then.
        bool done_already = false;
        if (kind == executor::Request::kWaitEvent && s->completions.idle() &&
            event->device_event.value != 0 && !s->work_follows()) {
          // Short work is likely done within SpinTime(): answering here saves the hand-off,
          // unless someone else's request waits for this thread (OthersWaiting).
          const int64_t last_ns = s->last_work_ns.load(std::memory_order_relaxed);
          const bool short_work = last_ns >= 0 && last_ns < kShortWorkNs;
          bool failed = false;
          bool yielded = false;
          int polls = 0;
          done_already = SpinUntil(
              [&] {
                absl::StatusOr<bool> done = device_.QueryEvent(event->device_event);
                failed = !done.ok();
                if (failed || *done) return true;
                // A look every 4th query: a poll costs about as much as a query.
                yielded = polls++ % 4 == 0 && OthersWaiting();
                return yielded;
              },
              short_work ? SpinTime() : std::chrono::microseconds(0));
          done_already = done_already && !failed && !yielded;
        }
        if (done_already) {
          complete();
        } else if (kind == executor::Request::kWaitEvent) {
          // Its reply comes when the work ends: the reader polls until then (and its window
          // after), so the next request finds it awake.
          waits_owed_.fetch_add(1, std::memory_order_relaxed);
          s->completions.Push([this, complete = std::move(complete)]() mutable {
            complete();
            waits_owed_.fetch_sub(1, std::memory_order_relaxed);
          });
        } else {
          s->completions.Push(std::move(complete));
        }
      });
      return;
    }
    case executor::Request::kLoadModule:
      Reply(seq, LoadModule(request.load_module(), std::move(fd)));
      return;
    case executor::Request::kUnloadModule: {
      std::optional<ModuleId> module;
      {
        absl::MutexLock lock(&mu_);
        auto it = modules_.find(request.unload_module().module());
        if (it != modules_.end()) {
          module = it->second;
          modules_.erase(it);
        }
      }
      Reply(seq,
            module ? device_.UnloadModule(*module) : absl::NotFoundError("executor: no module"));
      return;
    }
    case executor::Request::kGetFunction: {
      const executor::GetFunction& get = request.get_function();
      std::optional<ModuleId> module;
      {
        absl::MutexLock lock(&mu_);
        auto it = modules_.find(get.module());
        if (it != modules_.end()) module = it->second;
      }
      if (!module) {
        Reply(seq, absl::NotFoundError(absl::StrCat("executor: no module ", get.module())));
        return;
      }
      absl::StatusOr<FunctionId> function = device_.GetFunction(*module, get.name());
      if (function.ok()) {
        absl::MutexLock lock(&mu_);
        functions_[get.function()] = *function;
      }
      Reply(seq, function.status());
      return;
    }
    case executor::Request::kActivate:
      Reply(seq, absl::OkStatus());
      return;
    case executor::Request::kWake:
      return;  // the read itself was the point: the reader now polls (ExecutorReaderPollTime)
    case executor::Request::kBatch:
      if (fd.valid()) spdlog::warn("executor: a descriptor came with a batch; closed");
      in_batch_ = true;
      for (executor::Request& each : *request.mutable_batch()->mutable_requests()) {
        if (each.body_case() == executor::Request::kBatch) {
          Reply(each.seq(), absl::InvalidArgumentError("executor: a batch inside a batch"));
          continue;
        }
        Handle(each, ScopedFd());
      }
      in_batch_ = false;
      PushBatchWork();
      return;
    case executor::Request::BODY_NOT_SET:
      Reply(seq, absl::InvalidArgumentError("executor: a request without a body"));
      return;
  }
}

}  // namespace gpukit
