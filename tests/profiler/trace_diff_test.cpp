// flow_trace_diff: the comparison of two hand-written traces category by category, its errors,
// table and SVG, and the command line on real traces of one model run eagerly and as a Graph.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/command_line.h"
#include "common/test_util.h"
#include "core/flow.h"
#include "core/grad_mode.h"
#include "core/profiler.h"
#include "graph/graph.h"
#include "nn/modules.h"
#include "tools/trace_diff_lib.h"

namespace {

namespace diff = flow::trace_diff;
using flow::Tensor;
using flow::TensorList;

// control: A x2, B x1, C x3, D x2; test: A x3, C x3, D x1, E x2. Events of other categories and
// phases are not compared.
constexpr const char* kControl = R"({"traceEvents": [
  {"ph": "X", "cat": "op", "name": "A", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
  {"ph": "X", "cat": "op", "name": "A", "ts": 20, "dur": 20, "pid": 1, "tid": 1},
  {"ph": "X", "cat": "op", "name": "B", "ts": 50, "dur": 5, "pid": 1, "tid": 1},
  {"ph": "X", "cat": "graph_node", "name": "C", "ts": 60, "dur": 1, "pid": 1, "tid": 2},
  {"ph": "X", "cat": "graph_node", "name": "C", "ts": 62, "dur": 1, "pid": 1, "tid": 2},
  {"ph": "X", "cat": "graph_node", "name": "C", "ts": 64, "dur": 1, "pid": 1, "tid": 2},
  {"ph": "X", "cat": "op", "name": "D", "ts": 70, "dur": 4, "pid": 1, "tid": 1},
  {"ph": "X", "cat": "op", "name": "D", "ts": 80, "dur": 4, "pid": 1, "tid": 1},
  {"ph": "X", "cat": "graph_task", "name": "task", "ts": 60, "dur": 9, "pid": 1, "tid": 2},
  {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}
]})";
constexpr const char* kTest = R"({"traceEvents": [
  {"ph": "X", "cat": "op", "name": "A", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
  {"ph": "X", "cat": "op", "name": "A", "ts": 20, "dur": 10, "pid": 1, "tid": 1},
  {"ph": "X", "cat": "op", "name": "A", "ts": 40, "dur": 10, "pid": 1, "tid": 1},
  {"ph": "X", "cat": "graph_node", "name": "C", "ts": 60, "dur": 2, "pid": 1, "tid": 2},
  {"ph": "X", "cat": "graph_node", "name": "C", "ts": 62, "dur": 2, "pid": 1, "tid": 2},
  {"ph": "X", "cat": "graph_node", "name": "C", "ts": 64, "dur": 2, "pid": 1, "tid": 2},
  {"ph": "X", "cat": "op", "name": "D", "ts": 70, "dur": 3, "pid": 1, "tid": 1},
  {"ph": "X", "cat": "op", "name": "E", "ts": 80, "dur": 7, "pid": 1, "tid": 1},
  {"ph": "X", "cat": "op", "name": "E", "ts": 90, "dur": 7, "pid": 1, "tid": 1},
  {"ph": "X", "cat": "graph_task", "name": "task", "ts": 60, "dur": 9, "pid": 1, "tid": 2}
]})";

const diff::OpDiff& row(const std::vector<diff::OpDiff>& diffs, const std::string& name) {
  for (const auto& d : diffs) {
    if (d.name == name) return d;
  }
  throw std::runtime_error("no row " + name);
}

std::vector<diff::OpDiff> hand_written_diff() {
  const auto categories = diff::default_categories();
  return diff::compare_traces(diff::parse_trace(kControl, "control", categories), diff::parse_trace(kTest, "test", categories));
}

