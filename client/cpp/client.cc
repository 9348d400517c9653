#include "gpukit/client.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/cpp/channel.h"
#include "client/cpp/device_import.h"
#include "client/cpp/staging_area.h"
#include "client/cpp/submit_socket_client.h"
#include "client/cpp/submit_stream.h"
#include "gpukit/v1/array.grpc.pb.h"
#include "gpukit/v1/compute.grpc.pb.h"
#include "gpukit/v1/session.grpc.pb.h"
#include "proto/dtype_convert.h"
#include "runtime/base/fd_channel_client.h"
#include "runtime/base/fd_channel_protocol.h"
#include "runtime/base/shape.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/unix_fd.h"
#include <sys/mman.h>

namespace gpukit {
namespace {

// The daemon's largest upload chunk: 4 MiB - 64 KiB, so each message stays within 4 MiB.
constexpr int64_t kChunkBytes = (int64_t{4} << 20) - (int64_t{64} << 10);
// The largest op sent on the submit socket; a larger one (long attributes) goes over gRPC.
constexpr size_t kMaxSubmitSocketOpBytes = 32 << 10;

// `text` with every byte outside printable ASCII as '?': gpukitd refuses control characters
// and text that is not UTF-8 in any request string, and the kernel's 15-byte comm can end in
// the middle of a UTF-8 sequence.
std::string PrintableAscii(std::string text) {
  for (char& c : text) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return text;
}

std::string ProgramName() {
  std::ifstream comm("/proc/self/comm");
  std::string name;
  std::getline(comm, name);
  return name.empty() ? "gpukit-client" : PrintableAscii(name);
}

std::string HostName() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return PrintableAscii(name);
}

}  // namespace

namespace internal {

// Everything a session needs, shared by the Client and its Arrays so that an Array that
// outlives its Client stays safe to destroy. It makes the host memory calls of its staging
// area, which holds no reference back to it.
class SessionState final : public HostMemoryCalls {
 public:
  SessionState(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options)
      : options_(options),
        local_(absl::StartsWith(options.address, "unix:")),
        channel_(std::move(channel)),
        sessions_(v1::SessionService::NewStub(channel_)),
        arrays_(v1::ArrayService::NewStub(channel_)),
        compute_(v1::ComputeService::NewStub(channel_)),
        staging_(*this, StagingOptions{.enabled = options.use_shared_memory && local_}) {}

  ~SessionState() override {
    StopKeepAlive();
    Close().IgnoreError();
  }

  absl::Status Open() {
    v1::OpenSessionRequest request;
    request.set_tenant(options_.tenant);
    request.set_partition(SessionPartition(options_.partition));
    request.mutable_client()->set_name(options_.client_name.empty() ? ProgramName()
                                                                    : options_.client_name);
    request.mutable_client()->set_library_version(
        absl::StrCat("gpukit-cpp/", GPUKIT_VERSION_STRING));
    request.mutable_client()->set_pid(getpid());
    request.mutable_client()->set_hostname(HostName());
    request.set_lease_ms(absl::ToInt64Milliseconds(options_.lease));
    const ResourceRequirements& r = options_.resources;
    v1::ResourceRequirements* resources = request.mutable_resources();
    if (r.memory_request_bytes)
      resources->mutable_requests()->set_memory_bytes(*r.memory_request_bytes);
    if (r.memory_limit_bytes) resources->mutable_limits()->set_memory_bytes(*r.memory_limit_bytes);
    if (r.compute_request) resources->mutable_requests()->set_compute(*r.compute_request);
    if (r.compute_limit) resources->mutable_limits()->set_compute(*r.compute_limit);
    v1::OpenSessionResponse response;
    grpc::ClientContext context;
    SetDeadline(context);
    absl::Status status = FromGrpc(sessions_->Open(&context, request, &response), context);
    if (!status.ok()) return status;
    session_id_ = response.session_id();
    lease_ = absl::Milliseconds(response.lease_ms());
    partition_ = response.partition();
    device_index_ = response.device_index();
    if (options_.use_submit_socket) {
      (options_.pipeline ? stream_socket_path_ : submit_socket_path_) = response.submit_socket();
    }
    switch (response.qos_class()) {
      case v1::QOS_CLASS_GUARANTEED:
        qos_class_ = "Guaranteed";
        break;
      case v1::QOS_CLASS_BURSTABLE:
        qos_class_ = "Burstable";
        break;
      default:
        qos_class_ = "BestEffort";
    }
    keepalive_ = std::thread([this] { KeepAliveLoop(); });
    return absl::OkStatus();
  }

  absl::Status KeepAlive() {
    v1::KeepAliveRequest request;
    request.set_session_id(session_id_);
    v1::KeepAliveResponse response;
    grpc::ClientContext context;
    SetDeadline(context);
    return FromGrpc(sessions_->KeepAlive(&context, request, &response), context);
  }

  absl::Status Close() {
    {
      absl::MutexLock lock(&mu_);
      if (closed_ || session_id_.empty()) return absl::OkStatus();
      closed_ = true;
    }
    StopKeepAlive();
    {
      // Closing the connection lets the daemon apply the frees sent on it; the session's
      // close frees the rest.
      absl::MutexLock lock(&socket_mu_);
      socket_.reset();
    }
    std::shared_ptr<SubmitStream> stream;
    {
      absl::MutexLock lock(&stream_mu_);
      stream = std::move(stream_);
    }
    if (stream != nullptr) {
      // Half-closes and waits for the daemon to end the stream once the ops sent have run;
      // a stream that failed says so at Sync, not here. The session's close frees the rest.
      stream->Close().IgnoreError();
      stream.reset();
    }
    v1::CloseSessionRequest request;
    request.set_session_id(session_id_);
    v1::CloseSessionResponse response;
    grpc::ClientContext context;
    SetDeadline(context);
    absl::Status status = FromGrpc(sessions_->Close(&context, request, &response), context);
    // The daemon unmapped the staging region with the session (or will, when its lease
    // lapses if Close did not reach it): only this side's mappings are left.
    staging_.Release();
    decltype(mappings_) mappings;
    {
      absl::MutexLock lock(&mappings_mu_);
      mappings.swap(mappings_);
    }
    mappings.clear();  // unmaps, outside the lock
    return status;
  }

