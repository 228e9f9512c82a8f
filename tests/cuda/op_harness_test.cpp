// The CUDA op harness, in the spirit of ggml's test-backend-ops:
// 1. a guard read from the op registry alone (it runs without a GPU, so CI enforces it): every op
//    with a CPU kernel has a CUDA kernel, or is on kCpuOnlyOps with the reason;
// 2. with a GPU, every sample case runs its op on CUDA and on the CPU and compares the outputs
//    and, for differentiable cases, the gradients autograd computes through the op's vjp (which
//    runs the gradient kernels on each device).
// A kernel ported to CUDA leaves kCpuOnlyOps and gets sample cases in sample_cases().
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "common/reference.h"
#include "common/test_util.h"
#include "core/flow.h"
#include "core/interpreter.h"
#include "core/ops/fused.h"

using flow::DType;
using flow::Shape;
using flow::Tensor;
using flow::TensorList;

namespace {

const flow::Device kCuda("cuda:0");

// Ops with a CPU kernel and, on purpose or for now, no CUDA kernel: one place, a reason each.
const std::map<std::string, std::string>& cpu_only_ops() {
  static const std::map<std::string, std::string> ops = {};
  return ops;
}

bool has_kernel(const flow::OpDef& op, flow::DeviceType device) {
  for (const auto& [key, kernel] : op.kernels) {
    if (key.first == device) return true;
  }
  return false;
}

TEST(CudaOpHarness, EveryCpuOpHasACudaKernelOrAListedReason) {
#ifndef FLOW_WITH_CUDA
  GTEST_SKIP() << "built without CUDA (the registry holds no CUDA kernels)";
#endif
  const std::vector<std::string> names = flow::registered_ops();
  const std::set<std::string> registered(names.begin(), names.end());
  for (const std::string& name : names) {
    const flow::OpDef& op = flow::find_op(name);
    const bool cpu = has_kernel(op, flow::DeviceType::kCPU), cuda = has_kernel(op, flow::DeviceType::kCUDA);
    const bool listed = cpu_only_ops().count(name) != 0;
    if (cpu && !cuda && !listed) {
      ADD_FAILURE() << "op " << name << " has a CPU kernel and no CUDA kernel: port it (core/kernels/cuda/) or add it to "
                    << "cpu_only_ops() with the reason";
    }
    if (listed && cuda) ADD_FAILURE() << "op " << name << " has a CUDA kernel now: remove it from cpu_only_ops()";
  }
  for (const auto& [name, reason] : cpu_only_ops()) {
    EXPECT_TRUE(registered.count(name)) << "cpu_only_ops() lists " << name << ", which is no registered op";
    EXPECT_FALSE(reason.empty()) << name;
  }
}

// One sample: `run` builds the op's call from its inputs (views, attributes) and returns the
// outputs to compare; inputs are CPU tensors, moved to CUDA for the other run.
struct OpCase {
  std::string op;  // the registered op the case exercises
  std::string label;
  TensorList inputs;
  std::function<TensorList(const TensorList&)> run;
  bool differentiable = false;  // floating inputs get gradients, compared too
  double rtol = 1e-5, atol = 1e-6;
};

Tensor random(const Shape& shape, DType dtype) { return flow::randn(shape).to(dtype); }
Tensor random_ints(const Shape& shape, int64_t low, int64_t high, DType dtype = flow::kInt64) {
  return flow::randint(low, high, shape).to(dtype);
}
// reduce_max / reduce_min over dims through the registry (flow::max and flow::min take all dims).
Tensor reduce_over(const char* op, const Tensor& input, const std::vector<int64_t>& dims) {
  return flow::apply_one(flow::find_op(op), {input}, flow::Attrs().set("dims", dims).set("keepdim", false));
}
// A step of a fused program reading operands (>= 0) or earlier steps (fused::step_arg).
flow::fused::Step step(std::string op, std::vector<int> args, flow::Attrs attrs = {}) {
  return {std::move(op), std::move(args), std::move(attrs)};
}
int result_of(int step) { return flow::fused::step_arg(step); }
flow::Attrs scalar_attr(double value) { return flow::Attrs().set("scalar", flow::Scalar(value)); }
flow::Attrs clamp_attrs(std::optional<double> min, std::optional<double> max) {
  return flow::Attrs()
      .set("has_min", min.has_value())
      .set("min", flow::Scalar(min.value_or(0)))
      .set("has_max", max.has_value())
      .set("max", flow::Scalar(max.value_or(0)));
}
flow::Attrs gelu_attrs(const char* approximate) { return flow::Attrs().set("approximate", std::string(approximate)); }

// fused_linear (no functional entry point) through the registry.
TensorList fused_linear(const TensorList& in, const flow::fused::Program& program, const Shape& shape, int64_t linear_inputs) {
  return flow::apply(flow::find_op("fused_linear"), in,
                     flow::Attrs().set("program", flow::fused::encode(program)).set("shape", shape).set("linear_inputs", linear_inputs));
}

// Every op a fused program can hold, over operands x (3,5,4), y (5,1) (a middle block), z (1) (one
// value) and c (bool, (3,5,4)); the outputs mix early and late steps.
flow::fused::Program every_fusable_op() {
  using flow::fused::Program;
  Program p;
  p.steps = {step("abs", {0}),                                             // 0
             step("add_scalar", {result_of(0)}, scalar_attr(0.5)),         // 1: positive
             step("log", {result_of(1)}),                                  // 2
             step("sqrt", {result_of(1)}),                                 // 3
             step("rsqrt", {result_of(1)}),                                // 4
             step("mul", {result_of(2), 1}),                               // 5
             step("sub", {result_of(5), result_of(3)}),                    // 6
             step("div", {result_of(6), result_of(4)}),                    // 7
             step("pow", {result_of(1), 2}),                               // 8
             step("maximum", {result_of(7), result_of(8)}),                // 9
             step("minimum", {result_of(9), 0}),                           // 10
             step("where", {3, result_of(10), result_of(7)}),              // 11
             step("sigmoid", {result_of(11)}),                             // 12
             step("silu", {0}),                                            // 13
             step("tanh", {result_of(13)}),                                // 14
             step("sin", {result_of(12)}),                                 // 15
             step("cos", {result_of(14)}),                                 // 16
             step("exp", {result_of(15)}),                                 // 17
             step("neg", {result_of(17)}),                                 // 18
             step("sign", {0}),                                            // 19
             step("relu", {0}),                                            // 20
             step("relu_grad", {result_of(16), 0}),                        // 21
             step("gelu", {0}, gelu_attrs("none")),                        // 22
             step("gelu", {0}, gelu_attrs("tanh")),                        // 23
             step("gelu_grad", {result_of(22), 0}, gelu_attrs("none")),    // 24
             step("gelu_grad", {result_of(23), 0}, gelu_attrs("tanh")),    // 25
             step("clamp", {0}, clamp_attrs(-0.5, 0.75)),                  // 26
             step("clamp", {0}, clamp_attrs(std::nullopt, 0.25)),          // 27
             step("sub_scalar", {result_of(26)}, scalar_attr(2)),          // 28
             step("rsub_scalar", {result_of(28)}, scalar_attr(3)),         // 29
             step("mul_scalar", {result_of(29)}, scalar_attr(-1.5)),       // 30
             step("div_scalar", {result_of(30)}, scalar_attr(4)),          // 31
             step("rdiv_scalar", {result_of(1)}, scalar_attr(2)),          // 32
             step("pow_scalar", {result_of(1)}, scalar_attr(1.5)),         // 33
             step("rpow_scalar", {result_of(26)}, scalar_attr(2)),         // 34
             step("add", {result_of(33), result_of(34)})};                 // 35
  p.outputs = {11, 18, 19, 20, 21, 24, 25, 27, 31, 32, 35};
  return p;
}

// Small integers as floating values: zeros and ties among them.
Tensor whole_numbers(const Shape& shape, DType dtype) { return random_ints(shape, -2, 3).to(dtype); }
// Looser bounds for float32 than for float64; 16-bit dtypes round each result once.
double rtol_for(DType dtype) { return dtype == flow::kFloat64 ? 1e-10 : dtype == flow::kFloat32 ? 1e-5 : 1e-2; }

std::vector<OpCase> sample_cases() {
  flow::manual_seed(40);
  std::vector<OpCase> cases;
  auto add = [&](std::string op, std::string label, TensorList inputs, std::function<TensorList(const TensorList&)> run,
                 bool differentiable, DType dtype) {
    const double tol = rtol_for(dtype);
    cases.push_back({std::move(op), std::move(label) + " " + flow::dtype_name(dtype), std::move(inputs), std::move(run),
                     differentiable, tol, tol});
  };
  for (DType dtype : {flow::kFloat32, flow::kFloat64}) {
    // layer_norm (and layer_norm_grad through its vjp): affine or not, one or two normalized dims.
    add("layer_norm", "affine (4,5,32)", {random({4, 5, 32}, dtype), random({32}, dtype), random({32}, dtype)},
        [](const TensorList& in) { return TensorList{flow::layer_norm(in[0], {32}, in[1], in[2])}; }, true, dtype);
    add("layer_norm", "plain (3,6,7) over 2 dims, transposed input", {random({3, 7, 6}, dtype)},
        [](const TensorList& in) { return TensorList{flow::layer_norm(in[0].transpose(1, 2), {6, 7})}; }, true, dtype);
    add("layer_norm", "wide rows (2,1000)", {random({2, 1000}, dtype), random({1000}, dtype), random({1000}, dtype)},
        [](const TensorList& in) { return TensorList{flow::layer_norm(in[0], {1000}, in[1], in[2])}; }, true, dtype);
    // softmax and log_softmax backward: softmax_grad / log_softmax_grad along inner and outer dims.
    for (int64_t dim : {0, 1, 2}) {
      add("softmax_grad", "softmax dim " + std::to_string(dim), {random({3, 300, 5}, dtype)},
          [dim](const TensorList& in) { return TensorList{flow::softmax(in[0], dim)}; }, true, dtype);
      add("log_softmax_grad", "log_softmax dim " + std::to_string(dim), {random({3, 300, 5}, dtype)},
          [dim](const TensorList& in) { return TensorList{flow::log_softmax(in[0], dim)}; }, true, dtype);
    }
    add("gelu_grad", "gelu erf, broadcast grad", {random({4, 33}, dtype)},
        [](const TensorList& in) { return TensorList{flow::gelu(in[0])}; }, true, dtype);
    add("gelu_grad", "gelu tanh on a transposed view", {random({33, 4}, dtype)},
        [](const TensorList& in) { return TensorList{flow::gelu(in[0].t(), "tanh")}; }, true, dtype);
    add("softplus", "beta 2, threshold 3", {random({5, 40}, dtype) * 4.0},
        [](const TensorList& in) { return TensorList{flow::softplus(in[0], 2.0, 3.0)}; }, false, dtype);
    add("clamp", "both bounds, strided", {random({6, 20}, dtype)},
        [](const TensorList& in) { return TensorList{flow::clamp(in[0].slice(1, 0, 20, 3), -0.5, 0.5)}; }, true, dtype);
    add("clamp", "min only", {random({64}, dtype)}, [](const TensorList& in) { return TensorList{flow::clamp(in[0], 0.1, std::nullopt)}; },
        true, dtype);
    add("sign", "with zeros", {whole_numbers({50}, dtype)}, [](const TensorList& in) { return TensorList{flow::sign(in[0])}; }, false,
        dtype);
    add("reduce_max", "over dims {0, 2}", {random({4, 6, 5}, dtype)},
        [](const TensorList& in) { return TensorList{reduce_over("reduce_max", in[0], {0, 2})}; }, true, dtype);
    add("reduce_min", "over all", {random({7, 9}, dtype)}, [](const TensorList& in) { return TensorList{flow::min(in[0])}; }, true, dtype);
    add("reduce_min", "over dim 1 with NaN", {flow::where(flow::gt(flow::randn({5, 8}), 1.0), flow::full({5, 8}, NAN), flow::randn({5, 8})).to(dtype)},
        [](const TensorList& in) { return TensorList{reduce_over("reduce_min", in[0], {1})}; }, false, dtype);
    add("reduce_prod", "over dim 1", {random({5, 6}, dtype)}, [](const TensorList& in) { return TensorList{flow::prod(in[0], {1})}; }, true,
        dtype);
    add("max_dim", "values and indices along dim 1", {random({4, 300, 3}, dtype)},
        [](const TensorList& in) {
          const auto result = flow::max(in[0], 1);
          return TensorList{result.values, result.indices};
        },
        true, dtype);
    add("min_dim", "keepdim along dim 0", {random({300, 4}, dtype)},
        [](const TensorList& in) {
          const auto result = flow::min(in[0], 0, true);
          return TensorList{result.values, result.indices};
        },
        true, dtype);
    add("argmin", "along dim 2", {random({3, 4, 257}, dtype)}, [](const TensorList& in) { return TensorList{flow::argmin(in[0], 2)}; },
        false, dtype);
    add("cumsum", "forward along dim 1 (vjp: reverse)", {random({4, 50, 3}, dtype)},
        [](const TensorList& in) { return TensorList{flow::cumsum(in[0], 1)}; }, true, dtype);
    add("index_select", "rows with repeats and a negative index", {random({6, 5}, dtype), flow::tensor<int64_t>({0, 5, -1, 2, 2})},
        [](const TensorList& in) { return TensorList{flow::index_select(in[0], 0, in[1])}; }, true, dtype);
    add("index_select", "inner dim, int32 index", {random({3, 8, 4}, dtype), flow::tensor<int32_t>({7, 0, 3})},
        [](const TensorList& in) { return TensorList{flow::index_select(in[0], 1, in[1])}; }, true, dtype);
    add("gather_grad", "gather backward with repeated indices", {random({4, 6}, dtype), random_ints({4, 9}, 0, 6)},
        [](const TensorList& in) { return TensorList{flow::gather(in[0], 1, in[1])}; }, true, dtype);
    add("cat", "three inputs along dim 1, one transposed", {random({2, 3, 4}, dtype), random({2, 1, 4}, dtype), random({4, 5, 2}, dtype)},
        [](const TensorList& in) { return TensorList{flow::cat({in[0], in[1], in[2].transpose(0, 2)}, 1)}; }, true, dtype);
    add("cat", "along dim 0 with an empty input", {random({2, 3}, dtype), random({0, 3}, dtype), random({1, 3}, dtype)},
        [](const TensorList& in) { return TensorList{flow::cat({in[0], in[1], in[2]}, 0)}; }, true, dtype);
    add("masked_fill", "broadcast mask", {random({3, 4, 5}, dtype), flow::gt(flow::randn({4, 1}), 0.0)},
        [](const TensorList& in) { return TensorList{flow::masked_fill(in[0], in[1], -1.5)}; }, true, dtype);
    add("tril", "diagonal -1, batched", {random({2, 5, 7}, dtype)}, [](const TensorList& in) { return TensorList{flow::tril(in[0], -1)}; },
        true, dtype);
    add("triu", "diagonal 2", {random({6, 4}, dtype)}, [](const TensorList& in) { return TensorList{flow::triu(in[0], 2)}; }, true, dtype);
  }
  for (DType dtype : {flow::kFloat32, flow::kFloat64}) {
    // fused_elementwise: every fusable op, broadcast operands and a bool condition.
    add("fused_elementwise", "every fusable op, broadcast operands",
        {random({3, 5, 4}, dtype), random({5, 1}, dtype), flow::rand({1}).to(dtype) + 0.5, flow::gt(flow::randn({3, 5, 4}), 0.0)},
        [](const TensorList& in) { return flow::fused::fused_elementwise(in, every_fusable_op(), {3, 5, 4}); }, false, dtype);
    // A program longer than the CUDA kernel's table (64 steps) runs step by step there.
    add("fused_elementwise", "100 steps", {random({3, 9}, dtype), random({9}, dtype)},
        [](const TensorList& in) {
          flow::fused::Program program{{step("add", {0, 1})}, {}};
          for (int s = 1; s < 100; ++s) {
            program.steps.push_back(s % 2 ? step("mul_scalar", {result_of(s - 1)}, scalar_attr(0.99)) : step("add", {result_of(s - 1), 1}));
          }
          program.outputs = {50, 99};
          return flow::fused::fused_elementwise(in, program, {3, 9});
        },
        false, dtype);
    // The in-place form: an SGD-like update whose destination is also an operand, read by a step
    // after the one writing it.
    add("fused_elementwise_inplace", "update reading its destination", {random({6, 7}, dtype), random({6, 7}, dtype), random({7}, dtype)},
        [](const TensorList& in) {
          Tensor param = in[0].clone(), scaled = flow::zeros_like(in[0]);
          const flow::fused::Program program{{step("mul_scalar", {2}, scalar_attr(0.1)), step("add", {1, result_of(0)}),
                                              step("sub", {0, result_of(1)}), step("mul", {result_of(2), 0})},
                                             {2, 3}};
          flow::fused::fused_elementwise_({param, scaled}, {param, in[1], in[2]}, program);
          return TensorList{param, scaled};
        },
        false, dtype);
    // fused_linear: with a bias and a residual operand, and without a bias; program outputs the
    // product itself too.
    add("fused_linear", "bias, relu(x w^T + b + residual), (2,3,20) x (17,20)",
        {random({2, 3, 20}, dtype), random({17, 20}, dtype), random({17}, dtype), random({2, 3, 17}, dtype)},
        [](const TensorList& in) {
          const flow::fused::Program program{{step("add", {0, 1}), step("relu", {result_of(0)})}, {1}};
          return fused_linear(in, program, Shape{2, 3, 17}, 3);
        },
        false, dtype);
    add("fused_linear", "no bias, gelu of the product and the product", {random({9, 33}, dtype), random({5, 33}, dtype)},
        [](const TensorList& in) {
          const flow::fused::Program program{{step("gelu", {0}, gelu_attrs("tanh")), step("mul_scalar", {0}, scalar_attr(1))}, {0, 1}};
          return fused_linear(in, program, Shape{9, 5}, 2);
        },
        false, dtype);
    // sparse_softmax_cross_entropy (and its gradient through the vjp): ignored rows, an ignore_index
    // that is a class, wide rows, a row of equal logits and one with -inf.
    add("sparse_softmax_cross_entropy", "ignore_index -100 on rows 1 and 4",
        {random({6, 37}, dtype), flow::tensor<int64_t>({3, -100, 0, 36, -100, 5})},
        [](const TensorList& in) { return TensorList{flow::sparse_softmax_cross_entropy(in[0], in[1], -100)}; }, true, dtype);
    add("sparse_softmax_cross_entropy", "ignore_index 2 (a class), 1000 classes",
        {random({4, 1000}, dtype) * 3.0, flow::tensor<int64_t>({2, 999, 2, 0})},
        [](const TensorList& in) { return TensorList{flow::sparse_softmax_cross_entropy(in[0], in[1], 2)}; }, true, dtype);
    add("sparse_softmax_cross_entropy", "equal logits; some -inf; all -inf (NaN)",
        {flow::tensor<double>({0, 0, 0, 0, 0, -INFINITY, 1, -INFINITY, 0.5, 2, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY},
                              Shape{3, 5})
             .to(dtype),
         flow::tensor<int64_t>({1, 4, 0})},
        [](const TensorList& in) { return TensorList{flow::sparse_softmax_cross_entropy(in[0], in[1], -1)}; }, false, dtype);
  }
  // float32 programs reading 16-bit operands (copy steps) and rounding an output to 16 bits; a
  // bfloat16 fused_linear (its product and epilogue in float32, rounded once).
  for (DType narrow : {flow::kBFloat16, flow::kFloat16}) {
    add("fused_elementwise", "float32 program, 16-bit operands, a rounded output",
        {random({4, 6}, flow::kFloat32), random({4, 6}, narrow), random({6}, narrow)},
        [narrow](const TensorList& in) {
          const flow::fused::Program program{{step("copy", {1}), step("copy", {2}), step("add", {0, result_of(0)}),
                                              step("mul", {result_of(2), result_of(1)}),
                                              step("copy", {result_of(3)}, flow::Attrs().set("dtype", flow::dtype_name(narrow)))},
                                             {3, 4}};
          return flow::fused::fused_elementwise(in, program, {4, 6});
        },
        false, narrow);
    add("fused_elementwise_inplace", "float32 update with a rounded copy", {random({5, 7}, flow::kFloat32), random({5, 7}, narrow)},
        [narrow](const TensorList& in) {
          Tensor param = in[0].clone(), rounded = flow::zeros(in[0].shape(), flow::TensorOptions(narrow).device(in[0].device()));
          const flow::fused::Program program{{step("copy", {1}), step("mul_scalar", {result_of(0)}, scalar_attr(0.01)),
                                              step("sub", {0, result_of(1)}),
                                              step("copy", {result_of(2)}, flow::Attrs().set("dtype", flow::dtype_name(narrow)))},
                                             {2, 3}};
          flow::fused::fused_elementwise_({param, rounded}, {param, in[1]}, program);
          return TensorList{param, rounded};
        },
        false, narrow);
    add("sparse_softmax_cross_entropy", "16-bit logits", {random({5, 50}, narrow), flow::tensor<int64_t>({0, 49, -100, 7, 7})},
        [](const TensorList& in) { return TensorList{flow::sparse_softmax_cross_entropy(in[0], in[1], -100)}; }, true, narrow);
  }
  add("fused_linear", "bfloat16, bias and residual",
      {random({6, 24}, flow::kBFloat16), random({10, 24}, flow::kBFloat16), random({10}, flow::kBFloat16), random({6, 10}, flow::kBFloat16)},
      [](const TensorList& in) {
        const flow::fused::Program program{{step("add", {0, 1}), step("relu", {result_of(0)})}, {1}};
        return fused_linear(in, program, Shape{6, 10}, 3);
      },
      false, flow::kBFloat16);
  // Integer, bool and 16-bit cases, forward only.
  add("clamp", "int64", {random_ints({40}, -50, 50)},
      [](const TensorList& in) { return TensorList{flow::clamp(in[0], -7, 9)}; }, false, flow::kInt64);
  add("sign", "int32", {random_ints({40}, -3, 3, flow::kInt32)}, [](const TensorList& in) { return TensorList{flow::sign(in[0])}; }, false,
      flow::kInt32);
  add("reduce_prod", "int64 wraps", {random_ints({3, 40}, -9, 9)}, [](const TensorList& in) { return TensorList{flow::prod(in[0], {1})}; },
      false, flow::kInt64);
  add("reduce_max", "int32 over dim 0", {random_ints({30, 3}, -100, 100, flow::kInt32)},
      [](const TensorList& in) { return TensorList{reduce_over("reduce_max", in[0], {0})}; }, false, flow::kInt32);
  add("argmin", "int64 with ties (the first wins)", {random_ints({5, 40}, 0, 3)},
      [](const TensorList& in) { return TensorList{flow::argmin(in[0], 1)}; }, false, flow::kInt64);
  add("cumsum", "int64 along dim 0", {random_ints({3, 20}, -5, 5)},
      [](const TensorList& in) { return TensorList{flow::cumsum(in[0], 0)}; }, false, flow::kInt64);
  add("one_hot", "5 classes", {random_ints({4, 3}, 0, 5)}, [](const TensorList& in) { return TensorList{flow::one_hot(in[0], 5)}; }, false,
      flow::kInt64);
  add("logical_and", "broadcast", {flow::gt(flow::randn({3, 4}), 0.0), flow::gt(flow::randn({4}), 0.0)},
      [](const TensorList& in) {
        return TensorList{flow::logical_and(in[0], in[1]), flow::logical_or(in[0], in[1]), flow::logical_xor(in[0], in[1])};
      },
      false, flow::kBool);
  add("logical_not", "float with zeros", {whole_numbers({30}, flow::kFloat32)},
      [](const TensorList& in) { return TensorList{flow::logical_not(in[0])}; }, false, flow::kFloat32);
  add("index_select", "bool", {flow::gt(flow::randn({5, 3}), 0.0), flow::tensor<int64_t>({4, 0})},
      [](const TensorList& in) { return TensorList{flow::index_select(in[0], 0, in[1])}; }, false, flow::kBool);
  for (DType dtype : {flow::kBFloat16, flow::kFloat16}) {
    add("gelu_grad", "gelu backward", {random({4, 33}, dtype)}, [](const TensorList& in) { return TensorList{flow::gelu(in[0])}; }, true,
        dtype);
    add("masked_fill", "16-bit", {random({4, 6}, dtype), flow::gt(flow::randn({4, 6}), 0.0)},
        [](const TensorList& in) { return TensorList{flow::masked_fill(in[0], in[1], 2.0)}; }, false, dtype);
    add("cat", "16-bit", {random({2, 3}, dtype), random({2, 2}, dtype)},
        [](const TensorList& in) { return TensorList{flow::cat({in[0], in[1]}, 1)}; }, false, dtype);
  }
  // Attention (flash_attention_grad through the vjp of every differentiable case): several key
  // tiles, masks that broadcast, a row that sees no key, strided views, dropout (seeded in the
  // call, so both devices read the same Philox counters).
  auto attention_cases = [&](DType dtype) {
    add("flash_attention", "causal (2,3,150,16), two key tiles", {random({2, 3, 150, 16}, dtype), random({2, 3, 150, 16}, dtype),
                                                                   random({2, 3, 150, 16}, dtype)},
        [](const TensorList& in) { return TensorList{flow::flash_attention(in[0], in[1], in[2], Tensor(), true)}; }, true, dtype);
    add("flash_attention_dropout", "dropout 0.3, causal, L 9 S 9", {random({2, 9, 8}, dtype), random({2, 9, 8}, dtype), random({2, 9, 8}, dtype)},
        [](const TensorList& in) {
          flow::manual_seed(5);
          return TensorList{flow::flash_attention(in[0], in[1], in[2], Tensor(), true, std::nullopt, 0.3)};
        },
        true, dtype);
  };
  for (DType dtype : {flow::kFloat32, flow::kFloat64}) {
    attention_cases(dtype);
    add("flash_attention_grad", "additive mask over keys (1,9), L 5 S 9 Ev 7, scale 0.3",
        {random({2, 5, 4}, dtype), random({2, 9, 4}, dtype), random({2, 9, 7}, dtype), random({1, 9}, dtype)},
        [](const TensorList& in) { return TensorList{flow::flash_attention(in[0], in[1], in[2], in[3].detach(), false, 0.3)}; }, true, dtype);
    add("flash_attention", "bool mask (4,6), row 2 sees no key",
        {random({1, 2, 4, 8}, dtype), random({1, 2, 6, 8}, dtype), random({1, 2, 6, 8}, dtype),
         flow::logical_and(flow::gt(flow::randn({4, 6}), 0.0), flow::gt(flow::tensor<int64_t>({1, 1, 0, 1}).reshape({4, 1}), 0))},
        [](const TensorList& in) { return TensorList{flow::flash_attention(in[0], in[1], in[2], in[3])}; }, true, dtype);
    add("flash_attention", "transposed-head query (copied), narrowed KV cache (read in place)",
        {random({2, 7, 3, 8}, dtype), random({2, 3, 20, 8}, dtype), random({2, 3, 20, 5}, dtype)},
        [](const TensorList& in) {
          return TensorList{flow::flash_attention(in[0].transpose(1, 2), in[1].slice(2, 0, 11), in[2].slice(2, 0, 11))};
        },
        true, dtype);
    add("flash_attention", "decode: one query, 33 keys", {random({3, 1, 16}, dtype), random({3, 33, 16}, dtype), random({3, 33, 16}, dtype)},
        [](const TensorList& in) { return TensorList{flow::flash_attention(in[0], in[1], in[2])}; }, true, dtype);
    // Random fills: both devices draw element i from the same Philox counter.
    add("uniform", "rand (5,37)", {flow::zeros({1})},
        [dtype](const TensorList& in) {
          flow::manual_seed(11);
          return TensorList{flow::rand({5, 37}, flow::TensorOptions(dtype).device(in[0].device()))};
        },
        false, dtype);
    add("normal", "randn (3,41)", {flow::zeros({1})},
        [dtype](const TensorList& in) {
          flow::manual_seed(12);
          return TensorList{flow::randn({3, 41}, flow::TensorOptions(dtype).device(in[0].device()))};
        },
        false, dtype);
    // sort and topk: ties keep input order, NaN is the largest value.
    add("sort", "ascending along dim 1 with ties", {whole_numbers({4, 37, 3}, dtype)},
        [](const TensorList& in) {
          const auto result = flow::sort(in[0], 1);
          return TensorList{result.values, result.indices};
        },
        true, dtype);
    add("sort", "descending, 1000 values (several tiles)", {random({1000}, dtype)},
        [](const TensorList& in) {
          const auto result = flow::sort(in[0], 0, true);
          return TensorList{result.values, result.indices};
        },
        true, dtype);
    add("sort", "descending with NaN and ties", {flow::where(flow::gt(flow::randn({6, 30}), 1.0), flow::full({6, 30}, NAN), whole_numbers({6, 30}, flow::kFloat32)).to(dtype)},
        [](const TensorList& in) {
          const auto result = flow::sort(in[0], -1, true);
          return TensorList{result.values, result.indices};
        },
        false, dtype);
    add("topk", "5 largest along dim 0", {random({40, 6}, dtype)},
        [](const TensorList& in) {
          const auto result = flow::topk(in[0], 5, 0);
          return TensorList{result.values, result.indices};
        },
        true, dtype);
    add("topk", "3 smallest with NaN and ties, transposed", {flow::where(flow::gt(flow::randn({20, 5}), 1.0), flow::full({20, 5}, NAN), whole_numbers({20, 5}, flow::kFloat32)).to(dtype)},
        [](const TensorList& in) {
          const auto result = flow::topk(in[0].t(), 3, 1, false);
          return TensorList{result.values, result.indices};
        },
        false, dtype);
    // multinomial: weights with zeros, draws with and without replacement.
    add("multinomial", "with replacement, (3,7) weights with zeros, 20 samples",
        {flow::cat({flow::ones({3, 1}), flow::rand({3, 6}) * flow::gt(flow::randn({3, 6}), 0.0).to(flow::kFloat32)}, 1).to(dtype)},
        [](const TensorList& in) {
          flow::manual_seed(15);
          return TensorList{flow::multinomial(in[0], 20, true)};
        },
        false, dtype);
    add("multinomial", "without replacement, (2,9), 5 samples; 1-d, 1 sample", {flow::rand({2, 9}).to(dtype)},
        [](const TensorList& in) {
          flow::manual_seed(16);
          return TensorList{flow::multinomial(in[0], 5, false), flow::multinomial(in[0][0], 1, false)};
        },
        false, dtype);
    add("binary_cross_entropy", "probabilities and soft targets", {flow::sigmoid(random({4, 33}, dtype)), flow::rand({4, 33}).to(dtype)},
        [](const TensorList& in) { return TensorList{flow::binary_cross_entropy_elementwise(in[0], in[1])}; }, true, dtype);
    add("binary_cross_entropy", "inputs at 0 and 1 (logs clamped at -100)",
        {flow::tensor<double>({0, 1, 0.5, 0, 1}).to(dtype), flow::tensor<double>({1, 0, 0.25, 0, 1}).to(dtype)},
        [](const TensorList& in) { return TensorList{flow::binary_cross_entropy_elementwise(in[0], in[1])}; }, false, dtype);
  }
  for (DType dtype : {flow::kBFloat16, flow::kFloat16}) {
    attention_cases(dtype);
    add("binary_cross_entropy", "16-bit", {flow::sigmoid(random({40}, flow::kFloat32)).to(dtype), flow::rand({40}).to(dtype)},
        [](const TensorList& in) { return TensorList{flow::binary_cross_entropy_elementwise(in[0], in[1])}; }, false, dtype);
  }
  for (DType dtype : {flow::kInt64, flow::kInt32, flow::kUInt8, flow::kFloat32}) {
    add("randint", "[low, 100) (7,9), low -5 (0 for uint8)", {flow::zeros({1})},
        [dtype](const TensorList& in) {
          flow::manual_seed(13);
          const int64_t low = dtype == flow::kUInt8 ? 0 : -5;
          return TensorList{flow::randint(low, 100, {7, 9}, flow::TensorOptions(dtype).device(in[0].device()))};
        },
        false, dtype);
    add("randperm", "n 200", {flow::zeros({1})},
        [dtype](const TensorList& in) {
          flow::manual_seed(14);
          return TensorList{flow::randperm(200, flow::TensorOptions(dtype).device(in[0].device()))};
        },
        false, dtype);
  }
  add("sort", "int32 descending along dim 0", {random_ints({50, 3}, -4, 4, flow::kInt32)},
      [](const TensorList& in) {
        const auto result = flow::sort(in[0], 0, true);
        return TensorList{result.values, result.indices};
      },
      false, flow::kInt32);
  add("topk", "int64 k 0 and k n", {random_ints({3, 8}, 0, 5)},
      [](const TensorList& in) {
        const auto none = flow::topk(in[0], 0), all = flow::topk(in[0], 8);
        return TensorList{none.values, none.indices, all.values, all.indices};
      },
      false, flow::kInt64);
  // Sources take the device from a marker input.
  add("eye", "3x5", {flow::zeros({1})},
      [](const TensorList& in) { return TensorList{flow::eye(3, 5, flow::TensorOptions().device(in[0].device()))}; }, false, flow::kFloat32);
  add("linspace", "9 steps", {flow::zeros({1})},
      [](const TensorList& in) { return TensorList{flow::linspace(-1.5, 2.0, 9, flow::TensorOptions().device(in[0].device()))}; }, false,
      flow::kFloat32);
  return cases;
}

TensorList on(const TensorList& inputs, const flow::Device& device) {
  TensorList moved;
  for (const Tensor& t : inputs) moved.push_back(t.to(device));
  return moved;
}

bool is_floating_dtype(DType dtype) { return flow::is_floating(dtype); }

// Inputs as leaves that require grad where they are floating (for differentiable cases).
TensorList leaves(const TensorList& inputs, bool differentiable) {
  TensorList result;
  for (const Tensor& t : inputs) {
    Tensor leaf = t.detach();
    if (differentiable && is_floating_dtype(t.dtype())) leaf.requires_grad_(true);
    result.push_back(leaf);
  }
  return result;
}

// Gradients of sum(out_i * w_i) over the floating outputs with fixed weights w_i.
TensorList gradients(const TensorList& inputs, const TensorList& outputs, const TensorList& weights) {
  Tensor loss;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].requires_grad()) continue;
    const Tensor term = flow::sum(outputs[i] * weights[i].to(outputs[i].device()).to(outputs[i].dtype()));
    loss = loss.defined() ? loss + term : term;
  }
  TensorList wanted;
  for (const Tensor& t : inputs) {
    if (t.requires_grad()) wanted.push_back(t);
  }
  if (!loss.defined() || wanted.empty()) return {};
  return flow::autograd::grad({loss}, wanted, {}, false, false, true);
}