TEST(TraceDiff, CategoriesCountsAndDurations) {
  const auto diffs = hand_written_diff();
  ASSERT_EQ(diffs.size(), 5u) << "graph_task and metadata events are not compared";
  const auto& a = row(diffs, "A");
  EXPECT_EQ(a.change, diff::Change::kIncreased);
  EXPECT_EQ(a.control.count, 2);
  EXPECT_EQ(a.test.count, 3);
  EXPECT_EQ(a.count_diff(), 1);
  EXPECT_DOUBLE_EQ(a.control.duration_us, 30);
  EXPECT_DOUBLE_EQ(a.duration_diff_us(), 0);
  EXPECT_EQ(row(diffs, "B").change, diff::Change::kDeleted);
  EXPECT_DOUBLE_EQ(row(diffs, "B").duration_diff_us(), -5);
  EXPECT_EQ(row(diffs, "C").change, diff::Change::kUnchanged);
  EXPECT_DOUBLE_EQ(row(diffs, "C").duration_diff_us(), 3);
  EXPECT_EQ(row(diffs, "D").change, diff::Change::kDecreased);
  EXPECT_EQ(row(diffs, "D").count_diff(), -1);
  EXPECT_EQ(row(diffs, "E").change, diff::Change::kAdded);
  EXPECT_DOUBLE_EQ(row(diffs, "E").test.duration_us, 14);

  const auto categories = diff::ops_diff(diffs);
  EXPECT_EQ(categories.at(diff::Change::kAdded), (std::vector<std::string>{"E"}));
  EXPECT_EQ(categories.at(diff::Change::kDeleted), (std::vector<std::string>{"B"}));
  EXPECT_EQ(categories.at(diff::Change::kIncreased), (std::vector<std::string>{"A"}));
  EXPECT_EQ(categories.at(diff::Change::kDecreased), (std::vector<std::string>{"D"}));
  EXPECT_EQ(categories.at(diff::Change::kUnchanged), (std::vector<std::string>{"C"}));
}

TEST(TraceDiff, CategoryFilterAndBareArrays) {
  EXPECT_EQ(diff::parse_trace(kControl, "control", {}).count("task"), 1u) << "no filter: every category";
  const auto only_nodes = diff::parse_trace(kControl, "control", {"graph_node"});
  ASSERT_EQ(only_nodes.size(), 1u);
  EXPECT_EQ(only_nodes.at("C").count, 3);
  const auto bare = diff::parse_trace(R"([{"ph": "X", "cat": "op", "name": "A", "ts": 0, "dur": 2}])", "bare", {"op"});
  EXPECT_EQ(bare.at("A").count, 1);
}

TEST(TraceDiff, BadTracesNameTheToolAndTheFile) {
  EXPECT_THROW_MSG(diff::parse_trace("{not json", "broken.json", {}), "[flow_trace_diff] broken.json is not JSON");
  EXPECT_THROW_MSG(diff::parse_trace(R"({"events": []})", "other.json", {}), "other.json has no \"traceEvents\"");
  EXPECT_THROW_MSG(diff::parse_trace(R"([{"ph": "X", "name": "A"}])", "nodur.json", {}), "complete event 0 needs");
  EXPECT_THROW_MSG(diff::read_trace("/nonexistent/trace.json", {}), "[flow_trace_diff] cannot open trace /nonexistent/trace.json");
  EXPECT_THROW_MSG(diff::parse_sort_key("size"), "--sort must be");
}