  bool closed() const {
    absl::MutexLock lock(&mu_);
    return closed_;
  }

  void SetDeadline(grpc::ClientContext& context) const {
    context.set_deadline(std::chrono::system_clock::now() +
                         absl::ToChronoMilliseconds(options_.call_timeout));
  }

  // Arrays mapped into this process (Array::Map), by handle.
  absl::StatusOr<DeviceMapping> Map(const std::string& handle) {
    {
      absl::MutexLock lock(&mappings_mu_);
      if (auto it = mappings_.find(handle); it != mappings_.end()) return it->second.first;
    }
    // Over a unix socket the memory comes as a descriptor; a client that cannot receive one
    // (over TCP, on the daemon's host) asks for a legacy CUDA IPC handle.
    const bool ipc_handle = !local_;
    v1::ExportArrayRequest request;
    request.set_session_id(session_id_);
    request.set_handle(handle);
    request.set_cuda_ipc_handle(ipc_handle);
    v1::ExportArrayResponse response;
    grpc::ClientContext context;
    SetDeadline(context);
    absl::Status status = FromGrpc(arrays_->Export(&context, request, &response), context);
    if (!status.ok()) return status;
    absl::StatusOr<std::unique_ptr<DeviceImport>> imported;
    if (ipc_handle) {
      imported = DeviceImport::OpenIpcHandle(response.device_index(), response.cuda_ipc_handle());
    } else {
      absl::StatusOr<ScopedFd> fd =
          ExchangeOnFdChannel(response.fd_channel(), FdChannelOp::kFetch, response.token());
      if (!fd.ok()) return fd.status();
      imported = DeviceImport::Import(response.device_index(), *std::move(fd),
                                      response.allocation_bytes());
    }
    if (!imported.ok()) return imported.status();
    DeviceMapping mapping;
    mapping.device_pointer =
        (*imported)->address() + static_cast<uint64_t>(response.offset_bytes());
    mapping.size_bytes = response.bytes();
    mapping.device_index = response.device_index();
    absl::MutexLock lock(&mappings_mu_);
    // Two threads mapping one array at once: the first mapping stays, the other is unmapped.
    auto [it, added] = mappings_.try_emplace(handle, mapping, nullptr);
    if (added) it->second.second = *std::move(imported);
    return it->second.first;
  }

  // One exchange on gpukitd's descriptor channel: `op` with `token`, and `fd` attached when it
  // is >= 0 (deliver). Returns the descriptor the reply carried (fetch), or an invalid one.
  // The session's one connection is kept and reused (runtime/base/fd_channel_client.h).
  absl::StatusOr<ScopedFd> ExchangeOnFdChannel(const std::string& path, FdChannelOp op,
                                               const std::string& token, int fd = -1) {
    return fd_channel_.Exchange(path, op, token, fd, options_.call_timeout);
  }

  // An array of this process's own memory (Client::ImportDeviceMemory): Map() gives back that
  // memory, nothing to unmap.
  void RememberOwnMemory(const std::string& handle, const DeviceMapping& mapping) {
    absl::MutexLock lock(&mappings_mu_);
    mappings_.try_emplace(handle, mapping, nullptr);
  }

  // Host shared memory of this session (a memfd named `name` in /proc's listings),
  // registered and delivered: Client::RegisterHostMemory's, and the staging area's through
  // HostMemoryCalls. On failure nothing stays registered or mapped.
  absl::StatusOr<RegisteredRegion> RegisterRegion(int64_t bytes, const char* name) {
    absl::StatusOr<ScopedFd> fd = CreateSharedMemory(name, bytes);
    if (!fd.ok()) return fd.status();
    void* data = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED,
                        fd->get(), 0);
    if (data == MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot map ", bytes, " bytes of shared memory"));
    }
    HostMapping mapping(static_cast<char*>(data), bytes);
    v1::RegisterHostMemoryRequest request;
    request.set_session_id(session_id_);
    request.set_bytes(bytes);
    v1::RegisterHostMemoryResponse response;
    grpc::ClientContext context;
    SetDeadline(context);
    GPUKIT_RETURN_IF_ERROR(
        FromGrpc(arrays_->RegisterHostMemory(&context, request, &response), context));
    absl::StatusOr<ScopedFd> delivered = ExchangeOnFdChannel(
        response.fd_channel(), FdChannelOp::kDeliver, response.token(), fd->get());
    if (!delivered.ok()) {
      UnregisterRegion(response.region()).IgnoreError();  // the delivery's error says more
      return delivered.status();
    }
    return RegisteredRegion{response.region(), std::move(mapping)};
  }
  absl::StatusOr<RegisteredRegion> RegisterRegion(int64_t bytes) override {
    return RegisterRegion(bytes, "gpukit-staging");
  }

  absl::Status UnregisterRegion(const std::string& region) override {
    v1::UnregisterHostMemoryRequest request;
    request.set_session_id(session_id_);
    request.set_region(region);
    v1::UnregisterHostMemoryResponse response;
    grpc::ClientContext context;
    SetDeadline(context);
    return FromGrpc(arrays_->UnregisterHostMemory(&context, request, &response), context);
  }

  absl::Status CopyRegion(bool to_array, const std::string& array, int64_t array_offset,
                          const std::string& region, int64_t region_offset,
                          int64_t bytes) override {
    v1::HostMemoryCopyRequest request;
    request.set_session_id(session_id_);
    request.set_handle(array);
    request.set_region(region);
    request.set_array_offset(array_offset);
    request.set_region_offset(region_offset);
    request.set_bytes(bytes);
    v1::HostMemoryCopyResponse response;
    grpc::ClientContext context;
    SetDeadline(context);
    const grpc::Status status = to_array ? arrays_->CopyFromHostMemory(&context, request, &response)
                                         : arrays_->CopyToHostMemory(&context, request, &response);
    return FromGrpc(status, context);
  }

