// Update-with-cast under AMP (graph::fuse_update_cast): the optimizer's fused update also writes
// each parameter's rounded copy, which the next step's forward reads instead of casting; a
// parameter written outside the Graph has its copy made again. And the fused op's rounding steps
// the pass relies on.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <limits>

#include "common/test_util.h"
#include "core/flow.h"
#include "core/grad_mode.h"
#include "core/ops/fused.h"
#include "graph_helpers.h"

namespace nn = flow::nn;
namespace optim = flow::optim;
namespace fused = flow::fused;
using flow::Tensor;
using flow::TensorList;
using graph_test::count_op;
using graph_test::TrainGraph;

namespace {

// The stored bits of a 16-bit tensor (NaN compares unequal as a value).
std::vector<uint16_t> bits(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<uint16_t> out(static_cast<size_t>(c.numel()));
  std::memcpy(out.data(), c.data_ptr(), out.size() * sizeof(uint16_t));
  return out;
}

// round(a - b) into a 16-bit output beside the float32 difference.
fused::Program difference_and_rounded(flow::DType dtype) {
  return {{{"sub", {0, 1}, {}}, {"copy", {fused::step_arg(0)}, flow::Attrs().set("dtype", flow::dtype_name(dtype))}}, {0, 1}};
}

std::shared_ptr<nn::Sequential> make_net() {
  flow::manual_seed(21);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(12, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 4));
}

std::pair<Tensor, Tensor> batch(int step) {
  flow::manual_seed(300 + static_cast<uint64_t>(step));
  return {flow::randn({6, 12}), flow::randint(0, 4, {6})};
}

// One eager autocast training step: what an AMP Graph step computes, bit for bit, on this net.
void eager_step(nn::Module& net, optim::Optimizer& optimizer, int step) {
  const auto [x, y] = batch(step);
  optimizer.zero_grad();
  {
    const flow::autocast amp;
    nn::CrossEntropyLoss()(net.forward(x), y).backward();
  }
  optimizer.step();
}

void graph_step(TrainGraph& graph, int step) {
  const auto [x, y] = batch(step);
  graph(x, y);
}

void expect_identical_parameters(nn::Module& a, nn::Module& b, const std::string& when) {
  const TensorList pa = a.parameters(), pb = b.parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(pa[i].tolist<float>(), pb[i].tolist<float>()) << when << ", parameter " << i;
}

std::shared_ptr<optim::SGD> sgd(nn::Module& net) { return std::make_shared<optim::SGD>(net.parameters(), optim::SGDOptions(0.1).momentum(0.9)); }

}  // namespace

TEST(FusedElementwise, CopyStepsWithADtypeRoundIntoSixteenBitOutputs) {
  flow::manual_seed(4);
  Tensor a = flow::randn({5, 37}) * 1e3;
  const Tensor b = flow::randn({37});
  {
    flow::autograd::NoGradGuard no_grad;
    a.view({-1}).narrow(0, 0, 4).copy_(flow::tensor(std::vector<float>{std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                                                                    std::numeric_limits<float>::infinity(), 3.4e38f}));
  }
  for (flow::DType dtype : {flow::kBFloat16, flow::kFloat16}) {
    SCOPED_TRACE(flow::dtype_name(dtype));
    const TensorList out = fused::fused_elementwise({a, b}, difference_and_rounded(dtype), a.shape());
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[1].dtype(), dtype);
    EXPECT_EQ(bits(out[1]), bits((a - b).to(dtype)));  // the copy op's rounding, NaN and overflow included

    // The in-place form: a float32 destination and its rounded copy.
    Tensor wide = a.clone(), narrow = flow::zeros(a.shape(), flow::TensorOptions(dtype));
    fused::fused_elementwise_({wide, narrow}, {wide, b}, difference_and_rounded(dtype));
    EXPECT_EQ(bits(narrow), bits((a - b).to(dtype)));
    EXPECT_EQ(bits(narrow.to(flow::kFloat32).to(dtype)), bits(narrow));
  }
  const flow::Attrs to_bfloat16 = flow::Attrs().set("dtype", std::string("bfloat16"));
  EXPECT_THROW_MSG(fused::fused_elementwise({a.to(flow::kFloat64), b.to(flow::kFloat64)}, difference_and_rounded(flow::kBFloat16), a.shape()),
                   "only float32 programs round, to float16 or bfloat16");
  EXPECT_THROW_MSG(fused::fused_elementwise({a, b}, difference_and_rounded(flow::kFloat64), a.shape()), "rounds to float64");
  EXPECT_THROW_MSG(fused::fused_elementwise({a, b}, {{{"copy", {0}, to_bfloat16}, {"relu", {fused::step_arg(0)}, {}}}, {0, 1}}, a.shape()),
                   "step 1 (relu) reads a rounded value");
  EXPECT_THROW_MSG(fused::fused_elementwise({a, b}, {{{"sub", {0, 1}, {}}, {"copy", {fused::step_arg(0)}, to_bfloat16}}, {0}}, a.shape()),
                   "step 1 rounds a value that is not an output");
  Tensor wide = a.clone(), wrong = flow::zeros(a.shape(), flow::TensorOptions(flow::kFloat16));
  EXPECT_THROW_MSG(fused::fused_elementwise_({wide, wrong}, {wide, b}, difference_and_rounded(flow::kBFloat16)),
                   "destination float16 (5,37) does not match the output bfloat16 (5,37)");
}

