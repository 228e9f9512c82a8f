// flow::save(state_dict, path) is crash-safe: a child process that saves two checkpoints in turn
// is killed with SIGKILL at random moments (seeded), and the file on disk always loads and equals
// one of the two.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "common/test_util.h"
#include "core/ops/all.h"
#include "core/serialization.h"

using flow::StateDict;

namespace {

// About 8 MB, so that a save (write and fsync) takes a while.
StateDict checkpoint(float value) {
  StateDict state;
  state.insert("weight", flow::full({1024, 2048}, value));
  state.insert("bias", flow::arange(1024, flow::kInt64));
  state.metadata()["value"] = std::to_string(value);
  return state;
}

bool same(const StateDict& a, const StateDict& b) {
  if (a.keys() != b.keys() || a.metadata() != b.metadata()) return false;
  for (const auto& [name, t] : a) {
    const flow::Tensor& u = b.at(name);
    if (t.dtype() != u.dtype() || t.shape() != u.shape()) return false;
    if (std::memcmp(t.data_ptr(), u.data_ptr(), static_cast<size_t>(t.numel()) * flow::itemsize(t.dtype())) != 0) return false;
  }
  return true;
}

// Saves a and b in turn until killed; never returns.
[[noreturn]] void save_forever(const StateDict& a, const StateDict& b, const std::string& path) {
  try {
    for (uint64_t i = 0;; ++i) flow::save(i % 2 ? b : a, path);
  } catch (...) {
    _exit(1);
  }
}

}  // namespace

TEST(CheckpointCrash, KilledSaveLeavesOldOrNewCheckpoint) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / ("flow_crash_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "model.safetensors").string();
  const StateDict a = checkpoint(1.0f), b = checkpoint(2.0f);
  // The kill delays scale with one save on this machine (never asserted on).
  const auto start = std::chrono::steady_clock::now();
  flow::save(a, path);
  const auto save_time = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start);
  std::mt19937 rng(2024);
  std::uniform_int_distribution<int64_t> delay_us(0, 3 * save_time.count() + 1000);

  for (int round = 0; round < 30; ++round) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) save_forever(a, b, path);
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the saving child stopped by itself (status " << status << ")";
    StateDict on_disk;
    ASSERT_NO_THROW(on_disk = flow::load(path)) << "round " << round;
    EXPECT_TRUE(same(on_disk, a) || same(on_disk, b)) << "round " << round << ": the file is neither checkpoint";
  }
  // A save after the kills replaces whatever temporary they left.
  flow::save(b, path);
  EXPECT_TRUE(same(flow::load(path), b));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove_all(dir);
}

TEST(CheckpointCrash, FailedSaveKeepsTheOldFile) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / ("flow_crash_fail_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "model.safetensors").string();
  const StateDict a = checkpoint(1.0f);
  flow::save(a, path);
  StateDict reserved;
  reserved.insert("weight", flow::zeros({2}));
  reserved.insert("__metadata__", flow::zeros({1}));
  EXPECT_THROW_MSG(flow::save(reserved, path), "'__metadata__' is reserved");
  EXPECT_THROW_MSG(flow::save(a, (dir / "missing" / "x.safetensors").string()), "cannot open");
  EXPECT_TRUE(same(flow::load(path), a));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove_all(dir);
}
