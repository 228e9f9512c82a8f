// nn::Graph on global tensors, on 2 and 4 ranks (flow_distributed_tests --ranks=N): data and
// model (Megatron) parallel training compiled into each rank's Job, against one process (the
// eager program and a single-process Graph, which every rank computes itself), and the boxing
// collectives each compiled Job holds.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <sstream>

#include "common/ddp_reference.h"
#include "common/graphs.h"
#include "distributed/rank_fixture.h"
#include "graph/job.h"

namespace flow::distributed::testing {
namespace {

using GraphParallel = RankTest;
using test_graphs::TrainGraph;

Placement world_placement(int64_t world) {
  std::vector<int64_t> ranks(static_cast<size_t>(world));
  std::iota(ranks.begin(), ranks.end(), int64_t{0});
  return Placement("cpu", ranks);
}

const NdSbp kB{sbp::broadcast()};
const NdSbp kS0{sbp::split(0)};

// The global tensor whose logical value is `whole` (the same on every rank), laid out by nd_sbp.
Tensor global_from_whole(const Tensor& whole, const Placement& placement, const NdSbp& nd_sbp) {
  return whole.to_global(placement, NdSbp(nd_sbp.size(), Sbp::broadcast())).to_global(placement, nd_sbp);
}

// The collectives of the Job, counted by op: "comm_all_reduce" -> 8.
std::map<std::string, int> collectives(const graph::proto::Job& job) {
  std::map<std::string, int> counts;
  for (const auto& node : job.nodes()) {
    if (node.op().rfind("comm_", 0) == 0) ++counts[node.op()];
  }
  return counts;
}

// How many of the Job's all-reduces feed an optimizer update (a fused in-place update node).
int all_reduces_into_updates(const graph::proto::Job& job) {
  std::map<std::string, std::string> op_of;
  for (const auto& node : job.nodes()) op_of[node.name()] = node.op();
  int count = 0;
  for (const auto& node : job.nodes()) {
    if (node.op() != "fused_elementwise_inplace") continue;
    for (const auto& input : node.inputs()) count += op_of[graph::parse_value_name(input).first] == "comm_all_reduce";
  }
  return count;
}

std::shared_ptr<nn::Sequential> train_one_process_graph(const std::vector<flow::testing::DdpBatch>& batches, double lr) {
  auto model = flow::testing::make_ddp_mlp(0);
  TrainGraph graph(model, std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(lr)));
  for (const auto& batch : batches) graph(batch.data, batch.target);
  return model;
}

TEST_F(GraphParallel, DataParallelTrainingEqualsOneProcessGraph) {
  const auto batches = flow::testing::make_ddp_batches(20, 64, 11);
  const auto reference = train_one_process_graph(batches, 0.1);

  // Parameters broadcast, data split along the batch: OneFlow's data parallelism.
  const Placement placement = world_placement(world);
  auto model = flow::testing::make_ddp_mlp(0);
  model->to_global(placement, kB);
  TrainGraph graph(model, std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1)));
  Tensor loss;
  for (const auto& batch : batches) {
    loss = graph(global_from_whole(batch.data, placement, kS0), global_from_whole(batch.target, placement, kS0)).at(0);
  }
  EXPECT_TRUE(loss.is_global());
  EXPECT_EQ(loss.placement(), placement);
  for (const Tensor& p : model->parameters()) {
    ASSERT_TRUE(p.is_global());
    EXPECT_EQ(p.sbp(), kB);
  }
  EXPECT_LT(flow::testing::max_relative_difference(*model, *reference), 1e-6);

  // Each rank's Job holds its piece of the batch; each parameter's partial-sum gradient is
  // all-reduced once, into its update, and the loss (a mean over the global batch) all-reduces
  // its sum and its count: nothing else moves.
  const auto& job = graph.job();
  EXPECT_EQ(collectives(job), (std::map<std::string, int>{{"comm_all_reduce", 8}})) << graph::job_to_text(job);
  EXPECT_EQ(all_reduces_into_updates(job), 6);
  for (const auto& node : job.nodes()) {
    if (node.op() != graph::kInputOp) continue;
    EXPECT_EQ(node.outputs(0).shape(0), 64 / world);
    EXPECT_EQ(node.outputs(0).sbp(), "(S(0),)");
    EXPECT_EQ(node.outputs(0).placement(), placement.str());
  }
}

