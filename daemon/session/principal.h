// Principal: who is on the other end of a request, as gpukitd itself saw the connection
// (never what the client claims in ClientInfo or OpenSessionRequest.tenant). What such a
// caller may do is AccessPolicy's (access_policy.h).
//
// A caller is local (gpukitd's unix socket: the kernel told us its uid, gid, supplementary
// groups and pid with SO_PEERCRED and SO_PEERGROUPS when it connected), network (TCP: known
// by its address and, when it sent one, the SHA-256 of its bearer token, which the policy
// maps to a tenant) or unidentified (a transport that gives no identity; it may use
// nothing).
// A session records the Principal that opened it; every request naming the session is
// checked against it.
//
//   Principal caller = Principal::Local(1000, 1000, 4242, {27, 100});
//   spdlog::warn("refused: {}", caller.Describe());  // "uid=1000 gid=1000 pid=4242"
//
// Thread safety: a value.
#ifndef GPUKIT_DAEMON_SESSION_PRINCIPAL_H_
#define GPUKIT_DAEMON_SESSION_PRINCIPAL_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gpukit {

struct Principal {
  enum class Kind {
    kUnidentified,  // no identity at all: may use no session
    kLocal,         // unix socket; uid, gid, pid from SO_PEERCRED
    kNetwork,       // TCP; address is the peer ("ipv4:10.0.0.2:51234"); token_sha256 if any
  };

  static Principal Local(uint32_t uid, uint32_t gid, int64_t pid,
                         std::vector<uint32_t> groups = {}) {
    return {Kind::kLocal, uid, gid, pid, "", std::move(groups), ""};
  }
  // `token_sha256`: lowercase hex SHA-256 of the bearer token the request carried; "" when
  // it carried none.
  static Principal Network(std::string address, std::string token_sha256 = "") {
    return {Kind::kNetwork, 0, 0, 0, std::move(address), {}, std::move(token_sha256)};
  }
  static Principal Unidentified(std::string address) {
    return {Kind::kUnidentified, 0, 0, 0, std::move(address), {}, ""};
  }

  bool local() const { return kind == Kind::kLocal; }
  bool network() const { return kind == Kind::kNetwork; }
  // For logs: "uid=1000 gid=1000 pid=4242", "tcp peer=ipv4:10.0.0.2:51234" (with
  // " token=<first 12 hex digits of its hash>" when it sent one) or "unidentified peer=...".
  std::string Describe() const;

  Kind kind = Kind::kUnidentified;
  uint32_t uid = 0;     // kLocal only
  uint32_t gid = 0;     // kLocal only
  int64_t pid = 0;      // kLocal only: the process that connected (it may have forked since)
  std::string address;  // kNetwork, kUnidentified: the transport's peer string
  // kLocal only: the supplementary groups at connect time (SO_PEERGROUPS); may be empty
  // when the kernel did not tell. `gid` is always checked besides them.
  std::vector<uint32_t> groups = {};
  // kNetwork only: the SHA-256 (lowercase hex) of the bearer token the request carried, ""
  // for none. Only its hash is kept, so no log or listing can show the token.
  std::string token_sha256 = "";
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SESSION_PRINCIPAL_H_
