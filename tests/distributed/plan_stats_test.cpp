// Plans at internet scale on paper: training Graphs compiled on meta tensors as rank 0 of a
// simulated world of 8, 64 or 1024 ranks, their per-rank communication and memory (plan_stats)
// checked against the analytic formulas of data parallelism and ZeRO.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/graphs.h"
#include "common/models.h"
#include "common/test_util.h"
#include "core/comm/process_group.h"
#include "distributed/simulated_process_group.h"
#include "graph/plan_stats.h"
#include "models/gpt2.h"
#include "models/vision/resnet.h"

namespace flow::distributed::testing {
namespace {

using test_graphs::TrainGraph;

const NdSbp kB{sbp::broadcast()};
const NdSbp kS0{sbp::split(0)};

double ring(int64_t ranks) { return static_cast<double>(ranks - 1) / static_cast<double>(ranks); }

int64_t bytes_of(const TensorList& tensors) {
  int64_t bytes = 0;
  for (const Tensor& t : tensors) bytes += t.nbytes();
  return bytes;
}

// This rank's (rank 0's) rows of a parameter sharded over `ranks`, in bytes, by the balanced
// splitter: ceil(rows / ranks) rows.
int64_t shard_bytes(const Tensor& parameter, int64_t ranks) {
  const int64_t rows = parameter.size(0);
  return (rows + ranks - 1) / ranks * (parameter.nbytes() / rows);
}

struct Compiled {
  graph::PlanStats stats;
  graph::proto::Job job;
  TensorList parameters;  // logical
};

// The quickstart MLP (784-64-64-10) trained with Adam on `batch_per_rank` images per rank.
Compiled compile_mlp(int64_t ranks, int64_t zero_stage, int64_t batch_per_rank = 4) {
  SimulatedWorld world(0, ranks);
  std::shared_ptr<nn::Sequential> model;
  {
    DefaultDeviceGuard meta(kMeta);
    model = test_models::mlp();
  }
  const Placement placement = Placement::all(DeviceType::kMeta);
  model->to_global(placement, kB);
  TrainGraph graph(model, std::make_shared<optim::Adam>(model->parameters(), optim::AdamOptions(1e-3)));
  graph.config().enable_zero(zero_stage);
  const int64_t batch = batch_per_rank * ranks;
  graph(randn({batch, 1, 28, 28}, TensorOptions().placement(placement).sbp(kS0)),
        randint(0, 10, {batch}, TensorOptions().placement(placement).sbp(kS0)));
  return {graph::plan_stats(graph.job(), graph.plan(), ranks), graph.job(), model->parameters()};
}

// Two scalars are all-reduced for the loss: cross entropy's mean is a sum over the split batch
// divided by the count of its valid labels.
constexpr int64_t kLossBytes = 2 * 4;

TEST(PlanStats, DataParallelSendsTwiceTheGradientsOverTheRing) {
  int64_t planned = -1;
  for (int64_t ranks : {8, 64, 1024}) {
    SCOPED_TRACE(ranks);
    const Compiled compiled = compile_mlp(ranks, 0);
    const graph::PlanStats& stats = compiled.stats;
    const int64_t gradients = bytes_of(compiled.parameters);
    // One bucket for every gradient, plus the loss's scalars; nothing else crosses the ranks.
    ASSERT_EQ(stats.collectives.size(), 1u);
    EXPECT_EQ(stats.collectives.at("all_reduce").calls, 3);
    EXPECT_EQ(stats.collectives.at("all_reduce").tensor_bytes, gradients + kLossBytes);
    EXPECT_NEAR(stats.sent_bytes, 2 * ring(ranks) * static_cast<double>(gradients + kLossBytes), 1e-6 * stats.sent_bytes);
    EXPECT_EQ(stats.parameter_bytes, gradients);
    EXPECT_EQ(stats.optimizer_state_bytes, 2 * gradients);  // Adam: exp_avg and exp_avg_sq
    EXPECT_EQ(stats.input_bytes, 4 * (784 * 4 + 8));         // 4 images and their labels per rank
    // Activations and gradients per rank do not depend on the number of ranks.
    EXPECT_GT(stats.planned_bytes, 0);
    if (planned >= 0) {
      EXPECT_EQ(stats.planned_bytes, planned);
    }
    planned = stats.planned_bytes;
  }
}

TEST(PlanStats, ZeroShardsOptimizerStateAndGathersParameters) {
  for (int64_t ranks : {8, 64}) {
    for (int64_t stage : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << ranks << " ranks, ZeRO-" << stage);
      const Compiled compiled = compile_mlp(ranks, stage);
      const graph::PlanStats& stats = compiled.stats;
      // A parameter is sharded along dim 0 when every rank gets a row (the last layer's 10 rows
      // are not, at 64 ranks).
      int64_t sharded = 0, whole = 0, state = 0;
      for (const Tensor& p : compiled.parameters) {
        const bool shardable = p.size(0) >= ranks;
        (shardable ? sharded : whole) += p.nbytes();
        state += 2 * (shardable ? shard_bytes(p, ranks) : p.nbytes());
      }
      EXPECT_EQ(stats.optimizer_state_bytes, state);
      EXPECT_LT(stats.optimizer_state_bytes, 2 * (sharded + whole) / 2);
      // Stage 1 all-reduces every gradient; stage 2 reduce-scatters the sharded ones. Both then
      // all-gather the updated sharded parameters.
      double expected = ring(ranks) * static_cast<double>(sharded) + 2 * ring(ranks) * static_cast<double>(whole + kLossBytes);
      expected += (stage == 1 ? 2 : 1) * ring(ranks) * static_cast<double>(sharded);
      EXPECT_NEAR(stats.sent_bytes, expected, 1e-6 * expected);
      EXPECT_EQ(stats.collectives.at("all_gather").tensor_bytes, sharded);
      if (stage == 2) {
        EXPECT_EQ(stats.collectives.at("reduce_scatter").tensor_bytes, sharded);
      }
    }
  }
}

// The largest collective of a Job and the sum of the others, in bytes.
std::pair<int64_t, int64_t> largest_and_rest(const graph::proto::Job& job) {
  std::vector<int64_t> sizes;
  for (const auto& node : job.nodes()) {
    if (node.op().rfind("comm_", 0) != 0) continue;
    const TensorMeta meta = graph::meta_of(node.outputs(0));
    sizes.push_back(meta.shape.numel() * static_cast<int64_t>(itemsize(meta.dtype)));
  }
  std::sort(sizes.begin(), sizes.end());
  int64_t rest = 0;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) rest += sizes[i];
  return {sizes.empty() ? 0 : sizes.back(), rest};
}

