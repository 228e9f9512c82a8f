#pragma once
// SBP (split, broadcast, partial-sum): how a logical tensor is laid out over the devices of a
// placement, OneFlow's model. A tensor on a 2-D placement has one Sbp per hierarchy dimension
// (an NdSbp), e.g. (S(0), B) on {{0,1},{2,3}}.
#include <cstdint>
#include <string>
#include <vector>

namespace flow {

struct Sbp {
  enum class Kind : uint8_t { kSplit, kBroadcast, kPartialSum };
  Kind kind = Kind::kBroadcast;
  int64_t axis = 0;
  static Sbp split(int64_t axis) { return {Kind::kSplit, axis}; }
  static Sbp broadcast() { return {Kind::kBroadcast, 0}; }
  static Sbp partial_sum() { return {Kind::kPartialSum, 0}; }
  bool is_split() const { return kind == Kind::kSplit; }
  bool is_broadcast() const { return kind == Kind::kBroadcast; }
  bool is_partial_sum() const { return kind == Kind::kPartialSum; }
  bool operator==(const Sbp& other) const = default;
  std::string str() const;  // "S(0)", "B", "P"
};

using NdSbp = std::vector<Sbp>;

// "(S(0), B)", as OneFlow prints a tensor's sbp.
std::string nd_sbp_str(const NdSbp& nd_sbp);
// "S(0),B" (the form attributes carry) and its parser; flow::Error prefixed with [op].
std::string nd_sbp_attr(const NdSbp& nd_sbp);
NdSbp parse_nd_sbp(const std::string& text, const char* op);

namespace sbp {
// OneFlow's spelling: flow::sbp::split(0), flow::sbp::broadcast(), flow::sbp::partial_sum().
inline Sbp split(int64_t axis) { return Sbp::split(axis); }
inline Sbp broadcast() { return Sbp::broadcast(); }
inline Sbp partial_sum() { return Sbp::partial_sum(); }
}  // namespace sbp

}  // namespace flow
