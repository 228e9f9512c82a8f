// A training script outside flow's tree: a small MLP classifies synthetic points (labels from a
// random linear teacher) for a few SGD steps, once as a compiled nn::Graph and once eagerly from
// the same initial weights. Prints both losses per step; exits 1 unless the Graph's losses equal
// eager's (a Graph trains bit-identically to eager, within a tolerance here) and the loss fell.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "core/flow.h"
#include "graph/graph.h"
#include "nn/modules.h"
#include "optim/optimizer.h"

namespace nn = flow::nn;

namespace {

constexpr int64_t kFeatures = 16, kClasses = 4, kBatch = 64;
constexpr int kSteps = 20;

std::shared_ptr<nn::Sequential> make_mlp() {
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(kFeatures, 32), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(32, kClasses));
}

// One training step in the Graph: forward, loss, backward and the SGD update in one Job.
struct TrainGraph : nn::Graph {
  TrainGraph(std::shared_ptr<nn::Sequential> net, std::shared_ptr<flow::optim::SGD> optimizer) {
    model = register_module("model", std::move(net));
    add_optimizer(std::move(optimizer));
  }
  flow::TensorList build(const flow::TensorList& in) override {
    flow::Tensor loss = loss_fn(model->forward(in[0]), in[1]);
    loss.backward();
    return {loss};
  }
  std::shared_ptr<nn::Sequential> model;
  nn::CrossEntropyLoss loss_fn;
};

}  // namespace

int main() {
  flow::manual_seed(0);
  const flow::Tensor teacher = flow::randn({kFeatures, kClasses});
  const flow::Tensor x = flow::randn({kBatch, kFeatures});
  const flow::Tensor y = flow::matmul(x, teacher).argmax(1);

  auto eager_net = make_mlp();
  auto graph_net = make_mlp();
  graph_net->load_state_dict(eager_net->state_dict());
  const auto options = flow::optim::SGDOptions(0.1).momentum(0.9);
  flow::optim::SGD eager_optimizer(eager_net->parameters(), options);
  TrainGraph graph(graph_net, std::make_shared<flow::optim::SGD>(graph_net->parameters(), options));
  nn::CrossEntropyLoss loss_fn;

  double first = 0, last = 0, worst = 0;
  for (int step = 0; step < kSteps; ++step) {
    const double graph_loss = graph(x, y).at(0).item<double>();
    eager_optimizer.zero_grad();
    flow::Tensor eager_loss = loss_fn(eager_net->forward(x), y);
    eager_loss.backward();
    eager_optimizer.step();
    const double eager = eager_loss.item<double>();
    std::printf("step %2d  graph loss %.6f  eager loss %.6f\n", step, graph_loss, eager);
    worst = std::max(worst, std::abs(graph_loss - eager) / std::max(1e-6, std::abs(eager)));
    if (step == 0) first = graph_loss;
    last = graph_loss;
  }
  const bool matches = worst <= 1e-5, learned = last < 0.5 * first;
  std::printf("graph vs eager: max relative difference %.3g (%s); loss %.6f -> %.6f (%s)\n", worst,
              matches ? "ok" : "MISMATCH", first, last, learned ? "ok" : "DID NOT FALL");
  return matches && learned ? 0 : 1;
}
