// End to end: the quickstart MLP trained on a FashionMNIST subset reaches a test accuracy.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "data/dataloader.h"
#include "data/vision.h"
#include "nn/conv_norm.h"
#include "nn/modules.h"
#include "optim/optimizer.h"

namespace nn = flow::nn;
namespace data = flow::data;

namespace {
// The first n examples of a dataset.
class Subset : public data::Dataset {
 public:
  Subset(std::shared_ptr<data::Dataset> base, int64_t n) : base_(std::move(base)), n_(std::min(n, base_->size())) {}
  int64_t size() const override { return n_; }
  data::Example get(int64_t index) const override { return base_->get(index); }

 private:
  std::shared_ptr<data::Dataset> base_;
  int64_t n_;
};

double accuracy(nn::Module& model, data::DataLoader& loader) {
  flow::autograd::NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0;
  for (const auto& batch : loader) {
    correct += flow::sum(flow::eq(flow::argmax(model.forward(batch.data), 1), batch.target)).item<int64_t>();
  }
  return static_cast<double>(correct) / static_cast<double>(loader.dataset_size());
}

void train_epochs(nn::Module& model, data::DataLoader& loader, flow::optim::Optimizer& optimizer, int epochs) {
  nn::CrossEntropyLoss loss_fn;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    model.train();
    for (const auto& batch : loader) {
      flow::Tensor loss = loss_fn(model.forward(batch.data), batch.target);
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
    }
  }
}
}  // namespace

TEST(EndToEnd, QuickstartMlpLearnsFashionMnist) {
  if (!std::filesystem::exists(data::FashionMNIST::kDefaultRoot)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  flow::manual_seed(0);
  auto train = std::make_shared<Subset>(std::make_shared<data::FashionMNIST>(), 12000);
  auto test = std::make_shared<Subset>(std::make_shared<data::FashionMNIST>(data::FashionMNIST::kDefaultRoot, false), 2000);
  data::DataLoader train_loader(train, data::DataLoaderOptions().batch_size(64).shuffle(true).num_workers(1));
  data::DataLoader test_loader(test, data::DataLoaderOptions().batch_size(256));
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 512),
                                                std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(512, 512),
                                                std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(512, 10));
  flow::optim::SGD optimizer(model->parameters(), flow::optim::SGDOptions(0.05).momentum(0.9));
  const double before = accuracy(*model, test_loader);
  train_epochs(*model, train_loader, optimizer, 2);
  const double after = accuracy(*model, test_loader);
  EXPECT_LT(before, 0.25);
  EXPECT_GT(after, 0.78) << "test accuracy after 2 epochs on 12k examples";
}

TEST(EndToEnd, LeNetStyleCnnLearnsFashionMnist) {
  if (!std::filesystem::exists(data::FashionMNIST::kDefaultRoot)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  flow::manual_seed(1);
  auto train = std::make_shared<Subset>(std::make_shared<data::FashionMNIST>(), 6000);
  auto test = std::make_shared<Subset>(std::make_shared<data::FashionMNIST>(data::FashionMNIST::kDefaultRoot, false), 1000);
  data::DataLoader train_loader(train, data::DataLoaderOptions().batch_size(64).shuffle(true).num_workers(1));
  data::DataLoader test_loader(test, data::DataLoaderOptions().batch_size(250));
  auto model = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(1, 32, 3), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Conv2d>(32, 64, 3), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(1600, 128), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(128, 10));
  flow::optim::SGD optimizer(model->parameters(), flow::optim::SGDOptions(0.05).momentum(0.9));
  train_epochs(*model, train_loader, optimizer, 1);
  EXPECT_GT(accuracy(*model, test_loader), 0.70) << "test accuracy after 1 epoch on 6k examples";
}
