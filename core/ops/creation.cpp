// Creation ops: sources with no inputs whose shape, dtype and device come from attributes.
#include "core/ops/creation.h"

#include <cmath>
#include <cstring>

#include "core/autograd_meta.h"
#include "core/interpreter.h"
#include "core/ops/copy.h"
#include "core/random.h"

namespace flow {
namespace {

std::vector<TensorMeta> meta_from_attrs(const std::vector<TensorMeta>&, const Attrs& attrs) {
  const auto& dims = attrs.get<std::vector<int64_t>>("shape");
  return {{Shape(dims.begin(), dims.end()), attrs.get<DType>("dtype"), attrs.get<Device>("device")}};
}

std::vector<SbpSignature> broadcast_source(const std::vector<TensorMeta>&, const Attrs&) {
  return {{{}, {Sbp::broadcast()}}};
}

const OpDef& source_op(const char* name, std::vector<std::string> attr_names) {
  attr_names.insert(attr_names.begin(), {"shape", "dtype", "device"});
  return OpBuilder(name).inputs({}).outputs({"out"}).attrs(attr_names).infer(meta_from_attrs).sbp(broadcast_source).def();
}

const OpDef& random_source_op(const char* name, std::vector<std::string> attr_names) {
  OpBuilder(name).random();
  return source_op(name, std::move(attr_names));
}

const OpDef& kEmpty = source_op("empty", {});
const OpDef& kFull = source_op("full", {"value"});
const OpDef& kArange = source_op("arange", {"start", "step"});
const OpDef& kLinspace = source_op("linspace", {"start", "end"});
const OpDef& kEye = source_op("eye", {});
const OpDef& kUniform = random_source_op("uniform", {"low", "high", "seed", "offset"});
const OpDef& kNormal = random_source_op("normal", {"mean", "std", "seed", "offset"});
const OpDef& kRandint = random_source_op("randint", {"low", "high", "seed", "offset"});
const OpDef& kRandperm = random_source_op("randperm", {"seed", "offset"});

Attrs source_attrs(const char* op, const Shape& shape, DType dtype, const TensorOptions& options) {
  shape.nbytes(itemsize(dtype), op);
  return Attrs().set("shape", shape).set("dtype", dtype).set("device", options.device_);
}

Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.requires_grad_) t.requires_grad_(true);
  return t;
}

DType default_dtype_for(const Scalar& value) {
  if (value.is_bool()) return kBool;
  return value.is_floating() ? kDefaultFloat : kInt64;
}

// Draws reserve counters from the default generator for a random source of numel elements.
Attrs random_attrs(const char* op, const Shape& shape, DType dtype, const TensorOptions& options) {
  auto [seed, offset] = default_generator().reserve(static_cast<uint64_t>(shape.numel()));
  return source_attrs(op, shape, dtype, options)
      .set("seed", static_cast<int64_t>(seed))
      .set("offset", static_cast<int64_t>(offset));
}

}  // namespace

Tensor empty(const Shape& shape, const TensorOptions& options) {
  return finish(apply_one(kEmpty, {}, source_attrs("empty", shape, options.dtype_or(kDefaultFloat), options)), options);
}

Tensor full(const Shape& shape, const Scalar& value, const TensorOptions& options) {
  const DType dtype = options.dtype_or(default_dtype_for(value));
  return finish(apply_one(kFull, {}, source_attrs("full", shape, dtype, options).set("value", value)), options);
}

Tensor zeros(const Shape& shape, const TensorOptions& options) {
  return full(shape, 0, TensorOptions(options).dtype(options.dtype_or(kDefaultFloat)));
}

Tensor ones(const Shape& shape, const TensorOptions& options) {
  return full(shape, 1, TensorOptions(options).dtype(options.dtype_or(kDefaultFloat)));
}

Tensor arange(const Scalar& end, const TensorOptions& options) { return arange(0, end, 1, options); }

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, const TensorOptions& options) {
  const bool floating = start.is_floating() || end.is_floating() || step.is_floating();
  const DType dtype = options.dtype_or(floating ? kDefaultFloat : kInt64);
  FLOW_ARG_CHECK(step.to_double() != 0, "arange", "step must be nonzero");
  const double span = (end.to_double() - start.to_double()) / step.to_double();
  FLOW_ARG_CHECK(span >= 0, "arange", "upper bound ", end, " and lower bound ", start, " inconsistent with step sign ",
                 step);
  const auto length = static_cast<int64_t>(std::ceil(span));
  return finish(apply_one(kArange, {}, source_attrs("arange", {length}, dtype, options).set("start", start).set("step", step)),
                options);
}

Tensor linspace(const Scalar& start, const Scalar& end, int64_t steps, const TensorOptions& options) {
  FLOW_ARG_CHECK(steps >= 0, "linspace", "number of steps must be non-negative, got ", steps);
  const DType dtype = options.dtype_or(kDefaultFloat);
  return finish(apply_one(kLinspace, {}, source_attrs("linspace", {steps}, dtype, options).set("start", start).set("end", end)),
                options);
}

