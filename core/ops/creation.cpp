// Creation ops: sources with no inputs whose shape, dtype and device come from attributes.
#include "core/ops/creation.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/allocator.h"
#include "core/autograd_meta.h"
#include "core/comm/process_group.h"
#include "core/interpreter.h"
#include "core/ops/checks.h"
#include "core/ops/copy.h"
#include "core/random.h"

namespace flow {
namespace {

void check_dims(const char* op, const Shape& shape) {
  for (int64_t d : shape) {
    if (d < 0) fail(op, "negative dimension in shape ", shape);
  }
}

void check_rank(const char* op, const Shape& shape, int64_t rank) {
  if (shape.ndim() != rank) fail(op, "expected a ", rank, "-d shape, got ", shape);
}

// Every value v written into the output must fit its dtype, since the kernels cast (a double
// outside an integer type's range, or NaN, is undefined behaviour to cast).
void check_value_fits(const char* op, const Scalar& v, DType dtype) { checks::check_scalar_fits(op, v, dtype, "value"); }

// A source's output meta from its attributes, after check(op, meta, attrs) for the op's own.
using SourceCheck = void (*)(const char* op, const TensorMeta& out, const Attrs& attrs);
InferFn source_infer(const char* op, SourceCheck check) {
  return [op, check](const std::vector<TensorMeta>&, const Attrs& attrs) {
    const Shape shape(attrs.get<std::vector<int64_t>>("shape"));
    check_dims(op, shape);
    const TensorMeta out{shape, attrs.get<DType>("dtype"), attrs.get<Device>("device")};
    if (check) check(op, out, attrs);
    return std::vector<TensorMeta>{out};
  };
}

std::vector<SbpSignature> broadcast_source(const std::vector<TensorMeta>&, const Attrs&) {
  return {{{}, {Sbp::broadcast()}}};
}

const OpDef& source_op(const char* name, std::vector<AttrDef> attrs, SourceCheck check = nullptr) {
  attrs.insert(attrs.begin(), {{"shape", AttrType::kInts}, {"dtype", AttrType::kDType}, {"device", AttrType::kDevice}});
  return OpBuilder(name).inputs({}).outputs({"out"}).attrs(std::move(attrs)).infer(source_infer(name, check)).sbp(broadcast_source).def();
}

const OpDef& random_source_op(const char* name, std::vector<AttrDef> attrs, SourceCheck check) {
  OpBuilder(name).random();
  attrs.push_back({"seed", AttrType::kInt});
  attrs.push_back({"offset", AttrType::kInt});
  return source_op(name, std::move(attrs), check);
}

void check_full(const char* op, const TensorMeta& out, const Attrs& attrs) { check_value_fits(op, attrs.get<Scalar>("value"), out.dtype); }

// arange writes start + i * step for i < n: both ends must be finite numbers of the dtype, and
// computed in int64 without overflow when start and step are integers.
void check_arange(const char* op, const TensorMeta& out, const Attrs& attrs) {
  check_rank(op, out.shape, 1);
  const Scalar &start = attrs.get<Scalar>("start"), &step = attrs.get<Scalar>("step");
  if (step.to_double() == 0 || !std::isfinite(step.to_double()) || !std::isfinite(start.to_double())) {
    fail(op, "start and step must be finite and step nonzero, got start ", start, " and step ", step);
  }
  const int64_t last_index = std::max<int64_t>(out.shape[0] - 1, 0);
  Scalar last(start.to_double() + static_cast<double>(last_index) * step.to_double());
  if (!start.is_floating() && !step.is_floating()) {
    int64_t offset = 0, value = 0;
    if (__builtin_mul_overflow(last_index, step.to_int(), &offset) || __builtin_add_overflow(start.to_int(), offset, &value)) {
      fail(op, "the last value of ", out.shape[0], " steps of ", step, " from ", start, " overflows int64");
    }
    last = Scalar(value);
  }
  check_value_fits(op, start, out.dtype);
  check_value_fits(op, last, out.dtype);
}

void check_linspace(const char* op, const TensorMeta& out, const Attrs& attrs) {
  check_rank(op, out.shape, 1);
  check_value_fits(op, Scalar(attrs.get<Scalar>("start").to_double()), out.dtype);
  check_value_fits(op, Scalar(attrs.get<Scalar>("end").to_double()), out.dtype);
}

void check_eye(const char* op, const TensorMeta& out, const Attrs&) { check_rank(op, out.shape, 2); }

void check_uniform(const char* op, const TensorMeta&, const Attrs& attrs) {
  const double low = attrs.get<double>("low"), high = attrs.get<double>("high");
  if (!(low <= high)) fail(op, "expected low <= high, got low=", low, " high=", high);
}

void check_normal(const char* op, const TensorMeta&, const Attrs& attrs) {
  const double std = attrs.get<double>("std");
  if (!(std >= 0)) fail(op, "expected std >= 0, got ", std);
}

// The kernel draws low + bits % (high - low): the range must be positive and fit int64.
void check_randint(const char* op, const TensorMeta& out, const Attrs& attrs) {
  const int64_t low = attrs.get<int64_t>("low"), high = attrs.get<int64_t>("high");
  int64_t range = 0;
  if (low >= high) fail(op, "expected low < high, got low=", low, " high=", high);
  if (__builtin_sub_overflow(high, low, &range)) fail(op, "the range [", low, ", ", high, ") is wider than int64 can count");
  check_value_fits(op, low, out.dtype);
  check_value_fits(op, high - 1, out.dtype);
}

void check_randperm(const char* op, const TensorMeta& out, const Attrs&) {
  check_rank(op, out.shape, 1);
  if (out.shape[0] > 0) check_value_fits(op, out.shape[0] - 1, out.dtype);
}

const OpDef& kEmpty = source_op("empty", {});
const OpDef& kFull = source_op("full", {{"value", AttrType::kScalar}}, check_full);
const OpDef& kArange = source_op("arange", {{"start", AttrType::kScalar}, {"step", AttrType::kScalar}}, check_arange);
const OpDef& kLinspace = source_op("linspace", {{"start", AttrType::kScalar}, {"end", AttrType::kScalar}}, check_linspace);
const OpDef& kEye = source_op("eye", {}, check_eye);
const OpDef& kUniform = random_source_op("uniform", {{"low", AttrType::kDouble}, {"high", AttrType::kDouble}}, check_uniform);
const OpDef& kNormal = random_source_op("normal", {{"mean", AttrType::kDouble}, {"std", AttrType::kDouble}}, check_normal);
const OpDef& kRandint = random_source_op("randint", {{"low", AttrType::kInt}, {"high", AttrType::kInt}}, check_randint);
const OpDef& kRandperm = random_source_op("randperm", {}, check_randperm);

// A global tensor's pieces are cut from the whole tensor made on this rank's device.
Device creation_device(const TensorOptions& options) {
  return options.placement_ ? options.placement_->device_for(distributed::get_rank()) : options.device_;
}

Attrs source_attrs(const Shape& shape, DType dtype, const TensorOptions& options) {
  return Attrs().set("shape", shape).set("dtype", dtype).set("device", creation_device(options));
}

// With a placement, every rank made the whole tensor (the same values: random sources draw the
// same counters on every rank), so the global tensor equals the one a single process makes;
// each rank keeps its piece.
Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.placement_) {
    const Placement& placement = *options.placement_;
    const NdSbp nd_sbp = options.sbp_.empty() ? broadcast_sbp(placement) : options.sbp_;
    // A rank off the placement holds no piece (it still made the tensor: its generator stays in step).
    t = distributed::from_whole(t, placement, nd_sbp);
  } else if (!options.sbp_.empty()) {
    fail("tensor", "sbp ", nd_sbp_str(options.sbp_), " was given without a placement");
  }
  if (options.requires_grad_) t.requires_grad_(true);
  return t;
}

