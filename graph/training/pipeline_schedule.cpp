#include "graph/training/pipeline_schedule.h"

#include <glog/logging.h>

#include <algorithm>

#include "core/op.h"
#include "core/comm/process_group.h"
#include "core/ops/comm.h"

namespace flow::graph {
namespace {

// The micro-batch range cut into sources and, per micro-batch, its forward and gradient nodes.
struct MicroBatches {
  int begin = 0, end = 0;
  std::vector<int> sources;
  std::vector<std::vector<int>> forwards, gradients;
};

// False when the range holds an in-place op, or (collectives_allowed false) a collective other
// than send/recv.
bool split_micro_batches(const proto::Job& job, const std::vector<int>& starts, const std::set<std::string>& gradient_nodes,
                         bool collectives_allowed, MicroBatches& split) {
  CHECK_GE(starts.size(), 2u);
  split.begin = starts.front();
  split.end = starts.back();
  CHECK(0 <= split.begin && split.begin <= split.end && split.end <= job.nodes_size());
  const size_t count = starts.size() - 1;
  split.forwards.assign(count, {});
  split.gradients.assign(count, {});
  for (size_t k = 0; k < count; ++k) {
    for (int i = starts[k]; i < starts[k + 1]; ++i) {
      const proto::Node& node = job.nodes(i);
      if (is_source_kind(node.op())) {
        split.sources.push_back(i);
        continue;
      }
      if (node.op() != kOutputOp) {
        const OpDef& op = find_op(node.op());
        if (op.inplace) return false;
        if (!collectives_allowed && distributed::is_collective(op) && !distributed::is_point_to_point(op)) return false;
      }
      (gradient_nodes.count(node.name()) ? split.gradients[k] : split.forwards[k]).push_back(i);
    }
  }
  return true;
}

// Puts the range's nodes in `range_order` (Job positions) unless a node would read a value
// before its producer.
bool reorder(proto::Job& job, const MicroBatches& split, const std::vector<int>& range_order) {
  std::vector<int> order;
  for (int i = 0; i < split.begin; ++i) order.push_back(i);
  order.insert(order.end(), split.sources.begin(), split.sources.end());
  order.insert(order.end(), range_order.begin(), range_order.end());
  for (int i = split.end; i < job.nodes_size(); ++i) order.push_back(i);
  CHECK_EQ(static_cast<int>(order.size()), job.nodes_size());
  std::set<std::string> defined;
  for (int position : order) {
    const proto::Node& node = job.nodes(position);
    for (const auto& input : node.inputs()) {
      if (!defined.count(parse_value_name(input).first)) return false;
    }
    defined.insert(node.name());
  }
  google::protobuf::RepeatedPtrField<proto::Node> reordered;
  for (int position : order) reordered.Add()->Swap(job.mutable_nodes(position));
  job.mutable_nodes()->Swap(&reordered);
  return true;
}

void append(std::vector<int>& order, const std::vector<int>& group) { order.insert(order.end(), group.begin(), group.end()); }

}  // namespace

bool schedule_forwards_first(proto::Job& job, const std::vector<int>& micro_batch_starts, const std::set<std::string>& gradient_nodes) {
  MicroBatches split;
  if (!split_micro_batches(job, micro_batch_starts, gradient_nodes, true, split)) return false;
  std::vector<int> order;
  for (const auto& forward : split.forwards) append(order, forward);
  for (const auto& gradient : split.gradients) append(order, gradient);
  return reorder(job, split, order);
}

bool schedule_one_forward_one_backward(proto::Job& job, const std::vector<int>& micro_batch_starts,
                                       const std::set<std::string>& gradient_nodes, int64_t warmup_forwards) {
  CHECK_GE(warmup_forwards, 0);
  MicroBatches split;
  if (!split_micro_batches(job, micro_batch_starts, gradient_nodes, false, split)) return false;
  const auto count = static_cast<int64_t>(split.forwards.size());
  const int64_t warmup = std::min(warmup_forwards, count);
  std::vector<int> order;
  for (int64_t k = 0; k < warmup; ++k) append(order, split.forwards[k]);
  for (int64_t k = 0; k < count; ++k) {
    if (k + warmup < count) append(order, split.forwards[k + warmup]);
    append(order, split.gradients[k]);
  }
  return reorder(job, split, order);
}


namespace training {
namespace {

// The placements of the parameters, in the order of the parameters: a pipeline's stages.
std::vector<Placement> stages_of(const TensorList& params) {
  std::vector<Placement> stages;
  for (const Tensor& p : params) {
    if (p.is_global() && std::find(stages.begin(), stages.end(), p.placement()) == stages.end()) stages.push_back(p.placement());
  }
  return stages;
}

// This rank's stage among `stages`, or -1 unless it is in exactly one.
int64_t stage_of_this_rank(const std::vector<Placement>& stages) {
  int64_t stage = -1;
  for (size_t s = 0; s < stages.size(); ++s) {
    if (!stages[s].contains(distributed::get_rank())) continue;
    if (stage >= 0) return -1;
    stage = static_cast<int64_t>(s);
  }
  return stage;
}

}  // namespace

bool schedule_pipeline(proto::Job& job, const std::vector<int>& micro_batch_starts, const std::set<std::string>& gradient_nodes,
                       const TensorList& params, nn::PipelineSchedule schedule, const std::string& graph, int debug_level,
                       std::ostream& log) {
  const std::vector<Placement> stages = stages_of(params);
  if (micro_batch_starts.size() <= 2 || stages.size() <= 1) return false;
  const int64_t stage = stage_of_this_rank(stages);
  bool one_forward_one_backward = false;
  if (schedule == nn::PipelineSchedule::k1F1B && stage >= 0) {
    const auto warmup = static_cast<int64_t>(stages.size()) - 1 - stage;
    one_forward_one_backward = schedule_one_forward_one_backward(job, micro_batch_starts, gradient_nodes, warmup);
  }
  const bool scheduled = one_forward_one_backward || schedule_forwards_first(job, micro_batch_starts, gradient_nodes);
  if (debug_level < 1) return true;
  log << "(GRAPH:" << graph << ") pipeline schedule: "
      << (one_forward_one_backward ? "1F1B, stage " + std::to_string(stage) + " of " + std::to_string(stages.size())
          : scheduled          ? "every micro-batch's forward before the backwards (GPipe)"
                               : "trace order (the forwards-first order would break a dependency)");
  if (schedule == nn::PipelineSchedule::k1F1B && !one_forward_one_backward) {
    log << "; 1F1B refused: " << (stage < 0 ? "this rank is in several stages" : "a collective or in-place op among the micro-batches");
  }
  log << "\n";
  return true;
}

}  // namespace training
}  // namespace flow::graph
