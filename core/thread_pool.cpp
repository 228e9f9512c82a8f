#include "core/thread_pool.h"

#include <cblas.h>
#include <omp.h>

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include <glog/logging.h>

#include "core/error.h"
#include "core/openmp_env/openmp_env.h"

namespace flow {
namespace {

thread_local int t_num_threads = 0;  // set_thread_local_num_threads; 0: no cap

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream file(path);
  if (!file) return std::nullopt;
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// quota / period rounded up, or nullopt for "max", -1 or unreadable values.
std::optional<int> whole_cpus(const std::string& quota_text, const std::string& period_text) {
  try {
    const double quota = std::stod(quota_text), period = std::stod(period_text);
    if (quota <= 0 || period <= 0) return std::nullopt;
    return std::max(1, static_cast<int>((quota + period - 1) / period));
  } catch (const std::exception&) {
    return std::nullopt;  // "max": no limit
  }
}

// A positive thread count at the start of `text` ("8", "4,2"), or nullopt.
std::optional<int> leading_count(const char* text) {
  if (text == nullptr) return std::nullopt;
  char* end = nullptr;
  const long n = std::strtol(text, &end, 10);
  if (end == text || (*end != '\0' && *end != ',') || n < 1 || n > (1 << 20)) return std::nullopt;
  return static_cast<int>(n);
}

int default_num_threads() {
  int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) cpus = std::max(1, std::min(cpus, CPU_COUNT(&allowed)));
  if (const auto cgroup = read_text("/proc/self/cgroup")) {
    if (const auto limit = cgroup_cpu_limit(*cgroup, read_text)) cpus = std::min(cpus, *limit);
  }
  const ThreadCountChoice choice = choose_num_threads(std::getenv("FLOW_NUM_THREADS"), std::getenv("OMP_NUM_THREADS"), cpus);
  VLOG(1) << "flow: " << choice.threads << " CPU thread" << (choice.threads == 1 ? "" : "s") << " (from " << choice.source << "; " << cpus
          << " usable CPUs); OpenMP waits with " << openmp_wait_policy();
  return choice.threads;
}

struct PoolState {
  std::mutex mutex;
  std::atomic<int> num_threads{default_num_threads()};
};

PoolState& state() {
  static PoolState s;
  return s;
}

// Chunks of at least `grain` elements in `total`, at most current_num_threads() and at least 1.
int64_t chunk_count(int64_t total, int64_t grain) {
  return std::clamp<int64_t>(total / std::max<int64_t>(grain, 1), 1, current_num_threads());
}

}  // namespace

std::optional<int> cgroup_cpu_limit(const std::string& proc_self_cgroup,
                                    const std::function<std::optional<std::string>(const std::string&)>& read) {
  std::istringstream lines(proc_self_cgroup);
  std::string line;
  while (std::getline(lines, line)) {
    // "hierarchy-id:controllers:path"; v2 has id 0 and no controllers, v1 names "cpu" among them.
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1), path = line.substr(second + 1);
    const std::string dir = path == "/" ? "" : path;
    if (controllers.empty()) {
      const auto max = read("/sys/fs/cgroup" + dir + "/cpu.max");  // "quota period" or "max period"
      if (!max) continue;
      std::istringstream fields(*max);
      std::string quota, period;
      fields >> quota >> period;
      if (const auto cpus = whole_cpus(quota, period)) return cpus;
      continue;
    }
    std::istringstream names(controllers);
    std::string name;
    while (std::getline(names, name, ',')) {
      if (name != "cpu") continue;
      for (const std::string mount : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
        const auto quota = read(mount + dir + "/cpu.cfs_quota_us"), period = read(mount + dir + "/cpu.cfs_period_us");
        if (!quota || !period) continue;
        if (const auto cpus = whole_cpus(*quota, *period)) return cpus;
        break;
      }
    }
  }
  return std::nullopt;
}

ThreadCountChoice choose_num_threads(const char* flow_num_threads, const char* omp_num_threads, int usable_cpus) {
  if (const auto n = leading_count(flow_num_threads)) return {*n, "FLOW_NUM_THREADS"};
  if (const auto n = leading_count(omp_num_threads)) return {*n, "OMP_NUM_THREADS"};
  return {std::max(1, usable_cpus), "CPUs"};
}

int get_num_threads() { return state().num_threads; }

int current_num_threads() { return t_num_threads > 0 ? std::min(t_num_threads, get_num_threads()) : get_num_threads(); }

int elementwise_threads(int64_t elements) { return static_cast<int>(chunk_count(elements, kElementwiseGrain)); }

void sync_openmp_threads() { omp_set_num_threads(current_num_threads()); }

void set_num_threads(int num_threads) {
  FLOW_ARG_CHECK(num_threads >= 1, "set_num_threads", "expected at least 1 thread, got ", num_threads);
  std::lock_guard<std::mutex> lock(state().mutex);
  state().num_threads = num_threads;
  openblas_set_num_threads(num_threads);
}

void set_thread_local_num_threads(int num_threads) {
  FLOW_ARG_CHECK(num_threads >= 0, "set_thread_local_num_threads", "expected 0 or more threads, got ", num_threads);
  t_num_threads = num_threads;
  sync_openmp_threads();
}

ThreadCapScope::ThreadCapScope(int threads) : previous_(t_num_threads) {
  t_num_threads = previous_ > 0 ? std::min(previous_, threads) : threads;
  sync_openmp_threads();
}

ThreadCapScope::~ThreadCapScope() {
  t_num_threads = previous_;
  sync_openmp_threads();
}

// Runs on OpenMP, the thread team oneDNN and OpenBLAS use too: one set of worker threads, not
// several runtimes spinning against each other on the same cores.
void parallel_for(int64_t begin, int64_t end, int64_t grain_size, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t total = end - begin;
  if (total <= 0) return;
  const int64_t chunks = chunk_count(total, grain_size);
  if (chunks <= 1 || omp_in_parallel()) {
    fn(begin, end);
    return;
  }
  const int64_t chunk_size = (total + chunks - 1) / chunks;
  std::mutex error_mutex;
  std::exception_ptr error;
#pragma omp parallel num_threads(static_cast<int>(chunks))
  {
    // OpenMP may grant fewer threads than asked: the team shares out every chunk.
    for (int64_t c = omp_get_thread_num(); c < chunks; c += omp_get_num_threads()) {
      const int64_t lo = begin + c * chunk_size, hi = std::min(end, lo + chunk_size);
      try {
        if (lo < hi) fn(lo, hi);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace flow
