#include "runtime/executor/remote_device.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "runtime/base/shape.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/thread_name.h"
#include "runtime/base/units.h"
#include "runtime/executor/executor_protocol.h"
#include "runtime/executor/spin_wait.h"
#include "spdlog/spdlog.h"
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>

extern char** environ;

namespace gpukit {
namespace {

// A reply some thread waits for.
struct Pending {
  absl::Notification done;
  absl::Status status;
  int64_t value = 0;
  uint64_t elapsed_from = 0;  // a wait's: Reply.elapsed_from and elapsed_ns
  int64_t elapsed_ns = 0;
  // An ElapsedNs with pairs: each pair's device time and status (Reply.pair_*).
  std::vector<int64_t> pair_elapsed_ns;
  std::vector<absl::Status> pair_status;
  // For waits: the stream and when the wait began (the hang watchdog), and whether the work
  // it covers includes a kernel launch (fault attribution).
  bool is_wait = false;
  uint64_t stream = 0;
  uint64_t event = 0;
  absl::Time started;
  std::string launched;  // a kernel launched in the covered work, or ""
  bool hung = false;     // the watchdog took it for a hang

  void Complete(absl::Status s, int64_t v = 0) {
    if (done.HasBeenNotified()) return;
    status = std::move(s);
    value = v;
    ready.store(true, std::memory_order_release);
    done.Notify();
  }
  // Spins first (SpinForAnswer): the answer of a round trip to the executor usually comes
  // within ChannelSpinTime(), and a sleeping waiter costs a wake-up more. A wait's reply comes
  // when the device's work ends: with a free slot the waiter spins through the work (up to
  // kLongSpin), as a CUDA context's synchronous wait does, rather than pay a wake-up at its
  // end (40-70 us on the H200 host).
  void Wait() {
    SpinForAnswer([this] { return ready.load(std::memory_order_acquire); }, is_wait, kLongSpin);
    done.WaitForNotification();
  }
  static constexpr std::chrono::microseconds kLongSpin{20'000};
  std::atomic<bool> ready{false};  // set just before `done`, for a waiter that spins
};

// One executor process and the thread that reads what it sends.
struct Executor {
  pid_t pid = -1;
  ScopedFd socket;
  std::thread reader;
  absl::Notification hello_received;
  executor::Hello hello;      // set before hello_received
  absl::Notification closed;  // the channel ended (the process died or exits)
  // Traffic either way, and the replies gpukitd is owed, for the reader's polling.
  explicit Executor(const std::atomic<int>* replies_owed)
      : activity(ChannelSpinTime(), replies_owed, /*bell=*/true) {}
  RecentActivity activity;
  // The executor gets requests in the order they were handed over: each datagram takes a
  // ticket under send_mu, in that order, and goes to the outbox (under turn_mu), encoded,
  // after send_mu is released. Whichever thread finds nobody sending sends what the outbox
  // holds in ticket order, as far as it is ready, so a thread never waits for another's
  // encoding or sendmsg (one that attaches a descriptor waits until its datagram is gone:
  // the descriptor is its caller's). `held`: one-way requests held back (its body a Batch),
  // sent before or with the next request, at the end of a DeviceBatch, or by the
  // supervisor's tick. They die with the executor, as requests in flight do.
  absl::Mutex send_mu;  // never held with turn_mu
  executor::Request held ABSL_GUARDED_BY(send_mu);
  size_t held_bytes ABSL_GUARDED_BY(send_mu) = 0;
  bool held_work ABSL_GUARDED_BY(send_mu) = false;  // stream work among `held`
  uint64_t tickets ABSL_GUARDED_BY(send_mu) = 0;    // datagrams handed over
  struct Outgoing {
    bool ready = false;  // handed to the outbox (else its ticket's thread is encoding it)
    std::string bytes;   // empty: nothing to send (it could not be encoded)
    int fd = -1;
    std::shared_ptr<absl::Status> result;  // the send's outcome, for a thread that waits
    bool orphans = true;                   // see SendInTurn
  };
  absl::Mutex turn_mu;
  std::deque<Outgoing> outbox ABSL_GUARDED_BY(turn_mu);  // tickets from `taken` on
  uint64_t taken ABSL_GUARDED_BY(turn_mu) = 0;           // tickets taken off the outbox to be sent
  uint64_t sent ABSL_GUARDED_BY(turn_mu) = 0;  // of them, sent (or failed), in ticket order
  bool sending ABSL_GUARDED_BY(turn_mu) = false;

  ~Executor() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (socket.valid()) ::shutdown(socket.get(), SHUT_RDWR);
    if (reader.joinable()) reader.join();
  }
};

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)),
                        ")");
  }
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  return "ended";
}

// A module's image in a memfd, for the executor (images can be megabytes: more than a
// datagram holds).
absl::StatusOr<ScopedFd> ImageFile(absl::string_view image) {
  GPUKIT_ASSIGN_OR_RETURN(ScopedFd file,
                          CreateSharedMemory("gpukit-module", static_cast<int64_t>(image.size())));
  if (::pwrite(file.get(), image.data(), image.size(), 0) != static_cast<ssize_t>(image.size())) {
    return absl::ResourceExhaustedError("cannot write a module image for the executor");
  }
  return file;
}

absl::Status WithKind(absl::Status status, absl::string_view kind) {
  status.SetPayload(kExecutorFaultPayload, absl::Cord(kind));
  return status;
}

// What a wait for work of an executor that has since been replaced gets (not the culprit's).
absl::Status RestartedError() {
  return WithKind(
      absl::UnavailableError("the device executor restarted after this work was queued, so it may "
                             "not have run; its inputs are intact and a retry is safe"),
      "restart");
}

}  // namespace

class RemoteDevice::Impl {
 public:
  explicit Impl(RemoteDeviceOptions options) : options_(std::move(options)) {}
  ~Impl();

  absl::Status Start();

  // Tables and calls; RemoteDevice's methods forward here.
  RemoteDeviceOptions options_;
  DeviceProperties properties_;
  absl::flat_hash_set<std::string> supported_ops_;

  // --- Sending -----------------------------------------------------------------------------
  // Sends on the serving executor. Holds gen_mu_ shared only while sending.
  absl::Status Send(executor::Request& request, int fd = -1) ABSL_LOCKS_EXCLUDED(gen_mu_);
  // HoldOn the serving executor (none: dropped, as a send to none would be); `request` may
  // be left empty.
  void Hold(executor::Request& request) ABSL_LOCKS_EXCLUDED(gen_mu_);
  // Sends with a seq and waits for the reply (never holding a lock while it waits).
  // `generation`, when not 0, is the executor generation the request is about (its events'):
  // if a restart has replaced it by the time of sending, nothing is sent (the new executor
  // knows nothing of it) and the call fails UNAVAILABLE "restart", or with what the restart
  // gave `pending`.
  absl::StatusOr<int64_t> Call(executor::Request& request, int fd = -1,
                               std::shared_ptr<Pending> pending = nullptr, uint64_t generation = 0)
      ABSL_LOCKS_EXCLUDED(gen_mu_);
  // Registers `pending` (a new one when null) for the reply to the next seq, which it returns.
  std::shared_ptr<Pending> Register(uint64_t* seq, std::shared_ptr<Pending> pending = nullptr);
  // Keeps replies_owed_ equal to pending_.size(); call after each change of pending_.
  void NoteOwedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(pending_mu_) {
    replies_owed_.store(static_cast<int>(pending_.size()), std::memory_order_relaxed);
  }
  void Unregister(uint64_t seq);

  // --- Executors ---------------------------------------------------------------------------
  absl::StatusOr<std::shared_ptr<Executor>> Spawn();
  void ReadLoop(Executor* executor);
  // Waits for `executor`'s hello; FAILED_PRECONDITION with its reason when its device failed.
  absl::Status AwaitHello(Executor& executor);
  // Asks the supervisor to replace the serving executor `failed` (ignored if it is not).
  void ReportFailure(const Executor* failed, std::string kind, std::string error,
                     uint64_t stream = 0, bool definite = false, uint64_t event = 0);
  void Supervise();
  // Kills the failed executor, fails what waited on it, promotes the standby (or a new one)
  // and replays the tables into it.
  void Recover(const std::string& kind, const std::string& error, uint64_t stream, bool definite,
               uint64_t event);
  // Under a restart: promotes the standby or starts an executor, replays the tables into it
  // and makes it the serving one; on failure the device stays without one (broken_), and
  // the supervisor tries again every few seconds.
  void StartNext(absl::Time started) ABSL_EXCLUSIVE_LOCKS_REQUIRED(gen_mu_);
  absl::Status Replay(Executor& executor) ABSL_EXCLUSIVE_LOCKS_REQUIRED(gen_mu_);
  // The event whose work is to blame for a failure of `kind` (0: none), from the executor's
  // report (`stream`, certain when `definite`), the streams' launches in flight and the
  // waits that were owed. Call before the generation moves on.
  uint64_t FindCulprit(const std::string& kind, uint64_t stream, bool definite,
                       const std::vector<std::shared_ptr<Pending>>& owed);
  // What the culprit's wait returns: ABORTED for a fault, DEADLINE_EXCEEDED for a hang.
  absl::Status CulpritError(const std::string& kind, const std::string& error) const;
  // Sends `request` (and, first, what is held: in the same datagram when it fits). `heard`:
  // the caller passes on this send's error, so a datagram holding `request` alone that
  // fails to go is its caller's to report (else it is lost: see SendInTurn).
  absl::Status SendOn(Executor& executor, executor::Request& request, int fd = -1,
                      bool heard = false) ABSL_LOCKS_EXCLUDED(executor.send_mu);
  // Holds one-way `request` back, to go with the next send (sends what is held first when
  // it would not fit in one datagram); takes its content (`request` is left empty). For
  // requests nothing waits on by themselves: defining and freeing buffers, destroying
  // events, and stream work inside a DeviceBatch.
  void HoldOn(Executor& executor, executor::Request& request, bool work = false)
      ABSL_LOCKS_EXCLUDED(executor.send_mu);
  // Stream work (a copy, fill, op, launch or event record): held while this thread is in a
  // DeviceBatch of this device, else sent; `request` may be left empty.
  void SendWork(Executor& executor, executor::Request& request)
      ABSL_LOCKS_EXCLUDED(executor.send_mu);
  // Sends what is held, if anything (`only_work`: only if stream work is among it).
  // Returns once what was handed over before it has been sent (except when `only_work` finds
  // no stream work held: it returns at once, and later sends still go after what was taken).
  void FlushHeld(Executor& executor, bool only_work = false) ABSL_LOCKS_EXCLUDED(executor.send_mu);
  // Takes what is held into `out` (empty before) as the next datagram, with its ticket;
  // nothing when nothing is held.
  std::optional<uint64_t> TakeHeldLocked(Executor& executor, executor::Request& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor.send_mu);
  // Hands datagram `ticket` to the outbox, to be sent once every earlier ticket's has gone,
  // and sends what is ready when nobody is sending. Every ticket taken must come here (one
  // that cannot be encoded still ends its turn). Returns the encoding's error, else, when
  // `fd` >= 0 (it waits until its datagram is sent) or this thread sent it, its send's;
  // otherwise OK. `orphans`: the datagram carries requests whose callers do not hear of its
  // send (held one-way requests, work whose send error is ignored). Such a datagram that
  // fails to go while the executor lives on (not UNAVAILABLE), whichever thread sends it, is
  // lost: the channel ends there, so nothing later reaches that executor, and the executor
  // is replaced, which answers whatever waits (UNAVAILABLE: the executor is gone, and its
  // end does the same).
  absl::Status SendInTurn(Executor& executor, uint64_t ticket, const executor::Request& request,
                          int fd = -1, bool orphans = true)
      ABSL_LOCKS_EXCLUDED(executor.send_mu, executor.turn_mu);
  absl::Status SendCounted(Executor& executor, const std::string& bytes, int fd = -1);
  bool InBatch() const;

