// nn::Graph training of the quickstart MLP (784-512-512-10, momentum SGD, synthetic
// FashionMNIST-shaped batches) in each parallel mode. Alone (--mode none) it trains on local
// tensors; under flow_run, --mode dp (parameters broadcast, batch split), mp (Megatron: the first
// Linear column-parallel, the second row-parallel), zero1 and zero2 (dp with ZeRO), and pp (two
// pipeline stages on 2 ranks, the first Linear and ReLU on rank 0, 4 micro-batches). Rank 0 prints
// steps/s and, per rank, the planned peak of intermediate memory, the parameter and
// optimizer-state bytes its Job holds, and the collectives in its Job.
// bench/graph_parallel_bench.sh runs every mode in one invocation.
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "core/flow.h"
#include "core/thread_pool.h"
#include "distributed/distributed.h"
#include "examples/quickstart_model.h"
#include "graph/graph.h"
#include "optim/optimizer.h"

namespace dist = flow::distributed;

namespace {

struct TrainGraph : flow::nn::Graph {
  TrainGraph(std::shared_ptr<NeuralNetwork> net, std::shared_ptr<flow::optim::Optimizer> optimizer) {
    model = register_module("model", std::move(net));
    add_optimizer(std::move(optimizer));
  }
  flow::TensorList build(const flow::TensorList& in) override {
    flow::Tensor loss = loss_fn((*model)(in[0]), in[1]);
    loss.backward();
    return {loss};
  }
  std::shared_ptr<NeuralNetwork> model;
  flow::nn::CrossEntropyLoss loss_fn;
};

// Bytes of the Job's variables: the parameters, and the optimizer state ("_optimizer.*").
std::pair<int64_t, int64_t> variable_bytes(const flow::graph::proto::Job& job) {
  int64_t params = 0, state = 0;
  for (const auto& node : job.nodes()) {
    if (node.op() != flow::graph::kVariableOp) continue;
    const int64_t bytes = flow::graph::meta_of(node.outputs(0)).shape.numel() * 4;
    (node.name().rfind("_optimizer.", 0) == 0 ? state : params) += bytes;
  }
  return {params, state};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("nn::Graph training of the quickstart MLP in one parallel mode", "graph_parallel_bench");
  std::string mode = "none";
  int64_t global_batch = 64;
  int steps = 100, warmup = 5;
  app.add_option("--mode", mode, "none, or under flow_run: dp, mp, zero1, zero2, pp (GPipe), pp1f1b (2 ranks)")
      ->check(CLI::IsMember({"none", "dp", "mp", "zero1", "zero2", "pp", "pp1f1b"}))
      ->capture_default_str();
  app.add_option("--global-batch", global_batch, "rows per step over all ranks")->check(flow::cli::at_least(1))->capture_default_str();
  app.add_option("--steps", steps, "timed steps")->check(flow::cli::at_least(1))->capture_default_str();
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;
  const bool pipelined = mode == "pp" || mode == "pp1f1b";
  try {
    flow::set_num_threads(1);
    flow::manual_seed(0);
    auto model = std::make_shared<NeuralNetwork>();
    const flow::Tensor data = flow::randn({global_batch, 1, 28, 28});
    const flow::Tensor target = flow::randint(0, 10, {global_batch});
    flow::Tensor x = data, y = target;
    std::optional<flow::Placement> placement;
    if (mode != "none") {
      dist::init_process_group();
      placement = flow::Placement::all(flow::DeviceType::kCPU);
      const flow::NdSbp b{flow::sbp::broadcast()}, s0{flow::sbp::split(0)};
      if (pipelined) {
        if (dist::get_world_size() != 2) throw flow::Error("--mode " + mode + " runs two stages: flow_run --nproc-per-node 2");
        const flow::Placement first("cpu", std::vector<int64_t>{0}), second("cpu", std::vector<int64_t>{1});
        model->to_global(second, b);
        (*model->linear_relu_stack)[0]->to_global(first, b);
        model->second_stage = second;
        x = dist::from_whole(data, first, b);
        y = dist::from_whole(target, second, b);
      } else if (mode == "mp") {
        model->to_global(*placement, b,
                         {{"linear_relu_stack.0.weight", s0}, {"linear_relu_stack.0.bias", s0}, {"linear_relu_stack.2.weight", {flow::sbp::split(1)}}});
      } else {
        model->to_global(*placement, b);
      }
      if (!pipelined) {
        const flow::NdSbp& data_sbp = mode == "mp" ? b : s0;
        x = dist::from_whole(data, *placement, data_sbp);
        y = dist::from_whole(target, *placement, data_sbp);
      }
    }
    TrainGraph graph(model, std::make_shared<flow::optim::SGD>(model->parameters(), flow::optim::SGDOptions(1e-3).momentum(0.9)));
    if (mode == "zero1" || mode == "zero2") graph.config().enable_zero(mode == "zero1" ? 1 : 2);
    if (pipelined) {
      graph.config().set_gradient_accumulation_steps(4).set_pipeline_schedule(mode == "pp" ? flow::nn::PipelineSchedule::kGPipe
                                                                                            : flow::nn::PipelineSchedule::k1F1B);
    }
    for (int i = 0; i < warmup; ++i) graph(x, y);
    if (placement) dist::barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) graph(x, y);
    if (placement) dist::barrier();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto [param_bytes, state_bytes] = variable_bytes(graph.job());
    std::map<std::string, int> collectives;
    for (const auto& node : graph.job().nodes()) {
      if (node.op().rfind("comm_", 0) == 0) ++collectives[node.op()];
    }
    // A pipeline's stages differ: every rank reports its own.
    if (!placement || dist::get_rank() == 0 || pipelined) {
      std::printf("mode %-5s ranks %lld: %.1f steps/s; this rank: planned peak %lld B, parameters %lld B, optimizer state %lld B;",
                  mode.c_str(), static_cast<long long>(placement ? dist::get_world_size() : 1), steps / seconds,
                  static_cast<long long>(graph.plan().block_bytes.empty() ? 0 : graph.plan().block_bytes.begin()->second),
                  static_cast<long long>(param_bytes), static_cast<long long>(state_bytes));
      for (const auto& [op, count] : collectives) std::printf(" %s x%d", op.c_str(), count);
      std::printf("\n");
    }
    if (placement) dist::destroy_process_group();
  } catch (const flow::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