TEST(TraceDiff, SortingTableAndSvg) {
  auto diffs = hand_written_diff();
  diff::sort_diffs(diffs, diff::SortKey::kCountDiff);
  // |+2| first, then the |1|s by name, then 0.
  EXPECT_EQ(diffs[0].name, "E");
  EXPECT_EQ(diffs[1].name, "A");
  EXPECT_EQ(diffs[4].name, "C");
  diff::sort_diffs(diffs, diff::SortKey::kDurationDiff);
  EXPECT_EQ(diffs[0].name, "E");  // +14
  EXPECT_EQ(diffs[1].name, "B");  // -5
  diff::sort_diffs(diffs, diff::SortKey::kName);
  EXPECT_EQ(diffs[0].name, "A");

  const std::string table = diff::format_table(diffs, 2);
  EXPECT_NE(table.find("| A | increased | 2 | 3 | +1 | 30.0 | 30.0 | 0.0 |"), std::string::npos) << table;
  EXPECT_EQ(table.find("| C |"), std::string::npos) << "--top 2 prints two rows\n" << table;
  EXPECT_NE(table.find("added (1): E"), std::string::npos) << table;
  EXPECT_NE(table.find("unchanged (1): C"), std::string::npos) << table;

  diffs.push_back({"<fused & odd>", {}, {1, 20.0}, diff::Change::kAdded});  // the largest change
  const std::string svg = diff::format_svg(diffs, 3);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("&lt;fused &amp; odd&gt;"), std::string::npos);
  size_t bars = 0;
  for (size_t at = svg.find("fill=\"#"); at != std::string::npos; at = svg.find("fill=\"#", at + 1)) ++bars;
  EXPECT_EQ(bars, 3u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

struct Mlp : flow::nn::Graph {
  explicit Mlp(std::shared_ptr<flow::nn::Sequential> net) : model(std::move(net)) {
    register_module("model", model);
    eval();
  }
  TensorList build(const TensorList& in) override { return {(*model)(in[0])}; }
  std::shared_ptr<flow::nn::Sequential> model;
};

class TraceDiffCommandLine : public ::testing::Test {
 protected:
  const std::string tool = FLOW_TRACE_DIFF_PATH;
  const std::filesystem::path dir = unique_temp_path("trace_diff_cli");
  void SetUp() override { std::filesystem::create_directories(dir); }
};

TEST_F(TraceDiffCommandLine, HelpAndUsageErrors) {
  test_cli::expect_help_lists(tool, {"CONTROL", "TEST", "--sort", "--top", "--svg", "--categories"});
  std::ofstream(dir / "a.json") << kControl;
  const std::string a = (dir / "a.json").string();
  test_cli::expect_usage_error(tool, a + " " + a + " --sort size", "--sort");
  test_cli::expect_usage_error(tool, a + " " + a + " --top -1", "--top");
  test_cli::expect_usage_error(tool, a + " " + a + " --colour", "--colour");
  test_cli::expect_usage_error(tool, a, "TEST");
  const auto [status, output] = test_cli::run_command(tool + " " + a + " /nonexistent/b.json");
  EXPECT_EQ(status, 1) << output;
  EXPECT_TRUE(test_cli::contains(output, "cannot open trace /nonexistent/b.json")) << output;
}

// The same MLP run eagerly and as a Graph: the Graph's fusion pass shows up as ops added
// (fused_linear) and deleted (relu).
TEST_F(TraceDiffCommandLine, EagerAgainstGraphOfTheSameModel) {
  auto net = std::make_shared<flow::nn::Sequential>(std::make_shared<flow::nn::Linear>(8, 16), std::make_shared<flow::nn::ReLU>(),
                                                    std::make_shared<flow::nn::Linear>(16, 4));
  const Tensor x = flow::ones({2, 8});
  const std::string eager_path = (dir / "eager.json").string(), graph_path = (dir / "graph.json").string();
  {
    const flow::autograd::NoGradGuard no_grad;
    flow::profiler::Profile profile;
    for (int i = 0; i < 2; ++i) (*net)(x);
    profile.export_chrome_trace(eager_path);
  }
  Mlp graph(net);
  graph(x);  // compiles outside the profile
  {
    flow::profiler::Profile profile;
    for (int i = 0; i < 2; ++i) graph(x);
    profile.export_chrome_trace(graph_path);
  }
  const std::string svg_path = (dir / "diff.svg").string();
  const auto [status, output] = test_cli::run_command(tool + " " + eager_path + " " + graph_path + " --sort name --svg " + svg_path);
  ASSERT_EQ(status, 0) << output;
  EXPECT_TRUE(test_cli::contains(output, "| fused_linear | added | 0 | 2 | +2 |")) << output;
  EXPECT_TRUE(test_cli::contains(output, "| relu | deleted | 2 | 0 | -2 |")) << output;
  EXPECT_TRUE(test_cli::contains(output, "| linear | decreased | 4 | 2 | -2 |")) << output;
  std::ifstream svg(svg_path);
  std::string first_line;
  std::getline(svg, first_line);
  EXPECT_EQ(first_line.rfind("<svg", 0), 0u) << first_line;
}

}  // namespace
