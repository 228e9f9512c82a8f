#pragma once
// The training cases of bench/graph_bench.cpp and bench/step_profile.cpp: the models and their
// batch sizes. The nn::Graph that trains them is the tests' test_graphs::TrainGraph (forward,
// cross-entropy, backward, optimizer update), included from here.
#include <array>
#include <memory>
#include <vector>

#include "bench/bench_models.h"
#include "nn/conv_norm.h"
#include "nn/modules.h"
#include "optim/optimizer.h"
#include "tests/common/graphs.h"

namespace bench {

// 5 Linear layers of width 256 with LayerNorm and GELU between them, then 256 -> 10.
inline std::shared_ptr<flow::nn::Module> layer_norm_mlp() {
  namespace nn = flow::nn;
  auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>());
  int64_t in = 784;
  for (int layer = 0; layer < 5; ++layer, in = 256) {
    net->push_back(std::make_shared<nn::Linear>(in, 256));
    net->push_back(std::make_shared<nn::LayerNorm>(std::vector<int64_t>{256}));
    net->push_back(std::make_shared<nn::GELU>());
  }
  net->push_back(std::make_shared<nn::Linear>(256, 10));
  return net;
}

// The quickstart MLP 4x wider (2048): its products dominate a step, as in models larger than the
// quickstart's, where bfloat16 AMP pays off most.
inline std::shared_ptr<flow::nn::Module> wide_mlp() {
  namespace nn = flow::nn;
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 2048),
                                          std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(2048, 2048),
                                          std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(2048, 10));
}

struct TrainCase {
  const char* name;
  std::shared_ptr<flow::nn::Module> (*make)();
  int64_t batch;
};

//   mlp_b64:  the quickstart MLP (784-512-512-10) at batch 64
//   mlp_b8:   the same MLP at batch 8, where per-op overhead dominates
//   cnn_b64:  the LeNet-style CNN at batch 64
//   ln_b32:   layer_norm_mlp at batch 32
//   wide_b256: wide_mlp at batch 256: products dominate
inline constexpr std::array<TrainCase, 5> kTrainCases{TrainCase{"mlp_b64", mlp, 64}, TrainCase{"mlp_b8", mlp, 8},
                                                      TrainCase{"cnn_b64", cnn, 64}, TrainCase{"ln_b32", layer_norm_mlp, 32},
                                                      TrainCase{"wide_b256", wide_mlp, 256}};

}  // namespace bench
