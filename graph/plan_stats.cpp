#include "graph/plan_stats.h"

#include <cstdio>
#include <sstream>

namespace flow::graph {
namespace {

int64_t desc_bytes(const proto::TensorDesc& desc) {
  const TensorMeta meta = meta_of(desc);
  return meta.shape.numel() * static_cast<int64_t>(itemsize(meta.dtype));
}

// The collective a node runs ("all_reduce" for "comm_all_reduce"), or "" for other ops.
std::string collective_kind(const std::string& op) {
  const std::string prefix = "comm_";
  return op.rfind(prefix, 0) == 0 ? op.substr(prefix.size()) : "";
}

// The fraction of a tensor's bytes each member sends, by the ring algorithms.
double ring_factor(const std::string& kind, int64_t members) {
  const double n = static_cast<double>(members);
  return (kind == "all_reduce" ? 2.0 : 1.0) * (n - 1) / n;
}

}  // namespace

PlanStats plan_stats(const proto::Job& job, const Plan& plan, int64_t world_size) {
  PlanStats stats;
  stats.ranks = world_size;
  const JobIndex index(job);
  for (const auto& node : job.nodes()) {
    if (node.op() == kVariableOp) {
      const bool optimizer_state = node.attrs().at("key").s().rfind("_optimizer.", 0) == 0;
      (optimizer_state ? stats.optimizer_state_bytes : stats.parameter_bytes) += desc_bytes(node.outputs(0));
      continue;
    }
    if (node.op() == kInputOp) {
      stats.input_bytes += desc_bytes(node.outputs(0));
      continue;
    }
    const std::string kind = collective_kind(node.op());
    if (kind.empty()) continue;
    // all_gather and recv are measured by what they make, the others by what they are given.
    int64_t bytes = 0;
    if (kind == "all_gather" || kind == "recv") {
      bytes = desc_bytes(node.outputs(0));
    } else {
      const auto [producer, output] = parse_value_name(node.inputs(0));
      bytes = desc_bytes(index.node(producer).outputs(output));
    }
    double sent = static_cast<double>(bytes);  // a send's whole tensor; a recv sends nothing
    if (kind == "recv") {
      sent = 0;
    } else if (kind != "send") {
      const auto& ranks = node.attrs().at("ranks").ints().values();
      sent *= ring_factor(kind, ranks.empty() ? world_size : ranks.size());
    }
    CollectiveCost& cost = stats.collectives[kind];
    cost.calls += 1;
    cost.tensor_bytes += bytes;
    cost.sent_bytes += sent;
    stats.sent_bytes += sent;
  }
  for (const auto& [device, bytes] : plan.block_bytes) stats.planned_bytes += bytes;
  return stats;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.2f %s", bytes, units[unit]);
  return text;
}

std::string format_plan_stats(const PlanStats& stats) {
  std::ostringstream out;
  out << "per rank, per step, of " << stats.ranks << " rank" << (stats.ranks == 1 ? "" : "s") << ":\n";
  out << "  communication (sent): " << human_bytes(stats.sent_bytes) << "\n";
  for (const auto& [kind, cost] : stats.collectives) {
    out << "    " << kind << ": " << cost.calls << " call" << (cost.calls == 1 ? "" : "s") << " on "
        << human_bytes(static_cast<double>(cost.tensor_bytes)) << ", sends " << human_bytes(cost.sent_bytes) << "\n";
  }
  out << "  memory: " << human_bytes(static_cast<double>(stats.total_bytes())) << "\n";
  out << "    parameters and buffers: " << human_bytes(static_cast<double>(stats.parameter_bytes)) << "\n";
  out << "    optimizer state: " << human_bytes(static_cast<double>(stats.optimizer_state_bytes)) << "\n";
  out << "    inputs: " << human_bytes(static_cast<double>(stats.input_bytes)) << "\n";
  out << "    planned (activations, gradients, temporaries): " << human_bytes(static_cast<double>(stats.planned_bytes)) << "\n";
  return out.str();
}

}  // namespace flow::graph
