#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace flow {

// Threads used by CPU kernels (and by OpenBLAS). Defaults to FLOW_NUM_THREADS, else
// OMP_NUM_THREADS (its first value, as OpenMP reads "4,2"), else the CPUs this process may run on:
// its affinity mask, lowered to a container's CPU quota (cgroup v1 or v2). More threads than the
// quota allows spin at OpenMP barriers while the kernel throttles them. The choice and its source
// are logged at verbosity 1 (GLOG_v=1).
int get_num_threads();

// The default thread count from the two variables' values (null when unset) and the CPUs the
// process may use, and what it came from: "FLOW_NUM_THREADS", "OMP_NUM_THREADS" or "CPUs". A
// value that is not a positive integer is skipped.
struct ThreadCountChoice {
  int threads;
  std::string source;
};
ThreadCountChoice choose_num_threads(const char* flow_num_threads, const char* omp_num_threads, int usable_cpus);
// The CPU quota of the cgroup named in `proc_self_cgroup` (the text of /proc/self/cgroup),
// rounded up to whole CPUs; nullopt when unlimited or unknown. `read` returns a file's text
// (nullopt if missing).
std::optional<int> cgroup_cpu_limit(const std::string& proc_self_cgroup,
                                    const std::function<std::optional<std::string>(const std::string&)>& read);
void set_num_threads(int num_threads);
// Caps the threads used by work started from the calling thread: parallel_for chunks and the
// OpenMP threads of oneDNN kernels (0: no cap beyond get_num_threads()). A server gives each
// model instance its own share of the cores this way.
void set_thread_local_num_threads(int num_threads);
// Lowers the calling thread's cap to at most `threads` while it lives (work too small to be worth
// a fork-join), then restores the cap it found.
class ThreadCapScope {
 public:
  explicit ThreadCapScope(int threads);
  ~ThreadCapScope();
  ThreadCapScope(const ThreadCapScope&) = delete;
  ThreadCapScope& operator=(const ThreadCapScope&) = delete;

 private:
  int previous_;
};
// The threads work started from the calling thread may use: get_num_threads() within its cap.
int current_num_threads();
// Sets the calling thread's OpenMP thread count, which oneDNN and OpenBLAS (its OpenMP build)
// follow, to current_num_threads(). Kernels call it before handing work to either library.
void sync_openmp_threads();

// Splits [begin, end) into at most current_num_threads() contiguous chunks of at least
// grain_size elements and runs fn(chunk_begin, chunk_end) on an OpenMP team, the caller taking
// the first chunk. Calls inside a parallel region run inline. The first exception thrown by any
// chunk is rethrown here.
void parallel_for(int64_t begin, int64_t end, int64_t grain_size, const std::function<void(int64_t, int64_t)>& fn);

// Element counts below which a loop is not worth splitting.
inline constexpr int64_t kElementwiseGrain = 32768;

// The threads for a memory-bound pass over `elements` values (what parallel_for would use with
// kElementwiseGrain). oneDNN's normalisation and pooling kernels take this cap (ThreadCapScope)
// before they look up their primitive, which is made for the caller's thread count: otherwise a
// few thousand values wake the whole team.
int elementwise_threads(int64_t elements);

}  // namespace flow
