// Element-wise fusion, the fused_elementwise op, optimizer updates fused in place, and eval-mode
// conv + batch-norm folding: each pass on small graphs, results against eager.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>

#include "common/reference.h"
#include "common/test_util.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "core/ops/fused.h"
#include "graph/graph.h"
#include "graph_helpers.h"
#include "nn/conv_norm.h"
#include "nn/modules.h"

namespace nn = flow::nn;
namespace optim = flow::optim;
namespace fused = flow::fused;
using flow::Tensor;
using flow::TensorList;

using graph_test::count_op;
using graph_test::EvalGraph;
using graph_test::TrainGraph;

namespace {

// A graph whose build() is any function of its inputs.
struct FunctionGraph : nn::Graph {
  explicit FunctionGraph(std::function<TensorList(const TensorList&)> fn) : fn_(std::move(fn)) {}
  TensorList build(const TensorList& in) override { return fn_(in); }
  std::function<TensorList(const TensorList&)> fn_;
};

void expect_identical(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.shape(), b.shape());
  EXPECT_EQ(a.tolist<double>(), b.tolist<double>());
}

// Largest difference relative to b's largest magnitude: folding reassociates float32 sums, so
// elements near zero carry the rounding of the whole sum.
double max_relative_difference(const Tensor& a, const Tensor& b) {
  const auto x = a.tolist<double>(), y = b.tolist<double>();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    worst = std::max(worst, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return worst / scale;
}

}  // namespace

TEST(ElementwiseFusion, ChainWithEveryBroadcastIsOneOpAndBitIdentical) {
  flow::manual_seed(3);
  const Tensor x = flow::randn({4, 3, 5, 6});
  const Tensor per_sample = flow::randn({4, 1, 1, 1}), per_channel = flow::randn({3, 1, 1}), per_column = flow::randn({6});
  const Tensor scale = flow::full({}, 0.75);
  auto chain = [&](const TensorList& in) {
    const Tensor h = (in[0] * per_channel + per_column) * scale - per_sample;
    return TensorList{flow::gelu(h, "tanh") * 0.5 + flow::clamp(flow::sigmoid(h).exp(), std::nullopt, 2.0)};
  };
  FunctionGraph graph(chain);
  const Tensor out = graph(x).at(0);
  expect_identical(out, chain({x}).at(0));
  EXPECT_EQ(count_op(graph.job(), "fused_elementwise"), 1);
  for (const char* op : {"mul", "add", "sub", "gelu", "sigmoid", "exp", "clamp", "mul_scalar"}) EXPECT_EQ(count_op(graph.job(), op), 0) << op;
}

TEST(ElementwiseFusion, ValuesReadOutsideTheChainAreOutputsAndOrderIsKept) {
  flow::manual_seed(4);
  const Tensor x = flow::randn({8, 16}), w = flow::randn({16, 16});
  auto fn = [&](const TensorList& in) {
    const Tensor a = flow::relu(in[0] * 2.0 + 1.0);  // read by the matmul below and by the last add
    const Tensor b = flow::matmul(a, w);
    return TensorList{flow::tanh(b) + a, a};
  };
  FunctionGraph graph(fn);
  const TensorList out = graph(x);
  const TensorList expected = fn({x});
  expect_identical(out.at(0), expected[0]);
  expect_identical(out.at(1), expected[1]);
  // relu(x*2+1) fuses into one node with one output; tanh(b)+a into another.
  EXPECT_EQ(count_op(graph.job(), "fused_elementwise"), 2);
  EXPECT_EQ(count_op(graph.job(), "matmul"), 1);
}

