#include "oneflow_lite/model.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include <unistd.h>

#include "core/interpreter.h"
#include "core/lru_cache.h"
#include "core/profiler.h"
#include "core/serialization.h"
#include "core/thread_pool.h"
#include "graph/blocked_layout.h"
#include "graph/export.pb.h"
#include "graph/job.h"
#include "graph/plan.h"
#include "oneflow_lite/batch_buckets.h"

namespace flow::lite {
namespace {

namespace proto = graph::proto;
using graph::BlockedArenaPtr;
using graph::BlockedLayouts;
using graph::kConstantOp;
using graph::kInputOp;
using graph::kOutputOp;
using graph::LayoutStep;

std::string shape_str(const std::vector<int64_t>& dims) {
  std::ostringstream out;
  out << "(";
  for (size_t d = 0; d < dims.size(); ++d) out << (d ? ", " : "") << dims[d];
  out << (dims.size() == 1 ? ",)" : ")");
  return out.str();
}

std::string meta_str(const TensorMeta& meta) { return shape_str(meta.shape.vec()) + " " + dtype_name(meta.dtype) + " on " + meta.device.str(); }

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
  std::shared_ptr<const BlockedLayouts> blocked;  // null: every step runs its op's kernel
  int num_values = 0;
  int64_t planned_bytes = 0;
  int64_t run_bytes = 0;  // planned_bytes plus the outputs allocated per run
};

// The memory of one run in flight: each device's block and the planned output tensors in it.
struct Arena {
  std::map<std::string, Tensor> blocks;
  std::vector<TensorList> planned_outputs;  // per step
  BlockedArenaPtr blocked;
};

// A program and the arenas of its finished runs. The cache and each run in flight hold it: once
// evicted, it and its arenas are freed when the last of its runs gives its arena back.
struct CachedProgram {
  std::shared_ptr<const Program> program;  // null where a run at the batch size is over the memory limit
  int64_t run_bytes = 0;
  std::mutex mutex;
  std::vector<std::unique_ptr<Arena>> free_arenas;
};

// `given` with zero rows appended up to `rows`, for a bucket's program.
Tensor pad_rows(const Tensor& given, int64_t rows) {
  std::vector<int64_t> dims = given.shape().vec();
  dims[0] = rows;
  Tensor padded = make_tensor(Shape(dims), given.dtype(), given.device());
  padded.narrow(0, 0, given.size(0)).copy_(given);
  Tensor tail = padded.narrow(0, given.size(0), rows - given.size(0));
  // Zero bytes on CPU: storage-only dtypes (uint16, ...) have no fill kernel.
  if (tail.device().is_cpu()) {
    std::memset(tail.data_ptr(), 0, static_cast<size_t>(tail.nbytes()));
  } else {
    tail.zero_();
  }
  return padded;
}

}  // namespace

struct Model::Impl {
  std::string dir;
  proto::ExportedModel exported;
  std::vector<TensorSpec> inputs, outputs;
  std::vector<Device> input_devices;
  std::map<std::string, Tensor> weights;  // by constant node name
  int64_t memory_limit = 0;
  bool blocked_layouts = true;
  bool batch_buckets = false;

  // By batch size and, with blocked layouts, the calling thread's kernel threads
  // (current_num_threads()): oneDNN fixes a primitive's threads when it is created.
  std::unique_ptr<LruCache<std::pair<int64_t, int>, CachedProgram>> programs;

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
  std::shared_ptr<const Program> make_program(int64_t batch) const;
  // Whether the model's rows are independent (batch_buckets.h), from a program at 2+ rows.
  bool rows_independent() const;
  // Checks one node of the Job and adds its values (and its step) to the program.
  void add_node(proto::Node& node, int64_t batch, bool rebatch, Program& program, std::map<std::string, int>& value_ids,
                std::map<std::string, TensorMeta>& metas, std::map<int64_t, int>& input_of_index,
                std::map<int64_t, int>& output_of_index) const;
  std::unique_ptr<Arena> take_arena(CachedProgram& cached) const;
  static void give_back(CachedProgram& cached, std::unique_ptr<Arena> arena);
  // Runs the program on inputs of its batch size.
  TensorList run_program(CachedProgram& cached, const TensorList& given) const;
};

