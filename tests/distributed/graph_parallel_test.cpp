// nn::Graph on global tensors, on 2 and 4 ranks (flow_distributed_tests --ranks=N): data and
// model (Megatron) parallel training compiled into each rank's Job, against one process (the
// eager program and a single-process Graph, which every rank computes itself), and the boxing
// collectives each compiled Job holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>

#include "common/ddp_reference.h"
#include "common/graphs.h"
#include "common/models.h"
#include "core/grad_mode.h"
#include "core/serialization.h"
#include "distributed/rank_fixture.h"
#include "graph/export.h"
#include "job/job.h"
#include "models/gpt2.h"
#include "oneflow_lite/model.h"

namespace flow::distributed::testing {
namespace {

using GraphParallel = RankTest;
// Whole models: slower, so a CTest entry of their own (2 ranks).
using GraphParallelModels = RankTest;
using test_graphs::TrainGraph;

const NdSbp kB{sbp::broadcast()};
const NdSbp kS0{sbp::split(0)};


// The collectives of the Job, counted by op: "comm_all_reduce" -> 8.
std::map<std::string, int> collectives(const graph::proto::Job& job) {
  std::map<std::string, int> counts;
  for (const auto& node : job.nodes()) {
    if (node.op().rfind("comm_", 0) == 0) ++counts[node.op()];
  }
  return counts;
}

// The element counts of the Job's all-reduces, sorted.
std::vector<int64_t> all_reduce_sizes(const graph::proto::Job& job) {
  std::vector<int64_t> sizes;
  for (const auto& node : job.nodes()) {
    if (node.op() == "comm_all_reduce") sizes.push_back(graph::meta_of(node.outputs(0)).shape.numel());
  }
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

std::shared_ptr<nn::Sequential> train_one_process_graph(const std::vector<flow::testing::DdpBatch>& batches, double lr) {
  auto model = flow::testing::make_ddp_mlp(0);
  TrainGraph graph(model, std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(lr)));
  for (const auto& batch : batches) graph(batch.data, batch.target);
  return model;
}

TEST_F(GraphParallel, DataParallelTrainingEqualsOneProcessGraph) {
  const auto batches = flow::testing::make_ddp_batches(20, 64, 11);
  const auto reference = train_one_process_graph(batches, 0.1);

  // Parameters broadcast, data split along the batch: OneFlow's data parallelism.
  const Placement placement = Placement::all(DeviceType::kCPU);
  auto model = flow::testing::make_ddp_mlp(0);
  model->to_global(placement, kB);
  TrainGraph graph(model, std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1)));
  Tensor loss;
  for (const auto& batch : batches) {
    loss = graph(from_whole(batch.data, placement, kS0), from_whole(batch.target, placement, kS0)).at(0);
  }
  EXPECT_TRUE(loss.is_global());
  EXPECT_EQ(loss.placement(), placement);
  for (const Tensor& p : model->parameters()) {
    ASSERT_TRUE(p.is_global());
    EXPECT_EQ(p.sbp(), kB);
  }
  // The batch's gradient sums are associated differently (per piece, then all-reduced): the
  // Release build measures under 1e-6 after 20 steps, the sanitizer build's unvectorised
  // reductions 3.8e-6.
  EXPECT_LT(flow::testing::max_relative_difference(*model, *reference), 1e-5);

  // Each rank's Job holds its piece of the batch; the partial-sum gradients of the 6 parameters
  // are all-reduced together in one bucket of all their 1637 elements, and the loss (a mean
  // over the global batch) all-reduces its sum and its count: nothing else moves.
  const auto& job = graph.job();
  EXPECT_EQ(collectives(job), (std::map<std::string, int>{{"comm_all_reduce", 3}})) << graph::job_to_text(job);
  EXPECT_EQ(all_reduce_sizes(job), (std::vector<int64_t>{1, 1, 1637}));
  for (const auto& node : job.nodes()) {
    if (node.op() != graph::kInputOp) continue;
    EXPECT_EQ(node.outputs(0).shape(0), 64 / world);
    EXPECT_EQ(node.outputs(0).sbp(), "(S(0),)");
    EXPECT_EQ(node.outputs(0).placement(), placement.str());
  }
}

// Megatron's MLP: the first Linear column-parallel (weight and bias rows split), the second
// row-parallel (weight columns split, bias broadcast).
std::map<std::string, NdSbp> megatron_sbps() {
  return {{"0.weight", kS0}, {"0.bias", kS0}, {"2.weight", NdSbp{sbp::split(1)}}};
}

