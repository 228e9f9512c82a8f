// The bfloat16 convolutions of an AMP export on oneflow_lite's layout pass (job/blocked_layout.h):
// with the casts around them, their ReLUs and the residual adds after them, they run on oneDNN's
// layouts where oneDNN has bfloat16 kernels, and give what the plain kernels give within
// bfloat16's rounding, NaN included; their results also reach ops that only the plain kernels run.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

#include "common/graphs.h"
#include "common/models.h"
#include "common/scratch_dir.h"
#include "core/flow.h"
#include "core/kernels/cpu/dnnl_util.h"
#include "core/profiler.h"
#include "nn/functional.h"
#include "graph/export.h"
#include "oneflow_lite/model.h"

namespace nn = flow::nn;
using flow::Tensor;
using flow::lite::Bfloat16Products;
using flow::lite::LoadOptions;
using flow::lite::Model;

namespace {

// Whether oneDNN convolves bfloat16 here with an optimized kernel (AVX512-BF16, AMX), as the
// layout pass requires of a bfloat16 convolution.
bool onednn_convolves_bfloat16() {
  if (!flow::cpu::dnnl_util::has_avx512_core()) return false;
  using dnnl::memory;
  const auto any = [](const memory::dims& dims, memory::data_type type) { return memory::desc(dims, type, memory::format_tag::any); };
  const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                             any({1, 16, 8, 8}, memory::data_type::bf16), any({16, 16, 3, 3}, memory::data_type::bf16),
                                             any({1, 16, 8, 8}, memory::data_type::f32), {1, 1}, {1, 1}, {1, 1});
  const dnnl::convolution_forward::primitive_desc pd(desc, dnnl::engine(dnnl::engine::kind::cpu, 0));
  return !flow::cpu::dnnl_util::is_reference_implementation(pd.impl_info_str());
}

// y + relu(y) of y = conv(relu(stem(x))): in an AMP export the ReLUs stay bfloat16 (the stem's is
// then its convolution's, on the float32 result), and the fusion pass makes y + relu(y) one
// bfloat16 fused_elementwise that only its plain kernel runs: y is rounded for it.
struct SharedConvolutionResult : nn::Module {
  SharedConvolutionResult() {
    stem = register_module("stem", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 16, 3).padding(1)));
    conv = register_module("conv", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(16, 16, 3).padding(1)));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor y = (*conv)(flow::relu((*stem)(x)));
    return flow::add(y, flow::relu(y));
  }
  std::shared_ptr<nn::Conv2d> stem, conv;
};

// MobileNetV2's inverted residual after a stem, in bfloat16 under AMP: 1x1 expansion, ReLU6,
// depthwise 3x3, ReLU6, 1x1 projection added to the block's input. The expansion and depthwise
// convolutions write bfloat16 (only a cast back to bfloat16 reads their ReLU6's result), the
// projection float32 for the sum.
struct AmpInvertedResidual : nn::Module {
  AmpInvertedResidual() {
    stem = register_module("stem", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 16, 3).padding(1)));
    expand = register_module("expand", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(16, 64, 1)));
    depthwise = register_module("depthwise", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(64, 64, 3).padding(1).groups(64)));
    project = register_module("project", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(64, 16, 1)));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = nn::functional::relu6((*stem)(x));
    return h + (*project)(nn::functional::relu6((*depthwise)(nn::functional::relu6((*expand)(h)))));
  }
  std::shared_ptr<nn::Conv2d> stem, expand, depthwise, project;
};

// A first layer the layout pass runs with its ReLU and 2x2 max pooling as one pass of flow's
// float32 kernel (1 input channel, stride 1, no padding), then a second convolution.
struct ShallowStem : nn::Module {
  ShallowStem() {
    stem = register_module("stem", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 16, 3)));
    conv = register_module("conv", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(16, 16, 3)));
  }
  Tensor forward(const Tensor& x) override { return flow::relu((*conv)(flow::max_pool2d(flow::relu((*stem)(x)), {2, 2}))); }
  std::shared_ptr<nn::Conv2d> stem, conv;
};

