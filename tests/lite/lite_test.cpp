// Deploy export (flow::save(graph, dir)) and oneflow_lite: outputs equal the Graph's for the MLP,
// CNN and ResNet-style nets, dynamic batch, training graphs export their forward, every load
// error, input checks, concurrent runs and the C API.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <thread>

#include "common/graphs.h"
#include "common/models.h"
#include "common/scratch_dir.h"
#include "common/test_util.h"
#include "core/autocast.h"
#include "core/grad_mode.h"
#include "core/kernels/cpu/dnnl_util.h"
#include "core/serialization.h"
#include "graph/export.h"
#include "oneflow_lite/c_api.h"
#include "oneflow_lite/model.h"

namespace nn = flow::nn;
namespace fs = std::filesystem;
using flow::Tensor;
using flow::TensorList;
using EvalGraph = test_graphs::PredictGraph;
using test_graphs::TrainGraph;

namespace {

// A fresh directory under the system temp dir, removed with the fixture.
class LiteTest : public ::testing::Test {
 protected:
  std::string dir(const std::string& sub = "model") const { return (scratch_ / sub).string(); }
  flow::testing::ScratchDir scratch_;
};

void expect_close(const Tensor& actual, const Tensor& expected, double rtol = 1e-5) {
  ASSERT_EQ(actual.shape(), expected.shape());
  const auto a = actual.tolist<double>(), e = expected.tolist<double>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], e[i], rtol * std::max(1.0, std::abs(e[i]))) << "at " << i;
}

// Exports an eval graph of net (run once at `shape`) and checks lite against the graph at that
// shape.
std::shared_ptr<const flow::lite::Model> export_and_compare(const std::shared_ptr<nn::Module>& net, const flow::Shape& shape,
                                                           const std::string& dir) {
  EvalGraph graph(net);
  const Tensor x = flow::randn(shape);
  const Tensor expected = graph(x).at(0);
  flow::save(graph, dir, flow::ExportOptions().input_names({"image"}).output_names({"logits"}));
  auto model = flow::lite::Model::load(dir);
  expect_close(model->run({x}).at(0), expected);
  return model;
}

TEST_F(LiteTest, MlpMatchesGraphAndRunsAnyBatch) {
  flow::manual_seed(0);
  auto net = test_models::mlp();
  auto model = export_and_compare(net, {8, 1, 28, 28}, dir());
  EXPECT_TRUE(model->dynamic_batch());
  EXPECT_EQ(model->exported_batch(), 8);
  ASSERT_EQ(model->inputs().size(), 1u);
  EXPECT_EQ(model->inputs()[0].name, "image");
  EXPECT_EQ(model->inputs()[0].shape, (std::vector<int64_t>{-1, 1, 28, 28}));
  EXPECT_EQ(model->outputs()[0].name, "logits");
  EXPECT_EQ(model->outputs()[0].shape, (std::vector<int64_t>{-1, 10}));
  // The linears' values live in the layout pass's arena where their products run on packed weights
  // (2-32 rows, 2-64 on several threads; any number of rows with AVX-512), else in the plan.
  const bool packed_at_65 = flow::cpu::dnnl_util::has_avx512_core();
  EXPECT_EQ(model->planned_bytes(65) > 0, !packed_at_65);
  net->eval();
  for (int64_t batch : {1, 3, 65}) {
    const Tensor x = flow::randn({batch, 1, 28, 28});
    expect_close(model->run({x}).at(0), net->forward(x));
  }
  EXPECT_GT(model->run_bytes(65), model->run_bytes(1));
}