std::shared_ptr<nn::Sequential> megatron_mlp() {
  manual_seed(5);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(12, 16), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(16, 5));
}

TEST_F(GraphParallel, ModelParallelGraphEqualsEagerAndOneProcess) {
  const auto batches = flow::testing::make_ddp_batches(5, 8, 21);
  const auto reference = megatron_mlp();
  for (const auto& batch : batches) {
    flow::testing::ddp_loss(*reference, batch).backward();
    flow::testing::sgd_step(*reference, 0.1);
  }

  const Placement placement = Placement::all(DeviceType::kCPU);
  // Eager model parallel.
  auto eager = megatron_mlp();
  eager->to_global(placement, kB, megatron_sbps());
  for (const auto& batch : batches) {
    const flow::testing::DdpBatch global{from_whole(batch.data, placement, kB), from_whole(batch.target, placement, kB)};
    flow::testing::ddp_loss(*eager, global).backward();
    flow::testing::sgd_step(*eager, 0.1);
  }
  // The same in a Graph.
  auto model = megatron_mlp();
  model->to_global(placement, kB, megatron_sbps());
  EXPECT_EQ(model->named_parameters()[2].second.sbp(), NdSbp{sbp::split(1)});
  TrainGraph graph(model, std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1)));
  for (const auto& batch : batches) graph(from_whole(batch.data, placement, kB), from_whole(batch.target, placement, kB));

  EXPECT_LT(flow::testing::max_relative_difference(*eager, *reference), 1e-5);
  EXPECT_LT(flow::testing::max_relative_difference(*model, *reference), 1e-5);
  EXPECT_LT(flow::testing::max_relative_difference(*model, *eager), 1e-6);
  // Each rank holds its shards only.
  const TensorList params = model->parameters();
  EXPECT_EQ(params[0].to_local().shape(), (Shape{16 / world, 12}));
  EXPECT_EQ(params[2].to_local().shape(), (Shape{5, 16 / world}));
  // The row-parallel output's partial sums are reduce-scattered along the batch for the loss
  // (half an all-reduce's bytes), whose sum is all-reduced; its gradient is all-gathered back.
  // The weights' gradients keep their splits: no collective before the updates.
  const auto& job = graph.job();
  EXPECT_EQ(collectives(job), (std::map<std::string, int>{{"comm_all_gather", 1}, {"comm_all_reduce", 1}, {"comm_reduce_scatter", 1}}))
      << graph::job_to_text(job);
  EXPECT_EQ(all_reduce_sizes(job), (std::vector<int64_t>{1}));
}

// 2-D hybrid on {{0,1},{2,3}}: data split over the outer dimension, Megatron's split of the
// weights over the inner one.
TEST_F(GraphParallel, HybridOnTwoByTwoPlacementEqualsOneProcess) {
  if (world != 4) GTEST_SKIP() << "needs 4 ranks";
  const auto batches = flow::testing::make_ddp_batches(4, 8, 41);
  const auto reference = megatron_mlp();
  TrainGraph reference_graph(reference, std::make_shared<optim::SGD>(reference->parameters(), optim::SGDOptions(0.1)));
  for (const auto& batch : batches) reference_graph(batch.data, batch.target);

  const Placement placement("cpu", std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}});
  const NdSbp bb{sbp::broadcast(), sbp::broadcast()};
  auto model = megatron_mlp();
  model->to_global(placement, bb,
                   {{"0.weight", {sbp::broadcast(), sbp::split(0)}},
                    {"0.bias", {sbp::broadcast(), sbp::split(0)}},
                    {"2.weight", {sbp::broadcast(), sbp::split(1)}}});
  TrainGraph graph(model, std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1)));
  const NdSbp data_sbp{sbp::split(0), sbp::broadcast()};
  for (const auto& batch : batches) graph(from_whole(batch.data, placement, data_sbp), from_whole(batch.target, placement, data_sbp));
  EXPECT_LT(flow::testing::max_relative_difference(*model, *reference), 1e-5);
  EXPECT_EQ(model->parameters()[0].to_local().shape(), (Shape{8, 12}));
}

// Every parameter of model as a whole tensor on this rank (collective for global parameters).
TensorList whole_parameters(const nn::Module& model) {
  TensorList out;
  for (const Tensor& p : model.parameters()) out.push_back((p.is_global() ? p.whole_local() : p).clone());
  return out;
}