  // --- Memory ------------------------------------------------------------------------------
  class DeviceSource;
  class HostSource;
  absl::Status EnsureSegmentMapped(const Segment& segment);
  // The request that makes `id` the executor's name for a zero-byte buffer.
  static executor::Request DefineZeroBytes(uint64_t id);
  // A new buffer over `block`: its segment mapped in the executor (again, after a restart
  // that came between) and entered in the tables (`counted` in the used bytes). Work names
  // it by its place (PlaceOf); a zero-byte one (address 0) is defined by id instead.
  absl::StatusOr<uint64_t> AddBuffer(const PoolBlock& block, int64_t bytes, bool counted);
  // `id`'s size, and in `place` (when not null) where work names it: a buffer of the device
  // pool by its range of a segment, which needs no definition in the executor; a zero-byte
  // or imported one by id alone (`place` left as it is). NOT_FOUND for an unknown buffer.
  absl::StatusOr<int64_t> LookUp(uint64_t id, executor::Place* place) ABSL_LOCKS_EXCLUDED(mu_);
  void OnDeviceSegmentUnmapped(const Segment& segment);
  // Maps host memory (its descriptor `fd`) into the executor; `owned`: the host pool's
  // segment, unmapped here when it goes.
  absl::StatusOr<executor::HostRange> MapHostMemory(char* data, int64_t bytes, ScopedFd fd,
                                                    bool owned);
  void UnmapHostMemory(uint64_t key);
  std::optional<executor::HostRange> TranslateHost(const void* data, int64_t bytes);
  // Stream work: bookkeeping of staging blocks and launches, under mu_.
  // Sends stream work (a copy, op or launch), giving it the stream's next seq; a staged
  // copy's block (and for device-to-host, where its bytes go) and a launch's kernel name are
  // recorded with it.
  absl::Status EnqueueCopy(executor::Request& request, uint64_t stream, uint64_t staging,
                           void* fixup_dst, int64_t bytes, const std::string* launch = nullptr);
  absl::StatusOr<std::shared_ptr<absl::Mutex>> StreamOrder(uint64_t stream);
  // A copy between `buffer` and host memory at `host` (read when `to_device`, else written):
  // zero-copy when the executor maps that memory, else staged.
  absl::Status EnqueueHostCopy(BufferId buffer, int64_t offset, void* host, int64_t bytes,
                               StreamId stream, bool to_device);
  RemoteDevice* device_ = nullptr;  // the device this is the inside of
  // A wait for the stream's work up to `seq` returned (`ok`: successfully, from the
  // executor of `generation`): its staged copies are done. A device-to-host one is copied
  // out only when the wait succeeded on the executor the copy was sent to: a copy another
  // executor was to make may never have run, and its destination may belong to someone
  // else by now (its request failed). Their blocks go back to the pool either way.
  void SettleStream(uint64_t stream, uint64_t seq, bool ok, uint64_t generation);

  struct Buffer {
    int64_t bytes = 0;
    PoolBlock block;  // address 0: zero bytes or imported; else what work names (PlaceOf)
    bool imported = false;
    ScopedFd import_fd;  // for replay
    int64_t import_allocation_bytes = 0;
    std::string import_ipc_handle;
    int64_t import_offset = 0;
  };
  // Where work names `buffer`, a buffer of the device pool (block.address != 0).
  static void PlaceOf(const Buffer& buffer, executor::Place& place) {
    place.set_segment(buffer.block.segment.handle);
    place.set_offset(static_cast<int64_t>(buffer.block.address - buffer.block.segment.address));
    place.set_bytes(buffer.bytes);
  }
  struct HostSegment {
    char* data = nullptr;
    int64_t bytes = 0;
    ScopedFd fd;
    bool owned = false;  // a segment of the host pool (gpukitd unmaps it) or a client's
  };
  struct Staged {
    uint64_t seq = 0;         // the stream's work counter when it was enqueued
    uint64_t generation = 0;  // of the executor it was sent to
    uint64_t block = 0;
    void* dst = nullptr;  // device-to-host: where the bytes go once the work ran
    int64_t bytes = 0;
  };
  struct Stream {
    StreamOptions options;
    int sm_count = 0;  // the executor's StreamSmCount, from CreateStream's reply; 0: unknown
    uint64_t next_seq = 1;
    uint64_t completed_seq = 0;
    uint64_t launch_seq = 0;  // the last launch's seq
    std::string launch_name;
    std::deque<Staged> staged;
    // Held from taking a seq to sending the work (EnqueueCopy, RecordEvent).
    std::shared_ptr<absl::Mutex> order = std::make_shared<absl::Mutex>();
    uint64_t last_event_seq = 0;  // the seq of the last event recorded on it
    int settling = 0;             // threads copying staged bytes of it out (SettleStream)
    // Work numbered below this was sent to an executor that a restart replaced: unless a
    // wait of that executor confirmed it, it may not have run.
    uint64_t lost_below = 0;
  };
  struct Event {
    uint64_t stream = 0;
    uint64_t seq = 0;
    uint64_t generation = 0;
    bool completed = false;
    uint64_t elapsed_from = 0;  // the device time from that event, as the wait's reply said
    int64_t elapsed_ns = 0;
    uint64_t previous_seq = 0;  // the stream's event before it: its wait covers what is between
  };
  // A new event of `stream` (gpukitd's `stream_id`) at its next place: the event tables'
  // part of RecordEvent. Returns its id.
  uint64_t AddEventLocked(Stream& stream, uint64_t stream_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct Module {
    std::string image;
  };
  struct Function {
    uint64_t module = 0;
    std::string name;
  };

  std::unique_ptr<MemoryPool> device_pool_;
  ShareableSegmentSource* memory_ = nullptr;  // owned by device_pool_'s source
  std::unique_ptr<MemoryPool> host_pool_;

  // Serialises the first mapping of each device segment in an executor.
  absl::Mutex map_mu_ ABSL_ACQUIRED_BEFORE(gen_mu_);
  // Shared: a call sending to the serving executor; exclusive: a restart.
  mutable absl::Mutex gen_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::shared_ptr<Executor> active_ ABSL_GUARDED_BY(gen_mu_);
  absl::Status broken_ ABSL_GUARDED_BY(gen_mu_);  // no executor could be started

  mutable absl::Mutex mu_;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<uint64_t> mapped_segments_ ABSL_GUARDED_BY(mu_);  // in the active one
  absl::flat_hash_map<uint64_t, Segment> live_segments_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Buffer> buffers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, HostSegment> host_segments_ ABSL_GUARDED_BY(mu_);
  std::map<uintptr_t, uint64_t> host_ranges_ ABSL_GUARDED_BY(mu_);  // start -> key
  absl::flat_hash_map<uint64_t, Stream> streams_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Event> events_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Module> modules_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Function> functions_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<uint64_t, std::string>, uint64_t> function_ids_ ABSL_GUARDED_BY(mu_);
  // A culprit event whose wait had not come when its executor was replaced: that wait's
  // answer.
  absl::flat_hash_map<uint64_t, absl::Status> culprit_errors_ ABSL_GUARDED_BY(mu_);
  uint64_t export_stream_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Mutex export_mu_;  // one export (perhaps a move) at a time

  absl::Mutex pending_mu_;
  uint64_t next_seq_ ABSL_GUARDED_BY(pending_mu_) = 1;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Pending>> pending_ ABSL_GUARDED_BY(pending_mu_);
  // pending_.size(), stored after each change: while replies are owed the readers poll.
  std::atomic<int> replies_owed_{0};

  // The supervisor: restarts, the standby, the hang watchdog.
  absl::Mutex supervisor_mu_;
  bool stopping_ ABSL_GUARDED_BY(supervisor_mu_) = false;
  struct Failure {
    const Executor* executor = nullptr;
    std::string kind, error;
    uint64_t stream = 0;
    bool definite = false;  // `stream` is certainly where the fault lies
    uint64_t event = 0;     // ... and the work before this event, when set
  };
  std::optional<Failure> failure_ ABSL_GUARDED_BY(supervisor_mu_);
  std::shared_ptr<Executor> standby_ ABSL_GUARDED_BY(supervisor_mu_);
  ExecutorState state_ ABSL_GUARDED_BY(supervisor_mu_);
  std::thread supervisor_;

  // Requests sent with a seq (each a round trip to the executor): ExecutorState::round_trips.
  std::atomic<int64_t> round_trips_{0};
  // Datagrams sent to the executors: ExecutorState::messages.
  std::atomic<int64_t> messages_{0};
  std::atomic<int64_t> wakes_{0};
#if GPUKIT_FAULT_INJECTION
  // FailSendsForTesting: the next `failing_sends_` datagrams fail with failing_send_error_
  // (the count is written under failing_sends_mu_, read without it first).
  absl::Mutex failing_sends_mu_;
  std::atomic<int> failing_sends_{0};
  absl::Status failing_send_error_ ABSL_GUARDED_BY(failing_sends_mu_);
#endif
};

// The device pool's source: the owner's segments, unmapped in the executor when the pool
// gives one back.
class RemoteDevice::Impl::DeviceSource final : public SegmentSource {
 public:
  DeviceSource(Impl& impl, std::unique_ptr<ShareableSegmentSource> memory)
      : impl_(impl), memory_(std::move(memory)) {}
  int64_t granularity_bytes() const override { return memory_->granularity_bytes(); }
  absl::StatusOr<Segment> Map(int64_t bytes) override {
    GPUKIT_ASSIGN_OR_RETURN(Segment segment, memory_->Map(bytes));
    absl::MutexLock lock(&impl_.mu_);
    impl_.live_segments_[segment.handle] = segment;
    return segment;
  }
  void Unmap(const Segment& segment) override {
    impl_.OnDeviceSegmentUnmapped(segment);
    memory_->Unmap(segment);
  }
  ShareableSegmentSource* memory() const { return memory_.get(); }

 private:
  Impl& impl_;
  const std::unique_ptr<ShareableSegmentSource> memory_;
};

// The host pool's source: memfd segments mapped here and in the executor.
class RemoteDevice::Impl::HostSource final : public SegmentSource {
 public:
  explicit HostSource(Impl& impl) : impl_(impl) {}
  int64_t granularity_bytes() const override { return int64_t{2} << 20; }
  absl::StatusOr<Segment> Map(int64_t bytes) override {
    GPUKIT_ASSIGN_OR_RETURN(ScopedFd fd, CreateSharedMemory("gpukit-host", bytes));
    void* data = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED,
                        fd.get(), 0);
    if (data == MAP_FAILED) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot map ", FormatBytes(bytes),
                                                       " of host memory: ", std::strerror(errno)));
    }
    absl::StatusOr<executor::HostRange> range =
        impl_.MapHostMemory(static_cast<char*>(data), bytes, std::move(fd), /*owned=*/true);
    if (!range.ok()) {
      ::munmap(data, static_cast<size_t>(bytes));
      return range.status();
    }
    return Segment{reinterpret_cast<uint64_t>(data), bytes, range->segment()};
  }
  void Unmap(const Segment& segment) override { impl_.UnmapHostMemory(segment.handle); }

 private:
  Impl& impl_;
};

// --- Start and stop ---------------------------------------------------------------------------

absl::Status RemoteDevice::Impl::Start() {
  if (options_.memory == nullptr) return absl::InvalidArgumentError("RemoteDevice needs memory");
  memory_ = options_.memory.get();
  GPUKIT_ASSIGN_OR_RETURN(device_pool_, MemoryPool::Create(std::make_unique<DeviceSource>(
                                                               *this, std::move(options_.memory)),
                                                           options_.memory_pool));
  GPUKIT_ASSIGN_OR_RETURN(host_pool_,
                          MemoryPool::Create(std::make_unique<HostSource>(*this),
                                             {.small_block_limit_bytes = int64_t{1} << 20,
                                              .max_cached_bytes = options_.host_cache_bytes}));
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Executor> first, Spawn());
  GPUKIT_RETURN_IF_ERROR(AwaitHello(*first));
  const executor::Hello& hello = first->hello;
  properties_.index = hello.index();
  properties_.name = hello.name();
  properties_.backend = static_cast<BackendKind>(hello.backend());
  properties_.memory_total_bytes = memory_->capacity_bytes();
  properties_.kernel_arch = hello.kernel_arch();
  for (int i = 0; i < 3 && i < hello.max_grid_dim_size() && i < hello.max_block_dim_size(); ++i) {
    properties_.max_grid_dim[i] = hello.max_grid_dim(i);
    properties_.max_block_dim[i] = hello.max_block_dim(i);
  }
  properties_.max_threads_per_block = hello.max_threads_per_block();
  properties_.max_shared_memory_per_block_optin_bytes =
      hello.max_shared_memory_per_block_optin_bytes();
  supported_ops_.insert(hello.supported_ops().begin(), hello.supported_ops().end());
  executor::Request activate;
  activate.mutable_activate();
  GPUKIT_RETURN_IF_ERROR(SendOn(*first, activate, -1, /*heard=*/true));
  {
    absl::MutexLock lock(&gen_mu_);
    active_ = first;
  }
  {
    absl::MutexLock lock(&supervisor_mu_);
    state_.pid = first->pid;
  }
  supervisor_ = std::thread([this] {
    NameThisThread("gk-exec-watch");
    Supervise();
  });
  return absl::OkStatus();
}

RemoteDevice::Impl::~Impl() {
  {
    absl::MutexLock lock(&supervisor_mu_);
    stopping_ = true;
  }
  if (supervisor_.joinable()) supervisor_.join();
  // The executors first (killed: nothing they hold is worth an orderly end), then the pools,
  // whose sources find no executor to tell.
  std::shared_ptr<Executor> active;
  {
    absl::MutexLock lock(&gen_mu_);
    active = std::move(active_);
    broken_ = absl::CancelledError("the device is shutting down");
  }
  std::shared_ptr<Executor> standby;
  {
    absl::MutexLock lock(&supervisor_mu_);
    standby = std::move(standby_);
  }
  active.reset();
  standby.reset();
  {
    absl::MutexLock lock(&pending_mu_);
    for (auto& [seq, pending] : pending_) pending->Complete(absl::CancelledError("shutting down"));
    pending_.clear();
    NoteOwedLocked();
  }
  host_pool_.reset();
  device_pool_.reset();
  absl::MutexLock lock(&mu_);
  for (auto& [key, segment] : host_segments_) {
    if (segment.owned) ::munmap(segment.data, static_cast<size_t>(segment.bytes));
  }
}

