// Principal: who is on the other end of a request, as gpukitd itself saw the connection
// (never what the client claims in ClientInfo), and AccessPolicy: which sessions such a
// caller may use and see.
//
// A caller is local (gpukitd's unix socket: the kernel told us its uid, gid and pid with
// SO_PEERCRED when it connected), network (TCP: unauthenticated, known only by its
// address) or unidentified (a transport that gives no identity; it may use nothing). A
// session records the Principal that opened it; every request naming the session is
// checked against it:
//
//   AccessPolicy policy(geteuid());
//   Principal caller = Principal::Local(1000, 1000, 4242);
//   if (!policy.MayUseSession(caller, session->owner())) return ...NOT_FOUND...;
//
// Rules (AccessPolicy):
// - Admins may use and see every session. An admin is a local caller whose uid is 0 or the
//   daemon's effective uid.
// - A local caller may use and see the sessions that a local caller of its uid opened.
// - Over TCP there is no identity yet, so a session opened over TCP may be used by any
//   network caller: its 128-bit random id is the capability. Network callers see no session
//   in listings (the ids are their capabilities), and cannot use sessions opened locally.
// Issue 17 (identity for operations) adds configured uid mappings and TCP tokens: they slot
// in as more Principal kinds and more cases of IsAdmin/MayUseSession, nothing else changes.
//
// Thread safety: Principal is a value; AccessPolicy is immutable and thread-safe.
#ifndef GPUKIT_DAEMON_SESSION_PRINCIPAL_H_
#define GPUKIT_DAEMON_SESSION_PRINCIPAL_H_

#include <cstdint>
#include <string>
#include <utility>

namespace gpukit {

struct Principal {
  enum class Kind {
    kUnidentified,  // no identity at all: may use no session
    kLocal,         // unix socket; uid, gid, pid from SO_PEERCRED
    kNetwork,       // TCP; unauthenticated; address is the peer ("ipv4:10.0.0.2:51234")
  };

  static Principal Local(uint32_t uid, uint32_t gid, int64_t pid) {
    return {Kind::kLocal, uid, gid, pid, ""};
  }
  static Principal Network(std::string address) {
    return {Kind::kNetwork, 0, 0, 0, std::move(address)};
  }
  static Principal Unidentified(std::string address) {
    return {Kind::kUnidentified, 0, 0, 0, std::move(address)};
  }

  bool local() const { return kind == Kind::kLocal; }
  bool network() const { return kind == Kind::kNetwork; }
  // For logs: "uid=1000 gid=1000 pid=4242", "tcp peer=ipv4:10.0.0.2:51234" or
  // "unidentified peer=...".
  std::string Describe() const;

  Kind kind = Kind::kUnidentified;
  uint32_t uid = 0;     // kLocal only
  uint32_t gid = 0;     // kLocal only
  int64_t pid = 0;      // kLocal only: the process that connected (it may have forked since)
  std::string address;  // kNetwork, kUnidentified: the transport's peer string
};

class AccessPolicy {
 public:
  // `daemon_uid`: gpukitd's effective uid (geteuid()), whose local callers are admins.
  explicit AccessPolicy(uint32_t daemon_uid) : daemon_uid_(daemon_uid) {}

  // A local caller with uid 0 or the daemon's uid.
  bool IsAdmin(const Principal& caller) const;
  // Whether `caller` may name a session that `owner` opened in a request (any RPC with a
  // session_id, KeepAlive and Close included).
  bool MayUseSession(const Principal& caller, const Principal& owner) const;
  // Whether ListSessions (and ListTasks) shows `caller` a session that `owner` opened:
  // admins every session, local callers those of their uid, network callers none.
  bool MaySeeSession(const Principal& caller, const Principal& owner) const;

  uint32_t daemon_uid() const { return daemon_uid_; }

 private:
  const uint32_t daemon_uid_;
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SESSION_PRINCIPAL_H_