// A run on ranks {0, 1} saves after 3 of 6 steps; the checkpoint holds logical tensors, so it
// resumes in one process and on every rank of the job, each continuing as the 2-rank run did.
TEST_F(GraphParallel, CheckpointOfTwoRanksResumesInOneProcessAndOnEveryRank) {
  const auto batches = flow::testing::make_ddp_batches(6, 64, 31);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("flow_reshard_" + std::string(std::getenv("MASTER_PORT")) + ".safetensors")).string();
  const auto sgd = [](const nn::Module& model) {
    return std::make_shared<optim::SGD>(model.parameters(), optim::SGDOptions(0.1).momentum(0.9));
  };
  const auto train = [&](TrainGraph& graph, const Placement* placement, size_t from, size_t to) {
    for (size_t k = from; k < to; ++k) {
      if (placement == nullptr) {
        graph(batches[k].data, batches[k].target);
      } else {
        graph(from_whole(batches[k].data, *placement, kS0), from_whole(batches[k].target, *placement, kS0));
      }
    }
  };
  TensorList uninterrupted, saved;
  if (rank < 2) {
    const Placement two("cpu", std::vector<int64_t>{0, 1});
    auto model = flow::testing::make_ddp_mlp(0);
    model->to_global(two, kB);
    TrainGraph graph(model, sgd(*model));
    train(graph, &two, 0, 3);
    flow::save(graph.state_dict(), path);
    saved = whole_parameters(*model);
    train(graph, &two, 3, 6);
    uninterrupted = whole_parameters(*model);
  }
  group().barrier({});

  auto local = flow::testing::make_ddp_mlp(1);
  TrainGraph local_graph(local, sgd(*local));
  local_graph.load_state_dict(flow::load(path));
  EXPECT_EQ(local_graph.train_step(), 3);
  const TensorList restored = whole_parameters(*local);
  train(local_graph, nullptr, 3, 6);

  const Placement everyone = Placement::all(DeviceType::kCPU);
  auto global = flow::testing::make_ddp_mlp(2);
  global->to_global(everyone, kB);
  TrainGraph global_graph(global, sgd(*global));
  global_graph.load_state_dict(flow::load(path));
  for (const auto& [key, t] : global_graph.state_dict()) EXPECT_TRUE(t.is_global()) << key;
  train(global_graph, &everyone, 3, 6);
  const TensorList resumed = whole_parameters(*global);
  group().barrier({});
  if (rank == 0) std::filesystem::remove(path);
  if (rank >= 2) return;
  // The checkpoint restored the parameters exactly; three more steps (momentum included) agree
  // up to the summation order that the number of ranks changes.
  EXPECT_EQ(flow::testing::max_relative_difference(restored, saved), 0.0);
  EXPECT_LT(flow::testing::max_relative_difference(whole_parameters(*local), uninterrupted), 1e-5);
  EXPECT_LT(flow::testing::max_relative_difference(resumed, uninterrupted), 1e-5);
}

// Two pipeline stages: the first Linear + ReLU on rank 0, the second Linear on rank 1; the
// activation moves between them (to_global onto the next stage's placement).
struct TwoStages : nn::Module {
  explicit TwoStages(std::optional<Placement> second_stage = std::nullopt) : second_stage(std::move(second_stage)) {
    manual_seed(5);
    first = register_module("first", std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(12, 16), std::make_shared<nn::ReLU>()));
    second = register_module("second", std::make_shared<nn::Linear>(16, 5));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor hidden = first->forward(x);
    return second->forward(second_stage ? hidden.to_global(*second_stage, kB) : hidden);
  }
  std::optional<Placement> second_stage;
  std::shared_ptr<nn::Sequential> first;
  std::shared_ptr<nn::Linear> second;
};

