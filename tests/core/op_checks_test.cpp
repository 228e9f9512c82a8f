// Every op's meta inference rejects every invalid input by itself: checked_infer is what eager,
// Graph and oneflow_lite call, and once it returns, the op's CPU kernel runs safely on tensors of
// those metas. The property test feeds every registered op malformed inputs and attributes.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <sstream>

#include "common/test_util.h"
#include "core/flow.h"
#include "core/interpreter.h"
#include "core/ops/fused.h"
#include "core/ops/optimizer_update.h"

namespace {

using flow::Attrs;
using flow::AttrType;
using flow::Shape;
using flow::TensorMeta;

TensorMeta meta(Shape shape, flow::DType dtype = flow::kFloat32) { return {std::move(shape), dtype, flow::kCPU}; }

Attrs pool_attrs(std::vector<int64_t> kernel, std::vector<int64_t> stride, std::vector<int64_t> padding) {
  return Attrs().set("kernel_size", kernel).set("stride", stride).set("padding", padding);
}

Attrs conv_attrs(std::vector<int64_t> stride, std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups = 1) {
  return Attrs().set("stride", stride).set("padding", padding).set("dilation", dilation).set("groups", groups);
}

std::vector<TensorMeta> infer(const std::string& op, const std::vector<TensorMeta>& inputs, const Attrs& attrs) {
  return flow::checked_infer(flow::find_op(op), inputs, attrs);
}

TEST(OpChecks, PoolingOutputSizeFloorsLikePyTorch) {
  // The stride defaults to the kernel: (3 - 5) / 5 + 1 truncates to 1 in C++; PyTorch floors to 0 and refuses.
  EXPECT_THROW_MSG(flow::max_pool2d(flow::randn({1, 1, 3, 4}), {5, 5}),
                   "[max_pool2d] given input size: (1x3x4). Calculated output size: (1x0x0). Output size is too small");
  EXPECT_THROW_MSG(flow::max_pool2d(flow::randn({1, 1, 3, 4}), {5, 5}, {1, 1}), "Calculated output size: (1x-1x0)");
  EXPECT_THROW_MSG(flow::avg_pool2d(flow::randn({1, 1, 3, 4}), {5, 5}), "Output size is too small");
  EXPECT_EQ(flow::max_pool2d(flow::randn({1, 1, 5, 5}), {5, 5}).shape(), (Shape{1, 1, 1, 1}));
  EXPECT_EQ(flow::max_pool2d(flow::randn({1, 1, 6, 7}), {2, 3}, {2, 2}, {1, 1}).shape(), (Shape{1, 1, 4, 4}));
}

TEST(OpChecks, ConvolutionOutputSizeFloorsLikePyTorch) {
  EXPECT_THROW_MSG(flow::conv2d(flow::zeros({1, 1, 3, 4}), flow::zeros({1, 1, 5, 5})),
                   "[conv2d] calculated padded input size per channel: (3 x 4). Kernel size: (5 x 5). Kernel size can't be greater");
  EXPECT_THROW_MSG(flow::conv2d(flow::zeros({1, 1, 3, 3}), flow::zeros({1, 1, 2, 2}), flow::Tensor(), {1, 1}, {0, 0}, {3, 3}),
                   "Kernel size: (4 x 4)");
  EXPECT_EQ(flow::conv2d(flow::zeros({1, 1, 5, 5}), flow::zeros({1, 1, 5, 5})).shape(), (Shape{1, 1, 1, 1}));
}

TEST(OpChecks, PoolingInferRefusesWrongRanksByItself) {
  // oneflow_lite calls inference directly; a wrong rank used to read past the shape.
  EXPECT_THROW_MSG(infer("max_pool2d", {meta({4, 4})}, pool_attrs({2, 2}, {2, 2}, {0, 0})), "[max_pool2d] expected 4-d input");
  EXPECT_THROW_MSG(infer("avg_pool2d", {meta({1, 1, 4, 4})}, pool_attrs({2}, {2, 2}, {0, 0})), "[avg_pool2d] kernel_size must have 2 values");
  EXPECT_THROW_MSG(infer("max_pool2d_inference", {meta({1, 0, 4, 4})}, pool_attrs({2, 2}, {2, 2}, {0, 0})),
                   "expected input with non-zero channels, height and width");
  EXPECT_THROW_MSG(infer("max_pool2d", {meta({1, 1, 4, 4}, flow::kInt64)}, pool_attrs({2, 2}, {2, 2}, {0, 0})),
                   "[max_pool2d] expected a floating point input, got int64");
}

TEST(OpChecks, ConvolutionInferRefusesBadAttributesBeforeOneDnnSeesThem) {
  const std::vector<TensorMeta> in{meta({1, 2, 5, 5}), meta({3, 2, 3, 3})};
  EXPECT_THROW_MSG(infer("conv2d", in, conv_attrs({1, 1}, {0, 0}, {0, 1})), "[conv2d] dilation must be >= 1, got (0,1)");
  EXPECT_THROW_MSG(infer("conv2d", in, conv_attrs({0, 1}, {0, 0}, {1, 1})), "[conv2d] stride must be >= 1");
  EXPECT_THROW_MSG(infer("conv2d", in, conv_attrs({1, 1}, {-1, 0}, {1, 1})), "[conv2d] padding must be >= 0");
  EXPECT_THROW_MSG(infer("conv2d", in, conv_attrs({1, 1, 1}, {0, 0}, {1, 1})), "[conv2d] stride must have 2 values, got 3");
  EXPECT_THROW_MSG(infer("conv2d", in, conv_attrs({1, 1}, {0, 0}, {1, 1}, 0)), "[conv2d] groups 0 must divide");
  EXPECT_THROW_MSG(infer("conv2d", in, conv_attrs({int64_t{1} << 40, 1}, {0, 0}, {1, 1})), "[conv2d] stride must be <= 2147483648");
  EXPECT_THROW_MSG(infer("conv2d", {meta({1, 2, 5, 5}), meta({3, 2, 3, 3}), meta({3}, flow::kFloat64)}, conv_attrs({1, 1}, {0, 0}, {1, 1})),
                   "[conv2d] bias has dtype float64 but input has float32");
  // The eager wrapper reaches the same checks (the dilated-convolution descriptor error of oneDNN).
  EXPECT_THROW_MSG(flow::conv2d(flow::zeros({1, 2, 5, 5}), flow::zeros({3, 2, 3, 3}), flow::Tensor(), {1, 1}, {0, 0}, {0, 0}),
                   "[conv2d] dilation must be >= 1");
  EXPECT_EQ(infer("conv2d", in, conv_attrs({2, 2}, {1, 1}, {1, 1})).at(0).shape, (Shape{1, 3, 3, 3}));
}

TEST(OpChecks, GradientOpsCheckTheirShapeAttributesAgainstTheirInputs) {
  const Attrs conv = conv_attrs({1, 1}, {0, 0}, {1, 1});
  // conv2d((1,2,5,5), (3,2,3,3)) gives (1,3,3,3).
  EXPECT_EQ(infer("conv2d_grad_input", {meta({1, 3, 3, 3}), meta({3, 2, 3, 3})}, Attrs(conv).set("input_shape", Shape{1, 2, 5, 5}))
                .at(0)
                .shape,
            (Shape{1, 2, 5, 5}));
  EXPECT_THROW_MSG(infer("conv2d_grad_input", {meta({1, 3, 3, 3}), meta({3, 2, 3, 3})}, Attrs(conv).set("input_shape", Shape{1, 2, 9, 5})),
                   "[conv2d_grad_input] grad (1,3,3,3) does not match the forward output (1,3,7,3)");
  EXPECT_THROW_MSG(infer("conv2d_grad_input", {meta({1, 3, 3, 3}), meta({3, 2, 3, 3})}, Attrs(conv).set("input_shape", Shape{1, 2, 5})),
                   "input_shape must have 4 dims");
  EXPECT_THROW_MSG(infer("conv2d_grad_weight", {meta({1, 3, 3, 3}), meta({1, 2, 5, 5})}, Attrs(conv).set("weight_shape", Shape{4, 2, 3, 3})),
                   "[conv2d_grad_weight] grad (1,3,3,3) does not match the forward output (1,4,3,3)");
  const Attrs pool = pool_attrs({2, 2}, {2, 2}, {0, 0});
  EXPECT_THROW_MSG(infer("max_pool2d_grad", {meta({1, 1, 2, 2}), meta({1, 1, 2, 2}, flow::kInt32)}, Attrs(pool).set("input_shape", Shape{1, 1, 4, 4})),
                   "[max_pool2d_grad] indices must be int64");
  EXPECT_THROW_MSG(infer("avg_pool2d_grad", {meta({1, 1, 2, 2})}, Attrs(pool).set("input_shape", Shape{1, 1, 8, 8})),
                   "[avg_pool2d_grad] grad (1,1,2,2) does not match the forward output (1,1,4,4)");
  EXPECT_THROW_MSG(infer("slice_grad", {meta({2})}, Attrs().set("input_shape", Shape{5}).set("dim", 0).set("start", 0).set("end", 5).set("step", 1)),
                   "[slice_grad] grad (2,) does not match the slice (5,)");
  EXPECT_THROW_MSG(infer("layer_norm_grad", {meta({2, 3}), meta({2, 3}), meta({3}), meta({2})}, Attrs().set("normalized_ndim", 1).set("eps", 1e-5)),
                   "[layer_norm_grad] mean should have shape (2,), got (3,)");
  EXPECT_THROW_MSG(infer("batch_norm_train_grad", {meta({2, 3}), meta({3}), meta({3}), meta({2, 3}), meta({3}), meta({4})}, Attrs().set("eps", 1e-5)),
                   "[batch_norm] invstd should have shape (3,)");
}

TEST(OpChecks, SchemaChecksComeFirst) {
  EXPECT_THROW_MSG(infer("relu", {meta({2}), meta({2})}, {}), "[relu] expected 1 inputs, got 2");
  EXPECT_THROW_MSG(infer("conv2d", {meta({1}), meta({1}), meta({1}), meta({1})}, {}), "[conv2d] expected 1 to 3 inputs, got 4");
  EXPECT_THROW_MSG(infer("cat", {}, Attrs().set("dim", 0)), "[cat] expected 1 to 1048576 inputs, got 0");
  EXPECT_THROW_MSG(infer("conv2d", {meta({1, 2, 5, 5}), meta({3, 2, 3, 3})}, {}), "[conv2d] missing attribute 'stride'");
  EXPECT_THROW_MSG(infer("conv2d", {meta({1, 2, 5, 5}), meta({3, 2, 3, 3})}, conv_attrs({1, 1}, {0, 0}, {1, 1}).set("groups", 1.0)),
                   "[conv2d] attribute 'groups' must be of type int, got double");
  EXPECT_THROW_MSG(infer("relu", {meta({2, -1})}, {}), "[relu] input 0 has a negative dimension in shape (2,-1)");
  EXPECT_THROW_MSG(infer("relu", {meta({int64_t{1} << 40, 0, int64_t{1} << 40})}, {}), "has dims whose product overflows int64");
  EXPECT_THROW_MSG(infer("add", {meta({2}), {Shape{2}, flow::kFloat32, flow::Device("cuda:0")}}, {}), "[add] expected all tensors on the same device");
  EXPECT_THROW_MSG(infer("exp", {meta({2}, flow::kInt64)}, {}), "[exp] no cpu kernel for dtype int64");
}

TEST(OpChecks, AttributeValuesAreCheckedWhereTheOpIsDefined) {
  EXPECT_THROW_MSG(infer("cat", {meta({2, 3}), meta({2, 3})}, Attrs().set("dim", 2)), "[cat] dim 2 out of range");
  EXPECT_THROW_MSG(infer("softmax", {meta({2, 3})}, Attrs().set("dim", -1)), "[softmax] dim -1 out of range");
  EXPECT_THROW_MSG(infer("argmax", {meta({2, 3})}, Attrs().set("dim", 5).set("keepdim", false)), "[argmax] dim 5 out of range");
  EXPECT_THROW_MSG(infer("reduce_sum", {meta({2, 3})}, Attrs().set("dims", std::vector<int64_t>{1, 0}).set("keepdim", false)),
                   "[reduce_sum] dims must be sorted and unique");
  EXPECT_THROW_MSG(infer("index_select", {meta({}), meta({3}, flow::kInt64)}, Attrs().set("dim", 0)), "a 0-d input takes one index, got 3");
  EXPECT_THROW_MSG(infer("scatter", {meta({2}), meta({2}, flow::kInt64), meta({2})}, Attrs().set("dim", 0).set("reduce", "mul")),
                   "[scatter] reduce must be 'none' or 'add'");
  EXPECT_THROW_MSG(infer("full", {}, Attrs().set("shape", Shape{2}).set("dtype", flow::kInt32).set("device", flow::kCPU).set("value", flow::Scalar(1e10))),
                   "[full] value 1e+10 cannot be converted to type int32 without overflow");
  EXPECT_THROW_MSG(infer("add_scalar", {meta({2}, flow::kUInt8)}, Attrs().set("scalar", flow::Scalar(1000))), "cannot be converted to type uint8");
  EXPECT_THROW_MSG(infer("randint", {},
                         Attrs().set("shape", Shape{2}).set("dtype", flow::kInt64).set("device", flow::kCPU).set("low", INT64_MIN).set("high", INT64_MAX).set("seed", 0).set("offset", 0)),
                   "[randint] the range");
  EXPECT_THROW_MSG(infer("arange", {},
                         Attrs().set("shape", Shape{3}).set("dtype", flow::kInt64).set("device", flow::kCPU).set("start", flow::Scalar(INT64_MAX)).set("step", flow::Scalar(1))),
                   "[arange] the last value of 3 steps of 1 from");
  EXPECT_THROW_MSG(infer("eye", {}, Attrs().set("shape", Shape{3}).set("dtype", flow::kFloat32).set("device", flow::kCPU)), "[eye] expected a 2-d shape");
  EXPECT_THROW_MSG(infer("gelu", {meta({2})}, Attrs().set("approximate", "erf")), "[gelu] approximate must be 'none' or 'tanh'");
  EXPECT_THROW_MSG(infer("fused_elementwise", {meta({2})}, Attrs().set("program", "relu|x|;out|0").set("shape", Shape{2})),
                   "[fused_elementwise] malformed number");
  EXPECT_THROW_MSG(infer("fused_elementwise", {meta({2})}, Attrs().set("program", "gelu|0|approximate=t:erf;out|0").set("shape", Shape{2})),
                   "[gelu] approximate must be 'none' or 'tanh'");
}

TEST(OpChecks, IntegerArithmeticWrapsInsteadOfOverflowing) {
  const auto big = flow::tensor<int64_t>({INT64_MAX, INT64_MIN});
  EXPECT_EQ((big + big).tolist<int64_t>(), (std::vector<int64_t>{-2, 0}));
  EXPECT_EQ(flow::neg(big).tolist<int64_t>(), (std::vector<int64_t>{-INT64_MAX, INT64_MIN}));
  EXPECT_EQ(flow::sum(big).item<int64_t>(), -1);
  EXPECT_EQ(flow::apply_one(flow::find_op("div"), {big, flow::tensor<int64_t>({-1, -1})}).tolist<int64_t>(),
            (std::vector<int64_t>{-INT64_MAX, INT64_MIN}));
}

// ---- The property test -------------------------------------------------------------------------

// A call as inference sees it.
struct Call {
  std::vector<TensorMeta> inputs;
  Attrs attrs;
};

// Records every op call (forwarding it to eager) so that valid calls seed the mutations.
class RecordingInterpreter final : public flow::Interpreter {
 public:
  flow::TensorList apply(const flow::OpDef& op, const flow::TensorList& inputs, const Attrs& attrs) override {
    Call call{{}, attrs};
    for (const auto& t : inputs) call.inputs.push_back({t.shape(), t.dtype(), t.device()});
    calls[op.name].push_back(std::move(call));
    return eager.apply(op, inputs, attrs);
  }
  std::map<std::string, std::vector<Call>> calls;
  flow::EagerInterpreter eager;
};

// Valid calls of the ops whose arguments random generation rarely gets right (windows, channel
// counts, gradient shapes, programs).
std::map<std::string, std::vector<Call>> valid_calls() {
  using flow::Tensor;
  RecordingInterpreter recorder;
  flow::InterpreterGuard guard(&recorder);
  auto apply = [](const char* op, const flow::TensorList& inputs, const Attrs& attrs) { return flow::apply(flow::find_op(op), inputs, attrs); };
  for (flow::DType dtype : {flow::kFloat32, flow::kFloat64}) {
    const flow::TensorOptions options(dtype);
    const Tensor x = flow::randn({2, 4, 7, 6}, options), w = flow::randn({6, 2, 3, 2}, options), b = flow::randn({6}, options);
    const Tensor y = flow::conv2d(x, w, b, {2, 1}, {1, 0}, {1, 2}, 2);
    flow::conv_transpose2d(y, w, Tensor(), {2, 1}, {1, 0}, {1, 0}, {1, 2}, 2);
    const Attrs conv = conv_attrs({2, 1}, {1, 0}, {1, 2}, 2);
    apply("conv2d_grad_weight", {y, x}, Attrs(conv).set("weight_shape", w.shape()));
    const Attrs pool = pool_attrs({3, 2}, {2, 1}, {1, 1});
    const flow::TensorList pooled = apply("max_pool2d", {x}, pool);
    apply("max_pool2d_inference", {x}, pool);
    apply("max_pool2d_grad", {pooled[0], pooled[1]}, Attrs(pool).set("input_shape", x.shape()));
    const Tensor averaged = flow::avg_pool2d(x, {3, 2}, {2, 1}, {1, 1});
    apply("avg_pool2d_grad", {averaged}, Attrs(pool).set("input_shape", x.shape()));
    const Tensor channel = flow::rand({4}, options) + 0.5;
    flow::batch_norm_eval(x, channel, channel, channel, channel, 1e-5);
    const flow::BatchNormTrainResult train = flow::batch_norm_train(x, channel, channel, 1e-5);
    apply("batch_norm_train_grad", {x, channel, channel, x, train.mean, train.invstd, channel}, Attrs().set("eps", 1e-5));
    const flow::TensorList normed = apply("layer_norm", {x, flow::ones({7, 6}, options), flow::zeros({7, 6}, options)},
                                          Attrs().set("normalized_ndim", 2).set("eps", 1e-5));
    apply("layer_norm_grad", {x, x, normed[1], normed[2], flow::ones({7, 6}, options)}, Attrs().set("normalized_ndim", 2).set("eps", 1e-5));
    const Tensor features = flow::randn({3, 5}, options), weight = flow::randn({4, 5}, options);
    flow::linear(features, weight, flow::randn({4}, options));
    apply("gelu_grad", {features, features}, Attrs().set("approximate", "tanh"));
    const std::string program = "mul|0,1|;relu|-1|;out|1";
    apply("fused_linear", {features, weight, flow::randn({4}, options), flow::randn({4}, options)},
          Attrs().set("program", program).set("shape", Shape{3, 4}).set("linear_inputs", 2));
    flow::fused::fused_elementwise_({flow::zeros({3, 5}, options)}, {features, flow::randn({5}, options)},
                                    flow::fused::decode(program));
    Tensor param = flow::randn({3, 5}, options), buffer = flow::zeros({3, 5}, options);
    flow::sgd_update_(param, features, &buffer, 0.1, 0.9, 0, 1e-4, true, false);
    const Tensor index = flow::randint(0, 3, {2, 5});
    flow::scatter_add(features, 0, index, features.narrow(0, 0, 2));
    apply("slice_grad", {features.narrow(1, 1, 2)}, Attrs().set("input_shape", Shape{3, 5}).set("dim", 1).set("start", 1).set("end", 3).set("step", 1));
  }
  return recorder.calls;
}

// Deterministic random malformed calls of one op: mutations of valid calls where there are
// some, and random ones.
class CaseGenerator {
 public:
  CaseGenerator(const flow::OpDef& op, const std::vector<Call>* seeds)
      : op_(op), seeds_(seeds), rng_(std::hash<std::string>()(op.name)) {}

