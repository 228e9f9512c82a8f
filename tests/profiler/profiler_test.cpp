// flow::profiler::Profile: the schedule, what eager ops, Graph actors and the DataLoader record
// (names, shapes, FLOPs, bytes, threads), the Chrome trace and key_averages. Durations are only
// checked for being non-negative.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "common/test_util.h"
#include "core/flow.h"
#include "core/profiler.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "graph/graph.h"
#include "nn/modules.h"

namespace {

namespace profiler = flow::profiler;
using flow::Tensor;
using flow::TensorList;

std::vector<profiler::Event> events_named(const profiler::Profile& profile, const std::string& name) {
  std::vector<profiler::Event> found;
  for (const auto& event : profile.events()) {
    if (event.name == name) found.push_back(event);
  }
  return found;
}

// The one event of `name`, checked to be the only one.
profiler::Event only_event(const profiler::Profile& profile, const std::string& name) {
  const auto found = events_named(profile, name);
  EXPECT_EQ(found.size(), 1u) << name;
  return found.empty() ? profiler::Event() : found[0];
}

using Dims = std::vector<std::vector<int64_t>>;

TEST(ProfilerSchedule, RecordsOnlyActiveSteps) {
  const Tensor x = flow::ones({4});
  profiler::Profile profile(profiler::ProfileOptions().schedule(/*wait=*/1, /*warmup=*/1, /*active=*/2, /*repeat=*/1));
  for (int64_t step = 0; step < 6; ++step) {
    // Each step's op has its own input shape, so every event says which step ran it.
    flow::relu(flow::ones({step + 1}));
    profile.step();
  }
  const auto relus = events_named(profile, "relu");
  ASSERT_EQ(relus.size(), 2u);
  EXPECT_EQ(relus[0].step, 2);
  EXPECT_EQ(relus[0].input_dims, (Dims{{3}}));
  EXPECT_EQ(relus[1].step, 3);
  EXPECT_EQ(relus[1].input_dims, (Dims{{4}}));
  for (const auto& event : profile.events()) EXPECT_TRUE(event.step == 2 || event.step == 3) << event.name << " at step " << event.step;
  EXPECT_FALSE(profiler::is_recording()) << "repeat=1: nothing records after the one cycle";
}

TEST(ProfilerSchedule, CyclesLikeTorchSchedule) {
  const profiler::Schedule cycling{/*wait=*/1, /*warmup=*/1, /*active=*/2, /*repeat=*/0};
  const std::vector<bool> expected{false, false, true, true, false, false, true, true};
  for (int64_t step = 0; step < 8; ++step) EXPECT_EQ(cycling.records(step), expected[step]) << step;
  const profiler::Schedule twice{0, 0, 1, 2};
  EXPECT_TRUE(twice.records(1));
  EXPECT_FALSE(twice.records(2));
  EXPECT_THROW_MSG(profiler::ProfileOptions().schedule(0, 0, 0), "[profiler] schedule needs");
  EXPECT_THROW_MSG(profiler::ProfileOptions().schedule(-1, 0, 1), "wait=-1");
}

TEST(ProfilerSchedule, OneProfileAtATimeAndNothingAfterStop) {
  profiler::Profile profile;
  EXPECT_TRUE(profiler::is_recording());
  EXPECT_THROW_MSG(profiler::Profile(), "[profiler] another Profile is recording");
  flow::relu(flow::ones({2}));
  profile.stop();
  EXPECT_FALSE(profiler::is_recording());
  flow::relu(flow::ones({2}));
  EXPECT_EQ(events_named(profile, "relu").size(), 1u);
  profiler::Profile next;  // the stopped one no longer blocks
  EXPECT_TRUE(next.events().empty());
}

TEST(ProfilerOps, MatmulShapesFlopsAndBytes) {
  const Tensor a = flow::ones({3, 4}), b = flow::ones({4, 5});
  const Tensor batched_a = flow::ones({2, 3, 4}), batched_b = flow::ones({2, 4, 5});
  profiler::Profile profile;
  flow::matmul(a, b);
  flow::matmul(batched_a, batched_b);
  const auto matmuls = events_named(profile, "matmul");
  ASSERT_EQ(matmuls.size(), 2u);
  EXPECT_EQ(matmuls[0].category, "op");
  EXPECT_EQ(matmuls[0].input_dims, (Dims{{3, 4}, {4, 5}}));
  EXPECT_EQ(matmuls[0].flops, 2 * 3 * 5 * 4);  // 2 * m * n * k
  EXPECT_EQ(matmuls[0].bytes, (12 + 20 + 15) * 4);
  EXPECT_EQ(matmuls[1].input_dims, (Dims{{2, 3, 4}, {2, 4, 5}}));
  EXPECT_EQ(matmuls[1].flops, 2 * 2 * 3 * 5 * 4);
  EXPECT_GE(matmuls[0].start_us, 0);
  EXPECT_GE(matmuls[0].duration_us, 0);
}

TEST(ProfilerOps, LinearAndConv2dFlops) {
  const Tensor x = flow::ones({6, 8}), w = flow::ones({5, 8}), bias = flow::ones({5});
  const Tensor image = flow::ones({2, 3, 8, 8}), filters = flow::ones({4, 3, 3, 3});
  const Tensor grouped_image = flow::ones({1, 4, 5, 5}), grouped_filters = flow::ones({6, 2, 3, 3});
  profiler::Profile profile;
  flow::linear(x, w, bias);
  flow::conv2d(image, filters);
  flow::conv2d(grouped_image, grouped_filters, Tensor(), {1, 1}, {0, 0}, {1, 1}, /*groups=*/2);

  const profiler::Event linear = only_event(profile, "linear");
  EXPECT_EQ(linear.input_dims, (Dims{{6, 8}, {5, 8}, {5}}));
  EXPECT_EQ(linear.flops, 2 * 6 * 5 * 8);  // 2 * rows * out_features * in_features
  EXPECT_EQ(linear.bytes, (48 + 40 + 5 + 30) * 4);

  const auto convs = events_named(profile, "conv2d");
  ASSERT_EQ(convs.size(), 2u);
  EXPECT_EQ(convs[0].input_dims, (Dims{{2, 3, 8, 8}, {4, 3, 3, 3}}));
  // Output (2, 4, 6, 6), each element 3 * 3 * 3 multiply-accumulates.
  EXPECT_EQ(convs[0].flops, 2 * (2 * 4 * 6 * 6) * (3 * 3 * 3));
  // Output (1, 6, 3, 3); each filter sees 4 / 2 channels.
  EXPECT_EQ(convs[1].flops, 2 * (1 * 6 * 3 * 3) * (2 * 3 * 3));
}

TEST(ProfilerOps, ElementwiseFlopsAreOutputElements) {
  const Tensor a = flow::ones({4, 5}), row = flow::ones({5});
  profiler::Profile profile;
  flow::add(a, row);
  flow::relu(a);
  const profiler::Event add = only_event(profile, "add");
  EXPECT_EQ(add.input_dims, (Dims{{4, 5}, {5}}));
  EXPECT_EQ(add.flops, 20);
  EXPECT_EQ(add.bytes, (20 + 5 + 20) * 4);
  EXPECT_EQ(only_event(profile, "relu").flops, 20);
}

TEST(ProfilerOps, OptionsTurnShapesAndFlopsOff) {
  profiler::Profile profile(profiler::ProfileOptions().record_shapes(false).with_flops(false));
  flow::matmul(flow::ones({2, 2}), flow::ones({2, 2}));
  const profiler::Event matmul = only_event(profile, "matmul");
  EXPECT_TRUE(matmul.input_dims.empty());
  EXPECT_FALSE(matmul.flops.has_value());
  EXPECT_EQ(matmul.bytes, 3 * 4 * 4);
}

TEST(ProfilerOps, RecordsFromManyThreads) {
  constexpr int kThreads = 4, kOpsPerThread = 50;
  profiler::Profile profile;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([] {
      const Tensor x = flow::ones({8});
      for (int i = 0; i < kOpsPerThread; ++i) flow::relu(x);
    });
  }
  for (auto& thread : threads) thread.join();
  const auto relus = events_named(profile, "relu");
  EXPECT_EQ(relus.size(), static_cast<size_t>(kThreads * kOpsPerThread));
  std::set<int64_t> thread_ids;
  for (const auto& event : relus) thread_ids.insert(event.thread_id);
  EXPECT_EQ(thread_ids.size(), static_cast<size_t>(kThreads));
}

