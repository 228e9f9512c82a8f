// The quickstart of the seed tutorial in Graph mode: the same FashionMNIST MLP and SGD as
// quickstart_eager, but each training step is one call of a compiled nn::Graph (forward, loss,
// backward and the SGD update in one Job) and evaluation runs an inference Graph. The last batch
// of each epoch is smaller (60000 = 937 * 64 + 32): its new input signature compiles a second plan
// once, sharing the weights and optimizer state, as torch.compile recompiles. At the end the
// prediction graph is exported for deployment (graph + weights, no model code needed) into a
// model repository that oneflow_lite_run and flow_serve read.
// With --parallel dp|mp under flow_run, the same graphs train on global tensors: dp splits each
// batch across the ranks (parameters broadcast), mp splits the first two Linear layers Megatron's
// way (column- then row-parallel); the compiled Job of each rank holds its pieces and the
// collectives the compiler chose.
// Usage: quickstart_graph [--epochs N] [--data DIR] [--out FILE] [--export DIR] [--device cuda]   (--help says more)
//        flow_run --nproc-per-node 2 -- quickstart_graph --parallel dp|mp|pp
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "core/flow.h"
#include "data/dataloader.h"
#include "data/vision.h"
#include "distributed/distributed.h"
#include "examples/quickstart_model.h"
#include "examples/quickstart_options.h"
#include "graph/export.h"
#include "graph/graph.h"
#include "nn/modules.h"
#include "optim/optimizer.h"

namespace nn = flow::nn;

struct GraphNeuralNetworkTrain : nn::Graph {
  GraphNeuralNetworkTrain(std::shared_ptr<NeuralNetwork> net, std::shared_ptr<flow::optim::SGD> optimizer) {
    model = register_module("model", net);
    add_optimizer(optimizer);
  }
  flow::TensorList build(const flow::TensorList& in) override {
    flow::Tensor loss = loss_fn((*model)(in[0]), in[1]);
    loss.backward();
    return {loss};
  }
  std::shared_ptr<NeuralNetwork> model;
  nn::CrossEntropyLoss loss_fn;
};

struct GraphNeuralNetworkEval : nn::Graph {
  explicit GraphNeuralNetworkEval(std::shared_ptr<NeuralNetwork> net) {
    model = register_module("model", net);
    eval();
  }
  flow::TensorList build(const flow::TensorList& in) override {
    flow::Tensor pred = (*model)(in[0]);
    return {pred, loss_fn(pred, in[1])};
  }
  std::shared_ptr<NeuralNetwork> model;
  nn::CrossEntropyLoss loss_fn;
};

// What a deployed model answers: the logits of a batch of images.
struct GraphNeuralNetworkPredict : nn::Graph {
  explicit GraphNeuralNetworkPredict(std::shared_ptr<NeuralNetwork> net) {
    model = register_module("model", net);
    eval();
  }
  flow::TensorList build(const flow::TensorList& in) override { return {(*model)(in[0])}; }
  std::shared_ptr<NeuralNetwork> model;
};

// How --parallel lays the model and the batches out over the ranks of the job.
struct Layout {
  std::optional<flow::Placement> data_placement, target_placement;  // none: one process, local tensors
  flow::NdSbp sbp;                                                  // of images and targets
  int64_t printer = 0;                                              // the rank holding the loss
  flow::Device device = flow::kCPU;                                 // of the model and local batches

  flow::Tensor data(const flow::Tensor& whole) const { return place(whole, data_placement); }
  flow::Tensor target(const flow::Tensor& whole) const { return place(whole, target_placement); }
  bool prints() const { return !data_placement || flow::distributed::get_rank() == printer; }

 private:
  flow::Tensor place(const flow::Tensor& whole, const std::optional<flow::Placement>& placement) const {
    return placement ? flow::distributed::from_whole(whole, *placement, sbp) : whole.to(device);
  }
};

Layout lay_out(const std::string& parallel, NeuralNetwork& model) {
  if (parallel == "none") return {};
  flow::distributed::init_process_group();
  const flow::NdSbp broadcast{flow::sbp::broadcast()};
  if (parallel == "pp") {
    if (flow::distributed::get_world_size() != 2) throw flow::Error("--parallel pp runs two stages: flow_run --nproc-per-node 2");
    const flow::Placement first("cpu", std::vector<int64_t>{0}), second("cpu", std::vector<int64_t>{1});
    model.to_global(second, broadcast);
    model.linear_relu_stack->operator[](0)->to_global(first, broadcast);
    model.second_stage = second;
    return {first, second, broadcast, 1};
  }
  const flow::Placement placement = flow::Placement::all(flow::DeviceType::kCPU);
  if (parallel == "dp") {
    model.to_global(placement, broadcast);
    return {placement, placement, {flow::sbp::split(0)}, 0};
  }
  model.to_global(placement, broadcast,
                  {{"linear_relu_stack.0.weight", {flow::sbp::split(0)}},
                   {"linear_relu_stack.0.bias", {flow::sbp::split(0)}},
                   {"linear_relu_stack.2.weight", {flow::sbp::split(1)}}});
  return {placement, placement, broadcast, 0};
}

