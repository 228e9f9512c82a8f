// The quickstart of the seed tutorial in Graph mode: the same FashionMNIST MLP and SGD as
// quickstart_eager, but each training step is one call of a compiled nn::Graph (forward, loss,
// backward and the SGD update in one Job) and evaluation runs an inference Graph. The last batch
// of each epoch is smaller (60000 = 937 * 64 + 32): its new input signature compiles a second plan
// once, sharing the weights and optimizer state, as torch.compile recompiles. At the end the
// prediction graph is exported for deployment (graph + weights, no model code needed) into a
// model repository that oneflow_lite_run and flow_serve read.
// Usage: quickstart_graph [--epochs N] [--data DIR] [--out FILE] [--export DIR]   (--help says more)
#include <cstdio>
#include <iostream>
#include <string>

#include "core/flow.h"
#include "data/dataloader.h"
#include "data/vision.h"
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

int main(int argc, char** argv) {
  CLI::App app("The FashionMNIST quickstart in Graph mode: trains an MLP with SGD as a compiled nn::Graph, saves the\n"
               "Graph state and exports the prediction graph for oneflow_lite_run and flow_serve.",
               "quickstart_graph");
  QuickstartOptions options;
  options.out = "model_graph.safetensors";
  add_quickstart_options(app, options);
  std::string export_dir = "model_repository/fashion_mnist/1";
  app.add_option("--export", export_dir, "the export directory of the prediction graph")->capture_default_str();
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;
  try {
    flow::manual_seed(0);
    auto training_data = std::make_shared<flow::data::FashionMNIST>(options.data, true);
    auto test_data = std::make_shared<flow::data::FashionMNIST>(options.data, false);
    const int64_t batch_size = 64;
    flow::data::DataLoader train_dataloader(training_data, flow::data::DataLoaderOptions().batch_size(batch_size).shuffle(true).num_workers(1));
    flow::data::DataLoader test_dataloader(test_data, flow::data::DataLoaderOptions().batch_size(batch_size).num_workers(1));
    auto model = std::make_shared<NeuralNetwork>();
    auto optimizer = std::make_shared<flow::optim::SGD>(model->parameters(), flow::optim::SGDOptions(1e-3));
    GraphNeuralNetworkTrain train_graph(model, optimizer);
    GraphNeuralNetworkEval eval_graph(model);
    const int64_t size = train_dataloader.dataset_size();
    for (int t = 0; t < options.epochs; ++t) {
      std::printf("Epoch %d\n-------------------------------\n", t + 1);
      model->train();  // eval_graph's eval() put the shared model in eval mode
      int64_t batch_index = 0;
      for (const auto& batch : train_dataloader) {
        const flow::Tensor loss = train_graph(batch.data, batch.target).at(0);
        if (t == 0 && batch_index == 0) {
          std::cout << train_graph << "\n";
          std::printf("compiled the training graph in %.3f s: %s\n", train_graph.compile_seconds(), train_graph.plan().summary().c_str());
        }
        if (batch_index % 100 == 0) {
          std::printf("loss: %f  [%5lld/%5lld]\n", loss.item<double>(), static_cast<long long>(batch_index * batch_size),
                      static_cast<long long>(size));
        }
        ++batch_index;
      }
      if (t == 0) {
        std::printf("trained %lld batches; the training graph compiled %lld plans (one per batch shape)\n",
                    static_cast<long long>(batch_index), static_cast<long long>(train_graph.num_compiled_plans()));
      }
      double test_loss = 0;
      int64_t correct = 0;
      for (const auto& batch : test_dataloader) {
        const flow::TensorList results = eval_graph(batch.data, batch.target);
        test_loss += results[1].item<double>();
        correct += flow::sum(flow::eq(flow::argmax(results[0], 1), batch.target)).item<int64_t>();
      }
      test_loss /= static_cast<double>(test_dataloader.size());
      std::printf("Test Error: \n Accuracy: %.1f%%, Avg loss: %f \n\n",
                  100.0 * static_cast<double>(correct) / static_cast<double>(test_dataloader.dataset_size()), test_loss);
    }
    std::printf("Done!\n");
    flow::save(train_graph.state_dict(), options.out);
    std::printf("Saved flow Graph state (model, optimizer, train step) to %s\n", options.out.c_str());
    GraphNeuralNetworkPredict predict(model);
    predict(test_dataloader.begin()->data);
    flow::save(predict, export_dir, flow::ExportOptions().input_names({"image"}).output_names({"logits"}));
    std::printf("Exported the prediction graph for deployment to %s\n", export_dir.c_str());
  } catch (const flow::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