Tensor eye(int64_t n, std::optional<int64_t> m, const TensorOptions& options) {
  const int64_t cols = m.value_or(n);
  FLOW_ARG_CHECK(n >= 0 && cols >= 0, "eye", "n and m must be non-negative, got ", n, " and ", cols);
  return finish(apply_one(kEye, {}, source_attrs("eye", {n, cols}, options.dtype_or(kDefaultFloat), options)), options);
}

Tensor rand(const Shape& shape, const TensorOptions& options) {
  const DType dtype = options.dtype_or(kDefaultFloat);
  FLOW_ARG_CHECK(is_floating(dtype), "rand", "expected a floating dtype, got ", dtype_name(dtype));
  return finish(apply_one(kUniform, {}, random_attrs("rand", shape, dtype, options).set("low", 0.0).set("high", 1.0)),
                options);
}

Tensor randn(const Shape& shape, const TensorOptions& options) {
  const DType dtype = options.dtype_or(kDefaultFloat);
  FLOW_ARG_CHECK(is_floating(dtype), "randn", "expected a floating dtype, got ", dtype_name(dtype));
  return finish(apply_one(kNormal, {}, random_attrs("randn", shape, dtype, options).set("mean", 0.0).set("std", 1.0)),
                options);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, const TensorOptions& options) {
  FLOW_ARG_CHECK(low < high, "randint", "expected low < high, got low=", low, " high=", high);
  return finish(apply_one(kRandint, {},
                          random_attrs("randint", shape, options.dtype_or(kInt64), options).set("low", low).set("high", high)),
                options);
}

Tensor randperm(int64_t n, const TensorOptions& options) {
  FLOW_ARG_CHECK(n >= 0, "randperm", "n must be non-negative, got ", n);
  return finish(apply_one(kRandperm, {}, random_attrs("randperm", {n}, options.dtype_or(kInt64), options)), options);
}

namespace {
TensorOptions like(const Tensor& other, const TensorOptions& options) {
  TensorOptions result = options;
  result.dtype(options.dtype_or(other.dtype()));
  if (options.device_ == Device()) result.device(other.device());
  return result;
}
}  // namespace

Tensor empty_like(const Tensor& other, const TensorOptions& options) { return empty(other.shape(), like(other, options)); }
Tensor zeros_like(const Tensor& other, const TensorOptions& options) { return zeros(other.shape(), like(other, options)); }
Tensor ones_like(const Tensor& other, const TensorOptions& options) { return ones(other.shape(), like(other, options)); }
Tensor full_like(const Tensor& other, const Scalar& value, const TensorOptions& options) {
  return full(other.shape(), value, like(other, options));
}
Tensor rand_like(const Tensor& other, const TensorOptions& options) { return rand(other.shape(), like(other, options)); }
Tensor randn_like(const Tensor& other, const TensorOptions& options) { return randn(other.shape(), like(other, options)); }

Tensor from_blob(const void* data, const Shape& shape, DType dtype, const TensorOptions& options) {
  Tensor host = make_tensor(shape, dtype, kCPU);
  if (host.numel() > 0) std::memcpy(host.data_ptr(), data, static_cast<size_t>(host.numel()) * itemsize(dtype));
  Tensor result = host.to(options.dtype_or(dtype)).to(options.device_);
  return finish(result, options);
}

template <typename T>
Tensor tensor(const std::vector<T>& values, std::optional<Shape> shape, const TensorOptions& options) {
  const Shape target = shape.value_or(Shape{static_cast<int64_t>(values.size())});
  FLOW_ARG_CHECK(target.numel() == static_cast<int64_t>(values.size()), "tensor", "shape ", target, " needs ",
                 target.numel(), " values, got ", values.size());
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> bytes(values.begin(), values.end());
    return from_blob(bytes.data(), target, kBool, options);
  } else {
    return from_blob(values.data(), target, DTypeOf<T>::value, options);
  }
}
template Tensor tensor<bool>(const std::vector<bool>&, std::optional<Shape>, const TensorOptions&);
template Tensor tensor<uint8_t>(const std::vector<uint8_t>&, std::optional<Shape>, const TensorOptions&);
template Tensor tensor<int8_t>(const std::vector<int8_t>&, std::optional<Shape>, const TensorOptions&);
template Tensor tensor<int32_t>(const std::vector<int32_t>&, std::optional<Shape>, const TensorOptions&);
template Tensor tensor<int64_t>(const std::vector<int64_t>&, std::optional<Shape>, const TensorOptions&);
template Tensor tensor<float>(const std::vector<float>&, std::optional<Shape>, const TensorOptions&);
template Tensor tensor<double>(const std::vector<double>&, std::optional<Shape>, const TensorOptions&);

Tensor scalar_tensor(const Scalar& value, const TensorOptions& options) { return full({}, value, options); }

}  // namespace flow
