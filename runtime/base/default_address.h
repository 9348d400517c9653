// Where gpukitd listens by default and clients look for it: one rule for both.
//
//   /run/gpukit/gpukitd.sock           when /run/gpukit is writable (system service)
//   $XDG_RUNTIME_DIR/gpukit/gpukitd.sock  when XDG_RUNTIME_DIR is set (user session)
//   /tmp/gpukit-$UID/gpukitd.sock       otherwise
//
// Clients take $GPUKIT_ADDR first when it is set, then the first of these that exists.
#ifndef GPUKIT_RUNTIME_BASE_DEFAULT_ADDRESS_H_
#define GPUKIT_RUNTIME_BASE_DEFAULT_ADDRESS_H_

#include <string>

namespace gpukit {

// The default socket path (not a URI), chosen by the rule above.
std::string DefaultSocketPath();

// "unix://" + DefaultSocketPath().
std::string DefaultListenAddress();

// $GPUKIT_ADDR if set and not empty; else the first of the three paths above where a socket
// exists (a client may not be allowed to write /run/gpukit although a daemon listens
// there); else DefaultListenAddress().
std::string DefaultClientAddress();

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_BASE_DEFAULT_ADDRESS_H_
