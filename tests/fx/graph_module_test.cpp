// symbolic_trace, print_tabular, lint, node editing and running a GraphModule on the runtime.
#include <gtest/gtest.h>

#include <sstream>

#include "common/models.h"
#include "common/reference.h"
#include "common/test_util.h"
#include "fx/graph_module.h"

namespace {

using flow::fx::GraphModule;
using flow::fx::Node;
using flow::fx::Opcode;

std::shared_ptr<flow::nn::Sequential> small_mlp() {
  return std::make_shared<flow::nn::Sequential>(std::make_shared<flow::nn::Linear>(4, 8), std::make_shared<flow::nn::ReLU>(),
                                                std::make_shared<flow::nn::Linear>(8, 3));
}

Node find_op(GraphModule& gm, const std::string& target) {
  for (const Node& node : gm.graph().nodes()) {
    if (node.op() == Opcode::kCallFunction && node.target() == target) return node;
  }
  ADD_FAILURE() << "no " << target << " node";
  return {};
}

}  // namespace

TEST(FxTrace, PrintTabularOfASmallMlp) {
  auto model = small_mlp();
  GraphModule gm = flow::fx::symbolic_trace(*model, {flow::randn({2, 4})});
  std::ostringstream table;
  gm.print_tabular(table);
  std::cout << table.str();
  const std::string text = table.str();
  EXPECT_EQ(text.rfind("opcode", 0), 0u);
  for (const char* expected : {"placeholder", "get_attr", "call_function", "output", "0.weight", "2.bias", "relu", "input"}) {
    EXPECT_NE(text.find(expected), std::string::npos) << expected;
  }
  gm.graph().lint();
}

TEST(FxTrace, GraphModuleRunsLikeEager) {
  auto model = test_models::cnn();
  test_models::warm_up_batch_norm(*model, {4, 1, 28, 28});
  const flow::Tensor x = flow::randn({4, 1, 28, 28});
  GraphModule gm = flow::fx::symbolic_trace(*model, {x});
  const flow::Tensor expected = model->forward(x);
  flow::testing::expect_close(gm(x)[0], expected, 1e-5, 1e-5);
  const flow::Tensor y = flow::randn({4, 1, 28, 28});
  flow::testing::expect_close(gm(y)[0], model->forward(y), 1e-5, 1e-5);
  // Shape attributes (the flatten's view) hold the traced batch size.
  EXPECT_THROW_MSG(gm(flow::randn({3, 1, 28, 28})), "trace again");
}

TEST(FxTrace, NewBatchSizeRecompiles) {
  auto model = small_mlp();
  GraphModule gm = flow::fx::symbolic_trace(*model, {flow::randn({2, 4})});
  const flow::Tensor x = flow::randn({5, 4});
  flow::testing::expect_close(gm(x)[0], model->forward(x), 1e-5, 1e-6);
  EXPECT_EQ(gm.graph().outputs()[0].meta().tensor_meta[0].shape, flow::Shape({5, 3}));
}

TEST(FxEdit, InsertedNodeChangesTheResultLikeEager) {
  auto model = small_mlp();
  GraphModule gm = flow::fx::symbolic_trace(*model, {flow::randn({2, 4})});
  flow::fx::Graph& graph = gm.graph();
  // relu(h) -> sigmoid(relu(h)) * 3, inserted after the relu.
  const Node relu = find_op(gm, "relu");
  Node scaled;
  {
    auto guard = graph.inserting_after(relu);
    const Node sigmoid = graph.create_node("sigmoid", {relu});
    scaled = graph.create_node("mul_scalar", {sigmoid}, flow::Attrs().set("scalar", flow::Scalar(3.0)));
  }
  const std::vector<Node> changed = relu.replace_all_uses_with(scaled);
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0].target(), "linear");
  EXPECT_EQ(scaled.meta().scope, "1");
  graph.lint();
  const flow::Tensor x = flow::randn({2, 4});
  const flow::Tensor h = flow::relu(flow::linear(x, model->parameters()[0], model->parameters()[1]));
  const flow::Tensor expected = flow::linear(flow::sigmoid(h) * 3.0, model->parameters()[2], model->parameters()[3]);
  flow::testing::expect_close(gm(x)[0], expected, 1e-5, 1e-6);
}