TEST_F(LiteTest, CnnWithBatchNormMatchesGraph) {
  flow::manual_seed(1);
  auto net = test_models::cnn();
  test_models::warm_up_batch_norm(*net, {16, 1, 28, 28});
  auto model = export_and_compare(net, {4, 1, 28, 28}, dir());
  // Batch norm was folded into the convs at export: no batch-norm node is left.
  flow::graph::proto::ExportedModel exported;
  std::ifstream file(fs::path(dir()) / "model.pb", std::ios::binary);
  ASSERT_TRUE(exported.ParseFromIstream(&file));
  for (const auto& node : exported.job().nodes()) EXPECT_EQ(node.op().find("batch_norm"), std::string::npos) << node.name();
  const Tensor x = flow::randn({2, 1, 28, 28});
  expect_close(model->run({x}).at(0), net->forward(x));
}

TEST_F(LiteTest, ResnetStyleNetMatchesGraph) {
  flow::manual_seed(2);
  auto net = test_models::resnet();
  test_models::warm_up_batch_norm(*net, {8, 1, 28, 28});
  auto model = export_and_compare(net, {4, 1, 28, 28}, dir());
  const Tensor x = flow::randn({1, 1, 28, 28});
  expect_close(model->run({x}).at(0), net->forward(x));
}

TEST_F(LiteTest, MixedPrecisionGraphExportsBFloat16WeightsAndRunsThem) {
  flow::manual_seed(4);
  auto net = test_models::cnn();
  test_models::warm_up_batch_norm(*net, {16, 1, 28, 28});
  EvalGraph graph(net);
  graph.config().enable_amp();
  const Tensor x = flow::randn({4, 1, 28, 28});
  Tensor eager;
  {
    flow::autograd::NoGradGuard no_grad;
    const flow::autocast amp;
    net->eval();
    eager = net->forward(x);
  }
  const Tensor expected = graph(x).at(0);
  EXPECT_EQ(expected.dtype(), flow::kBFloat16);  // the last linear runs in bfloat16
  expect_close(expected.to(flow::kFloat32), eager.to(flow::kFloat32), 2e-2);
  flow::save(graph, dir());
  // The casts of the frozen weights were folded at export: the products' weights are bfloat16.
  const flow::StateDict weights = flow::load((fs::path(dir()) / "weights.safetensors").string());
  int bfloat16_weights = 0;
  for (const auto& [name, t] : weights) bfloat16_weights += t.dtype() == flow::kBFloat16 ? 1 : 0;
  EXPECT_GE(bfloat16_weights, 4) << "conv and linear weights";
  auto model = flow::lite::Model::load(dir());
  const Tensor lite = model->run({x}).at(0);
  EXPECT_EQ(lite.dtype(), flow::kBFloat16);
  expect_close(lite.to(flow::kFloat32), expected.to(flow::kFloat32), 1e-2);
}

TEST_F(LiteTest, WeightsAreFrozenAtExport) {
  flow::manual_seed(3);
  auto net = test_models::mlp();
  EvalGraph graph(net);
  const Tensor x = flow::randn({2, 1, 28, 28});
  const Tensor before = graph(x).at(0);
  flow::save(graph, dir());
  {
    flow::autograd::NoGradGuard no_grad;
    for (auto& p : net->parameters()) p.fill_(0.5);
  }
  auto model = flow::lite::Model::load(dir());
  EXPECT_EQ(model->inputs()[0].name, "input_0");
  EXPECT_EQ(model->outputs()[0].name, "output_0");
  expect_close(model->run({x}).at(0), before);
}

TEST_F(LiteTest, TrainingGraphExportsItsForwardInEvalMode) {
  flow::manual_seed(4);
  auto net = test_models::cnn();
  auto opt = std::make_shared<flow::optim::SGD>(net->parameters(), flow::optim::SGDOptions(0.1));
  TrainGraph graph(net, opt);
  const Tensor x = flow::randn({4, 1, 28, 28});
  const Tensor y = flow::randint(0, 10, {4});
  graph(x, y);
  flow::save(graph, dir());
  EXPECT_TRUE(net->is_training()) << "export must leave the modules' mode alone";
  auto model = flow::lite::Model::load(dir());
  ASSERT_EQ(model->inputs().size(), 2u);
  net->eval();
  nn::CrossEntropyLoss loss_fn;
  const Tensor expected = loss_fn(net->forward(x), y);
  expect_close(model->run({x, y}).at(0), expected);
  // Only the forward was exported: no optimizer update, no gradient op.
  flow::graph::proto::ExportedModel exported;
  std::ifstream file(fs::path(dir()) / "model.pb", std::ios::binary);
  ASSERT_TRUE(exported.ParseFromIstream(&file));
  EXPECT_FALSE(exported.job().training());
  for (const auto& node : exported.job().nodes()) {
    EXPECT_EQ(node.op().find("_grad"), std::string::npos) << node.name();
    EXPECT_NE(node.op(), "fused_elementwise_inplace");
    EXPECT_NE(node.op(), "variable");
  }
}