namespace {

proto::ExportedModel read_exported(const std::string& dir) {
  const std::filesystem::path path = std::filesystem::path(dir) / "model.pb";
  std::ifstream file(path, std::ios::binary);
  if (!file) fail("oneflow_lite", dir, ": missing ", path.filename().string(), " (not an export directory?)");
  proto::ExportedModel exported;
  if (!exported.ParseFromIstream(&file)) fail("oneflow_lite", dir, ": ", path.filename().string(), " is corrupt (cannot parse)");
  if (exported.format_version() != graph::kExportFormatVersion) {
    fail("oneflow_lite", dir, ": export format version ", exported.format_version(), ", this build reads version ", graph::kExportFormatVersion);
  }
  if (exported.job().version() != graph::kJobVersion) {
    fail("oneflow_lite", dir, ": Job schema version ", exported.job().version(), ", this build reads version ", graph::kJobVersion);
  }
  return exported;
}

std::vector<TensorSpec> specs_of(const google::protobuf::RepeatedPtrField<proto::IoSpec>& specs) {
  std::vector<TensorSpec> out;
  for (const auto& spec : specs) out.push_back({spec.name(), dtype_from_name(spec.dtype()), {spec.shape().begin(), spec.shape().end()}});
  return out;
}

// Throws a flow::Error with the message parts; the caller adds the file and the node.
template <typename... Args>
[[noreturn]] void reject(const Args&... args) {
  throw Error(detail::concat(args...));
}

// The node's "index" attribute (inputs and outputs of the Job), checked.
int64_t io_index(const proto::Node& node, size_t count) {
  auto index = node.attrs().find("index");
  if (index == node.attrs().end() || index->second.value_case() != proto::AttrValue::kI) reject("has no integer 'index' attribute");
  if (index->second.i() < 0 || index->second.i() >= static_cast<int64_t>(count)) {
    reject("index ", index->second.i(), " is out of range for ", count, " model ", node.op(), "s");
  }
  return index->second.i();
}

// Sums byte counts; an overflow saturates, which is over any limit.
int64_t add_bytes(int64_t a, int64_t b) {
  int64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? std::numeric_limits<int64_t>::max() : sum;
}

std::string bytes_str(int64_t bytes) {
  std::ostringstream out;
  out << bytes << " bytes";
  if (bytes >= (int64_t{1} << 20)) out << " (" << std::fixed << std::setprecision(1) << static_cast<double>(bytes) / (1 << 30) << " GiB)";
  return out.str();
}

int64_t physical_memory_bytes() { return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE); }

// The Job's value for a model input or output must be what its spec promises at this batch size:
// run() checks given inputs against the specs, and the kernels trust the Job's metas.
void check_spec(const char* kind, const TensorSpec& spec, const TensorMeta& meta, int64_t batch) {
  bool matches = meta.dtype == spec.dtype && static_cast<size_t>(meta.shape.size()) == spec.shape.size();
  for (size_t d = 0; matches && d < spec.shape.size(); ++d) matches = meta.shape[d] == (d == 0 && spec.shape[d] == -1 ? batch : spec.shape[d]);
  if (!matches) {
    reject("is ", meta_str(meta), " but the model's ", kind, " '", spec.name, "' is ", shape_str(spec.shape), " ", dtype_name(spec.dtype),
           " (batch ", batch, ")");
  }
}

// One profiler event per step: the op's name, category "lite_blocked" for steps on oneDNN's
// blocked layouts (their values are not tensors, so metas stand in) and "lite_node" for the rest.
void record_step(const Program& program, const Program::Step& step, bool blocked, profiler::Clock::time_point start) {
  std::vector<TensorMeta> inputs;
  inputs.reserve(step.inputs.size());
  for (int id : step.inputs) inputs.push_back(program.value_metas[id]);
  profiler::record_op(*step.op, inputs, step.out_metas, step.attrs, blocked ? "lite_blocked" : "lite_node", start);
}

}  // namespace

void Model::Impl::check_memory(int64_t bytes, const std::string& what) const {
  if (bytes <= memory_limit) return;
  invalid(what, " needs ", bytes_str(bytes), " of memory, more than the limit of ", bytes_str(memory_limit),
          " (lite::LoadOptions::memory_limit; by default this machine's physical memory)");
}

