#include "daemon/session/principal.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace gpukit {

std::string Principal::Describe() const {
  switch (kind) {
    case Kind::kLocal:
      return absl::StrCat("uid=", uid, " gid=", gid, " pid=", pid);
    case Kind::kNetwork:
      return absl::StrCat("tcp peer=", absl::CHexEscape(address));
    case Kind::kUnidentified:
      break;
  }
  return absl::StrCat("unidentified peer=", absl::CHexEscape(address));
}

bool AccessPolicy::IsAdmin(const Principal& caller) const {
  return caller.local() && (caller.uid == 0 || caller.uid == daemon_uid_);
}

bool AccessPolicy::MayUseSession(const Principal& caller, const Principal& owner) const {
  if (IsAdmin(caller)) return true;
  if (caller.local()) return owner.local() && owner.uid == caller.uid;
  // Over TCP the session id is the capability (see the header).
  if (caller.network()) return owner.network();
  return false;
}

bool AccessPolicy::MaySeeSession(const Principal& caller, const Principal& owner) const {
  if (IsAdmin(caller)) return true;
  return caller.local() && owner.local() && owner.uid == caller.uid;
}

}  // namespace gpukit
