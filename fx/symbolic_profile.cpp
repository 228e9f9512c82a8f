#include "fx/symbolic_profile.h"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>

#include "core/error.h"
#include "fx/interpreter.h"

namespace flow::fx {
namespace {

constexpr const char* kCaller = "fx.symbolic_profile";

int64_t meta_bytes(const TensorMeta& meta) { return meta.shape.numel() * static_cast<int64_t>(itemsize(meta.dtype)); }

TensorMeta value_meta(const Value& value) {
  const std::vector<TensorMeta> metas = value.node().meta().tensor_meta;
  if (static_cast<size_t>(value.index()) >= metas.size()) fail(kCaller, "no meta for ", value.str(), "; ShapeProp did not describe it");
  return metas[value.index()];
}

std::string scaled(double value, const char* const* units, int unit_count, double step) {
  int unit = 0;
  while (unit + 1 < unit_count && value >= step) {
    value /= step;
    ++unit;
  }
  char text[48];
  std::snprintf(text, sizeof(text), "%.2f %s", value, units[unit]);
  return text;
}

// Sums bytes of live values at each node, in node order: a value owning memory lives from its
// node to the last node reading it or any view or in-place alias of it.
int64_t peak_live_bytes(const std::vector<Node>& nodes, const std::vector<ProfileRow>& rows) {
  std::map<std::string, int> position;
  for (size_t i = 0; i < nodes.size(); ++i) position[nodes[i].name()] = static_cast<int>(i);
  std::map<std::string, std::string> root_of;  // node -> the node owning its outputs' memory
  std::map<std::string, int> last_use;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& node = nodes[i];
    std::string root = node.name();
    if (node.op() == Opcode::kCallFunction) {
      const OpDef& op = find_op(node.target());
      const std::vector<Value> args = node.args();
      if ((op.view || op.inplace) && !args.empty()) root = root_of.at(args[0].node().name());
    }
    root_of[node.name()] = root;
    int& last = last_use[root];
    last = std::max(last, static_cast<int>(i));
    for (const Node& user : node.users()) last = std::max(last, position.at(user.name()));
  }
  std::vector<int64_t> live(nodes.size() + 1, 0);  // a difference array over positions
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (rows[i].op == Opcode::kGetAttr || rows[i].output_bytes == 0) continue;
    live[i] += rows[i].output_bytes;
    live[last_use.at(nodes[i].name()) + 1] -= rows[i].output_bytes;
  }
  int64_t running = 0, peak = 0;
  for (size_t i = 0; i < nodes.size(); ++i) peak = std::max(peak, running += live[i]);
  return peak;
}

ProfileRow profile_call(const Node& node) {
  ProfileRow row;
  const OpDef& op = find_op(node.target());
  std::vector<TensorMeta> input_metas;
  const std::vector<Value> args = node.args();
  for (const Value& arg : args) input_metas.push_back(value_meta(arg));
  const std::vector<TensorMeta> output_metas = node.meta().tensor_meta;
  const Attrs attrs = node.kwargs();
  if (!op.view && !op.inplace) {
    for (const TensorMeta& meta : output_metas) row.output_bytes += meta_bytes(meta);
  }
  if (op.flops) row.forward_flops = op.flops(input_metas, output_metas, attrs);
  if (op.profile_cost) {
    const ProfileCost cost = op.profile_cost(input_metas, output_metas, attrs);
    row.temp_bytes = cost.temp_bytes;
    row.backward_flops = cost.backward_flops;
    // Each activation once, however many times the vjp reads it; parameters are not charged.
    std::set<std::string> charged;
    for (size_t input : cost.saved_inputs) {
      if (input >= args.size() || args[input].node().op() == Opcode::kGetAttr) continue;
      if (charged.insert(args[input].job_name()).second) row.backward_bytes += meta_bytes(input_metas[input]);
    }
    for (size_t output : cost.saved_outputs) {
      if (output < output_metas.size() && charged.insert(node.out(static_cast<int>(output)).job_name()).second) {
        row.backward_bytes += meta_bytes(output_metas[output]);
      }
    }
  }
  return row;
}

}  // namespace