TEST_F(LiteTest, MemoryLimitRefusesARunBeforeAllocatingIt) {
  auto net = test_models::mlp();
  EvalGraph graph(net);
  graph(flow::randn({2, 1, 28, 28}));
  flow::save(graph, dir());
  const auto model = flow::lite::Model::load(dir());
  const int64_t at_2 = model->run_bytes(2);
  EXPECT_GE(at_2, model->planned_bytes(2));
  EXPECT_GT(model->run_bytes(64), at_2);
  // The trial run at load needs the inputs too: (2,1,28,28) float32.
  const int64_t trial = at_2 + 2 * 28 * 28 * 4;
  EXPECT_THROW_MSG(flow::lite::Model::load(dir(), flow::lite::LoadOptions().memory_limit(trial - 1)),
                   "the trial run at load (batch 2) needs " + std::to_string(trial) + " bytes of memory, more than the limit of " +
                       std::to_string(trial - 1) + " bytes");
  const auto limited = flow::lite::Model::load(dir(), flow::lite::LoadOptions().memory_limit(trial));
  EXPECT_EQ(limited->run({flow::randn({2, 1, 28, 28})}).at(0).size(0), 2);
  EXPECT_THROW_MSG(limited->run({flow::randn({64, 1, 28, 28})}), "a run at batch 64 needs");
  EXPECT_THROW_MSG(flow::lite::Model::load(dir(), flow::lite::LoadOptions().memory_limit(-1)), "memory_limit must be >= 0, got -1");
}

TEST_F(LiteTest, BatchBakedIntoTheGraphGivesAStaticExport) {
  struct Flattened : nn::Graph {
    TensorList build(const TensorList& in) override { return {flow::relu(in[0].reshape({-1}))}; }
  } graph;
  const Tensor x = flow::randn({3, 4});
  graph(x);
  flow::save(graph, dir());
  auto model = flow::lite::Model::load(dir());
  EXPECT_FALSE(model->dynamic_batch());
  EXPECT_EQ(model->inputs()[0].shape, (std::vector<int64_t>{3, 4}));
  expect_close(model->run({x}).at(0), flow::relu(x.reshape({-1})));
  EXPECT_THROW_MSG(model->run({flow::randn({2, 4})}), "input 'input_0' has shape (2, 4), expected (3, 4)");
}

TEST_F(LiteTest, ExportBeforeTheFirstCallIsAnError) {
  EvalGraph graph(test_models::mlp());
  EXPECT_THROW_MSG(flow::save(graph, dir()), "has not run yet");
}

TEST_F(LiteTest, RunChecksItsInputs) {
  flow::manual_seed(5);
  auto model = export_and_compare(test_models::mlp(), {2, 1, 28, 28}, dir());
  EXPECT_THROW_MSG(model->run({}), "takes 1 inputs, got 0");
  EXPECT_THROW_MSG(model->run({flow::zeros({2, 1, 28, 28}, flow::kFloat64)}), "input 'image' must be float32, got float64");
  EXPECT_THROW_MSG(model->run({flow::zeros({2, 1, 28, 27})}), "input 'image' has shape (2, 1, 28, 27), expected (-1, 1, 28, 28)");
  // Still serving after bad calls; non-contiguous inputs are fine.
  const Tensor x = flow::randn({1, 28, 28, 2}).permute({3, 0, 1, 2});
  EXPECT_EQ(model->run({x}).at(0).shape(), flow::Shape({2, 10}));
}

