// utils::checkpoint against the same computation unchecked: the gradients of inputs and
// parameters are equal element for element (the rerun runs the same ops in the same order), with
// dropout (the rerun replays the random draws), several inputs and inputs without grad; and the
// errors it names itself by.
#include <gtest/gtest.h>

#include <memory>

#include "autograd/engine.h"
#include "autograd/node.h"
#include "core/grad_mode.h"
#include "common/test_util.h"
#include "core/flow.h"
#include "core/random.h"
#include "nn/modules.h"
#include "nn/utils/checkpoint.h"

namespace nn = flow::nn;
using flow::Tensor;
using flow::TensorList;

namespace {

std::shared_ptr<nn::Sequential> make_block(double dropout) {
  flow::manual_seed(3);
  auto block = std::make_shared<nn::Sequential>();
  block->push_back(std::make_shared<nn::Linear>(6, 16));
  block->push_back(std::make_shared<nn::GELU>());
  block->push_back(std::make_shared<nn::Dropout>(dropout));
  block->push_back(std::make_shared<nn::Linear>(16, 6));
  return block;
}

void expect_same(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_TRUE(a.defined()) << what;
  ASSERT_TRUE(b.defined()) << what;
  EXPECT_EQ(a.tolist<float>(), b.tolist<float>()) << what;
}

// Loss and gradients of block(x) (plus a residual) with and without checkpointing, from the
// same generator state.
struct StepResult {
  Tensor loss, x_grad;
  TensorList param_grads;
};

StepResult run(nn::Sequential& block, bool checkpointed) {
  flow::manual_seed(11);
  Tensor x = flow::randn({4, 6}).requires_grad_();
  flow::manual_seed(12);
  Tensor h = checkpointed ? flow::utils::checkpoint(block, x) : block(x);
  // A draw after the checkpointed call: the rerun must leave the generator where it was.
  Tensor loss = (flow::tanh(h + x) * flow::rand({4, 6})).sum();
  block.zero_grad();
  loss.backward();
  StepResult result{loss, x.grad(), {}};
  for (const Tensor& p : block.parameters()) result.param_grads.push_back(p.grad());
  return result;
}

void expect_same_runs(const StepResult& plain, const StepResult& checked) {
  expect_same(plain.loss, checked.loss, "loss");
  expect_same(plain.x_grad, checked.x_grad, "input gradient");
  ASSERT_EQ(plain.param_grads.size(), checked.param_grads.size());
  for (size_t i = 0; i < plain.param_grads.size(); ++i) expect_same(plain.param_grads[i], checked.param_grads[i], "parameter " + std::to_string(i));
}

}  // namespace

TEST(Checkpoint, ModuleGradientsEqualUnchecked) {
  auto block = make_block(0.0);
  expect_same_runs(run(*block, false), run(*block, true));
}

TEST(Checkpoint, DropoutReplaysTheSameMask) {
  auto block = make_block(0.5);
  const StepResult plain = run(*block, false);
  const StepResult checked = run(*block, true);
  expect_same_runs(plain, checked);
  // The mask mattered: without replaying the generator the rerun would draw another one.
  const StepResult again = run(*block, false);
  expect_same(plain.loss, again.loss, "deterministic reference");
  flow::manual_seed(11);
  Tensor x = flow::randn({4, 6}).requires_grad_();
  flow::manual_seed(12);
  Tensor h = flow::utils::checkpoint(*block, x, /*preserve_rng_state=*/false);
  Tensor loss = (flow::tanh(h + x) * flow::rand({4, 6})).sum();
  block->zero_grad();
  loss.backward();
  EXPECT_NE(x.grad().tolist<float>(), plain.x_grad.tolist<float>());
}

TEST(Checkpoint, KeepsNoInteriorActivations) {
  auto block = make_block(0.0);
  Tensor x = flow::randn({4, 6}).requires_grad_();
  Tensor h = flow::utils::checkpoint(*block, x);
  ASSERT_TRUE(h.requires_grad());
  EXPECT_EQ(h.grad_fn()->name(), "CheckpointBackward");
  // The one node's edges: the input, then the four parameters; nothing of the interior.
  EXPECT_EQ(h.grad_fn()->next_edges().size(), 5u);
}

TEST(Checkpoint, SeveralInputsOneWithoutGrad) {
  flow::manual_seed(5);
  Tensor w = flow::randn({3, 3}).requires_grad_();
  const auto function = [&w](const TensorList& in) {
    Tensor a = flow::matmul(in[0], w) * in[1];
    return TensorList{flow::sin(a) + in[2], flow::relu(a)};
  };
  auto grads = [&](bool checkpointed) {
    flow::manual_seed(6);
    Tensor a = flow::randn({2, 3}).requires_grad_(), b = flow::randn({2, 3}), c = flow::randn({2, 3}).requires_grad_();
    const TensorList out = checkpointed ? flow::utils::checkpoint(function, {a, b, c}) : function({a, b, c});
    w.set_grad(Tensor());
    (out[0].sum() + (out[1] * out[1]).sum()).backward();
    EXPECT_FALSE(b.grad().defined());
    return TensorList{a.grad(), c.grad(), w.grad()};
  };
  const TensorList plain = grads(false), checked = grads(true);
  for (size_t i = 0; i < plain.size(); ++i) expect_same(plain[i], checked[i], "gradient " + std::to_string(i));
}