// The CPU reference: in the case's dtypes where the CPU has the kernel, else in float32 (CUDA
// registers some 16-bit kernels the CPU lacks).
TensorList reference_inputs(const OpCase& c) {
  const flow::OpDef& op = flow::find_op(c.op);
  TensorList inputs;
  for (const Tensor& t : c.inputs) {
    const bool widen = flow::is_reduced_floating(t.dtype()) && op.kernels.count({flow::DeviceType::kCPU, t.dtype()}) == 0;
    inputs.push_back(widen ? t.to(flow::kFloat32) : t);
  }
  return inputs;
}

TEST(CudaOpHarness, SampleCasesNameOpsWithCudaKernels) {
#ifndef FLOW_WITH_CUDA
  GTEST_SKIP() << "built without CUDA (the registry holds no CUDA kernels)";
#endif
  for (const OpCase& c : sample_cases()) {
    EXPECT_TRUE(has_kernel(flow::find_op(c.op), flow::DeviceType::kCUDA)) << c.label << ": " << c.op << " has no CUDA kernel";
  }
}

// The CPU half of every case, which runs without a GPU: a malformed case (attributes, shapes) fails
// here rather than only on a machine with one.
TEST(CudaOpHarness, SampleCasesRunOnTheCpu) {
  for (const OpCase& c : sample_cases()) {
    SCOPED_TRACE(c.op + ": " + c.label);
    EXPECT_NO_THROW(c.run(leaves(reference_inputs(c), false)));
  }
}

