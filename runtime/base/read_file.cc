#include "runtime/base/read_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/base/unix_fd.h"

namespace gpukit {

absl::StatusOr<std::string> ReadSettingFile(absl::string_view what, const std::string& path,
                                            int64_t max_bytes) {
  auto unreadable = [&](int error) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", what, " ", path, ": ", std::strerror(error)));
  };
  if (path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", what, ": no file named"));
  }
  ScopedFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return unreadable(errno);
  std::string text;
  char buffer[64 << 10];
  while (true) {
    const ssize_t n = read(fd.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return unreadable(errno);  // EISDIR for a directory
    if (n == 0) break;
    if (static_cast<int64_t>(text.size()) + n > max_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is larger than ", max_bytes,
                                                     " bytes; is it the right file?"));
    }
    text.append(buffer, static_cast<size_t>(n));
  }
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is empty"));
  return text;
}

}  // namespace gpukit
