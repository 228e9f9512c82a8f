// The quickstart of the seed tutorial in C++: FashionMNIST, an MLP, SGD, 5 epochs, save.
// Usage: quickstart_eager [--epochs N] [--data DIR] [--out FILE] [--device cuda] [--amp]   (--help says more)
#include <cstdio>
#include <iostream>
#include <string>

#include "core/flow.h"
#include "core/grad_mode.h"
#include "data/dataloader.h"
#include "data/vision.h"
#include "examples/quickstart_model.h"
#include "examples/quickstart_options.h"
#include "nn/modules.h"
#include "optim/optimizer.h"

namespace nn = flow::nn;

void train(flow::data::DataLoader& loader, NeuralNetwork& model, nn::CrossEntropyLoss& loss_fn, flow::optim::Optimizer& optimizer,
           flow::Device device, bool amp) {
  const int64_t size = loader.dataset_size();
  model.train();
  int64_t batch_index = 0;
  for (const auto& batch : loader) {
    flow::Tensor loss;
    {
      const flow::autocast autocast(flow::kBFloat16, amp);
      loss = loss_fn(model.forward(batch.data.to(device)), batch.target.to(device));
    }
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    if (batch_index % 100 == 0) {
      std::printf("loss: %f  [%5lld/%5lld]\n", loss.item<double>(), static_cast<long long>(batch_index * batch.data.size(0)),
                  static_cast<long long>(size));
    }
    ++batch_index;
  }
}

void test(flow::data::DataLoader& loader, NeuralNetwork& model, nn::CrossEntropyLoss& loss_fn, flow::Device device, bool amp) {
  model.eval();
  flow::autograd::NoGradGuard no_grad;
  const flow::autocast autocast(flow::kBFloat16, amp);
  double test_loss = 0;
  int64_t correct = 0;
  for (const auto& batch : loader) {
    const flow::Tensor target = batch.target.to(device);
    flow::Tensor pred = model.forward(batch.data.to(device));
    test_loss += loss_fn(pred, target).item<double>();
    correct += flow::sum(flow::eq(flow::argmax(pred, 1), target)).item<int64_t>();
  }
  test_loss /= static_cast<double>(loader.size());
  std::printf("Test Error: \n Accuracy: %.1f%%, Avg loss: %f \n\n", 100.0 * static_cast<double>(correct) / static_cast<double>(loader.dataset_size()),
              test_loss);
}

int main(int argc, char** argv) {
  CLI::App app("The FashionMNIST quickstart in eager mode: trains an MLP with SGD and saves its state.", "quickstart_eager");
  QuickstartOptions options;
  options.out = "model.safetensors";
  add_quickstart_options(app, options);
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;
  try {
    flow::manual_seed(0);
    auto training_data = std::make_shared<flow::data::FashionMNIST>(options.data, true);
    auto test_data = std::make_shared<flow::data::FashionMNIST>(options.data, false);
    const int64_t batch_size = 64;
    flow::data::DataLoader train_dataloader(training_data, flow::data::DataLoaderOptions().batch_size(batch_size).shuffle(true).num_workers(1));
    flow::data::DataLoader test_dataloader(test_data, flow::data::DataLoaderOptions().batch_size(batch_size).num_workers(1));
    const flow::Device device(options.device);
    auto model = std::make_shared<NeuralNetwork>();
    model->to(device);
    std::cout << *model << "\n";
    nn::CrossEntropyLoss loss_fn;
    flow::optim::SGD optimizer(model->parameters(), flow::optim::SGDOptions(1e-3));
    for (int t = 0; t < options.epochs; ++t) {
      std::printf("Epoch %d\n-------------------------------\n", t + 1);
      train(train_dataloader, *model, loss_fn, optimizer, device, options.amp);
      test(test_dataloader, *model, loss_fn, device, options.amp);
    }
    std::printf("Done!\n");
    flow::save(model->state_dict(), options.out);
    std::printf("Saved flow Model State to %s\n", options.out.c_str());
  } catch (const flow::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