TEST(PlanStats, ResNet50DataParallelMovesGradientsAndBatchNormStatisticsOnly) {
  const int64_t ranks = 64;
  SimulatedWorld world(0, ranks);
  std::shared_ptr<vision::models::ResNet> model;
  {
    DefaultDeviceGuard meta(kMeta);
    model = vision::models::resnet50();
  }
  const Placement placement = Placement::all(DeviceType::kMeta);
  model->to_global(placement, kB);
  TrainGraph graph(model, std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1).momentum(0.9)));
  graph(randn({2 * ranks, 3, 224, 224}, TensorOptions().placement(placement).sbp(kS0)),
        randint(0, 1000, {2 * ranks}, TensorOptions().placement(placement).sbp(kS0)));
  const graph::PlanStats stats = graph::plan_stats(graph.job(), graph.plan(), ranks);
  const int64_t gradients = bytes_of(model->parameters());
  EXPECT_EQ(gradients, 4 * 25557032);
  // The gradient bucket is the one large collective; the rest is batch norm's synchronised
  // statistics (C values per layer) and the loss: no activation crosses the ranks.
  const auto [largest, rest] = largest_and_rest(graph.job());
  EXPECT_EQ(largest, gradients);
  EXPECT_LT(rest, gradients / 100);
  EXPECT_NEAR(stats.sent_bytes, 2 * ring(ranks) * static_cast<double>(gradients), 0.01 * stats.sent_bytes);
  EXPECT_EQ(stats.optimizer_state_bytes, gradients);  // the momentum buffers
}