TEST(ElementwiseFusion, OptimizerUpdatesFuseInPlaceAndTrainingStaysBitIdentical) {
  for (const double momentum : {0.0, 0.9}) {
    auto make = [] {
      flow::manual_seed(5);
      return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(12, 16), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Linear>(16, 4));
    };
    auto eager_net = make(), graph_net = make();
    optim::SGD eager_opt(eager_net->parameters(), optim::SGDOptions(0.1).momentum(momentum));
    TrainGraph graph(graph_net, std::make_shared<optim::SGD>(graph_net->parameters(), optim::SGDOptions(0.1).momentum(momentum)));
    nn::CrossEntropyLoss loss_fn;
    for (int step = 0; step < 4; ++step) {
      flow::manual_seed(100 + step);
      const Tensor x = flow::randn({6, 12}), y = flow::randint(0, 4, {6});
      eager_opt.zero_grad();
      loss_fn(eager_net->forward(x), y).backward();
      eager_opt.step();
      graph(x, y);
    }
    const auto eager_params = eager_net->parameters(), graph_params = graph_net->parameters();
    for (size_t i = 0; i < eager_params.size(); ++i) expect_identical(graph_params[i], eager_params[i]);
    // Each parameter is written by one fused in-place op, which also writes its momentum buffer
    // (merge_inplace_updates); no assign is left.
    EXPECT_EQ(count_op(graph.job(), "assign"), 0) << "momentum " << momentum;
    EXPECT_EQ(count_op(graph.job(), "fused_elementwise_inplace"), 4) << "momentum " << momentum;
    for (const auto& node : graph.job().nodes()) {
      if (node.op() == "fused_elementwise_inplace") {
        EXPECT_EQ(node.attrs().at("destinations").i(), momentum == 0 ? 1 : 2) << node.name();
      }
    }
    // The hidden layer's ReLU runs as the first linear's epilogue, in training too.
    EXPECT_EQ(count_op(graph.job(), "fused_linear"), 1) << "momentum " << momentum;
  }
}

TEST(ElementwiseFusion, AmpUpdatesReadBFloat16GradientsAndTrainingStaysBitIdentical) {
  // Under AMP the gradients of float32 parameters arrive in bfloat16 and are cast to float32 for
  // the optimizer; the fused update absorbs those casts (no float32 gradient is written) and
  // computes what eager autocast computes, bit for bit.
  for (const double momentum : {0.0, 0.9}) {
    auto make = [] {
      flow::manual_seed(6);
      return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(12, 16), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Linear>(16, 4));
    };
    auto eager_net = make(), graph_net = make();
    optim::SGD eager_opt(eager_net->parameters(), optim::SGDOptions(0.1).momentum(momentum));
    TrainGraph graph(graph_net, std::make_shared<optim::SGD>(graph_net->parameters(), optim::SGDOptions(0.1).momentum(momentum)));
    graph.config().enable_amp();
    nn::CrossEntropyLoss loss_fn;
    for (int step = 0; step < 4; ++step) {
      flow::manual_seed(100 + step);
      const Tensor x = flow::randn({6, 12}), y = flow::randint(0, 4, {6});
      eager_opt.zero_grad();
      {
        const flow::autocast amp;
        loss_fn(eager_net->forward(x), y).backward();
      }
      eager_opt.step();
      graph(x, y);
    }
    const auto eager_params = eager_net->parameters(), graph_params = graph_net->parameters();
    for (size_t i = 0; i < eager_params.size(); ++i) expect_identical(graph_params[i], eager_params[i]);
    EXPECT_EQ(count_op(graph.job(), "fused_elementwise_inplace"), 4) << "momentum " << momentum;
    // The casts left write bfloat16 (the input, the weights, the loss gradient) or float32 for the
    // loss; none writes a float32 gradient of a parameter's shape.
    std::set<std::vector<int64_t>> parameter_shapes;
    for (const Tensor& p : graph_params) parameter_shapes.insert(p.shape().vec());
    for (const auto& node : graph.job().nodes()) {
      const std::vector<int64_t> shape(node.outputs(0).shape().begin(), node.outputs(0).shape().end());
      EXPECT_FALSE(node.op() == "copy" && node.outputs(0).dtype() == "float32" && parameter_shapes.count(shape)) << node.name();
    }
  }
}