DType default_dtype_for(const Scalar& value) {
  if (value.is_bool()) return kBool;
  return value.is_floating() ? kDefaultFloat : kInt64;
}

// The rows [first, first + count) of dim 0 that this rank's piece holds, when every dimension of
// nd_sbp is broadcast but at most one S(0) (data parallel): then the piece is a row range of the
// whole tensor. nullopt for other layouts, and for ranks off the placement.
std::optional<std::pair<int64_t, int64_t>> row_range(const Shape& shape, const Placement& placement, const NdSbp& nd_sbp) {
  const int64_t index = placement.index_of(distributed::get_rank());
  if (index < 0 || shape.ndim() == 0) return std::nullopt;
  const std::vector<int64_t> coords = placement.coordinates(index);
  std::pair<int64_t, int64_t> rows{0, shape[0]};
  bool split = false;
  for (size_t d = 0; d < nd_sbp.size(); ++d) {
    if (nd_sbp[d].is_broadcast()) continue;
    if (split || !nd_sbp[d].is_split() || nd_sbp[d].axis != 0) return std::nullopt;
    split = true;
    const int64_t parts = placement.hierarchy()[static_cast<int64_t>(d)];
    rows = {split_part_start(shape[0], parts, coords[d]), split_part_size(shape[0], parts, coords[d])};
  }
  return rows;
}