TEST(PlanStats, Gpt2DataParallelSendsExactlyTwiceTheGradientsOverTheRing) {
  const int64_t ranks = 1024;
  SimulatedWorld world(0, ranks);
  std::shared_ptr<models::GPT2LMHeadModel> model;
  {
    DefaultDeviceGuard meta(kMeta);
    model = std::make_shared<models::GPT2LMHeadModel>();
  }
  const Placement placement = Placement::all(DeviceType::kMeta);
  model->to_global(placement, kB);
  struct LanguageModelGraph : nn::Graph {
    explicit LanguageModelGraph(std::shared_ptr<models::GPT2LMHeadModel> lm) : model(std::move(lm)) {
      register_module("model", model);
      add_optimizer(std::make_shared<optim::AdamW>(model->parameters()));
    }
    TensorList build(const TensorList& in) override {
      Tensor loss = model->loss(in[0], in[0]);
      loss.backward();
      return {loss};
    }
    std::shared_ptr<models::GPT2LMHeadModel> model;
  } graph(model);
  // Full-length sequences: with shorter ones the position embedding's gradient has rows no
  // sequence reached, and the plan reduce-scatters only the used rows (less than the formula).
  graph(randint(0, 50257, {ranks, 1024}, TensorOptions().placement(placement).sbp(kS0)));
  const graph::PlanStats stats = graph::plan_stats(graph.job(), graph.plan(), ranks);
  const int64_t gradients = bytes_of(model->parameters());
  EXPECT_EQ(gradients, 4 * 124439808);
  EXPECT_NEAR(stats.sent_bytes, 2 * ring(ranks) * static_cast<double>(gradients + kLossBytes), 1e-9 * stats.sent_bytes);
  EXPECT_EQ(stats.parameter_bytes, gradients);
  EXPECT_EQ(stats.optimizer_state_bytes, 2 * gradients);
}

// Stage 0 of a 2-stage pipeline: a Linear + ReLU on rank 0, the head on rank 1.
struct TwoStageMlp : nn::Module {
  TwoStageMlp(const Placement& first_stage, const Placement& second_stage) : second_stage(second_stage) {
    DefaultDeviceGuard meta(kMeta);
    first = register_module("first", std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(784, 64), std::make_shared<nn::ReLU>()));
    second = register_module("second", std::make_shared<nn::Linear>(64, 10));
    first->to_global(first_stage, kB);
    second->to_global(second_stage, kB);
  }
  Tensor forward(const Tensor& x) override { return second->forward(first->forward(x.flatten(1)).to_global(second_stage, kB)); }
  Placement second_stage;
  std::shared_ptr<nn::Sequential> first;
  std::shared_ptr<nn::Linear> second;
};

TEST(PlanStats, PipelineStageSendsItsActivationsAndReceivesTheirGradients) {
  SimulatedWorld world(0, 2);
  const Placement stage0(DeviceType::kMeta, std::vector<int64_t>{0}), stage1(DeviceType::kMeta, std::vector<int64_t>{1});
  auto model = std::make_shared<TwoStageMlp>(stage0, stage1);
  TrainGraph graph(model, std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1)));
  graph.config().set_gradient_accumulation_steps(4);
  const int64_t batch = 32;
  graph(randn({batch, 1, 28, 28}, TensorOptions().placement(stage0).sbp(kB)),
        randint(0, 10, {batch}, TensorOptions().placement(stage1).sbp(kB)));
  const graph::PlanStats stats = graph::plan_stats(graph.job(), graph.plan(), 2);
  // Per micro-batch: the (8, 64) activation goes out whole, its gradient comes back.
  const int64_t activation_bytes = batch / 4 * 64 * 4;
  ASSERT_EQ(stats.collectives.size(), 2u);
  EXPECT_EQ(stats.collectives.at("send").calls, 4);
  EXPECT_EQ(stats.collectives.at("send").tensor_bytes, 4 * activation_bytes);
  EXPECT_EQ(stats.collectives.at("recv").calls, 4);
  EXPECT_EQ(stats.collectives.at("recv").tensor_bytes, 4 * activation_bytes);
  EXPECT_EQ(stats.collectives.at("recv").sent_bytes, 0);
  EXPECT_EQ(stats.sent_bytes, 4 * activation_bytes);
}

TEST(PlanStats, SimulatedWorldMovesNoData) {
  EXPECT_THROW_MSG(SimulatedWorld(8, 8), "[SimulatedWorld] rank 8 is not in a world of 8 ranks");
  SimulatedWorld world(3, 16);
  EXPECT_EQ(get_rank(), 3);
  EXPECT_EQ(get_world_size(), 16);
  EXPECT_THROW_MSG(SimulatedWorld(0, 2), "[SimulatedWorld] a process group is already installed");
  const Placement placement = Placement::all(DeviceType::kCPU);
  EXPECT_THROW_MSG(zeros({16, 2}).to_global(placement, kB).to_global(placement, kS0).to_global(placement, kB),
                   "[all_gather] rank 3 of a simulated world of 16 ranks has no peers to exchange data with");
}

}  // namespace
}  // namespace flow::distributed::testing