  // Unmaps the array's mapping, if it has one (before it is freed).
  void Unmap(const std::string& handle) {
    std::unique_ptr<DeviceImport> doomed;
    absl::MutexLock lock(&mappings_mu_);
    if (auto it = mappings_.find(handle); it != mappings_.end()) {
      doomed = std::move(it->second.second);
      mappings_.erase(it);
    }
  }

  // The session's Submit stream, opened now if it has none (or its last one ended; the
  // frees that one never answered are sent as unary Frees). Errors: FAILED_PRECONDITION
  // once the session is closed; UNAVAILABLE when no call can start; UNIMPLEMENTED once a
  // stream ended so (a daemon without Submit: frees are unary then).
  absl::StatusOr<std::shared_ptr<SubmitStream>> Stream() {
    std::vector<std::string> lost_frees;
    std::shared_ptr<SubmitStream> stream;
    absl::Status stream_status;
    {
      absl::MutexLock lock(&stream_mu_);
      if (stream_ != nullptr && !stream_->ended()) return stream_;
      if (closed()) return absl::FailedPreconditionError("the session was closed");
      if (stream_ != nullptr) lost_frees = RetireLocked();
      if (submit_unimplemented_.load(std::memory_order_relaxed)) {
        stream_status = absl::UnimplementedError("gpukitd has no ComputeService.Submit");
      }
    }
    if (!stream_status.ok()) {
      for (const std::string& handle : lost_frees) UnaryFree(handle).IgnoreError();
      return stream_status;
    }
    {
      absl::MutexLock lock(&stream_mu_);
      if (stream_ != nullptr && !stream_->ended()) return stream_;  // another thread's
      if (closed()) return absl::FailedPreconditionError("the session was closed");
      if (stream_ != nullptr) {
        std::vector<std::string> more = RetireLocked();
        lost_frees.insert(lost_frees.end(), more.begin(), more.end());
      }
      // The submit socket where the daemon offers it, else (or if it refuses the stream) gRPC.
      absl::StatusOr<std::unique_ptr<SubmitStream>> opened =
          absl::UnavailableError("no submit socket");
      if (!stream_socket_path_.empty()) {
        // gpukitd answers the opening at once; a slow one leaves the stream on gRPC (the
        // wait holds stream_mu_, so it is kept short).
        opened = SubmitStream::OpenOnSocket(stream_socket_path_, session_id_,
                                            std::min(options_.call_timeout, absl::Seconds(5)),
                                            options_.call_timeout);
      }
      if (!opened.ok()) opened = SubmitStream::Open(*compute_, session_id_, options_.call_timeout);
      if (!opened.ok()) return opened.status();
      stream_ = *std::move(opened);
      stream = stream_;
    }
    for (const std::string& handle : lost_frees) UnaryFree(handle).IgnoreError();
    return stream;
  }

  // The session's connection to gpukitd's submit socket (connected at the first use), or null
  // where ops and frees go over gRPC: a pipelined session, a daemon that offers none (TCP, or
  // server.submitSocket off), ClientOptions::use_submit_socket off, a socket that did not
  // connect, or one whose stream ended.
  std::shared_ptr<SubmitSocketClient> Socket() {
    if (submit_socket_path_.empty()) return nullptr;
    absl::MutexLock lock(&socket_mu_);
    if (socket_ == nullptr && !socket_tried_ && !closed()) {
      socket_tried_ = true;
      absl::StatusOr<std::unique_ptr<SubmitSocketClient>> connected =
          SubmitSocketClient::Connect(submit_socket_path_, session_id_, options_.call_timeout);
      if (connected.ok()) socket_ = *std::move(connected);
    }
    if (socket_ != nullptr && socket_->broken()) return nullptr;
    return socket_;
  }

  // The open stream, or null (opens none).
  std::shared_ptr<SubmitStream> CurrentStream() {
    absl::MutexLock lock(&stream_mu_);
    return stream_;
  }

  // Before a unary call that names the session's arrays: waits until every op written to
  // the stream has its answer (see SubmitStream::WaitForResults).
  absl::Status WaitForStream() {
    std::shared_ptr<SubmitStream> stream = CurrentStream();
    if (stream == nullptr) return absl::OkStatus();
    return stream->WaitForResults();
  }

  // A refusal that a free may cure: memory or the array count, not a full queue.
  static bool RefusedForMemory(const absl::Status& status) {
    if (status.code() != absl::StatusCode::kResourceExhausted) return false;
    const std::string reason = RejectReason(status);
    return reason == "REASON_DEVICE_MEMORY_EXHAUSTED" ||
           reason == "REASON_SESSION_LIMIT_EXCEEDED" ||
           reason == "REASON_PARTITION_QUOTA_EXCEEDED" || reason == "REASON_TOO_MANY_ARRAYS";
  }

  // Runs `call`, a unary call that allocates device memory. If the daemon refuses it for
  // memory while frees written to the stream before it had no answer yet, waits for them
  // and runs it once more: a free returns without waiting, and the caller that freed an
  // array to make room expects the room.
  template <typename Call>
  absl::Status AfterPendingFrees(const Call& call) {
    std::shared_ptr<SubmitStream> stream = CurrentStream();
    std::shared_ptr<SubmitSocketClient> socket = CurrentSocket();
    const bool stream_frees = stream != nullptr && stream->HasUnanswered();
    const bool socket_frees = socket != nullptr && socket->HasUnanswered();
    absl::Status result = call();
    if (!(stream_frees || socket_frees) || !RefusedForMemory(result)) return result;
    if (stream_frees) stream->WaitForAllAnswers();
    // A failed free is Sync's to report.
    if (socket_frees) KeepFreeFailure(socket->Settle(options_.call_timeout));
    return call();
  }

  absl::Status Sync() {
    absl::Status socket_status;
    if (std::shared_ptr<SubmitSocketClient> socket = CurrentSocket()) {
      KeepFreeFailure(socket->Settle(options_.call_timeout));
      absl::MutexLock lock(&socket_mu_);
      socket_status = std::exchange(socket_free_failure_, absl::OkStatus());
    }
    std::shared_ptr<SubmitStream> stream = CurrentStream();
    if (stream == nullptr) return socket_status;
    absl::Status status = stream->Sync();
    if (stream->ended()) {  // its end was reported: the next op opens a new stream
      std::vector<std::string> lost_frees;
      {
        absl::MutexLock lock(&stream_mu_);
        if (stream_ == stream) lost_frees = RetireLocked();
      }
      for (const std::string& handle : lost_frees) UnaryFree(handle).IgnoreError();
    }
    return socket_status.ok() ? status : socket_status;
  }

