#include <gtest/gtest.h>

#include <cmath>

#include "common/reference.h"
#include "common/test_util.h"

using flow::Tensor;
using flow::testing::expect_close;
using flow::testing::reference_binary;

namespace {
struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> reference;
};
std::vector<BinaryCase> arithmetic() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }, [](double a, double b) { return a + b; }},
      {"add_alpha", [](const Tensor& a, const Tensor& b) { return flow::add(a, b, 2.5); }, [](double a, double b) { return a + 2.5 * b; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }, [](double a, double b) { return a - b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }, [](double a, double b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }, [](double a, double b) { return a / b; }},
      {"pow", [](const Tensor& a, const Tensor& b) { return flow::pow(flow::abs(a) + 0.5, b); },
       [](double a, double b) { return std::pow(std::abs(a) + 0.5, b); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return flow::maximum(a, b); }, [](double a, double b) { return std::max(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return flow::minimum(a, b); }, [](double a, double b) { return std::min(a, b); }},
  };
}
}  // namespace

TEST(Binary, BroadcastingMatchesReference) {
  flow::manual_seed(1);
  for (const auto& c : arithmetic()) {
    for (flow::DType dtype : {flow::kFloat32, flow::kFloat64}) {
      for (const auto& [sa, sb] : flow::testing::broadcast_cases()) {
        Tensor a = flow::randn(sa, dtype), b = flow::rand(sb, dtype) + 0.5;
        SCOPED_TRACE(std::string(c.name) + " " + sa.str() + " " + sb.str());
        expect_close(c.op(a, b), reference_binary(a, b, c.reference), dtype == flow::kFloat32 ? 1e-6 : 1e-13, 1e-6);
        expect_close(c.op(b, a), reference_binary(b, a, c.reference), dtype == flow::kFloat32 ? 1e-6 : 1e-13, 1e-6);
      }
    }
  }
}

TEST(Binary, NonContiguousOperands) {
  Tensor base = flow::randn({8, 6});
  Tensor a = base.t();                      // (6, 8) strides (1, 6)
  Tensor b = flow::randn({8, 4}).slice(1, 0, 4, 3).t();  // (2, 8)... broadcast below
  Tensor c = flow::randn({6, 1}).expand({6, 8});
  expect_close(a * c, reference_binary(a, c, [](double x, double y) { return x * y; }));
  expect_close(a.slice(0, 0, 2) - b, reference_binary(a.slice(0, 0, 2), b, [](double x, double y) { return x - y; }));
}

TEST(Binary, IntegerArithmeticAndPromotion) {
  auto i = flow::tensor<int64_t>({7, -8, 9});
  auto j = flow::tensor<int32_t>({2, 3, -4});
  EXPECT_EQ((i + j).dtype(), flow::kInt64);
  EXPECT_EQ((i * j).tolist<int64_t>(), (std::vector<int64_t>{14, -24, -36}));
  EXPECT_EQ((i / j).dtype(), flow::kFloat32);  // true division
  EXPECT_NEAR((i / j).tolist<float>()[0], 3.5f, 1e-6);
  EXPECT_EQ(flow::pow(i, flow::tensor<int64_t>({2, 3, 0})).tolist<int64_t>(), (std::vector<int64_t>{49, -512, 1}));
  EXPECT_EQ((i + 1.5).dtype(), flow::kFloat32);
  EXPECT_EQ((i * 2).dtype(), flow::kInt64);
  EXPECT_EQ((flow::ones({2}, flow::kFloat64) + i.slice(0, 0, 2)).dtype(), flow::kFloat64);
  EXPECT_EQ((flow::ones({1}, flow::kUInt8) + flow::ones({1}, flow::kInt8)).dtype(), flow::kInt32);
}

