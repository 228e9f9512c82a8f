#pragma once
// The benchmark models built with flow (bench/torch_models.h has the libtorch twins).
#include <memory>

#include "nn/conv_norm.h"
#include "nn/modules.h"

namespace bench {

// The quickstart MLP: 784-512-512-10 with ReLU.
inline std::shared_ptr<flow::nn::Module> mlp() {
  namespace nn = flow::nn;
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 512),
                                          std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(512, 512),
                                          std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(512, 10));
}

// The LeNet-style CNN: conv 1->32 3x3, pool, conv 32->64 3x3, pool, 1600->128->10.
inline std::shared_ptr<flow::nn::Module> cnn() {
  namespace nn = flow::nn;
  return std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(1, 32, 3), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Conv2d>(32, 64, 3), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(1600, 128), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(128, 10));
}

}  // namespace bench
