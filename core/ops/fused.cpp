#include "core/ops/fused.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "core/interpreter.h"

namespace flow::fused {
namespace {

// Element-wise ops the fused kernel evaluates, by number of tensor arguments.
const std::map<std::string, int>& fusable_arity() {
  static const std::map<std::string, int> arity{
      {"neg", 1},        {"abs", 1},        {"sign", 1},        {"exp", 1},         {"log", 1},         {"sqrt", 1},
      {"rsqrt", 1},      {"sin", 1},        {"cos", 1},         {"tanh", 1},        {"sigmoid", 1},     {"relu", 1},
      {"silu", 1},       {"gelu", 1},       {"clamp", 1},       {"add_scalar", 1},  {"sub_scalar", 1},  {"rsub_scalar", 1},
      {"mul_scalar", 1}, {"div_scalar", 1}, {"rdiv_scalar", 1}, {"pow_scalar", 1},  {"rpow_scalar", 1}, {"add", 2},
      {"sub", 2},        {"mul", 2},        {"div", 2},         {"pow", 2},         {"maximum", 2},     {"minimum", 2},
      {"relu_grad", 2},  {"gelu_grad", 2},  {"where", 3},        {"copy", 1}};
  return arity;
}

// Attribute text: "name=s:<double>" (Scalar), "name=b:<0|1>" (bool), "name=t:<text>" (string).
std::string encode_attr(const std::string& name, const AttrValue& value) {
  if (const auto* scalar = std::get_if<Scalar>(&value)) {
    char digits[32];
    std::snprintf(digits, sizeof(digits), "%.17g", scalar->to_double());
    return name + "=s:" + digits;
  }
  if (const auto* flag = std::get_if<bool>(&value)) return name + "=b:" + (*flag ? "1" : "0");
  if (const auto* text = std::get_if<std::string>(&value)) return name + "=t:" + *text;
  fail("fused_elementwise", "attribute '", name, "' has a type programs cannot hold");
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  for (std::string part; std::getline(stream, part, separator);) parts.push_back(part);
  return parts;
}

// Checks the operands and the program; returns one meta per output. The in-place form's leading
// `destinations` inputs receive the outputs and are not operands. Each step is checked by its
// own op's inference on the metas of its arguments.
std::vector<TensorMeta> fused_infer(const std::vector<TensorMeta>& all_inputs, const Attrs& attrs, bool inplace) {
  if (!inplace && attrs.has("destinations")) fail("fused_elementwise", "only the in-place form takes destinations");
  const int64_t destinations = inplace ? attrs.get<int64_t>("destinations") : 0;
  if (destinations < (inplace ? 1 : 0) || destinations > static_cast<int64_t>(all_inputs.size())) {
    fail("fused_elementwise", "bad destination count ", destinations, " for ", all_inputs.size(), " inputs");
  }
  const std::vector<TensorMeta> in(all_inputs.begin() + destinations, all_inputs.end());
  if (in.empty()) fail("fused_elementwise", "expected at least one operand");
  // The program's dtype: its first operand's, which kernels are found by. Bool operands (where's
  // conditions) read as 0 or 1.
  if (!is_floating(in[0].dtype)) fail("fused_elementwise", "the first operand must be floating, got ", dtype_name(in[0].dtype));
  const DType dtype = in[0].dtype;
  const Shape shape(attrs.get<std::vector<int64_t>>("shape"));
  for (const auto& meta : in) {
    // A float16/bfloat16 operand of a float32 program is widened as it is read (copy steps).
    const bool widened = dtype == kFloat32 && is_reduced_floating(meta.dtype);
    if (meta.dtype != kBool && meta.dtype != dtype && !widened) {
      fail("fused_elementwise", "operands must share one floating dtype (or be bool, or 16-bit floats of a float32 program), got ",
           dtype_name(meta.dtype), " and ", dtype_name(dtype));
    }
    if (!(meta.device == in[0].device)) fail("fused_elementwise", "operands must share one device");
    if (!operand_layout(meta.shape, shape)) fail("fused_elementwise", "operand ", meta.shape, " does not broadcast to ", shape);
  }
  const Program program = decode(attrs.get<std::string>("program"));
  std::vector<TensorMeta> step_metas;
  for (size_t s = 0; s < program.steps.size(); ++s) {
    const Step& step = program.steps[s];
    auto arity = fusable_arity().find(step.op);
    if (arity == fusable_arity().end()) fail("fused_elementwise", "op '", step.op, "' cannot be fused");
    if (static_cast<int>(step.args.size()) != arity->second) fail("fused_elementwise", step.op, " takes ", arity->second, " arguments");
    std::vector<TensorMeta> args;
    for (int arg : step.args) {
      const bool valid = arg >= 0 ? arg < static_cast<int>(in.size()) : -arg - 1 < static_cast<int>(s);
      if (!valid) fail("fused_elementwise", "step ", s, " (", step.op, ") reads an undefined value");
      if (arg < 0 && step_metas[-arg - 1].dtype != dtype) fail("fused_elementwise", "step ", s, " (", step.op, ") reads a rounded value");
      args.push_back(arg >= 0 ? in[arg] : step_metas[-arg - 1]);
    }
    // A copy step converts its argument to the program's dtype (the copy op's own attributes, a
    // dtype and a device, are implied), or, with a "dtype" attribute, rounds a float32 program's
    // value to float16/bfloat16 for an output of that dtype.
    DType step_dtype = dtype;
    if (step.op == "copy" && step.attrs.has("dtype")) {
      step_dtype = dtype_from_name(step.attrs.get<std::string>("dtype"));
      if (dtype != kFloat32 || !is_reduced_floating(step_dtype)) {
        fail("fused_elementwise", "step ", s, " rounds to ", dtype_name(step_dtype), ": only float32 programs round, to float16 or bfloat16");
      }
      if (std::find(program.outputs.begin(), program.outputs.end(), static_cast<int>(s)) == program.outputs.end()) {
        fail("fused_elementwise", "step ", s, " rounds a value that is not an output");
      }
    }
    const std::vector<TensorMeta> result = step.op == "copy" ? std::vector<TensorMeta>{{args[0].shape, step_dtype, args[0].device}}
                                                             : checked_infer(find_op(step.op), args, step.attrs);
    if (!operand_layout(result[0].shape, shape) || result[0].dtype != step_dtype) {
      fail("fused_elementwise", "step ", s, " (", step.op, ") gives ", dtype_name(result[0].dtype), " ", result[0].shape,
           ", not a value of the program's dtype and shape ", shape);
    }
    step_metas.push_back(result[0]);
  }
  if (program.outputs.empty()) fail("fused_elementwise", "the program has no outputs");
  if (destinations > 0 && static_cast<int64_t>(program.outputs.size()) != destinations) {
    fail("fused_elementwise", "the program has ", program.outputs.size(), " outputs for ", destinations, " destinations");
  }
  std::vector<TensorMeta> out;
  for (int step : program.outputs) {
    if (step < 0 || step >= static_cast<int>(program.steps.size())) fail("fused_elementwise", "output step ", step, " does not exist");
    out.push_back({shape, step_metas[step].dtype, in[0].device});
  }
  for (int64_t d = 0; d < destinations; ++d) {
    if (!(all_inputs[d].shape == shape) || all_inputs[d].dtype != out[d].dtype) {
      fail("fused_elementwise", "destination ", dtype_name(all_inputs[d].dtype), " ", all_inputs[d].shape, " does not match the output ",
           dtype_name(out[d].dtype), " ", shape);
    }
  }
  return out;
}

// One operation per element per step, as the unfused chain's ops count them.
int64_t program_flops(const Attrs& attrs) {
  return Shape(attrs.get<std::vector<int64_t>>("shape")).numel() * static_cast<int64_t>(decode(attrs.get<std::string>("program")).steps.size());
}
int64_t fused_flops(const std::vector<TensorMeta>&, const std::vector<TensorMeta>&, const Attrs& attrs) { return program_flops(attrs); }

const OpDef& kFused = OpBuilder("fused_elementwise")
                          .inputs({"operands"}, /*variadic=*/true)
                          .outputs({"out"})
                          .attrs({{"program", AttrType::kString}, {"shape", AttrType::kInts}})
                          .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) { return fused_infer(in, attrs, false); })
                          .sbp(sbp::elementwise)
                          .flops(fused_flops)
                          .def();