void Model::Impl::add_node(proto::Node& node, int64_t batch, bool rebatch, Program& program, std::map<std::string, int>& value_ids,
                           std::map<std::string, TensorMeta>& metas, std::map<int64_t, int>& input_of_index,
                           std::map<int64_t, int>& output_of_index) const {
  const std::string& name = node.name();
  auto add_value = [&](int index, const TensorMeta& meta) {
    if (meta.device.is_meta()) reject("makes a value on the meta device, which holds no data: a deployed model runs on cpu or cuda");
    const std::string value = graph::value_name(name, index);
    if (!value_ids.emplace(value, program.num_values).second) reject("a second node is named '", name, "'");
    metas[value] = meta;
    program.value_metas.push_back(meta);
    return program.num_values++;
  };
  if (node.op() == kOutputOp) {
    if (node.inputs_size() != 1 || !value_ids.count(node.inputs(0))) reject("reads an unknown value");
    const int64_t index = io_index(node, outputs.size());
    check_spec("output", outputs[index], metas.at(node.inputs(0)), batch);
    if (!output_of_index.emplace(index, value_ids.at(node.inputs(0))).second) reject("a second node for the same output");
    return;
  }
  if (node.op() == kInputOp || node.op() == kConstantOp) {
    if (node.outputs_size() != 1) reject("must have one output");
    if (node.op() == kInputOp && rebatch) {
      if (node.outputs(0).shape_size() == 0) reject("a dynamic batch needs an input of rank >= 1");
      node.mutable_outputs(0)->set_shape(0, batch);
    }
    const TensorMeta meta = graph::meta_of(node.outputs(0));
    const int id = add_value(0, meta);
    if (node.op() == kInputOp) {
      const int64_t index = io_index(node, inputs.size());
      check_spec("input", inputs[index], meta, batch);
      if (!input_of_index.emplace(index, id).second) reject("a second node for the same input");
    } else {
      auto weight = weights.find(name);
      if (weight == weights.end()) reject("missing weight '", name, "' in weights.safetensors");
      program.constants.emplace_back(id, weight->second);
    }
    return;
  }
  const OpDef* op = nullptr;
  try {
    op = &find_op(node.op());
  } catch (const Error&) {
    reject("unknown op '", node.op(), "': this build of oneflow_lite does not have it");
  }
  Program::Step step;
  step.node = name;
  step.op = op;
  step.attrs = graph::attrs_of(node);
  std::vector<TensorMeta> in_metas;
  for (const auto& input : node.inputs()) {
    if (!value_ids.count(input)) reject("reads an unknown value '", input, "'");
    step.inputs.push_back(value_ids.at(input));
    in_metas.push_back(metas.at(input));
  }
  try {
    step.out_metas = checked_infer(*op, in_metas, step.attrs);
  } catch (const Error& e) {
    reject("does not accept its inputs at batch ", batch, ": ", e.what());
  }
  if (static_cast<int>(step.out_metas.size()) != node.outputs_size()) reject("has a wrong output count");
  for (int j = 0; j < node.outputs_size(); ++j) {
    const TensorMeta& meta = step.out_metas[j];
    const TensorMeta recorded = graph::meta_of(node.outputs(j));
    if (!rebatch && !(recorded.shape == meta.shape && recorded.dtype == meta.dtype && recorded.device == meta.device)) {
      reject("records output ", meta_str(recorded), " but its op infers ", meta_str(meta));
    }
    *node.mutable_outputs(j) = graph::describe(meta);
    step.outputs.push_back(add_value(j, meta));
  }
  program.steps.push_back(std::move(step));
}

