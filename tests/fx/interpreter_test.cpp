// fx::Interpreter hooks, Transformer, ShapeProp on meta tensors, replace_pattern, conv + batch-norm
// fusion with the fx API, and a user pass inside nn::Graph's compile.
#include <gtest/gtest.h>

#include "common/graphs.h"
#include "common/models.h"
#include "common/reference.h"
#include "common/test_util.h"
#include "examples/fx_conv_bn_fuse.h"
#include "fx/interpreter.h"
#include "fx/subgraph_rewriter.h"
#include "models/vision/mobilenet_v2.h"

namespace {

namespace fx = flow::fx;
using fx::GraphModule;
using fx::Node;
using fx::Opcode;

int count_ops(const GraphModule& gm, const std::string& op) {
  int n = 0;
  for (const auto& node : gm.job().nodes()) n += node.op() == op;
  return n;
}

// Counts every op it runs and computes relu as gelu.
class GeluInterpreter : public fx::Interpreter {
 public:
  using fx::Interpreter::Interpreter;
  flow::TensorList call_function(const Node& node, const flow::TensorList& args, const flow::Attrs& kwargs) override {
    ++calls[node.target()];
    if (node.target() == "relu") return {flow::gelu(args[0])};
    return fx::Interpreter::call_function(node, args, kwargs);
  }
  std::map<std::string, int> calls;
};

class GeluTransformer : public fx::Transformer {
 public:
  using fx::Transformer::Transformer;
  flow::TensorList call_function(const Node& node, const flow::TensorList& args, const flow::Attrs& kwargs) override {
    if (node.target() == "relu") return {flow::gelu(args[0])};
    return fx::Transformer::call_function(node, args, kwargs);
  }
};

// The MLP of test_models with gelu in place of relu, computed eagerly.
flow::Tensor mlp_with_gelu(flow::nn::Module& model, const flow::Tensor& x) {
  const flow::TensorList p = model.parameters();
  flow::Tensor h = flow::flatten(x, 1);
  h = flow::gelu(flow::linear(h, p[0], p[1]));
  h = flow::gelu(flow::linear(h, p[2], p[3]));
  return flow::linear(h, p[4], p[5]);
}

std::shared_ptr<flow::nn::Sequential> small_cnn() {
  namespace nn = flow::nn;
  return std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 8, 3).stride(2).padding(1)), std::make_shared<nn::BatchNorm2d>(8),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Conv2d>(nn::Conv2dOptions(8, 16, 3).padding(1)),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::AdaptiveAvgPool2d>(1), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(16, 10));
}

}  // namespace

TEST(FxInterpreter, RunsLikeEager) {
  auto model = test_models::mlp();
  const flow::Tensor x = flow::randn({3, 1, 28, 28});
  GraphModule gm = fx::symbolic_trace(*model, {x});
  fx::Interpreter interpreter(gm);
  flow::testing::expect_close(interpreter.run({x})[0], model->forward(x), 1e-5, 1e-6);
}

TEST(FxInterpreter, OverriddenHookCountsCallsAndSwapsReluForGelu) {
  auto model = test_models::mlp();
  const flow::Tensor x = flow::randn({3, 1, 28, 28});
  GraphModule gm = fx::symbolic_trace(*model, {x});
  GeluInterpreter interpreter(gm);
  const flow::Tensor result = interpreter.run({x})[0];
  EXPECT_EQ(interpreter.calls["relu"], 2);
  EXPECT_EQ(interpreter.calls["linear"], 3);
  flow::testing::expect_close(result, mlp_with_gelu(*model, x), 1e-5, 1e-6);
  EXPECT_EQ(count_ops(gm, "relu"), 2);  // interpreting changes nothing
}

TEST(FxTransformer, BuildsANewGraphModule) {
  auto model = test_models::mlp();
  const flow::Tensor x = flow::randn({3, 1, 28, 28});
  GraphModule gm = fx::symbolic_trace(*model, {x});
  GraphModule transformed = GeluTransformer(gm).transform();
  transformed.graph().lint();
  EXPECT_EQ(count_ops(transformed, "relu"), 0);
  EXPECT_EQ(count_ops(transformed, "gelu"), 2);
  EXPECT_EQ(count_ops(gm, "relu"), 2);
  // Names, scopes and parameters carry over: the new graph shares the module's weights.
  EXPECT_TRUE(transformed.graph().has_node("1.linear"));
  EXPECT_EQ(transformed.graph().node("1.linear").meta().scope, "1");
  EXPECT_EQ(transformed.attrs().at("1.weight").impl(), model->parameters()[0].impl());
  flow::testing::expect_close(transformed(x)[0], mlp_with_gelu(*model, x), 1e-5, 1e-6);
}

