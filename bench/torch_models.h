#pragma once
// The libtorch twins of the benchmark models (bench/bench_models.h has flow's).
#include <torch/torch.h>

namespace bench {

inline torch::nn::Sequential torch_mlp() {
  return torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(784, 512), torch::nn::ReLU(), torch::nn::Linear(512, 512),
                               torch::nn::ReLU(), torch::nn::Linear(512, 10));
}

inline torch::nn::Sequential torch_cnn() {
  return torch::nn::Sequential(torch::nn::Conv2d(1, 32, 3), torch::nn::ReLU(), torch::nn::MaxPool2d(2), torch::nn::Conv2d(32, 64, 3),
                               torch::nn::ReLU(), torch::nn::MaxPool2d(2), torch::nn::Flatten(), torch::nn::Linear(1600, 128),
                               torch::nn::ReLU(), torch::nn::Linear(128, 10));
}

}  // namespace bench