TEST_F(GraphParallel, PipelineOfTwoStagesWithMicroBatchesEqualsOneProcess) {
  if (rank >= 2) return;  // the two stages are ranks 0 and 1
  const auto batches = flow::testing::make_ddp_batches(3, 16, 71);
  auto reference = std::make_shared<TwoStages>();
  TrainGraph reference_graph(reference, std::make_shared<optim::SGD>(reference->parameters(), optim::SGDOptions(0.1)));
  for (const auto& batch : batches) reference_graph(batch.data, batch.target);

  const Placement stage0("cpu", std::vector<int64_t>{0}), stage1("cpu", std::vector<int64_t>{1});
  auto model = std::make_shared<TwoStages>(stage1);
  model->first->to_global(stage0, kB);
  model->second->to_global(stage1, kB);
  TrainGraph graph(model, std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1)));
  graph.config().set_gradient_accumulation_steps(4);
  for (const auto& batch : batches) graph(from_whole(batch.data, stage0, kB), from_whole(batch.target, stage1, kB));

  // Each rank holds and updates its stage only; both equal one process on the whole batches.
  const nn::Module& mine = rank == 0 ? static_cast<const nn::Module&>(*model->first) : *model->second;
  const nn::Module& expected = rank == 0 ? static_cast<const nn::Module&>(*reference->first) : *reference->second;
  EXPECT_LT(flow::testing::max_relative_difference(mine, expected), 1e-5);
  // 4 micro-batches: the activation moves forward and its gradient back once each, point to
  // point. GPipe's schedule: every micro-batch's forward (rank 0 sends the activation) before the
  // backwards (rank 1 sends the gradient back), on both ranks, so stage 0 computes micro-batch k+1
  // while stage 1 computes micro-batch k.
  EXPECT_EQ(collectives(graph.job()), (std::map<std::string, int>{{"comm_recv", 4}, {"comm_send", 4}})) << graph::job_to_text(graph.job());
  std::vector<std::string> moves;
  for (const auto& node : graph.job().nodes()) {
    if (node.op() == "comm_send" || node.op() == "comm_recv") moves.push_back(node.op());
  }
  const std::string forward = rank == 0 ? "comm_send" : "comm_recv", backward = rank == 0 ? "comm_recv" : "comm_send";
  EXPECT_EQ(moves, (std::vector<std::string>{forward, forward, forward, forward, backward, backward, backward, backward}));
  // They run as actors on a thread per peer and direction, in Job order, so compute waits for a
  // received value only where it reads it.
  std::map<std::string, int> tasks_per_thread;
  for (const auto& task : graph.plan().tasks) ++tasks_per_thread[task.thread];
  const std::string peer = std::to_string(1 - rank);
  EXPECT_EQ(tasks_per_thread["cpu:send:" + peer], 4);
  EXPECT_EQ(tasks_per_thread["cpu:recv:" + peer], 4);
  // The checkpoint gathers both stages (to rank 0, which writes): it loads into one process.
  const std::string path =
      (std::filesystem::temp_directory_path() / ("flow_pipeline_" + std::string(std::getenv("MASTER_PORT")) + ".safetensors")).string();
  flow::save(graph.state_dict(), path);
  StateDict trained;
  for (const auto& [key, t] : flow::load(path)) {
    if (key.rfind("model.", 0) == 0) trained.insert(key.substr(6), t);
  }
  TwoStages restored;
  restored.load_state_dict(trained);
  EXPECT_LT(flow::testing::max_relative_difference(restored, *reference), 1e-5);
  group().barrier({0, 1});
  if (rank == 0) std::filesystem::remove(path);
  EXPECT_THROW(
      {
        TrainGraph odd(model, std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1)));
        odd.config().set_gradient_accumulation_steps(3);
        odd(from_whole(batches[0].data, stage0, kB), from_whole(batches[0].target, stage1, kB));
      },
      Error);
}

// The Job's sends and receives, in Job order.
std::vector<std::string> point_to_point_order(const graph::proto::Job& job) {
  std::vector<std::string> moves;
  for (const auto& node : job.nodes()) {
    if (node.op() == "comm_send" || node.op() == "comm_recv") moves.push_back(node.op() == "comm_send" ? "send" : "recv");
  }
  return moves;
}