TEST(Checkpoint, AutogradGradLeavesGradsAlone) {
  auto block = make_block(0.0);
  Tensor x = flow::randn({4, 6}).requires_grad_();
  const Tensor expected = flow::autograd::grad({(*block)(x).sum()}, {x}).at(0);
  block->zero_grad();
  const Tensor got = flow::autograd::grad({flow::utils::checkpoint(*block, x).sum()}, {x}).at(0);
  expect_same(expected, got, "grad of the input");
  for (const Tensor& p : block->parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(Checkpoint, WithoutGradOrInputsNeedingItJustRuns) {
  Tensor x = flow::randn({2, 3});
  const TensorList out = flow::utils::checkpoint([](const TensorList& in) { return TensorList{in[0] * 2.0}; }, {x});
  EXPECT_FALSE(out[0].requires_grad());
  Tensor y = flow::randn({2, 3}).requires_grad_();
  flow::autograd::NoGradGuard no_grad;
  EXPECT_FALSE(flow::utils::checkpoint([](const TensorList& in) { return TensorList{in[0] * 2.0}; }, {y})[0].requires_grad());
}

TEST(Checkpoint, ReturnedInputGetsItsGradient) {
  Tensor x = flow::randn({3}).requires_grad_();
  const TensorList out = flow::utils::checkpoint([](const TensorList& in) { return TensorList{in[0]}; }, {x});
  EXPECT_FALSE(out[0].same(x));
  (out[0] * 3.0).sum().backward();
  EXPECT_EQ(x.grad().tolist<float>(), std::vector<float>(3, 3.0f));
}

TEST(Checkpoint, ReturnedParameterKeepsItsHistoryAndGetsItsGradient) {
  Tensor w = flow::randn({3}).requires_grad_();
  Tensor x = flow::randn({3}).requires_grad_();
  const TensorList out = flow::utils::checkpoint([&w](const TensorList& in) { return TensorList{in[0] * 2.0, w}; }, {x});
  EXPECT_TRUE(w.is_leaf());
  (out[0].sum() + (out[1] * 5.0).sum()).backward();
  EXPECT_EQ(w.grad().tolist<float>(), std::vector<float>(3, 5.0f));
  EXPECT_EQ(x.grad().tolist<float>(), std::vector<float>(3, 2.0f));
}

TEST(Checkpoint, Errors) {
  EXPECT_THROW_MSG(flow::utils::checkpoint(flow::utils::CheckpointFunction(), {flow::ones({1})}), "[checkpoint] got an empty function");

  // A non-leaf that requires grad, read but not passed in.
  Tensor p = flow::randn({3}).requires_grad_();
  Tensor hidden = p * 2.0;
  EXPECT_THROW_MSG(flow::utils::checkpoint([&hidden](const TensorList& in) { return TensorList{in[0] * hidden}; }, {flow::ones({3})}),
                   "[checkpoint] the function reads a tensor of shape (3,) that requires grad");

  // An input changed in place before backward.
  Tensor x = flow::randn({3}).requires_grad_();
  Tensor base = x * 1.0;
  Tensor y = flow::utils::checkpoint([](const TensorList& in) { return TensorList{flow::sin(in[0])}; }, {base})[0];
  {
    flow::autograd::NoGradGuard no_grad;
    base.fill_(1.0);
  }
  EXPECT_THROW_MSG(y.sum().backward(), "[checkpoint] input 0 (shape (3,)) was modified in place");

  // A function whose outputs change between the runs.
  int calls = 0;
  const auto changing = [&calls](const TensorList& in) { return ++calls == 1 ? TensorList{in[0] * 2.0} : TensorList{in[0].sum()}; };
  Tensor z = flow::utils::checkpoint(changing, {x})[0];
  EXPECT_THROW_MSG(z.sum().backward(), "[checkpoint] output 0 has shape () when rerun for backward but (3,) the first time");

  // Twice without retain_graph; with it, a second backward reruns again.
  Tensor w = flow::utils::checkpoint([](const TensorList& in) { return TensorList{flow::exp(in[0])}; }, {x})[0];
  w.sum().backward();
  EXPECT_THROW_MSG(w.sum().backward(), "[checkpoint] trying to backward through a checkpointed function a second time");
  Tensor v = flow::utils::checkpoint([](const TensorList& in) { return TensorList{flow::exp(in[0])}; }, {x})[0];
  x.set_grad(Tensor());
  v.sum().backward(Tensor(), /*retain_graph=*/true);
  v.sum().backward();
  expect_same(x.grad(), flow::exp(x).detach() * 2.0, "two backwards");

  // No double backward.
  Tensor u = flow::utils::checkpoint([](const TensorList& in) { return TensorList{flow::exp(in[0])}; }, {x})[0];
  EXPECT_THROW_MSG(flow::autograd::grad({u.sum()}, {x}, {}, false, /*create_graph=*/true),
                   "[checkpoint] backward with create_graph (higher-order gradients) through a checkpoint is not supported");
}
