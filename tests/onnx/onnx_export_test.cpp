// ONNX export: the MLP, the CNN (batch norm folded) and the ResNet-style net pass onnx.checker
// (full check) and, evaluated by tests/onnx/check_onnx.py, give the Graph's outputs; dynamic batch
// is a symbolic dim; the CLI converts an export directory and checks its command line; unsupported ops and bad files fail
// clearly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/command_line.h"
#include "common/graphs.h"
#include "common/models.h"
#include "common/scratch_dir.h"
#include "models/decoder_export.h"
#include "models/gpt2.h"
#include "models/vision/mobilenet_v2.h"
#include "models/vision/resnet.h"
#include "common/test_util.h"
#include "core/ops/reduce.h"
#include "graph/onnx/onnx_export.h"
#include "nn/functional.h"

namespace nn = flow::nn;
namespace fs = std::filesystem;
using flow::Tensor;
using flow::TensorList;
using EvalGraph = test_graphs::PredictGraph;
using test_cli::run_command;

namespace {

// A graph around a plain function of its one input.
struct FunctionGraph : nn::Graph {
  explicit FunctionGraph(std::function<Tensor(const Tensor&)> fn) : fn(std::move(fn)) {}
  TensorList build(const TensorList& in) override { return {fn(in[0])}; }
  std::function<Tensor(const Tensor&)> fn;
};

std::string dims_arg(const Tensor& t) {
  std::string text;
  for (int64_t d = 0; d < t.dim(); ++d) text += (d ? "," : "") + std::to_string(t.size(d));
  return text;
}

class OnnxExportTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (scratch_ / name).string(); }

  std::string write_bin(const Tensor& t, const std::string& name) const {
    const Tensor host = t.contiguous();
    std::ofstream file(path(name), std::ios::binary);
    file.write(static_cast<const char*>(host.data_ptr()), host.nbytes());
    return path(name);
  }

  // Runs check_onnx.py on the model: onnx.checker (full check) and strict shape inference, and
  // with an input, the model's output at x against `expected` (1e-4).
  std::string python_check(const std::string& model, const Tensor& x = {}, const Tensor& expected = {}) const {
    return python_check(model, x.defined() ? TensorList{x} : TensorList{}, expected);
  }
  // The same with several inputs, in the model's order; `expected` is its first output.
  std::string python_check(const std::string& model, const TensorList& inputs, const Tensor& expected) const {
    std::string command = std::string(FLOW_ONNX_PYTHON) + " " + FLOW_ONNX_CHECK_SCRIPT + " " + model;
    for (size_t i = 0; i < inputs.size(); ++i) {
      command += " --input " + write_bin(inputs[i], "x" + std::to_string(i) + ".bin") + " \"" + dims_arg(inputs[i]) + "\"";
    }
    if (!inputs.empty()) command += " --expected " + write_bin(expected, "y.bin") + " " + dims_arg(expected);
    const auto [status, output] = run_command(command);
    EXPECT_EQ(status, 0) << command << "\n" << output;
    return output;
  }

  ::onnx::ModelProto read_model(const std::string& file) const {
    ::onnx::ModelProto model;
    std::ifstream in(file, std::ios::binary);
    EXPECT_TRUE(model.ParseFromIstream(&in)) << file;
    return model;
  }

  flow::testing::ScratchDir scratch_;
};

int count_nodes(const ::onnx::ModelProto& model, const std::string& op_type) {
  int count = 0;
  for (const auto& node : model.graph().node()) count += node.op_type() == op_type;
  return count;
}

std::string dim_str(const ::onnx::ValueInfoProto& info) {
  std::string text;
  for (const auto& dim : info.type().tensor_type().shape().dim()) {
    text += (text.empty() ? "" : ",") + (dim.has_dim_param() ? dim.dim_param() : std::to_string(dim.dim_value()));
  }
  return text;
}

TEST_F(OnnxExportTest, PythonWithOnnxIsAvailable) {
  const auto [status, output] = run_command(std::string(FLOW_ONNX_PYTHON) + " -c 'import onnx, numpy; print(onnx.__version__)'");
  ASSERT_EQ(status, 0) << "the ONNX checks need python3 with onnx and numpy (scripts/setup.sh installs python3-onnx): " << output;
}

