// A served model sees whatever batch sizes clients send: its memory must level off instead of
// growing with every new size (issue 34: an MLP server went from 706 MiB to 5.8 GiB over 1,000
// requests at batch sizes 65..1064).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "common/graphs.h"
#include "common/models.h"
#include "common/test_util.h"
#include "graph/export.h"
#include "oneflow_lite/model.h"

namespace {

// AddressSanitizer runs the soak several times slower: fewer batch sizes there.
#if defined(__SANITIZE_ADDRESS__)
#define FLOW_SOAK_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FLOW_SOAK_UNDER_ASAN 1
#endif
#endif
// ASan also keeps up to 256 MiB of freed memory in quarantine (quarantine_size_mb's default),
// resident until reused: 134 and 173 MiB of growth over the 300 sizes there.
#ifdef FLOW_SOAK_UNDER_ASAN
constexpr int64_t kBatchSizes = 300;
constexpr double kGrowthBoundMib = 200 + 256;
#else
constexpr int64_t kBatchSizes = 2000;
constexpr double kGrowthBoundMib = 200;
#endif

double resident_mib() {
  long pages = 0, resident = 0;
  FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return 0;
  const int read = std::fscanf(statm, "%ld %ld", &pages, &resident);
  std::fclose(statm);
  return read == 2 ? static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20) : 0;
}

// Runs an exported MLP at kBatchSizes distinct batch sizes from 65 and returns the growth of the
// resident memory (MiB) after a warm-up.
double soak_growth_mib(const flow::lite::LoadOptions& options) {
  const std::string dir = unique_temp_path("lite_memory_soak");
  std::filesystem::remove_all(dir);
  flow::manual_seed(0);
  {
    test_graphs::PredictGraph graph(test_models::mlp());
    graph(flow::randn({8, 1, 28, 28}));
    flow::save(graph, dir);
  }
  const auto model = flow::lite::Model::load(dir, options);
  constexpr int64_t kFirst = 65;
  const int64_t last = kFirst + kBatchSizes - 1;
  const flow::Tensor x = flow::randn({last, 1, 28, 28});
  // The warm-up runs the largest sizes too, so that the allocator's high-water mark is reached.
  for (int64_t batch = kFirst; batch < kFirst + 32; ++batch) model->run({x.narrow(0, 0, batch)});
  for (int64_t batch = last - 32; batch <= last; ++batch) model->run({x.narrow(0, 0, batch)});
  const double warm = resident_mib();
  for (int64_t batch = kFirst; batch <= last; ++batch) {
    const flow::Tensor out = model->run({x.narrow(0, 0, batch)}).at(0);
    EXPECT_EQ(out.size(0), batch);
  }
  const double end = resident_mib();
  std::printf("RSS after warm-up %.0f MiB, after %lld batch sizes (%lld..%lld) %.0f MiB\n", warm, static_cast<long long>(kBatchSizes),
              static_cast<long long>(kFirst), static_cast<long long>(last), end);
  std::filesystem::remove_all(dir);
  return end - warm;
}

// Before the program cache was bounded: 243 -> 2191 MiB over 2000 sizes (Release, 2 cores).
TEST(LiteMemorySoak, ThousandsOfBatchSizesKeepMemoryBounded) { EXPECT_LT(soak_growth_mib({}), kGrowthBoundMib); }

// Without batch buckets every size compiles a program, and only the cache's bound holds memory.
TEST(LiteMemorySoak, ExactProgramsKeepMemoryBoundedToo) {
  EXPECT_LT(soak_growth_mib(flow::lite::LoadOptions().batch_buckets(false)), kGrowthBoundMib);
}

}  // namespace