// Megatron's MLP: the first Linear column-parallel (weight and bias rows split), the second
// row-parallel (weight columns split, bias broadcast).
std::map<std::string, NdSbp> megatron_sbps() {
  return {{"0.weight", kS0}, {"0.bias", kS0}, {"2.weight", NdSbp{sbp::split(1)}}};
}

std::shared_ptr<nn::Sequential> megatron_mlp() {
  manual_seed(5);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(12, 16), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(16, 5));
}

TEST_F(GraphParallel, ModelParallelGraphEqualsEagerAndOneProcess) {
  const auto batches = flow::testing::make_ddp_batches(5, 8, 21);
  const auto reference = megatron_mlp();
  for (const auto& batch : batches) {
    flow::testing::ddp_loss(*reference, batch).backward();
    flow::testing::sgd_step(*reference, 0.1);
  }

  const Placement placement = world_placement(world);
  // Eager model parallel.
  auto eager = megatron_mlp();
  eager->to_global(placement, kB, megatron_sbps());
  for (const auto& batch : batches) {
    const flow::testing::DdpBatch global{global_from_whole(batch.data, placement, kB), global_from_whole(batch.target, placement, kB)};
    flow::testing::ddp_loss(*eager, global).backward();
    flow::testing::sgd_step(*eager, 0.1);
  }
  // The same in a Graph.
  auto model = megatron_mlp();
  model->to_global(placement, kB, megatron_sbps());
  EXPECT_EQ(model->named_parameters()[2].second.sbp(), NdSbp{sbp::split(1)});
  TrainGraph graph(model, std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1)));
  for (const auto& batch : batches) graph(global_from_whole(batch.data, placement, kB), global_from_whole(batch.target, placement, kB));

  EXPECT_LT(flow::testing::max_relative_difference(*eager, *reference), 1e-5);
  EXPECT_LT(flow::testing::max_relative_difference(*model, *reference), 1e-5);
  EXPECT_LT(flow::testing::max_relative_difference(*model, *eager), 1e-6);
  // Each rank holds its shards only.
  const TensorList params = model->parameters();
  EXPECT_EQ(params[0].to_local().shape(), (Shape{16 / world, 12}));
  EXPECT_EQ(params[2].to_local().shape(), (Shape{5, 16 / world}));
  // The row-parallel output's partial sums are reduce-scattered along the batch for the loss
  // (half an all-reduce's bytes), whose sum is all-reduced; its gradient is all-gathered back.
  // The weights' gradients keep their splits: no collective before the updates.
  const auto& job = graph.job();
  EXPECT_EQ(collectives(job), (std::map<std::string, int>{{"comm_all_gather", 1}, {"comm_all_reduce", 1}, {"comm_reduce_scatter", 1}}))
      << graph::job_to_text(job);
  EXPECT_EQ(all_reduces_into_updates(job), 0);
}

TEST_F(GraphParallel, DebugLogShowsPlacementAndSbp) {
  const Placement placement = world_placement(world);
  auto model = megatron_mlp();
  model->to_global(placement, kB, megatron_sbps());
  test_graphs::PredictGraph graph(model);
  std::ostringstream log;
  graph.debug(2, log);
  const Tensor x = randn({4, 12});
  const Tensor out = graph(global_from_whole(x, placement, kB)).at(0);
  // The row-parallel output stays a partial sum, as in eager; reading it sums the pieces.
  EXPECT_TRUE(out.is_global());
  EXPECT_EQ(out.sbp(), NdSbp{sbp::partial_sum()});
  EXPECT_EQ(out.shape(), (Shape{4, 5}));
  const Tensor expected = megatron_mlp()->forward(x);
  const auto got = out.tolist<float>(), want = expected.tolist<float>();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
  const std::string text = log.str();
  EXPECT_NE(text.find("model.0.weight = variable() -> ((" + std::to_string(16 / world) + ", 12), float32, cpu, (S(0),), placement=" +
                      placement.str()),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("-> ((4, 5), float32, cpu, (P,), placement="), std::string::npos) << text;
}

TEST_F(GraphParallel, SplitLocalTensorInsideBuildIsAnError) {
  struct Splits : nn::Graph {
    explicit Splits(Placement p) : placement(std::move(p)) {}
    TensorList build(const TensorList& in) override { return {in[0].to_global(placement, kS0)}; }
    Placement placement;
  } graph(world_placement(world));
  EXPECT_THROW(
      {
        try {
          graph(randn({4, 3}));
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("pass the graph a global input instead"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
}

}  // namespace
}  // namespace flow::distributed::testing
