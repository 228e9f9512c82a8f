// CUDA convolution through cuDNN's legacy API: conv2d (with its optional bias added by
// cudnnAddTensor), conv2d_grad_input (backward data) and conv2d_grad_weight (backward filter),
// float32 and float64 (and float16/bfloat16, accumulated in float on the tensor cores) over dense
// NCHW / OIHW buffers. Descriptors are made per call; cuDNN's
// heuristic ranking of algorithms (with their workspace sizes) is cached per (device, dtype,
// shapes, attributes), and a run falls back down the ranking past algorithms that turn out not
// to support the configuration. float32 runs with FMA math only: TF32 tensor cores would lose
// the precision the CPU kernels keep.
#include <array>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/kernels/cuda/cudnn_util.h"

namespace flow::cuda {
namespace {

using namespace cudnn;
using Pair = std::vector<int64_t>;

enum class Pass : int { kForward, kBackwardData, kBackwardFilter };

class FilterDescriptor : public Owned<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor> {
 public:
  FilterDescriptor(DType dtype, const Shape& oihw, const char* op) : Owned(op) {
    check(cudnnSetFilter4dDescriptor(get(), data_type(dtype, op), CUDNN_TENSOR_NCHW, to_int(oihw[0], op, oihw), to_int(oihw[1], op, oihw),
                                     to_int(oihw[2], op, oihw), to_int(oihw[3], op, oihw)),
          op, "cudnnSetFilter4dDescriptor");
  }
};

class ConvolutionDescriptor
    : public Owned<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor> {
 public:
  ConvolutionDescriptor(DType dtype, const Attrs& attrs, const char* op) : Owned(op) {
    const Pair &s = attrs.get<Pair>("stride"), &p = attrs.get<Pair>("padding"), &d = attrs.get<Pair>("dilation");
    const Shape window{s[0], s[1], p[0], p[1], d[0], d[1]};
    check(cudnnSetConvolution2dDescriptor(get(), to_int(p[0], op, window), to_int(p[1], op, window), to_int(s[0], op, window),
                                          to_int(s[1], op, window), to_int(d[0], op, window), to_int(d[1], op, window),
                                          CUDNN_CROSS_CORRELATION, compute_type(dtype, op)),
          op, "cudnnSetConvolution2dDescriptor");
    check(cudnnSetConvolutionGroupCount(get(), to_int(attrs.get<int64_t>("groups"), op, window)), op, "cudnnSetConvolutionGroupCount");
    const bool reduced = dtype == kFloat16 || dtype == kBFloat16;  // what tensor cores are for
    check(cudnnSetConvolutionMathType(get(), reduced ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH), op, "cudnnSetConvolutionMathType");
  }
};

// One convolution: input x (N,C,H,W), weight w (O,C/groups,kH,kW), output y (N,O,oH,oW).
struct Convolution {
  TensorDescriptor x, y;
  FilterDescriptor w;
  ConvolutionDescriptor conv;
  Convolution(DType dtype, const Shape& x_shape, const Shape& w_shape, const Shape& y_shape, const Attrs& attrs, const char* op)
      : x(dtype, x_shape, op), y(dtype, y_shape, op), w(dtype, w_shape, op), conv(dtype, attrs, op) {}
};

struct AlgorithmKey {
  int device;
  DType dtype;
  Pass pass;
  std::array<int64_t, 4> x, w;
  Pair stride, padding, dilation;
  int64_t groups;
  auto tie() const { return std::tie(device, dtype, pass, x, w, stride, padding, dilation, groups); }
  bool operator<(const AlgorithmKey& other) const { return tie() < other.tie(); }
};

AlgorithmKey make_key(Pass pass, const Tensor& like, const Shape& x, const Shape& w, const Attrs& attrs) {
  return {like.device().index,
          like.dtype(),
          pass,
          {x[0], x[1], x[2], x[3]},
          {w[0], w[1], w[2], w[3]},
          attrs.get<Pair>("stride"),
          attrs.get<Pair>("padding"),
          attrs.get<Pair>("dilation"),
          attrs.get<int64_t>("groups")};
}

struct Candidate {
  int algo;  // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t, by pass
  size_t workspace_bytes;
};

// The algorithms cuDNN's heuristics rank usable, best first, with their workspace sizes.
// query(count, &returned, perfs) is a *_v7 heuristic; workspace_size(algo, &bytes) its size query.
template <typename Perf, typename Query, typename WorkspaceSize>
std::vector<Candidate> rank(Query&& query, WorkspaceSize&& workspace_size, const char* op, const char* query_name) {
  constexpr int kMaxAlgorithms = 16;
  Perf perfs[kMaxAlgorithms];
  int count = 0;
  check(query(kMaxAlgorithms, &count, perfs), op, query_name);
  std::vector<Candidate> candidates;
  for (int i = 0; i < count; ++i) {
    size_t bytes = 0;
    if (perfs[i].status == CUDNN_STATUS_SUCCESS && workspace_size(perfs[i].algo, &bytes) == CUDNN_STATUS_SUCCESS) {
      candidates.push_back({static_cast<int>(perfs[i].algo), bytes});
    }
  }
  if (candidates.empty()) fail(op, "cuDNN has no convolution algorithm for this configuration");
  return candidates;
}

std::vector<Candidate> rank(cudnnHandle_t h, const Convolution& c, Pass pass, const char* op) {
  switch (pass) {
    case Pass::kForward:
      return rank<cudnnConvolutionFwdAlgoPerf_t>(
          [&](int n, int* count, cudnnConvolutionFwdAlgoPerf_t* perfs) {
            return cudnnGetConvolutionForwardAlgorithm_v7(h, c.x.get(), c.w.get(), c.conv.get(), c.y.get(), n, count, perfs);
          },
          [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
            return cudnnGetConvolutionForwardWorkspaceSize(h, c.x.get(), c.w.get(), c.conv.get(), c.y.get(), algo, bytes);
          },
          op, "cudnnGetConvolutionForwardAlgorithm_v7");
    case Pass::kBackwardData:
      return rank<cudnnConvolutionBwdDataAlgoPerf_t>(
          [&](int n, int* count, cudnnConvolutionBwdDataAlgoPerf_t* perfs) {
            return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c.w.get(), c.y.get(), c.conv.get(), c.x.get(), n, count, perfs);
          },
          [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
            return cudnnGetConvolutionBackwardDataWorkspaceSize(h, c.w.get(), c.y.get(), c.conv.get(), c.x.get(), algo, bytes);
          },
          op, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
    case Pass::kBackwardFilter:
      return rank<cudnnConvolutionBwdFilterAlgoPerf_t>(
          [&](int n, int* count, cudnnConvolutionBwdFilterAlgoPerf_t* perfs) {
            return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, c.x.get(), c.y.get(), c.conv.get(), c.w.get(), n, count, perfs);
          },
          [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
            return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, c.x.get(), c.y.get(), c.conv.get(), c.w.get(), algo, bytes);
          },
          op, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
  }
  fail(op, "unknown convolution pass");
}

// Ranked candidates per configuration, ranked on first use. A candidate that turns out not to
// support its configuration when run is dropped, so later calls start at one that works.
class AlgorithmCache {
 public:
  std::vector<Candidate> candidates(const AlgorithmKey& key, cudnnHandle_t h, const Convolution& c, const char* op) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    }
    std::vector<Candidate> ranked = rank(h, c, key.pass, op);
    std::lock_guard<std::mutex> lock(mutex_);
    return cache_.emplace(key, std::move(ranked)).first->second;
  }
  void drop(const AlgorithmKey& key, int algo) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(cache_[key], [algo](const Candidate& candidate) { return candidate.algo == algo; });
  }

 private:
  std::mutex mutex_;
  std::map<AlgorithmKey, std::vector<Candidate>> cache_;
};

