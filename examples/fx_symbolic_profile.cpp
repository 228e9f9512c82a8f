// Symbolic profile (Colossal-AI Siu style) of a small CNN and of MobileNetV2, on meta tensors:
// per-node bytes and FLOPs from metas alone, nothing allocated, no kernel run.
#include <iostream>

#include "core/ops/all.h"
#include "fx/symbolic_profile.h"
#include "models/vision/mobilenet_v2.h"
#include "nn/conv_norm.h"
#include "nn/modules.h"

int main() {
  namespace fx = flow::fx;
  namespace nn = flow::nn;
  const flow::TensorOptions on_meta = flow::TensorOptions().device(flow::kMeta);

  auto cnn = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 16, 3).padding(1)), std::make_shared<nn::BatchNorm2d>(16),
      std::make_shared<nn::ReLU6>(), std::make_shared<nn::AdaptiveAvgPool2d>(1), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(16, 10));
  cnn->eval();
  const flow::Tensor batch = flow::empty({8, 3, 32, 32}, on_meta);
  fx::GraphModule cnn_gm = fx::symbolic_trace(*cnn, {batch});
  fx::symbolic_profile(cnn_gm, {batch}, /*verbose=*/true);

  auto mobilenet = flow::vision::models::mobilenet_v2();
  mobilenet->eval();
  const flow::Tensor images = flow::empty({100, 3, 224, 224}, on_meta);
  fx::GraphModule mobilenet_gm = fx::symbolic_trace(*mobilenet, {images});
  const fx::ProfileTable table = fx::symbolic_profile(mobilenet_gm, {images});
  const fx::ProfileRow totals = table.totals();
  std::cout << "\nmobilenet_v2, 100x3x224x224 on meta: " << table.rows.size() << " nodes\n"
            << "  Fwd FLOPs " << fx::format_flops(totals.forward_flops) << ", Bwd FLOPs " << fx::format_flops(totals.backward_flops)
            << "\n  Param size " << fx::format_bytes(totals.param_bytes) << ", Output size " << fx::format_bytes(totals.output_bytes)
            << ", Backward size " << fx::format_bytes(totals.backward_bytes) << "\n  Peak memory estimate (inference) "
            << fx::format_bytes(table.peak_memory_estimate()) << "\n";
  return 0;
}
