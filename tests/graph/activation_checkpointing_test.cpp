// config().set_activation_checkpointing: an MLP of residual blocks with dropout trains to the plain
// Graph's losses and parameters, with a smaller planned peak; the clones survive the later passes
// and are placed after the forward; explain() reports the pass; a path naming no module is an error.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "common/test_util.h"
#include "core/random.h"
#include "graph/graph_helpers.h"

using graph_test::TrainGraph;
using flow::Tensor;
namespace nn = flow::nn;

namespace {

// x + fc2(dropout(gelu(fc1(x)))): what the block keeps for backward is 4x wider than its input.
struct ResidualBlock : nn::Module {
  ResidualBlock() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(24, 96));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(96, 24));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.2));
  }
  Tensor forward(const Tensor& x) override { return x + (*fc2)((*drop)(flow::gelu((*fc1)(x)))); }
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::Dropout> drop;
};

std::shared_ptr<nn::Sequential> make_net() {
  flow::manual_seed(4);
  auto net = std::make_shared<nn::Sequential>();
  for (int i = 0; i < 3; ++i) net->push_back(std::make_shared<ResidualBlock>());
  net->push_back(std::make_shared<nn::Linear>(24, 5));
  return net;
}

std::shared_ptr<flow::optim::SGD> sgd(const nn::Module& net) {
  return std::make_shared<flow::optim::SGD>(net.parameters(), flow::optim::SGDOptions(0.1).momentum(0.9));
}

}  // namespace

TEST(ActivationCheckpointing, MlpTrainsLikePlainGraphWithSmallerPeak) {
  auto plain_net = make_net(), checked_net = make_net();
  TrainGraph plain(plain_net, sgd(*plain_net)), checked(checked_net, sgd(*checked_net));
  for (const char* block : {"model.0", "model.1", "model.2"}) checked.config().set_activation_checkpointing(block);
  for (uint64_t step = 0; step < 4; ++step) {
    flow::manual_seed(50 + step);
    const Tensor x = flow::randn({32, 24}), y = flow::randint(0, 5, {32});
    flow::manual_seed(60 + step);
    const double plain_loss = plain(x, y).at(0).item<double>();
    flow::manual_seed(60 + step);
    const double checked_loss = checked(x, y).at(0).item<double>();
    EXPECT_NEAR(checked_loss, plain_loss, 1e-6) << "step " << step;
  }
  const auto a = plain_net->named_parameters(), b = checked_net->named_parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(flow::allclose(b[i].second, a[i].second, 0, 1e-6)) << a[i].first;
  EXPECT_LT(checked.plan().block_bytes.at("cpu"), plain.plan().block_bytes.at("cpu"));

  // The clones outlive CSE and DCE and come after the forward (the loss: the fused cross-entropy).
  const auto& job = checked.job();
  int clones = 0, loss = -1, first_clone = -1;
  for (int p = 0; p < job.nodes_size(); ++p) {
    const auto& node = job.nodes(p);
    if (node.op() == "sparse_softmax_cross_entropy") loss = p;
    if (node.name().find(".recompute") == std::string::npos) continue;
    ++clones;
    if (first_clone < 0) first_clone = p;
  }
  ASSERT_GE(loss, 0);
  EXPECT_GT(clones, 0);
  EXPECT_GT(first_clone, loss);

  std::ostringstream report;
  report << checked.explain();
  EXPECT_NE(report.str().find("activation_checkpointing:"), std::string::npos) << report.str();
  EXPECT_NE(report.str().find("recomputed for backward: model.0.fc1.linear"), std::string::npos) << report.str();
}

TEST(ActivationCheckpointing, NoModuleOfThatPathIsAnError) {
  auto net = make_net();
  TrainGraph graph(net, sgd(*net));
  graph.config().set_activation_checkpointing("model.7");
  EXPECT_THROW_MSG(graph(flow::randn({2, 24}), flow::randint(0, 5, {2})), "set_activation_checkpointing('model.7') names no module of the graph");
  EXPECT_THROW_MSG(graph.config().set_activation_checkpointing(""), "[graph.set_activation_checkpointing] the module path is empty");
}