absl::StatusOr<std::shared_ptr<Executor>> RemoteDevice::Impl::Spawn() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("socketpair for the executor: ", std::strerror(errno)));
  }
  ScopedFd ours(fds[0]);
  ScopedFd theirs(fds[1]);
  std::vector<std::string> args = {options_.executor_path};
  args.insert(args.end(), options_.executor_args.begin(), options_.executor_args.end());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, theirs.get(), 3);
  pid_t pid = -1;
  const int error =
      posix_spawn(&pid, options_.executor_path.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot start the device executor ", options_.executor_path, ": ", std::strerror(error)));
  }
  auto executor = std::make_shared<Executor>(&replies_owed_);
  executor->pid = pid;
  executor->socket = std::move(ours);
  Executor* raw = executor.get();
  executor->reader = std::thread([this, raw] {
    NameThisThread("gk-exec-reply");
    ReadLoop(raw);
  });
  return executor;
}

absl::Status RemoteDevice::Impl::AwaitHello(Executor& executor) {
  if (!executor.hello_received.WaitForNotificationWithTimeout(options_.start_timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("the device executor did not open its device in ",
                     absl::FormatDuration(options_.start_timeout)));
  }
  if (executor.hello.error_code() != 0 || executor.hello.name().empty()) {
    return absl::FailedPreconditionError(executor.hello.error().empty()
                                             ? "the device executor exited before it was ready"
                                             : executor.hello.error());
  }
  return absl::OkStatus();
}

void RemoteDevice::Impl::ReadLoop(Executor* executor) {
  for (;;) {
    executor::FromExecutor message;
    absl::StatusOr<ScopedFd> fd =
        ReceiveExecutorMessage(executor->socket.get(), message, &executor->activity);
    if (!fd.ok()) break;
    executor->activity.Touch();
    switch (message.body_case()) {
      case executor::FromExecutor::kHello:
        if (!executor->hello_received.HasBeenNotified()) {
          executor->hello = message.hello();
          executor->hello_received.Notify();
        }
        break;
      case executor::FromExecutor::kReply: {
        std::shared_ptr<Pending> pending;
        {
          absl::MutexLock lock(&pending_mu_);
          auto it = pending_.find(message.reply().seq());
          if (it != pending_.end()) {
            pending = std::move(it->second);
            pending_.erase(it);
            NoteOwedLocked();
          }
        }
        if (pending != nullptr) {
          pending->elapsed_from = message.reply().elapsed_from();
          pending->elapsed_ns = message.reply().elapsed_ns();
          pending->pair_elapsed_ns.assign(message.reply().pair_elapsed_ns().begin(),
                                          message.reply().pair_elapsed_ns().end());
          pending->pair_status.clear();
          for (int i = 0; i < message.reply().pair_elapsed_ns_size(); ++i) {
            pending->pair_status.push_back(PairStatus(message.reply(), i));
          }
          pending->Complete(ReplyStatus(message.reply()), message.reply().int_value());
        }
        break;
      }
      case executor::FromExecutor::kFault:
        ReportFailure(executor, "fault", message.fault().error(), message.fault().stream(),
                      message.fault().definite(), message.fault().event());
        break;
      case executor::FromExecutor::BODY_NOT_SET:
        break;
    }
  }
  if (!executor->hello_received.HasBeenNotified()) executor->hello_received.Notify();
  executor->closed.Notify();
  ReportFailure(executor, "exited", "");
}

void RemoteDevice::Impl::ReportFailure(const Executor* failed, std::string kind, std::string error,
                                       uint64_t stream, bool definite, uint64_t event) {
  absl::MutexLock lock(&supervisor_mu_);
  // The first report of a failure wins: a fault is followed by the channel's end.
  if (failure_.has_value()) return;
  failure_ = Failure{failed, std::move(kind), std::move(error), stream, definite, event};
}

namespace {

// What a held batch may grow to (a datagram holds kMaxExecutorMessageBytes).
constexpr size_t kMaxHeldBytes = 32 * 1024;
constexpr int kMaxHeldRequests = 256;

// The device whose DeviceBatch this thread is in, and how deep; a batch begun on another
// device meanwhile is not held (`foreign` counts those, to end them in turn).
struct ThreadBatch {
  const RemoteDevice::Impl* device = nullptr;
  int depth = 0;
  int foreign = 0;
};
thread_local ThreadBatch thread_batch;

}  // namespace

bool RemoteDevice::Impl::InBatch() const { return thread_batch.device == this; }

absl::Status RemoteDevice::Impl::SendCounted(Executor& executor, const std::string& bytes, int fd) {
#if GPUKIT_FAULT_INJECTION
  if (failing_sends_.load(std::memory_order_relaxed) > 0) {
    absl::MutexLock lock(&failing_sends_mu_);
    if (failing_sends_.load(std::memory_order_relaxed) > 0) {
      failing_sends_.fetch_sub(1, std::memory_order_relaxed);
      return failing_send_error_;
    }
  }
#endif
  messages_.fetch_add(1, std::memory_order_relaxed);
  executor.activity.Touch();
  return SendExecutorBytes(executor.socket.get(), bytes, fd);
}

std::optional<uint64_t> RemoteDevice::Impl::TakeHeldLocked(Executor& executor,
                                                           executor::Request& out) {
  if (executor.held.batch().requests_size() == 0) return std::nullopt;
  out.Swap(&executor.held);  // leaves `held` empty
  executor.held_bytes = 0;
  executor.held_work = false;
  return executor.tickets++;
}

absl::Status RemoteDevice::Impl::SendInTurn(Executor& executor, uint64_t ticket,
                                            const executor::Request& request, int fd,
                                            bool orphans) {
  Executor::Outgoing out{.ready = true, .fd = fd, .orphans = orphans};
  absl::StatusOr<std::string> bytes = EncodeExecutorMessage(request);  // outside the lock
  if (bytes.ok()) out.bytes = *std::move(bytes);
  absl::Status own = bytes.status();  // this datagram's outcome, where this thread learns it
  bool sent_here = false;
  // A sender of a descriptor waits for its datagram's own outcome.
  const bool waits = fd >= 0 && own.ok();
  if (waits) out.result = std::make_shared<absl::Status>();
  std::shared_ptr<absl::Status> result = out.result;
  bool lost = false;  // a datagram failed to go while the executor lives on
  absl::ReleasableMutexLock lock(&executor.turn_mu);
  const size_t index = static_cast<size_t>(ticket - executor.taken);
  if (executor.outbox.size() <= index) executor.outbox.resize(index + 1);
  executor.outbox[index] = std::move(out);
  if (!executor.sending) {
    executor.sending = true;
    while (!executor.outbox.empty() && executor.outbox.front().ready) {
      Executor::Outgoing next = std::move(executor.outbox.front());
      executor.outbox.pop_front();
      const uint64_t next_ticket = executor.taken++;
      executor.turn_mu.Unlock();
      absl::Status sent =
          next.bytes.empty() ? absl::OkStatus() : SendCounted(executor, next.bytes, next.fd);
      executor.turn_mu.Lock();
      if (next.orphans && !sent.ok() && sent.code() != absl::StatusCode::kUnavailable && !lost) {
        // Lost while the executor lives on. It may have carried other threads' requests
        // (held one-way requests, work), whose callers have returned and may wait for
        // replies that cannot come, and the executor's tables now lack what it carried, so
        // nothing more may reach this executor: its channel ends here, as its own end would
        // end it (every later send fails as UNAVAILABLE), and it is replaced, which answers
        // what waits.
        lost = true;
        ReportFailure(&executor, "exited",
                      absl::StrCat("a request to the executor was lost: ", sent.message()));
        ::shutdown(executor.socket.get(), SHUT_WR);  // replies already on their way still come
      }
      if (next.result != nullptr) *next.result = sent;
      if (next_ticket == ticket) {
        sent_here = true;
        if (own.ok()) own = sent;
      }
      ++executor.sent;
    }
    executor.sending = false;
  }
  if (waits && !sent_here) {
    auto gone = [&executor, ticket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor.turn_mu) {
      return executor.sent > ticket;
    };
    executor.turn_mu.Await(absl::Condition(&gone));
    own = *result;
  }
  lock.Release();
  return own;
}

void RemoteDevice::Impl::FlushHeld(Executor& executor, bool only_work) {
  executor::Request batch;
  std::optional<uint64_t> ticket;
  uint64_t handed_over;
  {
    absl::MutexLock lock(&executor.send_mu);
    if (only_work && !executor.held_work) return;
    ticket = TakeHeldLocked(executor, batch);
    handed_over = executor.tickets;
  }
  if (ticket.has_value()) {
    SendInTurn(executor, *ticket, batch).IgnoreError();
    return;
  }
  // Nothing held, but another thread may be sending what it took: wait for that.
  absl::MutexLock lock(&executor.turn_mu);
  auto all_sent = [&executor, handed_over]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor.turn_mu) {
    return executor.sent >= handed_over;
  };
  executor.turn_mu.Await(absl::Condition(&all_sent));
}

absl::Status RemoteDevice::Impl::SendOn(Executor& executor, executor::Request& request, int fd,
                                        bool heard) {
  executor::Request batch;
  std::optional<uint64_t> batch_ticket;
  std::optional<uint64_t> request_ticket;
  // Whether it may join what is held (measured before the lock, as HoldOn does).
  const size_t bytes = fd < 0 ? request.ByteSizeLong() : kMaxHeldBytes + 1;
  {
    absl::MutexLock lock(&executor.send_mu);
    const int held = executor.held.batch().requests_size();
    if (held > 0 && held < kMaxHeldRequests && executor.held_bytes + bytes <= kMaxHeldBytes) {
      // One datagram: what was held, then the request.
      *executor.held.mutable_batch()->add_requests() = request;
      batch_ticket = TakeHeldLocked(executor, batch);
    } else {
      batch_ticket = TakeHeldLocked(executor, batch);
      request_ticket = executor.tickets++;
    }
  }
  // A send failing here means the executor is gone: the restart settles what was held.
  absl::Status sent = absl::OkStatus();
  if (batch_ticket.has_value()) sent = SendInTurn(executor, *batch_ticket, batch);
  if (request_ticket.has_value()) {
    sent = SendInTurn(executor, *request_ticket, request, fd, /*orphans=*/!heard);
  }
  return sent;
}

void RemoteDevice::Impl::HoldOn(Executor& executor, executor::Request& request, bool work) {
  const size_t bytes = request.ByteSizeLong();
  executor::Request full;
  std::optional<uint64_t> ticket;
  {
    absl::MutexLock lock(&executor.send_mu);
    if (executor.held.batch().requests_size() >= kMaxHeldRequests ||
        executor.held_bytes + bytes > kMaxHeldBytes) {
      ticket = TakeHeldLocked(executor, full);
    }
    executor.held.mutable_batch()->add_requests()->Swap(&request);  // no copy under the lock
    executor.held_bytes += bytes;
    executor.held_work = executor.held_work || work;
  }
  if (ticket.has_value()) SendInTurn(executor, *ticket, full).IgnoreError();
}

void RemoteDevice::Impl::SendWork(Executor& executor, executor::Request& request) {
  if (InBatch()) {
    HoldOn(executor, request, /*work=*/true);
  } else {
    SendOn(executor, request).IgnoreError();
  }
}

absl::Status RemoteDevice::Impl::Send(executor::Request& request, int fd) {
  absl::ReaderMutexLock lock(&gen_mu_);
  if (active_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("the device executor is not running: ", broken_.message()));
  }
  // A send to an executor that just died fails; the failure is the supervisor's to handle,
  // and a caller waiting for a reply gets its error from the restart.
  return SendOn(*active_, request, fd);
}

void RemoteDevice::Impl::Hold(executor::Request& request) {
  absl::ReaderMutexLock lock(&gen_mu_);
  if (active_ != nullptr) HoldOn(*active_, request);
}

std::shared_ptr<Pending> RemoteDevice::Impl::Register(uint64_t* seq,
                                                      std::shared_ptr<Pending> pending) {
  if (pending == nullptr) pending = std::make_shared<Pending>();
  absl::MutexLock lock(&pending_mu_);
  *seq = next_seq_++;
  pending_[*seq] = pending;
  NoteOwedLocked();
  return pending;
}

void RemoteDevice::Impl::Unregister(uint64_t seq) {
  absl::MutexLock lock(&pending_mu_);
  pending_.erase(seq);
  NoteOwedLocked();
}

absl::StatusOr<int64_t> RemoteDevice::Impl::Call(executor::Request& request, int fd,
                                                 std::shared_ptr<Pending> pending,
                                                 uint64_t generation) {
  uint64_t seq = 0;
  pending = Register(&seq, std::move(pending));
  request.set_seq(seq);
  {
    absl::ReaderMutexLock lock(&gen_mu_);
    if (active_ == nullptr) {
      Unregister(seq);
      return absl::UnavailableError(
          absl::StrCat("the device executor is not running: ", broken_.message()));
    }
    if (generation != 0) {
      bool stale;
      {
        absl::MutexLock state(&mu_);
        stale = generation != generation_;
      }
      if (stale) {
        // A restart ran since the caller looked (it holds gen_mu_ throughout): if it found
        // `pending` registered it has answered it, else the answer is the restart's.
        Unregister(seq);
        if (pending->done.HasBeenNotified()) return pending->status;
        return RestartedError();
      }
    }
    absl::Status sent = SendOn(*active_, request, fd, /*heard=*/true);
    active_->activity.Ring();  // its reader polls for the reply, if it had gone to sleep
    round_trips_.fetch_add(1, std::memory_order_relaxed);
    if (!sent.ok() && sent.code() != absl::StatusCode::kUnavailable) {
      Unregister(seq);
      return sent;
    }
    // UNAVAILABLE: the executor is gone; the restart completes `pending` with its error.
  }
  pending->Wait();
  if (!pending->status.ok()) return pending->status;
  return pending->value;
}

