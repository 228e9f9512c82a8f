// CUDA convolution through cuDNN's legacy API: conv2d (with its optional bias added by
// cudnnAddTensor), conv2d_grad_input (backward data) and conv2d_grad_weight (backward filter),
// float32 and float64 over dense NCHW / OIHW buffers. Descriptors are made per call; the
// algorithm and its workspace size are chosen once per (device, dtype, shapes, attributes) by
// cuDNN's heuristics and cached. float32 runs with FMA math only: TF32 tensor cores would lose
// the precision the CPU kernels keep.
#include <array>
#include <map>
#include <mutex>
#include <tuple>

#include "core/kernels/cuda/cudnn_util.h"

namespace flow::cuda {
namespace {

using namespace cudnn;
using Pair = std::vector<int64_t>;

enum class Pass : int { kForward, kBackwardData, kBackwardFilter };

const char* op_name(Pass pass) {
  switch (pass) {
    case Pass::kForward: return "conv2d";
    case Pass::kBackwardData: return "conv2d_grad_input";
    case Pass::kBackwardFilter: return "conv2d_grad_weight";
  }
  return "conv2d";
}

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
                                          CUDNN_CROSS_CORRELATION, data_type(dtype, op)),
          op, "cudnnSetConvolution2dDescriptor");
    check(cudnnSetConvolutionGroupCount(get(), to_int(attrs.get<int64_t>("groups"), op, window)), op, "cudnnSetConvolutionGroupCount");
    check(cudnnSetConvolutionMathType(get(), CUDNN_FMA_MATH), op, "cudnnSetConvolutionMathType");
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

struct Algorithm {
  int algo;  // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t, by pass
  size_t workspace_bytes;
};

// The first algorithm cuDNN's heuristics rank as usable, from `perfs` filled by a *_v7 query.
template <typename Perf>
int first_usable(const Perf* perfs, int count, const char* op) {
  for (int i = 0; i < count; ++i) {
    if (perfs[i].status == CUDNN_STATUS_SUCCESS) return static_cast<int>(perfs[i].algo);
  }
  fail(op, "cuDNN found no convolution algorithm for this configuration");
}

Algorithm choose(cudnnHandle_t handle, const Convolution& c, Pass pass, const char* op) {
  constexpr int kMaxAlgorithms = 16;
  int count = 0;
  Algorithm chosen{};
  switch (pass) {
    case Pass::kForward: {
      cudnnConvolutionFwdAlgoPerf_t perfs[kMaxAlgorithms];
      check(cudnnGetConvolutionForwardAlgorithm_v7(handle, c.x.get(), c.w.get(), c.conv.get(), c.y.get(), kMaxAlgorithms, &count, perfs),
            op, "cudnnGetConvolutionForwardAlgorithm_v7");
      chosen.algo = first_usable(perfs, count, op);
      check(cudnnGetConvolutionForwardWorkspaceSize(handle, c.x.get(), c.w.get(), c.conv.get(), c.y.get(),
                                                    static_cast<cudnnConvolutionFwdAlgo_t>(chosen.algo), &chosen.workspace_bytes),
            op, "cudnnGetConvolutionForwardWorkspaceSize");
      break;
    }
    case Pass::kBackwardData: {
      cudnnConvolutionBwdDataAlgoPerf_t perfs[kMaxAlgorithms];
      check(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, c.w.get(), c.y.get(), c.conv.get(), c.x.get(), kMaxAlgorithms, &count,
                                                        perfs),
            op, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
      chosen.algo = first_usable(perfs, count, op);
      check(cudnnGetConvolutionBackwardDataWorkspaceSize(handle, c.w.get(), c.y.get(), c.conv.get(), c.x.get(),
                                                         static_cast<cudnnConvolutionBwdDataAlgo_t>(chosen.algo), &chosen.workspace_bytes),
            op, "cudnnGetConvolutionBackwardDataWorkspaceSize");
      break;
    }
    case Pass::kBackwardFilter: {
      cudnnConvolutionBwdFilterAlgoPerf_t perfs[kMaxAlgorithms];
      check(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, c.x.get(), c.y.get(), c.conv.get(), c.w.get(), kMaxAlgorithms, &count,
                                                          perfs),
            op, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
      chosen.algo = first_usable(perfs, count, op);
      check(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, c.x.get(), c.y.get(), c.conv.get(), c.w.get(),
                                                           static_cast<cudnnConvolutionBwdFilterAlgo_t>(chosen.algo),
                                                           &chosen.workspace_bytes),
            op, "cudnnGetConvolutionBackwardFilterWorkspaceSize");
      break;
    }
  }
  return chosen;
}

// The cached algorithm of this configuration, chosen on first use.
Algorithm algorithm(cudnnHandle_t handle, const Convolution& c, Pass pass, const Tensor& like, const Shape& x, const Shape& w,
                    const Attrs& attrs) {
  const AlgorithmKey key{like.device().index,
                         like.dtype(),
                         pass,
                         {x[0], x[1], x[2], x[3]},
                         {w[0], w[1], w[2], w[3]},
                         attrs.get<Pair>("stride"),
                         attrs.get<Pair>("padding"),
                         attrs.get<Pair>("dilation"),
                         attrs.get<int64_t>("groups")};
  static std::mutex mutex;
  static std::map<AlgorithmKey, Algorithm> cache;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  const Algorithm chosen = choose(handle, c, pass, op_name(pass));
  std::lock_guard<std::mutex> lock(mutex);
  cache.emplace(key, chosen);
  return chosen;
}

