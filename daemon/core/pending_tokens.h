// PendingTokens: values that wait to be claimed with single-use tokens that lapse. This is what
// pairs a descriptor-channel exchange with the gRPC request that announced it: a host memory
// region waiting for its descriptor (RegisterHostMemory), an exported array's descriptor
// waiting to be fetched (ExportArray).
//
//   PendingTokens<ScopedFd> exports(clock);
//   const std::string token = exports.Add(std::move(fd), absl::Seconds(10));
//   std::optional<ScopedFd> fd = exports.Take(token);  // once; nullopt after that or too late
//
// Tokens are 128 random bits (32 hex digits). Lapsed entries are dropped whenever one is added.
//
// Thread safety: thread-safe.
#ifndef GPUKIT_DAEMON_CORE_PENDING_TOKENS_H_
#define GPUKIT_DAEMON_CORE_PENDING_TOKENS_H_

#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/scheduler/clock.h"
#include "daemon/session/session_manager.h"  // NewOpaqueId

namespace gpukit {

template <typename T>
class PendingTokens {
 public:
  // The clock must outlive the table.
  explicit PendingTokens(const Clock& clock) : clock_(clock) {}

  // Keeps `value` for `ttl` and returns the token that claims it.
  std::string Add(T value, absl::Duration ttl) {
    std::string token = NewOpaqueId("");
    const absl::Time now = clock_.Now();
    absl::MutexLock lock(&mu_);
    DropLapsed(now);
    entries_.insert_or_assign(token, Entry{std::move(value), now + ttl});
    return token;
  }

  // The value of `token`, once: nullopt for an unknown, used or lapsed token.
  std::optional<T> Take(absl::string_view token) {
    absl::MutexLock lock(&mu_);
    // Lapsed values go at every call, not only the next Add: one may hold a resource (an
    // exported allocation's descriptor keeps its device memory alive).
    DropLapsed(clock_.Now());
    auto it = entries_.find(token);
    if (it == entries_.end()) return std::nullopt;
    Entry entry = std::move(it->second);
    entries_.erase(it);  // single use
    return std::move(entry.value);
  }

 private:
  void DropLapsed(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::erase_if(entries_, [now](const auto& entry) { return entry.second.expires <= now; });
  }

  struct Entry {
    T value;
    absl::Time expires;
  };
  const Clock& clock_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_CORE_PENDING_TOKENS_H_
