#include "daemon/service/submit_stream.h"

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/service/convert.h"
#include "daemon/service/submit_session.h"
#include "runtime/base/thread_name.h"
#include "spdlog/spdlog.h"

namespace gpukit::service {
namespace {

// Messages a stream keeps for reuse, of each kind (see Memory in the header).
constexpr size_t kSpareMessages = 2;

// Keeps `message` (done with) in `spares` for the next one to be read or built into, unless
// enough are kept already.
template <typename M>
void Keep(std::vector<M>& spares, M&& message) {
  if (spares.size() < kSpareMessages) spares.push_back(std::move(message));
}

class SubmitReactor final : public grpc::ServerBidiReactor<v1::SubmitRequest, v1::SubmitResponse> {
 public:
  SubmitReactor(Core& core, const AccessGuard& guard, grpc::CallbackServerContext* context)
      : context_(context),
        session_(
            core,
            [&guard, context](absl::string_view session_id) {
              return guard.CheckSessionOf(guard.Caller(*context), session_id);
            },
            context) {
    {
      absl::MutexLock lock(&mu_);
      read_outstanding_ = true;
      // Under the lock: the worker reads worker_ (to detach itself) under it too.
      worker_ = std::thread([this] {
        NameThisThread("gk-submit");
        Work();
      });
    }
    StartRead(&reading_);
  }

  void OnReadDone(bool ok) override {
    bool read_on = false;
    {
      absl::MutexLock lock(&mu_);
      read_outstanding_ = false;
      if (!ok) {
        // The client half-closed, or went away (OnCancel tells which).
        reads_ended_ = true;
        return;
      }
      inbox_.push_back(std::move(reading_));  // leaves reading_ empty
      if (!spare_requests_.empty()) {
        reading_ = std::move(spare_requests_.back());  // cleared by the worker
        spare_requests_.pop_back();
      }
      read_on = MayReadLocked();
      if (read_on) read_outstanding_ = true;
    }
    if (read_on) StartRead(&reading_);
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      if (!ok) {
        // The client went away: nothing more will be sent.
        write_failed_ = true;
        writing_ = false;
        outbox_.clear();
        return;
      }
      if (outbox_.empty()) {
        writing_ = false;
        return;
      }
      sending_.Swap(&outbox_.front());
      Keep(spare_responses_, std::move(outbox_.front()));  // the one just sent
      outbox_.pop_front();
    }
    StartWrite(&sending_);
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }

  // gRPC's last call. The worker is past Finish by now, waiting for this: it is joined here
  // and the reactor deleted, so no thread of a stream outlives the server's Wait. (Should
  // gRPC ever run this inline in Finish, on the worker itself, the worker deletes it.)
  void OnDone() override {
    std::thread worker;
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
      if (worker_.get_id() != std::this_thread::get_id()) worker = std::move(worker_);
    }
    if (!worker.joinable()) return;
    worker.join();
    delete this;
  }

 private:
  // Whether to read the next request now: not after the end, a Finish or a cancellation,
  // and not beyond kMaxQueuedRequests waiting for the worker.
  bool MayReadLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !reads_ended_ && !read_outstanding_ && !cancelled_ && !finishing_ &&
           static_cast<int>(inbox_.size()) < kMaxQueuedRequests;
  }

  // The worker: takes the requests in order and answers them, then ends the stream.
  void Work() {
    grpc::Status status = Serve();
    spdlog::debug("submit stream ends: session={} requests={} ops={} status={}",
                  session_.session_id(), requests_read_, session_.ops(),
                  static_cast<int>(status.error_code()));
    session_.Close();
    {
      absl::MutexLock lock(&mu_);
      // What was answered goes out before the status (unless the client is gone).
      auto sent = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return (!writing_ && outbox_.empty()) || write_failed_ || cancelled_;
      };
      mu_.Await(absl::Condition(&sent));
      finishing_ = true;
      if (cancelled_ || write_failed_) {
        status = grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      }
    }
    Finish(status);
    bool delete_here = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&done_));
      // Still ours: OnDone ran on this thread and left the reactor to it.
      delete_here = worker_.joinable();
      if (delete_here) worker_.detach();
    }
    if (delete_here) delete this;
  }

  // Answers requests until the stream ends; returns its status.
  grpc::Status Serve() {
    // The request being answered and the response being built: each a message done with,
    // when there is one (their parts are reused).
    v1::SubmitRequest request;
    v1::SubmitResponse response;
    for (;;) {
      bool read_on = false;
      // Work is held while more requests wait to be answered: their ops' work goes to a
      // device executor together (a few messages per batch, not several per op).
      if (!MoreQueued()) session_.EndBurst();
      request.Clear();
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          if (cancelled_ || write_failed_) return true;
          if (static_cast<int>(outbox_.size()) >= kMaxQueuedResponses) return false;
          return !inbox_.empty() || reads_ended_;
        };
        mu_.Await(absl::Condition(&ready));
        if (cancelled_ || write_failed_) return grpc::Status::CANCELLED;
        if (inbox_.empty()) return grpc::Status::OK;  // half-closed, all answered
        Keep(spare_requests_, std::move(request));    // leaves request empty
        request.Swap(&inbox_.front());
        inbox_.pop_front();
        if (!spare_responses_.empty()) {
          response = std::move(spare_responses_.back());
          spare_responses_.pop_back();
        }
        read_on = MayReadLocked();
        if (read_on) read_outstanding_ = true;
      }
      if (read_on) StartRead(&reading_);
      ++requests_read_;
      absl::StatusOr<bool> answer =
          session_.Answer(request, response, [this](v1::SubmitResponse r) { Send(std::move(r)); });
      if (!answer.ok()) return ToGrpc(answer.status(), context_);
      if (*answer) Send(std::move(response));
    }
  }

  bool MoreQueued() {
    absl::MutexLock lock(&mu_);
    return !inbox_.empty();
  }

  // Queues `response` for sending; starts the write when none is outstanding.
  void Send(v1::SubmitResponse response) {
    {
      absl::MutexLock lock(&mu_);
      if (write_failed_ || cancelled_) return;
      if (writing_) {
        outbox_.push_back(std::move(response));
        return;
      }
      writing_ = true;
      sending_.Swap(&response);
      Keep(spare_responses_, std::move(response));  // the one sent before
    }
    StartWrite(&sending_);
  }

  grpc::CallbackServerContext* const context_;
  std::thread worker_ ABSL_GUARDED_BY(mu_);
  // The worker's own.
  SubmitSession session_;
  uint64_t requests_read_ = 0;  // for the closing log line

  absl::Mutex mu_;
  v1::SubmitRequest reading_;  // the read outstanding, if read_outstanding_
  bool read_outstanding_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_ended_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<v1::SubmitRequest> inbox_ ABSL_GUARDED_BY(mu_);
  v1::SubmitResponse sending_;  // the write outstanding, if writing_
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<v1::SubmitResponse> outbox_ ABSL_GUARDED_BY(mu_);
  // Messages done with, kept for reuse (Keep): requests cleared, responses not yet.
  std::vector<v1::SubmitRequest> spare_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::SubmitResponse> spare_responses_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerBidiReactor<v1::SubmitRequest, v1::SubmitResponse>* NewSubmitReactor(
    Core& core, const AccessGuard& guard, grpc::CallbackServerContext* context) {
  return new SubmitReactor(core, guard, context);
}

}  // namespace gpukit::service
