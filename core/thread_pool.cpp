#include "core/thread_pool.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"

namespace flow {
namespace {

thread_local bool t_inside_parallel = false;
thread_local int t_num_threads = 0;  // set_thread_local_num_threads; 0: no cap

int default_num_threads() {
  if (const char* env = std::getenv("FLOW_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

class ThreadPool {
 public:
  explicit ThreadPool(int num_workers) {
    for (int i = 0; i < num_workers; ++i) workers_.emplace_back([this] { work(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& worker : workers_) worker.join();
  }
  void submit(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

 private:
  void work() {
    t_inside_parallel = true;
    while (true) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
        if (stopping_ && tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> workers_;
  bool stopping_ = false;
};

struct PoolState {
  std::mutex mutex;
  int num_threads = default_num_threads();
  std::unique_ptr<ThreadPool> pool;
  ThreadPool& get() {
    if (!pool) pool = std::make_unique<ThreadPool>(num_threads - 1);
    return *pool;
  }
};

PoolState& state() {
  static PoolState s;
  return s;
}

}  // namespace

int get_num_threads() { return state().num_threads; }

void set_num_threads(int num_threads) {
  FLOW_ARG_CHECK(num_threads >= 1, "set_num_threads", "expected at least 1 thread, got ", num_threads);
  std::lock_guard<std::mutex> lock(state().mutex);
  state().num_threads = num_threads;
  state().pool.reset();
  openblas_set_num_threads(num_threads);
}

void set_thread_local_num_threads(int num_threads) {
  FLOW_ARG_CHECK(num_threads >= 0, "set_thread_local_num_threads", "expected 0 or more threads, got ", num_threads);
  t_num_threads = num_threads;
  // OpenMP's thread count is per thread: it bounds the parallel regions this thread starts.
  omp_set_num_threads(num_threads > 0 ? num_threads : get_num_threads());
}

void parallel_for(int64_t begin, int64_t end, int64_t grain_size, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t total = end - begin;
  if (total <= 0) return;
  const int64_t max_chunks = std::max<int64_t>(1, total / std::max<int64_t>(grain_size, 1));
  const int threads = t_num_threads > 0 ? std::min(t_num_threads, get_num_threads()) : get_num_threads();
  const int64_t chunks = std::min<int64_t>(threads, max_chunks);
  if (chunks <= 1 || t_inside_parallel) {
    fn(begin, end);
    return;
  }
  const int64_t chunk_size = (total + chunks - 1) / chunks;
  std::mutex done_mutex;
  std::condition_variable done_cv;
  int64_t remaining = chunks - 1;
  std::exception_ptr error;
  auto run_chunk = [&](int64_t c) {
    const int64_t lo = begin + c * chunk_size;
    const int64_t hi = std::min(end, lo + chunk_size);
    try {
      if (lo < hi) fn(lo, hi);
    } catch (...) {
      std::lock_guard<std::mutex> lock(done_mutex);
      if (!error) error = std::current_exception();
    }
  };
  ThreadPool* pool;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    pool = &state().get();
  }
  for (int64_t c = 1; c < chunks; ++c) {
    pool->submit([&, c] {
      run_chunk(c);
      std::lock_guard<std::mutex> lock(done_mutex);
      if (--remaining == 0) done_cv.notify_one();
    });
  }
  t_inside_parallel = true;
  run_chunk(0);
  t_inside_parallel = false;
  std::unique_lock<std::mutex> lock(done_mutex);
  done_cv.wait(lock, [&] { return remaining == 0; });
  if (error) std::rethrow_exception(error);
}

}  // namespace flow