// The same, writing its outputs into its leading inputs (a fused chain ending in assign(dst, ...)).
const OpDef& kFusedInplace = OpBuilder("fused_elementwise_inplace")
                                 .inputs({"destinations_and_operands"}, /*variadic=*/true)
                                 .outputs({"out"})
                                 .attrs({{"program", AttrType::kString}, {"shape", AttrType::kInts}, {"destinations", AttrType::kInt}})
                                 .inplace()
                                 .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) { return fused_infer(in, attrs, true); })
                                 .sbp(sbp::elementwise)
                                 .flops(fused_flops)
                                 .def();

// linear(x, w[, b]) followed by a fused program whose operand 0 is the linear's result (a matmul
// epilogue): inputs are the linear's, then the program's other operands.
std::vector<TensorMeta> fused_linear_infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  const int64_t linear_inputs = attrs.get<int64_t>("linear_inputs");
  if (linear_inputs != 2 && linear_inputs != 3) fail("fused_linear", "linear_inputs must be 2 or 3, got ", linear_inputs);
  if (static_cast<int64_t>(in.size()) < linear_inputs) fail("fused_linear", "expected at least ", linear_inputs, " inputs, got ", in.size());
  std::vector<TensorMeta> operands = checked_infer(find_op("linear"), {in.begin(), in.begin() + linear_inputs}, attrs);
  if (!(operands[0].shape == Shape(attrs.get<std::vector<int64_t>>("shape")))) {
    fail("fused_linear", "the linear's output ", operands[0].shape, " is not the program's shape");
  }
  operands.insert(operands.end(), in.begin() + linear_inputs, in.end());
  return fused_infer(operands, attrs, false);
}

