#include "tools/trace_diff_lib.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace flow::trace_diff {
namespace {

constexpr const char* kTool = "flow_trace_diff";

std::string format_number(double value, int decimals) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.*f", decimals, value);
  return text;
}

std::string signed_text(double value, int decimals) { return (value > 0 ? "+" : "") + format_number(value, decimals); }

std::string xml_escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::set<std::string> default_categories() { return {"op", "graph_node", "cpu_op", "kernel"}; }

TraceTotals parse_trace(std::string_view json_text, const std::string& source, const std::set<std::string>& categories) {
  nlohmann::json trace;
  try {
    trace = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& error) {
    fail(kTool, source, " is not JSON: ", error.what());
  }
  // The Chrome trace format allows a bare array of events as well as {"traceEvents": [...]}.
  const nlohmann::json* events = &trace;
  if (trace.is_object()) {
    auto found = trace.find("traceEvents");
    if (found == trace.end()) fail(kTool, source, " has no \"traceEvents\"");
    events = &*found;
  }
  if (!events->is_array()) fail(kTool, source, ": the trace events are not a JSON array");
  TraceTotals totals;
  for (size_t i = 0; i < events->size(); ++i) {
    const nlohmann::json& event = (*events)[i];
    if (!event.is_object() || event.value("ph", "") != "X") continue;
    if (!categories.empty() && (!event.contains("cat") || !event["cat"].is_string() || !categories.count(event["cat"].get<std::string>()))) {
      continue;
    }
    auto name = event.find("name");
    auto duration = event.find("dur");
    if (name == event.end() || !name->is_string() || duration == event.end() || !duration->is_number()) {
      fail(kTool, source, ": complete event ", i, " needs a string \"name\" and a numeric \"dur\"");
    }
    OpTotals& op = totals[name->get<std::string>()];
    ++op.count;
    op.duration_us += duration->get<double>();
  }
  return totals;
}

TraceTotals read_trace(const std::string& path, const std::set<std::string>& categories) {
  std::ifstream file(path, std::ios::binary);
  if (!file) fail(kTool, "cannot open trace ", path);
  std::ostringstream text;
  text << file.rdbuf();
  return parse_trace(text.str(), path, categories);
}

const char* change_name(Change change) {
  switch (change) {
    case Change::kAdded: return "added";
    case Change::kDeleted: return "deleted";
    case Change::kIncreased: return "increased";
    case Change::kDecreased: return "decreased";
    case Change::kUnchanged: return "unchanged";
  }
  return "unknown";
}

std::vector<OpDiff> compare_traces(const TraceTotals& control, const TraceTotals& test) {
  std::map<std::string, OpDiff> by_name;
  for (const auto& [name, totals] : control) by_name[name].control = totals;
  for (const auto& [name, totals] : test) by_name[name].test = totals;
  std::vector<OpDiff> diffs;
  for (auto& [name, diff] : by_name) {
    diff.name = name;
    if (diff.control.count == 0) diff.change = Change::kAdded;
    else if (diff.test.count == 0) diff.change = Change::kDeleted;
    else if (diff.count_diff() > 0) diff.change = Change::kIncreased;
    else if (diff.count_diff() < 0) diff.change = Change::kDecreased;
    else diff.change = Change::kUnchanged;
    diffs.push_back(std::move(diff));
  }
  return diffs;
}

std::map<Change, std::vector<std::string>> ops_diff(const std::vector<OpDiff>& diffs) {
  std::map<Change, std::vector<std::string>> categories;
  for (Change change : {Change::kAdded, Change::kDeleted, Change::kIncreased, Change::kDecreased, Change::kUnchanged}) categories[change];
  for (const OpDiff& diff : diffs) categories[diff.change].push_back(diff.name);
  for (auto& [change, names] : categories) std::sort(names.begin(), names.end());
  return categories;
}

SortKey parse_sort_key(const std::string& text) {
  if (text == "count_diff") return SortKey::kCountDiff;
  if (text == "duration_diff") return SortKey::kDurationDiff;
  if (text == "name") return SortKey::kName;
  fail(kTool, "--sort must be count_diff, duration_diff or name, got '", text, "'");
}