struct Mlp : flow::nn::Graph {
  Mlp() {
    model = register_module("model", std::make_shared<flow::nn::Sequential>(
                                         std::make_shared<flow::nn::Linear>(8, 16), std::make_shared<flow::nn::ReLU>(),
                                         std::make_shared<flow::nn::Linear>(16, 4)));
    eval();
  }
  TensorList build(const TensorList& in) override { return {(*model)(in[0])}; }
  std::shared_ptr<flow::nn::Sequential> model;
};

TEST(ProfilerGraph, TasksRecordOnActorThreadsWithTheirNodesInside) {
  Mlp graph;
  const Tensor x = flow::ones({2, 8});
  graph(x);  // compiles outside the profile
  profiler::Profile profile;
  int64_t caller_thread = 0;
  {
    const profiler::RecordScope caller("pipelined run", "user");
    graph.run_pipelined(4, [&](int64_t) { return TensorList{x}; });
  }
  std::vector<profiler::Event> tasks, nodes;
  for (const auto& event : profile.events()) {
    if (event.name == "pipelined run") caller_thread = event.thread_id;
    if (event.category == "graph_task") tasks.push_back(event);
    if (event.category == "graph_node") nodes.push_back(event);
  }
  ASSERT_FALSE(tasks.empty());
  EXPECT_TRUE(std::any_of(tasks.begin(), tasks.end(), [&](const profiler::Event& task) { return task.thread_id != caller_thread; }))
      << "a pipelined run acts on the actor threads";
  // Every node ran inside a task run on the same thread.
  ASSERT_FALSE(nodes.empty());
  for (const auto& node : nodes) {
    const bool inside = std::any_of(tasks.begin(), tasks.end(), [&](const profiler::Event& task) {
      return task.thread_id == node.thread_id && task.start_us <= node.start_us &&
             node.start_us + node.duration_us <= task.start_us + task.duration_us;
    });
    EXPECT_TRUE(inside) << node.name;
  }
  // The fusion pass made linear + relu one node; each of 4 pieces runs it once, with FLOPs.
  const auto fused = events_named(profile, "fused_linear");
  ASSERT_EQ(fused.size(), 4u);
  EXPECT_EQ(fused[0].input_dims.at(0), (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(fused[0].flops, 2 * 2 * 16 * 8 + 2 * 16);  // the product, then relu per element
  const profiler::KeyAverages averages = profile.key_averages();
  for (const auto& row : averages.rows()) {
    EXPECT_GE(row.self_us, 0) << row.name;
    EXPECT_LE(row.self_us, row.total_us + 1e-6) << row.name;
  }
}

TEST(ProfilerData, DataLoaderRecordsEachBatch) {
  auto dataset = std::make_shared<flow::data::TensorDataset>(flow::ones({10, 3}), flow::zeros({10}));
  flow::data::DataLoader loader(dataset, flow::data::DataLoaderOptions().batch_size(4));
  profiler::Profile profile;
  int64_t batches = 0;
  for (const auto& batch : loader) batches += batch.data.size(0) > 0 ? 1 : 0;
  EXPECT_EQ(batches, 3);
  const auto loads = events_named(profile, "DataLoader.load_batch");
  EXPECT_EQ(loads.size(), 3u);
  for (const auto& load : loads) EXPECT_EQ(load.category, "data");
}

TEST(ProfilerExport, ChromeTraceReadsBack) {
  const std::filesystem::path path = unique_temp_path("profiler_trace.json");
  profiler::Profile profile;
  flow::matmul(flow::ones({3, 4}), flow::ones({4, 5}));
  { const profiler::RecordScope scope("user scope", "user"); }
  profile.stop();
  profile.export_chrome_trace(path.string());

  std::ifstream file(path);
  const nlohmann::json trace = nlohmann::json::parse(file);
  ASSERT_TRUE(trace.at("traceEvents").is_array());
  bool saw_matmul = false, saw_scope = false;
  for (const auto& event : trace["traceEvents"]) {
    EXPECT_EQ(event.at("ph"), "X");
    EXPECT_GE(event.at("ts").get<double>(), 0);
    EXPECT_GE(event.at("dur").get<double>(), 0);
    EXPECT_TRUE(event.at("pid").is_number_integer());
    EXPECT_TRUE(event.at("tid").is_number_integer());
    if (event.at("name") == "matmul") {
      saw_matmul = true;
      EXPECT_EQ(event.at("cat"), "op");
      EXPECT_EQ(event.at("args").at("Input Dims"), nlohmann::json::parse("[[3, 4], [4, 5]]"));
      EXPECT_EQ(event.at("args").at("flops"), 120);
      EXPECT_EQ(event.at("args").at("bytes"), (12 + 20 + 15) * 4);
    }
    if (event.at("name") == "user scope") {
      saw_scope = true;
      EXPECT_EQ(event.at("cat"), "user");
      EXPECT_FALSE(event.at("args").contains("flops"));
    }
  }
  EXPECT_TRUE(saw_matmul);
  EXPECT_TRUE(saw_scope);
  EXPECT_THROW_MSG(profile.export_chrome_trace("/nonexistent-dir/trace.json"), "[profiler]");
}

TEST(ProfilerKeyAverages, CountsCallsFlopsAndSelfTime) {
  const Tensor a = flow::ones({3, 4}), b = flow::ones({4, 5});
  profiler::Profile profile;
  {
    const profiler::RecordScope outer("outer", "user");
    for (int i = 0; i < 3; ++i) flow::matmul(a, b);
  }
  flow::relu(a);
  flow::relu(a);
  const profiler::KeyAverages averages = profile.key_averages();
  EXPECT_EQ(averages.at("matmul").calls, 3);
  EXPECT_EQ(averages.at("matmul").flops, 3 * 120);
  EXPECT_EQ(averages.at("relu").calls, 2);
  const profiler::KeyAverage& outer = averages.at("outer");
  EXPECT_EQ(outer.calls, 1);
  EXPECT_GE(outer.self_us, 0);
  EXPECT_LE(outer.self_us, outer.total_us - averages.at("matmul").total_us + 1e-6) << "the matmuls are not outer's own time";
  for (size_t i = 1; i < averages.rows().size(); ++i) EXPECT_GE(averages.rows()[i - 1].total_us, averages.rows()[i].total_us);
  EXPECT_THROW_MSG(averages.at("softmax"), "[profiler] no event named 'softmax'");

  const std::string table = averages.table("calls", 1);
  EXPECT_NE(table.find("GFLOP/s"), std::string::npos);
  EXPECT_NE(table.find("matmul"), std::string::npos) << table;
  EXPECT_EQ(table.find("relu"), std::string::npos) << "row_limit 1 keeps the most called op only\n" << table;
  std::ostringstream printed;
  printed << averages;
  EXPECT_NE(printed.str().find("Self CPU time total"), std::string::npos);
  EXPECT_THROW_MSG(averages.table("bogus"), "[profiler] cannot sort by 'bogus'");
}

}  // namespace
