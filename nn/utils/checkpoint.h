#pragma once
// Activation checkpointing, as torch.utils.checkpoint.checkpoint (use_reentrant=False): the
// function runs without grad, so autograd keeps none of its interior activations, only its inputs;
// its outputs get one backward node that, when reached, reruns the function with grad on (same
// random draws, same autocast state as the first run) and backpropagates through that rerun. The
// ops and their order are those of an unchecked run, so the gradients equal its gradients.
//
// Gradients flow to the inputs that require grad and to the leaves (parameters) the function
// reads; an input that does not require grad is fine. The function must compute the same outputs
// (count, shapes, dtypes) when rerun. Differences from PyTorch: a non-leaf tensor that requires
// grad and that the function reads without getting it as an input is an error (pass it as an
// input), as is backward with create_graph (no double backward through a checkpoint); global
// tensors are not supported. With grad mode off, or inside an nn::Graph's build() (lazy tensors),
// the function just runs: a Graph checkpoints by module instead
// (GraphConfig::set_activation_checkpointing, graph/training/activation_checkpointing.h).
#include <functional>

#include "core/tensor.h"
#include "nn/module.h"

namespace flow::utils {

using CheckpointFunction = std::function<TensorList(const TensorList&)>;

// function(inputs), checkpointed. preserve_rng_state: the rerun replays the default generator's
// state of the first run (dropout draws the same mask) and leaves the generator as it found it.
// Errors are flow::Error "[checkpoint] ...".
TensorList checkpoint(const CheckpointFunction& function, const TensorList& inputs, bool preserve_rng_state = true);
// module(input), checkpointed.
Tensor checkpoint(nn::Module& module, const Tensor& input, bool preserve_rng_state = true);

}  // namespace flow::utils
