#pragma once
// The initialisation torchvision's classification models share, applied after construction.
#include <functional>

#include "nn/module.h"

namespace flow::vision::models::detail {

// Visits root and every descendant, parents first. Module::modules() needs a shared_ptr to root,
// which a constructor does not have yet.
void for_each_module(nn::Module& root, const std::function<void(nn::Module&)>& visit);

// Every Conv2d weight from kaiming_normal_(mode="fan_out", gain sqrt(2): nonlinearity "relu" for
// ResNet, MobileNetV2's default leaky_relu with slope 0 is the same), conv biases zero;
// BatchNorm weights one and biases zero (what torchvision's ResNet and MobileNetV2 constructors do).
void init_conv_and_batch_norm(nn::Module& root);

}  // namespace flow::vision::models::detail