  // Queues the free of `handle` on the submit socket or the stream; without either (a daemon
  // that has no Submit, or a stream that cannot start), a unary Free.
  absl::Status Free(const std::string& handle) {
    if (std::shared_ptr<SubmitSocketClient> socket = Socket()) {
      std::optional<absl::Status> sent = socket->TryFree(handle, options_.call_timeout);
      if (sent.has_value() && sent->ok()) return absl::OkStatus();
    }
    // Another thread's op holds the socket, or it ended: no wait behind it, and no Submit
    // stream either (the socket's stream may hold the session's pipeline a while longer).
    if (CurrentSocket() != nullptr) return UnaryFree(handle);
    if (!submit_unimplemented_.load(std::memory_order_relaxed)) {
      absl::StatusOr<std::shared_ptr<SubmitStream>> stream = Stream();
      if (stream.ok() && (*stream)->Free(handle).ok()) return absl::OkStatus();
    }
    return UnaryFree(handle);
  }

  absl::Status UnaryFree(const std::string& handle) {
    v1::FreeArrayRequest request;
    request.set_session_id(session_id_);
    request.set_handle(handle);
    v1::FreeArrayResponse response;
    grpc::ClientContext context;
    SetDeadline(context);
    return FromGrpc(arrays_->Free(&context, request, &response), context);
  }

  const ClientOptions options_;
  // The daemon is on this host, reached over a unix socket: shared memory and descriptors work.
  const bool local_;
  std::string session_id_;
  absl::Duration lease_;
  std::string partition_;
  std::string qos_class_;
  int device_index_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::SessionService::Stub> sessions_;
  std::unique_ptr<v1::ArrayService::Stub> arrays_;
  std::unique_ptr<v1::ComputeService::Stub> compute_;
  // The session's connection to gpukitd's descriptor channel, kept for its life (before
  // staging_, which delivers through it).
  FdChannelClient fd_channel_;
  // Array::Write and Read of plain bytes through host shared memory (ClientOptions::
  // use_shared_memory).
  StagingArea staging_;

 private:
  void KeepAliveLoop() {
    const absl::Duration period = std::max(lease_ / 3, absl::Milliseconds(100));
    while (!stop_.WaitForNotificationWithTimeout(period)) {
      KeepAlive().IgnoreError();  // a missed renewal is retried; the lease has slack
    }
  }

  void StopKeepAlive() {
    absl::MutexLock lock(&keepalive_mu_);
    if (!stop_.HasBeenNotified()) stop_.Notify();
    if (keepalive_.joinable() && keepalive_.get_id() != std::this_thread::get_id()) {
      keepalive_.join();
    }
  }

  // Drops the ended stream_; returns the frees it never answered. A daemon that answered
  // UNIMPLEMENTED has no Submit: frees are unary from then on.
  std::vector<std::string> RetireLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(stream_mu_) {
    if (stream_->end_status().code() == absl::StatusCode::kUnimplemented) {
      submit_unimplemented_.store(true, std::memory_order_relaxed);
    }
    std::vector<std::string> lost = stream_->TakeUnansweredFrees();
    stream_.reset();
    return lost;
  }

  // The submit socket as it is now (null if none was connected); connects none.
  std::shared_ptr<SubmitSocketClient> CurrentSocket() {
    absl::MutexLock lock(&socket_mu_);
    return socket_;
  }
  // Keeps the first failed free the socket reported until Sync returns it.
  void KeepFreeFailure(absl::Status status) {
    absl::MutexLock lock(&socket_mu_);
    if (socket_free_failure_.ok()) socket_free_failure_ = std::move(status);
  }

  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // OpenSessionResponse.submit_socket, when this session may use it, for a synchronous
  // session's ops (submit_socket_path_) or a pipelined session's stream
  // (stream_socket_path_); written by Open only.
  std::string submit_socket_path_;
  std::string stream_socket_path_;
  absl::Mutex socket_mu_;  // taken before mu_ where both are
  std::shared_ptr<SubmitSocketClient> socket_ ABSL_GUARDED_BY(socket_mu_);
  bool socket_tried_ ABSL_GUARDED_BY(socket_mu_) = false;
  absl::Status socket_free_failure_ ABSL_GUARDED_BY(socket_mu_);
  absl::Mutex stream_mu_;  // taken before mu_ where both are
  std::shared_ptr<SubmitStream> stream_ ABSL_GUARDED_BY(stream_mu_);
  std::atomic<bool> submit_unimplemented_{false};
  absl::Mutex mappings_mu_;
  absl::flat_hash_map<std::string, std::pair<DeviceMapping, std::unique_ptr<DeviceImport>>>
      mappings_ ABSL_GUARDED_BY(mappings_mu_);
  absl::Mutex keepalive_mu_;
  absl::Notification stop_;
  std::thread keepalive_;
};

}  // namespace internal

using internal::ArrayLayout;
using internal::ArrayResult;
using internal::SessionState;
using internal::SubmitStream;

namespace {

// What an Array reports when it has no layout: moved from, or its op was refused.
const ArrayLayout& NoLayout() {
  static const ArrayLayout* const kNone = new ArrayLayout();
  return *kNone;
}

const ArrayLayout& LayoutOf(const std::shared_ptr<ArrayResult>& result) {
  if (result == nullptr) return NoLayout();
  const absl::StatusOr<ArrayLayout>& layout = result->Wait();
  return layout.ok() ? *layout : NoLayout();
}

}  // namespace

const std::vector<int64_t>& Array::shape() const { return LayoutOf(result_).shape; }
DType Array::dtype() const { return LayoutOf(result_).dtype; }
int64_t Array::size_bytes() const { return LayoutOf(result_).size_bytes; }

int64_t Array::element_count() const {
  int64_t count = 1;
  for (int64_t d : shape()) count *= d;
  return count;
}