  void next() {
    if (seeds_ != nullptr && chance(0.6)) {
      mutate((*seeds_)[uniform(0, static_cast<int>(seeds_->size()) - 1)]);
      return;
    }
    coherent_ = chance(0.6);  // plausible calls reach the deeper checks and the kernels
    dtype_ = coherent_ ? pick<flow::DType>({flow::kFloat32, flow::kFloat64, flow::kFloat32, flow::kInt64, flow::kBool}) : any_dtype();
    rank_ = uniform(0, 5);
    inputs.clear();
    size_t count = uniform(0, 4);
    if (coherent_) count = op_.variadic_inputs ? uniform(1, std::max<int>(3, static_cast<int>(op_.input_names.size()))) : op_.input_names.size();
    for (size_t i = 0; i < count; ++i) inputs.push_back(random_meta());
    attrs = Attrs();
    for (size_t i = 0; i < op_.attr_names.size(); ++i) {
      if (!coherent_ && chance(0.15)) continue;
      const AttrType type = coherent_ || chance(0.8) ? op_.attr_types[i] : static_cast<AttrType>(uniform(0, 7));
      set_random(op_.attr_names[i], type);
    }
    if (chance(0.05)) attrs.set("destinations", int_value());
  }

  std::string describe() const {
    std::ostringstream out;
    out << op_.name << " inputs:";
    for (const auto& m : inputs) out << " " << flow::dtype_name(m.dtype) << m.shape;
    out << " attrs:";
    for (const auto& [name, value] : attrs.values()) out << " " << name << "=" << value;
    return out.str();
  }