class LiteLoadErrors : public LiteTest {
 protected:
  void SetUp() override {
    LiteTest::SetUp();
    flow::manual_seed(6);
    EvalGraph graph(test_models::mlp());
    graph(flow::randn({2, 1, 28, 28}));
    flow::save(graph, dir());
    std::ifstream file(fs::path(dir()) / "model.pb", std::ios::binary);
    ASSERT_TRUE(exported_.ParseFromIstream(&file));
  }
  void write_model(const flow::graph::proto::ExportedModel& model) {
    std::ofstream file(fs::path(dir()) / "model.pb", std::ios::binary | std::ios::trunc);
    ASSERT_TRUE(model.SerializeToOstream(&file));
  }
  std::string first_weight() const {
    for (const auto& node : exported_.job().nodes()) {
      if (node.op() == "constant") return node.name();
    }
    return "";
  }
  flow::graph::proto::ExportedModel exported_;
};

TEST_F(LiteLoadErrors, MissingDirectoryOrFiles) {
  EXPECT_THROW_MSG(flow::lite::Model::load(dir("nothing")), "missing model.pb");
  fs::remove(fs::path(dir()) / "weights.safetensors");
  EXPECT_THROW_MSG(flow::lite::Model::load(dir()), "missing weights.safetensors");
}

TEST_F(LiteLoadErrors, CorruptFiles) {
  std::ofstream(fs::path(dir()) / "weights.safetensors", std::ios::trunc) << "garbage";
  EXPECT_THROW_MSG(flow::lite::Model::load(dir()), "weights.safetensors");
  std::ofstream(fs::path(dir()) / "model.pb", std::ios::trunc) << "\xff\xff\xff garbage";
  EXPECT_THROW_MSG(flow::lite::Model::load(dir()), "model.pb is corrupt");
}

TEST_F(LiteLoadErrors, VersionMismatch) {
  auto model = exported_;
  model.set_format_version(99);
  write_model(model);
  EXPECT_THROW_MSG(flow::lite::Model::load(dir()), "export format version 99, this build reads versions 1 to 2");
  model = exported_;
  model.mutable_job()->set_version(7);
  write_model(model);
  EXPECT_THROW_MSG(flow::lite::Model::load(dir()), "Job schema version 7");
}

TEST_F(LiteLoadErrors, SpecsThatDisagreeWithTheJob) {
  // run() checks given inputs against the specs and the kernels trust the Job: the two must agree.
  auto model = exported_;
  model.mutable_inputs(0)->add_shape(1);
  write_model(model);
  EXPECT_THROW_MSG(flow::lite::Model::load(dir()), "is (2, 1, 28, 28) float32 on cpu but the model's input 'input_0' is (-1, 1, 28, 28, 1) float32");
  model = exported_;
  model.mutable_outputs(0)->set_dtype("float64");
  write_model(model);
  EXPECT_THROW_MSG(flow::lite::Model::load(dir()), "but the model's output 'output_0' is (-1, 10) float64");
  model = exported_;
  model.mutable_inputs(0)->set_shape(2, -1);
  write_model(model);
  EXPECT_THROW_MSG(flow::lite::Model::load(dir()), "'input_0' has shape (-1, 1, -1, 28): -1 is only dim 0 of a dynamic-batch model");
  model = exported_;
  model.set_dynamic_batch(false);
  write_model(model);
  EXPECT_THROW_MSG(flow::lite::Model::load(dir()), "'input_0' has shape (-1, 1, 28, 28): -1 is only dim 0 of a dynamic-batch model");
}

