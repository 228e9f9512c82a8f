#pragma once
// What DDP tests compare against: a small MLP trained with plain SGD on the full batch in one
// process. Every rank can rebuild the same batches and the same reference from the seeds.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "nn/functional.h"
#include "nn/modules.h"

namespace flow::testing {

inline std::shared_ptr<nn::Sequential> make_ddp_mlp(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(12, 32), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(32, 32), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(32, 5));
}

struct DdpBatch {
  Tensor data;    // (n, 12) float32
  Tensor target;  // (n,) int64 classes in [0, 5)
  // Rows [rank * n / world, (rank + 1) * n / world): this rank's share of the global batch.
  DdpBatch shard(int64_t rank, int64_t world) const {
    const int64_t rows = data.size(0) / world;
    return {data.narrow(0, rank * rows, rows).contiguous(), target.narrow(0, rank * rows, rows).contiguous()};
  }
};

inline std::vector<DdpBatch> make_ddp_batches(int steps, int64_t global_batch, uint64_t seed) {
  manual_seed(seed);
  std::vector<DdpBatch> batches;
  for (int i = 0; i < steps; ++i) batches.push_back({randn({global_batch, 12}), randint(0, 5, {global_batch})});
  return batches;
}

inline Tensor ddp_loss(nn::Module& model, const DdpBatch& batch) {
  return nn::functional::cross_entropy(model(batch.data), batch.target);
}

inline void sgd_step(nn::Module& model, double lr) {
  autograd::NoGradGuard no_grad;
  for (Tensor& param : model.parameters()) {
    param.copy_(param - param.grad() * lr);
  }
  model.zero_grad();
}

// Ranks that each sum half a batch, then average, add in another order than one process over the
// whole batch: float32 results differ by some ulps after a few steps, and by more with AVX-512
// GEMMs (1.4e-6 measured on a Xeon with AVX-512 where AVX2 stays under 1e-6).
constexpr double kSplitBatchTolerance = 1e-5;

// Largest |a - b| / max(|b|, 1e-3) over every element of tensors paired by position.
inline double max_relative_difference(const TensorList& a, const TensorList& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto va = a[i].tolist<float>(), vb = b[i].tolist<float>();
    for (size_t j = 0; j < va.size(); ++j) {
      worst = std::max(worst, std::abs(static_cast<double>(va[j]) - vb[j]) / std::max(std::abs(static_cast<double>(vb[j])), 1e-3));
    }
  }
  return worst;
}

// The same over every parameter of two modules.
inline double max_relative_difference(const nn::Module& a, const nn::Module& b) {
  return max_relative_difference(a.parameters(), b.parameters());
}

}  // namespace flow::testing
