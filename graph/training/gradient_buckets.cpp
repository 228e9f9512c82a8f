#include "graph/training/gradient_buckets.h"

#include <string>

#include "core/global/buckets.h"
#include "graph/tracer.h"
#include "optim/optimizer.h"

namespace flow::graph::training {

size_t reduce_gradients_in_buckets(const TensorList& params, int64_t zero_stage) {
  const NdSbp broadcast{Sbp::broadcast()}, partial{Sbp::partial_sum()};
  TensorList reduced_params;
  std::vector<bool> scatters;
  std::vector<distributed::BucketEntry> entries;
  for (const Tensor& p : params) {
    if (!p.is_global() || !is_traced(p.grad()) || !(p.sbp() == broadcast) || !(p.grad().sbp() == partial)) continue;
    const bool scatter = zero_stage >= 2 && optim::Optimizer::zero_shardable(p);
    reduced_params.push_back(p);
    scatters.push_back(scatter);
    entries.push_back({std::string(scatter ? "reduce_scatter " : "all_reduce ") + p.placement().str() + " " + dtype_name(p.dtype()), p.nbytes()});
  }
  // One collective per key, uncapped: a Graph's collectives are planned, not overlapped with an
  // eager backward, so fewer and larger is cheaper.
  const std::vector<std::vector<size_t>> buckets = distributed::plan_buckets(entries, distributed::BucketCaps{});
  for (const std::vector<size_t>& bucket : buckets) {
    TensorList grads;
    for (size_t i : bucket) grads.push_back(reduced_params[i].grad());
    const bool scatter = scatters[bucket.front()];
    const TensorList reduced = scatter ? distributed::reduce_scatter_partial_sums(grads) : distributed::all_reduce_partial_sums(grads);
    for (size_t k = 0; k < bucket.size(); ++k) reduced_params[bucket[k]].set_grad(reduced[k]);
  }
  return buckets.size();
}

}  // namespace flow::graph::training