TEST(FxShapeProp, MetaInputsOfASmallCnn) {
  auto model = small_cnn();
  model->eval();
  const flow::Tensor images = flow::empty({100, 3, 224, 224}, flow::TensorOptions().device(flow::kMeta));
  GraphModule gm = fx::symbolic_trace(*model, {images});
  const flow::TensorList out = fx::ShapeProp(gm).propagate({images});
  EXPECT_TRUE(out[0].device().is_meta());
  EXPECT_EQ(out[0].shape(), flow::Shape({100, 10}));
  bool saw_pool = false;
  for (const Node& node : gm.graph().nodes()) {
    ASSERT_EQ(node.meta().tensor_meta.size(), static_cast<size_t>(node.num_outputs()));
    if (node.name() == "0.conv2d") {
      EXPECT_EQ(node.meta().tensor_meta[0].shape, flow::Shape({100, 8, 112, 112}));
    }
    if (node.op() == Opcode::kCallFunction && node.target().rfind("max_pool2d", 0) == 0) {
      saw_pool = true;
      EXPECT_EQ(node.meta().tensor_meta[0].shape, flow::Shape({100, 8, 56, 56}));
      EXPECT_EQ(node.meta().tensor_meta[0].dtype, flow::kFloat32);
    }
  }
  EXPECT_TRUE(saw_pool);
  // The metas written agree with every op's checked meta inference.
  gm.graph().lint();
}

TEST(FxShapeProp, MobileNetV2OnMeta) {
  auto model = flow::vision::models::mobilenet_v2();
  model->eval();
  const flow::Tensor images = flow::empty({100, 3, 224, 224}, flow::TensorOptions().device(flow::kMeta));
  GraphModule gm = fx::symbolic_trace(*model, {images});
  const flow::TensorList out = fx::ShapeProp(gm).propagate({images});
  EXPECT_EQ(out[0].shape(), flow::Shape({100, 1000}));
  EXPECT_GT(gm.graph().nodes().size(), 300u);
}

TEST(FxShapeProp, RealInputsRunKernels) {
  auto model = test_models::mlp();
  const flow::Tensor x = flow::randn({3, 1, 28, 28});
  GraphModule gm = fx::symbolic_trace(*model, {x});
  flow::testing::expect_close(fx::ShapeProp(gm).propagate({x})[0], model->forward(x), 1e-5, 1e-6);
  EXPECT_EQ(gm.graph().outputs()[0].meta().tensor_meta[0].shape, flow::Shape({3, 10}));
}

TEST(FxReplacePattern, SwishBecomesSilu) {
  // x * sigmoid(x) twice, and a sigmoid product that is not a swish.
  const auto forward = [](const flow::TensorList& in) {
    const flow::Tensor a = in[0] * flow::sigmoid(in[0]);
    const flow::Tensor b = flow::exp(a) * flow::sigmoid(a);
    const flow::Tensor c = b * flow::sigmoid(in[0]);
    return flow::TensorList{c};
  };
  const flow::Tensor x = flow::randn({4, 5});
  GraphModule gm = fx::symbolic_trace(forward, {x});
  const flow::Tensor expected = forward({x})[0];
  const std::vector<fx::Match> matches = fx::replace_pattern(
      gm, [](const flow::TensorList& in) { return flow::TensorList{in[0] * flow::sigmoid(in[0])}; },
      [](const flow::TensorList& in) { return flow::TensorList{flow::silu(in[0])}; }, {flow::randn({1})});
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(matches[0].anchor, "mul");
  EXPECT_EQ(count_ops(gm, "silu"), 1);
  gm.graph().lint();
  flow::testing::expect_close(gm(x)[0], expected, 1e-5, 1e-6);
}

TEST(FxReplacePattern, AddOfItselfBecomesMulByTwo) {
  const auto forward = [](const flow::TensorList& in) {
    const flow::Tensor h = flow::relu(in[0]);
    return flow::TensorList{flow::add(h, h) + flow::add(in[0], in[1])};
  };
  const flow::Tensor x = flow::randn({3, 3});
  const flow::Tensor y = flow::randn({3, 3});
  GraphModule gm = fx::symbolic_trace(forward, {x, y});
  const std::vector<fx::Match> matches = fx::replace_pattern(
      gm, [](const flow::TensorList& in) { return flow::TensorList{flow::add(in[0], in[0])}; },
      [](const flow::TensorList& in) { return flow::TensorList{in[0] * 2.0}; }, {flow::randn({1})});
  // add(x, y) has two different arguments: only add(h, h) matches.
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(count_ops(gm, "mul_scalar"), 1);
  EXPECT_EQ(count_ops(gm, "add"), 2);
  flow::testing::expect_close(gm(x, y)[0], forward({x, y})[0], 1e-5, 1e-6);
}

