// GPUKIT_MALLOC_CONF: the allocator settings of gpukitd and gpukit-executor, which link
// jemalloc (CMake GPUKIT_JEMALLOC, the default outside sanitizer builds). Each of the two
// mains defines jemalloc's `malloc_conf` with it, which jemalloc reads once at its start
// (before MALLOC_CONF from the environment, which may add to it or override it); a build
// without jemalloc ignores the symbol.
//
// - background_thread:true: jemalloc's own thread returns freed pages to the system on time.
//   Without it, pages are returned only as later allocations pass through the same arena, so
//   a daemon that goes idle after a burst of large transfers kept them resident.
// - dirty_decay_ms:1000, muzzy_decay_ms:0: freed pages go back within about a second (10 s
//   by default), and at once once purged. A large upload through gRPC messages left 40-70 MiB
//   resident after it ended, idle, with the defaults (build machine, docs/benchmarks.md
//   "Memory that returns"). Pages used again within the second are not returned: a busy
//   daemon's steady traffic keeps its pages.
#ifndef GPUKIT_RUNTIME_BASE_ALLOCATOR_SETTINGS_H_
#define GPUKIT_RUNTIME_BASE_ALLOCATOR_SETTINGS_H_

#define GPUKIT_MALLOC_CONF "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0"

#endif  // GPUKIT_RUNTIME_BASE_ALLOCATOR_SETTINGS_H_