// A random tensor laid out over the batch (row_range) is drawn piece by piece: element i of the
// whole tensor takes Philox counter offset + i, so a rank's rows are the counters of its range and
// no rank makes the whole tensor. Other layouts are cut from the whole tensor (finish).
Tensor random_tensor(const OpDef& op, const Attrs& attrs, const TensorOptions& options) {
  if (options.placement_) {
    const Placement& placement = *options.placement_;
    const NdSbp nd_sbp = options.sbp_.empty() ? broadcast_sbp(placement) : options.sbp_;
    const Shape shape(attrs.get<std::vector<int64_t>>("shape"));
    if (const auto rows = row_range(shape, placement, nd_sbp)) {
      Shape piece_shape = shape;
      piece_shape[0] = rows->second;
      const int64_t inner = shape.numel() / std::max<int64_t>(shape[0], 1);
      // whole_numel and piece_start let a Graph draw fresh counters for the whole tensor on every
      // run and keep this piece's share of them (graph/executor.cpp).
      Attrs piece = attrs;
      piece.set("shape", piece_shape)
          .set("offset", attrs.get<int64_t>("offset") + rows->first * inner)
          .set("whole_numel", shape.numel())
          .set("piece_start", rows->first * inner);
      Tensor t = distributed::make_global({shape, attrs.get<DType>("dtype"), attrs.get<Device>("device")}, placement, nd_sbp,
                                          apply_one(op, {}, piece));
      if (options.requires_grad_) t.requires_grad_(true);
      return t;
    }
  }
  return finish(apply_one(op, {}, attrs), options);
}

// Draws reserve counters from the default generator for a random source of numel elements
// (a shape the op will refuse reserves none).
Attrs random_attrs(const char* op, const Shape& shape, DType dtype, const TensorOptions& options) {
  check_dims(op, shape);
  auto [seed, offset] = default_generator().reserve(static_cast<uint64_t>(shape.numel()));
  return source_attrs(shape, dtype, options)
      .set("seed", static_cast<int64_t>(seed))
      .set("offset", static_cast<int64_t>(offset));
}

}  // namespace

Tensor empty(const Shape& shape, const TensorOptions& options) {
  return finish(apply_one(kEmpty, {}, source_attrs(shape, options.dtype_or(kDefaultFloat), options)), options);
}

Tensor full(const Shape& shape, const Scalar& value, const TensorOptions& options) {
  const DType dtype = options.dtype_or(default_dtype_for(value));
  return finish(apply_one(kFull, {}, source_attrs(shape, dtype, options).set("value", value)), options);
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
  FLOW_ARG_CHECK(span < 0x1p62, "arange", "the range from ", start, " to ", end, " in steps of ", step, " has too many elements");
  const auto length = static_cast<int64_t>(std::ceil(span));
  return finish(apply_one(kArange, {}, source_attrs({length}, dtype, options).set("start", start).set("step", step)),
                options);
}

Tensor linspace(const Scalar& start, const Scalar& end, int64_t steps, const TensorOptions& options) {
  FLOW_ARG_CHECK(steps >= 0, "linspace", "number of steps must be non-negative, got ", steps);
  const DType dtype = options.dtype_or(kDefaultFloat);
  return finish(apply_one(kLinspace, {}, source_attrs({steps}, dtype, options).set("start", start).set("end", end)),
                options);
}

Tensor eye(int64_t n, std::optional<int64_t> m, const TensorOptions& options) {
  const int64_t cols = m.value_or(n);
  FLOW_ARG_CHECK(n >= 0 && cols >= 0, "eye", "n and m must be non-negative, got ", n, " and ", cols);
  return finish(apply_one(kEye, {}, source_attrs({n, cols}, options.dtype_or(kDefaultFloat), options)), options);
}

Tensor rand(const Shape& shape, const TensorOptions& options) {
  const DType dtype = options.dtype_or(kDefaultFloat);
  FLOW_ARG_CHECK(is_floating(dtype), "rand", "expected a floating dtype, got ", dtype_name(dtype));
  return random_tensor(kUniform, random_attrs("rand", shape, dtype, options).set("low", 0.0).set("high", 1.0), options);
}

Tensor randn(const Shape& shape, const TensorOptions& options) {
  const DType dtype = options.dtype_or(kDefaultFloat);
  FLOW_ARG_CHECK(is_floating(dtype), "randn", "expected a floating dtype, got ", dtype_name(dtype));
  return random_tensor(kNormal, random_attrs("randn", shape, dtype, options).set("mean", 0.0).set("std", 1.0), options);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, const TensorOptions& options) {
  return random_tensor(kRandint, random_attrs("randint", shape, options.dtype_or(kInt64), options).set("low", low).set("high", high),
                       options);
}

Tensor randperm(int64_t n, const TensorOptions& options) {
  FLOW_ARG_CHECK(n >= 0, "randperm", "n must be non-negative, got ", n);
  return finish(apply_one(kRandperm, {}, random_attrs("randperm", {n}, options.dtype_or(kInt64), options)), options);
}

