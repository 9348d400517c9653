// Reading a small file that a setting names (a PEM certificate, key or CA bundle) whole, with
// one error for every way it can be unusable. The daemon (access.tls) and the client
// (ChannelSecurity's TLS files) read theirs here, so both say the same about a bad file.
//
//   GPUKIT_ASSIGN_OR_RETURN(std::string pem,
//                           ReadSettingFile("access.tls.certFile", config.tcp.cert_file));
//
// Thread safety: a pure function of the file system.
#ifndef GPUKIT_RUNTIME_BASE_READ_FILE_H_
#define GPUKIT_RUNTIME_BASE_READ_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpukit {

// Files that settings name are small; a larger one is a wrong path (a device, a log), not
// a certificate. A system's whole CA bundle is about 200 KiB.
inline constexpr int64_t kMaxSettingFileBytes = 16 << 20;

// The content of the file at `path`, which the setting `what` names. INVALID_ARGUMENT
// naming `what`, the path and the system's reason when it cannot be opened or read (missing,
// no permission, a directory), and when it is empty or larger than `max_bytes`: "cannot
// read access.tls.certFile /etc/gpukit/server.pem: No such file or directory".
// Cost: one open and reads of the whole file; it blocks on the file system.
absl::StatusOr<std::string> ReadSettingFile(absl::string_view what, const std::string& path,
                                            int64_t max_bytes = kMaxSettingFileBytes);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_BASE_READ_FILE_H_
