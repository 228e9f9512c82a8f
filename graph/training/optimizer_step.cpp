#include "graph/training/optimizer_step.h"

#include "core/ops/all.h"

namespace flow::graph::training {
namespace {

std::string feed_name(size_t optimizer, size_t param, const std::string& scalar) {
  return optimizer_prefix(optimizer) + "param." + std::to_string(param) + "." + scalar;
}

}  // namespace

std::string optimizer_prefix(size_t index) { return "_optimizer." + std::to_string(index) + "."; }

void trace_optimizer_step(optim::Optimizer& optimizer, size_t index, const TensorList& params, Tracer& tracer, int64_t zero_stage,
                          const Tensor& skip) {
  optimizer.trace_step(params, [&](size_t k, const std::string& scalar) {
    const Tensor& p = params[k];
    const Tensor fed = tracer.add_feed(feed_name(index, k, scalar), p.dtype(), p.device());
    if (!p.is_global()) return fed;
    return distributed::make_global({Shape{}, p.dtype(), p.device()}, p.placement(), broadcast_sbp(p.placement()), fed);
  }, zero_stage, skip);
}

std::map<std::string, Tensor> next_step_feeds(const std::vector<std::shared_ptr<optim::Optimizer>>& optimizers,
                                              const std::vector<std::shared_ptr<optim::LRScheduler>>& schedulers,
                                              const std::vector<TensorList>& trained_params) {
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < optimizers.size(); ++i) {
    const TensorList& params = trained_params[i];
    const auto values = optimizers[i]->next_step_scalars(params);
    for (size_t k = 0; k < params.size(); ++k) {
      for (const auto& [scalar, value] : values[k]) {
        feeds[feed_name(i, k, scalar)] = scalar_tensor(value, TensorOptions(params[k].dtype()).device(params[k].device()));
      }
    }
    if (schedulers[i]) schedulers[i]->step();
  }
  return feeds;
}

}  // namespace flow::graph::training
