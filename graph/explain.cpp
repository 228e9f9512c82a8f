#include "graph/explain.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

namespace flow::graph {
namespace {

std::string milliseconds(double seconds) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(3) << seconds * 1e3 << " ms";
  return out.str();
}

// "linear 3, relu 2", most frequent first.
std::string counts_str(const std::map<std::string, int64_t>& counts) {
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (const auto& [op, count] : sorted) out += (out.empty() ? "" : ", ") + op + " " + std::to_string(count);
  return out;
}

std::string node_str(const NodeRef& node) { return node.name + " (" + node.op + ")"; }

void print_pass(std::ostream& out, const PassRecord& record) {
  out << "    " << record.pass << ": " << record.nodes_before << " -> " << record.nodes_after << " nodes (-" << record.removed.size()
      << " +" << record.added.size() << "), " << milliseconds(record.seconds) << "\n";
  for (const auto& group : record.fused) {
    out << "      fused " << node_str(group.node) << " <-";
    for (size_t i = 0; i < group.members.size(); ++i) out << (i ? ", " : " ") << node_str(group.members[i]);
    out << "\n";
  }
  for (const auto& node : record.folded) out << "      folded into a constant: " << node_str(node) << "\n";
  for (const auto& removed : record.eliminated) out << "      eliminated " << node_str(removed.node) << ": " << removed.reason << "\n";
  for (const auto& copy : record.bypassed) out << "      bypassed " << node_str(copy.node) << ": " << copy.reason << "\n";
  for (const auto& node : record.rewritten) out << "      rewritten " << node.name << " as " << node.op << "\n";
  for (const auto& clone : record.recomputed) out << "      recomputed for backward: " << node_str(clone.node) << " <- " << clone.original << "\n";
}

void print_plan(std::ostream& out, const PlanExplanation& plan) {
  const CompileLog& log = plan.log;
  out << "Plan " << plan.index << ": input signature " << signature_str(plan.signature) << "\n";
  if (log.guard_failures.empty()) out << "  compiled on the first call\n";
  for (size_t i = 0; i < log.guard_failures.size(); ++i) out << "  recompiled: plan " << i << " guard failed: " << log.guard_failures[i] << "\n";
  out << "  compile " << milliseconds(plan.compile_seconds) << ": trace " << milliseconds(log.trace_seconds) << ", passes "
      << milliseconds(log.passes_seconds) << ", plan " << milliseconds(log.plan_seconds) << ", runtime " << milliseconds(log.runtime_seconds)
      << "\n";
  out << "  traced " << plan.traced_op_count() << " ops (" << log.traced_nodes << " nodes): " << counts_str(log.traced_ops) << "\n";
  out << "  training rewrites: ";
  for (size_t i = 0; i < log.training_rewrites.size(); ++i) out << (i ? ", " : "") << log.training_rewrites[i];
  out << (log.training_rewrites.empty() ? "none\n" : "\n");
  out << "  passes:\n";
  for (const auto& record : log.passes) print_pass(out, record);
  out << "  after passes " << plan.nodes_after_passes << " nodes: " << counts_str(plan.ops_after_passes) << "\n";
  out << "  memory: " << plan.planned_buffers << " planned buffers, " << plan.reused.size() << " reusing a dead buffer's memory; planned";
  for (const auto& [device, bytes] : plan.planned_bytes) out << " " << device << " " << bytes << " bytes";
  out << " (" << plan.bytes_without_reuse << " without reuse)\n";
  for (const auto& reuse : plan.reused) out << "    " << reuse.value << " reuses " << reuse.reuses << " (" << reuse.nbytes << " bytes)\n";
  if (!plan.freeze_refusal.empty()) {
    out << "  frozen inference: never: " << plan.freeze_refusal << "\n";
  } else if (!plan.ran_frozen) {
    out << "  frozen inference: its latest call ran unfrozen (parameters or buffers changed since the call before)\n";
  } else {
    int64_t ops = 0;
    for (const auto& [op, n] : plan.frozen_ops) ops += n;
    out << "  frozen inference: its latest call ran frozen: " << ops << " ops (" << plan.frozen_blocked_steps << " on blocked layouts): "
        << counts_str(plan.frozen_ops) << "; planned";
    for (const auto& [device, bytes] : plan.frozen_planned_bytes) out << " " << device << " " << bytes << " bytes";
    out << "\n";
  }
}

}  // namespace

int64_t PlanExplanation::traced_op_count() const {
  int64_t count = 0;
  for (const auto& [op, n] : log.traced_ops) count += n;
  return count;
}

std::map<std::string, int64_t> op_counts(const proto::Job& job) {
  std::map<std::string, int64_t> counts;
  for (const auto& node : job.nodes()) {
    if (!is_source_kind(node.op()) && node.op() != kOutputOp) ++counts[node.op()];
  }
  return counts;
}

std::vector<BufferReuse> reused_buffers(const Plan& plan) {
  std::vector<std::pair<std::string, const PlannedBuffer*>> buffers;
  for (const auto& [value, buffer] : plan.buffers) buffers.emplace_back(value, &buffer);
  std::stable_sort(buffers.begin(), buffers.end(), [](const auto& a, const auto& b) { return a.second->first < b.second->first; });
  std::vector<BufferReuse> reused;
  for (const auto& [value, buffer] : buffers) {
    const std::pair<std::string, const PlannedBuffer*>* previous = nullptr;
    for (const auto& other : buffers) {
      const PlannedBuffer& earlier = *other.second;
      const bool overlaps = earlier.offset < buffer->offset + buffer->nbytes && buffer->offset < earlier.offset + earlier.nbytes;
      if (earlier.device != buffer->device || earlier.last >= buffer->first || !overlaps) continue;
      if (previous == nullptr || earlier.last > previous->second->last) previous = &other;
    }
    if (previous != nullptr) reused.push_back({value, previous->first, buffer->device, buffer->nbytes});
  }
  return reused;
}

PlanExplanation explain_plan(int64_t index, const InputSignature& signature, const CompileLog& log, const proto::Job& job, const Plan& plan,
                             double compile_seconds) {
  PlanExplanation explanation;
  explanation.index = index;
  explanation.signature = signature;
  explanation.log = log;
  explanation.compile_seconds = compile_seconds;
  explanation.nodes_after_passes = job.nodes_size();
  explanation.ops_after_passes = op_counts(job);
  explanation.planned_buffers = static_cast<int64_t>(plan.buffers.size());
  explanation.planned_bytes = plan.block_bytes;
  explanation.bytes_without_reuse = plan.total_buffer_bytes;
  explanation.reused = reused_buffers(plan);
  return explanation;
}

std::ostream& operator<<(std::ostream& out, const ExplainReport& report) {
  out << "Graph " << report.graph << ": " << report.plans.size() << " compiled plan" << (report.plans.size() == 1 ? "" : "s") << "\n";
  for (const auto& plan : report.plans) print_plan(out, plan);
  return out;
}

}  // namespace flow::graph
