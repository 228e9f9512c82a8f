#include "oneflow_lite/c_api.h"

#include <cstring>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "core/bool_bytes.h"
#include "oneflow_lite/model.h"

namespace {

thread_local std::string g_last_error;

int failed(const std::string& message) {
  g_last_error = message;
  return -1;
}

// The C view of a TensorSpec, with storage for its strings and shape.
struct CSpec {
  std::string name, dtype;
  std::vector<int64_t> shape;
};

int describe(const std::vector<CSpec>& specs, size_t index, const char** name, const char** dtype, int64_t* ndim,
                    const int64_t** shape) {
  if (index >= specs.size()) return failed("[oneflow_lite] index " + std::to_string(index) + " out of range");
  const CSpec& spec = specs[index];
  if (name) *name = spec.name.c_str();
  if (dtype) *dtype = spec.dtype.c_str();
  if (ndim) *ndim = static_cast<int64_t>(spec.shape.size());
  if (shape) *shape = spec.shape.data();
  return 0;
}

// The outputs of one run: the C tensors and the storage they point into. Kept by address until
// flow_lite_outputs_free, so the C side only ever sees plain structs.
struct OutputBatch {
  std::vector<flow_lite_tensor> tensors;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::string> dtypes;
  std::vector<std::vector<unsigned char>> data;
};

std::mutex g_outputs_mutex;
std::map<const flow_lite_tensor*, std::unique_ptr<OutputBatch>> g_outputs;

}  // namespace

struct flow_lite_model {
  std::shared_ptr<const flow::lite::Model> model;
  std::vector<CSpec> inputs, outputs;
};

extern "C" {

const char* flow_lite_last_error(void) { return g_last_error.c_str(); }

int flow_lite_model_load(const char* dir, flow_lite_model** model) {
  if (dir == nullptr || model == nullptr) return failed("[oneflow_lite] flow_lite_model_load: null argument");
  try {
    auto handle = std::make_unique<flow_lite_model>();
    handle->model = flow::lite::Model::load(dir);
    for (const auto& spec : handle->model->inputs()) handle->inputs.push_back({spec.name, flow::dtype_name(spec.dtype), spec.shape});
    for (const auto& spec : handle->model->outputs()) handle->outputs.push_back({spec.name, flow::dtype_name(spec.dtype), spec.shape});
    *model = handle.release();
    return 0;
  } catch (const std::exception& e) {
    return failed(e.what());
  }
}

void flow_lite_model_free(flow_lite_model* model) { delete model; }

size_t flow_lite_model_num_inputs(const flow_lite_model* model) { return model ? model->inputs.size() : 0; }
size_t flow_lite_model_num_outputs(const flow_lite_model* model) { return model ? model->outputs.size() : 0; }


int flow_lite_model_input(const flow_lite_model* model, size_t index, const char** name, const char** dtype, int64_t* ndim,
                          const int64_t** shape) {
  if (model == nullptr) return failed("[oneflow_lite] null model");
  return describe(model->inputs, index, name, dtype, ndim, shape);
}

int flow_lite_model_output(const flow_lite_model* model, size_t index, const char** name, const char** dtype, int64_t* ndim,
                           const int64_t** shape) {
  if (model == nullptr) return failed("[oneflow_lite] null model");
  return describe(model->outputs, index, name, dtype, ndim, shape);
}

int flow_lite_model_run(const flow_lite_model* model, const flow_lite_tensor* inputs, size_t num_inputs, flow_lite_tensor** outputs,
                        size_t* num_outputs) {
  if (model == nullptr || outputs == nullptr || num_outputs == nullptr || (num_inputs > 0 && inputs == nullptr)) {
    return failed("[oneflow_lite] flow_lite_model_run: null argument");
  }
  try {
    flow::TensorList given;
    for (size_t i = 0; i < num_inputs; ++i) {
      const flow_lite_tensor& in = inputs[i];
      if (in.dtype == nullptr || (in.ndim > 0 && in.shape == nullptr)) return failed("[oneflow_lite] input " + std::to_string(i) + ": null dtype or shape");
      if (in.ndim < 0) return failed("[oneflow_lite] input " + std::to_string(i) + ": negative ndim " + std::to_string(in.ndim));
      const flow::Shape shape(std::vector<int64_t>(in.shape, in.shape + in.ndim));
      const flow::DType dtype = flow::dtype_from_name(in.dtype);
      // The byte count is compared before anything is allocated: the shape is the caller's word only.
      const int64_t nbytes = shape.nbytes(flow::itemsize(dtype), "oneflow_lite");
      if (static_cast<uint64_t>(nbytes) != in.nbytes) {
        return failed("[oneflow_lite] input " + std::to_string(i) + ": " + std::to_string(in.nbytes) + " bytes for a tensor of shape " +
                      shape.str() + " " + in.dtype + ", which needs " + std::to_string(nbytes));
      }
      if (in.nbytes > 0 && in.data == nullptr) return failed("[oneflow_lite] input " + std::to_string(i) + ": null data");
      if (dtype == flow::kBool) {
        if (const std::optional<int> invalid = flow::find_non_boolean_byte({static_cast<const char*>(in.data), in.nbytes})) {
          return failed("[oneflow_lite] input " + std::to_string(i) + ": bool data holds the byte " + std::to_string(*invalid));
        }
      }
      flow::Tensor t = flow::make_tensor(shape, dtype, flow::Device("cpu"));
      if (in.nbytes > 0) std::memcpy(t.data_ptr(), in.data, in.nbytes);
      given.push_back(std::move(t));
    }
    const flow::TensorList results = model->model->run(given);
    auto batch = std::make_unique<OutputBatch>();
    for (const auto& result : results) {
      const flow::Tensor value = result.to(flow::Device("cpu")).contiguous();
      batch->shapes.push_back(value.shape().vec());
      batch->dtypes.push_back(flow::dtype_name(value.dtype()));
      auto& bytes = batch->data.emplace_back(static_cast<size_t>(value.nbytes()));
      if (!bytes.empty()) std::memcpy(bytes.data(), value.data_ptr(), bytes.size());
    }
    for (size_t i = 0; i < results.size(); ++i) {
      batch->tensors.push_back({batch->dtypes[i].c_str(), static_cast<int64_t>(batch->shapes[i].size()), batch->shapes[i].data(),
                                batch->data[i].data(), batch->data[i].size()});
    }
    flow_lite_tensor* out = batch->tensors.data();
    {
      std::lock_guard<std::mutex> lock(g_outputs_mutex);
      g_outputs[out] = std::move(batch);
    }
    *outputs = out;
    *num_outputs = results.size();
    return 0;
  } catch (const std::exception& e) {
    return failed(e.what());
  }
}

void flow_lite_outputs_free(flow_lite_tensor* outputs, size_t) {
  std::lock_guard<std::mutex> lock(g_outputs_mutex);
  g_outputs.erase(outputs);
}

}  // extern "C"
