#include "core/global/placement.h"

#include <algorithm>
#include <ostream>
#include <set>
#include <sstream>

#include "core/comm/process_group.h"
#include "core/error.h"

namespace flow {
namespace {

DeviceType parse_device_type(const std::string& type) {
  if (type == "cpu") return DeviceType::kCPU;
  if (type == "cuda") return DeviceType::kCUDA;
  if (type == "meta") return DeviceType::kMeta;
  fail("placement", "device type must be \"cpu\", \"cuda\" or \"meta\", got \"", type, "\"");
}

std::vector<int64_t> flatten(const std::vector<std::vector<int64_t>>& ranks) {
  if (ranks.empty()) fail("placement", "needs at least one group of ranks");
  std::vector<int64_t> flat;
  for (const auto& group : ranks) {
    if (group.size() != ranks[0].size()) {
      fail("placement", "every group of a 2-D placement needs the same number of ranks, got ", ranks[0].size(), " and ",
           group.size());
    }
    flat.insert(flat.end(), group.begin(), group.end());
  }
  return flat;
}

std::string join(const std::vector<int64_t>& values, const char* separator) {
  std::ostringstream out;
  for (size_t i = 0; i < values.size(); ++i) out << (i ? separator : "") << values[i];
  return out.str();
}

}  // namespace

Placement::Placement(DeviceType type, std::vector<int64_t> ranks)
    : type_(type), hierarchy_({static_cast<int64_t>(ranks.size())}), ranks_(std::move(ranks)) {
  check("placement");
}

Placement::Placement(DeviceType type, const std::vector<std::vector<int64_t>>& ranks)
    : type_(type), ranks_(flatten(ranks)) {
  hierarchy_ = Shape{static_cast<int64_t>(ranks.size()), static_cast<int64_t>(ranks[0].size())};
  check("placement");
}

Placement::Placement(const std::string& type, std::vector<int64_t> ranks) : Placement(parse_device_type(type), std::move(ranks)) {}

Placement::Placement(const std::string& type, const std::vector<std::vector<int64_t>>& ranks)
    : Placement(parse_device_type(type), ranks) {}

Placement Placement::all(DeviceType type) {
  std::vector<int64_t> ranks(static_cast<size_t>(distributed::get_world_size()));
  for (size_t i = 0; i < ranks.size(); ++i) ranks[i] = static_cast<int64_t>(i);
  return Placement(type, std::move(ranks));
}

void Placement::check(const char* op) const {
  if (ranks_.empty()) fail(op, "needs at least one rank");
  std::set<int64_t> seen;
  for (int64_t rank : ranks_) {
    if (rank < 0) fail(op, "rank ", rank, " is negative");
    if (!seen.insert(rank).second) fail(op, "rank ", rank, " appears twice in ", str());
  }
}

int64_t Placement::index_of(int64_t rank) const {
  auto it = std::find(ranks_.begin(), ranks_.end(), rank);
  return it == ranks_.end() ? -1 : static_cast<int64_t>(it - ranks_.begin());
}

std::vector<int64_t> Placement::coordinates(int64_t index) const {
  std::vector<int64_t> coords(hierarchy_.size());
  for (int64_t d = hierarchy_.ndim() - 1; d >= 0; --d) {
    coords[static_cast<size_t>(d)] = index % hierarchy_[d];
    index /= hierarchy_[d];
  }
  return coords;
}

Device Placement::device_for(int64_t rank) const {
  if (type_ != DeviceType::kCUDA) return Device(type_, 0);
  const int64_t local_world = distributed::is_initialized() ? distributed::process_group("placement").local_world_size() : 1;
  return Device(DeviceType::kCUDA, static_cast<int>(rank % std::max<int64_t>(local_world, 1)));
}

std::string Placement::str() const {
  std::ostringstream out;
  out << "oneflow.placement(type=\"" << device_type_name(type_) << "\", ranks=";
  if (hierarchy_.ndim() == 1) {
    out << "[" << join(ranks_, ", ") << "]";
  } else {
    out << "[";
    for (int64_t g = 0; g < hierarchy_[0]; ++g) {
      auto first = ranks_.begin() + g * hierarchy_[1];
      out << (g ? ", " : "") << "[" << join(std::vector<int64_t>(first, first + hierarchy_[1]), ", ") << "]";
    }
    out << "]";
  }
  out << ")";
  return out.str();
}

std::string Placement::attr() const {
  std::string text = std::string(device_type_name(type_)) + ":";
  const int64_t per_group = hierarchy_[hierarchy_.ndim() - 1];
  for (int64_t g = 0; g < size() / per_group; ++g) {
    auto first = ranks_.begin() + g * per_group;
    text += (g ? ";" : "") + join(std::vector<int64_t>(first, first + per_group), ",");
  }
  return text;
}

Placement Placement::parse(const std::string& text, const char* op) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) fail(op, "bad placement '", text, "': expected type:ranks");
  std::vector<std::vector<int64_t>> groups;
  std::istringstream group_in(text.substr(colon + 1));
  std::string group_text;
  while (std::getline(group_in, group_text, ';')) {
    std::vector<int64_t> group;
    std::istringstream rank_in(group_text);
    std::string rank_text;
    while (std::getline(rank_in, rank_text, ',')) {
      if (rank_text.empty() || rank_text.size() > 9 || !std::all_of(rank_text.begin(), rank_text.end(), ::isdigit)) {
        fail(op, "bad rank '", rank_text, "' in placement '", text, "'");
      }
      group.push_back(std::stoll(rank_text));
    }
    groups.push_back(std::move(group));
  }
  const DeviceType type = parse_device_type(text.substr(0, colon));
  if (groups.size() == 1) return Placement(type, groups[0]);
  return Placement(type, groups);
}

