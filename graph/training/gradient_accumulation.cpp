#include "graph/training/gradient_accumulation.h"

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"

namespace flow::graph::training {

TensorList build_micro_batches(const std::function<TensorList(const TensorList&)>& build, const TensorList& inputs, int64_t n,
                               const proto::Job& job, std::vector<int>& micro_batch_starts, const std::string& graph) {
  if (n == 1) return build(inputs);
  std::vector<TensorList> results;
  for (int64_t k = 0; k < n; ++k) {
    micro_batch_starts.push_back(job.nodes_size());
    TensorList micro;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& x = inputs[i];
      if (x.dim() == 0 || x.size(0) % n != 0) {
        fail("graph", graph, ": gradient accumulation over ", n, " micro-batches needs dim 0 of input ", i, " ", x.shape(), " to divide by ", n);
      }
      const int64_t rows = x.size(0) / n;
      micro.push_back(x.narrow(0, k * rows, rows));
    }
    results.push_back(build(micro));
  }
  micro_batch_starts.push_back(job.nodes_size());
  autograd::NoGradGuard no_grad;
  TensorList outputs;
  for (size_t o = 0; o < results[0].size(); ++o) {
    TensorList parts;
    for (const TensorList& result : results) parts.push_back(result.at(o));
    if (parts[0].dim() > 0) {
      outputs.push_back(cat(parts, 0));
      continue;
    }
    Tensor sum = parts[0];
    for (size_t k = 1; k < parts.size(); ++k) sum = sum + parts[k];
    outputs.push_back(sum * (1.0 / static_cast<double>(n)));
  }
  return outputs;
}

void average_accumulated_gradients(const TensorList& params, int64_t n) {
  if (n == 1) return;
  autograd::NoGradGuard no_grad;
  for (Tensor p : params) p.set_grad(p.grad() * (1.0 / static_cast<double>(n)));
}

}  // namespace flow::graph::training
