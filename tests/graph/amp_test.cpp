// A Graph with config().enable_amp() against eager training under flow::autocast: the same
// bfloat16 casts, the same numbers, float32 parameters and optimizer.
#include <gtest/gtest.h>

#include <sstream>

#include "common/test_util.h"
#include "core/flow.h"
#include "graph_helpers.h"

namespace optim = flow::optim;
using flow::Tensor;
using graph_test::batch;
using graph_test::copy_params;
using graph_test::count_op;
using graph_test::expect_same_parameters;
using graph_test::make_cnn;
using graph_test::make_mlp;
using graph_test::max_relative_difference;
using graph_test::TrainGraph;

TEST(GraphAmp, TrainingMatchesEagerAutocast) {
  for (auto [make, shape] : {std::pair{&make_mlp, flow::Shape{16, 1, 28, 28}}, std::pair{&make_cnn, flow::Shape{8, 1, 28, 28}}}) {
    auto eager_net = make();
    auto graph_net = make();
    copy_params(*eager_net, *graph_net);
    optim::SGD eager_opt(eager_net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
    auto graph_opt = std::make_shared<optim::SGD>(graph_net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
    TrainGraph graph(graph_net, graph_opt);
    graph.config().enable_amp();
    flow::nn::CrossEntropyLoss loss_fn;
    for (int k = 0; k < 10; ++k) {
      auto [x, y] = batch(k, shape);
      Tensor eager_loss;
      {
        const flow::autocast amp;
        eager_loss = loss_fn(eager_net->forward(x), y);
      }
      eager_opt.zero_grad();
      eager_loss.backward();
      eager_opt.step();
      const Tensor graph_loss = graph(x, y).at(0);
      EXPECT_EQ(graph_loss.dtype(), flow::kFloat32);
      EXPECT_LE(max_relative_difference(graph_loss, eager_loss), 1e-3) << k;
    }
    for (const auto& [name, p] : graph_net->named_parameters()) EXPECT_EQ(p.dtype(), flow::kFloat32) << name;
    // Fused element-wise chains round to bfloat16 once where eager rounds after each op.
    expect_same_parameters(*graph_net, *eager_net, 1e-2);
    EXPECT_GT(count_op(graph.job(), "copy"), 0);
  }
}

TEST(GraphAmp, CastsAppearOnlyWhenEnabledAndThePrintSaysSo) {
  auto net = make_mlp();
  auto plain_net = make_mlp();
  TrainGraph amp_graph(net, std::make_shared<optim::SGD>(net->parameters(), optim::SGDOptions(0.1)));
  amp_graph.config().enable_amp();
  TrainGraph plain(plain_net, std::make_shared<optim::SGD>(plain_net->parameters(), optim::SGDOptions(0.1)));
  auto [x, y] = batch(0, {4, 1, 28, 28});
  amp_graph(x, y);
  plain(x, y);
  EXPECT_GT(count_op(amp_graph.job(), "copy"), count_op(plain.job(), "copy"));
  std::ostringstream text;
  text << amp_graph;
  EXPECT_NE(text.str().find("amp=bfloat16"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("dtype=flow.bfloat16"), std::string::npos);
  EXPECT_THROW_MSG(plain.config().enable_amp(true, flow::kFloat32), "[graph.enable_amp] dtype must be bfloat16 or float16");
}