TEST(MatmulEpilogueFusion, LinearAndItsElementwiseChainAreOneOpAndBitIdentical) {
  flow::manual_seed(9);
  auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(20, 32), std::make_shared<nn::GELU>(),
                                              std::make_shared<nn::Linear>(32, 32), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Linear>(32, 5));
  const Tensor x = flow::randn({7, 20}), shift = flow::randn({32});
  FunctionGraph graph([&](const TensorList& in) {
    const Tensor h = net->forward(in[0]);
    return TensorList{h, flow::sigmoid(flow::linear(in[0], (*net)[0]->named_parameters().at(0).second) * 0.5 + shift)};
  });
  const TensorList fused = graph(x);
  EXPECT_EQ(count_op(graph.job(), "fused_linear"), 3);
  EXPECT_EQ(count_op(graph.job(), "linear"), 1);  // the last layer has no epilogue
  EXPECT_EQ(count_op(graph.job(), "gelu") + count_op(graph.job(), "relu") + count_op(graph.job(), "sigmoid"), 0);
  flow::autograd::NoGradGuard no_grad;
  expect_identical(fused[0], net->forward(x));
  expect_identical(fused[1], flow::sigmoid(flow::linear(x, (*net)[0]->named_parameters().at(0).second) * 0.5 + shift));
}

TEST(MatmulEpilogueFusion, LinearReadElsewhereIsNotFused) {
  flow::manual_seed(10);
  const Tensor w = flow::randn({8, 6}), b = flow::randn({8});
  FunctionGraph graph([&](const TensorList& in) {
    const Tensor z = flow::linear(in[0], w, b);
    return TensorList{z, flow::relu(z)};
  });
  const Tensor x = flow::randn({3, 6});
  const TensorList out = graph(x);
  EXPECT_EQ(count_op(graph.job(), "fused_linear"), 0);
  expect_identical(out[1], flow::relu(flow::linear(x, w, b)));
}

TEST(FusedLinear, ChecksItsInputs) {
  const Tensor x = flow::randn({3, 6}), w = flow::randn({8, 6});
  const fused::Program relu{{{"relu", {0}, {}}}, {0}};
  const flow::Attrs attrs = flow::Attrs().set("program", fused::encode(relu)).set("shape", flow::Shape({3, 8}));
  const flow::OpDef& op = flow::find_op("fused_linear");
  EXPECT_THROW_MSG(op.infer({{x.shape(), x.dtype(), x.device()}}, flow::Attrs(attrs).set("linear_inputs", int64_t{2})), "expected at least 2 inputs");
  EXPECT_THROW_MSG(op.infer({{x.shape(), x.dtype(), x.device()}, {w.shape(), w.dtype(), w.device()}}, flow::Attrs(attrs).set("linear_inputs", int64_t{4})),
                   "linear_inputs must be 2 or 3");
  EXPECT_THROW_MSG(op.infer({{x.shape(), x.dtype(), x.device()}, {flow::Shape({8, 5}), w.dtype(), w.device()}}, flow::Attrs(attrs).set("linear_inputs", int64_t{2})),
                   "[linear] size mismatch");
}

// In bfloat16 (AMP), the product runs in bfloat16 (oneDNN, where the CPU multiplies it) into float32,
// the epilogue in float32, and the result is rounded once.
TEST(FusedLinear, BFloat16IsTheFloat32OpOnRoundedValuesRoundedOnce) {
  flow::manual_seed(11);
  const auto bf16 = [](const Tensor& t) { return t.to(flow::kBFloat16); };
  const auto wide = [](const Tensor& t) { return t.to(flow::kFloat32); };
  const Tensor x = bf16(flow::randn({5, 40})), w = bf16(flow::randn({24, 40})), b = bf16(flow::randn({24})), shift = bf16(flow::randn({24}));
  const fused::Program add_then_relu{{{"add", {0, 1}, {}}, {"relu", {fused::step_arg(0)}, {}}}, {1}};
  const flow::Attrs attrs = flow::Attrs().set("program", fused::encode(add_then_relu)).set("shape", flow::Shape({5, 24}));
  const flow::OpDef& op = flow::find_op("fused_linear");
  const Tensor out = flow::apply(op, {x, w, b, shift}, flow::Attrs(attrs).set("linear_inputs", int64_t{3})).at(0);
  flow::testing::expect_bfloat16_product(out, flow::relu(flow::linear(wide(x), wide(w), wide(b)) + wide(shift)));
  const Tensor no_bias = flow::apply(op, {x, w, shift}, flow::Attrs(attrs).set("linear_inputs", int64_t{2})).at(0);
  flow::testing::expect_bfloat16_product(no_bias, flow::relu(flow::linear(wide(x), wide(w)) + wide(shift)));
}

