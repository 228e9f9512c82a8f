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