TEST(CudaOpHarness, CudaMatchesCpuOnSampleCases) {
  REQUIRE_CUDA();
  for (const OpCase& c : sample_cases()) {
    SCOPED_TRACE(c.op + ": " + c.label);
    const TensorList cpu_inputs = leaves(reference_inputs(c), c.differentiable);
    const TensorList cuda_inputs = leaves(on(c.inputs, kCuda), c.differentiable);
    const TensorList expected = c.run(cpu_inputs), actual = c.run(cuda_inputs);
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < actual.size(); ++i) {
      EXPECT_EQ(actual[i].device(), kCuda);
      flow::testing::expect_close(actual[i].cpu(), expected[i], c.rtol, c.atol);
    }
    if (!c.differentiable) continue;
    TensorList weights;
    for (const Tensor& out : expected) weights.push_back(flow::randn(out.shape(), flow::kFloat64));
    const TensorList expected_grads = gradients(cpu_inputs, expected, weights), actual_grads = gradients(cuda_inputs, actual, weights);
    ASSERT_EQ(actual_grads.size(), expected_grads.size());
    for (size_t i = 0; i < actual_grads.size(); ++i) {
      ASSERT_EQ(actual_grads[i].defined(), expected_grads[i].defined());
      if (actual_grads[i].defined()) flow::testing::expect_close(actual_grads[i].cpu(), expected_grads[i], c.rtol * 10, c.atol * 10);
    }
  }
}

