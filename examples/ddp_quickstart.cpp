// The FashionMNIST quickstart trained data-parallel: every rank holds the model, reads its own
// share of each epoch (DistributedSampler), and DistributedDataParallel averages the gradients.
// Usage: flow_run --nproc-per-node 2 -- build/examples/ddp_quickstart [--epochs N] [--batch-size B]
//        [--data DIR] [--out FILE]   (--help says more)
#include <cstdio>
#include <iostream>
#include <string>

#include "core/flow.h"
#include "core/grad_mode.h"
#include "data/dataloader.h"
#include "data/vision.h"
#include "distributed/distributed.h"
#include "examples/quickstart_model.h"
#include "examples/quickstart_options.h"
#include "nn/modules.h"
#include "nn/parallel/ddp.h"
#include "optim/optimizer.h"

namespace nn = flow::nn;
namespace dist = flow::distributed;

void train(flow::data::DataLoader& loader, nn::parallel::DistributedDataParallel& model, nn::CrossEntropyLoss& loss_fn,
           flow::optim::Optimizer& optimizer) {
  const int64_t size = loader.dataset_size();
  const int64_t world = dist::get_world_size();
  model.train();
  int64_t batch_index = 0;
  for (const auto& batch : loader) {
    flow::Tensor loss = loss_fn(model(batch.data), batch.target);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    if (batch_index % 100 == 0 && dist::get_rank() == 0) {
      std::printf("loss: %f  [%5lld/%5lld]\n", loss.item<double>(),
                  static_cast<long long>(batch_index * batch.data.size(0) * world), static_cast<long long>(size));
    }
    ++batch_index;
  }
}

// Each rank scores its share of the test set; one all_reduce adds up the loss, the correct
// predictions and the examples seen.
void test(flow::data::DataLoader& loader, NeuralNetwork& model, nn::CrossEntropyLoss& loss_fn) {
  model.eval();
  flow::autograd::NoGradGuard no_grad;
  double loss_sum = 0, correct = 0, seen = 0;
  for (const auto& batch : loader) {
    flow::Tensor pred = model(batch.data);
    const double rows = static_cast<double>(batch.data.size(0));
    loss_sum += loss_fn(pred, batch.target).item<double>() * rows;
    correct += static_cast<double>(flow::sum(flow::eq(flow::argmax(pred, 1), batch.target)).item<int64_t>());
    seen += rows;
  }
  flow::Tensor totals = flow::tensor<double>({loss_sum, correct, seen});
  dist::process_group("test").all_reduce(totals, dist::ReduceOp::kSum, {})->wait();
  const auto sums = totals.tolist<double>();
  if (dist::get_rank() == 0) {
    std::printf("Test Error: \n Accuracy: %.1f%%, Avg loss: %f \n\n", 100.0 * sums[1] / sums[2], sums[0] / sums[2]);
  }
}

int main(int argc, char** argv) {
  CLI::App app("The FashionMNIST quickstart trained with DistributedDataParallel, one process per rank: run it "
               "under flow_run (flow_run --nproc-per-node 2 -- ddp_quickstart). Each rank trains on its share of "
               "every epoch; the global batch is --batch-size x the number of ranks. Rank 0 prints and saves.",
               "ddp_quickstart");
  QuickstartOptions options;
  options.out = "model_ddp.safetensors";
  int64_t batch_size = 64;
  add_quickstart_options(app, options);
  app.add_option("--batch-size", batch_size, "examples per rank and step (global batch = this x ranks)")
      ->check(flow::cli::at_least(1))
      ->capture_default_str();
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;
  try {
    dist::init_process_group();
    const bool main_rank = dist::get_rank() == 0;
    flow::manual_seed(0);
    auto training_data = std::make_shared<flow::data::FashionMNIST>(options.data, true);
    auto test_data = std::make_shared<flow::data::FashionMNIST>(options.data, false);
    auto train_sampler = std::make_shared<flow::data::DistributedSampler>(training_data->size());
    auto test_sampler = std::make_shared<flow::data::DistributedSampler>(
        test_data->size(), flow::data::DistributedSamplerOptions().shuffle(false));
    flow::data::DataLoader train_dataloader(training_data, flow::data::DataLoaderOptions().batch_size(batch_size).num_workers(1),
                                            train_sampler);
    flow::data::DataLoader test_dataloader(test_data, flow::data::DataLoaderOptions().batch_size(batch_size).num_workers(1),
                                           test_sampler);
    auto model = std::make_shared<NeuralNetwork>();
    nn::parallel::DistributedDataParallel ddp(model);
    if (main_rank) {
      std::cout << *model << "\n";
      std::printf("%lld ranks x batch %lld = global batch %lld\n", static_cast<long long>(dist::get_world_size()),
                  static_cast<long long>(batch_size), static_cast<long long>(batch_size * dist::get_world_size()));
    }
    nn::CrossEntropyLoss loss_fn;
    flow::optim::SGD optimizer(ddp.parameters(), flow::optim::SGDOptions(1e-3));
    for (int t = 0; t < options.epochs; ++t) {
      if (main_rank) std::printf("Epoch %d\n-------------------------------\n", t + 1);
      train_sampler->set_epoch(t);
      train(train_dataloader, ddp, loss_fn, optimizer);
      test(test_dataloader, *model, loss_fn);
    }
    if (main_rank) std::printf("Done!\n");
    nn::parallel::save_on_rank0(ddp.state_dict(), options.out);
    if (main_rank) std::printf("Saved flow Model State to %s\n", options.out.c_str());
    dist::destroy_process_group();
  } catch (const flow::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
