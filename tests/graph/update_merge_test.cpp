// merge_inplace_updates: an in-place fused update that reads the results of earlier ones (an
// optimizer's moments, AdamW's decay) runs them in its own pass, computing what the separate
// nodes and eager code compute, bit for bit; a read of their results in between keeps them apart.
#include <gtest/gtest.h>

#include "core/grad_mode.h"
#include "graph_helpers.h"

namespace nn = flow::nn;
namespace optim = flow::optim;
using flow::Tensor;
using flow::TensorList;
using graph_test::count_op;

namespace {

// Two buffers a Graph's build() updates in place (a Graph writes module state, not captured
// tensors): m <- 0.5 m + x, then p <- p - 0.1 m, reading m's new value (a momentum step). With
// `read_between`, exp(m) is read between the two updates and returned.
struct MomentumState : nn::Module {
  MomentumState() {
    flow::manual_seed(3);
    m = register_buffer("m", flow::zeros({300}));
    p = register_buffer("p", flow::randn({300}));
    v = register_buffer("v", flow::zeros({300}));
    count = register_buffer("count", flow::zeros({1}));
  }
  Tensor step(const Tensor& x, bool read_between) {
    flow::autograd::NoGradGuard no_grad;
    m.copy_(m * 0.5 + x);
    const Tensor seen = read_between ? flow::exp(m) : x + 1.0;
    p.copy_(p - m * 0.1);
    return seen;
  }
  // Adam's shape: a gradient g computed from x, read by the updates of m and v (a third buffer),
  // then p's update from both; g is returned too when `return_gradient`.
  Tensor step_with_gradient(const Tensor& x, bool return_gradient) {
    flow::autograd::NoGradGuard no_grad;
    const Tensor g = flow::exp(x * 0.25) - x;
    // An in-place write in between, as between a backward's gradients and the optimizer: fusion
    // leaves g a node of its own.
    count.copy_(count + 1.0);
    m.copy_(m * 0.5 + g);
    v.copy_(v * 0.9 + g * g);
    p.copy_(p - m * 0.1 / (v + 1.0));
    return return_gradient ? g : x + 1.0;
  }
  Tensor m, p, v, count;
};

struct MomentumGraph : nn::Graph {
  MomentumGraph(std::shared_ptr<MomentumState> state, bool read_between) : read_between_(read_between) {
    this->state = register_module("state", std::move(state));
  }
  TensorList build(const TensorList& in) override { return {state->step(in[0], read_between_)}; }
  std::shared_ptr<MomentumState> state;
  bool read_between_;
};

// Three graph steps beside three eager ones: the same results and state, bit for bit.
void expect_graph_steps_equal_eager(MomentumGraph& graph, MomentumState& eager, bool read_between) {
  for (int step = 0; step < 3; ++step) {
    flow::manual_seed(50 + static_cast<uint64_t>(step));
    const Tensor x = flow::randn({300});
    EXPECT_EQ(graph(x).at(0).tolist<float>(), eager.step(x, read_between).tolist<float>()) << "step " << step;
    EXPECT_EQ(graph.state->m.tolist<float>(), eager.m.tolist<float>()) << "step " << step;
    EXPECT_EQ(graph.state->p.tolist<float>(), eager.p.tolist<float>()) << "step " << step;
  }
}

std::vector<const flow::graph::proto::Node*> updates(const flow::graph::proto::Job& job) {
  std::vector<const flow::graph::proto::Node*> found;
  for (const auto& node : job.nodes()) {
    if (node.op() == "fused_elementwise_inplace") found.push_back(&node);
  }
  return found;
}

const flow::graph::PassRecord& merge_record(nn::Graph& graph) {
  static flow::graph::ExplainReport report;
  report = graph.explain();
  const auto& passes = report.plans.at(0).log.passes;
  const auto pass = std::find_if(passes.begin(), passes.end(), [](const auto& record) { return record.pass == "merge_inplace_updates"; });
  EXPECT_NE(pass, passes.end());
  return *pass;
}

}  // namespace

TEST(MergeInplaceUpdates, AnUpdateRunsTheUpdatesWhoseResultsItReads) {
  MomentumState eager;
  MomentumGraph graph(std::make_shared<MomentumState>(), false);
  expect_graph_steps_equal_eager(graph, eager, false);
  const auto merged = updates(graph.job());
  ASSERT_EQ(merged.size(), 1u);
  EXPECT_EQ(merged[0]->attrs().at("destinations").i(), 2);
  const flow::graph::PassRecord& record = merge_record(graph);
  ASSERT_EQ(record.fused.size(), 1u);
  EXPECT_EQ(record.fused[0].members.size(), 2u);
  EXPECT_EQ(record.fused[0].node.name, merged[0]->name());
}

