// oneflow_lite's precision of an AMP export's bfloat16 products (oneflow_lite/bfloat16_products.h):
// the per-op decision from the CPU's bfloat16 hardware, the choice from LoadOptions and
// FLOW_LITE_BFLOAT16, and bfloat16 exports loaded with the products kept, widened to float32 and
// chosen per op, each agreeing with the float32 export within bfloat16's rounding; and the AMP
// export folds its batch norms into the convolutions as the float32 one does.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/graphs.h"
#include "common/models.h"
#include "common/scratch_dir.h"
#include "core/flow.h"
#include "graph/export.h"
#include "oneflow_lite/bfloat16_products.h"
#include "oneflow_lite/model.h"

namespace fs = std::filesystem;
using flow::Tensor;
using flow::lite::Bfloat16Hardware;
using flow::lite::Bfloat16Products;
using flow::lite::LoadOptions;
using flow::lite::Model;

namespace {

// A bfloat16 product with bfloat16 inputs of these shapes.
flow::lite::Bfloat16Product product(const std::string& op, const flow::Shape& x, const flow::Shape& weight, flow::Attrs attrs = {}) {
  const flow::TensorMeta x_meta{x, flow::kBFloat16, flow::kCPU}, weight_meta{weight, flow::kBFloat16, flow::kCPU};
  return {op, {x_meta, weight_meta}, std::move(attrs)};
}

flow::lite::Bfloat16Product conv(const flow::Shape& x, const flow::Shape& weight, int64_t stride = 1, int64_t groups = 1,
                                 int64_t padding = 1) {
  using Pair = std::vector<int64_t>;
  flow::Attrs attrs;
  attrs.set("stride", Pair{stride, stride}).set("padding", Pair{padding, padding}).set("dilation", Pair{1, 1}).set("groups", groups);
  return product("conv2d", x, weight, std::move(attrs));
}

TEST(Bfloat16Decision, ConvolutionsPayOffWithMatrixTilesOrOnLargeShapesOffTheLayoutPass) {
  const Bfloat16Hardware none{}, zen4{true, false}, sapphire_rapids{true, true};
  const auto pays_off = [](const flow::lite::Bfloat16Product& product, Bfloat16Hardware hardware) {
    return flow::lite::bfloat16_pays_off(product, hardware, false);
  };
  const auto resnet_3x3 = conv({1, 64, 56, 56}, {64, 64, 3, 3});
  EXPECT_FALSE(pays_off(resnet_3x3, none));
  EXPECT_TRUE(pays_off(resnet_3x3, zen4));
  EXPECT_TRUE(pays_off(conv({1, 256, 14, 14}, {256, 256, 3, 3}), zen4));
  EXPECT_TRUE(pays_off(conv({1, 1024, 14, 14}, {256, 1024, 1, 1}), zen4)) << "a wide 1x1";
  EXPECT_FALSE(pays_off(conv({1, 512, 7, 7}, {512, 512, 3, 3}), zen4)) << "7x7 pixels";
  EXPECT_FALSE(pays_off(conv({1, 64, 56, 56}, {128, 64, 1, 1}, 2), zen4)) << "64 input channels, 1x1";
  EXPECT_FALSE(pays_off(conv({1, 256, 56, 56}, {64, 256, 1, 1}), zen4)) << "64 output channels, 1x1";
  EXPECT_FALSE(pays_off(conv({1, 96, 56, 56}, {96, 1, 3, 3}, 1, 96), zen4)) << "depthwise";
  EXPECT_FALSE(pays_off(conv({1, 8, 28, 28}, {16, 8, 3, 3}), zen4)) << "the test nets' few channels";
  EXPECT_FALSE(pays_off(conv({1, 3, 224, 224}, {64, 3, 7, 7}, 2), zen4)) << "a stem on 3 channels";
  for (const auto& shapes : {conv({1, 8, 28, 28}, {16, 8, 3, 3}), conv({1, 96, 56, 56}, {96, 1, 3, 3}, 1, 96)}) {
    EXPECT_TRUE(pays_off(shapes, sapphire_rapids)) << "AMX";
  }
}

TEST(Bfloat16Decision, EveryConvolutionPaysOffOnTheLayoutPassWithDotProducts) {
  const Bfloat16Hardware none{}, zen4{true, false};
  for (const auto& shapes : {conv({1, 64, 56, 56}, {64, 64, 3, 3}), conv({1, 512, 7, 7}, {512, 512, 3, 3}),
                             conv({1, 96, 56, 56}, {96, 1, 3, 3}, 1, 96), conv({1, 3, 224, 224}, {64, 3, 7, 7}, 2),
                             conv({64, 1, 28, 28}, {32, 1, 3, 3}, 1, 1, 0)}) {
    EXPECT_TRUE(flow::lite::bfloat16_pays_off(shapes, zen4, true));
    EXPECT_FALSE(flow::lite::bfloat16_pays_off(shapes, none, true));
  }
}

TEST(Bfloat16Decision, MatmulsPayOffWithDotProductsAboveAFewWeights) {
  using flow::lite::kMinBfloat16ProductWeights;
  const Bfloat16Hardware none{}, zen4{true, false}, sapphire_rapids{true, true};
  const auto bfloat16_pays_off = [](const flow::lite::Bfloat16Product& product, Bfloat16Hardware hardware) {
    return flow::lite::bfloat16_pays_off(product, hardware, true) && flow::lite::bfloat16_pays_off(product, hardware, false);
  };
  for (const char* op : {"linear", "fused_linear", "matmul"}) {
    EXPECT_FALSE(bfloat16_pays_off(product(op, {1, 784}, {512, 784}), none)) << op;
    EXPECT_TRUE(bfloat16_pays_off(product(op, {1, 784}, {512, 784}), zen4)) << op;
    EXPECT_TRUE(bfloat16_pays_off(product(op, {1, 128}, {kMinBfloat16ProductWeights / 128, 128}), zen4)) << op;
    EXPECT_FALSE(bfloat16_pays_off(product(op, {64, 16}, {10, 16}), sapphire_rapids)) << op << ": too small";
  }
  EXPECT_TRUE(bfloat16_pays_off(product("relu", {4}, {4}), none)) << "not a product: kept as exported";
}

TEST(Bfloat16Decision, TheEnvironmentDecidesOnlyWhatTheOptionLeavesToIt) {
  using flow::lite::bfloat16_choice;
  EXPECT_EQ(bfloat16_choice(Bfloat16Products::kAuto, nullptr), Bfloat16Products::kAuto);
  EXPECT_EQ(bfloat16_choice(Bfloat16Products::kAuto, "auto"), Bfloat16Products::kAuto);
  EXPECT_EQ(bfloat16_choice(Bfloat16Products::kAuto, "keep"), Bfloat16Products::kKeep);
  EXPECT_EQ(bfloat16_choice(Bfloat16Products::kAuto, "float32"), Bfloat16Products::kFloat32);
  EXPECT_EQ(bfloat16_choice(Bfloat16Products::kKeep, "float32"), Bfloat16Products::kKeep);
  EXPECT_EQ(bfloat16_choice(Bfloat16Products::kFloat32, "keep"), Bfloat16Products::kFloat32);
  try {
    bfloat16_choice(Bfloat16Products::kAuto, "fast");
    FAIL() << "a bad value is refused";
  } catch (const flow::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[oneflow_lite] FLOW_LITE_BFLOAT16 must be auto, keep or float32, got 'fast'"), std::string::npos)
        << e.what();
  }
}

// The CNN (two convolutions with biases and batch norms, a 400 -> 32 linear with ReLU, a 32 -> 10
// linear) and the ResNet-style net (six convolutions with batch norms, residual adds, a 16 -> 10
// linear), exported in float32 and with
// bfloat16 AMP from the same weights.
class Bfloat16ExportTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    flow::manual_seed(12);
    auto net = GetParam() == "cnn" ? test_models::cnn() : test_models::resnet();
    test_models::warm_up_batch_norm(*net, {8, 1, 28, 28});
    for (const bool amp : {false, true}) {
      test_graphs::PredictGraph graph(net);
      if (amp) graph.config().enable_amp();
      graph(flow::randn({2, 1, 28, 28}));
      flow::save(graph, dir(amp), flow::ExportOptions().input_names({"image"}).output_names({"out"}));
    }
    products_ = GetParam() == "cnn" ? 4 : 7;
  }

  std::string dir(bool amp) const { return (scratch_.path() / (amp ? "bf16" : "f32")).string(); }

  // The bfloat16 export's outputs at a few batch sizes are the float32 export's within bfloat16's
  // rounding, in bfloat16 as exported.
  void expect_like_float32(const Model& bfloat16) const {
    const auto float32 = Model::load(dir(false));
    for (int64_t batch : {1, 3, 65}) {
      const Tensor x = flow::randn({batch, 1, 28, 28});
      const Tensor out = bfloat16.run({x}).at(0);
      ASSERT_EQ(out.dtype(), flow::kBFloat16);
      const auto actual = out.to(flow::kFloat32).tolist<double>(), expected = float32->run({x}).at(0).tolist<double>();
      ASSERT_EQ(actual.size(), expected.size());
      double scale = 0;
      for (double value : expected) scale = std::max(scale, std::abs(value));
      for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 2e-2 * scale) << "batch " << batch << " at " << i;
    }
  }

  int64_t products_ = 0;  // convolutions and linears
  flow::testing::ScratchDir scratch_;
};