// The linear's signatures joined with the epilogue's element-wise ones where they agree on the
// product: e.g. rows split (weights broadcast) with the other operands split or broadcast like
// them. A partial-sum product joins none, since the epilogue is not linear.
std::vector<SbpSignature> fused_linear_sbp(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  const auto linear_inputs = static_cast<size_t>(attrs.get<int64_t>("linear_inputs"));
  const OpDef& linear = find_op("linear");
  const std::vector<TensorMeta> linear_in(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(linear_inputs));
  std::vector<TensorMeta> operands = checked_infer(linear, linear_in, attrs);
  operands.insert(operands.end(), in.begin() + static_cast<std::ptrdiff_t>(linear_inputs), in.end());
  std::vector<SbpSignature> signatures;
  for (const SbpSignature& product : linear.sbp(linear_in, attrs)) {
    for (const SbpSignature& epilogue : sbp::elementwise(operands, attrs)) {
      if (!(epilogue.inputs[0] == product.outputs[0])) continue;
      SbpSignature joined{product.inputs, epilogue.outputs};
      joined.inputs.insert(joined.inputs.end(), epilogue.inputs.begin() + 1, epilogue.inputs.end());
      signatures.push_back(std::move(joined));
    }
  }
  return signatures;
}

const OpDef& kFusedLinear = OpBuilder("fused_linear")
                                .inputs({"linear_inputs_and_operands"}, /*variadic=*/true)
                                .outputs({"out"})
                                .attrs({{"program", AttrType::kString}, {"shape", AttrType::kInts}, {"linear_inputs", AttrType::kInt}})
                                .infer(fused_linear_infer)
                                .sbp(fused_linear_sbp)
                                // The linear's products (2 per multiply-accumulate) plus its epilogue.
                                .flops([](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out, const Attrs& attrs) {
                                  return 2 * out[0].shape.numel() * in[1].shape[1] + program_flops(attrs);
                                })
                                .def();

}  // namespace

bool can_fuse(const std::string& op) { return fusable_arity().count(op) != 0; }

std::optional<OperandLayout> operand_layout(const Shape& operand, const Shape& out) {
  if (operand.ndim() > out.ndim()) return std::nullopt;
  if (operand.numel() == 1) return OperandLayout{1, 1};
  // Right-aligned as in NumPy broadcasting: the operand's dims, padded with leading 1s.
  std::vector<int64_t> dims(out.ndim() - operand.ndim(), 1);
  for (int64_t d = 0; d < operand.ndim(); ++d) dims.push_back(operand[d]);
  int64_t first = 0;  // the operand's non-1 dims span [first, last] and must match the output's
  while (dims[first] == 1) ++first;
  int64_t last = out.ndim() - 1;
  while (dims[last] == 1) --last;
  OperandLayout layout;
  for (int64_t d = first; d <= last; ++d) {
    if (dims[d] != out[d]) return std::nullopt;
    layout.size *= out[d];
  }
  for (int64_t d = last + 1; d < out.ndim(); ++d) layout.inner *= out[d];
  return layout;
}