TEST_F(LiteLoadErrors, ValuesOnTheMetaDevice) {
  // Meta tensors hold no data: a model whose values live there cannot serve anything.
  auto model = exported_;
  for (auto& node : *model.mutable_job()->mutable_nodes()) {
    if (node.op() == "input") node.mutable_outputs(0)->set_device("meta");
  }
  write_model(model);
  EXPECT_THROW_MSG(flow::lite::Model::load(dir()), "makes a value on the meta device, which holds no data");
}

TEST_F(LiteLoadErrors, UnknownOp) {
  auto model = exported_;
  for (auto& node : *model.mutable_job()->mutable_nodes()) {
    if (node.op() == "matmul" || node.op() == "linear") {
      node.set_op("frobnicate");
      break;
    }
  }
  write_model(model);
  EXPECT_THROW_MSG(flow::lite::Model::load(dir()), "unknown op 'frobnicate'");
}

TEST_F(LiteLoadErrors, MissingOrMisSizedWeight) {
  const std::string weight = first_weight();
  ASSERT_FALSE(weight.empty());
  const std::string path = (fs::path(dir()) / "weights.safetensors").string();
  flow::StateDict weights = flow::load(path);
  const Tensor original = weights.at(weight);
  weights.erase(weight);
  flow::save(weights, path);
  EXPECT_THROW_MSG(flow::lite::Model::load(dir()), "missing weight '" + weight + "'");
  weights.insert(weight, flow::zeros({3}));
  flow::save(weights, path);
  EXPECT_THROW_MSG(flow::lite::Model::load(dir()), "weight '" + weight + "' is (3,) float32 but the model expects");
}

TEST_F(LiteTest, ConcurrentRunsDoNotShareMemory) {
  flow::manual_seed(7);
  auto net = test_models::cnn();
  auto model = export_and_compare(net, {2, 1, 28, 28}, dir());
  net->eval();
  std::vector<Tensor> inputs, expected;
  for (int t = 0; t < 4; ++t) {
    inputs.push_back(flow::randn({2, 1, 28, 28}));
    expected.push_back(net->forward(inputs.back()));
  }
  std::vector<Tensor> results(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) results[t] = model->run({inputs[t]}).at(0);
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < 4; ++t) expect_close(results[t], expected[t]);
}

TEST_F(LiteTest, CApiRunsTheModel) {
  flow::manual_seed(8);
  auto model = export_and_compare(test_models::mlp(), {2, 1, 28, 28}, dir());
  flow_lite_model* handle = nullptr;
  EXPECT_EQ(flow_lite_model_load(dir("absent").c_str(), &handle), -1);
  EXPECT_NE(std::string(flow_lite_last_error()).find("missing model.pb"), std::string::npos);
  ASSERT_EQ(flow_lite_model_load(dir().c_str(), &handle), 0) << flow_lite_last_error();
  ASSERT_EQ(flow_lite_model_num_inputs(handle), 1u);
  const char *name = nullptr, *dtype = nullptr;
  int64_t ndim = 0;
  const int64_t* shape = nullptr;
  ASSERT_EQ(flow_lite_model_input(handle, 0, &name, &dtype, &ndim, &shape), 0);
  EXPECT_STREQ(name, "image");
  EXPECT_STREQ(dtype, "float32");
  ASSERT_EQ(ndim, 4);
  EXPECT_EQ(shape[0], -1);
  EXPECT_EQ(flow_lite_model_output(handle, 3, &name, &dtype, &ndim, &shape), -1);

  const Tensor x = flow::randn({3, 1, 28, 28});
  const int64_t dims[] = {3, 1, 28, 28};
  flow_lite_tensor input{"float32", 4, dims, x.data_ptr(), static_cast<size_t>(x.nbytes())};
  flow_lite_tensor* outputs = nullptr;
  size_t num_outputs = 0;
  ASSERT_EQ(flow_lite_model_run(handle, &input, 1, &outputs, &num_outputs), 0) << flow_lite_last_error();
  ASSERT_EQ(num_outputs, 1u);
  EXPECT_STREQ(outputs[0].dtype, "float32");
  ASSERT_EQ(outputs[0].ndim, 2);
  EXPECT_EQ(outputs[0].shape[0], 3);
  EXPECT_EQ(outputs[0].shape[1], 10);
  const Tensor expected = model->run({x}).at(0);
  const float* values = static_cast<const float*>(outputs[0].data);
  const auto reference = expected.tolist<float>();
  for (size_t i = 0; i < reference.size(); ++i) EXPECT_FLOAT_EQ(values[i], reference[i]);
  flow_lite_outputs_free(outputs, num_outputs);

  input.nbytes = 4;
  EXPECT_EQ(flow_lite_model_run(handle, &input, 1, &outputs, &num_outputs), -1);
  EXPECT_NE(std::string(flow_lite_last_error()).find("4 bytes for a tensor of"), std::string::npos);

  // Shapes whose element count wraps modulo 2^64, or that would need more memory than exists, are
  // refused by their byte count before anything is allocated or run.
  const auto refuses = [&](std::vector<int64_t> dims, size_t nbytes, const std::string& message) {
    flow_lite_tensor bad{"float32", static_cast<int64_t>(dims.size()), dims.data(), x.data_ptr(), nbytes};
    EXPECT_EQ(flow_lite_model_run(handle, &bad, 1, &outputs, &num_outputs), -1) << flow::Shape(dims);
    EXPECT_NE(std::string(flow_lite_last_error()).find(message), std::string::npos) << flow_lite_last_error();
  };
  refuses({(int64_t{1} << 61) + 1, 1, 28, 28}, 3136, "more bytes than int64 can count");
  refuses({int64_t{1} << 40, 1, 28, 28}, 3136, "3136 bytes for a tensor of shape (1099511627776,1,28,28) float32, which needs");
  refuses({-1, 1, 28, 28}, 3136, "negative dimension");
  flow_lite_model_free(handle);
}