  // Tensor data: small values, so that index ops see in- and out-of-range indices alike.
  flow::Tensor random_tensor(const TensorMeta& m) {
    const auto seed = static_cast<uint64_t>(rng_());
    flow::manual_seed(seed);
    if (flow::is_floating(m.dtype)) return flow::randn(m.shape, flow::kFloat64).to(m.dtype);
    return flow::randint(-2, 5, m.shape).to(m.dtype);
  }

  std::vector<TensorMeta> inputs;
  Attrs attrs;

 private:
  int uniform(int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  template <typename T>
  T pick(std::initializer_list<T> values) { return *(values.begin() + uniform(0, static_cast<int>(values.size()) - 1)); }

  flow::DType any_dtype() { return static_cast<flow::DType>(uniform(0, 12)); }

  // A valid call with up to three changes: an attribute, a dim, a rank, a dtype or an input.
  void mutate(const Call& seed) {
    coherent_ = true;
    inputs = seed.inputs;
    attrs = seed.attrs;
    const int changes = uniform(0, 3);
    for (int c = 0; c < changes; ++c) {
      const int what = uniform(0, 5);
      if (what <= 1 && !op_.attr_names.empty()) {
        const size_t i = uniform(0, static_cast<int>(op_.attr_names.size()) - 1);
        const auto* list = std::get_if<std::vector<int64_t>>(&attrs.values().at(op_.attr_names[i]));
        if (list != nullptr && !list->empty() && chance(0.6)) {
          std::vector<int64_t> tweaked = *list;
          tweaked[uniform(0, static_cast<int>(tweaked.size()) - 1)] += pick<int64_t>({-2, -1, 1, 2});
          attrs.set(op_.attr_names[i], tweaked);
        } else {
          set_random(op_.attr_names[i], chance(0.9) ? op_.attr_types[i] : static_cast<AttrType>(uniform(0, 7)));
        }
      } else if (inputs.empty()) {
        continue;
      } else if (TensorMeta& m = inputs[uniform(0, static_cast<int>(inputs.size()) - 1)]; what == 2 && m.shape.ndim() > 0) {
        int64_t& d = m.shape[uniform(0, static_cast<int>(m.shape.ndim()) - 1)];
        d = std::max<int64_t>(0, d + pick<int64_t>({-2, -1, 1, 2}));
      } else if (what == 3) {
        if (chance(0.5) && m.shape.ndim() > 0) m.shape.erase(m.shape.size() - 1);
        else m.shape.insert(0, uniform(1, 3));
      } else if (what == 4) {
        m.dtype = any_dtype();
      } else if (chance(0.5)) {
        inputs.pop_back();
      } else {
        inputs.push_back(inputs[0]);
      }
    }
  }

  TensorMeta random_meta() {
    const int rank = coherent_ && chance(0.8) ? rank_ : uniform(0, 5);
    Shape shape;
    for (int d = 0; d < rank; ++d) shape.push_back(coherent_ ? uniform(1, 5) : pick<int64_t>({0, 1, 1, 2, 3, 5}));
    return {shape, coherent_ && chance(0.85) ? dtype_ : any_dtype(), flow::kCPU};
  }

  int64_t int_value() {
    if (coherent_ && chance(0.8)) return uniform(0, 3);
    return pick<int64_t>({-1, 0, 1, 2, 3, 4, -5, int64_t{1} << 31, INT64_MAX, INT64_MIN, int64_t{1} << 62});
  }

  std::vector<int64_t> ints_value() {
    // Shapes of an input (view, expand, the gradients' input_shape) or pairs (window attributes).
    if (!inputs.empty() && chance(0.3)) return inputs[uniform(0, static_cast<int>(inputs.size()) - 1)].shape.vec();
    const int size = coherent_ && chance(0.6) ? 2 : uniform(0, 5);
    std::vector<int64_t> values;
    for (int i = 0; i < size; ++i) values.push_back(coherent_ && chance(0.8) ? uniform(1, 3) : int_value());
    return values;
  }

  flow::Scalar scalar_value() {
    switch (uniform(0, 3)) {
      case 0: return flow::Scalar(int_value());
      case 1: return flow::Scalar(pick<double>({0.5, -2.0, 1e300, std::numeric_limits<double>::infinity(), std::nan(""), -0.0}));
      case 2: return flow::Scalar(chance(0.5));
      default: return flow::Scalar(uniform(-3, 3));
    }
  }

  std::string string_value() {
    return pick<std::string>({"none", "tanh", "add", "", "garbage", "relu|0|;out|0", "add|0,1|;out|0", "mul|0,-1|;out|0",
                              "clamp|0|has_min=b:1,min=s:0,has_max=b:0,max=s:0;relu|-1|;out|1", "gelu|0|approximate=t:tanh;out|0",
                              "relu|5|;out|0", "x|a|;out|q", "add_scalar|0|scalar=s:1e999;out|0", "out|"});
  }

  void set_random(const std::string& name, AttrType type) {
    switch (type) {
      case AttrType::kBool: attrs.set(name, chance(0.5)); break;
      case AttrType::kInt: attrs.set(name, int_value()); break;
      case AttrType::kDouble:
        attrs.set(name, pick<double>({1e-5, 0.1, 0.0, -1.0, 1.0, 1e300, std::nan(""), std::numeric_limits<double>::infinity()}));
        break;
      case AttrType::kString: attrs.set(name, string_value()); break;
      case AttrType::kInts: attrs.set(name, ints_value()); break;
      case AttrType::kDType: attrs.set(name, coherent_ && chance(0.7) ? dtype_ : any_dtype()); break;
      case AttrType::kDevice: attrs.set(name, chance(0.9) ? flow::kCPU : flow::Device("cuda:0")); break;
      case AttrType::kScalar: attrs.set(name, scalar_value()); break;
    }
  }

  const flow::OpDef& op_;
  const std::vector<Call>* seeds_;
  std::mt19937_64 rng_;
  bool coherent_ = false;
  flow::DType dtype_ = flow::kFloat32;
  int rank_ = 0;
};

constexpr int64_t kMaxElements = 1'000'000;

bool small(const std::vector<TensorMeta>& metas) {
  for (const auto& m : metas) {
    if (m.shape.numel() > kMaxElements) return false;
  }
  return true;
}

TEST(OpChecks, EveryOpRefusesMalformedCallsOrRunsItsKernelSafely) {
  constexpr int kCasesPerOp = 600;
  size_t ops_run = 0;
  const std::map<std::string, std::vector<Call>> seeds = valid_calls();
  const std::vector<std::string> names = flow::registered_ops();
  for (const std::string& name : names) {
    const flow::OpDef& op = flow::find_op(name);
    auto seed = seeds.find(name);
    CaseGenerator cases(op, seed == seeds.end() ? nullptr : &seed->second);
    int kernel_runs = 0;
    for (int c = 0; c < kCasesPerOp; ++c) {
      cases.next();
      std::vector<TensorMeta> out_metas;
      try {
        out_metas = flow::checked_infer(op, cases.inputs, cases.attrs);
      } catch (const flow::Error&) {
        continue;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "inference threw a non-flow::Error (" << e.what() << ") for " << cases.describe();
        continue;
      }
      ASSERT_FALSE(out_metas.empty()) << cases.describe();
      bool on_cpu = true;
      for (const auto& m : out_metas) on_cpu = on_cpu && m.device.is_cpu();
      if (!on_cpu || !small(cases.inputs) || !small(out_metas)) continue;
      flow::TensorList inputs;
      for (const auto& m : cases.inputs) inputs.push_back(cases.random_tensor(m));
      try {
        const flow::TensorList outputs = flow::execute_op(op, inputs, cases.attrs, out_metas);
        ASSERT_EQ(outputs.size(), out_metas.size()) << cases.describe();
        for (size_t i = 0; i < outputs.size(); ++i) {
          EXPECT_EQ(outputs[i].shape(), out_metas[i].shape) << cases.describe();
          EXPECT_EQ(outputs[i].dtype(), out_metas[i].dtype) << cases.describe();
        }
        ++kernel_runs;
      } catch (const flow::Error&) {
        ++kernel_runs;  // data the metas cannot describe (an index out of range) is refused by the kernel
      } catch (const std::exception& e) {
        ADD_FAILURE() << "the kernel threw a non-flow::Error (" << e.what() << ") for " << cases.describe();
      }
    }
    if (kernel_runs > 0) ++ops_run;
  }
  // Guards the generator itself: most ops must be reached with calls their inference accepts.
  EXPECT_GT(ops_run, names.size() * 3 / 4) << ops_run << " of " << names.size() << " ops ran their kernels";
}

}  // namespace