AlgorithmCache& algorithm_cache() {
  static AlgorithmCache cache;
  return cache;
}

bool not_supported(cudnnStatus_t status) { return status / 1000 * 1000 == CUDNN_STATUS_NOT_SUPPORTED; }

// Runs execute(algo, workspace, workspace_bytes) with the best candidate that supports the
// configuration. The workspace comes from flow's caching allocator; freeing it when this returns
// is safe before cuDNN finishes, as later work on the default stream runs after it.
template <typename Execute>
void run_convolution(const AlgorithmKey& key, cudnnHandle_t h, const Convolution& c, const Tensor& like, const char* op, const char* call,
                     Execute&& execute) {
  for (const Candidate& candidate : algorithm_cache().candidates(key, h, c, op)) {
    const Tensor workspace = make_tensor({static_cast<int64_t>(candidate.workspace_bytes)}, kUInt8, like.device());
    const cudnnStatus_t status = execute(candidate.algo, workspace.data_ptr(), candidate.workspace_bytes);
    if (!not_supported(status)) {
      check(status, op, call);
      return;
    }
    algorithm_cache().drop(key, candidate.algo);
  }
  fail(op, "cuDNN ", call, " failed: no ranked algorithm supports this configuration");
}

void forward_kernel(KernelContext& ctx) {
  const char* op = "conv2d";
  const Tensor &x = ctx.inputs[0], &w = ctx.inputs[1];
  Tensor& y = ctx.outputs[0];
  if (y.numel() == 0) return;  // an empty batch; cuDNN refuses zero dims
  const Session s = session(y, op);
  const Convolution c(x.dtype(), x.shape(), w.shape(), y.shape(), ctx.attrs, op);
  run_convolution(make_key(Pass::kForward, y, x.shape(), w.shape(), ctx.attrs), s.handle, c, y, op, "cudnnConvolutionForward",
                  [&](int algo, void* workspace, size_t bytes) {
                    return cudnnConvolutionForward(s.handle, one(y.dtype()), c.x.get(), x.data_ptr(), c.w.get(), w.data_ptr(), c.conv.get(),
                                                   static_cast<cudnnConvolutionFwdAlgo_t>(algo), workspace, bytes, zero(y.dtype()),
                                                   c.y.get(), y.data_ptr());
                  });
  if (ctx.inputs.size() == 3) {
    const TensorDescriptor bias(y.dtype(), 1, y.size(1), 1, 1, op);
    check(cudnnAddTensor(s.handle, one(y.dtype()), bias.get(), ctx.inputs[2].data_ptr(), one(y.dtype()), c.y.get(), y.data_ptr()), op,
          "cudnnAddTensor");
  }
}

