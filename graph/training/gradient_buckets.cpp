#include "graph/training/gradient_buckets.h"

#include <map>
#include <string>
#include <tuple>

#include "core/comm/global.h"
#include "graph/tracer.h"
#include "optim/optimizer.h"

namespace flow::graph::training {

size_t reduce_gradients_in_buckets(const TensorList& params, int64_t zero_stage) {
  const NdSbp broadcast{Sbp::broadcast()}, partial{Sbp::partial_sum()};
  std::map<std::tuple<bool, std::string, DType>, TensorList> buckets;
  for (const Tensor& p : params) {
    if (!p.is_global() || !is_traced(p.grad()) || !(p.sbp() == broadcast) || !(p.grad().sbp() == partial)) continue;
    const bool scatter = zero_stage >= 2 && optim::Optimizer::zero_shardable(p);
    buckets[{scatter, p.placement().str(), p.dtype()}].push_back(p);
  }
  for (auto& [key, bucket] : buckets) {
    TensorList grads;
    for (const Tensor& p : bucket) grads.push_back(p.grad());
    const TensorList reduced = std::get<0>(key) ? distributed::reduce_scatter_partial_sums(grads) : distributed::all_reduce_partial_sums(grads);
    for (size_t k = 0; k < bucket.size(); ++k) bucket[k].set_grad(reduced[k]);
  }
  return buckets.size();
}

}  // namespace flow::graph::training