// --- The supervisor -----------------------------------------------------------------------------

void RemoteDevice::Impl::Supervise() {
  absl::Time last_retry = absl::Now();
  for (;;) {
    std::optional<Failure> failure;
    bool need_standby = false;
    {
      absl::MutexLock lock(&supervisor_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(supervisor_mu_) {
        return stopping_ || failure_.has_value();
      };
      supervisor_mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(100));
      if (stopping_) return;
      failure = std::exchange(failure_, std::nullopt);
      need_standby = options_.standby && standby_ == nullptr;
    }
    {
      bool broken;
      {
        absl::ReaderMutexLock lock(&gen_mu_);
        broken = active_ == nullptr;
      }
      if (broken && absl::Now() - last_retry > absl::Seconds(5)) {
        last_retry = absl::Now();
        Recover("retry", "", 0, false, 0);
        continue;
      }
    }
    if (failure.has_value()) {
      bool is_active = false;
      {
        absl::ReaderMutexLock lock(&gen_mu_);
        is_active = active_ != nullptr && active_.get() == failure->executor;
      }
      if (is_active) {
        Recover(failure->kind, failure->error, failure->stream, failure->definite, failure->event);
      } else {
        absl::MutexLock lock(&supervisor_mu_);
        if (standby_ != nullptr && standby_.get() == failure->executor) {
          spdlog::warn("device {}: the standby executor (pid {}) ended; starting another",
                       properties_.index, standby_->pid);
          standby_.reset();
          state_.standby_ready = false;
        }
      }
      continue;
    }
    // What is held goes out at least once a tick (an idle device's frees and destroys).
    {
      absl::ReaderMutexLock gen(&gen_mu_);
      if (active_ != nullptr) FlushHeld(*active_);
    }
    // The hang watchdog: a wait older than the launch deadline.
    {
      std::shared_ptr<Pending> hung;
      const absl::Time now = absl::Now();
      {
        // Released before gen_mu_ is taken below: gen_mu_ comes before pending_mu_ (Call,
        // Recover).
        absl::MutexLock lock(&pending_mu_);
        for (const auto& [seq, pending] : pending_) {
          if (pending->is_wait && now - pending->started > options_.launch_deadline) {
            hung = pending;
            break;
          }
        }
      }
      if (hung != nullptr) {
        std::shared_ptr<Executor> active;
        {
          absl::ReaderMutexLock gen(&gen_mu_);
          active = active_;
        }
        if (active != nullptr) {
          // Marked, so the restart gives this wait DEADLINE_EXCEEDED.
          hung->hung = true;
          absl::MutexLock supervisor(&supervisor_mu_);
          if (!failure_.has_value()) {
            failure_ = Failure{active.get(), "hang",
                               absl::StrCat("work ran past the launch deadline of ",
                                            absl::FormatDuration(options_.launch_deadline)),
                               hung->stream};
          }
        }
        continue;
      }
    }
    if (need_standby) {
      absl::StatusOr<std::shared_ptr<Executor>> standby = Spawn();
      absl::Status ready = standby.ok() ? AwaitHello(**standby) : standby.status();
      if (ready.ok()) {
        absl::MutexLock lock(&supervisor_mu_);
        standby_ = *std::move(standby);
        state_.standby_ready = true;
      } else {
        spdlog::warn("device {}: cannot start a standby executor: {}", properties_.index,
                     std::string(ready.message()));
      }
    }
  }
}

void RemoteDevice::Impl::Recover(const std::string& kind, const std::string& error, uint64_t stream,
                                 bool definite, uint64_t event) {
  const absl::Time started = absl::Now();
  std::shared_ptr<Executor> failed;
  {
    absl::ReaderMutexLock lock(&gen_mu_);
    failed = active_;
  }
  if (failed != nullptr) {
    // Killed before taking the lock: a send blocked on it fails, releasing its shared hold.
    ::kill(failed->pid, SIGKILL);
  }
  absl::MutexLock gen(&gen_mu_);
  if (failed == nullptr) {
    // No executor runs (the last restart failed): try again.
    StartNext(started);
    return;
  }
  // Reaped before anything it may have touched is answered or reused: work a GPU had
  // queued for a killed process goes on running until the driver has torn its context down
  // (hundreds of milliseconds on an H100; the process is reaped only after), and it could
  // write into memory that a failed request freed and another one reused. The restart
  // takes that long; correctness first (measured in docs/benchmarks.md).
  const pid_t failed_pid = failed->pid;
  failed->pid = -1;
  int wait_status = 0;
  ::waitpid(failed_pid, &wait_status, 0);
  const std::string exit = DescribeExit(wait_status);
  // An executor ended here, for a request that was lost (SendInTurn): none of its callers'
  // work failed. An executor that exited says how; one ended here says why too.
  const bool lost_request = kind == "exited" && !error.empty();
  const std::string ended = lost_request ? absl::StrCat(error, "; ", exit) : exit;
  const std::string what = kind != "exited"
                               ? absl::StrCat("the device executor's ", kind, ": ", error)
                           : lost_request ? absl::StrCat(error, "; the device executor ", exit)
                                          : absl::StrCat("the device executor ", exit);
  spdlog::warn("device {}: {} (pid {}); restarting it", properties_.index, what, failed_pid);

  // Fail every reply the executor owed. One wait is the culprit of a fault or a hang.
  std::vector<std::shared_ptr<Pending>> owed;
  {
    absl::MutexLock lock(&pending_mu_);
    for (auto& [seq, pending] : pending_) owed.push_back(std::move(pending));
    pending_.clear();
    NoteOwedLocked();
  }
  // The culprit: the event whose work faulted, hung or was running when the executor died.
  // Its wait (now or, if it has not come yet, later) gets the fault's own error.
  uint64_t culprit_event = 0;
  if (definite && event != 0) {
    culprit_event = event;
  } else if (!lost_request) {
    culprit_event = FindCulprit(kind, stream, definite, owed);
  }
  std::shared_ptr<Pending> culprit;
  for (const auto& pending : owed) {
    if (pending->is_wait && pending->event == culprit_event) culprit = pending;
  }
  for (const auto& pending : owed) {
    if (pending == culprit && (kind == "fault" || kind == "hang")) {
      pending->Complete(CulpritError(kind, error));
    } else {
      // The work running when the executor died is named in the last fault ("exited"), but
      // a death (the OOM killer, an operator's kill) is not taken for the tenant's doing.
      pending->Complete(WithKind(
          absl::UnavailableError(absl::StrCat(
              "the device executor restarted (", what,
              ") while this work was queued or running, so it may not have run; its inputs "
              "are intact and a retry is safe")),
          pending == culprit ? "exited" : "restart"));
    }
  }
  if (culprit == nullptr && culprit_event != 0 && (kind == "fault" || kind == "hang")) {
    absl::MutexLock lock(&mu_);
    culprit_errors_[culprit_event] = CulpritError(kind, error);
  }
  failed.reset();
  {
    absl::MutexLock lock(&supervisor_mu_);
    state_.pid = 0;
    ++state_.restarts;
    state_.last_fault = ExecutorFaultRecord{absl::Now(), kind, kind == "exited" ? ended : error};
  }
  StartNext(started);
}

void RemoteDevice::Impl::StartNext(absl::Time started) {
  {
    absl::MutexLock lock(&mu_);
    ++generation_;
    mapped_segments_.clear();
  }
  // The next executor: the standby if there is one, else a new one; a few tries.
  absl::Status status;
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::shared_ptr<Executor> next;
    {
      absl::MutexLock lock(&supervisor_mu_);
      next = std::move(standby_);
      state_.standby_ready = false;
    }
    if (next == nullptr || next->closed.HasBeenNotified()) {
      absl::StatusOr<std::shared_ptr<Executor>> spawned = Spawn();
      if (!spawned.ok()) {
        status = spawned.status();
        continue;
      }
      next = *std::move(spawned);
    }
    status = AwaitHello(*next);
    if (status.ok()) {
      executor::Request activate;
      activate.mutable_activate();
      status = SendOn(*next, activate, -1, /*heard=*/true);
    }
    if (status.ok()) {
      active_ = next;
      status = Replay(*next);
    }
    if (status.ok()) break;
    spdlog::error("device {}: the new executor failed: {}", properties_.index,
                  std::string(status.message()));
    active_.reset();
  }
  if (!status.ok()) {
    broken_ = status;
    spdlog::critical("device {}: no executor could be started; the device is unavailable: {}",
                     properties_.index, std::string(status.message()));
    return;
  }
  {
    absl::MutexLock lock(&supervisor_mu_);
    state_.pid = active_->pid;
    // A failure the old executor's channel reported while this ran is not the new one's.
    if (failure_.has_value() && failure_->executor != active_.get()) failure_.reset();
  }
  spdlog::warn("device {}: executor restarted (pid {}) in {}", properties_.index, active_->pid,
               absl::FormatDuration(absl::Now() - started));
}

absl::Status RemoteDevice::Impl::CulpritError(const std::string& kind,
                                              const std::string& error) const {
  if (kind == "hang") {
    return WithKind(absl::DeadlineExceededError(absl::StrCat(
                        "this work ran past the launch deadline of ",
                        absl::FormatDuration(options_.launch_deadline),
                        " and was stopped (the device executor was restarted); the arrays it "
                        "was writing are undefined, all others are intact")),
                    "hang");
  }
  return WithKind(absl::AbortedError(absl::StrCat(
                      "the device faulted running this work (", error,
                      "); the arrays it was writing are undefined, all others are intact; the "
                      "device executor was restarted and the session remains usable")),
                  "fault");
}

uint64_t RemoteDevice::Impl::FindCulprit(const std::string& kind, uint64_t stream, bool definite,
                                         const std::vector<std::shared_ptr<Pending>>& owed) {
  if (kind == "hang") {
    for (const auto& pending : owed) {
      if (pending->hung) return pending->event;
    }
    return 0;
  }
  if (kind == "exited") {
    // No stream is named: the oldest wait's work was the likeliest to be running. Named in
    // the last fault only, never held against its tenant.
    std::shared_ptr<Pending> oldest;
    for (const auto& pending : owed) {
      if (pending->is_wait && (oldest == nullptr || pending->started < oldest->started)) {
        oldest = pending;
      }
    }
    return oldest == nullptr ? 0 : oldest->event;
  }
  if (kind != "fault") return 0;
  // Work on a stream runs in order, so the fault lies in the work before the stream's first
  // event that had not completed. Which stream: the one the executor named when it knows
  // (a device that runs work as it is enqueued); else a CUDA fault, seen by every stream's
  // wait, is blamed on a stream with a kernel launch in flight (gpukit's own ops are not
  // taken for faulty), preferring the one where it was seen; with none, on nobody.
  absl::MutexLock lock(&mu_);
  uint64_t culprit_stream = 0;
  uint64_t after_seq = 0;
  if (definite) {
    if (auto it = streams_.find(stream); it != streams_.end()) {
      culprit_stream = stream;
      after_seq = it->second.completed_seq;
    }
  } else {
    for (const auto& [id, s] : streams_) {
      if (s.launch_seq <= s.completed_seq) continue;
      if (culprit_stream == 0 || id == stream) {
        culprit_stream = id;
        after_seq = s.launch_seq;
      }
    }
  }
  if (culprit_stream == 0) return 0;
  uint64_t culprit = 0;
  uint64_t culprit_seq = 0;
  for (const auto& [id, event] : events_) {
    if (event.stream != culprit_stream || event.completed || event.generation != generation_ ||
        event.seq <= after_seq) {
      continue;
    }
    if (culprit == 0 || event.seq < culprit_seq) {
      culprit = id;
      culprit_seq = event.seq;
    }
  }
  return culprit;
}