TEST_F(OnnxExportTest, MlpPassesCheckerAndMatchesGraphAtAnyBatch) {
  flow::manual_seed(0);
  auto net = test_models::mlp();
  EvalGraph graph(net);
  const Tensor x = flow::randn({8, 1, 28, 28});
  const Tensor expected = graph(x).at(0);
  flow::onnx::export_model(graph, path("mlp.onnx"), flow::ExportOptions().input_names({"image"}).output_names({"logits"}));

  const ::onnx::ModelProto model = read_model(path("mlp.onnx"));
  EXPECT_EQ(model.opset_import(0).version(), 17);
  ASSERT_EQ(model.graph().input_size(), 1);
  EXPECT_EQ(model.graph().input(0).name(), "image");
  EXPECT_EQ(dim_str(model.graph().input(0)), "batch,1,28,28");
  EXPECT_EQ(model.graph().output(0).name(), "logits");
  EXPECT_EQ(dim_str(model.graph().output(0)), "batch,10");
  EXPECT_EQ(count_nodes(model, "Gemm"), 3);

  EXPECT_NE(python_check(path("mlp.onnx"), x, expected).find("evaluated"), std::string::npos);
  // Another batch size runs through the symbolic dim.
  const Tensor x3 = flow::randn({3, 1, 28, 28});
  python_check(path("mlp.onnx"), x3, net->forward(x3));
}

TEST_F(OnnxExportTest, CnnWithFoldedBatchNormMatchesGraph) {
  flow::manual_seed(1);
  auto net = test_models::cnn();
  test_models::warm_up_batch_norm(*net, {16, 1, 28, 28});
  EvalGraph graph(net);
  const Tensor x = flow::randn({4, 1, 28, 28});
  const Tensor expected = graph(x).at(0);
  flow::onnx::export_model(graph, path("cnn.onnx"));
  const ::onnx::ModelProto model = read_model(path("cnn.onnx"));
  EXPECT_EQ(count_nodes(model, "BatchNormalization"), 0) << "batch norm is folded into the convs at export";
  EXPECT_EQ(count_nodes(model, "Conv"), 2);
  EXPECT_EQ(count_nodes(model, "MaxPool"), 2);
  EXPECT_EQ(model.graph().input(0).name(), "input_0");
  python_check(path("cnn.onnx"), x, expected);
}

TEST_F(OnnxExportTest, ResnetStyleNetMatchesGraph) {
  flow::manual_seed(2);
  auto net = test_models::resnet();
  test_models::warm_up_batch_norm(*net, {8, 1, 28, 28});
  EvalGraph graph(net);
  const Tensor x = flow::randn({4, 1, 28, 28});
  const Tensor expected = graph(x).at(0);
  flow::onnx::export_model(graph, path("resnet.onnx"));
  const ::onnx::ModelProto model = read_model(path("resnet.onnx"));
  EXPECT_EQ(count_nodes(model, "Conv"), 6);
  EXPECT_EQ(count_nodes(model, "AveragePool"), 1);
  python_check(path("resnet.onnx"), x, expected);
  const Tensor x1 = flow::randn({1, 1, 28, 28});
  python_check(path("resnet.onnx"), x1, net->forward(x1));
}

// The model zoo's vision models (torchvision's architectures) export and run in ONNX.
TEST_F(OnnxExportTest, ZooVisionModelsMatchGraph) {
  namespace vm = flow::vision::models;
  const std::vector<std::pair<std::string, std::shared_ptr<flow::nn::Module>>> models{
      {"resnet18", vm::resnet18(vm::ResNetOptions().num_classes(10))},
      {"mobilenet_v2", vm::mobilenet_v2(vm::MobileNetV2Options().num_classes(10))}};
  for (const auto& [name, net] : models) {
    SCOPED_TRACE(name);
    flow::manual_seed(4);
    test_models::warm_up_batch_norm(*net, {2, 3, 32, 32});
    EvalGraph graph(net);
    const Tensor x = flow::randn({1, 3, 32, 32});
    const Tensor expected = graph(x).at(0);
    flow::onnx::export_model(graph, path(name + ".onnx"));
    python_check(path(name + ".onnx"), x, expected);
  }
}

TEST_F(OnnxExportTest, UnfoldedBatchNormIsExported) {
  flow::manual_seed(3);
  // Batch norm on the input follows no conv, so nothing folds it.
  auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::BatchNorm2d>(1), std::make_shared<nn::Flatten>(),
                                              std::make_shared<nn::Linear>(784, 10));
  test_models::warm_up_batch_norm(*net, {8, 1, 28, 28});
  EvalGraph graph(net);
  const Tensor x = flow::randn({2, 1, 28, 28});
  const Tensor expected = graph(x).at(0);
  flow::onnx::export_model(graph, path("bn.onnx"));
  EXPECT_EQ(count_nodes(read_model(path("bn.onnx")), "BatchNormalization"), 1);
  python_check(path("bn.onnx"), x, expected);
}

