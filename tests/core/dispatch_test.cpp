// The op registry and the one dispatch point that eager, lazy (Graph) and autograd share.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <thread>

#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "common/test_util.h"
#include "core/flow.h"
#include "core/ops/optimizer_update.h"

namespace {

// Stands in for the Graph's lazy interpreter: sees every op, forwards to eager.
class RecordingInterpreter final : public flow::Interpreter {
 public:
  flow::TensorList apply(const flow::OpDef& op, const flow::TensorList& inputs, const flow::Attrs& attrs) override {
    names.push_back(op.name);
    return eager.apply(op, inputs, attrs);
  }
  std::vector<std::string> names;
  flow::EagerInterpreter eager;
};

class CountingRecorder final : public flow::AutogradRecorder {
 public:
  void record(const flow::OpDef& op, const flow::TensorList&, const flow::TensorList& outputs,
              const flow::Attrs&) override {
    names.push_back(op.name);
    outputs_seen += outputs.size();
  }
  std::vector<std::string> names;
  size_t outputs_seen = 0;
};

}  // namespace

TEST(Dispatch, FunctionalCallsGoThroughTheCurrentInterpreter) {
  RecordingInterpreter recording;
  {
    flow::InterpreterGuard guard(&recording);
    auto a = flow::arange(6).reshape({2, 3}).t().contiguous();
    EXPECT_EQ(a.tolist<int64_t>(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  }
  EXPECT_EQ(recording.names, (std::vector<std::string>{"arange", "view", "permute", "copy"}));
  flow::zeros({1});
  EXPECT_EQ(recording.names.size(), 4u) << "the guard restores the eager interpreter";
}

TEST(Dispatch, AutogradRecorderSeesEveryOp) {
  CountingRecorder recorder;
  flow::set_autograd_recorder(&recorder);
  flow::ones({2, 2}).t();
  flow::set_autograd_recorder(nullptr);
  EXPECT_EQ(recorder.names, (std::vector<std::string>{"full", "permute"}));
  EXPECT_EQ(recorder.outputs_seen, 2u);
}

TEST(Dispatch, RegistryHoldsEveryDefinitionWithItsSlots) {
  const auto names = flow::registered_ops();
  for (const char* name : {"copy", "assign", "full", "arange", "view", "permute", "slice", "select", "expand"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
  const flow::OpDef& permute = flow::find_op("permute");
  EXPECT_EQ(permute.input_names, (std::vector<std::string>{"input"}));
  EXPECT_EQ(permute.attr_names, (std::vector<std::string>{"dims"}));
  EXPECT_TRUE(permute.vjp);
  const flow::OpDef& copy = flow::find_op("copy");
  auto signatures = copy.sbp({{flow::Shape{4, 5}, flow::kFloat32, flow::kCPU}}, flow::Attrs());
  ASSERT_EQ(signatures.size(), 4u);  // S(0), S(1), B, P: a copy of partial sums is one
  EXPECT_EQ(signatures[0].outputs[0].str(), "S(0)");
  EXPECT_EQ(signatures[2].inputs[0].str(), "B");
  EXPECT_EQ(signatures[3].outputs[0].str(), "P");
  EXPECT_THROW_MSG(flow::find_op("no_such_op"), "[op] no op named 'no_such_op' is registered");
}

TEST(Dispatch, MissingKernelAndArityAreReported) {
  EXPECT_THROW_MSG(flow::arange(3, flow::kBool), "[arange] no cpu kernel for dtype bool");
  EXPECT_THROW_MSG(flow::apply(flow::find_op("permute"), {}), "[permute] expected 1 inputs, got 0");
  EXPECT_THROW_MSG(flow::apply(flow::find_op("permute"), {flow::Tensor()}), "[permute] input 0 is an undefined tensor");
}

TEST(ThreadPool, ParallelForCoversRangeAndPropagatesErrors) {
  const int threads = flow::get_num_threads();
  flow::set_num_threads(std::max(2, threads));  // a worker other than the caller throws
  std::vector<int> hits(100000, 0);
  flow::parallel_for(0, 100000, 1000, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) ++hits[i];
  });
  EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), 100000);
  EXPECT_THROW_MSG(flow::parallel_for(0, 100000, 10,
                                      [](int64_t begin, int64_t) {
                                        if (begin > 0) flow::fail("worker", "boom");
                                      }),
                   "[worker] boom");
  flow::set_num_threads(threads);
  EXPECT_THROW_MSG(flow::set_num_threads(0), "[set_num_threads] expected at least 1 thread");
}

