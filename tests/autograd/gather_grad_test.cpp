// gather's gradient op (gather_grad), which backward runs on the CPU: equal to zeros scattered-added
// at the index (repeated indices add up), along every dim; its own gradient gathers; its checks.
#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include "common/test_util.h"
#include "core/flow.h"

using flow::Tensor;
using flow::TensorList;

TEST(GatherGrad, BackwardAddsTheGradientAtTheIndex) {
  flow::manual_seed(14);
  for (int64_t dim : {0, 1, 2}) {
    SCOPED_TRACE(dim);
    const Tensor x = flow::randn({3, 4, 5}).requires_grad_();
    flow::Shape index_shape{3, 4, 5};
    index_shape[dim] = 7;  // more picks than entries: some indices repeat
    const Tensor index = flow::randint(0, x.size(dim), index_shape);
    const Tensor grad = flow::randn(index_shape);
    flow::gather(x, dim, index).backward(grad);
    const Tensor expected = flow::scatter_add(flow::zeros({3, 4, 5}), dim, index, grad);
    EXPECT_EQ(x.grad().tolist<float>(), expected.tolist<float>());
  }
  // An index narrower than the input in another dim, as a cross-entropy picks one class per row.
  const Tensor logits = flow::randn({4, 6}).requires_grad_();
  const Tensor target = flow::tensor<int64_t>({5, 0, 5, 2}, flow::Shape{4, 1});
  flow::sum(flow::gather(logits, 1, target) * 2.0).backward();
  const std::vector<float> want{0, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 2, 0, 0, 0};
  EXPECT_EQ(logits.grad().tolist<float>(), want);
}

// The first gradient of sum(gather(x) * w) with respect to x is gather_grad(w, index); its
// gradient with respect to w gathers.
TEST(GatherGrad, SecondOrderGathers) {
  flow::manual_seed(15);
  const Tensor index = flow::randint(0, 4, {3, 5});
  EXPECT_TRUE(flow::testing::gradcheck(
      [&index](const TensorList& in) {
        const Tensor picked = flow::gather(in[0] * in[0], 1, index);
        return flow::autograd::grad({flow::sum(picked * in[1])}, {in[0]}, {}, false, /*create_graph=*/true)[0];
      },
      {flow::testing::grad_input({3, 4}), flow::testing::grad_input({3, 5})}));
}

TEST(GatherGrad, ChecksItsArguments) {
  const Tensor index = flow::zeros({2, 3}, flow::kInt64);
  const auto call = [&](const Tensor& grad, const Tensor& idx, std::vector<int64_t> shape) {
    return flow::apply_one(flow::find_op("gather_grad"), {grad, idx}, flow::Attrs().set("dim", int64_t{1}).set("input_shape", flow::Shape(shape)));
  };
  EXPECT_THROW_MSG(call(flow::zeros({3, 2}), index, {2, 4}), "[gather_grad] grad (3,2) must have the shape of index (2,3)");
  EXPECT_THROW_MSG(call(flow::zeros({2, 3}), flow::zeros({2, 3}), {2, 4}), "[gather_grad] expected an int64 or int32 index tensor, got float32");
  EXPECT_THROW_MSG(call(flow::zeros({2, 3}), index, {1, 4}), "[gather_grad] index (2,3) is larger than input (1,4) in dimension 0");
}