absl::Status Array::status() const {
  if (result_ == nullptr) return absl::OkStatus();
  return result_->Wait().status();
}

Array& Array::operator=(Array&& other) noexcept {
  if (this != &other) {
    Free().IgnoreError();
    session_ = std::move(other.session_);
    handle_ = std::move(other.handle_);
    result_ = std::move(other.result_);
  }
  return *this;
}

Array::~Array() { Free().IgnoreError(); }

absl::Status Array::Free() {
  if (session_ == nullptr) return absl::FailedPreconditionError("array was freed or moved");
  std::shared_ptr<SessionState> session = std::move(session_);
  // The daemon refused the op that was to make it: there is nothing to free.
  if (result_ != nullptr && result_->failed()) return absl::OkStatus();
  session->Unmap(handle_);
  if (session->closed()) return absl::OkStatus();  // the session freed it already
  return session->Free(handle_);
}

namespace {

// Whether `array` can be used in a call: not freed or moved, and made (its op was not
// refused; waits for the answer of a pipelined op).
// A refused op's array reports the session's first failure since its last sync point if
// there is one (the root cause; returning it is a sync point, see the header), else its own.
absl::Status Usable(const std::shared_ptr<SessionState>& session, const Array& array) {
  if (session == nullptr) return absl::FailedPreconditionError("array was freed or moved");
  absl::Status made = array.status();
  if (made.ok()) return made;
  GPUKIT_RETURN_IF_ERROR(session->WaitForStream());
  return made;
}

}  // namespace

absl::Status Array::Write(const void* data, int64_t bytes) const {
  GPUKIT_RETURN_IF_ERROR(Usable(session_, *this));
  GPUKIT_RETURN_IF_ERROR(session_->WaitForStream());
  return WriteNow(data, bytes);
}

absl::Status Array::WriteNow(const void* data, int64_t bytes) const {
  if (bytes != size_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("write of ", bytes, " bytes into array ",
                                                   handle_, " of ", size_bytes(), " bytes"));
  }
  if (std::optional<absl::Status> staged =
          session_->staging_.Write(handle_, static_cast<const char*>(data), bytes)) {
    return *staged;
  }
  grpc::ClientContext context;
  session_->SetDeadline(context);
  v1::UploadResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::UploadRequest>> writer =
      session_->arrays_->Upload(&context, &response);
  v1::UploadRequest message;
  message.mutable_header()->set_session_id(session_->session_id_);
  message.mutable_header()->set_handle(handle_);
  bool ok = writer->Write(message);
  const char* bytes_in = static_cast<const char*>(data);
  for (int64_t offset = 0; ok && offset < bytes; offset += kChunkBytes) {
    v1::UploadRequest chunk;
    chunk.mutable_chunk()->set_offset(offset);
    chunk.mutable_chunk()->set_data(bytes_in + offset, std::min(kChunkBytes, bytes - offset));
    ok = writer->Write(chunk);
  }
  writer->WritesDone();
  return FromGrpc(writer->Finish(), context);
}

absl::Status Array::Read(void* out, int64_t bytes) const {
  GPUKIT_RETURN_IF_ERROR(Usable(session_, *this));
  if (bytes != size_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("read of ", bytes, " bytes from array ", handle_,
                                                   " of ", size_bytes(), " bytes"));
  }
  GPUKIT_RETURN_IF_ERROR(session_->WaitForStream());
  if (std::optional<absl::Status> staged =
          session_->staging_.Read(handle_, static_cast<char*>(out), bytes)) {
    return *staged;
  }
  v1::DownloadRequest request;
  request.set_session_id(session_->session_id_);
  request.set_handle(handle_);
  grpc::ClientContext context;
  session_->SetDeadline(context);
  std::unique_ptr<grpc::ClientReader<v1::DownloadResponse>> reader =
      session_->arrays_->Download(&context, request);
  v1::DownloadResponse message;
  char* bytes_out = static_cast<char*>(out);
  int64_t received = 0;
  bool overflow = false;
  while (reader->Read(&message)) {
    const v1::DataChunk& chunk = message.chunk();
    const int64_t size = static_cast<int64_t>(chunk.data().size());
    if (chunk.offset() < 0 || chunk.offset() > bytes || size > bytes - chunk.offset()) {
      overflow = true;
      context.TryCancel();
      break;
    }
    std::memcpy(bytes_out + chunk.offset(), chunk.data().data(), size);
    received += size;
  }
  absl::Status status = FromGrpc(reader->Finish(), context);
  if (overflow) return absl::InternalError("daemon sent a chunk outside the array");
  if (!status.ok()) return status;
  if (received != bytes) {
    return absl::InternalError(
        absl::StrCat("download returned ", received, " of ", bytes, " bytes"));
  }
  return absl::OkStatus();
}

namespace {

absl::Status CopyWithHostMemory(SessionState& session, bool to_array, const std::string& handle,
                                const HostMemory& memory, int64_t offset, int64_t bytes) {
  if (memory.region().empty()) {
    return absl::FailedPreconditionError("host memory was unregistered or moved");
  }
  return session.CopyRegion(to_array, handle, /*array_offset=*/0, memory.region(), offset, bytes);
}

}  // namespace

absl::StatusOr<DeviceMapping> Array::Map() const {
  GPUKIT_RETURN_IF_ERROR(Usable(session_, *this));
  GPUKIT_RETURN_IF_ERROR(session_->WaitForStream());
  return session_->Map(handle_);
}

absl::Status Array::Write(const HostMemory& source, int64_t source_offset) const {
  GPUKIT_RETURN_IF_ERROR(Usable(session_, *this));
  GPUKIT_RETURN_IF_ERROR(session_->WaitForStream());
  return CopyWithHostMemory(*session_, /*to_array=*/true, handle_, source, source_offset,
                            size_bytes());
}

absl::Status Array::Read(const HostMemory& target, int64_t target_offset) const {
  GPUKIT_RETURN_IF_ERROR(Usable(session_, *this));
  GPUKIT_RETURN_IF_ERROR(session_->WaitForStream());
  return CopyWithHostMemory(*session_, /*to_array=*/false, handle_, target, target_offset,
                            size_bytes());
}

