#include "graph/pipeline_schedule.h"

#include <glog/logging.h>

#include "core/op.h"

namespace flow::graph {

bool schedule_forwards_first(proto::Job& job, const std::vector<int>& micro_batch_starts, const std::set<std::string>& gradient_nodes) {
  CHECK_GE(micro_batch_starts.size(), 2u);
  const int begin = micro_batch_starts.front(), end = micro_batch_starts.back();
  CHECK(0 <= begin && begin <= end && end <= job.nodes_size());
  std::vector<int> sources, forwards, gradients;
  for (int i = begin; i < end; ++i) {
    const proto::Node& node = job.nodes(i);
    if (is_source_kind(node.op())) {
      sources.push_back(i);
      continue;
    }
    if (node.op() != kOutputOp && find_op(node.op()).inplace) return false;
    (gradient_nodes.count(node.name()) ? gradients : forwards).push_back(i);
  }
  std::vector<int> order;
  for (int i = 0; i < begin; ++i) order.push_back(i);
  for (const auto* group : {&sources, &forwards, &gradients}) order.insert(order.end(), group->begin(), group->end());
  for (int i = end; i < job.nodes_size(); ++i) order.push_back(i);
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

}  // namespace flow::graph