std::shared_ptr<const Program> Model::Impl::make_program(int64_t batch) const {
  proto::Job job = exported.job();
  const bool rebatch = batch != exported.batch_size();
  std::map<std::string, proto::Node*> by_name;
  for (auto& node : *job.mutable_nodes()) by_name[node.name()] = &node;
  if (rebatch) {
    for (const auto& slot : exported.batch_slots()) {
      auto node = by_name.find(slot.node());
      if (node == by_name.end() || !node->second->attrs().count(slot.attr())) invalid("batch slot names an unknown node or attribute");
      auto& ints = *(*node->second->mutable_attrs())[slot.attr()].mutable_ints();
      if (slot.index() < 0 || slot.index() >= ints.values_size()) invalid("batch slot index out of range");
      ints.set_values(slot.index(), batch);
    }
  }
  auto program = std::make_shared<Program>();
  program->batch = batch;
  std::map<std::string, int> value_ids;
  std::map<std::string, TensorMeta> metas;
  std::map<int64_t, int> input_of_index, output_of_index;
  // Every check below rejects a damaged file here, at load, with the node named; a third-party
  // exception (protobuf, oneDNN, the standard library) becomes a flow::Error too.
  for (auto& node : *job.mutable_nodes()) {
    try {
      add_node(node, batch, rebatch, *program, value_ids, metas, input_of_index, output_of_index);
    } catch (const std::exception& e) {
      invalid("model.pb: node '", node.name(), "' (", node.op(), "): ", e.what());
    }
  }
  for (int64_t i = 0; i < static_cast<int64_t>(inputs.size()); ++i) {
    if (!input_of_index.count(i)) invalid("the Job has no node for input ", i);
    program->input_values.push_back(input_of_index.at(i));
  }
  for (int64_t i = 0; i < static_cast<int64_t>(outputs.size()); ++i) {
    if (!output_of_index.count(i)) invalid("the Job has no node for output ", i);
    program->output_values.push_back(output_of_index.at(i));
  }

  // Values that live only in blocked layouts get no plain buffer.
  std::set<std::string> unplanned;
  std::vector<bool> blocked_only(program->num_values, false);
  if (blocked_layouts) {
    std::vector<LayoutStep> layout_steps;
    for (const Program::Step& step : program->steps) layout_steps.push_back({step.op, &step.attrs, &step.inputs, &step.outputs});
    try {
      program->blocked = BlockedLayouts::plan(layout_steps, program->value_metas, program->constants, program->output_values);
    } catch (const std::exception& e) {
      invalid("model.pb: cannot plan blocked layouts at batch ", batch, ": ", e.what());
    }
    for (int id : program->blocked->blocked_only_values()) blocked_only[id] = true;
    for (const auto& [value, id] : value_ids) {
      if (blocked_only[id]) unplanned.insert(value);
    }
  }
  try {
    program->plan = graph::make_plan(job, unplanned);
  } catch (const std::exception& e) {
    invalid("model.pb: cannot plan the memory of the Job at batch ", batch, ": ", e.what());
  }
  for (const auto& [device, bytes] : program->plan.block_bytes) program->planned_bytes = add_bytes(program->planned_bytes, bytes);
  program->run_bytes = program->planned_bytes;
  size_t step_index = 0;
  for (const auto& node : job.nodes()) {
    if (graph::is_source_kind(node.op())) continue;
    if (node.op() == kOutputOp) {
      program->copy_output.push_back(program->plan.root_of.at(node.inputs(0)).empty());
      continue;
    }
    Program::Step& step = program->steps.at(step_index++);
    if (step.op->view || step.op->inplace) continue;
    for (int j = 0; j < node.outputs_size(); ++j) {
      auto planned = program->plan.buffers.find(graph::value_name(node.name(), j));
      step.planned.push_back(planned == program->plan.buffers.end() ? nullptr : &planned->second);
      if (!step.planned.back() && !blocked_only[step.outputs[j]]) {
        const TensorMeta& meta = step.out_metas[j];
        program->run_bytes = add_bytes(program->run_bytes, meta.shape.nbytes(itemsize(meta.dtype), "oneflow_lite"));
      }
    }
  }
  if (program->blocked) program->run_bytes = add_bytes(program->run_bytes, program->blocked->arena_bytes());
  return program;
}

std::shared_ptr<CachedProgram> Model::Impl::cached_program(int64_t batch) const {
  const std::pair<int64_t, int> key{batch, blocked_layouts ? current_num_threads() : 0};
  return programs->get_or_make(key, [&] {
    auto made = std::make_shared<CachedProgram>();
    made->program = make_program(batch);
    made->run_bytes = made->program->run_bytes;
    // Only the size is kept of a program over the limit: its packed weights would count too.
    if (made->run_bytes > memory_limit) made->program = nullptr;
    return made;
  });
}

std::shared_ptr<CachedProgram> Model::Impl::program_for(int64_t batch) const {
  const int64_t bucket = batch_buckets ? bucket_size(batch) : batch;
  if (bucket != batch) {
    std::shared_ptr<CachedProgram> padded = cached_program(bucket);
    if (padded->program) return padded;
  }
  std::shared_ptr<CachedProgram> exact = cached_program(batch);
  if (!exact->program) check_memory(exact->run_bytes, "a run at batch " + std::to_string(batch));
  return exact;
}