TEST(FxEdit, EraseNodeRefusesAUsedNode) {
  auto model = small_mlp();
  GraphModule gm = flow::fx::symbolic_trace(*model, {flow::randn({2, 4})});
  const Node relu = find_op(gm, "relu");
  EXPECT_THROW_MSG(gm.graph().erase_node(relu), "[fx.erase_node] node 1.relu still has 1 user");
  EXPECT_THROW_MSG(gm.graph().erase_node(gm.graph().outputs()[0]), "is an output of the graph");
  // Bypassing the relu leaves it unused: then it can go, and DCE has nothing left to do.
  relu.replace_all_uses_with(relu.args()[0].node());
  gm.graph().erase_node(relu);
  EXPECT_FALSE(gm.graph().has_node("1.relu"));
  EXPECT_THROW_MSG(relu.target(), "not in the graph");
  EXPECT_FALSE(gm.graph().eliminate_dead_code());
  const flow::Tensor x = flow::randn({2, 4});
  const flow::Tensor expected = flow::linear(flow::linear(x, model->parameters()[0], model->parameters()[1]), model->parameters()[2],
                                             model->parameters()[3]);
  flow::testing::expect_close(gm(x)[0], expected, 1e-5, 1e-6);
}

TEST(FxEdit, DeadCodeEliminationDropsUnreadNodes) {
  auto model = small_mlp();
  GraphModule gm = flow::fx::symbolic_trace(*model, {flow::randn({2, 4})});
  const size_t before = gm.graph().nodes().size();
  {
    auto guard = gm.graph().inserting_after(find_op(gm, "relu"));
    gm.graph().create_node("exp", {find_op(gm, "relu")});
  }
  EXPECT_EQ(gm.graph().nodes().size(), before + 1);
  EXPECT_TRUE(gm.graph().eliminate_dead_code());
  EXPECT_EQ(gm.graph().nodes().size(), before);
}

TEST(FxLint, CatchesBrokenGraphs) {
  auto model = small_mlp();
  GraphModule gm = flow::fx::symbolic_trace(*model, {flow::randn({2, 4})});
  flow::fx::Graph& graph = gm.graph();
  // A node reading a value defined after it.
  const Node first_linear = find_op(gm, "linear");
  const Node relu = find_op(gm, "relu");
  first_linear.replace_input(0, relu);
  EXPECT_THROW_MSG(graph.lint(), "[fx.lint] node 0.linear reads 1.relu:0, which is not defined before it");
  EXPECT_THROW_MSG(gm(flow::randn({2, 4})), "[fx.lint]");
  first_linear.replace_input(0, graph.placeholders()[0]);
  graph.lint();
  // An argument of the wrong shape for the op: the op's checked meta inference names it.
  find_op(gm, "relu").replace_input(0, graph.placeholders()[0]);
  // relu takes any shape, but its stored meta is stale now; re-inferring the metas reaches the
  // linear, whose weight no longer fits.
  EXPECT_THROW_MSG(graph.lint(), "[fx.lint] node 1.relu output 0 is described as (2,8) float32 cpu but relu infers (2,4)");
  EXPECT_THROW_MSG(graph.propagate_metas({{flow::Shape{2, 4}, flow::kFloat32, flow::kCPU}}), "[fx.propagate_metas] node 2.linear: [linear]");
  // create_node checks the op's schema up front.
  EXPECT_THROW_MSG(graph.create_node("no_such_op", {relu}), "[fx.create_node] no op named 'no_such_op'");
  EXPECT_THROW_MSG(graph.create_node("mul_scalar", {relu}), "[fx.create_node] mul_scalar");
}

TEST(FxTrace, UserMistakesAreFlowErrors) {
  flow::nn::Linear on_stack(4, 3);
  EXPECT_THROW_MSG(flow::fx::symbolic_trace(on_stack, {flow::randn({2, 4})}), "[fx.symbolic_trace] Linear must be held by a std::shared_ptr");
  auto model = small_mlp();
  EXPECT_THROW_MSG(flow::fx::symbolic_trace(*model, {flow::randn({2, 4}), flow::randn({2, 4})}), "[fx.symbolic_trace]");
  GraphModule gm = flow::fx::symbolic_trace(*model, {flow::randn({2, 4})});
  EXPECT_THROW_MSG(gm(flow::TensorList{}), "[fx.GraphModule] placeholder input is input 0 but 0 inputs were given");
}