HostMemory::HostMemory(HostMemory&& other) noexcept
    : session_(std::move(other.session_)),
      region_(std::exchange(other.region_, std::string())),
      data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)) {}

HostMemory& HostMemory::operator=(HostMemory&& other) noexcept {
  if (this != &other) {
    Unregister().IgnoreError();
    session_ = std::move(other.session_);
    region_ = std::exchange(other.region_, std::string());
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
  }
  return *this;
}

HostMemory::~HostMemory() { Unregister().IgnoreError(); }

absl::Status HostMemory::Unregister() {
  absl::Status status = absl::OkStatus();
  if (session_ != nullptr && !region_.empty() && !session_->closed()) {
    status = session_->UnregisterRegion(region_);
  }
  if (data_ != nullptr) ::munmap(data_, static_cast<size_t>(size_bytes_));
  data_ = nullptr;
  region_.clear();
  session_.reset();
  return status;
}

absl::StatusOr<HostMemory> Client::RegisterHostMemory(int64_t bytes) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("host memory of ", bytes, " bytes"));
  }
  absl::StatusOr<internal::RegisteredRegion> region =
      state_->RegisterRegion(bytes, "gpukit-host-memory");
  if (!region.ok()) return region.status();
  return HostMemory(state_, std::move(region->handle), region->mapping.release(), bytes);
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  ClientOptions resolved = options;
  if (resolved.address.empty()) resolved.address = DefaultClientTarget();
  if (resolved.token.empty()) resolved.token = DefaultClientToken();
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      ConnectChannel(resolved.address, resolved.connect_timeout,
                     ChannelSecurity{resolved.token, resolved.tls_ca_file, resolved.tls_cert_file,
                                     resolved.tls_key_file});
  if (!channel.ok()) return channel.status();
  auto state = std::make_shared<SessionState>(*std::move(channel), resolved);
  absl::Status status = state->Open();
  if (!status.ok()) return status;
  return std::unique_ptr<Client>(new Client(std::move(state)));
}

Client::~Client() { state_->Close().IgnoreError(); }

const std::string& Client::session_id() const { return state_->session_id_; }
absl::Duration Client::lease() const { return state_->lease_; }
const std::string& Client::address() const { return state_->options_.address; }
const std::string& Client::partition() const { return state_->partition_; }
const std::string& Client::qos_class() const { return state_->qos_class_; }
int Client::device_index() const { return state_->device_index_; }

absl::Status Client::KeepAlive() { return state_->KeepAlive(); }
absl::Status Client::Sync() { return state_->Sync(); }
absl::Status Client::Close() { return state_->Close(); }

absl::StatusOr<Array> Client::Empty(std::vector<int64_t> shape, DType dtype) {
  v1::CreateArrayRequest request;
  request.set_session_id(state_->session_id_);
  request.mutable_shape()->Assign(shape.begin(), shape.end());
  request.set_dtype(DTypeToProto(dtype));
  v1::CreateArrayResponse response;
  absl::Status status = state_->AfterPendingFrees([&] {
    grpc::ClientContext context;
    state_->SetDeadline(context);
    return FromGrpc(state_->arrays_->Create(&context, request, &response), context);
  });
  if (!status.ok()) return status;
  return Array(state_, response.array().handle(),
               ArrayResult::Known({std::move(shape), dtype, response.array().size_bytes()}));
}

absl::StatusOr<Array> Client::ImportDeviceMemory(uint64_t device_pointer,
                                                 std::vector<int64_t> shape, DType dtype) {
  GPUKIT_RETURN_IF_ERROR(ValidateShape(shape, "shape"));
  GPUKIT_ASSIGN_OR_RETURN(int64_t bytes, ByteSize(shape, dtype));
  GPUKIT_ASSIGN_OR_RETURN(internal::SharedDeviceMemory memory,
                          internal::ShareDeviceMemory(device_pointer, bytes));
  v1::ImportArrayRequest request;
  request.set_session_id(state_->session_id_);
  request.mutable_shape()->Assign(shape.begin(), shape.end());
  request.set_dtype(DTypeToProto(dtype));
  request.set_offset_bytes(memory.offset_bytes);
  if (memory.fd.valid()) {
    request.set_descriptor_allocation_bytes(memory.allocation_bytes);
  } else {
    request.set_cuda_ipc_handle(memory.cuda_ipc_handle);
  }
  v1::ImportArrayResponse response;
  grpc::ClientContext context;
  state_->SetDeadline(context);
  GPUKIT_RETURN_IF_ERROR(FromGrpc(state_->arrays_->Import(&context, request, &response), context));
  if (memory.fd.valid()) {  // the array exists once gpukitd has the descriptor
    GPUKIT_RETURN_IF_ERROR(state_
                               ->ExchangeOnFdChannel(response.fd_channel(), FdChannelOp::kDeliver,
                                                     response.token(), memory.fd.get())
                               .status());
  }
  const std::string& handle = response.array().handle();
  state_->RememberOwnMemory(handle, DeviceMapping{device_pointer, bytes, memory.device_index});
  return Array(state_, handle, ArrayResult::Known({std::move(shape), dtype, bytes}));
}

absl::StatusOr<Array> Client::FromBytes(const void* data, int64_t bytes, std::vector<int64_t> shape,
                                        DType dtype) {
  absl::StatusOr<int64_t> expected = ByteSize(shape, dtype);
  if (expected.ok() && *expected != bytes) {
    return absl::InvalidArgumentError(absl::StrCat(bytes, " bytes of data for shape ",
                                                   ShapeToString(shape), " ", DTypeName(dtype),
                                                   ", which needs ", *expected));
  }
  absl::StatusOr<Array> array = Empty(std::move(shape), dtype);
  if (!array.ok()) return array.status();
  // A new array that no op names yet: no need to wait for the stream's ops.
  absl::Status status = array->WriteNow(data, bytes);
  if (!status.ok()) return status;
  return array;
}

absl::StatusOr<Array> Client::RunOp(absl::string_view op, const std::vector<Operand>& inputs,
                                    const Attrs& attrs) {
  return RunOp(op, inputs, attrs, state_->options_.task);
}