void sort_diffs(std::vector<OpDiff>& diffs, SortKey key) {
  std::stable_sort(diffs.begin(), diffs.end(), [key](const OpDiff& a, const OpDiff& b) {
    if (key == SortKey::kCountDiff && std::llabs(a.count_diff()) != std::llabs(b.count_diff())) {
      return std::llabs(a.count_diff()) > std::llabs(b.count_diff());
    }
    if (key == SortKey::kDurationDiff && std::fabs(a.duration_diff_us()) != std::fabs(b.duration_diff_us())) {
      return std::fabs(a.duration_diff_us()) > std::fabs(b.duration_diff_us());
    }
    return a.name < b.name;
  });
}

std::string format_table(const std::vector<OpDiff>& diffs, size_t top) {
  const size_t rows = top == 0 ? diffs.size() : std::min(top, diffs.size());
  std::ostringstream out;
  out << "| name | change | control count | test count | count diff | control us | test us | duration diff us |\n";
  out << "|---|---|---:|---:|---:|---:|---:|---:|\n";
  for (size_t i = 0; i < rows; ++i) {
    const OpDiff& diff = diffs[i];
    out << "| " << diff.name << " | " << change_name(diff.change) << " | " << diff.control.count << " | " << diff.test.count << " | "
        << signed_text(static_cast<double>(diff.count_diff()), 0) << " | " << format_number(diff.control.duration_us, 1) << " | "
        << format_number(diff.test.duration_us, 1) << " | " << signed_text(diff.duration_diff_us(), 1) << " |\n";
  }
  if (rows < diffs.size()) out << "(" << diffs.size() - rows << " more rows; --top 0 shows all)\n";
  out << "\n";
  for (const auto& [change, names] : ops_diff(diffs)) {
    out << change_name(change) << " (" << names.size() << "):";
    for (const std::string& name : names) out << " " << name;
    out << "\n";
  }
  return out.str();
}

std::string format_svg(const std::vector<OpDiff>& diffs, size_t top) {
  std::vector<OpDiff> largest = diffs;
  sort_diffs(largest, SortKey::kDurationDiff);
  if (top != 0 && largest.size() > top) largest.resize(top);
  double scale = 0;
  for (const OpDiff& diff : largest) scale = std::max(scale, std::fabs(diff.duration_diff_us()));
  constexpr int kLabelWidth = 240, kHalfBars = 220, kValueWidth = 110, kRowHeight = 24, kTop = 40;
  const int axis = kLabelWidth + kValueWidth + kHalfBars;  // x of the zero line
  const int width = axis + kHalfBars + kValueWidth;
  const int height = kTop + static_cast<int>(largest.size()) * kRowHeight + 30;
  std::ostringstream out;
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  out << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out << "<text x=\"10\" y=\"22\" font-size=\"15\">Duration difference per op, test - control (us): red slower, green faster</text>\n";
  for (size_t i = 0; i < largest.size(); ++i) {
    const OpDiff& diff = largest[i];
    const double value = diff.duration_diff_us();
    const double length = scale > 0 ? std::fabs(value) / scale * kHalfBars : 0;
    const int y = kTop + static_cast<int>(i) * kRowHeight;
    const double x = value >= 0 ? axis : axis - length;
    out << "<text x=\"10\" y=\"" << y + 16 << "\">" << xml_escaped(diff.name) << " (" << change_name(diff.change) << ")</text>\n";
    out << "<rect x=\"" << format_number(x, 1) << "\" y=\"" << y + 4 << "\" width=\"" << format_number(length, 1)
        << "\" height=\"" << kRowHeight - 8 << "\" fill=\"" << (value > 0 ? "#d62728" : "#2ca02c") << "\"/>\n";
    const double label_x = value >= 0 ? axis + length + 4 : axis - length - 4;
    out << "<text x=\"" << format_number(label_x, 1) << "\" y=\"" << y + 16 << "\" text-anchor=\"" << (value >= 0 ? "start" : "end")
        << "\">" << signed_text(value, 1) << "</text>\n";
  }
  out << "<line x1=\"" << axis << "\" y1=\"" << kTop << "\" x2=\"" << axis << "\" y2=\"" << height - 30 << "\" stroke=\"black\"/>\n";
  out << "</svg>\n";
  return out.str();
}

}  // namespace flow::trace_diff