bool Model::Impl::rows_independent() const {
  const int64_t exported_batch = exported.batch_size();
  // At one row, element-wise ops broadcast a row instead of splitting rows.
  const std::shared_ptr<const Program> program = exported_batch >= 2 ? program_for(exported_batch)->program : make_program(2);
  std::set<std::string> batch_slot_nodes;
  for (const auto& slot : exported.batch_slots()) batch_slot_nodes.insert(slot.node());
  std::vector<RowStep> steps;
  for (const Program::Step& step : program->steps) {
    steps.push_back({step.op, &step.attrs, &step.inputs, &step.outputs, batch_slot_nodes.count(step.node) != 0});
  }
  return lite::rows_independent(steps, program->value_metas, program->input_values, program->output_values, program->batch);
}

std::unique_ptr<Arena> Model::Impl::take_arena(CachedProgram& cached) const {
  {
    std::lock_guard<std::mutex> lock(cached.mutex);
    if (!cached.free_arenas.empty()) {
      auto arena = std::move(cached.free_arenas.back());
      cached.free_arenas.pop_back();
      return arena;
    }
  }
  const Program& program = *cached.program;
  auto arena = std::make_unique<Arena>();
  for (const auto& [device, bytes] : program.plan.block_bytes) arena->blocks[device] = make_tensor({bytes}, kUInt8, Device(device));
  for (const auto& step : program.steps) {
    TensorList outputs;
    for (size_t j = 0; j < step.planned.size(); ++j) {
      const graph::PlannedBuffer* buffer = step.planned[j];
      outputs.push_back(buffer ? graph::planned_tensor(arena->blocks.at(buffer->device), *buffer, step.out_metas[j]) : Tensor());
    }
    arena->planned_outputs.push_back(std::move(outputs));
  }
  if (program.blocked) arena->blocked = program.blocked->make_arena();
  return arena;
}

void Model::Impl::give_back(CachedProgram& cached, std::unique_ptr<Arena> arena) {
  std::lock_guard<std::mutex> lock(cached.mutex);
  cached.free_arenas.push_back(std::move(arena));
}

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

std::shared_ptr<const Model> Model::load(const std::string& dir, const LoadOptions& options) {
  if (options.memory_limit_bytes < 0) fail("oneflow_lite", "memory_limit must be >= 0, got ", options.memory_limit_bytes);
  if (options.program_cache_entries < 1) fail("oneflow_lite", "program_cache_capacity must be >= 1, got ", options.program_cache_entries);
  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  impl->memory_limit = options.memory_limit_bytes > 0 ? options.memory_limit_bytes : physical_memory_bytes();
  impl->blocked_layouts = options.blocked_layouts_enabled;
  impl->programs = std::make_unique<LruCache<std::pair<int64_t, int>, CachedProgram>>(static_cast<size_t>(options.program_cache_entries));
  impl->exported = read_exported(dir);
  try {
    impl->inputs = specs_of(impl->exported.inputs());
    impl->outputs = specs_of(impl->exported.outputs());
  } catch (const std::exception& e) {
    impl->invalid("model.pb: input/output specs: ", e.what());
  }
  for (const auto* specs : {&impl->inputs, &impl->outputs}) {
    for (const TensorSpec& spec : *specs) {
      for (size_t d = 0; d < spec.shape.size(); ++d) {
        if (spec.shape[d] == -1 && !(d == 0 && impl->exported.dynamic_batch())) {
          impl->invalid("model.pb: '", spec.name, "' has shape ", shape_str(spec.shape), ": -1 is only dim 0 of a dynamic-batch model");
        }
      }
    }
  }
  std::map<int64_t, Device> input_devices;
  for (const auto& node : impl->exported.job().nodes()) {
    if (node.op() != kInputOp || node.outputs_size() != 1) continue;
    try {
      input_devices[io_index(node, impl->inputs.size())] = Device(node.outputs(0).device());
    } catch (const std::exception& e) {
      impl->invalid("model.pb: node '", node.name(), "' (input): ", e.what());
    }
  }
  for (const auto& [index, device] : input_devices) impl->input_devices.push_back(device);
  if (impl->input_devices.size() != impl->inputs.size()) impl->invalid("the Job's input nodes do not match its ", impl->inputs.size(), " inputs");
  const std::string weights_path = (std::filesystem::path(dir) / "weights.safetensors").string();
  if (!std::filesystem::exists(weights_path)) impl->invalid("missing weights.safetensors");
  StateDict weights;
  try {
    weights = flow::load(weights_path);
  } catch (const std::exception& e) {
    impl->invalid("weights.safetensors: ", e.what());
  }
  for (const auto& node : impl->exported.job().nodes()) {
    if (node.op() != kConstantOp) continue;
    if (!weights.contains(node.name())) impl->invalid("missing weight '", node.name(), "' in weights.safetensors");
    if (node.outputs_size() != 1) impl->invalid("model.pb: node '", node.name(), "' (constant): must have one output");
    TensorMeta expected;
    try {
      expected = graph::meta_of(node.outputs(0));
    } catch (const std::exception& e) {
      impl->invalid("model.pb: node '", node.name(), "' (constant): ", e.what());
    }
    const Tensor& weight = weights.at(node.name());
    if (!(weight.shape() == expected.shape) || weight.dtype() != expected.dtype) {
      impl->invalid("weight '", node.name(), "' is ", shape_str(weight.shape().vec()), " ", dtype_name(weight.dtype()), " but the model expects ",
                    shape_str(expected.shape.vec()), " ", dtype_name(expected.dtype));
    }
    impl->weights[node.name()] = weight.device() == expected.device ? weight : weight.to(expected.device);
  }
  // Checks every op, kernel and meta now, and plans the exported batch size once.
  impl->program_for(impl->exported.batch_size());
  impl->batch_buckets = options.batch_buckets_enabled && impl->exported.dynamic_batch() && impl->rows_independent();
  auto model = std::shared_ptr<const Model>(new Model(std::move(impl)));
  model->check_by_running();
  return model;
}

