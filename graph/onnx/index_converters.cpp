// ONNX forms of flow's indexing, sorting, cumulative and reduction ops: what a language model's
// export reads (embeddings, masks, key/value caches, sampling helpers).
#include "graph/onnx/op_converters.h"

namespace flow::onnx {
namespace {

::onnx::AttributeProto keepdims(const JobNode& n) { return int_attr("keepdims", n.attrs.get<bool>("keepdim") ? 1 : 0); }

void require_rank(const JobNode& n) {
  if (n.input_metas.at(0).shape.ndim() == 0) unsupported(n, "runs on a 0-d tensor, which ONNX's operator does not take");
}

// reduce_sum: ReduceSum (axes as an input since opset 13); no dims reduces every axis.
std::vector<std::string> reduce_sum(GraphBuilder& b, const JobNode& n) {
  const std::vector<int64_t>& dims = ints(n, "dims");
  std::vector<std::string> inputs{n.inputs.at(0)};
  if (!dims.empty()) inputs.push_back(b.add_ints("axes", dims));
  return {b.add("ReduceSum", inputs, {keepdims(n)})};
}

// reduce_max/min/prod: in opset 17 these take their axes as an attribute (an input from 18 on).
std::vector<std::string> reduce_with_axes_attribute(GraphBuilder& b, const JobNode& n) {
  static const std::map<std::string, std::string> onnx_op{{"reduce_max", "ReduceMax"}, {"reduce_min", "ReduceMin"}, {"reduce_prod", "ReduceProd"}};
  std::vector<::onnx::AttributeProto> attributes{keepdims(n)};
  if (const auto& dims = ints(n, "dims"); !dims.empty()) attributes.push_back(ints_attr("axes", dims));
  return {b.add(onnx_op.at(n.node.op()), n.inputs, attributes)};
}

// argmax/argmin: the first index of the extremum, as ONNX's default select_last_index = 0.
std::vector<std::string> arg_extremum(GraphBuilder& b, const JobNode& n) {
  require_rank(n);
  return {b.add(n.node.op() == "argmax" ? "ArgMax" : "ArgMin", n.inputs, {int_attr("axis", axis_of(n)), keepdims(n)})};
}

// max_dim/min_dim: the values and their first indices along one axis.
std::vector<std::string> extremum_along_dim(GraphBuilder& b, const JobNode& n) {
  require_rank(n);
  const bool max = n.node.op() == "max_dim";
  const std::string values = b.add(max ? "ReduceMax" : "ReduceMin", n.inputs, {ints_attr("axes", {axis_of(n)}), keepdims(n)});
  return {values, b.add(max ? "ArgMax" : "ArgMin", n.inputs, {int_attr("axis", axis_of(n)), keepdims(n)})};
}

// sort and topk: ONNX's TopK, sorted. Equal values keep their input order in both (lower index
// first). An unsorted topk is exported sorted, which is one of the orders it may return.
std::vector<std::string> top_k(GraphBuilder& b, const JobNode& n) {
  require_rank(n);
  const bool sort = n.node.op() == "sort";
  const int64_t axis = axis_of(n);
  const int64_t k = sort ? n.input_metas.at(0).shape[axis] : n.attrs.get<int64_t>("k");
  const bool largest = sort ? n.attrs.get<bool>("descending") : n.attrs.get<bool>("largest");
  return b.add_node("TopK", {n.inputs.at(0), b.add_ints("k", {k})}, {int_attr("axis", axis), int_attr("largest", largest ? 1 : 0), int_attr("sorted", 1)},
                    2);
}

std::vector<std::string> cumsum(GraphBuilder& b, const JobNode& n) {
  require_rank(n);
  return {b.add("CumSum", {n.inputs.at(0), b.add_scalar(static_cast<double>(axis_of(n)), kInt64)},
                {int_attr("reverse", n.attrs.get<bool>("reverse") ? 1 : 0)})};
}

// tril/triu: Trilu with the diagonal offset as its k input.
std::vector<std::string> triangular(GraphBuilder& b, const JobNode& n) {
  return {b.add("Trilu", {n.inputs.at(0), b.add_scalar(static_cast<double>(n.attrs.get<int64_t>("diagonal")), kInt64)},
                {int_attr("upper", n.node.op() == "triu" ? 1 : 0)})};
}

// gather(input, dim, index): out[i][j] = input[i][index[i][j]] along dim, ONNX's GatherElements.
std::vector<std::string> gather(GraphBuilder& b, const JobNode& n) { return {b.add("GatherElements", n.inputs, {int_attr("axis", axis_of(n))})}; }

// index_select(input, dim, index): whole slices at a 1-d index, ONNX's Gather.
std::vector<std::string> index_select(GraphBuilder& b, const JobNode& n) { return {b.add("Gather", n.inputs, {int_attr("axis", axis_of(n))})}; }

// select(input, dim, index): Gather at a 0-d index, which drops the axis as select does.
std::vector<std::string> select(GraphBuilder& b, const JobNode& n) {
  const int64_t axis = axis_of(n), size = n.input_metas.at(0).shape[axis], index = n.attrs.get<int64_t>("index");
  return {b.add("Gather", {n.inputs.at(0), b.add_scalar(static_cast<double>(index < 0 ? index + size : index), kInt64)}, {int_attr("axis", axis)})};
}

// scatter / scatter_add: ScatterElements. flow lets src be larger than index (its leading part is
// read); ONNX wants updates shaped like the indices, so the part read is sliced out first.
std::vector<std::string> scatter(GraphBuilder& b, const JobNode& n) {
  const Shape& index = n.input_metas.at(1).shape;
  std::string src = n.inputs.at(2);
  if (n.input_metas.at(2).shape != index) {
    std::vector<int64_t> axes;
    for (int64_t d = 0; d < index.ndim(); ++d) axes.push_back(d);
    src = b.add("Slice", {src, b.add_ints("starts", std::vector<int64_t>(axes.size(), 0)), b.add_ints("ends", index.vec()), b.add_ints("axes", axes)});
  }
  ::onnx::AttributeProto reduction;
  reduction.set_name("reduction");
  reduction.set_type(::onnx::AttributeProto::STRING);
  reduction.set_s(n.attrs.get<std::string>("reduce") == "add" ? "add" : "none");
  return {b.add("ScatterElements", {n.inputs.at(0), n.inputs.at(1), src}, {int_attr("axis", axis_of(n)), reduction})};
}

// one_hot: OneHot with int64 off/on values [0, 1] along a new last axis.
std::vector<std::string> one_hot(GraphBuilder& b, const JobNode& n) {
  const Shape& out = n.output_metas.at(0).shape;
  return {b.add("OneHot", {n.inputs.at(0), b.add_ints("depth", {out[out.ndim() - 1]}), b.add_ints("values", {0, 1})}, {int_attr("axis", -1)})};
}

std::vector<std::string> cat(GraphBuilder& b, const JobNode& n) { return {b.add("Concat", n.inputs, {int_attr("axis", axis_of(n))})}; }

// slice: ONNX's Slice counts negative starts and ends from the end and clamps them as flow does.
std::vector<std::string> slice(GraphBuilder& b, const JobNode& n) {
  if (!n.batch_slots.empty()) unsupported(n, "slices by a batch-dependent bound; export with a fixed batch size");
  return {b.add("Slice", {n.inputs.at(0), b.add_ints("starts", {n.attrs.get<int64_t>("start")}), b.add_ints("ends", {n.attrs.get<int64_t>("end")}),
                          b.add_ints("axes", {axis_of(n)}), b.add_ints("steps", {n.attrs.get<int64_t>("step")})})};
}

// masked_fill(input, mask, value): Where(mask, value, input).
std::vector<std::string> masked_fill(GraphBuilder& b, const JobNode& n) {
  const std::string value = b.add_scalar(n.attrs.get<Scalar>("value").to_double(), n.input_metas.at(0).dtype);
  return {b.add("Where", {n.inputs.at(1), value, n.inputs.at(0)})};
}

}  // namespace

const std::map<std::string, NodeConverter>& indexing_and_reduction_converters() {
  static const std::map<std::string, NodeConverter> table{
      {"reduce_sum", reduce_sum},
      {"reduce_max", reduce_with_axes_attribute},
      {"reduce_min", reduce_with_axes_attribute},
      {"reduce_prod", reduce_with_axes_attribute},
      {"argmax", arg_extremum},
      {"argmin", arg_extremum},
      {"max_dim", extremum_along_dim},
      {"min_dim", extremum_along_dim},
      {"sort", top_k},
      {"topk", top_k},
      {"cumsum", cumsum},
      {"tril", triangular},
      {"triu", triangular},
      {"gather", gather},
      {"index_select", index_select},
      {"select", select},
      {"scatter", scatter},
      {"one_hot", one_hot},
      {"cat", cat},
      {"slice", slice},
      {"masked_fill", masked_fill},
  };
  return table;
}

}  // namespace flow::onnx