TEST_P(Bfloat16ExportTest, KeptInBfloat16) {
  const auto model = Model::load(dir(true), LoadOptions().bfloat16_products(Bfloat16Products::kKeep));
  EXPECT_EQ(model->float32_products(), 0);
  expect_like_float32(*model);
}

TEST_P(Bfloat16ExportTest, WidenedToFloat32RunOnTheBlockedLayoutsAsTheFloat32Export) {
  const auto widened = Model::load(dir(true), LoadOptions().bfloat16_products(Bfloat16Products::kFloat32));
  EXPECT_EQ(widened->float32_products(), products_);
  // At least as many: the AMP export's residual add and its ReLU are two steps, where the float32
  // export's fusion pass made one.
  EXPECT_GE(widened->blocked_steps(8), Model::load(dir(false))->blocked_steps(8))
      << "float32 convolutions, pooling and ReLU on oneDNN's layouts";
  expect_like_float32(*widened);
  const auto plain = Model::load(dir(true), LoadOptions().bfloat16_products(Bfloat16Products::kFloat32).blocked_layouts(false));
  expect_like_float32(*plain);
}

TEST_P(Bfloat16ExportTest, AutoWidensWhatThisCpuRunsSlowerInBfloat16) {
  const auto model = Model::load(dir(true));
  const Bfloat16Hardware cpu = flow::lite::cpu_bfloat16_hardware();
  const bool cnn = GetParam() == "cnn";
  // The convolutions (8 and 16 channels) without AVX512-BF16 (on the layout pass, which runs
  // them all in bfloat16 with it); the CNN's 400 -> 32 linear without AVX512-BF16; the last linear
  // (32 -> 10, 16 -> 10) is under kMinBfloat16ProductWeights.
  const int64_t linears = (cnn && !cpu.dot_products ? 1 : 0) + 1;
  EXPECT_EQ(model->float32_products(), (cpu.dot_products || cpu.matrix_tiles ? 0 : cnn ? 2 : 6) + linears);
  expect_like_float32(*model);
  // Off the layout pass, convolutions this small run in float32 without AMX.
  const auto plain = Model::load(dir(true), LoadOptions().blocked_layouts(false));
  EXPECT_EQ(plain->float32_products(), (cpu.matrix_tiles ? 0 : cnn ? 2 : 6) + linears);
  expect_like_float32(*plain);
}