namespace {
// Like a global tensor: the same placement and sbp, a partial sum read as broadcast (the
// values are the logical tensor's).
TensorOptions like(const Tensor& other, const TensorOptions& options) {
  TensorOptions result = options;
  result.dtype(options.dtype_or(other.dtype()));
  if (options.device_ == default_device()) result.device(other.device());
  if (other.is_global() && !options.placement_) {
    NdSbp nd_sbp = other.sbp();
    for (Sbp& sbp : nd_sbp) sbp = sbp.is_partial_sum() ? Sbp::broadcast() : sbp;
    result.placement(other.placement()).sbp(nd_sbp);
  }
  return result;
}
}  // namespace

TensorOptions options_beside(const Tensor& other) {
  TensorOptions options = TensorOptions(other.dtype()).device(other.device());
  if (other.is_global()) {
    options.placement(other.placement()).sbp(broadcast_sbp(other.placement()));
  }
  return options;
}

Tensor empty_like(const Tensor& other, const TensorOptions& options) { return empty(other.shape(), like(other, options)); }
Tensor zeros_like(const Tensor& other, const TensorOptions& options) { return zeros(other.shape(), like(other, options)); }
Tensor ones_like(const Tensor& other, const TensorOptions& options) { return ones(other.shape(), like(other, options)); }
Tensor full_like(const Tensor& other, const Scalar& value, const TensorOptions& options) {
  return full(other.shape(), value, like(other, options));
}
Tensor rand_like(const Tensor& other, const TensorOptions& options) { return rand(other.shape(), like(other, options)); }
Tensor randn_like(const Tensor& other, const TensorOptions& options) { return randn(other.shape(), like(other, options)); }

namespace {
Tensor wrap_blob(void* data, const Shape& shape, const Strides& strides, std::function<void(void*)> deleter, const TensorOptions& options) {
  const char* op = "from_blob";
  if (options.placement_ || !options.sbp_.empty()) fail(op, "wraps this process's memory; make a global tensor of it with to_global()");
  const Device device = options.device_;
  if (device.is_meta()) fail(op, "a meta tensor has no data to wrap");
  backend_for(device, op);
  if (strides.size() != static_cast<size_t>(shape.ndim())) fail(op, "shape ", shape, " and strides ", Shape(strides), " differ in length");
  const DType dtype = options.dtype_or(kFloat32);
  for (int64_t stride : strides) {
    if (stride < 0) fail(op, "strides must be non-negative, got ", Shape(strides));
  }
  const std::optional<int64_t> elements = checks::strided_extent(shape, strides);
  if (!elements) fail(op, "shape ", shape, " with strides ", Shape(strides), " reaches more elements than int64 can count");
  if (data == nullptr && *elements > 0) fail(op, "data is null");
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = dtype;
  impl->device = device;
  impl->storage = std::make_shared<Storage>(data, static_cast<size_t>(Shape{*elements}.nbytes(itemsize(dtype), op)), device, std::move(deleter));
  return finish(Tensor(std::move(impl)), options);
}
}  // namespace

Tensor from_blob(void* data, const Shape& shape, const TensorOptions& options) {
  return wrap_blob(data, shape, contiguous_strides(shape), nullptr, options);
}
Tensor from_blob(void* data, const Shape& shape, std::function<void(void*)> deleter, const TensorOptions& options) {
  return wrap_blob(data, shape, contiguous_strides(shape), std::move(deleter), options);
}
Tensor from_blob(void* data, const Shape& shape, const Strides& strides, const TensorOptions& options) {
  return wrap_blob(data, shape, strides, nullptr, options);
}
Tensor from_blob(void* data, const Shape& shape, const Strides& strides, std::function<void(void*)> deleter, const TensorOptions& options) {
  return wrap_blob(data, shape, strides, std::move(deleter), options);
}

namespace detail {
Tensor copy_from_host(const void* data, const Shape& shape, DType dtype) {
  Tensor host = make_tensor(shape, dtype, kCPU);
  if (host.numel() > 0) std::memcpy(host.data_ptr(), data, static_cast<size_t>(host.numel()) * itemsize(dtype));
  return host;
}
}  // namespace detail

template <typename T>
Tensor tensor(const std::vector<T>& values, std::optional<Shape> shape, const TensorOptions& options) {
  const Shape target = shape.value_or(Shape{static_cast<int64_t>(values.size())});
  FLOW_ARG_CHECK(target.numel() == static_cast<int64_t>(values.size()), "tensor", "shape ", target, " needs ",
                 target.numel(), " values, got ", values.size());
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> bytes(values.begin(), values.end());
    return finish(detail::copy_from_host(bytes.data(), target, kBool).to(options.dtype_or(kBool)).to(options.device_), options);
  } else {
    const DType dtype = DTypeOf<T>::value;
    return finish(detail::copy_from_host(values.data(), target, dtype).to(options.dtype_or(dtype)).to(options.device_), options);
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