// relu of the product alone (Linear + ReLU) rounds the product and applies relu to it: the same as
// relu in float32 then one rounding, NaN kept.
TEST(FusedLinear, BFloat16ReluOfTheProductKeepsNaN) {
  flow::manual_seed(13);
  const auto bf16 = [](const Tensor& t) { return t.to(flow::kBFloat16); };
  const auto wide = [](const Tensor& t) { return t.to(flow::kFloat32); };
  Tensor x = flow::randn({5, 40}).contiguous();
  x.data_ptr<float>()[2 * 40 + 7] = std::numeric_limits<float>::quiet_NaN();  // row 2
  const Tensor xb = bf16(x), w = bf16(flow::randn({24, 40})), b = bf16(flow::randn({24}));
  const fused::Program relu{{{"relu", {0}, {}}}, {0}};
  const flow::Attrs attrs = flow::Attrs().set("program", fused::encode(relu)).set("shape", flow::Shape({5, 24}));
  const Tensor out = flow::apply(flow::find_op("fused_linear"), {xb, w, b}, flow::Attrs(attrs).set("linear_inputs", int64_t{3})).at(0);
  const Tensor expected = flow::relu(flow::linear(wide(xb), wide(w), wide(b)));
  const auto got = wide(out).tolist<float>(), want = expected.tolist<float>();
  for (size_t i = 0; i < want.size(); ++i) {
    if (i / 24 == 2) {
      EXPECT_TRUE(std::isnan(got[i])) << i;
    } else {
      EXPECT_NEAR(got[i], want[i], std::ldexp(1.0, -7) * std::abs(want[i]) + 1e-3) << i;
      EXPECT_GE(got[i], 0.0f) << i;
    }
  }
}

TEST(FusedElementwise, RunsProgramsDirectlyAndRejectsBadOnes) {
  const Tensor a = flow::tensor(std::vector<float>{1, -2, 3, -4}).reshape({2, 2}), b = flow::tensor(std::vector<float>{10, 20});
  fused::Program program;
  program.steps = {{"add", {0, 1}, {}}, {"relu", {fused::step_arg(0)}, {}}, {"mul_scalar", {fused::step_arg(1)}, flow::Attrs().set("scalar", flow::Scalar(2))}};
  program.outputs = {1, 2};
  const TensorList out = fused::fused_elementwise({a, b}, program, {2, 2});
  EXPECT_EQ(out.at(0).tolist<float>(), (std::vector<float>{11, 18, 13, 16}));
  EXPECT_EQ(out.at(1).tolist<float>(), (std::vector<float>{22, 36, 26, 32}));

  Tensor destination = a.clone();
  fused::Program update{{{"sub", {0, 1}, {}}}, {0}};
  fused::fused_elementwise_(TensorList{destination}, TensorList{destination, b}, update);
  EXPECT_EQ(destination.tolist<float>(), (std::vector<float>{-9, -22, -7, -24}));

  auto expect_error = [](const std::function<void()>& call, const std::string& message) {
    try {
      call();
      ADD_FAILURE() << "no error, expected " << message;
    } catch (const flow::Error& error) {
      EXPECT_NE(std::string(error.what()).find("[fused_elementwise]"), std::string::npos) << error.what();
      EXPECT_NE(std::string(error.what()).find(message), std::string::npos) << error.what();
    }
  };
  expect_error([&] { fused::fused_elementwise({a}, {{{"matmul", {0, 0}, {}}}, {0}}, {2, 2}); }, "cannot be fused");
  expect_error([&] { fused::fused_elementwise({a}, {{{"add", {0}, {}}}, {0}}, {2, 2}); }, "takes 2 arguments");
  expect_error([&] { fused::fused_elementwise({a}, {{{"relu", {fused::step_arg(3)}, {}}}, {0}}, {2, 2}); }, "undefined value");
  expect_error([&] { fused::fused_elementwise({a, flow::randn({3})}, {{{"add", {0, 1}, {}}}, {0}}, {2, 2}); }, "does not broadcast");
  expect_error([&] { fused::fused_elementwise({flow::ones({2, 2}, flow::kInt64)}, {{{"relu", {0}, {}}}, {0}}, {2, 2}); }, "the first operand must be floating, got int64");
  expect_error([&] { fused::fused_elementwise({a, flow::ones({2, 2}, flow::kInt64)}, {{{"add", {0, 1}, {}}}, {0}}, {2, 2}); },
               "operands must share one floating dtype (or be bool, or 16-bit floats of a float32 program), got int64");
  expect_error([&] { fused::fused_elementwise({a.to(flow::kFloat64), a.to(flow::kBFloat16)}, {{{"copy", {1}, {}}}, {0}}, {2, 2}); },
               "got bfloat16 and float64");
}