TEST_F(GraphParallel, PipelineOneForwardOneBackwardEqualsGPipeAndHoldsLessMemory) {
  if (rank >= 2) return;
  const auto batches = flow::testing::make_ddp_batches(3, 256, 73);
  const Placement stage0("cpu", std::vector<int64_t>{0}), stage1("cpu", std::vector<int64_t>{1});
  struct Run {
    std::shared_ptr<TwoStages> model;
    std::vector<std::string> moves;
    int64_t planned_peak = 0;
  };
  const auto train = [&](nn::PipelineSchedule schedule) {
    Run run;
    run.model = std::make_shared<TwoStages>(stage1);
    run.model->first->to_global(stage0, kB);
    run.model->second->to_global(stage1, kB);
    TrainGraph graph(run.model, std::make_shared<optim::SGD>(run.model->parameters(), optim::SGDOptions(0.1)));
    graph.config().set_gradient_accumulation_steps(4).set_pipeline_schedule(schedule);
    for (const auto& batch : batches) graph(from_whole(batch.data, stage0, kB), from_whole(batch.target, stage1, kB));
    run.moves = point_to_point_order(graph.job());
    run.planned_peak = graph.plan().block_bytes.at("cpu");
    return run;
  };
  const Run gpipe = train(nn::PipelineSchedule::kGPipe);
  const Run one_f_one_b = train(nn::PipelineSchedule::k1F1B);
  // The same micro-batches, gradients summed in the same order: the same parameters.
  const auto stage = [&](const Run& run) -> const nn::Module& {
    return rank == 0 ? static_cast<const nn::Module&>(*run.model->first) : *run.model->second;
  };
  EXPECT_LT(flow::testing::max_relative_difference(stage(one_f_one_b), stage(gpipe)), 1e-6);
  // Stage 0 of 2 warms up with one forward, stage 1 alternates from the start.
  const std::vector<std::string> expected =
      rank == 0 ? std::vector<std::string>{"send", "send", "recv", "send", "recv", "send", "recv", "recv"}
                : std::vector<std::string>{"recv", "send", "recv", "send", "recv", "send", "recv", "send"};
  EXPECT_EQ(one_f_one_b.moves, expected);
  EXPECT_EQ(gpipe.moves, rank == 0 ? (std::vector<std::string>{"send", "send", "send", "send", "recv", "recv", "recv", "recv"})
                                   : (std::vector<std::string>{"recv", "recv", "recv", "recv", "send", "send", "send", "send"}));
  // Each stage frees a micro-batch's activations after its backward instead of holding all four.
  EXPECT_LT(one_f_one_b.planned_peak, gpipe.planned_peak);
  std::printf("[rank %lld] planned peak: GPipe %lld bytes, 1F1B %lld bytes\n", static_cast<long long>(rank),
              static_cast<long long>(gpipe.planned_peak), static_cast<long long>(one_f_one_b.planned_peak));
}

struct ThreeStages : nn::Module {
  explicit ThreeStages(std::vector<Placement> stages = {}) : stages(std::move(stages)) {
    manual_seed(9);
    a = register_module("a", std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(12, 16), std::make_shared<nn::ReLU>()));
    b = register_module("b", std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(16, 16), std::make_shared<nn::ReLU>()));
    c = register_module("c", std::make_shared<nn::Linear>(16, 5));
  }
  Tensor forward(const Tensor& x) override {
    Tensor hidden = a->forward(x);
    if (!stages.empty()) hidden = hidden.to_global(stages[1], kB);
    hidden = b->forward(hidden);
    if (!stages.empty()) hidden = hidden.to_global(stages[2], kB);
    return c->forward(hidden);
  }
  std::vector<Placement> stages;
  std::shared_ptr<nn::Sequential> a, b;
  std::shared_ptr<nn::Linear> c;
};

// The middle stage sends and receives both ways: each peer and direction has its own thread, so
// no transfer waits behind another peer's, under either schedule.
TEST_F(GraphParallel, ThreeStagePipelineEqualsOneProcessUnderBothSchedules) {
  if (world < 3) GTEST_SKIP() << "needs 3 ranks";
  if (rank >= 3) return;
  const auto batches = flow::testing::make_ddp_batches(3, 48, 79);
  auto reference = std::make_shared<ThreeStages>();
  TrainGraph reference_graph(reference, std::make_shared<optim::SGD>(reference->parameters(), optim::SGDOptions(0.1)));
  for (const auto& batch : batches) reference_graph(batch.data, batch.target);
  const std::vector<Placement> stages{Placement("cpu", std::vector<int64_t>{0}), Placement("cpu", std::vector<int64_t>{1}),
                                      Placement("cpu", std::vector<int64_t>{2})};
  for (const auto schedule : {nn::PipelineSchedule::kGPipe, nn::PipelineSchedule::k1F1B}) {
    auto model = std::make_shared<ThreeStages>(stages);
    model->a->to_global(stages[0], kB);
    model->b->to_global(stages[1], kB);
    model->c->to_global(stages[2], kB);
    TrainGraph graph(model, std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1)));
    graph.config().set_gradient_accumulation_steps(6).set_pipeline_schedule(schedule);
    for (const auto& batch : batches) graph(from_whole(batch.data, stages[0], kB), from_whole(batch.target, stages[2], kB));
    const nn::Module* mine[] = {model->a.get(), model->b.get(), model->c.get()};
    const nn::Module* expected[] = {reference->a.get(), reference->b.get(), reference->c.get()};
    EXPECT_LT(flow::testing::max_relative_difference(*mine[rank], *expected[rank]), 1e-5) << (schedule == nn::PipelineSchedule::k1F1B ? "1F1B" : "GPipe");
    const std::vector<std::string> moves = point_to_point_order(graph.job());
    EXPECT_EQ(moves.size(), rank == 1 ? 24u : 12u);
    if (schedule == nn::PipelineSchedule::k1F1B && rank == 0) {
      // Stage 0 of 3 warms up with two forwards.
      EXPECT_EQ(std::vector<std::string>(moves.begin(), moves.begin() + 4), (std::vector<std::string>{"send", "send", "send", "recv"}));
    }
  }
}

