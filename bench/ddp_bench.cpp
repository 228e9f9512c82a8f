// Data-parallel training of the quickstart MLP (784-512-512-10, SGD, synthetic FashionMNIST-shaped
// batches). Alone it trains the plain model; under flow_run each rank trains on global_batch /
// world rows through DistributedDataParallel and rank 0 also reports the all_reduce of the
// model's gradients against a memcpy floor and the share of a step spent communicating with and
// without bucket overlap. bench/ddp_bench.sh runs 1x1, 1x2 threads and 2x1 ranks in one go.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "cli/cli.h"
#include "core/flow.h"
#include "core/thread_pool.h"
#include "distributed/distributed.h"
#include "examples/quickstart_model.h"
#include "nn/functional.h"
#include "nn/parallel/ddp.h"
#include "optim/optimizer.h"

namespace dist = flow::distributed;

namespace {
struct Options {
  int threads = 1;
  int64_t global_batch = 64;
  int steps = 40;
  int warmup = 5;
};

// Median seconds of one call of fn over `runs` runs (ranks first meet at a barrier).
double median_seconds(int runs, const std::function<void()>& fn) {
  std::vector<double> seconds;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(seconds.begin(), seconds.begin() + runs / 2, seconds.end());
  return seconds[static_cast<size_t>(runs / 2)];
}

void sync_ranks() {
  if (dist::is_initialized()) dist::barrier();
}

// Steps per second of fn after the warm-up steps.
double steps_per_second(const Options& options, const std::function<void()>& step) {
  for (int i = 0; i < options.warmup; ++i) step();
  sync_ranks();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < options.steps; ++i) step();
  sync_ranks();
  return options.steps / std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

flow::Tensor flat_gradients(const flow::TensorList& params) {
  flow::TensorList flat;
  for (const flow::Tensor& p : params) flat.push_back(p.grad().reshape({p.numel()}));
  return flow::cat(flat, 0);
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Data-parallel training steps/s of the quickstart MLP; under flow_run also all_reduce bandwidth and "
               "communication share.", "ddp_bench");
  Options options;
  app.add_option("--threads", options.threads, "compute threads per process")->check(flow::cli::at_least(1))->capture_default_str();
  app.add_option("--global-batch", options.global_batch, "rows per step over all ranks")->check(flow::cli::at_least(1))->capture_default_str();
  app.add_option("--steps", options.steps, "timed steps")->check(flow::cli::at_least(1))->capture_default_str();
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;
  try {
    const bool distributed = std::getenv("WORLD_SIZE") != nullptr;
    if (distributed) dist::init_process_group();
    const int64_t world = dist::get_world_size();
    const bool main_rank = dist::get_rank() == 0;
    flow::set_num_threads(options.threads);
    flow::manual_seed(0);
    const int64_t rows = options.global_batch / world;
    const flow::Tensor x = flow::randn({rows, 1, 28, 28});
    const flow::Tensor y = flow::randint(0, 10, {rows});
    auto model = std::make_shared<NeuralNetwork>();
    auto ddp = distributed ? std::make_unique<flow::nn::parallel::DistributedDataParallel>(model) : nullptr;
    flow::nn::Module& trained = ddp ? static_cast<flow::nn::Module&>(*ddp) : *model;
    flow::optim::SGD optimizer(model->parameters(), flow::optim::SGDOptions(1e-3));
    auto step = [&] {
      optimizer.zero_grad();
      flow::nn::functional::cross_entropy(trained(x), y).backward();
      optimizer.step();
    };
    const double rate = steps_per_second(options, step);
    if (main_rank) {
      std::printf("train ranks=%lld threads=%d global_batch=%lld steps/s=%.2f ms/step=%.2f\n", static_cast<long long>(world),
                  options.threads, static_cast<long long>(options.global_batch), rate, 1000 / rate);
    }
    if (!distributed) return 0;

    // The gradients' all_reduce alone, and the memcpy of as many bytes as a floor.
    const flow::TensorList params = model->parameters();
    flow::Tensor flat = flat_gradients(params);
    const double bytes = static_cast<double>(flat.nbytes());
    sync_ranks();
    const double reduce_s = median_seconds(
        20, [&] { dist::process_group("bench").all_reduce(flat, dist::ReduceOp::kSum, {})->wait(); });
    flow::Tensor one = flow::zeros({1});
    const double latency_s = median_seconds(
        20, [&] { dist::process_group("bench").all_reduce(one, dist::ReduceOp::kSum, {})->wait(); });
    std::vector<char> source(static_cast<size_t>(bytes), 1), target(static_cast<size_t>(bytes));
    const double memcpy_s = median_seconds(20, [&] { std::memcpy(target.data(), source.data(), source.size()); });

    // Compute only (no_sync), DDP's bucketed overlap, and one all_reduce after backward.
    const double compute_rate = steps_per_second(options, [&] {
      auto no_sync = ddp->no_sync();
      step();
    });
    const double serial_rate = steps_per_second(options, [&] {
      optimizer.zero_grad();
      {
        auto no_sync = ddp->no_sync();
        flow::nn::functional::cross_entropy((*ddp)(x), y).backward();
      }
      flow::Tensor grads = flat_gradients(params);
      dist::process_group("bench").all_reduce(grads, dist::ReduceOp::kSum, {})->wait();
      grads = grads / static_cast<double>(world);
      int64_t offset = 0;
      for (const flow::Tensor& p : params) {
        p.grad().copy_(grads.narrow(0, offset, p.numel()).view(p.shape()));
        offset += p.numel();
      }
      optimizer.step();
    });
    if (main_rank) {
      std::printf("allreduce bytes=%.0f ms=%.3f GB/s=%.2f (bus %.2f) memcpy ms=%.3f GB/s=%.2f\n", bytes, reduce_s * 1e3,
                  bytes / reduce_s / 1e9, bytes * 2.0 * static_cast<double>(world - 1) / static_cast<double>(world) / reduce_s / 1e9,
                  memcpy_s * 1e3, bytes / memcpy_s / 1e9);
      std::printf("allreduce of one float ms=%.3f (the fixed cost each bucket pays)\n", latency_s * 1e3);
      std::printf("buckets=%zu\n", ddp->bucket_indices().size());
      std::printf("step ms: compute-only=%.2f ddp-buckets=%.2f allreduce-after-backward=%.2f\n", 1000 / compute_rate,
                  1000 / rate, 1000 / serial_rate);
      std::printf("communication share of a step: with bucket overlap %.1f%%, without %.1f%%\n",
                  100 * (1 - rate / compute_rate), 100 * (1 - serial_rate / compute_rate));
    }
    ddp.reset();
    dist::destroy_process_group();
  } catch (const flow::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