namespace {

// Fills the op's fields of a RunOpRequest or a PipelinedRunOp, which spell them alike.
template <typename OpMessage>
void FillOp(absl::string_view op, const std::vector<Operand>& inputs, const Attrs& attrs,
            const TaskOptions& task, OpMessage& out_op) {
  out_op.mutable_task()->set_priority(task.priority);
  out_op.mutable_task()->set_queue_timeout_ms(absl::ToInt64Milliseconds(task.queue_timeout));
  out_op.set_op(std::string(op));
  for (const Operand& operand : inputs) {
    v1::Operand* out = out_op.add_inputs();
    if (const Array* const* array = std::get_if<const Array*>(&operand.value())) {
      out->set_handle((*array)->handle());
    } else if (const double* f = std::get_if<double>(&operand.value())) {
      out->mutable_scalar()->set_float_value(*f);
    } else {
      out->mutable_scalar()->set_int_value(std::get<int64_t>(operand.value()));
    }
  }
  for (const auto& [name, value] : attrs) {
    v1::AttrValue& out = (*out_op.mutable_attrs())[name];
    std::visit(
        [&out](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, int64_t>) {
            out.set_int_value(v);
          } else if constexpr (std::is_same_v<T, double>) {
            out.set_float_value(v);
          } else if constexpr (std::is_same_v<T, bool>) {
            out.set_bool_value(v);
          } else if constexpr (std::is_same_v<T, DType>) {
            out.set_dtype_value(DTypeToProto(v));
          } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            out.mutable_int_list()->mutable_values()->Assign(v.begin(), v.end());
          } else {
            out.set_string_value(v);
          }
        },
        value);
  }
}

}  // namespace

absl::StatusOr<Array> Client::RunOp(absl::string_view op, const std::vector<Operand>& inputs,
                                    const Attrs& attrs, const TaskOptions& task) {
  // The array a synchronous op made, as the daemon described it.
  auto array_of = [this](const v1::ArrayInfo& info) -> absl::StatusOr<Array> {
    absl::StatusOr<DType> dtype = DTypeFromProto(info.dtype(), "output.dtype");
    if (!dtype.ok()) return dtype.status();
    return Array(state_, info.handle(),
                 ArrayResult::Known({std::vector<int64_t>(info.shape().begin(), info.shape().end()),
                                     *dtype, info.size_bytes()}));
  };
  if (state_->options_.pipeline) {
    v1::PipelinedRunOp pipelined;
    FillOp(op, inputs, attrs, task, pipelined);
    GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<SubmitStream> stream, state_->Stream());
    GPUKIT_ASSIGN_OR_RETURN(SubmitStream::Submitted submitted, stream->Run(pipelined));
    return Array(state_, std::move(submitted.handle), std::move(submitted.result));
  }
  if (std::shared_ptr<internal::SubmitSocketClient> socket = state_->Socket()) {
    v1::PipelinedRunOp submitted;
    FillOp(op, inputs, attrs, task, submitted);
    // A wait in the partition's queue ends with the call's deadline, as a gRPC call's does.
    const int64_t call_ms = absl::ToInt64Milliseconds(state_->options_.call_timeout);
    const int64_t queue_ms = submitted.task().queue_timeout_ms();
    submitted.mutable_task()->set_queue_timeout_ms(queue_ms > 0 ? std::min(queue_ms, call_ms)
                                                                : call_ms);
    // An op too large for one datagram goes over gRPC (a unary call has room for it).
    if (submitted.ByteSizeLong() <= kMaxSubmitSocketOpBytes) {
      std::optional<absl::StatusOr<v1::ArrayInfo>> info =
          socket->TryRun(submitted, state_->options_.call_timeout);
      if (info.has_value()) {  // else another thread's op holds the socket: over gRPC
        if (!info->ok()) return info->status();
        return array_of(**info);
      }
    }
  }
  v1::RunOpRequest request;
  request.set_session_id(state_->session_id_);
  FillOp(op, inputs, attrs, task, request);
  GPUKIT_RETURN_IF_ERROR(state_->WaitForStream());
  v1::RunOpResponse response;
  absl::Status status = state_->AfterPendingFrees([&] {
    grpc::ClientContext context;
    state_->SetDeadline(context);
    return FromGrpc(state_->compute_->RunOp(&context, request, &response), context);
  });
  if (!status.ok()) return status;
  return array_of(response.output());
}

absl::StatusOr<Array> Client::Reduce(absl::string_view op, const Array& a,
                                     std::optional<int64_t> axis, bool keepdims) {
  Attrs attrs;
  if (axis.has_value()) attrs.emplace_back("axis", *axis);
  if (keepdims) attrs.emplace_back("keepdims", true);
  return RunOp(op, {a}, attrs);
}

absl::StatusOr<Array> Client::ReduceAxes(absl::string_view op, const Array& a,
                                         const std::vector<int64_t>& axes, bool keepdims) {
  Attrs attrs;
  attrs.emplace_back("axis", axes);  // an int_list, even of one axis or none
  if (keepdims) attrs.emplace_back("keepdims", true);
  return RunOp(op, {a}, attrs);
}
absl::StatusOr<Array> Client::Sum(const Array& a, const std::vector<int64_t>& axes,
                                  bool keepdims) {
  return ReduceAxes(op_names::kSum, a, axes, keepdims);
}
absl::StatusOr<Array> Client::Mean(const Array& a, const std::vector<int64_t>& axes,
                                   bool keepdims) {
  return ReduceAxes(op_names::kMean, a, axes, keepdims);
}
absl::StatusOr<Array> Client::Max(const Array& a, const std::vector<int64_t>& axes,
                                  bool keepdims) {
  return ReduceAxes(op_names::kMax, a, axes, keepdims);
}
absl::StatusOr<Array> Client::Min(const Array& a, const std::vector<int64_t>& axes,
                                  bool keepdims) {
  return ReduceAxes(op_names::kMin, a, axes, keepdims);
}

