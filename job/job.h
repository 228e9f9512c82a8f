#pragma once
// Helpers around the Job protobuf: value names, attribute and meta conversion, text form, and an
// index of producers and consumers that passes use.
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/op.h"
#include "job/job.pb.h"

namespace flow::graph {

// Version of the Job schema written into every Job (and checked by loaders).
inline constexpr int kJobVersion = 1;
// Version of the deploy export format (job/export.proto) written by flow::save(graph, dir) and
// read by oneflow_lite: the newest this build reads (it reads every version from 1). Version 2
// adds batch slots that hold a multiple of the batch (BatchSlot.multiple); an export without one
// is written as version 1, which older builds read too.
inline constexpr int kExportFormatVersion = 2;

// Node kinds that are not registered ops (see job.proto).
inline constexpr const char* kInputOp = "input";
inline constexpr const char* kVariableOp = "variable";
inline constexpr const char* kConstantOp = "constant";
inline constexpr const char* kFeedOp = "feed";
inline constexpr const char* kOutputOp = "output";
bool is_source_kind(const std::string& op);  // input, variable, constant, feed

// "<node>:<index>" and back.
std::string value_name(const std::string& node, int index);
std::pair<std::string, int> parse_value_name(const std::string& value);
// Points every node input found in `renamed` (old value -> new value) at its new value.
void rename_inputs(proto::Job& job, const std::map<std::string, std::string>& renamed);

proto::AttrValue attr_to_proto(const AttrValue& value);
AttrValue attr_from_proto(const proto::AttrValue& value);
Attrs attrs_of(const proto::Node& node);
void set_attrs(proto::Node& node, const Attrs& attrs);

proto::TensorDesc describe(const TensorMeta& meta);
TensorMeta meta_of(const proto::TensorDesc& desc);
std::string describe_str(const proto::TensorDesc& desc);  // "(64, 10), float32, cpu, B"

// The protobuf text form of the Job.
std::string job_to_text(const proto::Job& job);

// Where each node sits and who reads each value. Rebuild after changing the Job.
class JobIndex {
 public:
  explicit JobIndex(const proto::Job& job);
  int position(const std::string& node) const;
  const proto::Node& node(const std::string& name) const;
  // Positions of the nodes reading value "<node>:<index>", in Job order.
  const std::vector<int>& consumers(const std::string& value) const;

 private:
  const proto::Job& job_;
  std::map<std::string, int> positions_;
  std::map<std::string, std::vector<int>> consumers_;
};

// Whether running the node changes state outside its outputs (in-place writes of variables) or
// other ranks wait for it (a collective), so passes must keep it and keep its order.
bool has_side_effects(const proto::Node& node);
// How many leading inputs the node overwrites (input i becomes output i): none unless its op is
// in place.
int written_inputs(const proto::Node& node);
// Values some in-place op overwrites (input i of an in-place op with at least i+1 outputs).
std::set<std::string> written_in_place(const proto::Job& job);

}  // namespace flow::graph
