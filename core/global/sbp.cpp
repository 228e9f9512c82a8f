#include "core/global/sbp.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace flow {

std::string Sbp::str() const {
  switch (kind) {
    case Kind::kSplit: return "S(" + std::to_string(axis) + ")";
    case Kind::kBroadcast: return "B";
    case Kind::kPartialSum: return "P";
  }
  return "?";
}

std::string nd_sbp_str(const NdSbp& nd_sbp) {
  std::string text = "(";
  for (size_t i = 0; i < nd_sbp.size(); ++i) text += (i ? ", " : "") + nd_sbp[i].str();
  return text + (nd_sbp.size() == 1 ? ",)" : ")");
}

std::string nd_sbp_attr(const NdSbp& nd_sbp) {
  std::string text;
  for (size_t i = 0; i < nd_sbp.size(); ++i) text += (i ? "," : "") + nd_sbp[i].str();
  return text;
}

NdSbp parse_nd_sbp(const std::string& text, const char* op) {
  NdSbp nd_sbp;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item == "B") nd_sbp.push_back(Sbp::broadcast());
    else if (item == "P") nd_sbp.push_back(Sbp::partial_sum());
    else if (item.size() > 3 && item.rfind("S(", 0) == 0 && item.back() == ')') {
      const std::string digits = item.substr(2, item.size() - 3);
      if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit) || digits.size() > 9) {
        fail(op, "bad split axis in sbp '", text, "'");
      }
      nd_sbp.push_back(Sbp::split(std::stoll(digits)));
    } else {
      fail(op, "bad sbp '", text, "': expected items S(axis), B or P separated by commas");
    }
  }
  if (nd_sbp.empty()) fail(op, "empty sbp");
  return nd_sbp;
}

}  // namespace flow
