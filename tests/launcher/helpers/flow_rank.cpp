// flow_rank: a rank linked with the flow library, for flow_run's tests of what the library does
// under the launcher (rank_echo links none). One mode per run:
//   --print TEXT --sleep S       prints TEXT and a newline through std::cout without flushing,
//                                then sleeps S seconds (the line must show before the rank exits)
//   --print TEXT --kill-self     the same, then kills itself with SIGKILL
//   --threads                    prints "threads N": the CPU threads flow chose (get_num_threads)
//   --job --subgroup-after PATH  init_process_group, prints "rank R joined on port P", waits (up to
//                                30 s) until PATH exists, then all-reduces among ranks 0 and 1 (a
//                                new rendezvous through rank 0's store), a barrier, and prints
//                                "rank R done: sum S"
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "distributed/distributed.h"

namespace {

namespace dist = flow::distributed;

int run_job(const std::string& go_file) {
  dist::init_process_group(dist::InitOptions().set_backend("gloo").set_timeout(std::chrono::seconds(20)));
  const int64_t rank = dist::get_rank();
  std::cout << "rank " << rank << " joined on port " << std::getenv("MASTER_PORT") << std::endl;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!std::filesystem::exists(go_file)) {
    if (std::chrono::steady_clock::now() > give_up) {
      std::cerr << "rank " << rank << ": " << go_file << " did not appear within 30 s" << std::endl;
      return 3;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  flow::Tensor value = flow::make_tensor({1}, flow::kFloat32, flow::kCPU);
  *static_cast<float*>(value.data_ptr()) = static_cast<float>(rank + 1);
  if (rank < 2) dist::process_group("flow_rank").all_reduce(value, dist::ReduceOp::kSum, {0, 1})->wait();
  dist::barrier();
  std::cout << "rank " << rank << " done: sum " << *static_cast<float*>(value.data_ptr()) << std::endl;
  dist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string text;
  std::string go_file;
  double sleep_seconds = 0;
  bool kill_self = false;
  bool job = false;
  bool threads = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const auto value = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (flag == "--print") {
      text = value();
    } else if (flag == "--sleep") {
      sleep_seconds = std::atof(value().c_str());
    } else if (flag == "--kill-self") {
      kill_self = true;
    } else if (flag == "--job") {
      job = true;
    } else if (flag == "--threads") {
      threads = true;
    } else if (flag == "--subgroup-after") {
      go_file = value();
    } else {
      std::cerr << "flow_rank: unknown flag " << flag << std::endl;
      return 64;
    }
  }
  if (threads) {
    std::cout << "threads " << flow::get_num_threads() << std::endl;
    return 0;
  }
  if (job) {
    try {
      return run_job(go_file);
    } catch (const flow::Error& e) {
      std::cerr << e.what() << std::endl;
      return 1;
    }
  }
  std::cout << text << "\n";  // no flush: whether it shows depends on stdout's buffering
  if (kill_self) raise(SIGKILL);
  std::this_thread::sleep_for(std::chrono::duration<double>(sleep_seconds));
  return 0;
}