std::string encode(const Program& program) {
  std::string text;
  for (const Step& step : program.steps) {
    text += step.op + "|";
    for (size_t a = 0; a < step.args.size(); ++a) text += (a ? "," : "") + std::to_string(step.args[a]);
    text += "|";
    bool first = true;
    for (const auto& [name, value] : step.attrs.values()) {
      text += (first ? "" : ",") + encode_attr(name, value);
      first = false;
    }
    text += ";";
  }
  text += "out|";
  for (size_t o = 0; o < program.outputs.size(); ++o) text += (o ? "," : "") + std::to_string(program.outputs[o]);
  return text;
}

namespace {
Program decode_unchecked(const std::string& text) {
  Program program;
  for (const std::string& part : split(text, ';')) {
    const std::vector<std::string> fields = split(part, '|');
    if (fields.size() == 2 && fields[0] == "out") {
      for (const auto& output : split(fields[1], ',')) program.outputs.push_back(std::stoi(output));
      continue;
    }
    if (fields.size() < 2) fail("fused_elementwise", "malformed program step '", part, "'");
    Step step{fields[0], {}, {}};
    for (const auto& arg : split(fields[1], ',')) step.args.push_back(std::stoi(arg));
    if (fields.size() > 2) {
      for (const auto& attr : split(fields[2], ',')) {
        const size_t eq = attr.find('=');
        if (eq == std::string::npos || attr.size() < eq + 3) fail("fused_elementwise", "malformed attribute '", attr, "'");
        const std::string name = attr.substr(0, eq), value = attr.substr(eq + 3);
        switch (attr[eq + 1]) {
          case 's': step.attrs.set(name, Scalar(std::stod(value))); break;
          case 'b': step.attrs.set(name, value == "1"); break;
          case 't': step.attrs.set(name, value); break;
          default: fail("fused_elementwise", "malformed attribute '", attr, "'");
        }
      }
    }
    program.steps.push_back(std::move(step));
  }
  return program;
}
}  // namespace

Program without_conversions(const Program& program, const std::function<bool(int operand)>& strip) {
  const std::set<int> outputs(program.outputs.begin(), program.outputs.end());
  Program kept;
  std::vector<int> arg_of_step(program.steps.size());  // what a later step reads for each step
  for (size_t s = 0; s < program.steps.size(); ++s) {
    Step step = program.steps[s];
    for (int& arg : step.args) arg = arg >= 0 ? arg : arg_of_step.at(-arg - 1);
    const bool conversion =
        step.op == "copy" && step.attrs.values().empty() && step.args.size() == 1 && step.args[0] >= 0 && strip(step.args[0]);
    if (conversion && !outputs.count(static_cast<int>(s))) {
      arg_of_step[s] = step.args[0];
      continue;
    }
    arg_of_step[s] = step_arg(static_cast<int>(kept.steps.size()));
    kept.steps.push_back(std::move(step));
  }
  for (int output : program.outputs) kept.outputs.push_back(-arg_of_step.at(output) - 1);
  return kept;
}

Program decode(const std::string& text) {
  try {
    return decode_unchecked(text);
  } catch (const std::logic_error&) {  // std::stoi and std::stod on a malformed number
    fail("fused_elementwise", "malformed number in program '", text, "'");
  }
}

TensorList fused_elementwise(const TensorList& operands, const Program& program, const Shape& shape) {
  return apply(kFused, operands, Attrs().set("program", encode(program)).set("shape", shape));
}

void fused_elementwise_(const TensorList& destinations, const TensorList& operands, const Program& program) {
  for (const Tensor& destination : destinations) {
    if (!destination.is_contiguous()) fail("fused_elementwise", "destinations must be contiguous");
  }
  TensorList inputs = destinations;
  inputs.insert(inputs.end(), operands.begin(), operands.end());
  const Shape shape = destinations.empty() ? Shape() : destinations[0].shape();
  apply(kFusedInplace, inputs,
        Attrs().set("program", encode(program)).set("shape", shape).set("destinations", static_cast<int64_t>(destinations.size())));
}

}  // namespace flow::fused
