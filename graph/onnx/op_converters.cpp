#include "graph/onnx/op_converters.h"

#include <algorithm>
#include <functional>
#include <limits>

#include "core/ops/creation.h"
#include "core/ops/fused.h"

namespace flow::onnx {

int32_t onnx_type(DType dtype) {
  switch (dtype) {
    case kBool: return ::onnx::TensorProto::BOOL;
    case kUInt8: return ::onnx::TensorProto::UINT8;
    case kInt8: return ::onnx::TensorProto::INT8;
    case kInt32: return ::onnx::TensorProto::INT32;
    case kInt64: return ::onnx::TensorProto::INT64;
    case kFloat16: return ::onnx::TensorProto::FLOAT16;
    case kBFloat16: return ::onnx::TensorProto::BFLOAT16;
    case kFloat32: return ::onnx::TensorProto::FLOAT;
    case kFloat64: return ::onnx::TensorProto::DOUBLE;
    case kInt16: return ::onnx::TensorProto::INT16;
    case kUInt16: return ::onnx::TensorProto::UINT16;
    case kUInt32: return ::onnx::TensorProto::UINT32;
    case kUInt64: return ::onnx::TensorProto::UINT64;
  }
  fail("onnx_export", "dtype ", dtype_name(dtype), " has no ONNX type");
}

::onnx::AttributeProto int_attr(const std::string& name, int64_t value) {
  ::onnx::AttributeProto attr;
  attr.set_name(name);
  attr.set_type(::onnx::AttributeProto::INT);
  attr.set_i(value);
  return attr;
}

::onnx::AttributeProto ints_attr(const std::string& name, const std::vector<int64_t>& values) {
  ::onnx::AttributeProto attr;
  attr.set_name(name);
  attr.set_type(::onnx::AttributeProto::INTS);
  for (int64_t value : values) attr.add_ints(value);
  return attr;
}

::onnx::AttributeProto float_attr(const std::string& name, double value) {
  ::onnx::AttributeProto attr;
  attr.set_name(name);
  attr.set_type(::onnx::AttributeProto::FLOAT);
  attr.set_f(static_cast<float>(value));
  return attr;
}

std::string GraphBuilder::unique(const std::string& hint) {
  std::string name = hint;
  for (int n = 1; !names_.insert(name).second; ++n) name = hint + "_" + std::to_string(n);
  return name;
}

std::vector<std::string> GraphBuilder::add_node(const std::string& op_type, const std::vector<std::string>& inputs,
                                                const std::vector<::onnx::AttributeProto>& attributes, int outputs) {
  ::onnx::NodeProto& node = *graph_.add_node();
  node.set_op_type(op_type);
  node.set_name(unique(scope_ + "/" + op_type));
  for (const auto& input : inputs) node.add_input(input);
  std::vector<std::string> names;
  for (int i = 0; i < outputs; ++i) {
    names.push_back(unique(node.name() + (outputs > 1 ? ":" + std::to_string(i) : ":0")));
    node.add_output(names.back());
  }
  for (const auto& attr : attributes) *node.add_attribute() = attr;
  return names;
}

std::string GraphBuilder::add(const std::string& op_type, const std::vector<std::string>& inputs,
                              const std::vector<::onnx::AttributeProto>& attributes) {
  return add_node(op_type, inputs, attributes).at(0);
}

void GraphBuilder::add_named(const std::string& op_type, const std::vector<std::string>& inputs, const std::string& output) {
  ::onnx::NodeProto& node = *graph_.add_node();
  node.set_op_type(op_type);
  node.set_name(unique(scope_ + "/" + op_type));
  for (const auto& input : inputs) node.add_input(input);
  node.add_output(output);
}

std::string GraphBuilder::add_initializer(const std::string& hint, const Tensor& tensor) {
  ::onnx::TensorProto& init = *graph_.add_initializer();
  init.set_name(unique(hint));
  init.set_data_type(onnx_type(tensor.dtype()));
  for (int64_t d = 0; d < tensor.dim(); ++d) init.add_dims(tensor.size(d));
  // raw_data is little-endian, as flow's CPU memory is on the hosts it builds for.
  const Tensor host = tensor.cpu().contiguous();
  init.set_raw_data(static_cast<const char*>(host.data_ptr()), static_cast<size_t>(host.nbytes()));
  return init.name();
}

std::string GraphBuilder::add_ints(const std::string& hint, const std::vector<int64_t>& values) {
  ::onnx::TensorProto& init = *graph_.add_initializer();
  init.set_name(unique(scope_ + "/" + hint));
  init.set_data_type(::onnx::TensorProto::INT64);
  init.add_dims(static_cast<int64_t>(values.size()));
  for (int64_t value : values) init.add_int64_data(value);
  return init.name();
}

std::string GraphBuilder::add_scalar(double value, DType dtype) {
  ::onnx::TensorProto& init = *graph_.add_initializer();
  init.set_name(unique(scope_ + "/scalar"));
  init.set_data_type(onnx_type(dtype));
  switch (dtype) {
    case kFloat32: init.add_float_data(static_cast<float>(value)); break;
    case kFloat64: init.add_double_data(value); break;
    case kInt32: init.add_int32_data(static_cast<int32_t>(value)); break;
    case kInt64: init.add_int64_data(static_cast<int64_t>(value)); break;
    default: fail("onnx_export", "a scalar operand of dtype ", dtype_name(dtype), " is not supported (node '", scope_, "')");
  }
  return init.name();
}

void unsupported(const JobNode& job_node, const std::string& why) {
  fail("onnx_export", "op '", job_node.node.op(), "' (node '", job_node.node.name(), "') ", why);
}

const std::vector<int64_t>& ints(const JobNode& n, const char* name) { return n.attrs.get<std::vector<int64_t>>(name); }

int64_t axis_of(const JobNode& n) {
  const int64_t dim = n.attrs.get<int64_t>("dim"), rank = n.input_metas.at(0).shape.ndim();
  return dim < 0 ? dim + rank : dim;
}

namespace {

// The ONNX form of one element-wise op over already converted arguments: a single node, or a
// few where ONNX has no direct equivalent. `dtype` is the arguments' dtype (for scalar operands).
std::string elementwise(GraphBuilder& b, const std::string& op, const Attrs& attrs, const std::vector<std::string>& args, DType dtype,
                        const JobNode& job_node) {
  static const std::map<std::string, std::string> direct{
      {"neg", "Neg"},     {"abs", "Abs"}, {"sign", "Sign"}, {"exp", "Exp"},         {"log", "Log"},         {"sqrt", "Sqrt"},
      {"sin", "Sin"},     {"cos", "Cos"}, {"tanh", "Tanh"}, {"sigmoid", "Sigmoid"}, {"relu", "Relu"},       {"add", "Add"},
      {"sub", "Sub"},     {"mul", "Mul"}, {"div", "Div"},   {"pow", "Pow"},         {"maximum", "Max"},     {"minimum", "Min"},
      {"where", "Where"}, {"eq", "Equal"},     {"lt", "Less"}, {"le", "LessOrEqual"}, {"gt", "Greater"}, {"ge", "GreaterOrEqual"},
      {"logical_and", "And"}, {"logical_or", "Or"}, {"logical_xor", "Xor"}, {"logical_not", "Not"}};
  if (auto found = direct.find(op); found != direct.end()) return b.add(found->second, args);
  const std::string& x = args.at(0);
  auto scalar = [&](const char* name) { return b.add_scalar(attrs.get<Scalar>(name).to_double(), dtype); };
  // Tensor-scalar ops: (ONNX op, whether the scalar is the left operand).
  static const std::map<std::string, std::pair<std::string, bool>> with_scalar{
      {"add_scalar", {"Add", false}}, {"sub_scalar", {"Sub", false}}, {"rsub_scalar", {"Sub", true}}, {"mul_scalar", {"Mul", false}},
      {"div_scalar", {"Div", false}}, {"rdiv_scalar", {"Div", true}}, {"pow_scalar", {"Pow", false}}, {"rpow_scalar", {"Pow", true}},
      {"eq_scalar", {"Equal", false}}, {"lt_scalar", {"Less", false}},  {"le_scalar", {"LessOrEqual", false}},
      {"gt_scalar", {"Greater", false}}, {"ge_scalar", {"GreaterOrEqual", false}}};
  if (auto found = with_scalar.find(op); found != with_scalar.end()) {
    const std::string s = scalar("scalar");
    const auto& [onnx_op, scalar_first] = found->second;
    return b.add(onnx_op, scalar_first ? std::vector<std::string>{s, x} : std::vector<std::string>{x, s});
  }
  if (op == "ne") return b.add("Not", {b.add("Equal", args)});
  if (op == "ne_scalar") return b.add("Not", {b.add("Equal", {x, scalar("scalar")})});
  if (op == "copy") return b.add("Cast", {x}, {int_attr("to", onnx_type(dtype))});  // a fused program's conversion to its dtype
  if (op == "rsqrt") return b.add("Reciprocal", {b.add("Sqrt", {x})});
  if (op == "silu") return b.add("Mul", {x, b.add("Sigmoid", {x})});
  if (op == "clamp") {
    const std::string low = attrs.get<bool>("has_min") ? scalar("min") : "";
    const std::string high = attrs.get<bool>("has_max") ? scalar("max") : "";
    return b.add("Clip", {x, low, high});
  }
  if (op == "gelu") {
    // PyTorch's formulas; flow's CPU kernels compute the tanh form as the equal x * sigmoid(2u).
    std::string inner;
    if (attrs.get<std::string>("approximate") == "tanh") {
      const std::string cube = b.add("Mul", {b.add("Mul", {x, x}), x});
      const std::string sum = b.add("Add", {x, b.add("Mul", {cube, b.add_scalar(0.044715, dtype)})});
      inner = b.add("Tanh", {b.add("Mul", {sum, b.add_scalar(0.7978845608028654, dtype)})});
    } else {
      inner = b.add("Erf", {b.add("Mul", {x, b.add_scalar(0.7071067811865476, dtype)})});
    }
    const std::string half_x = b.add("Mul", {x, b.add_scalar(0.5, dtype)});
    return b.add("Mul", {half_x, b.add("Add", {inner, b.add_scalar(1.0, dtype)})});
  }
  unsupported(job_node, "has no ONNX mapping" + (op == job_node.node.op() ? std::string() : " (fused step '" + op + "')"));
}

std::vector<int64_t> broadcast(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<int64_t> out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t x = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    const int64_t y = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    out[i] = x == 1 ? y : x;
  }
  return out;
}

// A fused program expanded back into one ONNX node (or a few) per step, over operands with the
// given ONNX names and shapes. The operands broadcast NumPy-style onto the output, as ONNX's
// element-wise ops do.
std::vector<std::string> expand_program(GraphBuilder& b, const JobNode& n, const std::vector<std::string>& operands,
                                        const std::vector<std::vector<int64_t>>& operand_shapes) {
  const fused::Program program = fused::decode(n.attrs.get<std::string>("program"));
  const std::vector<int64_t> shape = n.attrs.get<std::vector<int64_t>>("shape");
  const DType dtype = n.output_metas.at(0).dtype;
  std::vector<std::string> results;
  std::vector<std::vector<int64_t>> shapes;  // per step, to find outputs that need an Expand
  for (const auto& step : program.steps) {
    std::vector<std::string> args;
    std::vector<int64_t> step_shape;
    for (int arg : step.args) {
      const bool operand = arg >= 0;
      args.push_back(operand ? operands.at(arg) : results.at(-arg - 1));
      step_shape = broadcast(step_shape, operand ? operand_shapes.at(arg) : shapes.at(-arg - 1));
    }
    results.push_back(elementwise(b, step.op, step.attrs, args, dtype, n));
    shapes.push_back(step_shape);
  }
  std::vector<std::string> outputs;
  for (int step : program.outputs) {
    if (shapes.at(step) == shape) {
      outputs.push_back(results.at(step));
      continue;
    }
    if (n.batch_slots.count("shape")) unsupported(n, "broadcasts to a batch-dependent shape; export with a fixed batch size");
    outputs.push_back(b.add("Expand", {results.at(step), b.add_ints("shape", shape)}));
  }
  return outputs;
}

std::vector<std::vector<int64_t>> shapes_of(std::vector<TensorMeta>::const_iterator begin, std::vector<TensorMeta>::const_iterator end) {
  std::vector<std::vector<int64_t>> shapes;
  for (auto meta = begin; meta != end; ++meta) shapes.push_back(meta->shape.vec());
  return shapes;
}

std::vector<std::string> fused_elementwise(GraphBuilder& b, const JobNode& n) {
  return expand_program(b, n, n.inputs, shapes_of(n.input_metas.begin(), n.input_metas.end()));
}

// x @ w^T (+ bias): Gemm for a 2-d x, else MatMul with the transposed weight.
std::string linear_of(GraphBuilder& b, const std::vector<std::string>& inputs, int64_t input_rank) {
  if (input_rank == 2) return b.add("Gemm", inputs, {int_attr("transB", 1)});
  std::string out = b.add("MatMul", {inputs.at(0), b.add("Transpose", {inputs.at(1)}, {ints_attr("perm", {1, 0})})});
  if (inputs.size() == 3) out = b.add("Add", {out, inputs.at(2)});
  return out;
}

std::vector<std::string> linear(GraphBuilder& b, const JobNode& n) { return {linear_of(b, n.inputs, n.input_metas.at(0).shape.ndim())}; }

// fused_linear: the linear (its first `linear_inputs` inputs), then the program with the linear's
// result as operand 0 and the remaining inputs as operands 1..n.
std::vector<std::string> fused_linear(GraphBuilder& b, const JobNode& n) {
  const int64_t linear_inputs = n.attrs.get<int64_t>("linear_inputs");
  if (linear_inputs != 2 && linear_inputs != 3) unsupported(n, "has linear_inputs " + std::to_string(linear_inputs) + ", expected 2 or 3");
  std::vector<std::string> operands{linear_of(b, {n.inputs.begin(), n.inputs.begin() + linear_inputs}, n.input_metas.at(0).shape.ndim())};
  operands.insert(operands.end(), n.inputs.begin() + linear_inputs, n.inputs.end());
  std::vector<std::vector<int64_t>> shapes{n.attrs.get<std::vector<int64_t>>("shape")};
  for (auto& shape : shapes_of(n.input_metas.begin() + linear_inputs, n.input_metas.end())) shapes.push_back(std::move(shape));
  return expand_program(b, n, operands, shapes);
}

// [top, left, bottom, right] from flow's symmetric (h, w) padding.
std::vector<int64_t> pads(const std::vector<int64_t>& padding) { return {padding.at(0), padding.at(1), padding.at(0), padding.at(1)}; }

std::vector<std::string> conv2d(GraphBuilder& b, const JobNode& n) {
  const Shape& weight = n.input_metas.at(1).shape;
  return {b.add("Conv", n.inputs,
                {ints_attr("kernel_shape", {weight[2], weight[3]}), ints_attr("strides", ints(n, "stride")), ints_attr("pads", pads(ints(n, "padding"))),
                 ints_attr("dilations", ints(n, "dilation")), int_attr("group", n.attrs.get<int64_t>("groups"))})};
}

std::vector<std::string> pool(GraphBuilder& b, const JobNode& n) {
  std::vector<::onnx::AttributeProto> attributes{ints_attr("kernel_shape", ints(n, "kernel_size")), ints_attr("strides", ints(n, "stride")),
                                                 ints_attr("pads", pads(ints(n, "padding")))};
  if (n.node.op() == "avg_pool2d") {
    // flow divides by the whole window, padding included.
    attributes.push_back(int_attr("count_include_pad", 1));
    return {b.add("AveragePool", n.inputs, attributes)};
  }
  if (n.node.op() == "max_pool2d_inference") return {b.add("MaxPool", n.inputs, attributes)};
  // flow's indices (flat positions per (n, c) plane) differ from ONNX MaxPool's: not exported.
  return {b.add("MaxPool", n.inputs, attributes), ""};
}

std::vector<std::string> batch_norm(GraphBuilder& b, const JobNode& n) {
  std::vector<std::string> in = n.inputs;
  if (in.size() == 3) {
    // No affine parameters: scale 1, shift 0.
    const TensorMeta& mean = n.input_metas.at(1);
    in.push_back(b.add_initializer(n.node.name() + "/scale", ones(mean.shape, mean.dtype)));
    in.push_back(b.add_initializer(n.node.name() + "/shift", zeros(mean.shape, mean.dtype)));
  }
  // ONNX order: X, scale, B, mean, var.
  return {b.add("BatchNormalization", {in[0], in[3], in[4], in[1], in[2]}, {float_attr("epsilon", n.attrs.get<double>("eps"))})};
}

// layer_norm: LayerNormalization over the last normalized_ndim axes. Its mean and rstd outputs
// (per row here, with kept dims in ONNX) are left out: only gradients read them.
std::vector<std::string> layer_norm(GraphBuilder& b, const JobNode& n) {
  std::vector<std::string> in = n.inputs;
  const int64_t normalized_ndim = n.attrs.get<int64_t>("normalized_ndim");
  if (in.size() == 1) {
    const TensorMeta& input = n.input_metas.at(0);
    const Shape normalized(std::vector<int64_t>(input.shape.end() - normalized_ndim, input.shape.end()));
    in.push_back(b.add_initializer(n.node.name() + "/scale", ones(normalized, input.dtype)));
    in.push_back(b.add_initializer(n.node.name() + "/shift", zeros(normalized, input.dtype)));
  }
  const std::string y = b.add("LayerNormalization", in, {int_attr("axis", -normalized_ndim), float_attr("epsilon", n.attrs.get<double>("eps"))});
  return {y, "", ""};
}

// view: a Reshape. With a dynamic batch, the element of the target shape that holds the batch
// size becomes -1 (inferred).
std::vector<std::string> view(GraphBuilder& b, const JobNode& n) {
  std::vector<int64_t> shape = ints(n, "shape");
  if (auto slots = n.batch_slots.find("shape"); slots != n.batch_slots.end()) {
    if (slots->second.size() + std::count(shape.begin(), shape.end(), -1) > 1) {
      unsupported(n, "reshapes to a batch-dependent shape ONNX cannot infer; export with a fixed batch size");
    }
    for (int index : slots->second) shape.at(index) = -1;
  }
  return {b.add("Reshape", {n.inputs.at(0), b.add_ints("shape", shape)})};
}

std::vector<std::string> permute(GraphBuilder& b, const JobNode& n) {
  std::vector<int64_t> perm = ints(n, "dims");
  for (auto& d : perm) d = d < 0 ? d + n.input_metas.at(0).shape.ndim() : d;
  return {b.add("Transpose", n.inputs, {ints_attr("perm", perm)})};
}

// expand: ONNX's Expand broadcasts both ways, so a dim the input already has at full size can be
// 1 in the target; that is how a batch-dependent dim the input carries (with a dynamic batch)
// stays symbolic. A dim expanded to the batch from 1 has no static target.
std::vector<std::string> expand(GraphBuilder& b, const JobNode& n) {
  std::vector<int64_t> shape = n.output_metas.at(0).shape.vec();
  if (auto slots = n.batch_slots.find("shape"); slots != n.batch_slots.end()) {
    const Shape& input = n.input_metas.at(0).shape;
    const auto offset = static_cast<int64_t>(shape.size()) - input.ndim();
    for (int index : slots->second) {
      if (index < offset || input[index - offset] != shape.at(static_cast<size_t>(index))) {
        unsupported(n, "expands a dim to the batch size; export with a fixed batch size");
      }
      shape.at(static_cast<size_t>(index)) = 1;
    }
  } else if (!n.batch_slots.empty()) {
    unsupported(n, "has a batch-dependent attribute; export with a fixed batch size");
  }
  return {b.add("Expand", {n.inputs.at(0), b.add_ints("shape", shape)})};
}

// A float16/bfloat16 input with a float32 output (the "dtype" attribute autocast sets) is cast first.
std::vector<std::string> softmax(GraphBuilder& b, const JobNode& n) {
  const DType from = n.input_metas.at(0).dtype, to = n.output_metas.at(0).dtype;
  const std::vector<std::string> input = from == to ? n.inputs : std::vector<std::string>{b.add("Cast", n.inputs, {int_attr("to", onnx_type(to))})};
  return {b.add(n.node.op() == "softmax" ? "Softmax" : "LogSoftmax", input, {int_attr("axis", n.attrs.get<int64_t>("dim"))})};
}

std::vector<std::string> copy(GraphBuilder& b, const JobNode& n) {
  const DType from = n.input_metas.at(0).dtype, to = n.output_metas.at(0).dtype;
  // A device copy is no computation in ONNX, which has no devices.
  if (from == to) return {b.add("Identity", n.inputs)};
  return {b.add("Cast", n.inputs, {int_attr("to", onnx_type(to))})};
}

// flash_attention (inference): softmax(q k^T * scale + mask) v as MatMul, Softmax, MatMul. A
// causal call adds a constant (L, S) mask, -inf where key j > query i (PyTorch's top-left
// alignment). Its log-sum-exp and generator outputs are not exported (only backward reads them).
// A query row that sees no key gives NaN in ONNX's Softmax where flow gives zeros.
std::vector<std::string> flash_attention(GraphBuilder& b, const JobNode& n) {
  if (n.attrs.get<double>("dropout_p") != 0) unsupported(n, "has dropout; export the model in eval mode");
  const Shape& query = n.input_metas.at(0).shape;
  const Shape& key = n.input_metas.at(1).shape;
  const DType dtype = n.input_metas.at(0).dtype;
  const int64_t rank = key.ndim(), length = query[query.ndim() - 2], keys = key[rank - 2];
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < rank - 2; ++d) perm.push_back(d);
  perm.insert(perm.end(), {rank - 1, rank - 2});
  const std::string key_t = b.add("Transpose", {n.inputs.at(1)}, {ints_attr("perm", perm)});
  std::string scores = b.add("Mul", {b.add("MatMul", {n.inputs.at(0), key_t}), b.add_scalar(n.attrs.get<double>("scale"), dtype)});
  if (n.inputs.size() == 4) scores = b.add("Add", {scores, n.inputs.at(3)});
  if (n.attrs.get<bool>("is_causal")) {
    std::vector<float> mask(static_cast<size_t>(length * keys), 0.0f);
    for (int64_t i = 0; i < length; ++i) {
      for (int64_t j = i + 1; j < keys; ++j) mask[static_cast<size_t>(i * keys + j)] = -std::numeric_limits<float>::infinity();
    }
    scores = b.add("Add", {scores, b.add_initializer(n.node.name() + "/causal_mask", tensor<float>(mask).reshape({length, keys}).to(dtype))});
  }
  return {b.add("MatMul", {b.add("Softmax", {scores}, {int_attr("axis", -1)}), n.inputs.at(2)}), "", ""};
}

