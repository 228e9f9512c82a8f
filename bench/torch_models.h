#pragma once
// The libtorch twins of the benchmark models (bench/bench_models.h has flow's).
#include <dlfcn.h>
#include <torch/torch.h>

namespace bench {

// torch::set_num_threads, and the same cap on the OpenBLAS libtorch calls into: Debian's libtorch
// uses OpenBLAS's pthread build, whose threads torch::set_num_threads leaves at the core count
// (its "1 thread" runs used ~1.65 cores). Both OpenBLAS sonames it may load are capped.
inline void set_torch_threads(int threads) {
  torch::set_num_threads(threads);
  for (const char* library : {"libblas.so.3", "libopenblas.so.0"}) {
    if (void* handle = dlopen(library, RTLD_NOW | RTLD_NOLOAD)) {
      if (void* set = dlsym(handle, "openblas_set_num_threads")) reinterpret_cast<void (*)(int)>(set)(threads);
      dlclose(handle);
    }
  }
}

inline torch::nn::Sequential torch_mlp() {
  return torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(784, 512), torch::nn::ReLU(), torch::nn::Linear(512, 512),
                               torch::nn::ReLU(), torch::nn::Linear(512, 10));
}

inline torch::nn::Sequential torch_cnn() {
  return torch::nn::Sequential(torch::nn::Conv2d(1, 32, 3), torch::nn::ReLU(), torch::nn::MaxPool2d(2), torch::nn::Conv2d(32, 64, 3),
                               torch::nn::ReLU(), torch::nn::MaxPool2d(2), torch::nn::Flatten(), torch::nn::Linear(1600, 128),
                               torch::nn::ReLU(), torch::nn::Linear(128, 10));
}

}  // namespace bench
