// flow_plan_stats: what one training step of ResNet-50 or GPT-2 small costs each rank at 8, 64
// or 1024 ranks, without the ranks or the memory. Each rank count compiles the real training
// Graph (forward, backward, optimizer; data parallel with optional ZeRO) on meta tensors as rank 0
// of a simulated world, and reads the bytes its collectives send and the memory it holds off the
// compiled plan (graph/plan_stats.h).
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "distributed/simulated_process_group.h"
#include "graph/graph.h"
#include "graph/plan_stats.h"
#include "models/gpt2.h"
#include "models/vision/resnet.h"
#include "nn/modules.h"

namespace {

using flow::Tensor;
using flow::TensorList;

struct Options {
  std::string model = "resnet50";
  std::vector<int64_t> ranks{8, 64, 1024};
  std::string parallel = "dp";
  int64_t batch_per_rank = 0;  // 0: the model's default
  int64_t seq_len = 1024;
  bool checkpoint_blocks = false;
  int debug = 0;
};

// A model, its loss on a step's inputs, and the step's inputs (global, split over the batch).
struct Workload {
  std::shared_ptr<flow::nn::Module> model;
  std::function<Tensor(const TensorList&)> loss;
  std::function<TensorList(const flow::Placement&, int64_t batch)> inputs;
  std::shared_ptr<flow::optim::Optimizer> optimizer;
};

flow::TensorOptions split_batch(const flow::Placement& placement, flow::DType dtype) {
  return flow::TensorOptions(dtype).placement(placement).sbp(flow::sbp::split(0));
}

// torchvision's ResNet-50 on 224 x 224 images, SGD with momentum (one state tensor per parameter).
Workload resnet50() {
  auto model = flow::vision::models::resnet50();
  auto loss_fn = std::make_shared<flow::nn::CrossEntropyLoss>();
  Workload workload;
  workload.model = model;
  workload.loss = [model, loss_fn](const TensorList& in) { return loss_fn->forward(model->forward(in[0]), in[1]); };
  workload.inputs = [](const flow::Placement& placement, int64_t batch) {
    return TensorList{flow::randn({batch, 3, 224, 224}, split_batch(placement, flow::kFloat32)),
                      flow::randint(0, 1000, {batch}, split_batch(placement, flow::kInt64))};
  };
  workload.optimizer = std::make_shared<flow::optim::SGD>(model->parameters(), flow::optim::SGDOptions(0.1).momentum(0.9));
  return workload;
}

// GPT-2 small (124M parameters), next-token loss, AdamW (two state tensors per parameter).
Workload gpt2(int64_t seq_len) {
  auto model = std::make_shared<flow::models::GPT2LMHeadModel>();
  Workload workload;
  workload.model = model;
  workload.loss = [model](const TensorList& in) { return model->loss(in[0], in[0]); };
  workload.inputs = [seq_len](const flow::Placement& placement, int64_t batch) {
    return TensorList{flow::randint(0, 50257, {batch, seq_len}, split_batch(placement, flow::kInt64))};
  };
  workload.optimizer = std::make_shared<flow::optim::AdamW>(model->parameters());
  return workload;
}

struct StepGraph : flow::nn::Graph {
  explicit StepGraph(const Workload& workload) : loss(workload.loss) {
    register_module("model", workload.model);
    add_optimizer(workload.optimizer);
  }
  TensorList build(const TensorList& inputs) override {
    Tensor value = loss(inputs);
    value.backward();
    return {value};
  }
  std::function<Tensor(const TensorList&)> loss;
};

struct Row {
  int64_t ranks = 0;
  flow::graph::PlanStats stats;
  double gradient_bytes = 0;  // the model's parameters' bytes: what data parallelism reduces
  double compile_seconds = 0;
};

Row measure(const Options& options, int64_t ranks) {
  flow::distributed::SimulatedWorld world(0, ranks);
  Workload workload;
  {
    flow::DefaultDeviceGuard meta(flow::kMeta);
    workload = options.model == "gpt2" ? gpt2(options.seq_len) : resnet50();
  }
  const flow::Placement placement = flow::Placement::all(flow::DeviceType::kMeta);
  workload.model->to_global(placement, {flow::sbp::broadcast()});
  Row row;
  row.ranks = ranks;
  for (const auto& parameter : workload.model->parameters()) row.gradient_bytes += static_cast<double>(parameter.nbytes());
  StepGraph graph(workload);
  if (options.debug > 0) graph.debug(options.debug, std::cerr);
  if (options.parallel == "zero1") graph.config().enable_zero(1);
  if (options.parallel == "zero2") graph.config().enable_zero(2);
  if (options.checkpoint_blocks) {
    const auto& gpt2 = static_cast<const flow::models::GPT2LMHeadModel&>(*workload.model);
    for (size_t i = 0; i < gpt2.transformer->blocks.size(); ++i) graph.config().set_activation_checkpointing("model.transformer.h." + std::to_string(i));
  }
  const int64_t batch_per_rank = options.batch_per_rank > 0 ? options.batch_per_rank : (options.model == "gpt2" ? 8 : 32);
  const TensorList inputs = workload.inputs(placement, batch_per_rank * ranks);
  const auto start = std::chrono::steady_clock::now();
  graph(inputs);
  row.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  row.stats = flow::graph::plan_stats(graph.job(), graph.plan(), ranks);
  return row;
}

std::string collective(const flow::graph::PlanStats& stats, const std::string& kind) {
  auto it = stats.collectives.find(kind);
  if (it == stats.collectives.end()) return "-";
  return std::to_string(it->second.calls) + " x, " + flow::graph::human_bytes(it->second.sent_bytes);
}

void print_table(const Options& options, const std::vector<Row>& rows) {
  using flow::graph::human_bytes;
  std::printf("%s, %s%s, per rank per training step (rank 0's plan; meta tensors, simulated world)\n\n", options.model.c_str(),
              options.parallel.c_str(), options.checkpoint_blocks ? ", every block checkpointed" : "");
  std::printf("| ranks | sent | 2(n-1)/n x grads | all_reduce | reduce_scatter | all_gather | params+buffers | optimizer state | "
              "planned | total | compile s |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& row : rows) {
    const double n = static_cast<double>(row.ranks);
    const auto& s = row.stats;
    std::printf("| %lld | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f |\n", static_cast<long long>(row.ranks),
                human_bytes(s.sent_bytes).c_str(), human_bytes(2 * (n - 1) / n * row.gradient_bytes).c_str(),
                collective(s, "all_reduce").c_str(), collective(s, "reduce_scatter").c_str(), collective(s, "all_gather").c_str(),
                human_bytes(static_cast<double>(s.parameter_bytes)).c_str(),
                human_bytes(static_cast<double>(s.optimizer_state_bytes)).c_str(),
                human_bytes(static_cast<double>(s.planned_bytes)).c_str(), human_bytes(static_cast<double>(s.total_bytes())).c_str(),
                row.compile_seconds);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Per-rank communication and memory of one training step of ResNet-50 or GPT-2 small at any number of\n"
               "ranks: the training Graph is compiled on meta tensors as rank 0 of a simulated world, and its plan is\n"
               "measured (no data, no peers).",
               "flow_plan_stats");
  Options options;
  app.add_option("--model", options.model, "resnet50 (224 x 224 images, SGD with momentum) or gpt2 (GPT-2 small, AdamW)")
      ->check(CLI::IsMember({"resnet50", "gpt2"}))
      ->capture_default_str();
  app.add_option("--ranks", options.ranks, "world sizes to compile for")->delimiter(',')->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--parallel", options.parallel, "dp (data parallel), zero1 or zero2 (data parallel with ZeRO)")
      ->check(CLI::IsMember({"dp", "zero1", "zero2"}))
      ->capture_default_str();
  app.add_option("--batch-per-rank", options.batch_per_rank, "samples per rank (default: 32 images, 8 sequences)")->check(CLI::PositiveNumber);
  app.add_option("--seq-len", options.seq_len, "GPT-2 sequence length")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_flag("--checkpoint-blocks", options.checkpoint_blocks,
               "gpt2: activation checkpointing of every transformer block (config().set_activation_checkpointing)");
  app.add_option("--debug", options.debug, "the Graph's debug level (1: compile progress and plan; 2: every op with its sbp)")
      ->check(CLI::Range(0, 3));
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;
  if (options.checkpoint_blocks && options.model != "gpt2") {
    std::fprintf(stderr, "flow_plan_stats: --checkpoint-blocks applies to --model gpt2 only\n");
    return 2;
  }
  try {
    std::vector<Row> rows;
    for (int64_t ranks : options.ranks) rows.push_back(measure(options, ranks));
    print_table(options, rows);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "flow_plan_stats: %s\n", error.what());
    return 1;
  }
  return 0;
}
