#pragma once
// oneflow_lite: the inference-only runtime for deploy exports (flow::save(graph, dir)). It loads
// and validates an export directory, plans memory once per batch size or bucket of them (static
// offsets from a liveness analysis), keeps the most recently used of these programs, and runs the
// Job with the core kernels. It links neither autograd, nn, optim, data nor the graph compiler.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace flow::lite {

// A model input or output. shape[0] is -1 when the model takes any batch size.
struct TensorSpec {
  std::string name;
  DType dtype = kFloat32;
  std::vector<int64_t> shape;
};

// Where an export computes products in bfloat16 (an AMP export: flow::save of a Graph with
// config().enable_amp()), the precision lite runs them in (oneflow_lite/bfloat16_products.h).
enum class Bfloat16Products {
  kAuto,     // per op kind, bfloat16 only where this CPU's bfloat16 kernel beats float32: convolutions
             // with AMX, matmuls and linears with AVX512-BF16; the others in float32
  kKeep,     // every one in bfloat16, as exported
  kFloat32,  // every convolution, matmul and linear in float32
};

struct LoadOptions {
  // The most memory one run may need: its planned intermediates and outputs (and, for the trial
  // run at load, its inputs). A model, or a batch size, needing more is refused with flow::Error
  // instead of being allocated. 0 (the default) means this machine's physical memory.
  int64_t memory_limit_bytes = 0;
  LoadOptions& memory_limit(int64_t bytes) {
    memory_limit_bytes = bytes;
    return *this;
  }
  // Whether float32 convolutions, pooling, ReLU and residual adds on CPU run on oneDNN's
  // channel-blocked layouts, kept between them, with weights reordered once for all batch sizes
  // (oneflow_lite/blocked_layout.h). Off: every op runs its own kernel on plain NCHW.
  bool blocked_layouts_enabled = true;
  LoadOptions& blocked_layouts(bool enabled) {
    blocked_layouts_enabled = enabled;
    return *this;
  }
  // The most programs a model keeps compiled (one per batch size, or bucket, and kernel thread
  // count, each with its planned memory, packed weights and the arenas of finished runs): the
  // least recently used is dropped for a new one, so that memory does not grow with the batch
  // sizes clients send. At least 1.
  int64_t program_cache_entries = 8;
  LoadOptions& program_cache_capacity(int64_t programs) {
    program_cache_entries = programs;
    return *this;
  }
  // Whether a dynamic-batch model whose every op treats rows independently (by the ops' SBP
  // signatures) runs a batch on the program of its bucket: up to 8 rows the exact size, above it
  // the next 2^k or 3 * 2^(k-1), the inputs padded with zero rows and the outputs cut back
  // (oneflow_lite/batch_buckets.h). Results may differ from an exact-size program's in the last
  // bits, where kernels block a product differently. Off, or for other models: one program per
  // batch size.
  bool batch_buckets_enabled = true;
  LoadOptions& batch_buckets(bool enabled) {
    batch_buckets_enabled = enabled;
    return *this;
  }
  // The precision of an AMP export's bfloat16 products. A product run in float32 reads weights
  // widened once at load, and the ops after it that only pass its result on (ReLU, pooling,
  // views, residual adds) run in float32 with it; a cast to bfloat16 goes before each product
  // kept in bfloat16 and each model output that reads such a value, so inputs and outputs keep
  // their dtypes. Results differ from the bfloat16 run's within bfloat16's rounding. With kAuto,
  // the environment variable FLOW_LITE_BFLOAT16=auto|keep|float32 decides instead. The choice
  // is logged at verbosity 1 (GLOG_v=1); Model::float32_products() counts the products widened.
  Bfloat16Products bfloat16_products_choice = Bfloat16Products::kAuto;
  LoadOptions& bfloat16_products(Bfloat16Products choice) {
    bfloat16_products_choice = choice;
    return *this;
  }
};

class Model {
 public:
  // Loads an export directory. Throws flow::Error("[oneflow_lite] <dir>: <what is wrong>") for a
  // missing or corrupt file, a format version this build does not read, an unknown op, a node
  // its op's checks reject (arity, ranks, attributes; the node is named), an op without a kernel
  // for the device, or a missing or mis-sized weight. A trial run on zeros at the exported batch
  // size makes a kernel's refusal a load error too: a model that loads runs. A model whose run
  // needs more memory than options.memory_limit is refused before anything is allocated.
  static std::shared_ptr<const Model> load(const std::string& dir, const LoadOptions& options = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const std::string& name() const;
  const std::vector<TensorSpec>& inputs() const;
  const std::vector<TensorSpec>& outputs() const;
  // Whether dim 0 of every input and output may be any batch size (else only the exported one).
  bool dynamic_batch() const;
  // The batch size the model was exported with.
  int64_t exported_batch() const;

  // One inference: inputs in the order of inputs(), outputs in the order of outputs(). Checks
  // count, dtype, shape and device of every input (flow::Error naming the input). Thread-safe:
  // concurrent calls run in separate planned memory.
  TensorList run(const TensorList& inputs) const;
  // The batch size of the program a run at `batch` uses: its bucket with batch buckets (when the
  // bucket's run fits the memory limit), else `batch`. The three below describe that program.
  int64_t program_batch(int64_t batch) const;
  // The planned intermediate memory of one run at `batch` (planned once, then reused).
  int64_t planned_bytes(int64_t batch) const;
  // What one run at `batch` allocates: planned intermediates plus the outputs it hands out. A
  // batch whose run needs more than the memory limit is refused (flow::Error) by run().
  int64_t run_bytes(int64_t batch) const;
  // How many of the Job's ops at `batch` run on blocked layouts (0 with blocked_layouts(false)).
  int64_t blocked_steps(int64_t batch) const;
  // How many of those convolutions apply their ReLU or clamp inside oneDNN's primitive: those the
  // plan proved no NaN reaches from model inputs that are finite and at most 1e6 in magnitude
  // (graph::kCheckedInputBound).
  // Inputs outside that (a NaN, an infinity, a huge value) run every op through its own kernel, so
  // NaN propagates as in eager.
  int64_t activations_in_primitives(int64_t batch) const;
  // How many of the export's bfloat16 products (convolutions, matmuls, linears) run in float32
  // here (LoadOptions::bfloat16_products).
  int64_t float32_products() const;
  // Whether runs use batch buckets: LoadOptions::batch_buckets on, a dynamic batch, and rows
  // that every op treats independently.
  bool batch_buckets() const;
  // How many programs are cached now (at most LoadOptions::program_cache_capacity), batch sizes
  // found over the memory limit included.
  int64_t cached_programs() const;
  // The bytes of weights the cached programs hold reordered into oneDNN's layouts (blocked
  // layouts on): one copy per weight and layout, shared by the programs of every batch size and
  // thread count that want that layout, freed with the last of them.
  int64_t reordered_weight_bytes() const;

 private:
  struct Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  void check_by_running() const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flow::lite