// Damaged model.pb files are refused at load with the node named, never crash.
TEST_F(LiteLoadErrors, DamagedNodesAreRefusedAtLoad) {
  const auto refused = [&](const std::function<void(flow::graph::proto::Node&)>& damage, const std::string& kind,
                           const std::string& message) {
    auto model = exported_;
    std::string damaged;
    for (auto& node : *model.mutable_job()->mutable_nodes()) {
      const bool is_op = node.op() != "input" && node.op() != "constant" && node.op() != "output";
      if (node.op() == kind || (kind == "op" && is_op) || (kind == "op with attrs" && is_op && node.attrs_size() > 0)) {
        damage(node);
        damaged = node.name();
        break;
      }
    }
    ASSERT_FALSE(damaged.empty()) << kind;
    write_model(model);
    EXPECT_THROW_MSG(flow::lite::Model::load(dir()), "node '" + damaged + "'");
    EXPECT_THROW_MSG(flow::lite::Model::load(dir()), message);
  };
  refused([](auto& node) { node.mutable_attrs()->erase("index"); }, "input", "has no integer 'index' attribute");
  refused([](auto& node) { (*node.mutable_attrs())["index"].set_i(5); }, "output", "index 5 is out of range for 1 model outputs");
  refused([](auto& node) { node.mutable_outputs(0)->set_dtype("float33"); }, "input", "unknown dtype name 'float33'");
  refused([](auto& node) { node.mutable_outputs(0)->set_device("cuda:x"); }, "input", "invalid device string");
  refused([](auto& node) { node.clear_inputs(); }, "op", "expected 1 inputs, got 0");
  refused([](auto& node) { node.add_inputs(node.inputs(0)); node.add_inputs(node.inputs(0)); node.add_inputs(node.inputs(0)); }, "op",
          "expected 1 inputs, got 4");
  refused([](auto& node) { for (auto& [name, value] : *node.mutable_attrs()) value.set_s("garbage"); }, "op with attrs", "must be of type");
  refused([&](auto& node) { node.set_name(exported_.job().nodes(0).name()); }, "op", "a second node is named");
}

}  // namespace
