// Conv + batch-norm fusion with flow::fx: traces a small CNN in eval mode, folds every batch norm
// into the conv feeding it (fx_conv_bn_fuse.h), prints the graph before and after, and checks
// that the fused GraphModule, run on flow's runtime, equals the unfused module. A second model
// whose conv output is also read elsewhere shows the fusion leaving that pair alone.
// Usage: fx_conv_bn_fuse   (exit status 1 when a check fails)
#include <iostream>
#include <memory>

#include "core/flow.h"
#include "core/grad_mode.h"
#include "examples/fx_conv_bn_fuse.h"
#include "nn/conv_norm.h"
#include "nn/modules.h"

namespace nn = flow::nn;

namespace {

// conv -> bn, and a residual add that also reads the conv's raw output.
struct SharedConvOutput : nn::Module {
  SharedConvOutput() {
    conv = register_module("conv", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 4, 3).padding(1)));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(4));
  }
  std::string name() const override { return "SharedConvOutput"; }
  flow::Tensor forward(const flow::Tensor& x) override {
    const flow::Tensor y = (*conv)(x);
    return (*bn)(y) + y;
  }
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
};

// Running statistics away from 0 and 1, so that folding them matters.
void warm_up(nn::Module& model) {
  const flow::autograd::NoGradGuard no_grad;
  model.train();
  for (int i = 0; i < 3; ++i) model.forward(flow::randn({8, 3, 16, 16}) * 2.0 + 0.5);
  model.eval();
}

double max_abs_difference(const flow::Tensor& a, const flow::Tensor& b) { return flow::max(flow::abs(a - b)).item<double>(); }

}  // namespace

int main() {
  flow::manual_seed(0);
  auto model = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 8, 3).padding(1)), std::make_shared<nn::BatchNorm2d>(8), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(8, 8, 3).padding(1).bias(false)), std::make_shared<nn::BatchNorm2d>(8),
      std::make_shared<nn::ReLU>());
  warm_up(*model);
  const flow::Tensor x = flow::randn({2, 3, 16, 16});

  flow::fx::GraphModule gm = flow::fx::symbolic_trace(*model, {x});
  std::cout << "traced:\n";
  gm.print_tabular();
  const std::vector<std::string> fused = fx_example::fuse_conv_bn(gm);
  std::cout << "\nfused " << fused.size() << " batch norms:\n";
  gm.print_tabular();
  const double difference = max_abs_difference(gm(x)[0], model->forward(x));
  std::cout << "\nmax |fused - eager| = " << difference << "\n";

  auto shared = std::make_shared<SharedConvOutput>();
  warm_up(*shared);
  flow::fx::GraphModule shared_gm = flow::fx::symbolic_trace(*shared, {x});
  const size_t shared_fused = fx_example::fuse_conv_bn(shared_gm).size();
  std::cout << "conv output read twice: fused " << shared_fused << " batch norms\n";

  const bool ok = fused.size() == 2 && difference <= 1e-5 && shared_fused == 0;
  std::cout << (ok ? "OK" : "FAILED") << "\n";
  return ok ? 0 : 1;
}