TEST_P(Bfloat16ExportTest, TheEnvironmentForcesEitherWay) {
  ASSERT_EQ(setenv("FLOW_LITE_BFLOAT16", "float32", 1), 0);
  EXPECT_EQ(Model::load(dir(true))->float32_products(), products_);
  ASSERT_EQ(setenv("FLOW_LITE_BFLOAT16", "keep", 1), 0);
  EXPECT_EQ(Model::load(dir(true))->float32_products(), 0);
  EXPECT_EQ(Model::load(dir(true), LoadOptions().bfloat16_products(Bfloat16Products::kFloat32))->float32_products(), products_)
      << "the option outranks the environment";
  ASSERT_EQ(setenv("FLOW_LITE_BFLOAT16", "sometimes", 1), 0);
  EXPECT_THROW(Model::load(dir(true)), flow::Error);
  unsetenv("FLOW_LITE_BFLOAT16");
}

// Conv + batch-norm folding sees through AMP's casts: neither export keeps a batch norm.
TEST_P(Bfloat16ExportTest, BatchNormsAreFoldedAsInTheFloat32Export) {
  for (const bool amp : {false, true}) {
    std::ifstream text(fs::path(dir(amp)) / "model.pbtxt");
    std::stringstream job;
    job << text.rdbuf();
    EXPECT_EQ(job.str().find("op: \"batch_norm_eval\""), std::string::npos) << (amp ? "bfloat16" : "float32");
    EXPECT_NE(job.str().find("conv2d"), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(Nets, Bfloat16ExportTest, ::testing::Values("cnn", "resnet"));

}  // namespace