// Bytes of this rank's optimizer state in the Job (its variables named "_optimizer.*").
int64_t optimizer_state_bytes(const graph::proto::Job& job) {
  int64_t bytes = 0;
  for (const auto& node : job.nodes()) {
    if (node.op() != graph::kVariableOp || node.name().rfind("_optimizer.", 0) != 0) continue;
    bytes += graph::meta_of(node.outputs(0)).shape.numel() * static_cast<int64_t>(itemsize(dtype_from_name(node.outputs(0).dtype())));
  }
  return bytes;
}

TEST_F(GraphParallel, ZeroShardsOptimizerStateAndTrainsLikeDataParallel) {
  const auto batches = flow::testing::make_ddp_batches(10, 64, 51);
  const Placement placement = Placement::all(DeviceType::kCPU);
  const auto run = [&](int64_t stage, int64_t& state_bytes, std::map<std::string, int>& comm) {
    auto model = flow::testing::make_ddp_mlp(0);
    model->to_global(placement, kB);
    TrainGraph graph(model, std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1).momentum(0.9)));
    graph.config().enable_zero(stage);
    for (const auto& batch : batches) graph(from_whole(batch.data, placement, kS0), from_whole(batch.target, placement, kS0));
    state_bytes = optimizer_state_bytes(graph.job());
    comm = collectives(graph.job());
    return whole_parameters(*model);
  };
  int64_t plain_bytes = 0, zero1_bytes = 0, zero2_bytes = 0;
  std::map<std::string, int> plain_comm, zero1_comm, zero2_comm;
  const TensorList plain = run(0, plain_bytes, plain_comm);
  const TensorList zero1 = run(1, zero1_bytes, zero1_comm);
  const TensorList zero2 = run(2, zero2_bytes, zero2_comm);
  EXPECT_LT(flow::testing::max_relative_difference(zero1, plain), 1e-6);
  // Stage 2's bucket lays the gradients out by destination rank, so an element sits elsewhere in
  // the reduced buffer than in plain DP's bucket and Gloo's ring adds more than two ranks' values
  // in another order (4 ranks: 1.4e-6 after 10 steps; 2 ranks' sums commute).
  EXPECT_LT(flow::testing::max_relative_difference(zero2, plain), world == 2 ? 1e-6 : 1e-5);

  // The momentum buffers: whole without ZeRO, this rank's rows with it.
  int64_t whole = 0, rows = 0;
  for (const Tensor& p : flow::testing::make_ddp_mlp(0)->parameters()) {
    whole += p.numel() * 4;
    rows += local_shape(p.shape(), placement, kS0, rank).numel() * 4;
  }
  EXPECT_EQ(plain_bytes, whole);
  EXPECT_EQ(zero1_bytes, rows);
  EXPECT_EQ(zero2_bytes, rows);
  if (world == 2) {
    EXPECT_LE(zero1_bytes, plain_bytes / 2 + 32 * 4 + 4);  // halved, up to the odd 5-row tensors
  }
  // Six parameters; the loss all-reduces its sum and count. Without ZeRO and at stage 1 the
  // gradients are all-reduced in one bucket, stage 2 reduce-scatters them in one; stages 1 and 2
  // all-gather the updated rows in one.
  EXPECT_EQ(plain_comm, (std::map<std::string, int>{{"comm_all_reduce", 3}}));
  EXPECT_EQ(zero1_comm, (std::map<std::string, int>{{"comm_all_gather", 1}, {"comm_all_reduce", 3}}));
  EXPECT_EQ(zero2_comm, (std::map<std::string, int>{{"comm_all_gather", 1}, {"comm_all_reduce", 2}, {"comm_reduce_scatter", 1}}));
}

