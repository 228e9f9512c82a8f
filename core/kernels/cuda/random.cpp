// Host side of random.cu: uniform, normal and randint on CUDA, drawing element i from the Philox
// counter the CPU kernel reads for it (the same values for the same seed), and randperm.
#include <cuda_runtime.h>

#include <vector>

#include "core/kernels/cuda/host.h"
#include "core/op.h"
#include "core/random.h"

namespace flow::cuda {
namespace {

uint64_t seed_of(const Attrs& attrs) { return static_cast<uint64_t>(attrs.get<int64_t>("seed")); }
uint64_t offset_of(const Attrs& attrs) { return static_cast<uint64_t>(attrs.get<int64_t>("offset")); }

void uniform_kernel(KernelContext& ctx) {
  Tensor& out = ctx.outputs[0];
  set_device(out, "rand");
  check(random_uniform(scalar_type(out.dtype(), "rand"), out.numel(), out.data_ptr(), ctx.attrs.get<double>("low"),
                       ctx.attrs.get<double>("high"), seed_of(ctx.attrs), offset_of(ctx.attrs)),
        "rand");
}

void normal_kernel(KernelContext& ctx) {
  Tensor& out = ctx.outputs[0];
  set_device(out, "randn");
  check(random_normal(scalar_type(out.dtype(), "randn"), out.numel(), out.data_ptr(), ctx.attrs.get<double>("mean"),
                      ctx.attrs.get<double>("std"), seed_of(ctx.attrs), offset_of(ctx.attrs)),
        "randn");
}

void randint_kernel(KernelContext& ctx) {
  Tensor& out = ctx.outputs[0];
  set_device(out, "randint");
  const int64_t low = ctx.attrs.get<int64_t>("low");
  const auto range = static_cast<uint64_t>(ctx.attrs.get<int64_t>("high") - low);
  check(random_int(scalar_type(out.dtype(), "randint"), out.numel(), out.data_ptr(), low, range, seed_of(ctx.attrs), offset_of(ctx.attrs)),
        "randint");
}

// Fisher-Yates is a chain of n dependent swaps, which one device thread would run far slower than
// the host does: the permutation is computed here, exactly as the CPU kernel computes it, then
// copied to the device and converted to the output's dtype there.
void randperm_kernel(KernelContext& ctx) {
  Tensor& out = ctx.outputs[0];
  set_device(out, "randperm");
  const int64_t n = out.numel();
  if (n == 0) return;
  const std::vector<int64_t> perm = random_permutation(n, seed_of(ctx.attrs), offset_of(ctx.attrs));
  Tensor positions = out.dtype() == kInt64 ? out : make_tensor({n}, kInt64, out.device());
  if (cudaMemcpy(positions.data_ptr(), perm.data(), sizeof(int64_t) * perm.size(), cudaMemcpyHostToDevice) != cudaSuccess) {
    fail("randperm", "CUDA copy failed: ", cudaGetErrorString(cudaGetLastError()));
  }
  if (out.dtype() == kInt64) return;
  Geometry line;
  line.ndim = 1;
  line.sizes[0] = n;
  Operand to{out.data_ptr(), {1}}, from{positions.data_ptr(), {1}};
  check(cast(ScalarType::kInt64, scalar_type(out.dtype(), "randperm"), line, n, to, from), "randperm");
}

FLOW_REGISTER_KERNEL("uniform", DeviceType::kCUDA, floating_dtypes(), uniform_kernel);
FLOW_REGISTER_KERNEL("normal", DeviceType::kCUDA, floating_dtypes(), normal_kernel);
FLOW_REGISTER_KERNEL("randint", DeviceType::kCUDA, numeric_dtypes(), randint_kernel);
FLOW_REGISTER_KERNEL("randperm", DeviceType::kCUDA, numeric_dtypes(), randperm_kernel);

}  // namespace
}  // namespace flow::cuda
