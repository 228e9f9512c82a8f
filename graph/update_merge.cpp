// Merging in-place updates: an optimizer's update of one parameter traces as several in-place
// element-wise chains, which elementwise_fusion turns into one fused_elementwise_inplace node
// each. AdamW decays p, updates its two moments, then updates p from all three: four passes over
// tensors of the parameter's size, each streaming its operands through memory. A node that reads
// the results of earlier in-place nodes of its shape takes them in: one pass reads the gradient,
// the moments and p once and writes each once (OneFlow fuses its model updates into one kernel per
// parameter for the same reason). It also computes the element-wise producers of its operands
// that only it reads, such as the sum of a tied embedding's two gradients.
#include <glog/logging.h>

#include <algorithm>
#include <set>

#include "core/ops/fused.h"
#include "graph/passes.h"

namespace flow::graph {
namespace {

constexpr const char* kUpdateOp = "fused_elementwise_inplace";

int destinations_of(const proto::Node& node) { return static_cast<int>(node.attrs().at("destinations").i()); }

const proto::TensorDesc& desc_of(const JobIndex& index, const std::string& value) {
  const auto [name, output] = parse_value_name(value);
  return index.node(name).outputs(output);
}

// The value whose storage `value` is: a view's is its input's, an in-place node's output i is its
// input i.
std::string storage_of(const JobIndex& index, std::string value) {
  for (;;) {
    const auto [name, output] = parse_value_name(value);
    const proto::Node& node = index.node(name);
    if (is_source_kind(node.op()) || node.op() == kOutputOp) return value;
    if (output < written_inputs(node)) {
      value = node.inputs(output);
    } else if (find_op(node.op()).view && node.inputs_size() > 0) {
      value = node.inputs(0);
    } else {
      return value;
    }
  }
}

// Output descs alike but for the dtype (shape, device, placement, SBP).
std::string layout_key(proto::TensorDesc desc) {
  desc.clear_dtype();
  return desc.SerializeAsString();
}

// Nodes of one program dtype and output layout can share a program.
bool same_space(const JobIndex& index, const proto::Node& a, const proto::Node& b) {
  const proto::TensorDesc &first_a = desc_of(index, a.inputs(destinations_of(a))), &first_b = desc_of(index, b.inputs(destinations_of(b)));
  return a.attrs().at("shape").SerializeAsString() == b.attrs().at("shape").SerializeAsString() && first_a.dtype() == first_b.dtype() &&
         layout_key(a.outputs(0)) == layout_key(b.outputs(0));
}

// The in-place nodes `last` takes in: the earlier updates of its space whose results it reads.
std::vector<int> members_of(const proto::Job& job, const JobIndex& index, int last) {
  const proto::Node& node = job.nodes(last);
  std::set<int> members;
  for (const auto& input : node.inputs()) {
    const int producer = index.position(parse_value_name(input).first);
    if (producer != last && job.nodes(producer).op() == kUpdateOp && same_space(index, job.nodes(producer), node)) members.insert(producer);
  }
  return {members.begin(), members.end()};
}

// Whether running `members` (ascending, before `last`) at last's position, in one pass with it,
// computes what running each at its own position does. Every tile of the merged node reads its
// operands before it writes, so: no node reads, from another storage alias, a value an earlier
// one of the set writes; no node between a member and `last` reads what the member writes or
// writes what it reads or writes; a member's result that a later one overwrites is read only
// inside the set; and no two results share storage.
bool can_merge(const proto::Job& job, const JobIndex& index, const std::vector<int>& members, int last) {
  std::vector<int> set = members;
  set.push_back(last);
  const auto in_set = [&](int position) { return std::binary_search(set.begin(), set.end(), position); };
  std::set<std::string> written;  // storage the set's earlier nodes write
  std::set<std::string> results;  // their result values, which later ones read as steps
  for (int position : set) {
    const proto::Node& node = job.nodes(position);
    const int destinations = destinations_of(node);
    for (int i = destinations; i < node.inputs_size(); ++i) {
      if (!results.count(node.inputs(i)) && written.count(storage_of(index, node.inputs(i)))) return false;
    }
    for (int d = 0; d < destinations; ++d) {
      const std::string storage = storage_of(index, node.inputs(d));
      const std::string result = value_name(node.name(), d);
      // Overwriting an earlier result: all its readers are in the set, up to this node.
      if (results.count(node.inputs(d))) {
        for (int reader : index.consumers(node.inputs(d))) {
          if (!in_set(reader) || reader > position) return false;
        }
      } else if (written.count(storage)) {
        return false;
      }
      written.insert(storage);
      results.insert(result);
    }
  }
  for (int member : members) {
    const proto::Node& node = job.nodes(member);
    std::set<std::string> writes, reads;
    for (int d = 0; d < destinations_of(node); ++d) writes.insert(storage_of(index, node.inputs(d)));
    for (const auto& input : node.inputs()) reads.insert(storage_of(index, input));
    for (int between = member + 1; between < last; ++between) {
      if (in_set(between)) continue;
      const proto::Node& other = job.nodes(between);
      for (const auto& input : other.inputs()) {
        if (writes.count(storage_of(index, input))) return false;
      }
      for (int i = 0; i < written_inputs(other); ++i) {
        const std::string storage = storage_of(index, other.inputs(i));
        if (writes.count(storage) || reads.count(storage)) return false;
      }
    }
  }
  return true;
}

// Appends the steps of `node`'s program `own` to `program`: its step references shifted past the
// steps already there, its operands (the inputs after its `destinations`) read as the steps
// `step_of` maps them to or as the operands `operand` numbers. Returns the index of its first step.
template <typename OperandIndex>
int append_steps(fused::Program& program, const proto::Node& node, int destinations, const fused::Program& own,
                 const std::map<std::string, int>& step_of, OperandIndex&& operand) {
  const int base = static_cast<int>(program.steps.size());
  for (fused::Step step : own.steps) {
    for (int& arg : step.args) {
      if (arg < 0) {
        arg = fused::step_arg(base - arg - 1);
        continue;
      }
      const std::string& value = node.inputs(destinations + arg);
      const auto produced = step_of.find(value);
      arg = produced != step_of.end() ? fused::step_arg(produced->second) : operand(value);
    }
    program.steps.push_back(std::move(step));
  }
  return base;
}

// The merged node `name`, at last's position: last's results first, then the members' results
// that nothing in the set overwrites. `renamed` maps their values to the merged node's.
proto::Node merge(const proto::Job& job, const std::vector<int>& members, int last, const std::string& name,
                  std::map<std::string, std::string>& renamed) {
  std::vector<int> set = members;
  set.push_back(last);
  std::vector<std::string> operands;
  std::map<std::string, int> operand_index, step_of;
  std::map<std::string, std::string> destination_of;  // a result value -> the storage value it was written into
  fused::Program program;
  const auto operand = [&](const std::string& value) {
    const auto [it, added] = operand_index.emplace(value, static_cast<int>(operands.size()));
    if (added) operands.push_back(value);
    return it->second;
  };
  // The last node's operands first (operand 0 sets the program's dtype), but for the members'
  // results it reads, which become steps.
  std::set<std::string> member_names;
  for (int member : members) member_names.insert(job.nodes(member).name());
  const proto::Node& last_node = job.nodes(last);
  for (int i = destinations_of(last_node); i < last_node.inputs_size(); ++i) {
    if (!member_names.count(parse_value_name(last_node.inputs(i)).first)) operand(last_node.inputs(i));
  }
  for (int position : set) {
    const proto::Node& node = job.nodes(position);
    const int destinations = destinations_of(node);
    const fused::Program own = fused::decode(node.attrs().at("program").s());
    const int base = append_steps(program, node, destinations, own, step_of, operand);
    for (int d = 0; d < destinations; ++d) {
      const std::string result = value_name(node.name(), d);
      step_of[result] = base + own.outputs[static_cast<size_t>(d)];
      const auto earlier = destination_of.find(node.inputs(d));
      destination_of[result] = earlier != destination_of.end() ? earlier->second : node.inputs(d);
    }
  }
  std::set<std::string> overwritten;
  for (int position : set) {
    const proto::Node& node = job.nodes(position);
    for (int d = 0; d < destinations_of(node); ++d) overwritten.insert(node.inputs(d));
  }
  proto::Node merged;
  merged.set_name(name);
  merged.set_op(kUpdateOp);
  std::vector<std::pair<std::string, const proto::TensorDesc*>> outputs;  // result value, its desc
  for (int d = 0; d < destinations_of(last_node); ++d) {
    renamed[value_name(last_node.name(), d)] = value_name(name, d);
    outputs.emplace_back(value_name(last_node.name(), d), &last_node.outputs(d));
  }
  for (int member : members) {
    const proto::Node& node = job.nodes(member);
    for (int d = 0; d < destinations_of(node); ++d) {
      const std::string result = value_name(node.name(), d);
      if (overwritten.count(result)) continue;
      renamed[result] = value_name(merged.name(), static_cast<int>(outputs.size()));
      outputs.emplace_back(result, &node.outputs(d));
    }
  }
  for (const auto& [result, desc] : outputs) {
    merged.add_inputs(destination_of.at(result));
    program.outputs.push_back(step_of.at(result));
    *merged.add_outputs() = *desc;
  }
  for (const auto& value : operands) merged.add_inputs(value);
  Attrs attrs = attrs_of(last_node);
  attrs.set("program", fused::encode(program)).set("destinations", static_cast<int64_t>(outputs.size()));
  set_attrs(merged, attrs);
  merged.set_scope(last_node.scope());
  return merged;
}

// The fused program's dtype: its first operand's.
std::string program_dtype(const JobIndex& index, const proto::Node& node) {
  return desc_of(index, node.inputs(node.op() == kUpdateOp ? destinations_of(node) : 0)).dtype();
}

// Whether `node` can become steps of `update`'s program: a fused_elementwise node of its layout
// and dtype whose outputs are no rounded copies, or one fusable op of its layout whose operands
// all have the program's dtype and broadcast as the fused kernel reads them.
bool element_wise_producer(const JobIndex& index, const proto::Node& node, const proto::Node& update) {
  const std::string dtype = program_dtype(index, update);
  if (node.op() == "fused_elementwise") {
    if (node.attrs().at("shape").SerializeAsString() != update.attrs().at("shape").SerializeAsString() ||
        layout_key(node.outputs(0)) != layout_key(update.outputs(0)) || program_dtype(index, node) != dtype) {
      return false;
    }
    const fused::Program program = fused::decode(node.attrs().at("program").s());
    return std::none_of(program.outputs.begin(), program.outputs.end(),
                        [&](int step) { return program.steps[static_cast<size_t>(step)].attrs.has("dtype"); });
  }
  if (is_source_kind(node.op()) || node.op() == kOutputOp || node.op() == "copy" || !fused::can_fuse(node.op()) || node.outputs_size() != 1) {
    return false;
  }
  if (layout_key(node.outputs(0)) != layout_key(update.outputs(0)) || node.outputs(0).dtype() != dtype) return false;
  const Shape shape = meta_of(node.outputs(0)).shape;
  return std::all_of(node.inputs().begin(), node.inputs().end(), [&](const std::string& input) {
    const proto::TensorDesc& desc = desc_of(index, input);
    return desc.dtype() == dtype && fused::operand_layout(meta_of(desc).shape, shape).has_value();
  });
}

// The element-wise producers of `update`'s operands that only it reads, with no in-place write of
// their operands before it runs: it can compute them in its own pass instead of reading their
// results from memory (an AMP step's sum of the tied embedding's two gradients, say).
std::vector<int> producers_of(const proto::Job& job, const JobIndex& index, int update) {
  const proto::Node& node = job.nodes(update);
  std::set<int> producers;
  for (int i = destinations_of(node); i < node.inputs_size(); ++i) {
    const int position = index.position(parse_value_name(node.inputs(i)).first);
    const proto::Node& producer = job.nodes(position);
    if (producers.count(position) || !element_wise_producer(index, producer, node)) continue;
    bool only_update_reads = true;
    for (int o = 0; o < producer.outputs_size(); ++o) {
      for (int reader : index.consumers(value_name(producer.name(), o))) only_update_reads = only_update_reads && reader == update;
    }
    std::set<std::string> reads;
    for (const auto& input : producer.inputs()) reads.insert(storage_of(index, input));
    bool unwritten = true;
    for (int between = position + 1; between < update && unwritten; ++between) {
      const proto::Node& other = job.nodes(between);
      for (int w = 0; w < written_inputs(other); ++w) unwritten = unwritten && !reads.count(storage_of(index, other.inputs(w)));
    }
    if (only_update_reads && unwritten) producers.insert(position);
  }
  return {producers.begin(), producers.end()};
}

// `update` with `producers` as the first steps of its program: operands the producers computed
// become steps, the producers' own operands join the update's.
proto::Node absorb(const proto::Job& job, const JobIndex& index, const std::vector<int>& producers, int update) {
  const proto::Node& node = job.nodes(update);
  const int destinations = destinations_of(node);
  const std::string dtype = program_dtype(index, node);
  std::vector<std::string> operands;
  std::map<std::string, int> operand_index, step_of;
  const auto operand = [&](const std::string& value) {
    const auto [it, added] = operand_index.emplace(value, static_cast<int>(operands.size()));
    if (added) operands.push_back(value);
    return it->second;
  };
  fused::Program program;
  for (int position : producers) {
    const proto::Node& producer = job.nodes(position);
    if (producer.op() == "fused_elementwise") {
      const fused::Program own = fused::decode(producer.attrs().at("program").s());
      const int base = append_steps(program, producer, 0, own, step_of, operand);
      for (size_t o = 0; o < own.outputs.size(); ++o) step_of[value_name(producer.name(), static_cast<int>(o))] = base + own.outputs[o];
    } else {
      fused::Step step{producer.op(), {}, attrs_of(producer)};
      for (const auto& input : producer.inputs()) step.args.push_back(operand(input));
      step_of[value_name(producer.name(), 0)] = static_cast<int>(program.steps.size());
      program.steps.push_back(std::move(step));
    }
  }
  const fused::Program own = fused::decode(node.attrs().at("program").s());
  const int base = append_steps(program, node, destinations, own, step_of, operand);
  for (int step : own.outputs) program.outputs.push_back(base + step);
  // Operand 0 sets the program's dtype: the first operand of that dtype goes first.
  const auto first = std::find_if(operands.begin(), operands.end(), [&](const std::string& v) { return desc_of(index, v).dtype() == dtype; });
  CHECK(first != operands.end()) << node.name() << ": no operand of the program's dtype";
  const int moved = static_cast<int>(first - operands.begin());
  if (moved != 0) {
    std::rotate(operands.begin(), first, first + 1);
    for (fused::Step& step : program.steps) {
      for (int& arg : step.args) {
        if (arg >= 0) arg = arg == moved ? 0 : (arg < moved ? arg + 1 : arg);
      }
    }
  }
  proto::Node absorbed = node;
  absorbed.clear_inputs();
  for (int d = 0; d < destinations; ++d) absorbed.add_inputs(node.inputs(d));
  for (const auto& value : operands) absorbed.add_inputs(value);
  Attrs attrs = attrs_of(node);
  attrs.set("program", fused::encode(program));
  set_attrs(absorbed, attrs);
  return absorbed;
}

// A name for the node merged into `last`: "<last>.merged", numbered when last was a merged node.
// `names` holds every name taken, the new one included on return.
std::string merged_name(std::set<std::string>& names, const std::string& last) {
  const std::string stem = last.substr(0, last.find(".merged")) + ".merged";
  std::string name = stem;
  for (int n = 2; names.count(name); ++n) name = stem + std::to_string(n);
  names.insert(name);
  return name;
}

// A node replacing the one at `at`, and the earlier nodes it now computes.
struct Rewrite {
  int at;
  proto::Node node;
  std::vector<int> removed;
};

// Applies a round's rewrites (none removing another's node) and records each as a fused group.
void apply(proto::Job& job, std::vector<Rewrite>& rewrites, PassContext& context) {
  std::set<int> removed;
  std::map<int, proto::Node*> replaced;
  for (Rewrite& rewrite : rewrites) {
    FusedGroup group{{rewrite.node.name(), rewrite.node.op()}, {}};
    for (int position : rewrite.removed) group.members.push_back({job.nodes(position).name(), job.nodes(position).op()});
    if (rewrite.node.name() != job.nodes(rewrite.at).name()) group.members.push_back({job.nodes(rewrite.at).name(), job.nodes(rewrite.at).op()});
    context.record.fused.push_back(std::move(group));
    removed.insert(rewrite.removed.begin(), rewrite.removed.end());
    replaced[rewrite.at] = &rewrite.node;
  }
  proto::Job rewritten;
  for (int p = 0; p < job.nodes_size(); ++p) {
    if (removed.count(p)) continue;
    const auto replacement = replaced.find(p);
    rewritten.add_nodes()->Swap(replacement != replaced.end() ? replacement->second : job.mutable_nodes(p));
  }
  job.mutable_nodes()->Swap(rewritten.mutable_nodes());
}

}  // namespace

// Each round finds its rewrites on one index of the Job and applies them together; a later round
// picks up what a rewrite made possible (a merged node that a later update reads). Merges of one
// round cover disjoint spans of the Job (first member to last), so no merge moves a node across
// another's: each was checked against the Job as it was.
void merge_inplace_updates(proto::Job& job, PassContext& context) {
  for (;;) {
    const JobIndex index(job);
    std::set<std::string> names;
    for (const auto& node : job.nodes()) names.insert(node.name());
    std::vector<Rewrite> rewrites;
    std::map<std::string, std::string> renamed;
    int span_end = -1;
    for (int last = 0; last < job.nodes_size(); ++last) {
      if (job.nodes(last).op() != kUpdateOp) continue;
      const std::vector<int> members = members_of(job, index, last);
      if (members.empty() || members.front() <= span_end || !can_merge(job, index, members, last)) continue;
      rewrites.push_back({last, merge(job, members, last, merged_name(names, job.nodes(last).name()), renamed), members});
      span_end = last;
    }
    if (rewrites.empty()) break;
    apply(job, rewrites, context);
    rename_inputs(job, renamed);
  }
  // Absorbing moves only producers, which write nothing, and each producer has one reader: a
  // round's absorptions are independent.
  for (;;) {
    const JobIndex index(job);
    std::vector<Rewrite> rewrites;
    for (int update = 0; update < job.nodes_size(); ++update) {
      if (job.nodes(update).op() != kUpdateOp) continue;
      const std::vector<int> producers = producers_of(job, index, update);
      if (!producers.empty()) rewrites.push_back({update, absorb(job, index, producers, update), producers});
    }
    if (rewrites.empty()) break;
    apply(job, rewrites, context);
  }
}

}  // namespace flow::graph
