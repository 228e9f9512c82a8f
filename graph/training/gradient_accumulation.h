#pragma once
// Training rewrite "gradient_accumulation" (GraphConfig::set_gradient_accumulation_steps): each
// call's inputs are split along dim 0 into n micro-batches, build() is traced on each in turn,
// 0-d outputs (losses) are averaged and others concatenated; the summed gradients are then
// averaged, so one call equals one step on the whole batch (for mean-reduced losses).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "job/job.h"

namespace flow::graph::training {

// build(inputs), or with n > 1 build() on each micro-batch of the inputs. micro_batch_starts gets
// the Job position where each micro-batch's trace began, then where the last one ended (nothing
// for n == 1). Throws flow::Error naming `graph` for an input whose dim 0 n does not divide.
TensorList build_micro_batches(const std::function<TensorList(const TensorList&)>& build, const TensorList& inputs, int64_t n,
                               const proto::Job& job, std::vector<int>& micro_batch_starts, const std::string& graph);

// The micro-batches' summed gradients of params divided by n (nothing for n == 1).
void average_accumulated_gradients(const TensorList& params, int64_t n);

}  // namespace flow::graph::training