// A float32 program reads float16/bfloat16 operands through copy steps, widened as they are loaded
// (full-size, broadcast and single-value operands): the unfused casts' results.
TEST(FusedElementwise, CopyStepsWidenSixteenBitOperands) {
  flow::manual_seed(12);
  const Tensor w = flow::randn({6, 40}), lr = flow::tensor(std::vector<float>{0.5f}).reshape({});
  for (flow::DType dtype : {flow::kBFloat16, flow::kFloat16}) {
    SCOPED_TRACE(flow::dtype_name(dtype));
    const Tensor grad = flow::randn({6, 40}).to(dtype), bias = flow::randn({40}).to(dtype), scale = flow::randn({}).to(dtype);
    // w - lr * (grad + bias) * scale, every 16-bit operand through a copy.
    const fused::Program program{{{"copy", {1}, {}},
                                  {"copy", {2}, {}},
                                  {"add", {fused::step_arg(0), fused::step_arg(1)}, {}},
                                  {"copy", {4}, {}},
                                  {"mul", {fused::step_arg(2), fused::step_arg(3)}, {}},
                                  {"mul", {fused::step_arg(4), 3}, {}},
                                  {"sub", {0, fused::step_arg(5)}, {}}},
                                 {6}};
    const Tensor out = fused::fused_elementwise({w, grad, bias, lr, scale}, program, {6, 40}).at(0);
    const Tensor expected = w - lr * ((grad.to(flow::kFloat32) + bias.to(flow::kFloat32)) * scale.to(flow::kFloat32));
    EXPECT_EQ(out.dtype(), flow::kFloat32);
    EXPECT_EQ(out.tolist<float>(), expected.tolist<float>());
  }
}

// where's bool condition is an operand the kernel reads as 0 or 1, full-size or broadcast; the
// first operand (whose dtype is the program's) must be floating.
TEST(FusedElementwise, WhereReadsBoolConditions) {
  const Tensor a = flow::tensor(std::vector<float>{1, -2, 3, -4}).reshape({2, 2}), b = flow::tensor(std::vector<float>{10, 20});
  const Tensor mask = flow::tensor(std::vector<bool>{true, false, false, true}).reshape({2, 2});
  const fused::Program select{{{"where", {1, 0, 2}, {}}, {"relu", {fused::step_arg(0)}, {}}}, {1}};
  EXPECT_EQ(fused::fused_elementwise({a, mask, b}, select, {2, 2}).at(0).tolist<float>(), (std::vector<float>{1, 20, 10, 0}));
  const Tensor skip = flow::full({}, true, flow::TensorOptions(flow::kBool));
  const fused::Program keep_old{{{"sub", {0, 1}, {}}, {"where", {2, 0, fused::step_arg(0)}, {}}}, {1}};
  EXPECT_EQ(fused::fused_elementwise({a, b, skip}, keep_old, {2, 2}).at(0).tolist<float>(), a.tolist<float>());
  EXPECT_EQ(fused::fused_elementwise({a, b, flow::logical_not(skip)}, keep_old, {2, 2}).at(0).tolist<float>(), (a - b).tolist<float>());
  EXPECT_THROW_MSG(fused::fused_elementwise({mask, a, b}, {{{"where", {0, 1, 2}, {}}}, {0}}, {2, 2}), "the first operand must be floating, got bool");
}

