// NameThisThread: the calling thread's name, as top -H, perf and /proc/PID/task/*/comm show
// it. A thread inherits its creator's name otherwise, so gpukitd's threads started from a
// gRPC callback would all read as gRPC's; each long-lived thread names itself instead.
//
// Thread safety: names only the calling thread.
#ifndef GPUKIT_RUNTIME_BASE_THREAD_NAME_H_
#define GPUKIT_RUNTIME_BASE_THREAD_NAME_H_

#include <pthread.h>

namespace gpukit {

// `name` must be at most 15 characters (the kernel's limit); a longer one is ignored.
inline void NameThisThread(const char* name) { pthread_setname_np(pthread_self(), name); }

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_BASE_THREAD_NAME_H_