namespace {

using OptimizerFactory = std::function<std::shared_ptr<optim::Optimizer>(nn::Module&)>;

// Four AMP steps of a Graph and of eager autocast with the optimizer `make`: the same parameters,
// and every parameter's cast replaced by the rounded copy its fused update writes.
void expect_updates_write_rounded_copies(const OptimizerFactory& make) {
  auto eager_net = make_net(), graph_net = make_net();
  const auto eager_opt = make(*eager_net);
  TrainGraph graph(graph_net, make(*graph_net));
  graph.config().enable_amp();
  for (int step = 0; step < 4; ++step) {
    eager_step(*eager_net, *eager_opt, step);
    graph_step(graph, step);
  }
  expect_identical_parameters(*graph_net, *eager_net, "after 4 steps");

  // Every parameter's cast became a variable the update writes; no cast reads a parameter.
  const auto& job = graph.job();
  const flow::graph::JobIndex index(job);
  int copies = 0, updates_with_cast = 0;
  for (const auto& node : job.nodes()) {
    if (node.op() == flow::graph::kVariableOp && node.attrs().count("cast_of")) {
      ++copies;
      EXPECT_EQ(node.outputs(0).dtype(), "bfloat16") << node.name();
      EXPECT_EQ(node.name(), node.attrs().at("cast_of").s() + ".bfloat16");
    }
    if (node.op() == "fused_elementwise_inplace") {
      for (int d = 0; d < node.attrs().at("destinations").i(); ++d) {
        if (index.node(flow::graph::parse_value_name(node.inputs(d)).first).attrs().count("cast_of")) ++updates_with_cast;
      }
    }
    if (node.op() == "copy") {
      EXPECT_NE(index.node(flow::graph::parse_value_name(node.inputs(0)).first).op(), flow::graph::kVariableOp) << node.name();
    }
  }
  EXPECT_EQ(copies, 4);
  EXPECT_EQ(updates_with_cast, 4);
  const flow::graph::ExplainReport report = graph.explain();
  const auto& passes = report.plans.at(0).log.passes;
  const auto pass = std::find_if(passes.begin(), passes.end(), [](const auto& record) { return record.pass == "fuse_update_cast"; });
  ASSERT_NE(pass, passes.end());
  EXPECT_EQ(pass->bypassed.size(), 4u);
  EXPECT_EQ(pass->added.size(), 4u);
}

}  // namespace

TEST(GraphAmp, UpdatesWriteTheRoundedParametersTheForwardReads) { expect_updates_write_rounded_copies(sgd); }

// AdamW decays the parameter in place (p.mul_) before its update (p.sub_): the update's assign
// writes the value the decay returned, which is still the parameter's storage, so the update fuses
// into one in-place node and writes the rounded copy as with SGD.
TEST(GraphAmp, AdamWUpdatesAfterTheirDecayWriteTheRoundedParameters) {
  expect_updates_write_rounded_copies([](nn::Module& net) {
    return std::make_shared<optim::AdamW>(net.parameters(), optim::AdamWOptions(1e-2).weight_decay(0.1));
  });
}

TEST(GraphAmp, ParametersWrittenOutsideTheGraphAreCastAfresh) {
  auto eager_net = make_net(), graph_net = make_net();
  const auto eager_opt = sgd(*eager_net), graph_opt = sgd(*graph_net);
  TrainGraph graph(graph_net, graph_opt);
  graph.config().enable_amp();
  int step = 0;
  auto train_both = [&](const std::string& when) {
    eager_step(*eager_net, *eager_opt, step);
    graph_step(graph, step);
    ++step;
    expect_identical_parameters(*graph_net, *eager_net, when);
  };
  train_both("first step");
  train_both("second step");

  // Written in place (copy_), under no-grad.
  {
    flow::autograd::NoGradGuard no_grad;
    for (nn::Module* net : {static_cast<nn::Module*>(eager_net.get()), static_cast<nn::Module*>(graph_net.get())}) {
      for (Tensor p : net->parameters()) p.copy_(p * 0.5);
    }
  }
  train_both("after an in-place scaling");

  // load_state_dict from another model.
  auto other = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(12, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 4));
  eager_net->load_state_dict(other->state_dict());
  graph_net->load_state_dict(other->state_dict());
  train_both("after load_state_dict");

  // An eager step of the graph's own model and optimizer between graph steps.
  eager_step(*graph_net, *graph_opt, step);
  eager_step(*eager_net, *eager_opt, step);
  ++step;
  train_both("after an eager step between graph steps");

  // A second graph training the same parameters (with its own optimizer) in turns with the first.
  const auto second_eager_opt = sgd(*eager_net);
  TrainGraph second(graph_net, sgd(*graph_net));
  second.config().enable_amp();
  for (int turn = 0; turn < 3; ++turn) {
    graph_step(second, step);
    eager_step(*eager_net, *second_eager_opt, step);
    ++step;
    train_both("after the second graph's turn " + std::to_string(turn));
  }
}