// A where whose condition comes first in its chain joins the chain, as eager computes it.
TEST(ElementwiseFusion, WhereJoinsChains) {
  flow::manual_seed(5);
  const Tensor x = flow::randn({4, 6}), y = flow::randn({4, 6});
  auto chain = [](const TensorList& in) {
    const Tensor mask = flow::gt(in[1], 0.0);
    return TensorList{flow::relu(flow::where(mask, in[0] * 2.0, in[1] - 1.0)) + 0.5};
  };
  FunctionGraph graph(chain);
  expect_identical(graph({x, y}).at(0), chain({x, y}).at(0));
  EXPECT_EQ(count_op(graph.job(), "fused_elementwise"), 1);
  EXPECT_EQ(count_op(graph.job(), "where"), 0);
}

TEST(FusedElementwise, OperandLayoutsCoverTheFusableBroadcasts) {
  const flow::Shape out{4, 3, 5, 6};
  auto layout = [&](const flow::Shape& operand) { return fused::operand_layout(operand, out); };
  EXPECT_EQ(layout({4, 3, 5, 6})->size, 360);
  EXPECT_EQ(layout({})->size, 1);
  EXPECT_EQ(layout({6})->inner, 1);
  EXPECT_EQ(layout({3, 1, 1})->inner, 30);
  EXPECT_EQ(layout({3, 1, 1})->size, 3);
  EXPECT_EQ(layout({4, 1, 1, 1})->inner, 90);
  EXPECT_FALSE(layout({4, 1, 1, 6}).has_value());  // two separate broadcast blocks
  EXPECT_FALSE(layout({7}).has_value());
}

TEST(ConvBatchNormFolding, EvalOutputMatchesUnfoldedAndFollowsEagerChanges) {
  for (const bool conv_bias : {true, false}) {
    for (const bool affine : {true, false}) {
      flow::manual_seed(6);
      auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 8, 3).bias(conv_bias)),
                                                  std::make_shared<nn::BatchNorm2d>(8, 1e-3, 0.5, affine), std::make_shared<nn::ReLU>());
      {
        // Statistics and affine weights away from their initial 0/1.
        flow::autograd::NoGradGuard no_grad;
        for (int i = 0; i < 3; ++i) net->forward(flow::randn({4, 3, 9, 9}) * 2.0 + 1.0);
        for (auto& [name, p] : net->named_parameters()) p.copy_(flow::randn(p.shape()));
      }
      net->eval();
      const Tensor x = flow::randn({2, 3, 9, 9});
      EvalGraph graph(net);
      const Tensor folded = graph(x).at(0);
      flow::autograd::NoGradGuard no_grad;
      EXPECT_LE(max_relative_difference(folded, net->forward(x)), 1e-5) << "bias " << conv_bias << " affine " << affine;
      EXPECT_EQ(count_op(graph.job(), "batch_norm_eval"), 0);
      EXPECT_EQ(count_op(graph.job(), "conv2d"), 1);
      // Folded weights are computed from the variables on every call.
      Tensor running_mean = net->state_dict().at("1.running_mean");
      running_mean.copy_(running_mean + 0.25);
      EXPECT_LE(max_relative_difference(graph(x).at(0), net->forward(x)), 1e-5);
    }
  }
}

TEST(ConvBatchNormFolding, ConvReadElsewhereIsNotFolded) {
  flow::manual_seed(7);
  auto conv = std::make_shared<nn::Conv2d>(nn::Conv2dOptions(2, 4, 3));
  auto bn = std::make_shared<nn::BatchNorm2d>(4);
  bn->eval();
  FunctionGraph graph([&](const TensorList& in) {
    const Tensor y = (*conv)(in[0]);
    return TensorList{(*bn)(y) + y};
  });
  const Tensor x = flow::randn({1, 2, 6, 6});
  const Tensor out = graph(x).at(0);
  EXPECT_EQ(count_op(graph.job(), "batch_norm_eval"), 1);
  flow::autograd::NoGradGuard no_grad;
  const Tensor y = (*conv)(x);
  EXPECT_LE(max_relative_difference(out, (*bn)(y) + y), 1e-6);
}
