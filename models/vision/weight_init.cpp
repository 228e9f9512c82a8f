#include "models/vision/weight_init.h"

#include "nn/conv_norm.h"
#include "nn/init.h"

namespace flow::vision::models::detail {

void for_each_module(nn::Module& root, const std::function<void(nn::Module&)>& visit) {
  visit(root);
  for (const auto& child : root.children()) for_each_module(*child, visit);
}

void init_conv_and_batch_norm(nn::Module& root) {
  for_each_module(root, [](nn::Module& module) {
    if (auto* conv = dynamic_cast<nn::Conv2d*>(&module)) {
      nn::init::kaiming_normal_(conv->weight, 0.0, "fan_out", "relu");
      if (conv->bias.defined()) nn::init::zeros_(conv->bias);
    } else if (auto* norm = dynamic_cast<nn::BatchNorm*>(&module); norm && norm->weight.defined()) {
      nn::init::ones_(norm->weight);
      nn::init::zeros_(norm->bias);
    }
  });
}

}  // namespace flow::vision::models::detail