ProfileRow ProfileTable::totals() const {
  ProfileRow sum;
  for (const ProfileRow& row : rows) {
    sum.output_bytes += row.output_bytes;
    sum.temp_bytes += row.temp_bytes;
    sum.param_bytes += row.param_bytes;
    sum.backward_bytes += row.backward_bytes;
    sum.forward_flops += row.forward_flops;
    sum.backward_flops += row.backward_flops;
  }
  return sum;
}

int64_t ProfileTable::peak_memory_estimate() const { return totals().param_bytes + peak_activation_bytes; }

std::string format_bytes(int64_t bytes) {
  static const char* const kUnits[] = {"B", "KB", "MB", "GB"};
  return scaled(static_cast<double>(bytes), kUnits, 4, 1024.0);
}

std::string format_flops(int64_t flops) {
  static const char* const kUnits[] = {"FLOPs", "KFLOPs", "MFLOPs", "GFLOPs", "TFLOPs"};
  return scaled(static_cast<double>(flops), kUnits, 5, 1000.0);
}

std::ostream& operator<<(std::ostream& out, const ProfileTable& table) {
  const std::vector<std::string> header{"Op type", "Op name", "Output size", "Temp size", "Param size", "Backward size", "Fwd FLOPs",
                                        "Bwd FLOPs"};
  std::vector<std::vector<std::string>> cells{header};
  auto cells_of = [](const std::string& type, const std::string& name, const ProfileRow& row) {
    return std::vector<std::string>{type,
                                    name,
                                    format_bytes(row.output_bytes),
                                    format_bytes(row.temp_bytes),
                                    format_bytes(row.param_bytes),
                                    format_bytes(row.backward_bytes),
                                    format_flops(row.forward_flops),
                                    format_flops(row.backward_flops)};
  };
  for (const ProfileRow& row : table.rows) cells.push_back(cells_of(opcode_name(row.op), row.name, row));
  cells.push_back(cells_of("total", "", table.totals()));
  std::vector<size_t> widths(header.size(), 0);
  for (const auto& line : cells) {
    for (size_t c = 0; c < line.size(); ++c) widths[c] = std::max(widths[c], line[c].size());
  }
  auto rule = [&] {
    for (size_t c = 0; c < widths.size(); ++c) out << std::string(widths[c], '-') << (c + 1 < widths.size() ? "  " : "\n");
  };
  for (size_t r = 0; r < cells.size(); ++r) {
    if (r == 1 || r + 1 == cells.size()) rule();
    for (size_t c = 0; c < widths.size(); ++c) {
      // The last column is not padded, so lines carry no trailing blanks.
      if (c + 1 == widths.size()) {
        out << cells[r][c] << "\n";
      } else {
        out << std::left << std::setw(static_cast<int>(widths[c])) << cells[r][c] << "  ";
      }
    }
  }
  out << "Peak memory estimate (inference): " << format_bytes(table.peak_memory_estimate()) << " = params "
      << format_bytes(table.totals().param_bytes) << " + peak activations " << format_bytes(table.peak_activation_bytes) << "\n";
  return out;
}

ProfileTable symbolic_profile(GraphModule& gm, const TensorList& inputs, bool verbose) {
  const size_t expected = gm.graph().placeholders().size();
  if (inputs.size() != expected) fail(kCaller, "the graph takes ", expected, " inputs, got ", inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) fail(kCaller, "input ", i, " is an undefined tensor");
  }
  ShapeProp(gm).propagate(inputs);

  ProfileTable table;
  const std::vector<Node> nodes = gm.graph().nodes();
  for (const Node& node : nodes) {
    ProfileRow row;
    if (node.op() == Opcode::kCallFunction) row = profile_call(node);
    row.op = node.op();
    row.name = node.name();
    row.target = node.target();
    const std::vector<TensorMeta> metas = node.meta().tensor_meta;
    if (node.op() == Opcode::kPlaceholder && !metas.empty()) row.output_bytes = meta_bytes(metas[0]);
    if (node.op() == Opcode::kGetAttr && !metas.empty()) row.param_bytes = meta_bytes(metas[0]);
    table.rows.push_back(std::move(row));
  }
  table.peak_activation_bytes = peak_live_bytes(nodes, table.rows);
  if (verbose) std::cout << table;
  return table;
}

}  // namespace flow::fx