// Deploy export of a model laid out over the ranks (data parallel, then Megatron) gathers it: the
// export rank 0 writes runs in oneflow_lite like the single-process model.
TEST_F(GraphParallel, ExportOfAGlobalModelGathersItWhole) {
  const auto batches = flow::testing::make_ddp_batches(3, 16, 23);
  const auto reference = train_one_process_graph(batches, 0.1);
  const Placement placement = Placement::all(DeviceType::kCPU);
  const std::string dir = (std::filesystem::temp_directory_path() / ("flow_global_export_" + std::string(std::getenv("MASTER_PORT")))).string();
  const Tensor probe = randn({5, 12});
  for (const bool megatron : {false, true}) {
    SCOPED_TRACE(megatron ? "megatron" : "data parallel");
    auto model = flow::testing::make_ddp_mlp(0);
    model->to_global(placement, kB, megatron ? megatron_sbps() : std::map<std::string, NdSbp>{});
    TrainGraph graph(model, std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1)));
    const NdSbp& data = megatron ? kB : kS0;
    for (const auto& batch : batches) graph(from_whole(batch.data, placement, data), from_whole(batch.target, placement, data));
    test_graphs::PredictGraph predict(model);
    predict(from_whole(probe, placement, kB));
    flow::save(predict, dir);
    for (const Tensor& p : model->parameters()) EXPECT_TRUE(p.is_global());  // the model keeps its layout
    if (rank == 0) {
      const auto lite = lite::Model::load(dir);
      autograd::NoGradGuard no_grad;
      reference->eval();
      EXPECT_LT(flow::testing::max_relative_difference(lite->run({probe}), {reference->forward(probe)}), 1e-5);
    }
    group().barrier({});
  }
  if (rank == 0) std::filesystem::remove_all(dir);
}

// Trains a copy of `make()`'s model (same seed) in a Graph for 3 steps on `batches`, data
// parallel over every rank when `parallel`, else in one process; returns its parameters
// (logical values).
template <typename Make, typename Loss>
TensorList train_three_steps(const Make& make, const Loss& loss, const std::vector<TensorList>& batches, bool parallel) {
  manual_seed(5);
  std::shared_ptr<nn::Module> model = make();
  const Placement placement = Placement::all(DeviceType::kCPU);
  if (parallel) model->to_global(placement, kB);
  struct StepGraph : nn::Graph {
    StepGraph(std::shared_ptr<nn::Module> m, const Loss& l) : model(std::move(m)), loss(l) {
      register_module("model", model);
      add_optimizer(std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.05).momentum(0.9)));
    }
    TensorList build(const TensorList& in) override {
      Tensor value = loss(*model, in);
      value.backward();
      return {value};
    }
    std::shared_ptr<nn::Module> model;
    Loss loss;
  } graph(model, loss);
  for (const TensorList& batch : batches) {
    TensorList inputs;
    for (const Tensor& t : batch) inputs.push_back(parallel ? from_whole(t, placement, kS0) : t);
    graph(inputs);
  }
  TensorList parameters;
  for (const Tensor& p : model->parameters()) parameters.push_back(p.is_global() ? p.whole_local() : p);
  return parameters;
}

// The layers of real models data parallel in a Graph (batch norm synchronised over the ranks,
// pooling, residual adds; embeddings, attention, layer norm, tied weights) train like one process.
TEST_F(GraphParallelModels, ConvolutionalAndTransformerModelsTrainDataParallelLikeOneProcess) {
  manual_seed(9);
  std::vector<TensorList> images, tokens;
  for (int i = 0; i < 3; ++i) images.push_back({randn({8, 1, 28, 28}), randint(0, 10, {8})});
  for (int i = 0; i < 3; ++i) tokens.push_back({randint(0, 64, {4, 16})});
  const auto resnet = [] { return std::static_pointer_cast<nn::Module>(test_models::resnet()); };
  const auto classify = [](nn::Module& m, const TensorList& in) { return nn::functional::cross_entropy(m.forward(in[0]), in[1]); };
  EXPECT_LT(flow::testing::max_relative_difference(train_three_steps(resnet, classify, images, true),
                                                   train_three_steps(resnet, classify, images, false)),
            1e-4);
  const auto gpt2 = [] {
    return std::static_pointer_cast<nn::Module>(std::make_shared<models::GPT2LMHeadModel>(
        models::GPT2Config().vocab_size(64).n_positions(16).n_embd(32).n_layer(2).n_head(4).dropout(0)));
  };
  const auto next_token = [](nn::Module& m, const TensorList& in) { return static_cast<models::GPT2LMHeadModel&>(m).loss(in[0], in[0]); };
  EXPECT_LT(flow::testing::max_relative_difference(train_three_steps(gpt2, next_token, tokens, true),
                                                   train_three_steps(gpt2, next_token, tokens, false)),
            1e-4);
}