absl::StatusOr<Array> Client::Sum(const Array& a, std::optional<int64_t> axis, bool keepdims) {
  return Reduce(op_names::kSum, a, axis, keepdims);
}
absl::StatusOr<Array> Client::Mean(const Array& a, std::optional<int64_t> axis, bool keepdims) {
  return Reduce(op_names::kMean, a, axis, keepdims);
}
absl::StatusOr<Array> Client::Max(const Array& a, std::optional<int64_t> axis, bool keepdims) {
  return Reduce(op_names::kMax, a, axis, keepdims);
}
absl::StatusOr<Array> Client::Min(const Array& a, std::optional<int64_t> axis, bool keepdims) {
  return Reduce(op_names::kMin, a, axis, keepdims);
}

absl::StatusOr<Array> Client::Astype(const Array& a, DType dtype) {
  return RunOp(op_names::kAstype, {a}, {{"dtype", dtype}});
}

absl::StatusOr<Array> Client::Reshape(const Array& a, std::vector<int64_t> shape) {
  return RunOp(op_names::kReshape, {a}, {{"shape", std::move(shape)}});
}

absl::StatusOr<Array> Client::Transpose(const Array& a, std::vector<int64_t> perm) {
  Attrs attrs;
  if (!perm.empty()) attrs.emplace_back("perm", std::move(perm));
  return RunOp(op_names::kTranspose, {a}, attrs);
}

absl::StatusOr<Kernel> Client::CompileKernel(
    const std::string& source, std::vector<std::string> entries, std::vector<std::string> options,
    const std::vector<std::pair<std::string, std::string>>& headers) {
  v1::CompileKernelRequest request;
  request.set_session_id(state_->session_id_);
  request.set_source(source);
  for (std::string& entry : entries) request.add_entries(std::move(entry));
  for (std::string& option : options) request.add_options(std::move(option));
  for (const auto& [name, text] : headers) {
    v1::KernelHeader* header = request.add_headers();
    header->set_name(name);
    header->set_source(text);
  }
  v1::CompileKernelResponse response;
  grpc::ClientContext context;
  state_->SetDeadline(context);
  absl::Status status =
      FromGrpc(state_->compute_->CompileKernel(&context, request, &response), context);
  if (!status.ok()) return status;
  Kernel kernel;
  kernel.handle = response.kernel();
  for (const v1::KernelEntry& entry : response.entries()) {
    kernel.entries.push_back(entry.name());
    kernel.lowered_names.push_back(entry.lowered_name());
  }
  kernel.arch = response.arch();
  kernel.origin = response.source();
  kernel.compile_ms = response.compile_ms();
  kernel.log = response.log();
  return kernel;
}

absl::StatusOr<std::string> Client::LastCompileLog() {
  v1::GetCompileLogRequest request;
  request.set_session_id(state_->session_id_);
  v1::GetCompileLogResponse response;
  grpc::ClientContext context;
  state_->SetDeadline(context);
  absl::Status status =
      FromGrpc(state_->compute_->GetCompileLog(&context, request, &response), context);
  if (!status.ok()) return status;
  return response.log();
}

absl::StatusOr<absl::Duration> Client::LaunchKernel(const Kernel& kernel, absl::string_view entry,
                                                    Dim3 grid, Dim3 block,
                                                    uint32_t shared_memory_bytes,
                                                    const std::vector<KernelArgument>& args) {
  return LaunchKernel(kernel, entry, grid, block, shared_memory_bytes, args, state_->options_.task);
}

absl::StatusOr<absl::Duration> Client::LaunchKernel(const Kernel& kernel, absl::string_view entry,
                                                    Dim3 grid, Dim3 block,
                                                    uint32_t shared_memory_bytes,
                                                    const std::vector<KernelArgument>& args,
                                                    const TaskOptions& task) {
  v1::LaunchKernelRequest request;
  request.set_session_id(state_->session_id_);
  request.set_kernel(kernel.handle);
  request.set_entry(std::string(entry));
  auto set_dim = [](const Dim3& dim, v1::Dim3* out) {
    out->set_x(dim.x);
    out->set_y(dim.y);
    out->set_z(dim.z);
  };
  set_dim(grid, request.mutable_grid());
  set_dim(block, request.mutable_block());
  request.set_shared_memory_bytes(shared_memory_bytes);
  for (const KernelArgument& arg : args) {
    v1::KernelArgument* out = request.add_args();
    std::visit(
        [out](auto v) {
          using T = decltype(v);
          if constexpr (std::is_same_v<T, const Array*>) {
            out->set_array(v->handle());
          } else if constexpr (std::is_same_v<T, float>) {
            out->set_f32(v);
          } else if constexpr (std::is_same_v<T, double>) {
            out->set_f64(v);
          } else if constexpr (std::is_same_v<T, int32_t>) {
            out->set_i32(v);
          } else if constexpr (std::is_same_v<T, int64_t>) {
            out->set_i64(v);
          } else if constexpr (std::is_same_v<T, uint32_t>) {
            out->set_u32(v);
          } else {
            static_assert(std::is_same_v<T, uint64_t>);
            out->set_u64(v);
          }
        },
        arg.value());
  }
  request.mutable_task()->set_priority(task.priority);
  request.mutable_task()->set_queue_timeout_ms(absl::ToInt64Milliseconds(task.queue_timeout));
  GPUKIT_RETURN_IF_ERROR(state_->WaitForStream());
  v1::LaunchKernelResponse response;
  grpc::ClientContext context;
  state_->SetDeadline(context);
  absl::Status status =
      FromGrpc(state_->compute_->LaunchKernel(&context, request, &response), context);
  if (!status.ok()) return status;
  return absl::Microseconds(response.device_us());
}

absl::Status Client::FreeKernel(const Kernel& kernel) {
  v1::FreeKernelRequest request;
  request.set_session_id(state_->session_id_);
  request.set_kernel(kernel.handle);
  v1::FreeKernelResponse response;
  grpc::ClientContext context;
  state_->SetDeadline(context);
  return FromGrpc(state_->compute_->FreeKernel(&context, request, &response), context);
}

std::string RejectReason(const absl::Status& status) {
  absl::optional<absl::Cord> reason = status.GetPayload(kReasonPayloadUrl);
  return reason.has_value() ? std::string(*reason) : std::string();
}

}  // namespace gpukit