class Bfloat16ConvolutionTest : public ::testing::Test {
 protected:
  // Exports net's AMP inference Graph and loads it with its bfloat16 products kept, layout pass on
  // (blocked_) and off (plain_).
  void export_amp(const std::shared_ptr<nn::Module>& net) {
    test_graphs::PredictGraph graph(net);
    graph.config().enable_amp();
    graph(flow::randn({2, 1, 28, 28}));
    flow::save(graph, scratch_.path().string(), flow::ExportOptions().input_names({"image"}).output_names({"out"}));
    const auto keep = LoadOptions().bfloat16_products(Bfloat16Products::kKeep);
    blocked_ = Model::load(scratch_.path().string(), keep);
    plain_ = Model::load(scratch_.path().string(), LoadOptions(keep).blocked_layouts(false));
  }

  // Both loads agree on x within bfloat16's rounding (the blocked convolutions write float32, one
  // rounding fewer), NaN where the plain load has NaN.
  void expect_like_plain(const Tensor& x) const {
    const auto blocked = blocked_->run({x}).at(0).to(flow::kFloat32).tolist<double>();
    const auto plain = plain_->run({x}).at(0).to(flow::kFloat32).tolist<double>();
    ASSERT_EQ(blocked.size(), plain.size());
    double scale = 0;
    for (double value : plain) scale = std::isnan(value) ? scale : std::max(scale, std::abs(value));
    for (size_t i = 0; i < plain.size(); ++i) {
      if (std::isnan(plain[i])) {
        EXPECT_TRUE(std::isnan(blocked[i])) << "at " << i;
      } else {
        EXPECT_NEAR(blocked[i], plain[i], 2e-2 * scale) << "at " << i;
      }
    }
  }

  // How many steps of each op a run on x takes on blocked layouts and on plain kernels.
  std::map<std::string, std::pair<int, int>> steps_by_op(const Tensor& x) const {
    blocked_->run({x});  // the batch's program is made outside the profile
    flow::profiler::Profile profile;
    blocked_->run({x});
    profile.stop();
    std::map<std::string, std::pair<int, int>> steps;
    for (const auto& event : profile.events()) {
      auto& [on_blocked, on_plain] = steps[event.name];
      ++(event.category == "lite_blocked" ? on_blocked : on_plain);
    }
    return steps;
  }

  flow::testing::ScratchDir scratch_;
  std::shared_ptr<const Model> blocked_, plain_;
};

TEST_F(Bfloat16ConvolutionTest, ResnetRunsOnTheBlockedLayoutsWithItsCastsAndMatchesThePlainKernels) {
  if (!onednn_convolves_bfloat16()) GTEST_SKIP() << "oneDNN has no bfloat16 convolution kernel for this CPU";
  flow::manual_seed(21);
  auto resnet = test_models::resnet();
  test_models::warm_up_batch_norm(*resnet, {8, 1, 28, 28});
  export_amp(resnet);
  const auto steps = steps_by_op(flow::randn({3, 1, 28, 28}));
  EXPECT_EQ(steps.at("conv2d").second, 0) << "every convolution on the blocked layouts";
  EXPECT_GT(steps.at("conv2d").first, 0);
  // The casts between the convolutions; not the model input's, which no blocked step made, nor
  // the pooled features' (2-d) before the linear.
  EXPECT_GT(steps.at("copy").first, 0);
  EXPECT_EQ(steps.at("copy").second, 2);
  for (const char* op : {"relu", "add", "fused_elementwise"}) {
    if (steps.count(op)) {
      EXPECT_EQ(steps.at(op).second, 0) << op;
    }
  }
  for (int64_t batch : {1, 3, 8}) expect_like_plain(flow::randn({batch, 1, 28, 28}));
}

TEST_F(Bfloat16ConvolutionTest, NanReachesTheOutputThroughBfloat16ConvolutionsAndTheirRelus) {
  flow::manual_seed(22);
  auto resnet = test_models::resnet();
  test_models::warm_up_batch_norm(*resnet, {8, 1, 28, 28});
  export_amp(resnet);
  Tensor x = flow::randn({2, 1, 28, 28}).contiguous();
  x.data_ptr<float>()[784 + 14 * 28 + 14] = std::numeric_limits<float>::quiet_NaN();  // sample 1, centre
  expect_like_plain(x);
  const auto out = blocked_->run({x}).at(0).to(flow::kFloat32).tolist<double>();
  EXPECT_TRUE(std::isnan(out[10])) << "sample 1's logits";
  EXPECT_FALSE(std::isnan(out[0])) << "sample 0's logits";
}