std::ostream& operator<<(std::ostream& out, const Placement& placement) { return out << placement.str(); }

int64_t split_part_size(int64_t size, int64_t parts, int64_t index) {
  return size / parts + (index < size % parts ? 1 : 0);
}

int64_t split_part_start(int64_t size, int64_t parts, int64_t index) {
  return index * (size / parts) + std::min(index, size % parts);
}

std::vector<int64_t> split_part_sizes(int64_t size, int64_t parts) {
  std::vector<int64_t> sizes(static_cast<size_t>(parts));
  for (int64_t i = 0; i < parts; ++i) sizes[static_cast<size_t>(i)] = split_part_size(size, parts, i);
  return sizes;
}

void check_nd_sbp(const Placement& placement, const NdSbp& nd_sbp, const Shape& logical, const char* op) {
  if (static_cast<int64_t>(nd_sbp.size()) != placement.hierarchy().ndim()) {
    fail(op, "sbp ", nd_sbp_str(nd_sbp), " has ", nd_sbp.size(), " entries but the placement ", placement.str(), " has ",
         placement.hierarchy().ndim(), " dimension(s); give one sbp per placement dimension");
  }
  for (const Sbp& sbp : nd_sbp) {
    if (sbp.is_split() && (sbp.axis < 0 || sbp.axis >= logical.ndim())) {
      fail(op, "split axis ", sbp.axis, " is out of range for a tensor of shape ", logical, " (", logical.ndim(), " dims)");
    }
  }
}

NdSbp broadcast_sbp(const Placement& placement) { return NdSbp(placement.hierarchy().size(), Sbp::broadcast()); }

Shape local_shape(const Shape& logical, const Placement& placement, const NdSbp& nd_sbp, int64_t index) {
  Shape shape = logical;
  const Shape& hierarchy = placement.hierarchy();
  const std::vector<int64_t> coords = placement.coordinates(index);
  for (size_t d = 0; d < nd_sbp.size(); ++d) {
    if (nd_sbp[d].is_split()) {
      const auto axis = static_cast<size_t>(nd_sbp[d].axis);
      shape[axis] = split_part_size(shape[axis], hierarchy[d], coords[d]);
    }
  }
  return shape;
}

}  // namespace flow
