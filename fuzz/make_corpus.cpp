// Writes the fuzz targets' seed corpora (fuzz/corpus/<target>/) and the real exports the targets
// pair with fuzzed bytes (fuzz/data/), all from real data: tiny models trained for a few steps on
// FashionMNIST and exported, FashionMNIST IDX files cut to three images, two CIFAR-10-format
// records, and serialized KServe requests. Deterministic (seeded).
// Usage: flow_fuzz_make_corpus <the source tree's fuzz/ directory> [FashionMNIST root]
// (fuzz/corpus/model_config holds config.pbtxt examples copied from serving/README.md and the
// serving tests, not generated.)
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/flow.h"
#include "data/dataloader.h"
#include "data/vision.h"
#include "graph/export.h"
#include "graph/graph.h"
#include "nn/conv_norm.h"
#include "nn/modules.h"
#include "optim/optimizer.h"
#include "serving/grpc_predict_v2.pb.h"

namespace fs = std::filesystem;
namespace nn = flow::nn;
using flow::Tensor;
using flow::TensorList;

namespace {

void write(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw flow::Error("cannot write " + path.string());
}

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_gzip(const fs::path& path, const std::string& bytes) {
  gzFile file = gzopen(path.c_str(), "wb9");
  if (file == nullptr || gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) != static_cast<int>(bytes.size())) {
    throw flow::Error("cannot write " + path.string());
  }
  gzclose(file);
}

std::string gunzip(const fs::path& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) throw flow::Error("cannot read " + path.string());
  std::string bytes;
  char buffer[1 << 16];
  int n;
  while ((n = gzread(file, buffer, sizeof buffer)) > 0) bytes.append(buffer, static_cast<size_t>(n));
  gzclose(file);
  return bytes;
}

struct TrainGraph : nn::Graph {
  TrainGraph(std::shared_ptr<nn::Module> net, std::shared_ptr<flow::optim::Optimizer> optimizer) {
    model = register_module("model", std::move(net));
    add_optimizer(std::move(optimizer));
  }
  TensorList build(const TensorList& in) override {
    Tensor loss = loss_fn(model->forward(in[0]), in[1]);
    loss.backward();
    return {loss};
  }
  std::shared_ptr<nn::Module> model;
  nn::CrossEntropyLoss loss_fn;
};

struct PredictGraph : nn::Graph {
  explicit PredictGraph(std::shared_ptr<nn::Module> net) {
    model = register_module("model", std::move(net));
    eval();
  }
  TensorList build(const TensorList& in) override { return {model->forward(in[0])}; }
  std::shared_ptr<nn::Module> model;
};

// One input per dtype, returned through a copy.
struct IdentityGraph : nn::Graph {
  TensorList build(const TensorList& in) override {
    TensorList out;
    for (const Tensor& x : in) out.push_back(flow::clone(x));
    return out;
  }
};

// `steps` Adam steps of batch 32 on FashionMNIST; returns the training graph for its state.
std::unique_ptr<TrainGraph> train(const std::shared_ptr<nn::Module>& net, const std::shared_ptr<flow::data::Dataset>& data, int steps) {
  auto optimizer = std::make_shared<flow::optim::Adam>(net->parameters(), flow::optim::AdamOptions(1e-3));
  auto graph = std::make_unique<TrainGraph>(net, optimizer);
  flow::data::DataLoader loader(data, flow::data::DataLoaderOptions().batch_size(32).shuffle(true).drop_last(true));
  int step = 0;
  for (const auto& batch : loader) {
    (*graph)(batch.data, batch.target);
    if (++step == steps) break;
  }
  return graph;
}