TEST_F(Bfloat16ConvolutionTest, AResultThePlainKernelsReadTooIsRoundedForThem) {
  flow::manual_seed(23);
  export_amp(std::make_shared<SharedConvolutionResult>());
  if (onednn_convolves_bfloat16()) {
    const auto steps = steps_by_op(flow::randn({2, 1, 28, 28}));
    EXPECT_EQ(steps.at("conv2d").second, 0);
    EXPECT_EQ(steps.at("relu").first, 1);
    EXPECT_EQ(steps.at("fused_elementwise").second, 1);
  }
  for (int64_t batch : {1, 4}) expect_like_plain(flow::randn({batch, 1, 28, 28}));
}

TEST_F(Bfloat16ConvolutionTest, InvertedResidualsReluSixOnBfloat16ResultsKeepsNan) {
  flow::manual_seed(24);
  export_amp(std::make_shared<AmpInvertedResidual>());
  if (onednn_convolves_bfloat16()) {
    const auto steps = steps_by_op(flow::randn({2, 1, 28, 28}));
    EXPECT_EQ(steps.at("conv2d").second, 0);
    EXPECT_EQ(steps.at("clamp").second, 0);
    EXPECT_EQ(steps.at("copy").second, 1) << "the model input's cast alone";
  }
  for (int64_t batch : {1, 3}) expect_like_plain(flow::randn({batch, 1, 28, 28}));
  Tensor x = flow::randn({2, 1, 28, 28}).contiguous();
  x.data_ptr<float>()[784 + 14 * 28 + 14] = std::numeric_limits<float>::quiet_NaN();  // sample 1, centre
  x.data_ptr<float>()[3 * 28 + 3] = -std::numeric_limits<float>::infinity();  // sample 0
  expect_like_plain(x);  // NaN exactly where the plain kernels have it
  // The stem's one input channel: its bfloat16 convolution is correct only on finite inputs, so
  // this run takes the plain kernels throughout.
  if (onednn_convolves_bfloat16()) EXPECT_EQ(steps_by_op(x).at("conv2d").first, 0);
}

TEST_F(Bfloat16ConvolutionTest, AFirstLayerWithItsPoolingRunsInOnePassAsInTheGraph) {
  flow::manual_seed(25);
  auto net = std::make_shared<ShallowStem>();
  export_amp(net);
  const bool shallow_kernel = flow::cpu::dnnl_util::has_avx512_core() && onednn_convolves_bfloat16();
  if (shallow_kernel) {
    const auto steps = steps_by_op(flow::randn({2, 1, 28, 28}));
    EXPECT_EQ(steps.at("conv2d").second, 0);
    EXPECT_EQ(steps.at("max_pool2d_inference").second, 0);
    EXPECT_EQ(steps.at("copy").second, 0) << "the model input's cast is the pass's too";
  }
  for (int64_t batch : {1, 5}) expect_like_plain(flow::randn({batch, 1, 28, 28}));
  Tensor x = flow::randn({2, 1, 28, 28}).contiguous();
  x.data_ptr<float>()[784 + 14 * 28 + 14] = std::numeric_limits<float>::quiet_NaN();
  expect_like_plain(x);
  // The inference Graph with AMP freezes onto the same pass: the export's results.
  test_graphs::PredictGraph graph(net);
  graph.config().enable_amp();
  for (int64_t batch : {1, 5}) {
    const Tensor input = flow::randn({batch, 1, 28, 28});
    const auto frozen = graph(input).at(0).to(flow::kFloat32).tolist<double>();
    const auto lite = blocked_->run({input}).at(0).to(flow::kFloat32).tolist<double>();
    ASSERT_EQ(frozen.size(), lite.size());
    for (size_t i = 0; i < lite.size(); ++i) EXPECT_NEAR(frozen[i], lite[i], 1e-6 * std::max(1.0, std::abs(lite[i]))) << "at " << i;
  }
  if (shallow_kernel) {
    EXPECT_GT(graph.frozen_blocked_steps(), 0);
  }
}

}  // namespace