TEST(ThreadPool, ThreadLocalCapLimitsOnlyTheCallingThread) {
  flow::set_num_threads(4);
  auto chunks = [] {
    std::atomic<int> count{0};
    flow::parallel_for(0, 100000, 1000, [&](int64_t, int64_t) { ++count; });
    return count.load();
  };
  EXPECT_EQ(chunks(), 4);
  std::thread capped([&] {
    flow::set_thread_local_num_threads(1);
    EXPECT_EQ(chunks(), 1);
    flow::set_thread_local_num_threads(2);
    EXPECT_EQ(chunks(), 2);
    {
      // A scope lowers the cap and gives back the one it found; it never raises one.
      const flow::ThreadCapScope single(1);
      EXPECT_EQ(chunks(), 1);
      EXPECT_EQ(omp_get_max_threads(), 1);
      const flow::ThreadCapScope wider(3);
      EXPECT_EQ(chunks(), 1);
    }
    EXPECT_EQ(chunks(), 2);
    EXPECT_EQ(omp_get_max_threads(), 2);
  });
  capped.join();
  EXPECT_EQ(chunks(), 4);  // other threads keep the process-wide count
  // Memory-bound passes get a thread per kElementwiseGrain values, within the caps.
  EXPECT_EQ(flow::elementwise_threads(8192), 1);
  EXPECT_EQ(flow::elementwise_threads(3 * flow::kElementwiseGrain), 3);
  EXPECT_EQ(flow::elementwise_threads(100 * flow::kElementwiseGrain), 4);
  {
    const flow::ThreadCapScope pair(2);
    EXPECT_EQ(flow::elementwise_threads(100 * flow::kElementwiseGrain), 2);
  }
  EXPECT_THROW_MSG(flow::set_thread_local_num_threads(-1), "expected 0 or more threads");
  flow::set_num_threads(std::max(1u, std::thread::hardware_concurrency()));
}

// FLOW_NUM_THREADS, then OMP_NUM_THREADS (what torchrun and flow_run set per rank), then the usable
// CPUs; values that are not positive integers are skipped.
TEST(Dispatch, DefaultThreadsComeFromFlowNumThreadsThenOmpNumThreadsThenCpus) {
  const auto choice = [](const char* flow_env, const char* omp_env, int cpus) {
    const flow::ThreadCountChoice c = flow::choose_num_threads(flow_env, omp_env, cpus);
    return std::to_string(c.threads) + " " + c.source;
  };
  EXPECT_EQ(choice(nullptr, nullptr, 16), "16 CPUs");
  EXPECT_EQ(choice(nullptr, "1", 16), "1 OMP_NUM_THREADS");
  EXPECT_EQ(choice(nullptr, "4,2", 16), "4 OMP_NUM_THREADS");  // nested levels: the outer one
  EXPECT_EQ(choice("3", "1", 16), "3 FLOW_NUM_THREADS");
  EXPECT_EQ(choice("24", nullptr, 16), "24 FLOW_NUM_THREADS");  // an explicit count may exceed the CPUs
  EXPECT_EQ(choice("0", "2", 16), "2 OMP_NUM_THREADS");
  EXPECT_EQ(choice("many", "", 8), "8 CPUs");
  EXPECT_EQ(choice(nullptr, "-4", 8), "8 CPUs");
  EXPECT_EQ(choice(nullptr, "2x", 8), "8 CPUs");
  EXPECT_EQ(choice(nullptr, nullptr, 0), "1 CPUs");
}

// The default thread count stays within a container's CPU quota (cgroup v2 cpu.max, v1
// cpu.cfs_quota_us / cpu.cfs_period_us), rounded up to whole CPUs; no quota leaves it alone.
TEST(Dispatch, CgroupCpuQuotaLimitsTheDefaultThreads) {
  std::map<std::string, std::string> files;
  const auto read = [&](const std::string& path) -> std::optional<std::string> {
    auto found = files.find(path);
    return found == files.end() ? std::nullopt : std::optional<std::string>(found->second);
  };
  const std::string v2 = "0::/jobs/train\n";
  files["/sys/fs/cgroup/jobs/train/cpu.max"] = "200000 100000\n";
  EXPECT_EQ(flow::cgroup_cpu_limit(v2, read), 2);
  files["/sys/fs/cgroup/jobs/train/cpu.max"] = "150000 100000\n";
  EXPECT_EQ(flow::cgroup_cpu_limit(v2, read), 2);
  files["/sys/fs/cgroup/jobs/train/cpu.max"] = "max 100000\n";
  EXPECT_EQ(flow::cgroup_cpu_limit(v2, read), std::nullopt);
  // v1 in a container's own namespace (path "/"), the cpu controller mounted with cpuacct.
  const std::string v1 = "12:pids:/\n4:memory:/x\n2:cpu,cpuacct:/\n0::/\n";
  files["/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us"] = "50000\n";
  files["/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us"] = "100000\n";
  EXPECT_EQ(flow::cgroup_cpu_limit(v1, read), 1);
  files["/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us"] = "-1\n";
  EXPECT_EQ(flow::cgroup_cpu_limit(v1, read), std::nullopt);
  EXPECT_EQ(flow::cgroup_cpu_limit("", read), std::nullopt);
  EXPECT_EQ(flow::cgroup_cpu_limit("garbage without colons\n", read), std::nullopt);
  EXPECT_GE(flow::get_num_threads(), 1);
}

TEST(Dispatch, InPlaceOpsWriteTheirInputsAndBumpVersions) {
  flow::Tensor p = flow::ones({4}), g = flow::full({4}, 2.0);
  const auto version = p.storage()->version();
  flow::sgd_update_(p, g, nullptr, 0.5, 0, 0, 0, false, true);
  EXPECT_EQ(p.tolist<float>(), std::vector<float>(4, 0.f));
  EXPECT_GT(p.storage()->version(), version);
  flow::Tensor strided = flow::ones({4, 2}).t();
  EXPECT_THROW_MSG(flow::sgd_update_(strided, flow::ones({2, 4}), nullptr, 0.1, 0, 0, 0, false, true),
                   "[sgd_update] writes in place and needs contiguous tensors");
  EXPECT_THROW_MSG(flow::sgd_update_(p, flow::ones({3}), nullptr, 0.1, 0, 0, 0, false, true),
                   "[sgd_update] param, grad and buffer must share shape and dtype");
}
