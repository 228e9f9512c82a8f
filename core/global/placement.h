#pragma once
// Placement: the device type and the ranks a global tensor lives on, as a 1-D list or a 2-D
// hierarchy ({{0,1},{2,3}}: 2 groups of 2), OneFlow's flow.placement. With an NdSbp it fixes
// which piece of the logical tensor each rank holds (its local tensor).
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/global/sbp.h"
#include "core/shape.h"

namespace flow {

class Placement {
 public:
  // ranks: sorted or not, unique, non-negative; flow::Error otherwise.
  Placement(DeviceType type, std::vector<int64_t> ranks);
  Placement(DeviceType type, const std::vector<std::vector<int64_t>>& ranks);
  // "cpu" or "cuda".
  Placement(const std::string& type, std::vector<int64_t> ranks);
  Placement(const std::string& type, const std::vector<std::vector<int64_t>>& ranks);
  // Every rank of the process group (flow::distributed::get_world_size()), 1-D.
  static Placement all(DeviceType type);

  DeviceType device_type() const { return type_; }
  // Row-major over the hierarchy.
  const std::vector<int64_t>& ranks() const { return ranks_; }
  // (n) for a 1-D placement, (groups, per group) for a 2-D one.
  const Shape& hierarchy() const { return hierarchy_; }
  int64_t size() const { return static_cast<int64_t>(ranks_.size()); }
  bool contains(int64_t rank) const { return index_of(rank) >= 0; }
  // Position of rank in ranks(), or -1.
  int64_t index_of(int64_t rank) const;
  // The coordinates in hierarchy() of position `index` of ranks() (row-major).
  std::vector<int64_t> coordinates(int64_t index) const;
  // The device a rank's local tensor is on: cpu, or cuda:(its local rank) for cuda.
  Device device_for(int64_t rank) const;
  // oneflow.placement(type="cpu", ranks=[[0, 1], [2, 3]])
  std::string str() const;
  // "cpu:0,1;2,3" (the form attributes carry) and its parser.
  std::string attr() const;
  static Placement parse(const std::string& text, const char* op);
  bool operator==(const Placement& other) const = default;

 private:
  void check(const char* op) const;
  DeviceType type_;
  Shape hierarchy_;
  std::vector<int64_t> ranks_;
};

// OneFlow's balanced split: `size` elements in `parts` pieces, the first size % parts one longer.
int64_t split_part_size(int64_t size, int64_t parts, int64_t index);
int64_t split_part_start(int64_t size, int64_t parts, int64_t index);
std::vector<int64_t> split_part_sizes(int64_t size, int64_t parts);

// Broadcast along every dimension of the placement's hierarchy: each rank holds the whole tensor.
NdSbp broadcast_sbp(const Placement& placement);
// Checks nd_sbp against placement and logical shape (one entry per hierarchy dimension, split
// axes inside the shape); flow::Error prefixed with [op].
void check_nd_sbp(const Placement& placement, const NdSbp& nd_sbp, const Shape& logical, const char* op);
// The shape of the piece the rank at `index` in placement.ranks() holds.
Shape local_shape(const Shape& logical, const Placement& placement, const NdSbp& nd_sbp, int64_t index);

std::ostream& operator<<(std::ostream& out, const Placement& placement);

}  // namespace flow