TEST_F(OnnxExportTest, LayerNormIsExported) {
  flow::manual_seed(4);
  auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 32),
                                              std::make_shared<nn::LayerNorm>(std::vector<int64_t>{32}), std::make_shared<nn::GELU>(),
                                              std::make_shared<nn::Linear>(32, 10));
  EvalGraph graph(net);
  const Tensor x = flow::randn({3, 1, 28, 28});
  const Tensor expected = graph(x).at(0);
  flow::onnx::export_model(graph, path("ln.onnx"));
  EXPECT_EQ(count_nodes(read_model(path("ln.onnx")), "LayerNormalization"), 1);
  python_check(path("ln.onnx"), x, expected);
}

TEST_F(OnnxExportTest, FusedElementwiseChainsExpandToOnnxOps) {
  FunctionGraph graph([](const Tensor& x) { return flow::gelu(flow::sigmoid(x * 2.0 + 1.0) - x, "tanh") / 3.0; });
  const Tensor x = flow::randn({5, 7});
  const Tensor expected = graph(x).at(0);
  flow::onnx::export_model(graph, path("fused.onnx"));
  EXPECT_GE(count_nodes(read_model(path("fused.onnx")), "Tanh"), 1);
  python_check(path("fused.onnx"), x, expected);
}

// A where fused into an element-wise chain, its bool condition a folded constant: ONNX Where.
TEST_F(OnnxExportTest, FusedWhereIsOnnxWhere) {
  FunctionGraph graph([](const Tensor& x) {
    const Tensor upper = flow::gt(flow::arange(7), 3);
    return flow::relu(flow::where(upper, x * 2.0, x - 1.0)) + 0.5;
  });
  const Tensor x = flow::randn({5, 7});
  const Tensor expected = graph(x).at(0);
  flow::onnx::export_model(graph, path("where.onnx"));
  EXPECT_EQ(count_nodes(read_model(path("where.onnx")), "Where"), 1);
  python_check(path("where.onnx"), x, expected);
}

// The indexing ops of a language model's graph (embedding lookups, target picks, slices,
// concatenation, masks): Gather, GatherElements, Slice, Concat and Where, evaluated like the Graph.
TEST_F(OnnxExportTest, IndexingOpsExportAndEvaluate) {
  FunctionGraph graph([](const Tensor& x) {
    const Tensor selected = flow::index_select(x, 0, flow::tensor<int64_t>({2, 0, 2}));                    // (3, 7)
    const Tensor picked = flow::gather(selected, 1, flow::tensor<int64_t>({0, 6, 1, 1, 2, 4}, flow::Shape{3, 2}));  // (3, 2)
    const Tensor sliced = x.slice(1, 1, -1, 2);                                                            // (4, 3)
    const Tensor masked = flow::masked_fill(x, flow::gt(flow::arange(7), 4), -2.5);                        // (4, 7)
    return flow::cat({sliced.reshape({-1}), picked.reshape({-1}), masked.reshape({-1})}, 0);
  });
  const Tensor x = flow::randn({4, 7});
  const Tensor expected = graph(x).at(0);
  ASSERT_EQ(expected.size(0), 12 + 6 + 28);
  flow::onnx::export_model(graph, path("indexing.onnx"));
  const ::onnx::ModelProto model = read_model(path("indexing.onnx"));
  for (const char* op : {"Gather", "GatherElements", "Slice", "Concat", "Where"}) EXPECT_EQ(count_nodes(model, op), 1) << op;
  python_check(path("indexing.onnx"), x, expected);
}