absl::Status RemoteDevice::Impl::Replay(Executor& executor) {
  // Everything that must exist before work can run, sent at once; the replies are awaited
  // together.
  std::vector<std::pair<uint64_t, std::shared_ptr<Pending>>> owed;
  auto call = [&](executor::Request& request, int fd) -> absl::Status {
    uint64_t seq = 0;
    std::shared_ptr<Pending> pending = Register(&seq);
    request.set_seq(seq);
    owed.emplace_back(seq, pending);
    return SendOn(executor, request, fd, /*heard=*/true);
  };
  absl::Status sent = [&]() -> absl::Status {
    absl::MutexLock lock(&mu_);
    for (auto& [key, segment] : host_segments_) {
      executor::Request request;
      request.mutable_map_host_segment()->set_key(key);
      request.mutable_map_host_segment()->set_bytes(segment.bytes);
      GPUKIT_RETURN_IF_ERROR(call(request, segment.fd.get()));
    }
    absl::flat_hash_set<uint64_t> segments;
    for (const auto& [id, buffer] : buffers_) {
      if (buffer.block.address != 0) segments.insert(buffer.block.segment.handle);
    }
    for (uint64_t key : segments) {
      auto it = live_segments_.find(key);
      if (it == live_segments_.end()) continue;
      GPUKIT_ASSIGN_OR_RETURN(ScopedFd fd, memory_->Share(it->second));
      executor::Request request;
      request.mutable_map_segment()->set_key(key);
      request.mutable_map_segment()->set_bytes(it->second.bytes);
      GPUKIT_RETURN_IF_ERROR(call(request, fd.get()));
      mapped_segments_.insert(key);
    }
    for (const auto& [id, buffer] : buffers_) {
      if (buffer.block.address != 0) continue;  // named by its place: its segment is mapped
      executor::Request request;
      if (buffer.imported) {
        executor::ImportBuffer& import = *request.mutable_import_buffer();
        import.set_buffer(id);
        import.set_allocation_bytes(buffer.import_allocation_bytes);
        import.set_cuda_ipc_handle(buffer.import_ipc_handle);
        import.set_offset(buffer.import_offset);
        import.set_bytes(buffer.bytes);
        // A client's memory that is gone fails here; its buffer then fails where it is used.
        GPUKIT_RETURN_IF_ERROR(call(request, buffer.import_fd.get()));
        continue;
      }
      request = DefineZeroBytes(id);
      GPUKIT_RETURN_IF_ERROR(SendOn(executor, request, -1, /*heard=*/true));
    }
    for (auto& [id, stream] : streams_) {
      executor::Request request;
      request.mutable_create_stream()->set_stream(id);
      request.mutable_create_stream()->set_priority(static_cast<int32_t>(stream.options.priority));
      request.mutable_create_stream()->set_sm_share(stream.options.sm_share);
      if (stream.options.sm_first) {
        request.mutable_create_stream()->set_sm_first(*stream.options.sm_first);
      }
      GPUKIT_RETURN_IF_ERROR(SendOn(executor, request, -1, /*heard=*/true));
      // Nothing of the old executor's is in flight. Its staged copies are settled by the
      // stream's next wait: copied out only by a wait of the executor that made them. A wait of
      // the new one whose work began before this (its previous event did) fails: part of its
      // work went to the old executor, which may not have run it.
      stream.completed_seq = stream.next_seq;
      stream.lost_below = stream.next_seq;
    }
    for (const auto& [id, module] : modules_) {
      GPUKIT_ASSIGN_OR_RETURN(ScopedFd image, ImageFile(module.image));
      executor::Request request;
      request.mutable_load_module()->set_module(id);
      request.mutable_load_module()->set_image_bytes(static_cast<int64_t>(module.image.size()));
      GPUKIT_RETURN_IF_ERROR(call(request, image.get()));
    }
    for (const auto& [id, function] : functions_) {
      executor::Request request;
      request.mutable_get_function()->set_function(id);
      request.mutable_get_function()->set_module(function.module);
      request.mutable_get_function()->set_name(function.name);
      GPUKIT_RETURN_IF_ERROR(call(request, -1));
    }
    return absl::OkStatus();
  }();
  absl::Status status = sent;
  for (auto& [seq, pending] : owed) {
    if (!pending->done.WaitForNotificationWithTimeout(options_.start_timeout)) {
      status.Update(absl::DeadlineExceededError("the new executor did not answer the replay"));
      Unregister(seq);
      continue;
    }
    if (!pending->status.ok()) {
      // One import of a client's memory that is gone does not stop the device.
      spdlog::warn("device {}: replaying into the new executor: {}", properties_.index,
                   std::string(pending->status.message()));
    }
  }
  return status;
}

// --- Memory -------------------------------------------------------------------------------------

absl::Status RemoteDevice::Impl::EnsureSegmentMapped(const Segment& segment) {
  {
    // Every allocation asks; nearly every segment is mapped already, and the answer must not
    // wait behind another thread's mapping (map_mu_ serializes those).
    absl::MutexLock lock(&mu_);
    if (mapped_segments_.contains(segment.handle)) return absl::OkStatus();
  }
  absl::MutexLock serial(&map_mu_);
  uint64_t generation;
  {
    // One look at both: a restart between them would replay the mapping unseen.
    absl::MutexLock lock(&mu_);
    if (mapped_segments_.contains(segment.handle)) return absl::OkStatus();
    generation = generation_;
  }
  GPUKIT_ASSIGN_OR_RETURN(ScopedFd fd, memory_->Share(segment));
  executor::Request request;
  request.mutable_map_segment()->set_key(segment.handle);
  request.mutable_map_segment()->set_bytes(segment.bytes);
  absl::StatusOr<int64_t> mapped = Call(request, fd.get());
  absl::MutexLock lock(&mu_);
  if (!mapped.ok()) {
    // A restart while it was sent replays what the tables hold (perhaps this very segment);
    // the caller looks again.
    if (generation != generation_ || mapped_segments_.contains(segment.handle)) {
      return absl::OkStatus();
    }
    return mapped.status();
  }
  if (generation == generation_) mapped_segments_.insert(segment.handle);
  return absl::OkStatus();
}

void RemoteDevice::Impl::OnDeviceSegmentUnmapped(const Segment& segment) {
  bool mapped;
  {
    absl::MutexLock lock(&mu_);
    live_segments_.erase(segment.handle);
    mapped = mapped_segments_.erase(segment.handle) > 0;
  }
  if (!mapped) return;
  executor::Request request;
  request.mutable_unmap_segment()->set_key(segment.handle);
  Send(request).IgnoreError();
}

absl::StatusOr<executor::HostRange> RemoteDevice::Impl::MapHostMemory(char* data, int64_t bytes,
                                                                      ScopedFd fd, bool owned) {
  uint64_t key;
  {
    absl::MutexLock lock(&mu_);
    key = next_id_++;
  }
  for (;;) {
    uint64_t generation;
    {
      absl::MutexLock lock(&mu_);
      generation = generation_;
    }
    executor::Request request;
    request.mutable_map_host_segment()->set_key(key);
    request.mutable_map_host_segment()->set_bytes(bytes);
    absl::Status mapped = Call(request, fd.get()).status();
    absl::MutexLock lock(&mu_);
    // A restart meanwhile: the new executor has not seen it; map it there.
    if (generation != generation_) continue;
    GPUKIT_RETURN_IF_ERROR(mapped);
    host_segments_[key] = HostSegment{data, bytes, std::move(fd), owned};
    host_ranges_[reinterpret_cast<uintptr_t>(data)] = key;
    executor::HostRange range;
    range.set_segment(key);
    return range;
  }
}

void RemoteDevice::Impl::UnmapHostMemory(uint64_t key) {
  HostSegment segment;
  {
    absl::MutexLock lock(&mu_);
    auto it = host_segments_.find(key);
    if (it == host_segments_.end()) return;
    segment = std::move(it->second);
    host_segments_.erase(it);
    host_ranges_.erase(reinterpret_cast<uintptr_t>(segment.data));
  }
  executor::Request request;
  request.mutable_unmap_host_segment()->set_key(key);
  // Waited for: the memory must be unmapped there before it is reused here.
  Call(request).IgnoreError();
  if (segment.owned) ::munmap(segment.data, static_cast<size_t>(segment.bytes));
}

std::optional<executor::HostRange> RemoteDevice::Impl::TranslateHost(const void* data,
                                                                     int64_t bytes) {
  const auto address = reinterpret_cast<uintptr_t>(data);
  absl::MutexLock lock(&mu_);
  auto it = host_ranges_.upper_bound(address);
  if (it == host_ranges_.begin()) return std::nullopt;
  --it;
  const HostSegment& segment = host_segments_.at(it->second);
  const uintptr_t offset = address - it->first;
  if (offset > static_cast<uintptr_t>(segment.bytes) ||
      bytes > segment.bytes - static_cast<int64_t>(offset)) {
    return std::nullopt;
  }
  executor::HostRange range;
  range.set_segment(it->second);
  range.set_offset(static_cast<int64_t>(offset));
  return range;
}

void RemoteDevice::Impl::SettleStream(uint64_t stream_id, uint64_t seq, bool ok,
                                      uint64_t generation) {
  std::vector<Staged> settled;
  {
    absl::MutexLock lock(&mu_);
    auto it = streams_.find(stream_id);
    if (it == streams_.end()) return;
    Stream& stream = it->second;
    stream.completed_seq = std::max(stream.completed_seq, seq);
    while (!stream.staged.empty() && stream.staged.front().seq < seq) {
      settled.push_back(stream.staged.front());
      stream.staged.pop_front();
    }
    if (settled.empty() && stream.settling == 0) return;  // the usual wait: nothing staged
    if (!settled.empty()) ++stream.settling;
  }
  for (const Staged& staged : settled) {
    if (ok && staged.dst != nullptr && staged.generation == generation) {
      std::memcpy(staged.dst, reinterpret_cast<const void*>(staged.block),
                  static_cast<size_t>(staged.bytes));
    }
    host_pool_->Free(staged.block).IgnoreError();
  }
  // Another thread's wait on the stream may have taken this wait's copies and be copying
  // them out still: returning before it is done would hand the caller a destination whose
  // bytes are still arriving (glibc's memcpy stores a large copy's first bytes last: seen on
  // the GPU as a download's first 48 bytes zero). Wait for every settle in progress.
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) return;
  if (!settled.empty()) --it->second.settling;
  auto done = [this, stream_id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto found = streams_.find(stream_id);
    return found == streams_.end() || found->second.settling == 0;
  };
  mu_.Await(absl::Condition(&done));
}

// --- RemoteDevice -------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<RemoteDevice>> RemoteDevice::Create(RemoteDeviceOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  GPUKIT_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<RemoteDevice>(new RemoteDevice(std::move(impl)));
}

RemoteDevice::RemoteDevice(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  impl_->device_ = this;
}
RemoteDevice::~RemoteDevice() = default;

#if GPUKIT_FAULT_INJECTION
void RemoteDevice::FailSendsForTesting(int count, absl::Status error) {
  absl::MutexLock lock(&impl_->failing_sends_mu_);
  impl_->failing_send_error_ = std::move(error);
  impl_->failing_sends_.store(count, std::memory_order_relaxed);
}
#endif

ExecutorState RemoteDevice::executor_state() const {
  absl::MutexLock lock(&impl_->supervisor_mu_);
  ExecutorState state = impl_->state_;
  state.round_trips = impl_->round_trips_.load(std::memory_order_relaxed);
  state.messages = impl_->messages_.load(std::memory_order_relaxed);
  state.wakes = impl_->wakes_.load(std::memory_order_relaxed);
  return state;
}

const DeviceProperties& RemoteDevice::properties() const { return impl_->properties_; }

MemoryInfo RemoteDevice::GetMemoryInfo() const {
  absl::MutexLock lock(&impl_->mu_);
  return {impl_->properties_.memory_total_bytes, impl_->used_bytes_};
}

absl::StatusOr<BufferId> RemoteDevice::Allocate(int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("allocation of ", bytes, " bytes"));
  Impl& d = *impl_;
  PoolBlock block;
  if (bytes > 0) {
    absl::StatusOr<PoolBlock> allocated = d.device_pool_->Allocate(bytes);
    if (!allocated.ok()) {
      if (allocated.status().code() == absl::StatusCode::kResourceExhausted) {
        return absl::ResourceExhaustedError(
            absl::StrCat("out of memory on device ", d.properties_.index, ": ", FormatBytes(bytes),
                         " requested (", allocated.status().message(), ")"));
      }
      return allocated.status();
    }
    block = *allocated;
  }
  absl::StatusOr<uint64_t> id = d.AddBuffer(block, bytes, /*counted=*/true);
  if (!id.ok()) {
    if (block.address != 0) d.device_pool_->Free(block.address).IgnoreError();
    return id.status();
  }
  return BufferId{*id};
}

executor::Request RemoteDevice::Impl::DefineZeroBytes(uint64_t id) {
  executor::Request request;
  request.mutable_define_buffer()->set_buffer(id);
  return request;
}

absl::StatusOr<int64_t> RemoteDevice::Impl::LookUp(uint64_t id, executor::Place* place) {
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(id);
  if (it == buffers_.end()) return absl::NotFoundError(absl::StrCat("unknown buffer ", id));
  if (place != nullptr && it->second.block.address != 0) PlaceOf(it->second, *place);
  return it->second.bytes;
}

absl::StatusOr<uint64_t> RemoteDevice::Impl::AddBuffer(const PoolBlock& block, int64_t bytes,
                                                       bool counted) {
  for (;;) {
    if (block.address != 0) GPUKIT_RETURN_IF_ERROR(EnsureSegmentMapped(block.segment));
    absl::ReaderMutexLock gen(&gen_mu_);
    absl::ReleasableMutexLock lock(&mu_);
    // A restart since the mapping: map again in the new executor.
    if (block.address != 0 && !mapped_segments_.contains(block.segment.handle)) continue;
    const uint64_t id = next_id_++;
    Buffer& buffer = buffers_[id];
    buffer.bytes = bytes;
    buffer.block = block;
    if (counted) used_bytes_ += bytes;
    lock.Release();
    if (block.address != 0) return id;  // work names it by its place
    // Without an executor (none could be started) the buffer waits for the next one's replay.
    // Held: it goes with the first work that uses the buffer. Outside mu_ (a full hold sends
    // a datagram), still under gen_mu_, so no restart comes between the table and the send.
    executor::Request request = DefineZeroBytes(id);
    if (active_ != nullptr) HoldOn(*active_, request);
    return id;
  }
}

