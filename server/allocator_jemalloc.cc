// jemalloc's settings for matmul-server, which links it as its malloc
// (server/CMakeLists.txt, MATMUL_ALLOCATOR). jemalloc reads this symbol at
// start-up; MALLOC_CONF in the environment overrides any of them.
//
// Why these: a daemon's load comes in bursts of large messages (gRPC's read
// buffers are most of its heap under load), and on a Spark what it keeps
// after a burst is memory the GPU cannot use.
//   background_thread  purges freed pages on a thread of its own, so memory
//                      goes back when the load stops, not at the next
//                      allocation;
//   dirty_decay_ms     freed pages go back within about a second, muzzy
//   muzzy_decay_ms     (lazily freed) ones at once;
//   narenas            two arenas rather than four per core: the daemon's
//                      many gRPC and worker threads would each keep
//                      free memory in their own;
//   tcache             no per-thread caches, for the same reason.
extern "C" {
// NOLINTNEXTLINE: the name and type are jemalloc's interface.
const char* malloc_conf =
    "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,"
    "narenas:2,tcache:false";
}