// What sampling and cache code reads: triangles, cumulative sums, sorting and top-k (values and
// indices), select, scatter (plain and adding), one_hot, arg/extremum reductions and products, all
// evaluated like the Graph. Ties in sort keep input order in both.
TEST_F(OnnxExportTest, SortingCumulativeAndReductionOpsExportAndEvaluate) {
  FunctionGraph graph([](const Tensor& x) {
    const auto as_float = [](const Tensor& t) { return t.to(flow::kFloat32).reshape({-1}); };
    const Tensor tied = flow::cat({x, x.slice(1, 0, 2)}, 1);  // (4, 9): equal values in every row
    const auto sorted = flow::sort(tied, 1, /*descending=*/true);
    const auto smallest = flow::topk(x, 2, 0, /*largest=*/false);
    const auto row_max = flow::max(x, 1, /*keepdim=*/true);
    const Tensor index = flow::tensor<int64_t>({0, 2, 2, 1, 0, 3}, flow::Shape{2, 3});
    const Tensor src = x.slice(0, 0, 3) * 10.0;  // (3, 7): larger than index, its leading part read
    return flow::cat({as_float(flow::tril(x, 1) + flow::triu(x, -2)), as_float(flow::cumsum(x, 1)), as_float(sorted.values),
                      as_float(sorted.indices), as_float(smallest.values), as_float(smallest.indices), as_float(x.select(0, -1)),
                      as_float(flow::scatter(flow::zeros({4, 7}), 0, index, src)), as_float(flow::scatter_add(x, 0, index, src)),
                      as_float(flow::one_hot(flow::argmax(x, 1), 7)), as_float(flow::argmin(x, 0, true)), as_float(row_max.values),
                      as_float(row_max.indices), as_float(flow::prod(x, {1})), as_float(flow::max(x)), as_float(flow::min(x))},
                     0);
  });
  const Tensor x = flow::randn({4, 7});
  const Tensor expected = graph(x).at(0);
  flow::onnx::export_model(graph, path("sorting.onnx"));
  const ::onnx::ModelProto model = read_model(path("sorting.onnx"));
  for (const char* op : {"Trilu", "CumSum", "TopK", "ScatterElements", "OneHot", "ArgMax", "ArgMin", "ReduceMax", "ReduceMin", "ReduceProd"}) {
    EXPECT_GE(count_nodes(model, op), 1) << op;
  }
  python_check(path("sorting.onnx"), x, expected);
}

// flash_attention (scaled_dot_product_attention's fused kernel) exports as MatMul, Softmax and
// MatMul with its causal or additive mask; a small GPT-2 language model then exports whole
// (token and position embeddings, causal attention, GELU, the tied LM head), its logits for int64
// token ids evaluated like the Graph's.
TEST_F(OnnxExportTest, AttentionAndAGpt2LanguageModelExport) {
  const Tensor mask = flow::randn({5, 5});
  FunctionGraph attention([mask](const Tensor& x) {
    const Tensor causal = nn::functional::scaled_dot_product_attention(x, x * 0.5, x + 1.0, Tensor(), 0.0, /*is_causal=*/true);
    return causal + nn::functional::scaled_dot_product_attention(x, x, x, mask);
  });
  const Tensor x = flow::randn({2, 3, 5, 4});
  const Tensor expected = attention(x).at(0);
  flow::onnx::export_model(attention, path("attention.onnx"));
  EXPECT_EQ(count_nodes(read_model(path("attention.onnx")), "Softmax"), 2);
  python_check(path("attention.onnx"), x, expected);

  flow::manual_seed(0);
  const auto config = flow::models::GPT2Config().vocab_size(50).n_positions(8).n_embd(16).n_layer(2).n_head(2).dropout(0.0);
  EvalGraph lm(std::make_shared<flow::models::GPT2LMHeadModel>(config));
  const Tensor ids = flow::randint(0, 50, {2, 8});
  const Tensor logits = lm(ids).at(0);
  ASSERT_EQ(logits.shape(), (flow::Shape{2, 8, 50}));
  flow::onnx::export_model(lm, path("gpt2.onnx"));
  const ::onnx::ModelProto model = read_model(path("gpt2.onnx"));
  EXPECT_EQ(count_nodes(model, "Softmax"), 2);  // one attention per block
  EXPECT_GE(count_nodes(model, "Gather"), 1);   // the token embedding
  python_check(path("gpt2.onnx"), ids, logits);
}