// Dropout draws a mask of the logical tensor: each rank draws its rows' counters, in eager and
// in a Graph (which draws fresh counters on every run), equal to one process.
TEST_F(GraphParallel, DropoutOnASplitBatchEqualsOneProcess) {
  struct DropoutGraph : nn::Graph {
    TensorList build(const TensorList& in) override { return {nn::functional::dropout(in[0], 0.5, true) * 3.0}; }
  };
  const Placement placement = Placement::all(DeviceType::kCPU);
  manual_seed(3);
  const Tensor x = randn({6, 5});
  manual_seed(17);
  DropoutGraph one_process;
  const Tensor eager_expected = nn::functional::dropout(x, 0.5, true);
  const Tensor first = one_process(x)[0], second = one_process(x)[0];
  manual_seed(17);
  DropoutGraph global;
  const Tensor x_global = x.to_global(placement, kB).to_global(placement, kS0);
  const Tensor eager = nn::functional::dropout(x_global, 0.5, true);
  EXPECT_EQ(eager.sbp(), kS0);
  EXPECT_EQ(eager.tolist<float>(), eager_expected.tolist<float>());
  EXPECT_EQ(global(x_global)[0].tolist<float>(), first.tolist<float>());
  EXPECT_EQ(global(x_global)[0].tolist<float>(), second.tolist<float>());
  EXPECT_NE(first.tolist<float>(), second.tolist<float>());
}

TEST_F(GraphParallel, DebugLogShowsPlacementAndSbp) {
  const Placement placement = Placement::all(DeviceType::kCPU);
  auto model = megatron_mlp();
  model->to_global(placement, kB, megatron_sbps());
  test_graphs::PredictGraph graph(model);
  std::ostringstream log;
  graph.debug(2, log);
  const Tensor x = randn({4, 12});
  const Tensor out = graph(from_whole(x, placement, kB)).at(0);
  // The row-parallel output stays a partial sum, as in eager; reading it sums the pieces.
  EXPECT_TRUE(out.is_global());
  EXPECT_EQ(out.sbp(), NdSbp{sbp::partial_sum()});
  EXPECT_EQ(out.shape(), (Shape{4, 5}));
  const Tensor expected = megatron_mlp()->forward(x);
  const auto got = out.tolist<float>(), want = expected.tolist<float>();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
  const std::string text = log.str();
  EXPECT_NE(text.find("model.0.weight = variable() -> ((" + std::to_string(16 / world) + ", 12), float32, cpu, (S(0),), placement=" +
                      placement.str()),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("-> ((4, 5), float32, cpu, (P,), placement="), std::string::npos) << text;
  // Printing the graph shows the logical metas with placement and sbp, as OneFlow does.
  std::ostringstream printed;
  printed << graph;
  EXPECT_NE(printed.str().find("(PARAMETER:model.0.weight:tensor(..., size=(16, 12), dtype=flow.float32, device=cpu, placement=" +
                               placement.str() + ", sbp=(S(0),), requires_grad=true)"),
            std::string::npos)
      << printed.str();
  EXPECT_NE(printed.str().find("(OUTPUT:_" + graph.name() + "_output.0:tensor(..., size=(4, 5), dtype=flow.float32, device=cpu, placement=" +
                               placement.str() + ", sbp=(P,)))"),
            std::string::npos)
      << printed.str();
}

TEST_F(GraphParallel, SplitLocalTensorInsideBuildIsAnError) {
  struct Splits : nn::Graph {
    explicit Splits(Placement p) : placement(std::move(p)) {}
    TensorList build(const TensorList& in) override { return {in[0].to_global(placement, kS0)}; }
    Placement placement;
  } graph(Placement::all(DeviceType::kCPU));
  EXPECT_THROW(
      {
        try {
          graph(randn({4, 3}));
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("pass the graph a global input instead"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
}

}  // namespace
}  // namespace flow::distributed::testing