// inputs: grad (of the output), weight; attr input_shape.
void backward_data_kernel(KernelContext& ctx) {
  const char* op = "conv2d_grad_input";
  const Tensor &grad = ctx.inputs[0], &w = ctx.inputs[1];
  Tensor& grad_input = ctx.outputs[0];
  if (grad_input.numel() == 0) return;
  const Session s = session(grad_input, op);
  const Convolution c(grad.dtype(), grad_input.shape(), w.shape(), grad.shape(), ctx.attrs, op);
  run_convolution(make_key(Pass::kBackwardData, grad_input, grad_input.shape(), w.shape(), ctx.attrs), s.handle, c, grad_input, op,
                  "cudnnConvolutionBackwardData", [&](int algo, void* workspace, size_t bytes) {
                    return cudnnConvolutionBackwardData(s.handle, one(grad.dtype()), c.w.get(), w.data_ptr(), c.y.get(), grad.data_ptr(),
                                                        c.conv.get(), static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), workspace, bytes,
                                                        zero(grad.dtype()), c.x.get(), grad_input.data_ptr());
                  });
}

// inputs: grad (of the output), input; attr weight_shape.
void backward_filter_kernel(KernelContext& ctx) {
  const char* op = "conv2d_grad_weight";
  const Tensor &grad = ctx.inputs[0], &x = ctx.inputs[1];
  Tensor& grad_weight = ctx.outputs[0];
  const Session s = session(grad_weight, op);
  if (x.numel() == 0) {  // an empty batch contributes nothing
    check_launch(fill(scalar_type(grad_weight.dtype(), op), grad_weight.data_ptr(), grad_weight.numel(), 0.0), op);
    return;
  }
  const Convolution c(grad.dtype(), x.shape(), grad_weight.shape(), grad.shape(), ctx.attrs, op);
  run_convolution(make_key(Pass::kBackwardFilter, grad_weight, x.shape(), grad_weight.shape(), ctx.attrs), s.handle, c, grad_weight, op,
                  "cudnnConvolutionBackwardFilter", [&](int algo, void* workspace, size_t bytes) {
                    return cudnnConvolutionBackwardFilter(s.handle, one(grad.dtype()), c.x.get(), x.data_ptr(), c.y.get(), grad.data_ptr(),
                                                          c.conv.get(), static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), workspace,
                                                          bytes, zero(grad.dtype()), c.w.get(), grad_weight.data_ptr());
                  });
}

const std::vector<DType> kFloating = {kFloat32, kFloat64, kFloat16, kBFloat16};

FLOW_REGISTER_KERNEL("conv2d", DeviceType::kCUDA, kFloating, forward_kernel);
FLOW_REGISTER_KERNEL("conv2d_grad_input", DeviceType::kCUDA, kFloating, backward_data_kernel);
FLOW_REGISTER_KERNEL("conv2d_grad_weight", DeviceType::kCUDA, kFloating, backward_filter_kernel);

}  // namespace
}  // namespace flow::cuda