// The decoder step of models/decoder_export.h, its KV cache as inputs and outputs: rows with
// different past lengths and real token counts give flow's logits; the cache writes are
// ScatterElements, one key and one value per layer; the batch stays symbolic.
TEST_F(OnnxExportTest, DecoderStepWithAKvCacheExportsAndEvaluates) {
  flow::manual_seed(3);
  const auto config = flow::models::GPT2Config().vocab_size(50).n_positions(12).n_embd(16).n_layer(2).n_head(2).dropout(0.0);
  auto model = std::make_shared<flow::models::GPT2LMHeadModel>(config);
  flow::models::DecoderStepGraph step(model);
  TensorList inputs = step.example_inputs(2, 3, 12);
  inputs[0] = flow::randint(0, 50, {2, 3});
  inputs[1] = flow::tensor<int64_t>({4, 0});
  inputs[2] = flow::tensor<int64_t>({3, 2});
  for (size_t i = 3; i < inputs.size(); ++i) inputs[i] = flow::randn(inputs[i].shape());
  const Tensor logits = step(inputs).at(0);
  ASSERT_EQ(logits.shape(), (flow::Shape{2, 50}));
  flow::onnx::export_model(step, path("decoder_step.onnx"), flow::ExportOptions().input_names(step.input_names()).output_names(step.output_names()));
  const ::onnx::ModelProto model_proto = read_model(path("decoder_step.onnx"));
  EXPECT_EQ(count_nodes(model_proto, "ScatterElements"), 4);
  EXPECT_EQ(dim_str(model_proto.graph().input(3)), "batch,2,12,8");
  EXPECT_EQ(model_proto.graph().output(0).name(), "logits");
  python_check(path("decoder_step.onnx"), inputs, logits);
}

TEST_F(OnnxExportTest, BatchBakedIntoTheGraphGivesStaticDims) {
  FunctionGraph graph([](const Tensor& x) { return flow::relu(x.reshape({-1})); });
  const Tensor x = flow::randn({3, 4});
  const Tensor expected = graph(x).at(0);
  flow::onnx::export_model(graph, path("static.onnx"));
  const ::onnx::ModelProto model = read_model(path("static.onnx"));
  EXPECT_EQ(dim_str(model.graph().input(0)), "3,4");
  EXPECT_EQ(dim_str(model.graph().output(0)), "12");
  python_check(path("static.onnx"), x, expected);
}

// softplus's beta and threshold have no ONNX counterpart (ONNX's Softplus has neither).
TEST_F(OnnxExportTest, OpWithoutOnnxMappingIsAClearError) {
  FunctionGraph graph([](const Tensor& x) { return nn::functional::softplus(x); });
  graph(flow::randn({2, 3}));
  try {
    flow::onnx::export_model(graph, path("softplus.onnx"));
    FAIL() << "expected flow::Error";
  } catch (const flow::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("[onnx_export] op 'softplus' (node '"), std::string::npos) << message;
    EXPECT_NE(message.find("has no ONNX mapping"), std::string::npos) << message;
  }
  EXPECT_FALSE(fs::exists(path("softplus.onnx")));
}

// The fusion pass may absorb a linear into its element-wise epilogue (fused_linear). Where it
// has not done so for the MLP, its first linear and relu are merged by hand into that form.
TEST_F(OnnxExportTest, FusedLinearIsTheLinearThenItsProgram) {
  flow::manual_seed(6);
  auto net = test_models::mlp();
  EvalGraph graph(net);
  const Tensor x = flow::randn({4, 1, 28, 28});
  const Tensor expected = graph(x).at(0);
  flow::graph::InferenceExport exported = flow::graph::export_inference(graph);
  auto& nodes = *exported.model.mutable_job()->mutable_nodes();
  auto is_fused_linear = [](const flow::graph::proto::Node& node) { return node.op() == "fused_linear"; };
  if (std::none_of(nodes.begin(), nodes.end(), is_fused_linear)) {
    int linear = 0;
    while (nodes[linear].op() != "linear") ++linear;
    ASSERT_EQ(nodes[linear + 1].op(), "relu");
    ASSERT_EQ(nodes[linear + 1].inputs(0), nodes[linear].name() + ":0");
    flow::graph::proto::Node fused = nodes[linear + 1];
    fused.set_op("fused_linear");
    fused.clear_inputs();
    for (const auto& input : nodes[linear].inputs()) fused.add_inputs(input);
    const flow::Shape shape = flow::graph::meta_of(fused.outputs(0)).shape;
    flow::graph::set_attrs(fused, flow::Attrs().set("program", "relu|0|;out|0").set("shape", shape).set("linear_inputs", int64_t{3}));
    nodes[linear + 1] = fused;
    nodes.DeleteSubrange(linear, 1);
  }
  ASSERT_TRUE(std::any_of(nodes.begin(), nodes.end(), is_fused_linear));

  std::ofstream(path("fused_linear.onnx"), std::ios::binary) << flow::onnx::to_onnx(exported.model, exported.constants).SerializeAsString();
  const ::onnx::ModelProto model = read_model(path("fused_linear.onnx"));
  EXPECT_EQ(count_nodes(model, "Gemm"), 3);
  EXPECT_EQ(count_nodes(model, "Relu"), 2);
  python_check(path("fused_linear.onnx"), x, expected);
}

