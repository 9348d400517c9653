// InlineUnary: a unary RPC written as a synchronous handler, served as a callback method.
//
// gRPC's synchronous server hands each request from the thread that read it to a thread that
// runs the handler, and wakes another to go on polling: on the H200 host that made a RunOp
// with a 58 us handler cost 117 us beyond its handler where the raw ping (a callback method)
// costs 79 us in all (docs/benchmarks.md, "Where a synchronous RunOp's time goes"). Served as
// a callback method, the handler runs on the gRPC thread that read the request, and its
// reply goes out from there: no hand-off. But gRPC's callback threads are few and shared by
// every stream and the health service, and a handler may block (a RunOp waits for admission
// and for its work), so at most `limit` handlers run inline at once; the others go to a
// WorkerPool of their own, as do those the caller keeps off gRPC's threads (RunOps of a
// session of a lower QoS class than another open on its device: a BestEffort flood's long
// ops must not take the places a Guaranteed tenant's calls need); when all of its threads
// are busy, a call is refused at once with
// RESOURCE_EXHAUSTED, as gRPC's synchronous server refuses one beyond server.maxThreads.
//
//   grpc::ServerUnaryReactor* RunOp(grpc::CallbackServerContext* context, const Req* request,
//                                   Resp* response) override {
//     return inline_.Serve(context, /*may_inline=*/true,
//                          [=] { return RunOpNow(context, request, response); });
//   }
//
// Thread safety: Serve may be called from any thread at once.
#ifndef GPUKIT_DAEMON_SERVICE_INLINE_UNARY_H_
#define GPUKIT_DAEMON_SERVICE_INLINE_UNARY_H_

#include <atomic>
#include <utility>

#include "daemon/service/worker_pool.h"
#include "grpcpp/grpcpp.h"

namespace gpukit::service {

// How many unary handlers may run on gRPC's callback threads at once by default: one per 8
// cores (2 on a 16-core host), none on smaller hosts, whose two callback threads a blocked
// handler would take from every stream. GPUKIT_INLINE_UNARY=<n> sets it (tests, measurements).
int DefaultInlineUnaryLimit();

class InlineUnary {
 public:
  // `workers` runs the handlers that do not run inline (its max_threads is the cap); it must
  // outlive every call.
  InlineUnary(WorkerPool& workers, int limit) : workers_(workers), limit_(limit) {}

  // Runs `handler` (returning the call's grpc::Status; copyable) inline when `may_inline`
  // and fewer than `limit` do now, else on the pool, and finishes the call with its status.
  template <typename Handler>
  grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* context, bool may_inline,
                                  Handler handler) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (may_inline && TakeInlinePlace()) {
      grpc::Status status = handler();
      running_.fetch_sub(1, std::memory_order_acq_rel);
      reactor->Finish(std::move(status));
    } else if (!workers_.TrySchedule(
                   [reactor, handler]() mutable { reactor->Finish(handler()); })) {
      reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, kBusy));
    }
    return reactor;
  }

  // What a call gets when every thread of the pool is busy (the text of gRPC's synchronous
  // server in the same case, which clients may already look for, and the setting).
  static constexpr const char* kBusy =
      "Server Threadpool Exhausted: every request thread of gpukitd is busy "
      "(server.maxThreads); retry later";

 private:
  // Counts one more handler inline if fewer than limit_ run now; else counts nothing.
  bool TakeInlinePlace() {
    if (running_.fetch_add(1, std::memory_order_acq_rel) < limit_) return true;
    running_.fetch_sub(1, std::memory_order_acq_rel);
    return false;
  }

  WorkerPool& workers_;
  const int limit_;
  std::atomic<int> running_{0};
};

}  // namespace gpukit::service

#endif  // GPUKIT_DAEMON_SERVICE_INLINE_UNARY_H_
