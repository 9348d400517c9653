// PeerTable: the identity of each connection gpukitd accepted on its unix sockets, by file
// descriptor, so that a handler can tell who called it.
//
// gRPC 1.51 does not expose a unix peer's credentials, so gpukitd accepts those connections
// itself (UnixListener): it reads SO_PEERCRED, records the peer here under the connection's
// descriptor, and hands the descriptor to gRPC, which names that connection's peer "fd:<n>"
// (ServerContext::peer()). A handler maps "fd:<n>" back with Lookup.
//
// Why a descriptor number is a safe key: gRPC's transport owns the descriptor and closes it
// only when the transport is destroyed, which waits for every call on it to end; so while a
// handler runs, its connection's number cannot be reused by a new connection, and the entry
// it reads is its own. An entry outlives its connection until the number is reused (Record
// overwrites it), so the table holds at most one entry per descriptor number.
//
//   PeerTable peers;
//   peers.Record(fd, Principal::Local(cred.uid, cred.gid, cred.pid));  // accept thread
//   Principal caller = peers.Lookup(fd);                                // a handler
//
// Thread safety: thread-safe.
#ifndef GPUKIT_DAEMON_SERVICE_PEER_TABLE_H_
#define GPUKIT_DAEMON_SERVICE_PEER_TABLE_H_

#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "daemon/session/principal.h"

namespace gpukit::service {

class PeerTable {
 public:
  // Records (or replaces) the peer of the connection on `fd`. O(1).
  void Record(int fd, Principal peer) {
    absl::MutexLock lock(&mu_);
    peers_[fd] = std::move(peer);
  }
  // The peer recorded for `fd`; nullopt if none was. O(1).
  std::optional<Principal> Lookup(int fd) const {
    absl::MutexLock lock(&mu_);
    auto it = peers_.find(fd);
    if (it == peers_.end()) return std::nullopt;
    return it->second;
  }

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, Principal> peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpukit::service

#endif  // GPUKIT_DAEMON_SERVICE_PEER_TABLE_H_