TEST_F(OnnxExportTest, ReadingMaxPoolIndicesIsAClearError) {
  flow::manual_seed(5);
  EvalGraph graph(test_models::cnn());
  graph(flow::randn({2, 1, 28, 28}));
  flow::graph::InferenceExport exported = flow::graph::export_inference(graph);
  // The export pools without indices (nothing reads them); turn the first pool back into one
  // with indices and add a second output that reads them.
  auto& job = *exported.model.mutable_job();
  std::string pool;
  for (auto& node : *job.mutable_nodes()) {
    if (node.op() != "max_pool2d_inference" || !pool.empty()) continue;
    pool = node.name();
    node.set_op("max_pool2d");
    *node.add_outputs() = node.outputs(0);
    node.mutable_outputs(1)->set_dtype("int64");
  }
  ASSERT_FALSE(pool.empty());
  auto& output = *job.add_nodes();
  output.set_name("indices_out");
  output.set_op("output");
  output.add_inputs(pool + ":1");
  (*output.mutable_attrs())["index"].set_i(1);
  auto& spec = *exported.model.add_outputs();
  spec.set_name("indices");
  spec.set_node("indices_out");
  spec.set_dtype("int64");
  EXPECT_THROW_MSG(flow::onnx::to_onnx(exported.model, exported.constants),
                   "node 'indices_out' (op 'output') reads '" + pool + ":1', an output of op 'max_pool2d' that has no ONNX equivalent");
}

TEST_F(OnnxExportTest, ExportBeforeTheFirstCallIsAnError) {
  EvalGraph graph(test_models::mlp());
  EXPECT_THROW_MSG(flow::onnx::export_model(graph, path("mlp.onnx")), "has not run yet");
}

TEST_F(OnnxExportTest, CliConvertsAnExportDirectory) {
  flow::manual_seed(4);
  auto net = test_models::cnn();
  test_models::warm_up_batch_norm(*net, {8, 1, 28, 28});
  EvalGraph graph(net);
  const Tensor x = flow::randn({2, 1, 28, 28});
  const Tensor expected = graph(x).at(0);
  flow::save(graph, path("export"));
  const std::string cli = FLOW_ONNX_EXPORT_CLI;
  const auto [status, output] = run_command(cli + " " + path("export") + " " + path("cli.onnx"));
  ASSERT_EQ(status, 0) << output;
  EXPECT_NE(output.find("opset 17"), std::string::npos) << output;
  python_check(path("cli.onnx"), x, expected);

  fs::create_directories(path("empty"));
  const auto [missing_status, missing_output] = run_command(cli + " " + path("empty") + " " + path("x.onnx"));
  EXPECT_EQ(missing_status, 1);
  EXPECT_NE(missing_output.find("[onnx_export]"), std::string::npos) << missing_output;
  EXPECT_NE(missing_output.find("missing model.pb"), std::string::npos) << missing_output;
}

TEST_F(OnnxExportTest, CliCommandLine) {
  const std::string cli = FLOW_ONNX_EXPORT_CLI;
  test_cli::expect_help_lists(cli, {"export_dir", "model.onnx", "opset 17"});
  test_cli::expect_usage_error(cli, "", "export_dir is required");
  test_cli::expect_usage_error(cli, path("nowhere") + " " + path("x.onnx"), "export_dir");
  test_cli::expect_usage_error(cli, path("nowhere") + " " + path("x.onnx"), "does not exist");
  fs::create_directories(path("dir"));
  test_cli::expect_usage_error(cli, path("dir") + " " + path("x.onnx") + " --opset 13", "--opset");
  test_cli::expect_usage_error(cli, path("dir"), "model.onnx is required");
}

TEST_F(OnnxExportTest, CorruptExportDirectoryIsAnError) {
  fs::create_directories(path("bad"));
  std::ofstream(path("bad/model.pb")) << "not a protobuf";
  EXPECT_THROW_MSG(flow::onnx::export_directory(path("bad"), path("bad.onnx")), "model.pb is corrupt");
}

}  // namespace
