// Copies between layouts and dtypes: a transposed source (copied in tiles by the CPU kernel) gives
// the same elements as the element-order copy of the same values, for casts too.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/flow.h"

namespace {

// The elements of t (any strides, float32) in row-major order of its shape, read through its strides.
std::vector<float> elements(const flow::Tensor& t) {
  std::vector<float> out;
  const float* data = t.data_ptr<float>();
  std::vector<int64_t> index(static_cast<size_t>(t.dim()), 0);
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t offset = 0;
    for (int64_t d = 0; d < t.dim(); ++d) offset += index[static_cast<size_t>(d)] * t.stride(d);
    out.push_back(data[offset]);
    for (int64_t d = t.dim() - 1; d >= 0 && ++index[static_cast<size_t>(d)] == t.size(d); --d) index[static_cast<size_t>(d)] = 0;
  }
  return out;
}

void expect_copies_match(const flow::Tensor& source) {
  ASSERT_FALSE(source.is_contiguous());
  const std::vector<float> expected = elements(source);
  const flow::Tensor reference = flow::tensor<float>(expected).reshape(source.shape());
  for (flow::DType dtype : {flow::kBFloat16, flow::kFloat64}) {  // float32: the clone below
    SCOPED_TRACE(flow::dtype_name(dtype));
    const flow::Tensor copied = flow::to(source, dtype);
    ASSERT_TRUE(copied.is_contiguous());
    const std::vector<float> got = elements(flow::to(copied, flow::kFloat32));
    const std::vector<float> want = elements(flow::to(flow::to(reference, dtype), flow::kFloat32));
    EXPECT_EQ(got, want);
  }
  EXPECT_EQ(elements(flow::clone(source)), expected);
}

TEST(Copy, TransposedSourceMatchesElementOrder) {
  // Sizes that are not multiples of the 32-element tiles, and a sub-tile one.
  expect_copies_match(flow::randn({70, 45}).t());
  expect_copies_match(flow::randn({33, 257}).t());
  expect_copies_match(flow::randn({5, 40}).t());
}

// Transposes within one dtype (oneDNN's reorder where it has one) keep every value's bits:
// denormals, NaN and infinities included.
TEST(Copy, TransposesWithinADtypeKeepTheBits) {
  flow::Tensor source = flow::randn({70, 45});
  float* data = source.data_ptr<float>();
  data[3] = 1e-40f;  // a float32 denormal
  data[80] = std::numeric_limits<float>::quiet_NaN();
  data[81] = -std::numeric_limits<float>::infinity();
  data[200] = 9.2e-41f;  // a bfloat16 denormal (0x0001 << 16) once rounded
  for (flow::DType dtype : {flow::kFloat32, flow::kBFloat16, flow::kFloat64}) {
    SCOPED_TRACE(flow::dtype_name(dtype));
    for (const flow::Tensor& view : {flow::to(source, dtype).t(), flow::to(source.reshape({2, 35, 45}), dtype).transpose(1, 2)}) {
      const flow::Tensor copied = flow::clone(view);
      ASSERT_TRUE(copied.is_contiguous());
      const std::vector<float> got = elements(flow::to(copied, flow::kFloat32)), want = elements(flow::to(view, flow::kFloat32));
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        uint32_t got_bits, want_bits;
        std::memcpy(&got_bits, &got[i], 4);
        std::memcpy(&want_bits, &want[i], 4);
        EXPECT_EQ(got_bits, want_bits) << "element " << i;
      }
    }
  }
}

TEST(Copy, BatchedAndSlicedTransposesMatchElementOrder) {
  expect_copies_match(flow::randn({3, 40, 37}).transpose(1, 2));
  expect_copies_match(flow::randn({2, 3, 50, 34}).permute({1, 0, 3, 2}));
  expect_copies_match(flow::randn({64, 80}).slice(1, 8, 72).t());
}

}  // namespace