void Model::check_by_running() const {
  // A trial run on zeros at the exported batch size: a kernel that refuses its node's attributes
  // (a oneDNN primitive that cannot be created, say) is then reported at load, not at the first
  // request.
  std::vector<Shape> shapes;
  int64_t input_bytes = 0;
  for (const TensorSpec& spec : inputs()) {
    std::vector<int64_t> dims = spec.shape;
    if (!dims.empty() && dims[0] == -1) dims[0] = exported_batch();
    shapes.emplace_back(dims);
    input_bytes = add_bytes(input_bytes, shapes.back().nbytes(itemsize(spec.dtype), "oneflow_lite"));
  }
  impl_->check_memory(add_bytes(input_bytes, run_bytes(exported_batch())), "the trial run at load (batch " + std::to_string(exported_batch()) + ")");
  TensorList zeros;
  for (size_t i = 0; i < inputs().size(); ++i) {
    // Zero bytes, not flow::zeros: storage-only dtypes (uint16, ...) have no fill kernel.
    Tensor zero = make_tensor(shapes[i], inputs()[i].dtype, kCPU);
    std::memset(zero.data_ptr(), 0, static_cast<size_t>(zero.nbytes()));
    zeros.push_back(zero.to(impl_->input_devices.at(i)));
  }
  try {
    run(zeros);
  } catch (const std::exception& e) {
    impl_->invalid("a trial run on zeros fails: ", e.what());
  }
}

const std::string& Model::name() const { return impl_->exported.name(); }
const std::vector<TensorSpec>& Model::inputs() const { return impl_->inputs; }
const std::vector<TensorSpec>& Model::outputs() const { return impl_->outputs; }
bool Model::dynamic_batch() const { return impl_->exported.dynamic_batch(); }
int64_t Model::exported_batch() const { return impl_->exported.batch_size(); }
int64_t Model::program_batch(int64_t batch) const { return impl_->program_for(batch)->program->batch; }
int64_t Model::planned_bytes(int64_t batch) const { return impl_->program_for(batch)->program->planned_bytes; }
int64_t Model::run_bytes(int64_t batch) const { return impl_->program_for(batch)->program->run_bytes; }
int64_t Model::blocked_steps(int64_t batch) const {
  const auto program = impl_->program_for(batch)->program;
  return program->blocked ? program->blocked->blocked_steps() : 0;
}
bool Model::batch_buckets() const { return impl_->batch_buckets; }
int64_t Model::cached_programs() const { return static_cast<int64_t>(impl_->programs->size()); }

