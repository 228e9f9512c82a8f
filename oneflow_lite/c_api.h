/* The C API of oneflow_lite, for embedding an exported flow model in C or other languages.
 * Every function returning int returns 0 on success and -1 on failure; flow_lite_last_error()
 * then says why (per thread, valid until the next failing call on that thread). */
#ifndef FLOW_ONEFLOW_LITE_C_API_H_
#define FLOW_ONEFLOW_LITE_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct flow_lite_model flow_lite_model;

/* A dense, C-contiguous CPU tensor. dtype is a flow dtype name: "float32", "float64", "int64",
 * "int32", "int8", "uint8", "bool", "float16", "bfloat16". */
typedef struct flow_lite_tensor {
  const char* dtype;
  int64_t ndim;
  const int64_t* shape;
  void* data;
  size_t nbytes;
} flow_lite_tensor;

const char* flow_lite_last_error(void);

int flow_lite_model_load(const char* dir, flow_lite_model** model);
void flow_lite_model_free(flow_lite_model* model);

/* Inputs and outputs: name, dtype and shape (shape[0] == -1 for a dynamic batch). The returned
 * pointers live as long as the model. */
size_t flow_lite_model_num_inputs(const flow_lite_model* model);
size_t flow_lite_model_num_outputs(const flow_lite_model* model);
int flow_lite_model_input(const flow_lite_model* model, size_t index, const char** name, const char** dtype, int64_t* ndim,
                          const int64_t** shape);
int flow_lite_model_output(const flow_lite_model* model, size_t index, const char** name, const char** dtype, int64_t* ndim,
                           const int64_t** shape);

/* Runs one inference. The input data is copied before the call returns. On success *outputs
 * holds num_outputs tensors owned by the caller: release them with flow_lite_outputs_free.
 * Thread-safe: one model may run on several threads at once. */
int flow_lite_model_run(const flow_lite_model* model, const flow_lite_tensor* inputs, size_t num_inputs, flow_lite_tensor** outputs,
                        size_t* num_outputs);
void flow_lite_outputs_free(flow_lite_tensor* outputs, size_t num_outputs);

#ifdef __cplusplus
}
#endif

#endif /* FLOW_ONEFLOW_LITE_C_API_H_ */
