// oneflow_lite: the cache of planned programs, batch buckets, and the runs on them.
#include <set>
#include <string>

#include "core/interpreter.h"
#include "core/profiler.h"
#include "core/thread_pool.h"
#include "oneflow_lite/batch_buckets.h"
#include "oneflow_lite/model_impl.h"

namespace flow::lite {
namespace {

// `given` with zero rows appended up to `rows`, for a bucket's program.
Tensor pad_rows(const Tensor& given, int64_t rows) {
  std::vector<int64_t> dims = given.shape().vec();
  dims[0] = rows;
  Tensor padded = make_tensor(Shape(dims), given.dtype(), given.device());
  padded.narrow(0, 0, given.size(0)).copy_(given);
  Tensor tail = padded.narrow(0, given.size(0), rows - given.size(0));
  zero_bytes(tail);
  return padded;
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
  const std::shared_ptr<const Program> program = exported_batch >= 2 ? program_for(exported_batch)->program : make_program(2, false);
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

TensorList Model::Impl::run_batch(const TensorList& given, int64_t batch) const {
  const std::shared_ptr<CachedProgram> cached = program_for(batch);
  const int64_t rows = cached->program->batch;
  if (rows == batch) return run_program(*cached, given);
  TensorList padded;
  for (const Tensor& input : given) padded.push_back(pad_rows(input, rows));
  TensorList results = run_program(*cached, padded);
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
  // Inputs outside the bound the blocked steps' post-op activations rely on (a NaN, an infinity,
  // a huge value) run every step through its op's kernel, which keeps NaN where oneDNN would not.
  const bool blocked = program.blocked && program.blocked->accepts(given);
  for (size_t s = 0; s < program.steps.size(); ++s) {
    const Program::Step& step = program.steps[s];
    const profiler::Clock::time_point start = profiling ? profiler::Clock::now() : profiler::Clock::time_point();
    if (blocked && program.blocked->runs(s)) {
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