TensorList Model::run(const TensorList& given) const {
  const auto& specs = impl_->inputs;
  if (given.size() != specs.size()) fail("oneflow_lite", "model '", name(), "' takes ", specs.size(), " inputs, got ", given.size());
  int64_t batch = exported_batch();
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& spec = specs[i];
    const Tensor& t = given[i];
    if (!t.defined()) fail("oneflow_lite", "model '", name(), "': input '", spec.name, "' is undefined");
    if (t.dtype() != spec.dtype) {
      fail("oneflow_lite", "model '", name(), "': input '", spec.name, "' must be ", dtype_name(spec.dtype), ", got ", dtype_name(t.dtype()));
    }
    if (t.device() != impl_->input_devices.at(i)) {
      fail("oneflow_lite", "model '", name(), "': input '", spec.name, "' must be on ", impl_->input_devices[i].str(), ", got ", t.device().str());
    }
    bool matches = t.dim() == static_cast<int64_t>(spec.shape.size());
    for (int64_t d = 0; matches && d < t.dim(); ++d) matches = spec.shape[d] == -1 ? t.size(d) > 0 : spec.shape[d] == t.size(d);
    if (matches && dynamic_batch()) {
      if (i == 0) batch = t.size(0);
      matches = t.size(0) == batch;
    }
    if (!matches) {
      fail("oneflow_lite", "model '", name(), "': input '", spec.name, "' has shape ", shape_str(t.shape().vec()), ", expected ",
           shape_str(spec.shape), dynamic_batch() ? " with one batch size for every input" : "");
    }
  }
  const std::shared_ptr<CachedProgram> cached = impl_->program_for(batch);
  const int64_t rows = cached->program->batch;
  if (rows == batch) return impl_->run_program(*cached, given);
  TensorList padded;
  for (const Tensor& input : given) padded.push_back(pad_rows(input, rows));
  TensorList results = impl_->run_program(*cached, padded);
  for (Tensor& result : results) result = result.narrow(0, 0, batch);
  return results;
}

TensorList Model::Impl::run_program(CachedProgram& cached, const TensorList& given) const {
  const Program& program = *cached.program;
  std::unique_ptr<Arena> arena = take_arena(cached);
  struct GiveBack {
    CachedProgram& cached;
    std::unique_ptr<Arena>& arena;
    ~GiveBack() { Impl::give_back(cached, std::move(arena)); }
  } give_back{cached, arena};

  TensorList values(program.num_values);
  for (const auto& [id, weight] : program.constants) values[id] = weight;
  for (size_t i = 0; i < given.size(); ++i) values[program.input_values[i]] = given[i].is_contiguous() ? given[i] : given[i].contiguous();
  const bool profiling = profiler::is_recording();
  for (size_t s = 0; s < program.steps.size(); ++s) {
    const Program::Step& step = program.steps[s];
    const profiler::Clock::time_point start = profiling ? profiler::Clock::now() : profiler::Clock::time_point();
    if (program.blocked && program.blocked->runs(s)) {
      try {
        program.blocked->run(s, *arena->blocked, values, step.planned.empty() ? Tensor() : arena->planned_outputs[s][0]);
      } catch (const Error&) {
        throw;
      } catch (const std::exception& e) {
        fail("oneflow_lite", "model '", exported.name(), "': node '", step.node, "' (", step.op->name, ", blocked layout): ", e.what());
      }
      if (profiling) record_step(program, step, true, start);
      continue;
    }
    TensorList inputs;
    inputs.reserve(step.inputs.size());
    for (int id : step.inputs) inputs.push_back(values[id]);
    TensorList outputs;
    if (!step.planned.empty()) {
      const TensorList& planned = arena->planned_outputs[s];
      for (size_t j = 0; j < planned.size(); ++j) {
        outputs.push_back(planned[j].defined() ? planned[j] : make_tensor(step.out_metas[j].shape, step.out_metas[j].dtype, step.out_metas[j].device));
      }
    }
    TensorList results;
    try {
      results = execute_op(*step.op, inputs, step.attrs, step.out_metas, std::move(outputs));
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      fail("oneflow_lite", "model '", exported.name(), "': node '", step.node, "' (", step.op->name, "): ", e.what());
    }
    for (size_t j = 0; j < results.size(); ++j) values[step.outputs[j]] = std::move(results[j]);
    if (profiling) record_step(program, step, false, start);
  }
  TensorList results;
  for (size_t i = 0; i < program.output_values.size(); ++i) {
    const Tensor& value = values[program.output_values[i]];
    results.push_back(program.copy_output[i] ? value.clone() : value);
  }
  return results;
}

}  // namespace flow::lite