TEST(MergeInplaceUpdates, AReadOfAnEarlierResultInBetweenKeepsThemApart) {
  MomentumState eager;
  MomentumGraph graph(std::make_shared<MomentumState>(), true);
  expect_graph_steps_equal_eager(graph, eager, true);
  EXPECT_EQ(updates(graph.job()).size(), 2u);
  EXPECT_TRUE(merge_record(graph).fused.empty());
}

// The producer of a value only the merged update reads runs in its pass; one a graph output also
// reads is left as it is.
TEST(MergeInplaceUpdates, TheUpdateComputesAGradientOnlyItReads) {
  for (const bool return_gradient : {false, true}) {
    SCOPED_TRACE(return_gradient ? "gradient returned" : "gradient read by the update only");
    MomentumState eager;
    auto state = std::make_shared<MomentumState>();
    struct GradientGraph : nn::Graph {
      GradientGraph(std::shared_ptr<MomentumState> s, bool returned) : returned_(returned) { state = register_module("state", std::move(s)); }
      TensorList build(const TensorList& in) override { return {state->step_with_gradient(in[0], returned_)}; }
      std::shared_ptr<MomentumState> state;
      bool returned_;
    } graph(state, return_gradient);
    for (int step = 0; step < 3; ++step) {
      flow::manual_seed(70 + static_cast<uint64_t>(step));
      const Tensor x = flow::randn({300});
      EXPECT_EQ(graph(x).at(0).tolist<float>(), eager.step_with_gradient(x, return_gradient).tolist<float>()) << "step " << step;
      EXPECT_EQ(state->m.tolist<float>(), eager.m.tolist<float>()) << "step " << step;
      EXPECT_EQ(state->p.tolist<float>(), eager.p.tolist<float>()) << "step " << step;
      EXPECT_EQ(state->v.tolist<float>(), eager.v.tolist<float>()) << "step " << step;
    }
    // One update of the three buffers (and count's own); the gradient's node is gone when only
    // that update reads it.
    int buffer_updates = 0, gradient_nodes = 0;
    for (const auto* node : updates(graph.job())) buffer_updates += node->outputs(0).shape(0) == 300;
    for (const auto& node : graph.job().nodes()) gradient_nodes += node.op() == "fused_elementwise" && node.outputs(0).shape(0) == 300;
    EXPECT_EQ(buffer_updates, 1);
    EXPECT_EQ(gradient_nodes, return_gradient ? 1 : 0);
  }
}

// AdamW: the decay, both moments and the update of each parameter are one node writing p, exp_avg
// and exp_avg_sq, and training is bit-identical to eager.
TEST(MergeInplaceUpdates, AdamWWritesEachParameterAndItsMomentsInOnePass) {
  auto make = [] {
    flow::manual_seed(8);
    return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(12, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 4));
  };
  auto eager_net = make(), graph_net = make();
  const auto adamw = [](nn::Module& net) { return std::make_shared<optim::AdamW>(net.parameters(), optim::AdamWOptions(1e-2).weight_decay(0.1)); };
  const auto eager_opt = adamw(*eager_net);
  graph_test::TrainGraph graph(graph_net, adamw(*graph_net));
  nn::CrossEntropyLoss loss_fn;
  for (int step = 0; step < 3; ++step) {
    flow::manual_seed(200 + static_cast<uint64_t>(step));
    const Tensor x = flow::randn({6, 12}), y = flow::randint(0, 4, {6});
    eager_opt->zero_grad();
    loss_fn(eager_net->forward(x), y).backward();
    eager_opt->step();
    graph(x, y);
  }
  const TensorList eager_params = eager_net->parameters(), graph_params = graph_net->parameters();
  for (size_t i = 0; i < eager_params.size(); ++i) EXPECT_EQ(graph_params[i].tolist<float>(), eager_params[i].tolist<float>()) << i;
  EXPECT_EQ(count_op(graph.job(), "assign"), 0);
  const auto merged = updates(graph.job());
  ASSERT_EQ(merged.size(), 4u);
  for (const auto* node : merged) EXPECT_EQ(node->attrs().at("destinations").i(), 3) << node->name();
}
