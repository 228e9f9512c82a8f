// flow's CUDA kernels on layers of ResNet-50's size, float32; bench/torch_cuda_bench.py times the
// same cases through PyTorch on the same GPU (TF32 off on both sides: flow's float32 convolutions
// use FMA math only). Each case: warm-up, then the median of the timed repetitions, the device
// synchronised around each one. Usage: cuda_bench [--reps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "core/allocator.h"
#include "core/flow.h"

namespace {

const flow::Device kCuda("cuda:0");

void synchronize() { flow::backend_for(kCuda).synchronize(kCuda.index); }

double median_ms(const std::function<void()>& body, int reps) {
  for (int i = 0; i < 3; ++i) body();
  synchronize();
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    body();
    synchronize();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(times.begin(), times.begin() + reps / 2, times.end());
  return times[static_cast<size_t>(reps / 2)];
}

flow::Tensor device_randn(const flow::Shape& shape) { return flow::randn(shape).to(kCuda); }

void report(const char* name, double ms, double flops) {
  std::printf("%-34s %10.3f ms %10.2f TFLOP/s\n", name, ms, flops > 0 ? flops / ms / 1e9 : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "cuda_bench: unknown argument '%s' (usage: cuda_bench [--reps N])\n", argv[i]);
      return 2;
    }
  }
  if (!flow::cuda_is_available()) {
    std::fprintf(stderr, "cuda_bench: no CUDA device\n");
    return 1;
  }
  flow::manual_seed(0);
  std::printf("%-34s %13s %18s\n", "case (float32)", "median", "rate");

  const flow::Tensor a = device_randn({4096, 4096}), b = device_randn({4096, 4096});
  report("matmul 4096^3", median_ms([&] { flow::matmul(a, b); }, reps), 2.0 * 4096.0 * 4096.0 * 4096.0);

  // ResNet-50 layer1's 3x3 convolution at batch 32.
  const double conv_flops = 2.0 * 32 * 64 * 56 * 56 * 64 * 9;
  const flow::Tensor x = device_randn({32, 64, 56, 56}), w = device_randn({64, 64, 3, 3});
  report("conv2d 32x64x56x56 3x3 forward", median_ms([&] { flow::conv2d(x, w, {}, {1, 1}, {1, 1}); }, reps), conv_flops);
  flow::Tensor xg = x.detach(), wg = w.detach();
  xg.requires_grad_(true);
  wg.requires_grad_(true);
  const flow::Tensor grad = device_randn({32, 64, 56, 56});
  report("conv2d 3x3 forward+backward", median_ms([&] {
           flow::autograd::backward({flow::conv2d(xg, wg, {}, {1, 1}, {1, 1})}, {grad});
           xg.set_grad({});
           wg.set_grad({});
         }, reps),
         3 * conv_flops);

  const flow::Tensor stem = device_randn({32, 64, 112, 112});
  report("max_pool2d 3x3/2 32x64x112x112", median_ms([&] { flow::max_pool2d(stem, {3, 3}, {2, 2}, {1, 1}); }, reps), 0);
  report("relu 32x64x112x112", median_ms([&] { flow::relu(stem); }, reps), 0);
  report("add 32x64x112x112", median_ms([&] { flow::add(stem, stem); }, reps), 0);
  return 0;
}
