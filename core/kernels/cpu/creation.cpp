// CPU kernels of the creation ops. Random kernels index Philox by element, so results depend
// only on (seed, offset), not on the number of threads.
#include <cmath>
#include <vector>

#include "core/kernels/cpu/convert.h"
#include "core/op.h"
#include "core/random.h"
#include "core/thread_pool.h"

namespace flow::cpu {
namespace {

template <typename T, typename F>
void fill_indexed(Tensor& out, F value_at) {
  T* data = static_cast<T*>(out.data_ptr());
  parallel_for(0, out.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) data[i] = value_at(i);
  });
}

void empty_kernel(KernelContext&) {}

void full_kernel(KernelContext& ctx) {
  const Scalar& value = ctx.attrs.get<Scalar>("value");
  FLOW_DISPATCH_ALL(ctx.outputs[0].dtype(), "full", [&]<typename T>() {
    const T v = value.is_floating() ? convert<T>(value.to_double()) : convert<T>(value.to_int());
    fill_indexed<T>(ctx.outputs[0], [v](int64_t) { return v; });
  });
}

void arange_kernel(KernelContext& ctx) {
  const Scalar& start = ctx.attrs.get<Scalar>("start");
  const Scalar& step = ctx.attrs.get<Scalar>("step");
  FLOW_DISPATCH_NUMERIC(ctx.outputs[0].dtype(), "arange", [&]<typename T>() {
    if constexpr (std::is_integral_v<T>) {
      if (!start.is_floating() && !step.is_floating()) {
        fill_indexed<T>(ctx.outputs[0], [&](int64_t i) { return static_cast<T>(start.to_int() + i * step.to_int()); });
        return;
      }
    }
    fill_indexed<T>(ctx.outputs[0], [&](int64_t i) { return static_cast<T>(start.to_double() + i * step.to_double()); });
  });
}

void linspace_kernel(KernelContext& ctx) {
  const double start = ctx.attrs.get<Scalar>("start").to_double();
  const double end = ctx.attrs.get<Scalar>("end").to_double();
  const int64_t steps = ctx.outputs[0].numel();
  const double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  const int64_t half = steps / 2;
  FLOW_DISPATCH_NUMERIC(ctx.outputs[0].dtype(), "linspace", [&]<typename T>() {
    // Like PyTorch, fill the second half backwards from `end` so both endpoints are exact; a
    // single step is `start` (PyTorch and NumPy).
    fill_indexed<T>(ctx.outputs[0], [&](int64_t i) {
      return static_cast<T>(i < half || steps == 1 ? start + step * static_cast<double>(i)
                                                   : end - step * static_cast<double>(steps - 1 - i));
    });
  });
}

void eye_kernel(KernelContext& ctx) {
  const int64_t cols = ctx.outputs[0].size(1);
  FLOW_DISPATCH_ALL(ctx.outputs[0].dtype(), "eye", [&]<typename T>() {
    const T one = convert<T>(1), zero = convert<T>(0);
    fill_indexed<T>(ctx.outputs[0], [&](int64_t i) { return i / cols == i % cols ? one : zero; });
  });
}

uint64_t seed_of(const Attrs& attrs) { return static_cast<uint64_t>(attrs.get<int64_t>("seed")); }
uint64_t offset_of(const Attrs& attrs) { return static_cast<uint64_t>(attrs.get<int64_t>("offset")); }

void uniform_kernel(KernelContext& ctx) {
  const double low = ctx.attrs.get<double>("low"), high = ctx.attrs.get<double>("high");
  const uint64_t seed = seed_of(ctx.attrs), offset = offset_of(ctx.attrs);
  FLOW_DISPATCH_FLOATING(ctx.outputs[0].dtype(), "rand", [&]<typename T>() {
    fill_indexed<T>(ctx.outputs[0], [&](int64_t i) {
      uint32_t words[4];
      Philox::block(seed, offset + static_cast<uint64_t>(i), words);
      const double u = std::is_same_v<T, double> ? Philox::to_unit53(words[0], words[1]) : Philox::to_unit(words[0]);
      return static_cast<T>(low + (high - low) * u);
    });
  });
}

void normal_kernel(KernelContext& ctx) {
  const double mean = ctx.attrs.get<double>("mean"), std = ctx.attrs.get<double>("std");
  const uint64_t seed = seed_of(ctx.attrs), offset = offset_of(ctx.attrs);
  FLOW_DISPATCH_FLOATING(ctx.outputs[0].dtype(), "randn", [&]<typename T>() {
    fill_indexed<T>(ctx.outputs[0], [&](int64_t i) {
      uint32_t words[4];
      Philox::block(seed, offset + static_cast<uint64_t>(i), words);
      // Box-Muller; 1 - u keeps the logarithm's argument in (0, 1].
      const double u1 = 1.0 - Philox::to_unit53(words[0], words[1]);
      const double u2 = Philox::to_unit53(words[2], words[3]);
      return static_cast<T>(mean + std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
    });
  });
}

void randint_kernel(KernelContext& ctx) {
  const int64_t low = ctx.attrs.get<int64_t>("low");
  const auto range = static_cast<uint64_t>(ctx.attrs.get<int64_t>("high") - low);
  const uint64_t seed = seed_of(ctx.attrs), offset = offset_of(ctx.attrs);
  FLOW_DISPATCH_NUMERIC(ctx.outputs[0].dtype(), "randint", [&]<typename T>() {
    fill_indexed<T>(ctx.outputs[0], [&](int64_t i) {
      uint32_t words[4];
      Philox::block(seed, offset + static_cast<uint64_t>(i), words);
      const uint64_t bits = (static_cast<uint64_t>(words[0]) << 32) | words[1];
      return static_cast<T>(low + static_cast<int64_t>(bits % range));
    });
  });
}

void randperm_kernel(KernelContext& ctx) {
  const int64_t n = ctx.outputs[0].numel();
  const std::vector<int64_t> perm = random_permutation(n, seed_of(ctx.attrs), offset_of(ctx.attrs));
  FLOW_DISPATCH_NUMERIC(ctx.outputs[0].dtype(), "randperm", [&]<typename T>() {
    T* data = static_cast<T*>(ctx.outputs[0].data_ptr());
    for (int64_t i = 0; i < n; ++i) data[i] = static_cast<T>(perm[static_cast<size_t>(i)]);
  });
}

FLOW_REGISTER_KERNEL("empty", DeviceType::kCPU, all_dtypes(), empty_kernel);
FLOW_REGISTER_KERNEL("full", DeviceType::kCPU, all_dtypes(), full_kernel);
FLOW_REGISTER_KERNEL("arange", DeviceType::kCPU, numeric_dtypes(), arange_kernel);
FLOW_REGISTER_KERNEL("linspace", DeviceType::kCPU, numeric_dtypes(), linspace_kernel);
FLOW_REGISTER_KERNEL("eye", DeviceType::kCPU, all_dtypes(), eye_kernel);
FLOW_REGISTER_KERNEL("uniform", DeviceType::kCPU, floating_dtypes(), uniform_kernel);
FLOW_REGISTER_KERNEL("normal", DeviceType::kCPU, floating_dtypes(), normal_kernel);
FLOW_REGISTER_KERNEL("randint", DeviceType::kCPU, numeric_dtypes(), randint_kernel);
FLOW_REGISTER_KERNEL("randperm", DeviceType::kCPU, numeric_dtypes(), randperm_kernel);

}  // namespace
}  // namespace flow::cpu