absl::Status RemoteDevice::Free(BufferId buffer) {
  Impl& d = *impl_;
  Impl::Buffer freed;
  {
    absl::MutexLock lock(&d.mu_);
    auto it = d.buffers_.find(buffer.value);
    if (it == d.buffers_.end()) {
      return absl::NotFoundError(absl::StrCat("unknown buffer ", buffer.value));
    }
    freed = std::move(it->second);
    d.buffers_.erase(it);
    if (!freed.imported) d.used_bytes_ -= freed.bytes;
  }
  // A buffer of the pool was never defined in the executor (work named it by its place).
  if (freed.block.address != 0) return d.device_pool_->Free(freed.block.address);
  executor::Request request;
  request.mutable_free_buffer()->set_buffer(buffer.value);
  d.Hold(request);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> RemoteDevice::BufferBytes(BufferId buffer) const {
  return impl_->LookUp(buffer.value, /*place=*/nullptr);
}

absl::StatusOr<HostBuffer> RemoteDevice::AllocateHostBuffer(int64_t bytes) {
  if (bytes <= 0) return Device::AllocateHostBuffer(bytes);  // empty, or INVALID_ARGUMENT
  GPUKIT_ASSIGN_OR_RETURN(PoolBlock block, impl_->host_pool_->Allocate(bytes));
  MemoryPool* pool = impl_->host_pool_.get();
  return HostBuffer(
      reinterpret_cast<char*>(block.address), bytes, properties().backend == BackendKind::kCuda,
      [pool](char* data) { pool->Free(reinterpret_cast<uint64_t>(data)).IgnoreError(); });
}

absl::Status RemoteDevice::RegisterHostMemory(void* data, int64_t bytes, int shared_fd) {
  if (shared_fd < 0) {
    return absl::FailedPreconditionError(
        "host memory without its descriptor cannot be shared with the device executor; copies "
        "from it are staged");
  }
  const int fd = ::fcntl(shared_fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return absl::ResourceExhaustedError(absl::StrCat("dup: ", std::strerror(errno)));
  return impl_->MapHostMemory(static_cast<char*>(data), bytes, ScopedFd(fd), /*owned=*/false)
      .status();
}

absl::Status RemoteDevice::UnregisterHostMemory(void* data) {
  std::optional<uint64_t> key;
  {
    absl::MutexLock lock(&impl_->mu_);
    auto it = impl_->host_ranges_.find(reinterpret_cast<uintptr_t>(data));
    if (it != impl_->host_ranges_.end()) key = it->second;
  }
  if (!key) return absl::NotFoundError("host memory that was not registered");
  impl_->UnmapHostMemory(*key);
  return absl::OkStatus();
}

absl::StatusOr<ExportedBuffer> RemoteDevice::ExportBuffer(BufferId buffer, ExportForm form) {
  Impl& d = *impl_;
  if (properties().backend != BackendKind::kCuda) return Device::ExportBuffer(buffer, form);
  if (form == ExportForm::kCudaIpcHandle) {
    return absl::FailedPreconditionError(
        "legacy CUDA IPC handles belong to a CUDA context, which the device executor's "
        "restart would take away; gpukitd exports arrays as descriptors (connect over the unix "
        "socket)");
  }
  absl::MutexLock serial(&d.export_mu_);
  PoolBlock block;
  int64_t bytes;
  {
    absl::MutexLock lock(&d.mu_);
    auto it = d.buffers_.find(buffer.value);
    if (it == d.buffers_.end()) {
      return absl::NotFoundError(absl::StrCat("unknown buffer ", buffer.value));
    }
    if (it->second.imported) {
      return absl::FailedPreconditionError("an imported buffer is another process's memory");
    }
    if (it->second.bytes == 0) {
      return absl::InvalidArgumentError("a zero-byte buffer cannot be exported");
    }
    block = it->second.block;
    bytes = it->second.bytes;
  }
  if (block.shares_segment) {
    // The buffer moves to a segment of its own first, so the export exposes nothing else:
    // a buffer `moved` over the new segment, a copy, then the buffer's id names the new
    // place, where work goes from then on (queued work on the buffer must have completed:
    // the Device contract).
    GPUKIT_ASSIGN_OR_RETURN(PoolBlock own, d.device_pool_->AllocateOwnSegment(bytes));
    absl::StatusOr<uint64_t> added = d.AddBuffer(own, bytes, /*counted=*/false);
    absl::Status status = added.status();
    const uint64_t moved = added.ok() ? *added : 0;
    uint64_t stream_id = 0;
    if (status.ok()) {
      absl::MutexLock lock(&d.mu_);
      stream_id = d.export_stream_;
    }
    if (status.ok() && stream_id == 0) {
      absl::StatusOr<StreamId> stream = CreateStream(StreamPriority::kNormal);
      status = stream.status();
      if (stream.ok()) {
        stream_id = stream->value;
        absl::MutexLock lock(&d.mu_);
        d.export_stream_ = stream_id;
      }
    }
    if (status.ok()) {
      status = CopyDeviceToDevice(BufferId{moved}, 0, buffer, 0, bytes, StreamId{stream_id});
    }
    if (status.ok()) status = SynchronizeStream(*this, StreamId{stream_id});
    {
      absl::MutexLock lock(&d.mu_);
      if (status.ok()) d.buffers_[buffer.value].block = own;
      d.buffers_.erase(moved);
    }
    if (!status.ok()) {
      d.device_pool_->Free(own.address).IgnoreError();
      return status;
    }
    d.device_pool_->Free(block.address).IgnoreError();
    block = own;
  }
  GPUKIT_RETURN_IF_ERROR(d.device_pool_->MarkShared(block.address));
  ExportedBuffer exported;
  GPUKIT_ASSIGN_OR_RETURN(exported.fd, d.memory_->Share(block.segment));
  exported.allocation_bytes = block.segment.bytes;
  exported.offset_bytes = static_cast<int64_t>(block.address - block.segment.address);
  exported.bytes = bytes;
  return exported;
}

absl::StatusOr<BufferId> RemoteDevice::ImportBuffer(ImportedMemory memory) {
  GPUKIT_RETURN_IF_ERROR(CheckImportedRange(memory));
  Impl& d = *impl_;
  if (!memory.cuda_ipc_handle.empty() && properties().backend != BackendKind::kCuda) {
    return Device::ImportBuffer(std::move(memory));
  }
  uint64_t id;
  {
    absl::MutexLock lock(&d.mu_);
    id = d.next_id_++;
  }
  executor::Request request;
  executor::ImportBuffer& import = *request.mutable_import_buffer();
  import.set_buffer(id);
  import.set_allocation_bytes(memory.allocation_bytes);
  import.set_cuda_ipc_handle(memory.cuda_ipc_handle);
  import.set_offset(memory.offset_bytes);
  import.set_bytes(memory.bytes);
  GPUKIT_RETURN_IF_ERROR(d.Call(request, memory.fd.get()).status());
  absl::MutexLock lock(&d.mu_);
  Impl::Buffer& buffer = d.buffers_[id];
  buffer.bytes = memory.bytes;
  buffer.imported = true;
  buffer.import_fd = std::move(memory.fd);  // kept to map it again after a restart
  buffer.import_allocation_bytes = memory.allocation_bytes;
  buffer.import_ipc_handle = std::move(memory.cuda_ipc_handle);
  buffer.import_offset = memory.offset_bytes;
  return BufferId{id};
}

absl::StatusOr<StreamId> RemoteDevice::CreateStream(const StreamOptions& options) {
  GPUKIT_RETURN_IF_ERROR(ValidateStreamOptions(options));
  Impl& d = *impl_;
  uint64_t id;
  uint64_t generation;
  {
    // Registered before it is sent: a restart from here on replays it, and the call below
    // then sends nothing (its generation is stale).
    absl::ReaderMutexLock gen(&d.gen_mu_);
    absl::MutexLock lock(&d.mu_);
    id = d.next_id_++;
    d.streams_[id].options = options;
    generation = d.generation_;
  }
  executor::Request request;
  request.mutable_create_stream()->set_stream(id);
  request.mutable_create_stream()->set_priority(static_cast<int32_t>(options.priority));
  request.mutable_create_stream()->set_sm_share(options.sm_share);
  if (options.sm_first) request.mutable_create_stream()->set_sm_first(*options.sm_first);
  // A round trip, for the SMs the executor's device gave it (StreamSmCount) and its error.
  absl::StatusOr<int64_t> sms = d.Call(request, -1, nullptr, generation);
  if (sms.ok()) {
    absl::MutexLock lock(&d.mu_);
    if (auto it = d.streams_.find(id); it != d.streams_.end()) it->second.sm_count = *sms;
  } else if (!sms.status().GetPayload(kExecutorFaultPayload).has_value() &&
             sms.status().code() != absl::StatusCode::kUnavailable) {
    // The executor's device refused it: forget it there and here.
    DestroyStream(StreamId{id}).IgnoreError();
    return sms.status();
  }
  // Else the executor is gone or restarting: the restart replays the stream, and its SMs
  // stay unknown here.
  return StreamId{id};
}

absl::StatusOr<int> RemoteDevice::StreamSmCount(StreamId stream) const {
  const Impl& d = *impl_;
  absl::MutexLock lock(&d.mu_);
  auto it = d.streams_.find(stream.value);
  if (it == d.streams_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown stream ", stream.value));
  }
  if (it->second.sm_count <= 0) {
    return absl::UnavailableError(absl::StrCat("the SMs of stream ", stream.value,
                                               " are unknown: it was made while the device "
                                               "executor restarted"));
  }
  return it->second.sm_count;
}

absl::Status RemoteDevice::DestroyStream(StreamId stream) {
  Impl& d = *impl_;
  {
    absl::MutexLock lock(&d.mu_);
    if (!d.streams_.contains(stream.value)) {
      return absl::NotFoundError(absl::StrCat("unknown stream ", stream.value));
    }
  }
  executor::Request request;
  request.mutable_destroy_stream()->set_stream(stream.value);
  absl::Status status = d.Call(request).status();
  // Whatever the executor said, the stream is gone: settle what it staged.
  uint64_t last = 0;
  uint64_t generation;
  {
    absl::MutexLock lock(&d.mu_);
    if (auto it = d.streams_.find(stream.value); it != d.streams_.end()) last = it->second.next_seq;
    generation = d.generation_;
  }
  d.SettleStream(stream.value, last + 1, status.ok(), generation);
  absl::MutexLock lock(&d.mu_);
  d.streams_.erase(stream.value);
  if (status.GetPayload(kExecutorFaultPayload).has_value() ||
      status.code() == absl::StatusCode::kNotFound) {
    return absl::OkStatus();  // the restart took it; nothing is left to destroy
  }
  return status;
}

absl::Status RemoteDevice::Impl::EnqueueCopy(executor::Request& request, uint64_t stream_id,
                                             uint64_t staging, void* fixup_dst, int64_t bytes,
                                             const std::string* launch) {
  absl::ReaderMutexLock gen(&gen_mu_);
  if (active_ == nullptr) return absl::UnavailableError("the device executor is not running");
  // The stream's order lock makes the work's place in the stream (its seq) the order in
  // which the executor gets it: a wait settles staged copies by seq, so an event sent
  // before a copy with a lower seq would let a copy out before it ran.
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<absl::Mutex> order, StreamOrder(stream_id));
  absl::MutexLock ordered(order.get());
  {
    absl::MutexLock lock(&mu_);
    auto it = streams_.find(stream_id);
    if (it == streams_.end()) {
      return absl::NotFoundError(absl::StrCat("unknown stream ", stream_id));
    }
    const uint64_t seq = it->second.next_seq++;
    if (staging != 0) {
      it->second.staged.push_back({seq, generation_, staging, fixup_dst, bytes});
    }
    if (launch != nullptr) {
      it->second.launch_seq = seq;
      it->second.launch_name = *launch;
    }
  }
  SendWork(*active_, request);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<absl::Mutex>> RemoteDevice::Impl::StreamOrder(uint64_t stream_id) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) return absl::NotFoundError(absl::StrCat("unknown stream ", stream_id));
  return it->second.order;
}