const std::map<std::string, NodeConverter>& converters() {
  static const std::map<std::string, NodeConverter> table = [] {
    std::map<std::string, NodeConverter> all{
      {"linear", linear},
      {"matmul", [](GraphBuilder& b, const JobNode& n) { return std::vector<std::string>{b.add("MatMul", n.inputs)}; }},
      {"conv2d", conv2d},
      {"max_pool2d", pool},
      {"max_pool2d_inference", pool},
      {"avg_pool2d", pool},
      {"batch_norm_eval", batch_norm},
      {"layer_norm", layer_norm},
      {"view", view},
      {"permute", permute},
      {"expand", expand},
      {"copy", copy},
      {"softmax", softmax},
      {"log_softmax", softmax},
      {"fused_elementwise", fused_elementwise},
      {"fused_linear", fused_linear},
      {"flash_attention", flash_attention},
    };
    all.merge(std::map<std::string, NodeConverter>(indexing_and_reduction_converters()));
    return all;
  }();
  return table;
}

}  // namespace

std::vector<std::string> convert_node(GraphBuilder& builder, const JobNode& node) {
  builder.set_scope(node.node.name());
  const std::string& op = node.node.op();
  if (auto found = converters().find(op); found != converters().end()) return found->second(builder, node);
  if (!node.batch_slots.empty()) unsupported(node, "has a batch-dependent attribute; export with a fixed batch size");
  // Element-wise ops (fusable or not, such as comparisons); any other op has no mapping there.
  return {elementwise(builder, op, node.attrs, node.inputs, node.input_metas.at(0).dtype, node)};
}

}  // namespace flow::onnx