TEST(CudaOpHarness, ValueChecksNameTheOp) {
  REQUIRE_CUDA();
  EXPECT_THROW_MSG(flow::binary_cross_entropy_elementwise(flow::tensor<float>({0.5f, 1.5f}).to(kCuda), flow::tensor<float>({1, 0}).to(kCuda)),
                   "[binary_cross_entropy] all elements of input should be between 0 and 1");
  const Tensor weights = flow::tensor<float>({0.5f, 1, 0.5f, -1}, Shape{2, 2}).to(kCuda);
  EXPECT_THROW_MSG(flow::multinomial(weights, 1), "[multinomial] probability tensor contains either `inf`, `nan` or element < 0");
  EXPECT_THROW_MSG(flow::multinomial(weights, 2, true), "[multinomial] invalid multinomial distribution (encountering probability entry < 0)");
  EXPECT_THROW_MSG(flow::multinomial(flow::zeros({3}).to(kCuda), 1), "[multinomial] invalid multinomial distribution (sum of probabilities <= 0)");
}

TEST(CudaOpHarness, IndexErrorsNameTheOp) {
  REQUIRE_CUDA();
  const Tensor x = flow::randn({4, 3}).to(kCuda);
  EXPECT_THROW_MSG(flow::index_select(x, 0, flow::tensor<int64_t>({1, 4}).to(kCuda)), "[index_select] index 4 is out of bounds");
  EXPECT_THROW_MSG(flow::one_hot(flow::tensor<int64_t>({0, 7}).to(kCuda), 5), "[one_hot] class index 7 is out of range [0, 5)");
}

}  // namespace
