#pragma once
// oneflow_lite's Model internals, shared by model.cpp (loading, checking and planning an export)
// and program_cache.cpp (the cache of planned programs and the runs on them).
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/lru_cache.h"
#include "core/op.h"
#include "job/blocked_layout.h"
#include "job/export.pb.h"
#include "job/plan.h"
#include "oneflow_lite/model.h"

namespace flow::lite {
namespace internal {

// Writes zero bytes over `tensor` (memset on CPU): not zero_(), which storage-only dtypes (uint16,
// ...) have no kernel for.
inline void zero_bytes(Tensor& tensor) {
  if (tensor.device().is_cpu()) {
    std::memset(tensor.data_ptr(), 0, static_cast<size_t>(tensor.nbytes()));
  } else {
    tensor.zero_();
  }
}

// The Job made concrete for one batch size: every meta inferred, intermediate memory planned,
// values numbered so that a run is a walk over a vector.
struct Program {
  struct Step {
    std::string node;
    const OpDef* op = nullptr;
    Attrs attrs;
    std::vector<int> inputs;
    std::vector<int> outputs;
    std::vector<TensorMeta> out_metas;
    std::vector<const graph::PlannedBuffer*> planned;  // null: allocated per run
  };
  int64_t batch = 0;
  graph::Plan plan;
  std::vector<Step> steps;
  std::vector<std::pair<int, Tensor>> constants;  // value id, weight
  std::vector<int> input_values;
  std::vector<int> output_values;
  std::vector<bool> copy_output;  // the output is (a view of) an input or a weight: hand out a copy
  std::vector<TensorMeta> value_metas;
  std::shared_ptr<const graph::BlockedLayouts> blocked;  // null: every step runs its op's kernel
  int num_values = 0;
  int64_t planned_bytes = 0;
  int64_t run_bytes = 0;  // planned_bytes plus the outputs allocated per run
};

// The memory of one run in flight: each device's block and the planned output tensors in it.
struct Arena {
  std::map<std::string, Tensor> blocks;
  std::vector<TensorList> planned_outputs;  // per step
  graph::BlockedArenaPtr blocked;
};

// A program and the arenas of its finished runs. The cache and each run in flight hold it: once
// evicted, it and its arenas are freed when the last of its runs gives its arena back.
struct CachedProgram {
  std::shared_ptr<const Program> program;  // null where a run at the batch size is over the memory limit
  int64_t run_bytes = 0;
  std::mutex mutex;
  std::vector<std::unique_ptr<Arena>> free_arenas;
};

}  // namespace internal

using internal::Arena;
using internal::CachedProgram;
using internal::Program;
using internal::zero_bytes;

struct Model::Impl {
  std::string dir;
  graph::proto::ExportedModel exported;
  std::vector<TensorSpec> inputs, outputs;
  std::vector<Device> input_devices;
  std::map<std::string, Tensor> weights;  // by constant node name
  int64_t memory_limit = 0;
  bool blocked_layouts = true;
  bool batch_buckets = false;
  int64_t float32_products = 0;  // bfloat16 products of the export run in float32 (LoadOptions::bfloat16_products)

  // By batch size and, with blocked layouts, the calling thread's kernel threads
  // (current_num_threads()): oneDNN fixes a primitive's threads when it is created.
  std::unique_ptr<LruCache<std::pair<int64_t, int>, CachedProgram>> programs;
  // The weights' copies in oneDNN's layouts, shared by the programs (the weights never change).
  std::unique_ptr<graph::ReorderedWeights> reordered_weights = std::make_unique<graph::ReorderedWeights>();

  template <typename... Args>
  [[noreturn]] void invalid(const Args&... args) const {
    fail("oneflow_lite", dir, ": ", args...);
  }
  // Refuses `bytes` of memory for `what` when it is over the limit, before it is allocated.
  void check_memory(int64_t bytes, const std::string& what) const;
  // The cache entry of exactly `batch` rows, made on first use.
  std::shared_ptr<CachedProgram> cached_program(int64_t batch) const;
  // The program a run of `batch` rows uses: its bucket's with batch buckets where that run fits
  // the memory limit, else its own (flow::Error where that one does not fit).
  std::shared_ptr<CachedProgram> program_for(int64_t batch) const;
  // plan_layouts false: without the layout pass (its oneDNN primitives and reordered weights), for
  // a program that is only inspected, never run.
  std::shared_ptr<const Program> make_program(int64_t batch, bool plan_layouts = true) const;
  // Rewrites the exported Job (and weights) so that its bfloat16 products `choice` does not keep
  // run in float32 (bfloat16_products.h), and logs what it changed. A Job without bfloat16 values
  // is not copied.
  void widen_bfloat16_products(Bfloat16Products choice);
  // Whether the model's rows are independent (batch_buckets.h), from a program at 2+ rows.
  bool rows_independent() const;
  // Checks one node of the Job and adds its values (and its step) to the program.
  void add_node(graph::proto::Node& node, int64_t batch, bool rebatch, Program& program, std::map<std::string, int>& value_ids,
                std::map<std::string, TensorMeta>& metas, std::map<int64_t, int>& input_of_index,
                std::map<int64_t, int>& output_of_index) const;
  std::unique_ptr<Arena> take_arena(CachedProgram& cached) const;
  static void give_back(CachedProgram& cached, std::unique_ptr<Arena> arena);
  // Runs the program on inputs of its batch size.
  TensorList run_program(CachedProgram& cached, const TensorList& given) const;
  // Runs `given` (checked inputs of `batch` rows) on program_for(batch), padding the inputs to
  // the program's rows and cutting its outputs back.
  TensorList run_batch(const TensorList& given, int64_t batch) const;
};

}  // namespace flow::lite