// The KServe names, flow dtypes and typed-contents fields of the dtypes model's inputs.
struct Datatype {
  std::string name;
  flow::DType dtype;
};
const std::vector<Datatype>& datatypes() {
  static const std::vector<Datatype> all = {
      {"BOOL", flow::kBool},      {"UINT8", flow::kUInt8}, {"UINT16", flow::kUInt16}, {"UINT32", flow::kUInt32},
      {"UINT64", flow::kUInt64},  {"INT8", flow::kInt8},   {"INT16", flow::kInt16},   {"INT32", flow::kInt32},
      {"INT64", flow::kInt64},    {"FP16", flow::kFloat16}, {"BF16", flow::kBFloat16}, {"FP32", flow::kFloat32},
      {"FP64", flow::kFloat64}};
  return all;
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// Typed contents of four values 0, 1, 2, 3 (1 for every non-zero bool); false for FP16/BF16.
bool fill_typed(const std::string& datatype, inference::InferTensorContents& contents) {
  for (int v = 0; v < 4; ++v) {
    if (datatype == "BOOL") contents.add_bool_contents(v % 2 == 1);
    else if (datatype == "UINT8" || datatype == "UINT16" || datatype == "UINT32") contents.add_uint_contents(v);
    else if (datatype == "UINT64") contents.add_uint64_contents(v);
    else if (datatype == "INT8" || datatype == "INT16" || datatype == "INT32") contents.add_int_contents(v - 2);
    else if (datatype == "INT64") contents.add_int64_contents(v - 2);
    else if (datatype == "FP32") contents.add_fp32_contents(0.5f * static_cast<float>(v));
    else if (datatype == "FP64") contents.add_fp64_contents(0.25 * v);
    else return false;
  }
  return true;
}

void add_input(inference::ModelInferRequest& request, const std::string& name, const std::string& datatype, const std::vector<int64_t>& shape) {
  auto* input = request.add_inputs();
  input->set_name(name);
  input->set_datatype(datatype);
  for (int64_t d : shape) input->add_shape(d);
}

std::string raw_bytes(const Tensor& tensor) {
  const Tensor host = tensor.contiguous();
  return {static_cast<const char*>(host.data_ptr()), static_cast<size_t>(host.numel()) * flow::itemsize(host.dtype())};
}

void write_requests(const fs::path& corpus, const flow::data::FashionMNIST& images) {
  // dtypes: every input raw (accepted), then each typed field on its own (the others missing).
  inference::ModelInferRequest raw;
  raw.set_model_name("dtypes");
  raw.set_id("raw-all");
  for (const auto& [name, dtype] : datatypes()) {
    add_input(raw, lower(name), name, {2, 2});
    raw.add_raw_input_contents(raw_bytes(flow::arange(4).reshape({2, 2}).to(dtype)));
  }
  write(corpus / "dtypes_raw_all.pb", raw.SerializeAsString());
  inference::ModelInferRequest typed_all;
  typed_all.set_model_name("dtypes");
  for (const auto& [name, dtype] : datatypes()) {
    inference::ModelInferRequest typed;
    typed.set_model_name("dtypes");
    add_input(typed, lower(name), name, {2, 2});
    if (!fill_typed(name, *typed.mutable_inputs(0)->mutable_contents())) continue;
    write(corpus / ("dtypes_typed_" + lower(name) + ".pb"), typed.SerializeAsString());
    *typed_all.add_inputs() = typed.inputs(0);
  }
  write(corpus / "dtypes_typed_all.pb", typed_all.SerializeAsString());

  // cnn: one real image raw, two typed, with the output asked for by name.
  inference::ModelInferRequest one;
  one.set_model_name("cnn");
  add_input(one, "image", "FP32", {1, 1, 28, 28});
  one.add_raw_input_contents(raw_bytes(images.get(0).data));
  one.add_outputs()->set_name("logits");
  write(corpus / "cnn_raw_one_image.pb", one.SerializeAsString());
  inference::ModelInferRequest two;
  two.set_model_name("cnn");
  add_input(two, "image", "FP32", {2, 1, 28, 28});
  for (int64_t i : {1, 2}) {
    for (float v : images.get(i).data.tolist<float>()) two.mutable_inputs(0)->mutable_contents()->add_fp32_contents(v);
  }
  write(corpus / "cnn_typed_two_images.pb", two.SerializeAsString());
}

// The first `count` items of an IDX file (its first dimension cut), raw and gzip.
void write_idx_prefix(const fs::path& source, const fs::path& corpus, const std::string& stem, size_t item_bytes, size_t header) {
  const size_t count = 3;
  std::string bytes = gunzip(source).substr(0, header + count * item_bytes);
  bytes[4] = bytes[5] = bytes[6] = 0;
  bytes[7] = static_cast<char>(count);
  write(corpus / stem, bytes);
  write_gzip(corpus / (stem + ".gz"), bytes);
}

// Two CIFAR-10 binary records (label byte, 3x32x32 pixels) from FashionMNIST: each image padded
// to 32x32 and repeated in the three channels. (No CIFAR-10 data is installed here.)
void write_cifar(const fs::path& corpus, const fs::path& root) {
  const std::string images = gunzip(root / "t10k-images-idx3-ubyte.gz");
  const std::string labels = gunzip(root / "t10k-labels-idx1-ubyte.gz");
  std::string records;
  for (size_t item = 0; item < 2; ++item) {
    records += labels[8 + item];
    for (int channel = 0; channel < 3; ++channel) {
      for (int y = 0; y < 32; ++y) {
        for (int x = 0; x < 32; ++x) {
          const bool inside = y >= 2 && y < 30 && x >= 2 && x < 30;
          records += inside ? images[16 + item * 784 + static_cast<size_t>((y - 2) * 28 + (x - 2))] : '\0';
        }
      }
    }
  }
  write(corpus / "two_records.bin", records);
  write_gzip(corpus / "two_records.bin.gz", records);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <fuzz dir> [FashionMNIST root]\n", argv[0]);
    return 2;
  }
  const fs::path fuzz = argv[1];
  const fs::path root = argc > 2 ? argv[2] : flow::data::FashionMNIST::kDefaultRoot;
  const fs::path corpus = fuzz / "corpus";
  try {
    for (const char* target : {"safetensors", "lite_model", "lite_weights", "idx", "cifar", "infer_request"}) {
      fs::create_directories(corpus / target);
    }
    flow::manual_seed(0);
    auto test_set = std::make_shared<flow::data::FashionMNIST>(root.string(), false);

    // safetensors: a trained Graph's state (model, Adam state, train step), every dtype.
    auto mlp = std::make_shared<nn::Sequential>(std::make_shared<nn::AvgPool2d>(4), std::make_shared<nn::Flatten>(),
                                                std::make_shared<nn::Linear>(49, 16), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(16, 10));
    flow::save(train(mlp, test_set, 20)->state_dict(), (corpus / "safetensors" / "trained_graph_state.safetensors").string());
    flow::StateDict every_dtype;
    for (flow::DType dtype : flow::storage_dtypes()) every_dtype.insert("t_" + flow::dtype_name(dtype), flow::arange(6).reshape({2, 3}).to(dtype));
    every_dtype.insert("scalar", flow::full({}, 3.5));
    every_dtype.insert("empty", flow::zeros({0, 4}));
    every_dtype.metadata()["format"] = "pt";
    flow::save(every_dtype, (corpus / "safetensors" / "every_dtype.safetensors").string());

    // The CNN export (lite targets, infer_request): pool, conv, batch norm (folded), relu, pool,
    // linear; trained a few steps, exported with a dynamic batch.
    auto cnn = std::make_shared<nn::Sequential>(
        std::make_shared<nn::AvgPool2d>(2), std::make_shared<nn::Conv2d>(1, 4, 3), std::make_shared<nn::BatchNorm2d>(4),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
        std::make_shared<nn::Linear>(144, 10));
    train(cnn, test_set, 20);
    PredictGraph predict(cnn);
    predict(flow::stack({test_set->get(0).data, test_set->get(1).data}));
    const fs::path cnn_dir = fuzz / "data" / "cnn";
    flow::save(predict, cnn_dir.string(), flow::ExportOptions().input_names({"image"}).output_names({"logits"}));
    write(corpus / "lite_model" / "cnn_model.pb", read(cnn_dir / "model.pb"));
    write(corpus / "lite_weights" / "cnn_weights.safetensors", read(cnn_dir / "weights.safetensors"));
    write(corpus / "safetensors" / "cnn_export_weights.safetensors", read(cnn_dir / "weights.safetensors"));

    // The dtypes export: one (-1, 2) input per KServe datatype, named after it, identity.
    IdentityGraph identity;
    TensorList examples;
    std::vector<std::string> inputs, outputs;
    for (const auto& [name, dtype] : datatypes()) {
      examples.push_back(flow::zeros({2, 2}).to(dtype));
      inputs.push_back(lower(name));
      outputs.push_back(lower(name) + "_out");
    }
    identity(examples);
    const fs::path dtypes_dir = fuzz / "data" / "dtypes";
    flow::save(identity, dtypes_dir.string(), flow::ExportOptions().input_names(inputs).output_names(outputs));
    write(corpus / "lite_model" / "dtypes_model.pb", read(dtypes_dir / "model.pb"));

    write_requests(corpus / "infer_request", *test_set);
    write_idx_prefix(root / "t10k-images-idx3-ubyte.gz", corpus / "idx", "t10k-images-idx3-ubyte", 784, 16);
    write_idx_prefix(root / "t10k-labels-idx1-ubyte.gz", corpus / "idx", "t10k-labels-idx1-ubyte", 1, 8);
    write_cifar(corpus / "cifar", root);
  } catch (const flow::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