int main(int argc, char** argv) {
  CLI::App app("The FashionMNIST quickstart in Graph mode: trains an MLP with SGD as a compiled nn::Graph, saves the\n"
               "Graph state and exports the prediction graph for oneflow_lite_run and flow_serve.",
               "quickstart_graph");
  QuickstartOptions options;
  options.out = "model_graph.safetensors";
  add_quickstart_options(app, options);
  std::string export_dir = "model_repository/fashion_mnist/1";
  app.add_option("--export", export_dir, "the export directory of the prediction graph")->capture_default_str();
  std::string parallel = "none";
  app.add_option("--parallel", parallel, "none, or under flow_run: dp (data parallel), mp (model parallel) or pp (2 pipeline stages, 4 micro-batches)")
      ->check(CLI::IsMember({"none", "dp", "mp", "pp"}))
      ->capture_default_str();
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;
  try {
    flow::manual_seed(0);
    auto training_data = std::make_shared<flow::data::FashionMNIST>(options.data, true);
    auto test_data = std::make_shared<flow::data::FashionMNIST>(options.data, false);
    const int64_t batch_size = 64;
    flow::data::DataLoader train_dataloader(training_data, flow::data::DataLoaderOptions().batch_size(batch_size).shuffle(true).num_workers(1));
    flow::data::DataLoader test_dataloader(test_data, flow::data::DataLoaderOptions().batch_size(batch_size).num_workers(1));
    auto model = std::make_shared<NeuralNetwork>();
    Layout layout = lay_out(parallel, *model);
    if (options.device != "cpu") {
      if (parallel != "none") throw flow::Error("--device " + options.device + " trains in one process: use it with --parallel none");
      layout.device = flow::Device(options.device);
      model->to(layout.device);
    }
    auto optimizer = std::make_shared<flow::optim::SGD>(model->parameters(), flow::optim::SGDOptions(1e-3));
    GraphNeuralNetworkTrain train_graph(model, optimizer);
    if (parallel == "pp") train_graph.config().set_gradient_accumulation_steps(4);
    train_graph.config().enable_amp(options.amp);
    GraphNeuralNetworkEval eval_graph(model);
    eval_graph.config().enable_amp(options.amp);
    const int64_t size = train_dataloader.dataset_size();
    for (int t = 0; t < options.epochs; ++t) {
      if (layout.prints()) std::printf("Epoch %d\n-------------------------------\n", t + 1);
      model->train();  // eval_graph's eval() put the shared model in eval mode
      int64_t batch_index = 0;
      for (const auto& batch : train_dataloader) {
        const flow::Tensor loss = train_graph(layout.data(batch.data), layout.target(batch.target)).at(0);
        if (t == 0 && batch_index == 0 && layout.prints()) {
          std::cout << train_graph << "\n";
          std::printf("compiled the training graph in %.3f s: %s\n", train_graph.compile_seconds(), train_graph.plan().summary().c_str());
        }
        if (batch_index % 100 == 0 && layout.prints()) {
          std::printf("loss: %f  [%5lld/%5lld]\n", loss.item<double>(), static_cast<long long>(batch_index * batch_size),
                      static_cast<long long>(size));
        }
        ++batch_index;
      }
      if (t == 0 && layout.prints()) {
        std::printf("trained %lld batches; the training graph compiled %lld plans (one per batch shape)\n",
                    static_cast<long long>(batch_index), static_cast<long long>(train_graph.num_compiled_plans()));
      }
      double test_loss = 0;
      int64_t correct = 0;
      for (const auto& batch : test_dataloader) {
        const flow::Tensor target = layout.target(batch.target);
        const flow::TensorList results = eval_graph(layout.data(batch.data), target);
        // Reading a global value gathers it: every rank holding a piece of the results takes part.
        if (results[0].is_global() && !results[0].placement().contains(flow::distributed::get_rank())) continue;
        test_loss += results[1].item<double>();
        correct += flow::sum(flow::eq(flow::argmax(results[0], 1), target)).item<int64_t>();
      }
      test_loss /= static_cast<double>(test_dataloader.size());
      if (layout.prints()) std::printf("Test Error: \n Accuracy: %.1f%%, Avg loss: %f \n\n",
                  100.0 * static_cast<double>(correct) / static_cast<double>(test_dataloader.dataset_size()), test_loss);
    }
    if (layout.prints()) std::printf("Done!\n");
    // Global state is saved as logical tensors (collective; rank 0 writes).
    flow::save(train_graph.state_dict(), options.out);
    if (layout.prints()) std::printf("Saved flow Graph state (model, optimizer, train step) to %s\n", options.out.c_str());
    // A deployed model is local. Exporting a global model gathers it (every rank takes part, rank
    // 0 writes); pipeline stages move activations between placements in forward(), which a
    // local trace cannot run, so pp exports a single-process copy of the trained model instead.
    auto deployed = model;
    if (parallel == "pp") {
      if (!layout.prints()) return 0;
      deployed = std::make_shared<NeuralNetwork>();
      flow::StateDict trained;
      for (const auto& [key, t] : flow::load(options.out)) {
        if (key.rfind("model.", 0) == 0) trained.insert(key.substr(6), t);
      }
      deployed->load_state_dict(trained);
    }
    if (layout.device.is_cuda()) deployed->to(flow::kCPU);  // deployments (oneflow_lite, flow_serve) run on the CPU
    GraphNeuralNetworkPredict predict(deployed);
    const flow::Tensor example = test_dataloader.begin()->data;
    predict(parallel == "none" || parallel == "pp" ? example : layout.data(example));
    flow::save(predict, export_dir, flow::ExportOptions().input_names({"image"}).output_names({"logits"}));
    if (layout.prints()) std::printf("Exported the prediction graph for deployment to %s\n", export_dir.c_str());
  } catch (const flow::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