// Scratch memory for cuDNN from flow's caching allocator. Freed when the returned tensor goes,
// which is safe before the convolution finishes: later work on the default stream runs after it.
Tensor workspace(const Algorithm& algorithm, const Tensor& like) {
  return make_tensor({static_cast<int64_t>(algorithm.workspace_bytes)}, kUInt8, like.device());
}

void forward_kernel(KernelContext& ctx) {
  const char* op = "conv2d";
  const Tensor &x = ctx.inputs[0], &w = ctx.inputs[1];
  Tensor& y = ctx.outputs[0];
  if (y.numel() == 0) return;  // an empty batch; cuDNN refuses zero dims
  cudnnHandle_t h = handle(y, op);
  const Convolution c(x.dtype(), x.shape(), w.shape(), y.shape(), ctx.attrs, op);
  const Algorithm chosen = algorithm(h, c, Pass::kForward, y, x.shape(), w.shape(), ctx.attrs);
  const Tensor scratch = workspace(chosen, y);
  check(cudnnConvolutionForward(h, one(y.dtype()), c.x.get(), x.data_ptr(), c.w.get(), w.data_ptr(), c.conv.get(),
                                static_cast<cudnnConvolutionFwdAlgo_t>(chosen.algo), scratch.data_ptr(), chosen.workspace_bytes,
                                zero(y.dtype()), c.y.get(), y.data_ptr()),
        op, "cudnnConvolutionForward");
  if (ctx.inputs.size() == 3) {
    const TensorDescriptor bias(y.dtype(), 1, y.size(1), 1, 1, op);
    check(cudnnAddTensor(h, one(y.dtype()), bias.get(), ctx.inputs[2].data_ptr(), one(y.dtype()), c.y.get(), y.data_ptr()), op,
          "cudnnAddTensor");
  }
}

// inputs: grad (of the output), weight; attr input_shape.
void backward_data_kernel(KernelContext& ctx) {
  const char* op = "conv2d_grad_input";
  const Tensor &grad = ctx.inputs[0], &w = ctx.inputs[1];
  Tensor& grad_input = ctx.outputs[0];
  if (grad_input.numel() == 0) return;
  cudnnHandle_t h = handle(grad_input, op);
  const Convolution c(grad.dtype(), grad_input.shape(), w.shape(), grad.shape(), ctx.attrs, op);
  const Algorithm chosen = algorithm(h, c, Pass::kBackwardData, grad_input, grad_input.shape(), w.shape(), ctx.attrs);
  const Tensor scratch = workspace(chosen, grad_input);
  check(cudnnConvolutionBackwardData(h, one(grad.dtype()), c.w.get(), w.data_ptr(), c.y.get(), grad.data_ptr(), c.conv.get(),
                                     static_cast<cudnnConvolutionBwdDataAlgo_t>(chosen.algo), scratch.data_ptr(), chosen.workspace_bytes,
                                     zero(grad.dtype()), c.x.get(), grad_input.data_ptr()),
        op, "cudnnConvolutionBackwardData");
}

// inputs: grad (of the output), input; attr weight_shape.
void backward_filter_kernel(KernelContext& ctx) {
  const char* op = "conv2d_grad_weight";
  const Tensor &grad = ctx.inputs[0], &x = ctx.inputs[1];
  Tensor& grad_weight = ctx.outputs[0];
  if (x.numel() == 0) {  // an empty batch contributes nothing
    if (cudaSetDevice(grad_weight.device().index) != cudaSuccess) fail(op, "cannot select ", grad_weight.device());
    check_launch(fill(scalar_type(grad_weight.dtype(), op), grad_weight.data_ptr(), grad_weight.numel(), 0.0), op);
    return;
  }
  cudnnHandle_t h = handle(grad_weight, op);
  const Convolution c(grad.dtype(), x.shape(), grad_weight.shape(), grad.shape(), ctx.attrs, op);
  const Algorithm chosen = algorithm(h, c, Pass::kBackwardFilter, grad_weight, x.shape(), grad_weight.shape(), ctx.attrs);
  const Tensor scratch = workspace(chosen, grad_weight);
  check(cudnnConvolutionBackwardFilter(h, one(grad.dtype()), c.x.get(), x.data_ptr(), c.y.get(), grad.data_ptr(), c.conv.get(),
                                       static_cast<cudnnConvolutionBwdFilterAlgo_t>(chosen.algo), scratch.data_ptr(),
                                       chosen.workspace_bytes, zero(grad.dtype()), c.w.get(), grad_weight.data_ptr()),
        op, "cudnnConvolutionBackwardFilter");
}

const std::vector<DType> kFloating = {kFloat32, kFloat64};

FLOW_REGISTER_KERNEL("conv2d", DeviceType::kCUDA, kFloating, forward_kernel);
FLOW_REGISTER_KERNEL("conv2d_grad_input", DeviceType::kCUDA, kFloating, backward_data_kernel);
FLOW_REGISTER_KERNEL("conv2d_grad_weight", DeviceType::kCUDA, kFloating, backward_filter_kernel);

}  // namespace
}  // namespace flow::cuda