namespace {

absl::Status CheckRange(const char* what, int64_t offset, int64_t bytes, int64_t size) {
  if (offset < 0 || bytes < 0 || offset > size || bytes > size - offset) {
    return absl::OutOfRangeError(absl::StrCat(what, " range [", offset, ", +", bytes,
                                              ") outside a buffer of ", size, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RemoteDevice::Impl::EnqueueHostCopy(BufferId buffer, int64_t offset, void* host,
                                                 int64_t bytes, StreamId stream, bool to_device) {
  executor::Request request;
  executor::Copy& copy = *request.mutable_copy();
  GPUKIT_ASSIGN_OR_RETURN(int64_t size, LookUp(buffer.value, to_device ? copy.mutable_dst_place()
                                                                       : copy.mutable_src_place()));
  GPUKIT_RETURN_IF_ERROR(CheckRange(to_device ? "destination" : "source", offset, bytes, size));
  if (bytes == 0) return absl::OkStatus();
  copy.set_stream(stream.value);
  copy.set_bytes(bytes);
  if (to_device) {
    copy.set_dst_buffer(buffer.value);
    copy.set_dst_offset(offset);
  } else {
    copy.set_src_buffer(buffer.value);
    copy.set_src_offset(offset);
  }
  executor::HostRange& side = to_device ? *copy.mutable_src_host() : *copy.mutable_dst_host();
  uint64_t staging = 0;
  if (std::optional<executor::HostRange> range = TranslateHost(host, bytes)) {
    side = *range;
  } else {
    // Not memory the executor maps: through a block of the host segments, filled here for
    // the device, or copied out by the wait that sees the copy done (SettleStream).
    GPUKIT_ASSIGN_OR_RETURN(PoolBlock block, host_pool_->Allocate(bytes));
    staging = block.address;
    if (to_device) {
      std::memcpy(reinterpret_cast<void*>(staging), host, static_cast<size_t>(bytes));
    }
    side = *TranslateHost(reinterpret_cast<void*>(staging), bytes);
  }
  absl::Status status =
      EnqueueCopy(request, stream.value, staging, to_device ? nullptr : host, bytes);
  if (!status.ok() && staging != 0) host_pool_->Free(staging).IgnoreError();
  return status;
}

absl::Status RemoteDevice::CopyHostToDevice(BufferId dst, int64_t dst_offset, const void* src,
                                            int64_t bytes, StreamId stream) {
  return impl_->EnqueueHostCopy(dst, dst_offset, const_cast<void*>(src), bytes, stream,
                                /*to_device=*/true);
}

absl::Status RemoteDevice::CopyDeviceToHost(void* dst, BufferId src, int64_t src_offset,
                                            int64_t bytes, StreamId stream) {
  return impl_->EnqueueHostCopy(src, src_offset, dst, bytes, stream, /*to_device=*/false);
}

absl::Status RemoteDevice::CopyDeviceToDevice(BufferId dst, int64_t dst_offset, BufferId src,
                                              int64_t src_offset, int64_t bytes, StreamId stream) {
  executor::Request request;
  executor::Copy& copy = *request.mutable_copy();
  GPUKIT_ASSIGN_OR_RETURN(int64_t dst_size, impl_->LookUp(dst.value, copy.mutable_dst_place()));
  GPUKIT_ASSIGN_OR_RETURN(int64_t src_size, impl_->LookUp(src.value, copy.mutable_src_place()));
  GPUKIT_RETURN_IF_ERROR(CheckRange("destination", dst_offset, bytes, dst_size));
  GPUKIT_RETURN_IF_ERROR(CheckRange("source", src_offset, bytes, src_size));
  if (dst == src && bytes > 0 && dst_offset < src_offset + bytes &&
      src_offset < dst_offset + bytes) {
    return absl::InvalidArgumentError("a device-to-device copy between overlapping ranges");
  }
  if (bytes == 0) return absl::OkStatus();
  copy.set_stream(stream.value);
  copy.set_bytes(bytes);
  copy.set_dst_buffer(dst.value);
  copy.set_dst_offset(dst_offset);
  copy.set_src_buffer(src.value);
  copy.set_src_offset(src_offset);
  return impl_->EnqueueCopy(request, stream.value, 0, nullptr, 0);
}

absl::Status RemoteDevice::FillZero(BufferId buffer, int64_t offset, int64_t bytes,
                                    StreamId stream) {
  executor::Request request;
  executor::Fill& fill = *request.mutable_fill();
  GPUKIT_ASSIGN_OR_RETURN(int64_t size, impl_->LookUp(buffer.value, fill.mutable_place()));
  GPUKIT_RETURN_IF_ERROR(CheckRange("fill", offset, bytes, size));
  if (bytes == 0) return absl::OkStatus();
  fill.set_stream(stream.value);
  fill.set_buffer(buffer.value);
  fill.set_offset(offset);
  fill.set_bytes(bytes);
  return impl_->EnqueueCopy(request, stream.value, 0, nullptr, 0);
}

void RemoteDevice::BeginBatch() {
  ThreadBatch& batch = thread_batch;
  if (batch.device != nullptr && batch.device != impl_.get()) {
    ++batch.foreign;
    return;
  }
  batch.device = impl_.get();
  ++batch.depth;
}

void RemoteDevice::EndBatch() {
  ThreadBatch& batch = thread_batch;
  if (batch.foreign > 0) {
    --batch.foreign;
    return;
  }
  if (batch.device != impl_.get() || --batch.depth > 0) return;
  batch.device = nullptr;
  // The batch's work goes now; frees and destroys held with it may wait for the next send.
  Impl& d = *impl_;
  absl::ReaderMutexLock gen(&d.gen_mu_);
  if (d.active_ != nullptr) d.FlushHeld(*d.active_, /*only_work=*/true);
}

void RemoteDevice::ExpectWork() {
  const std::chrono::microseconds poll = ExecutorReaderPollTime();
  if (poll.count() == 0) return;  // the reader sleeps after every message: the work wakes it
  Impl& d = *impl_;
  absl::ReaderMutexLock gen(&d.gen_mu_);
  if (d.active_ == nullptr || !d.active_->activity.ClaimQuiet(poll / 2)) return;
  executor::Request wake;
  wake.mutable_wake();
  d.wakes_.fetch_add(1, std::memory_order_relaxed);
  d.SendOn(*d.active_, wake).IgnoreError();  // a channel that broke is the supervisor's
}

uint64_t RemoteDevice::Impl::AddEventLocked(Stream& stream, uint64_t stream_id) {
  const uint64_t id = next_id_++;
  Event& event = events_[id];
  event.stream = stream_id;
  event.seq = stream.next_seq++;
  event.generation = generation_;
  event.previous_seq = std::exchange(stream.last_event_seq, event.seq);
  return id;
}

absl::StatusOr<EventId> RemoteDevice::RecordEvent(StreamId stream) {
  Impl& d = *impl_;
  absl::ReaderMutexLock gen(&d.gen_mu_);
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<absl::Mutex> order, d.StreamOrder(stream.value));
  absl::MutexLock ordered(order.get());  // see EnqueueCopy
  uint64_t id;
  {
    absl::MutexLock lock(&d.mu_);
    auto it = d.streams_.find(stream.value);
    if (it == d.streams_.end()) {
      return absl::NotFoundError(absl::StrCat("unknown stream ", stream.value));
    }
    id = d.AddEventLocked(it->second, stream.value);
  }
  executor::Request request;
  request.mutable_record_event()->set_stream(stream.value);
  request.mutable_record_event()->set_event(id);
  if (d.active_ != nullptr) d.SendWork(*d.active_, request);
  return EventId{id};
}

absl::Status RemoteDevice::WaitEvent(EventId event) { return WaitCarrying(event, {}, nullptr); }

absl::Status RemoteDevice::WaitCarrying(EventId event, absl::Span<const EventPair> pairs,
                                        std::vector<EventPairOutcome>* carried) {
  Impl& d = *impl_;
  auto pending = std::make_shared<Pending>();
  pending->is_wait = true;
  pending->started = absl::Now();
  Impl::Event recorded;
  {
    absl::MutexLock lock(&d.mu_);
    auto it = d.events_.find(event.value);
    if (it == d.events_.end()) {
      return absl::NotFoundError(absl::StrCat("unknown event ", event.value));
    }
    recorded = it->second;
    if (recorded.completed) return absl::OkStatus();
    if (recorded.generation != d.generation_) {
      if (auto culprit = d.culprit_errors_.extract(event.value); !culprit.empty()) {
        return culprit.mapped();
      }
      return RestartedError();
    }
    pending->stream = recorded.stream;
    pending->event = event.value;
    auto stream = d.streams_.find(recorded.stream);
    if (stream != d.streams_.end() && stream->second.launch_seq > stream->second.completed_seq &&
        stream->second.launch_seq < recorded.seq) {
      pending->launched = stream->second.launch_name;
    }
  }
  executor::Request request;
  request.mutable_wait_event()->set_event(event.value);
  for (const EventPair& pair : pairs) {
    executor::EventPair& asked = *request.mutable_wait_event()->add_pairs();
    asked.set_start(pair.start.value);
    asked.set_end(pair.end.value);
  }
  absl::Status status = d.Call(request, -1, pending, recorded.generation).status();
  if (status.ok()) {
    absl::MutexLock lock(&d.mu_);
    auto stream = d.streams_.find(recorded.stream);
    if (stream != d.streams_.end() && recorded.previous_seq + 1 < stream->second.lost_below &&
        recorded.seq >= stream->second.lost_below) {
      status = WithKind(absl::UnavailableError(
                            "the device executor restarted while this work was being queued, "
                            "so part of it may not have run; its inputs are intact and a retry "
                            "is safe"),
                        "restart");
    }
  }
  if (!status.ok() && status.GetPayload(kExecutorFaultPayload) == absl::Cord("restart")) {
    // A restart between the look above and the send: the culprit's error, if this was it.
    absl::MutexLock lock(&d.mu_);
    if (auto culprit = d.culprit_errors_.extract(event.value); !culprit.empty()) {
      status = culprit.mapped();
    }
  }
  d.SettleStream(recorded.stream, recorded.seq, status.ok(), recorded.generation);
  if (status.ok()) {
    absl::MutexLock lock(&d.mu_);
    if (auto it = d.events_.find(event.value); it != d.events_.end()) {
      it->second.completed = true;
      it->second.elapsed_from = pending->elapsed_from;
      it->second.elapsed_ns = pending->elapsed_ns;
    }
  }
  if (status.ok() && carried != nullptr && !pairs.empty() &&
      pending->pair_elapsed_ns.size() == pairs.size() &&
      pending->pair_status.size() == pairs.size()) {
    carried->resize(pairs.size());
    for (size_t i = 0; i < pairs.size(); ++i) {
      (*carried)[i].status = std::move(pending->pair_status[i]);
      (*carried)[i].elapsed_ns = (*carried)[i].status.ok() ? pending->pair_elapsed_ns[i] : 0;
    }
  }
  return status;
}

absl::StatusOr<bool> RemoteDevice::QueryEvent(EventId event) {
  Impl& d = *impl_;
  uint64_t generation;
  {
    absl::MutexLock lock(&d.mu_);
    auto it = d.events_.find(event.value);
    if (it == d.events_.end()) {
      return absl::NotFoundError(absl::StrCat("unknown event ", event.value));
    }
    if (it->second.completed || it->second.generation != d.generation_) return true;
    generation = it->second.generation;
  }
  executor::Request request;
  request.mutable_wait_event()->set_event(event.value);
  request.mutable_wait_event()->set_query(true);
  absl::StatusOr<int64_t> done = d.Call(request, -1, nullptr, generation);
  if (!done.ok()) {
    if (done.status().GetPayload(kExecutorFaultPayload).has_value()) return true;
    return done.status();
  }
  return *done != 0;
}

absl::Status RemoteDevice::DestroyEvent(EventId event) { return DestroyEvents({&event, 1}); }

absl::Status RemoteDevice::DestroyEvents(absl::Span<const EventId> events) {
  // A request of at most this many events stays far below a datagram's size.
  constexpr size_t kMostPerRequest = 2048;
  if (events.size() > kMostPerRequest) {
    absl::Status first = DestroyEvents(events.subspan(0, kMostPerRequest));
    first.Update(DestroyEvents(events.subspan(kMostPerRequest)));
    return first;
  }
  Impl& d = *impl_;
  absl::Status first;
  executor::Request request;
  executor::DestroyEvent& destroy = *request.mutable_destroy_event();
  {
    absl::MutexLock lock(&d.mu_);
    for (EventId event : events) {
      auto it = d.events_.find(event.value);
      if (it == d.events_.end()) {
        first.Update(absl::NotFoundError(absl::StrCat("unknown event ", event.value)));
        continue;
      }
      // One of an executor that was replaced since: the serving one never knew it.
      if (it->second.generation == d.generation_) {
        if (destroy.event() == 0) {
          destroy.set_event(event.value);
        } else {
          destroy.add_more_events(event.value);
        }
      }
      d.events_.erase(it);
      d.culprit_errors_.erase(event.value);
    }
  }
  if (destroy.event() != 0) d.Hold(request);
  return first;
}

absl::StatusOr<int64_t> RemoteDevice::EventElapsedNs(EventId start, EventId end) {
  Impl& d = *impl_;
  uint64_t generation;
  {
    absl::MutexLock lock(&d.mu_);
    auto s = d.events_.find(start.value);
    auto e = d.events_.find(end.value);
    if (s == d.events_.end() || e == d.events_.end()) {
      return absl::NotFoundError("unknown event");
    }
    if (s->second.stream != e->second.stream) {
      return absl::InvalidArgumentError("events of different streams");
    }
    if (s->second.generation != d.generation_ || e->second.generation != d.generation_) {
      return absl::FailedPreconditionError("the events' executor restarted");
    }
    generation = e->second.generation;
    // Measured already when the end's wait came back (the common case: no round trip).
    if (e->second.completed && e->second.elapsed_from == start.value) {
      return e->second.elapsed_ns;
    }
  }
  executor::Request request;
  request.mutable_elapsed_ns()->set_start(start.value);
  request.mutable_elapsed_ns()->set_end(end.value);
  return d.Call(request, -1, nullptr, generation);
}

std::vector<EventPairOutcome> RemoteDevice::WaitEventPairs(absl::Span<const EventPair> pairs) {
  if (pairs.empty()) return {};
  Impl& d = *impl_;
  // A datagram holds ~1000 outcomes: up to 512 pairs go with the wait (one round trip for
  // both), more in requests of their own after it.
  constexpr size_t kPairsPerRequest = 512;
  std::vector<EventPairOutcome> carried;
  absl::Status last = WaitCarrying(
      pairs.back().end, pairs.size() <= kPairsPerRequest ? pairs : absl::Span<const EventPair>(),
      &carried);
  // A failed wait (a fault, a restart: rare) goes pair by pair, so that each pair's error is
  // what WaitEvent attributes to it (a culprit's, a restart's).
  if (!last.ok()) return WaitEventPairsOneByOne(*this, pairs, std::move(last));
  std::vector<EventPairOutcome> outcomes(pairs.size());
  std::vector<size_t> asked;  // the pairs the executor answers, by index
  uint64_t generation;
  bool one_by_one = false;
  {
    absl::MutexLock lock(&d.mu_);
    generation = d.generation_;
    for (size_t i = 0; i < pairs.size(); ++i) {
      auto s = d.events_.find(pairs[i].start.value);
      auto e = d.events_.find(pairs[i].end.value);
      // What WaitEvent or EventElapsedNs answers without the executor (an unknown event, one
      // of an earlier executor, work a restart cut short, ...): they do, pair by pair.
      if (s == d.events_.end() || e == d.events_.end() || s->second.stream != e->second.stream ||
          s->second.generation != generation || e->second.generation != generation) {
        one_by_one = true;
        break;
      }
      auto stream = d.streams_.find(e->second.stream);
      if (stream != d.streams_.end() && e->second.previous_seq + 1 < stream->second.lost_below &&
          e->second.seq >= stream->second.lost_below) {
        one_by_one = true;
        break;
      }
      // Waited for already, and measured when the end's wait came back (as in EventElapsedNs).
      if (e->second.completed && e->second.elapsed_from == pairs[i].start.value) {
        outcomes[i].elapsed_ns = e->second.elapsed_ns;
      } else if (!carried.empty()) {
        outcomes[i] = std::move(carried[i]);
        // As a wait that came back OK: a later WaitEvent answers without the executor.
        if (outcomes[i].status.ok()) e->second.completed = true;
      } else {
        asked.push_back(i);
      }
    }
  }
  if (one_by_one) return WaitEventPairsOneByOne(*this, pairs, std::move(last));
  // The rest in requests of their own.
  for (size_t first = 0; first < asked.size(); first += kPairsPerRequest) {
    const size_t count = std::min(kPairsPerRequest, asked.size() - first);
    executor::Request request;
    for (size_t j = first; j < first + count; ++j) {
      executor::EventPair& pair = *request.mutable_elapsed_ns()->add_pairs();
      pair.set_start(pairs[asked[j]].start.value);
      pair.set_end(pairs[asked[j]].end.value);
    }
    auto pending = std::make_shared<Pending>();
    absl::Status status = d.Call(request, -1, pending, generation).status();
    if (status.ok() &&
        (pending->pair_elapsed_ns.size() != count || pending->pair_status.size() != count)) {
      status = absl::InternalError(absl::StrCat(
          "the executor answered ", pending->pair_status.size(), " of ", count, " event pairs"));
    }
    if (!status.ok()) {
      // The executor went (a restart) or answered wrong: every pair as WaitEvent says.
      return WaitEventPairsOneByOne(*this, pairs, absl::OkStatus());
    }
    absl::MutexLock lock(&d.mu_);
    for (size_t j = 0; j < count; ++j) {
      const size_t i = asked[first + j];
      outcomes[i].status = std::move(pending->pair_status[j]);
      outcomes[i].elapsed_ns = outcomes[i].status.ok() ? pending->pair_elapsed_ns[j] : 0;
      // As a wait that came back OK: a later WaitEvent answers without the executor.
      if (auto e = d.events_.find(pairs[i].end.value);
          outcomes[i].status.ok() && e != d.events_.end()) {
        e->second.completed = true;
      }
    }
  }
  return outcomes;
}

bool RemoteDevice::SupportsOp(absl::string_view op_name) const {
  return impl_->supported_ops_.contains(op_name);
}

absl::Status RemoteDevice::RunOp(const OpLaunch& launch, StreamId stream) {
  executor::Request request;
  GPUKIT_RETURN_IF_ERROR(EncodeOp(launch, stream, *request.mutable_run_op()));
  return impl_->EnqueueCopy(request, stream.value, 0, nullptr, 0);
}

absl::Status RemoteDevice::RunOpBetweenEvents(const OpLaunch& launch, StreamId stream,
                                              EventId* start, EventId* end) {
  std::shared_ptr<absl::Mutex> order;
  executor::Request request;
  GPUKIT_RETURN_IF_ERROR(EncodeOp(launch, stream, *request.mutable_run_op(), &order));
  Impl& d = *impl_;
  absl::ReaderMutexLock gen(&d.gen_mu_);
  if (d.active_ == nullptr) return absl::UnavailableError("the device executor is not running");
  absl::MutexLock ordered(order.get());  // see EnqueueCopy
  {
    absl::MutexLock lock(&d.mu_);
    auto it = d.streams_.find(stream.value);
    if (it == d.streams_.end()) {
      return absl::NotFoundError(absl::StrCat("unknown stream ", stream.value));
    }
    // The start event, the op and the end event take the stream's next three places, as
    // the three calls would.
    start->value = d.AddEventLocked(it->second, stream.value);
    ++it->second.next_seq;  // the op's
    end->value = d.AddEventLocked(it->second, stream.value);
  }
  request.mutable_run_op()->set_start_event(start->value);
  request.mutable_run_op()->set_end_event(end->value);
  d.SendWork(*d.active_, request);
  return absl::OkStatus();
}

absl::Status RemoteDevice::EncodeOp(const OpLaunch& launch, StreamId stream,
                                    executor::RunOp& encoded,
                                    std::shared_ptr<absl::Mutex>* order) const {
  if (launch.op == nullptr) return absl::InvalidArgumentError("RunOp without an op");
  if (!SupportsOp(launch.op->name)) {
    return absl::UnimplementedError(absl::StrCat("op ", launch.op->name, " is not implemented on ",
                                                 BackendName(properties().backend), " device ",
                                                 properties().index));
  }
  EncodeRunOp(launch, stream, encoded);
  // What each buffer must hold, worked out before the lock.
  GPUKIT_ASSIGN_OR_RETURN(const int64_t output_bytes,
                          ByteSize(launch.plan.output.shape, launch.plan.output.dtype));
  absl::InlinedVector<int64_t, 4> input_bytes(launch.inputs.size(), 0);
  for (size_t i = 0; i < launch.inputs.size(); ++i) {
    const OpOperand& input = launch.inputs[i];
    if (input.is_scalar) continue;
    GPUKIT_ASSIGN_OR_RETURN(input_bytes[i], ByteSize(input.desc.shape, input.desc.dtype));
  }
  absl::MutexLock lock(&impl_->mu_);  // one look at the table for every buffer of the op
  // As the executor's device would find it when the op runs, so that a bad op fails the
  // call rather than its stream; a buffer of the pool gets its place.
  auto holds = [this](BufferId buffer, int64_t bytes,
                      executor::Place& place) ABSL_EXCLUSIVE_LOCKS_REQUIRED(impl_->mu_) {
    auto it = impl_->buffers_.find(buffer.value);
    if (it == impl_->buffers_.end()) {
      return absl::NotFoundError(absl::StrCat("unknown buffer ", buffer.value));
    }
    if (bytes > it->second.bytes) {
      return absl::OutOfRangeError(absl::StrCat("range [0, +", bytes, ") outside buffer ",
                                                buffer.value, " of ", it->second.bytes, " bytes"));
    }
    if (it->second.block.address != 0) Impl::PlaceOf(it->second, place);
    return absl::OkStatus();
  };
  for (size_t i = 0; i < launch.inputs.size(); ++i) {
    if (!launch.inputs[i].is_scalar) {
      GPUKIT_RETURN_IF_ERROR(holds(launch.inputs[i].buffer, input_bytes[i],
                                   *encoded.mutable_inputs(static_cast<int>(i))->mutable_place()));
    }
  }
  GPUKIT_RETURN_IF_ERROR(holds(launch.output, output_bytes, *encoded.mutable_output_place()));
  if (order == nullptr) return absl::OkStatus();
  auto it = impl_->streams_.find(stream.value);
  if (it == impl_->streams_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown stream ", stream.value));
  }
  *order = it->second.order;
  return absl::OkStatus();
}

absl::StatusOr<ModuleId> RemoteDevice::LoadModule(absl::string_view image) {
  Impl& d = *impl_;
  if (image.empty()) return absl::InvalidArgumentError("an empty module image");
  GPUKIT_ASSIGN_OR_RETURN(ScopedFd file, ImageFile(image));
  uint64_t id;
  {
    absl::MutexLock lock(&d.mu_);
    id = d.next_id_++;
  }
  executor::Request request;
  request.mutable_load_module()->set_module(id);
  request.mutable_load_module()->set_image_bytes(static_cast<int64_t>(image.size()));
  GPUKIT_RETURN_IF_ERROR(d.Call(request, file.get()).status());
  absl::MutexLock lock(&d.mu_);
  d.modules_[id].image = std::string(image);
  return ModuleId{id};
}

absl::Status RemoteDevice::UnloadModule(ModuleId module) {
  Impl& d = *impl_;
  {
    absl::MutexLock lock(&d.mu_);
    if (d.modules_.erase(module.value) == 0) {
      return absl::NotFoundError(absl::StrCat("unknown module ", module.value));
    }
    for (auto it = d.functions_.begin(); it != d.functions_.end();) {
      if (it->second.module == module.value) {
        d.function_ids_.erase({module.value, it->second.name});
        d.functions_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  executor::Request request;
  request.mutable_unload_module()->set_module(module.value);
  d.Send(request).IgnoreError();
  return absl::OkStatus();
}

absl::StatusOr<FunctionId> RemoteDevice::GetFunction(ModuleId module, absl::string_view name) {
  Impl& d = *impl_;
  uint64_t id;
  {
    absl::MutexLock lock(&d.mu_);
    if (!d.modules_.contains(module.value)) {
      return absl::NotFoundError(absl::StrCat("unknown module ", module.value));
    }
    if (auto it = d.function_ids_.find({module.value, std::string(name)});
        it != d.function_ids_.end()) {
      return FunctionId{it->second};
    }
    id = d.next_id_++;
  }
  executor::Request request;
  request.mutable_get_function()->set_function(id);
  request.mutable_get_function()->set_module(module.value);
  request.mutable_get_function()->set_name(std::string(name));
  GPUKIT_RETURN_IF_ERROR(d.Call(request).status());
  absl::MutexLock lock(&d.mu_);
  d.functions_[id] = {module.value, std::string(name)};
  d.function_ids_[{module.value, std::string(name)}] = id;
  return FunctionId{id};
}

absl::Status RemoteDevice::Launch(FunctionId function, const LaunchConfig& config,
                                  absl::Span<const KernelArg> args, StreamId stream) {
  Impl& d = *impl_;
  executor::Request request;
  executor::Launch& launch = *request.mutable_launch();
  launch.set_stream(stream.value);
  launch.set_function(function.value);
  for (int i = 0; i < 3; ++i) {
    launch.add_grid(config.grid[i]);
    launch.add_block(config.block[i]);
  }
  launch.set_shared_memory_bytes(config.shared_memory_bytes);
  for (const KernelArg& arg : args) {
    executor::KernelArg& out = *launch.add_args();
    out.set_kind(static_cast<int32_t>(arg.kind));
    switch (arg.kind) {
      case KernelArg::Kind::kBuffer:
        GPUKIT_RETURN_IF_ERROR(d.LookUp(arg.buffer.value, out.mutable_place()).status());
        out.set_buffer(arg.buffer.value);
        break;
      case KernelArg::Kind::kScalar:
        if (arg.size_bytes == 0 || arg.size_bytes > 8) {
          return absl::InvalidArgumentError(
              absl::StrCat("a scalar argument of ", arg.size_bytes, " bytes (1 to 8)"));
        }
        out.set_bytes(arg.bytes, arg.size_bytes);
        break;
      case KernelArg::Kind::kBlock:
        if (arg.block == nullptr || arg.size_bytes == 0) {
          return absl::InvalidArgumentError("an empty parameter block");
        }
        out.set_bytes(arg.block, arg.size_bytes);
        break;
    }
  }
  std::string name;
  {
    absl::MutexLock lock(&d.mu_);
    auto it = d.functions_.find(function.value);
    if (it == d.functions_.end()) {
      return absl::NotFoundError(absl::StrCat("unknown function ", function.value));
    }
    name = it->second.name;
  }
  return d.EnqueueCopy(request, stream.value, 0, nullptr, 0, &name);
}

}  // namespace gpukit