TEST(FxReplacePattern, InternalNodeReadElsewhereIsNotMatched) {
  const auto forward = [](const flow::TensorList& in) {
    const flow::Tensor s = flow::sigmoid(in[0]);
    return flow::TensorList{in[0] * s + s};
  };
  GraphModule gm = fx::symbolic_trace(forward, {flow::randn({4})});
  const auto matches = fx::replace_pattern(
      gm, [](const flow::TensorList& in) { return flow::TensorList{in[0] * flow::sigmoid(in[0])}; },
      [](const flow::TensorList& in) { return flow::TensorList{flow::silu(in[0])}; }, {flow::randn({1})});
  EXPECT_TRUE(matches.empty());
}

TEST(FxConvBnFuse, EqualsTheUnfusedModuleInEvalMode) {
  auto model = test_models::resnet();
  test_models::warm_up_batch_norm(*model, {4, 1, 28, 28});
  const flow::Tensor x = flow::randn({2, 1, 28, 28});
  GraphModule gm = fx::symbolic_trace(*model, {x});
  const int batch_norms = count_ops(gm, "batch_norm_eval");
  ASSERT_EQ(batch_norms, 6);
  const std::vector<std::string> fused = fx_example::fuse_conv_bn(gm);
  EXPECT_EQ(static_cast<int>(fused.size()), batch_norms);
  EXPECT_EQ(count_ops(gm, "batch_norm_eval"), 0);
  flow::testing::expect_close(gm(x)[0], model->forward(x), 1e-5, 1e-5);
}

TEST(FxConvBnFuse, ConvOutputReadElsewhereIsNotFused) {
  struct SharedConvOutput : flow::nn::Module {
    SharedConvOutput() {
      conv = register_module("conv", std::make_shared<flow::nn::Conv2d>(flow::nn::Conv2dOptions(1, 4, 3).padding(1)));
      bn = register_module("bn", std::make_shared<flow::nn::BatchNorm2d>(4));
    }
    flow::Tensor forward(const flow::Tensor& x) override {
      const flow::Tensor y = (*conv)(x);
      return (*bn)(y) + y;
    }
    std::shared_ptr<flow::nn::Conv2d> conv;
    std::shared_ptr<flow::nn::BatchNorm2d> bn;
  };
  auto model = std::make_shared<SharedConvOutput>();
  test_models::warm_up_batch_norm(*model, {4, 1, 8, 8});
  const flow::Tensor x = flow::randn({2, 1, 8, 8});
  GraphModule gm = fx::symbolic_trace(*model, {x});
  EXPECT_TRUE(fx_example::fuse_conv_bn(gm).empty());
  EXPECT_EQ(count_ops(gm, "batch_norm_eval"), 1);
  flow::testing::expect_close(gm(x)[0], model->forward(x), 1e-5, 1e-6);
}

TEST(FxGraphPass, UserPassRunsInsideGraphCompile) {
  auto model = test_models::mlp();
  test_graphs::PredictGraph graph(model);
  int runs = 0;
  graph.config().add_pass("relu_to_gelu", fx::graph_pass([&runs](fx::Graph& g) {
    ++runs;
    for (const Node& node : g.nodes()) {
      if (node.op() != Opcode::kCallFunction || node.target() != "relu") continue;
      auto guard = g.inserting_after(node);
      const Node gelu = g.create_node("gelu", node.args(), flow::Attrs().set("approximate", "none"));
      node.replace_all_uses_with(gelu);
      g.erase_node(node);
    }
  }));
  const flow::Tensor x = flow::randn({3, 1, 28, 28});
  flow::testing::expect_close(graph(x)[0], mlp_with_gelu(*model, x), 1e-5, 1e-6);
  EXPECT_EQ(runs, 1);
  const flow::graph::ExplainReport report = graph.explain();
  ASSERT_FALSE(report.plans[0].log.passes.empty());
  const flow::graph::PassRecord& record = report.plans[0].log.passes[0];
  EXPECT_EQ(record.pass, "relu_to_gelu");
  EXPECT_EQ(record.removed, (std::vector<std::string>{"model.2.relu", "model.4.relu"}));
  EXPECT_EQ(record.added.size(), 2u);
  EXPECT_THROW_MSG(graph.config().add_pass("", fx::graph_pass([](fx::Graph&) {})), "[graph.add_pass]");
}