TEST(Binary, ScalarForms) {
  auto x = flow::tensor<double>({1, 2, 4});
  EXPECT_EQ((x + 1).tolist<double>(), (std::vector<double>{2, 3, 5}));
  EXPECT_EQ((1 - x).tolist<double>(), (std::vector<double>{0, -1, -3}));
  EXPECT_EQ((x - 1).tolist<double>(), (std::vector<double>{0, 1, 3}));
  EXPECT_EQ((2 * x).tolist<double>(), (std::vector<double>{2, 4, 8}));
  EXPECT_EQ((x / 2).tolist<double>(), (std::vector<double>{0.5, 1, 2}));
  EXPECT_EQ((8 / x).tolist<double>(), (std::vector<double>{8, 4, 2}));
  EXPECT_EQ(flow::pow(x, 2).tolist<double>(), (std::vector<double>{1, 4, 16}));
  EXPECT_EQ(flow::pow(2, x).tolist<double>(), (std::vector<double>{2, 4, 16}));
  EXPECT_EQ(x.pow(0.5).tolist<double>()[1], std::sqrt(2.0));
}

TEST(Binary, ComparisonsLogicalWhere) {
  auto a = flow::tensor<float>({1, 2, 3, NAN});
  auto b = flow::tensor<float>({3, 2, 1, NAN});
  EXPECT_EQ(flow::eq(a, b).tolist<bool>(), (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(flow::ne(a, b).tolist<bool>(), (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ(flow::lt(a, b).tolist<bool>(), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(flow::ge(a, 2).tolist<bool>(), (std::vector<bool>{false, true, true, false}));
  EXPECT_EQ(flow::gt(flow::tensor<int64_t>({0, 1}), 0.5).tolist<bool>(), (std::vector<bool>{false, true}));
  auto t = flow::tensor<bool>({true, false, true});
  auto f = flow::tensor<int32_t>({0, 0, 5});
  EXPECT_EQ(flow::logical_and(t, f).tolist<bool>(), (std::vector<bool>{false, false, true}));
  EXPECT_EQ(flow::logical_or(t, f).tolist<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(flow::logical_xor(t, f).tolist<bool>(), (std::vector<bool>{true, false, false}));
  auto w = flow::where(flow::tensor<bool>({true, false}, flow::Shape{2, 1}), flow::arange(3), flow::full({}, -1));
  EXPECT_EQ(w.shape(), (flow::Shape{2, 3}));
  EXPECT_EQ(w.tolist<int64_t>(), (std::vector<int64_t>{0, 1, 2, -1, -1, -1}));
  EXPECT_EQ(flow::where(t, flow::ones({3}), 7).tolist<float>(), (std::vector<float>{1, 7, 1}));
  EXPECT_TRUE(std::isnan(flow::maximum(a, b).tolist<float>()[3]));
}

TEST(Binary, Allclose) {
  auto a = flow::tensor<float>({1, 2, NAN});
  EXPECT_FALSE(flow::allclose(a, a));
  EXPECT_TRUE(flow::allclose(a, a, 1e-5, 1e-8, true));
  EXPECT_TRUE(flow::allclose(flow::ones({2, 2}), flow::ones({2}) + 1e-7));
  EXPECT_FALSE(flow::allclose(flow::ones({2}), flow::ones({2}) * 1.01));
}

TEST(Binary, Errors) {
  EXPECT_THROW_MSG(flow::zeros({2, 3}) + flow::zeros({4}), "[add] shapes (2,3) and (4,) cannot be broadcast together");
  EXPECT_THROW_MSG(flow::zeros({3}) * flow::zeros({2, 2}), "[mul] shapes (3,) and (2,2) cannot be broadcast");
  EXPECT_THROW_MSG(flow::where(flow::ones({2}), flow::ones({2}), flow::ones({2})), "[where] condition must be a bool tensor");
  EXPECT_THROW_MSG(flow::sub(flow::tensor<bool>({true}), flow::tensor<bool>({true})), "[sub] subtraction of bool tensors");
  EXPECT_THROW_MSG(flow::apply(flow::find_op("add"), {flow::zeros({1}), flow::zeros({1}, flow::kFloat64)}),
                   "[add] expected inputs of one dtype, got float32 and float64");
}
