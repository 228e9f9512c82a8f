#include "oneflow_lite/model.h"

#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "core/interpreter.h"
#include "core/lru_cache.h"
#include "core/profiler.h"
#include "core/serialization.h"
#include "core/thread_pool.h"
#include "job/blocked_layout.h"
#include "job/export.pb.h"
#include "job/job.h"
#include "job/plan.h"
#include "oneflow_lite/bfloat16_products.h"
#include "oneflow_lite/model_impl.h"

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

proto::ExportedModel read_exported(const std::string& dir) {
  const std::filesystem::path path = std::filesystem::path(dir) / "model.pb";
  std::ifstream file(path, std::ios::binary);
  if (!file) fail("oneflow_lite", dir, ": missing ", path.filename().string(), " (not an export directory?)");
  proto::ExportedModel exported;
  if (!exported.ParseFromIstream(&file)) fail("oneflow_lite", dir, ": ", path.filename().string(), " is corrupt (cannot parse)");
  if (exported.format_version() < 1 || exported.format_version() > graph::kExportFormatVersion) {
    fail("oneflow_lite", dir, ": export format version ", exported.format_version(), ", this build reads versions 1 to ", graph::kExportFormatVersion);
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

std::shared_ptr<const Program> Model::Impl::make_program(int64_t batch, bool plan_layouts) const {
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
      ints.set_values(slot.index(), batch * std::max<int64_t>(1, slot.multiple()));
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
  if (blocked_layouts && plan_layouts) {
    std::vector<LayoutStep> layout_steps;
    for (const Program::Step& step : program->steps) layout_steps.push_back({step.op, &step.attrs, &step.inputs, &step.outputs});
    try {
      program->blocked = BlockedLayouts::plan(layout_steps, program->value_metas, program->constants, program->output_values,
                                              graph::kCheckedInputBound, reordered_weights.get());
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

void Model::Impl::widen_bfloat16_products(Bfloat16Products choice) {
  const auto& nodes = exported.job().nodes();
  const bool has_bfloat16 = std::any_of(nodes.begin(), nodes.end(), [](const graph::proto::Node& node) {
    return std::any_of(node.outputs().begin(), node.outputs().end(), [](const auto& desc) { return desc.dtype() == dtype_name(kBFloat16); });
  });
  if (choice == Bfloat16Products::kKeep || !has_bfloat16) return;
  const Bfloat16Hardware hardware = cpu_bfloat16_hardware();
  auto widen = [&](const Bfloat16Product& product) {
    if (choice == Bfloat16Products::kFloat32) return true;
    return choice == Bfloat16Products::kAuto && !bfloat16_pays_off(product, hardware, blocked_layouts);
  };
  // On a copy: a Job the rewrite cannot read is left as it is, for make_program's checks to name
  // what is wrong with it.
  graph::proto::Job job = exported.job();
  std::map<std::string, Tensor> widened_weights = weights;
  std::map<std::string, int64_t> widened;
  try {
    widened = lite::widen_bfloat16_products(job, widened_weights, widen);
  } catch (const std::exception& e) {
    VLOG(1) << "[oneflow_lite] " << dir << ": bfloat16 products left as exported: " << e.what();
    return;
  }
  exported.mutable_job()->Swap(&job);
  weights.swap(widened_weights);
  std::ostringstream ops;
  for (const auto& [op, count] : widened) {
    ops << (float32_products ? ", " : "") << count << " " << op;
    float32_products += count;
  }
  if (float32_products == 0) return;
  VLOG(1) << "[oneflow_lite] " << dir << ": " << ops.str() << " of the bfloat16 export run in float32 ("
          << (choice == Bfloat16Products::kFloat32 ? "asked for"
                                                   : std::string("this CPU has ") + (hardware.dot_products ? "AVX512-BF16" : "no AVX512-BF16") +
                                                         (hardware.matrix_tiles ? " and AMX" : " and no AMX"))
          << "; FLOW_LITE_BFLOAT16=keep keeps bfloat16)";
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
  impl->widen_bfloat16_products(bfloat16_choice(options.bfloat16_products_choice, std::getenv("FLOW_LITE_BFLOAT16")));
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
    Tensor zero = make_tensor(shapes[i], inputs()[i].dtype, kCPU);
    zero_bytes(zero);
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
int64_t Model::activations_in_primitives(int64_t batch) const {
  const auto program = impl_->program_for(batch)->program;
  return program->blocked ? program->blocked->activations_in_primitives() : 0;
}
int64_t Model::float32_products() const { return impl_->float32_products; }
bool Model::batch_buckets() const { return impl_->batch_buckets; }
int64_t Model::cached_programs() const { return static_cast<int64_t>(impl_->programs->size()); }
int64_t Model::reordered_weight_bytes() const { return impl_->reordered_weights->bytes(); }

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
  return impl_->run_batch(given, batch);
}

}  // namespace flow::lite
