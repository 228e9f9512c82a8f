// CPU kernels of the indexing ops. Index values are checked here (they are data); an index
// out of range raises flow::Error naming the op, the value and the dim's size.
#include <algorithm>
#include <cstring>

#include "core/kernels/cpu/convert.h"
#include "core/kernels/cpu/loop.h"
#include "core/op.h"
#include "core/ops/copy.h"

namespace flow::cpu {
namespace {

// (outer, size along dim, inner) of a contiguous shape.
struct DimSplit {
  int64_t outer = 1, size = 1, inner = 1;
};
DimSplit split_at(const Shape& shape, int64_t dim) {
  DimSplit s;
  if (shape.ndim() == 0) return s;
  for (int64_t d = 0; d < dim; ++d) s.outer *= shape[d];
  s.size = shape[dim];
  for (int64_t d = dim + 1; d < shape.ndim(); ++d) s.inner *= shape[d];
  return s;
}

template <typename Index>
int64_t checked_index(Index value, int64_t size, int64_t dim, const char* op) {
  const int64_t i = static_cast<int64_t>(value);
  if (i < -size || i >= size) fail(op, "index ", i, " is out of bounds for dimension ", dim, " with size ", size);
  return i < 0 ? i + size : i;
}

template <typename F>
void dispatch_index(DType dtype, F f) {
  if (dtype == kInt64) f.template operator()<int64_t>();
  else f.template operator()<int32_t>();
}

void cat_kernel(KernelContext& ctx) {
  const int64_t dim = ctx.attrs.get<int64_t>("dim");
  Tensor& out = ctx.outputs[0];
  const size_t item = itemsize(out.dtype());
  const DimSplit o = split_at(out.shape(), dim);
  char* dst = static_cast<char*>(out.data_ptr());
  int64_t offset = 0;
  for (const Tensor& t : ctx.inputs) {
    const DimSplit s = split_at(t.shape(), dim);
    const size_t run = static_cast<size_t>(s.size * s.inner) * item;
    const char* src = static_cast<const char*>(t.data_ptr());
    parallel_for(0, o.outer, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(s.size * s.inner, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t r = begin; r < end; ++r) {
                     std::memcpy(dst + (static_cast<size_t>(r * o.size * o.inner + offset * o.inner)) * item,
                                 src + static_cast<size_t>(r) * run, run);
                   }
                 });
    offset += s.size;
  }
}

void index_select_kernel(KernelContext& ctx) {
  const Tensor &input = ctx.inputs[0], &index = ctx.inputs[1];
  Tensor& out = ctx.outputs[0];
  const int64_t dim = ctx.attrs.get<int64_t>("dim");
  const DimSplit s = split_at(input.shape(), dim);
  const int64_t n = index.numel();
  const size_t row = static_cast<size_t>(s.inner) * itemsize(input.dtype());
  const char* src = static_cast<const char*>(input.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  dispatch_index(index.dtype(), [&]<typename I>() {
    const I* idx = static_cast<const I*>(index.data_ptr());
    std::vector<int64_t> rows(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) rows[static_cast<size_t>(j)] = checked_index(idx[j], s.size, dim, "index_select");
    parallel_for(0, s.outer * n, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(s.inner, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t k = begin; k < end; ++k) {
                     const int64_t o = k / n, j = k % n;
                     std::memcpy(dst + static_cast<size_t>(k) * row,
                                 src + static_cast<size_t>(o * s.size + rows[static_cast<size_t>(j)]) * row, row);
                   }
                 });
  });
}

// Walks every element of `index` (contiguous, rank r) with its position's offsets into `a`
// (input, for gather) and `b` (src or out), both contiguous with their own shapes. Each chunk finds
// its first position by division, then steps an odometer (no allocation per element).
template <typename F>
void for_each_index(const Tensor& index, const Shape& a_shape, const Shape& b_shape, F f) {
  const Shape& shape = index.shape();
  const Strides a_strides = contiguous_strides(a_shape), b_strides = contiguous_strides(b_shape);
  const int64_t n = index.numel();
  parallel_for(0, n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> position(shape.size());
    int64_t rest = begin, a_off = 0, b_off = 0;
    for (size_t d = shape.size(); d-- > 0;) {
      position[d] = rest % shape[d];
      rest /= shape[d];
      a_off += position[d] * a_strides[d];
      b_off += position[d] * b_strides[d];
    }
    for (int64_t k = begin; k < end; ++k) {
      f(k, a_off, b_off, position);
      for (size_t d = shape.size(); d-- > 0;) {
        a_off += a_strides[d];
        b_off += b_strides[d];
        if (++position[d] < shape[d]) break;
        a_off -= a_strides[d] * shape[d];
        b_off -= b_strides[d] * shape[d];
        position[d] = 0;
      }
    }
  });
}

void gather_kernel(KernelContext& ctx) {
  const Tensor &input = ctx.inputs[0], &index = ctx.inputs[1];
  const int64_t dim = ctx.attrs.get<int64_t>("dim");
  const int64_t size = input.dim() == 0 ? 1 : input.size(dim);
  const int64_t stride = input.dim() == 0 ? 0 : contiguous_strides(input.shape())[static_cast<size_t>(dim)];
  FLOW_DISPATCH_ALL(input.dtype(), "gather", [&]<typename T>() {
    const T* src = static_cast<const T*>(input.data_ptr());
    T* dst = static_cast<T*>(ctx.outputs[0].data_ptr());
    dispatch_index(index.dtype(), [&]<typename I>() {
      const I* idx = static_cast<const I*>(index.data_ptr());
      for_each_index(index, input.shape(), index.shape(), [&](int64_t k, int64_t a_off, int64_t, const std::vector<int64_t>& pos) {
        const int64_t i = checked_index(idx[k], size, dim, "gather");
        dst[k] = src[a_off + (i - (pos.empty() ? 0 : pos[static_cast<size_t>(dim)])) * stride];
      });
    });
  });
}

// Writes (or adds) src's elements into out at index along dim; all three are read through their
// strides (scatter_ takes a KV cache step's index expanded over heads and head_dim, and its keys
// as a permuted view, without copies). Sequential: several index entries may name one output
// element, so the order must be fixed. The index is walked in runs along its last dim; when that
// dim is not `dim`, out and src are unit-strided along it and the run's entries are all equal (an
// index expanded over it: stride 0), the run's targets are one contiguous stretch of out and its
// sources one of src, so it is copied (or added) as a block. Within a run the targets are distinct,
// so the block keeps the element-wise order's result.
void scatter_into(Tensor& out, const Tensor& index, const Tensor& src, int64_t dim, bool add, const char* op) {
  const int64_t positions = index.numel();
  if (positions == 0) return;
  const int64_t size = out.dim() == 0 ? 1 : out.size(dim);
  const Shape& shape = index.shape();
  const Strides &out_strides = out.strides(), &index_strides = index.strides(), &src_strides = src.strides();
  const auto ndim = static_cast<size_t>(shape.ndim());
  // The run: index's last dim (a single entry for a 0-d index). Along it, out moves by its stride
  // unless it is `dim` (then the entries themselves place it), index and src by their own.
  const size_t last = ndim == 0 ? 0 : ndim - 1;
  const int64_t run = ndim == 0 ? 1 : shape[last];
  const int64_t out_run_step = ndim == 0 || last == static_cast<size_t>(dim) ? 0 : out_strides[last];
  const int64_t index_run_step = ndim == 0 ? 0 : index_strides[last];
  const int64_t src_run_step = ndim == 0 ? 0 : src_strides[last];
  const int64_t dim_stride = ndim == 0 ? 0 : out_strides[static_cast<size_t>(dim)];
  const bool blocks = out_run_step == 1 && src_run_step == 1;
  FLOW_DISPATCH_ALL(out.dtype(), op, [&]<typename T>() {
    T* dst = static_cast<T*>(out.data_ptr());
    const T* values = static_cast<const T*>(src.data_ptr());
    auto put = [&](T* target, const T* value) {
      if (add) *target = convert<T>(convert<double>(*target) + convert<double>(*value));
      else *target = *value;
    };
    dispatch_index(index.dtype(), [&]<typename I>() {
      const I* idx = static_cast<const I*>(index.data_ptr());
      // An odometer over the dims before the last keeps out's offset (dim excluded: the entries
      // give it), index's and src's at the start of each run.
      std::vector<int64_t> position(last, 0), out_step(last, 0);
      for (size_t d = 0; d < last; ++d) out_step[d] = static_cast<int64_t>(d) == dim ? 0 : out_strides[d];
      int64_t out_base = 0, index_base = 0, src_base = 0;
      for (int64_t first = 0; first < positions; first += run) {
        const I* entries = idx + index_base;
        bool one_target = blocks;
        for (int64_t j = 1; one_target && index_run_step != 0 && j < run; ++j) one_target = entries[j * index_run_step] == entries[0];
        if (one_target) {
          T* target = dst + out_base + checked_index(entries[0], size, dim, op) * dim_stride;
          const T* source = values + src_base;
          if (add) {
            for (int64_t j = 0; j < run; ++j) put(target + j, source + j);
          } else {
            std::memmove(target, source, static_cast<size_t>(run) * sizeof(T));  // src may alias out
          }
        } else {
          for (int64_t j = 0; j < run; ++j) {
            put(dst + out_base + checked_index(entries[j * index_run_step], size, dim, op) * dim_stride + j * out_run_step,
                values + src_base + j * src_run_step);
          }
        }
        for (size_t d = last; d-- > 0;) {
          out_base += out_step[d];
          index_base += index_strides[d];
          src_base += src_strides[d];
          if (++position[d] < shape[d]) break;
          out_base -= out_step[d] * shape[d];
          index_base -= index_strides[d] * shape[d];
          src_base -= src_strides[d] * shape[d];
          position[d] = 0;
        }
      }
    });
  });
}

void scatter_kernel(KernelContext& ctx) {
  const bool add = ctx.attrs.get<std::string>("reduce") == "add";
  detail::copy_into(ctx.outputs[0], ctx.inputs[0]);  // the input may be a strided view
  scatter_into(ctx.outputs[0], ctx.inputs[1], ctx.inputs[2], ctx.attrs.get<int64_t>("dim"), add, add ? "scatter_add" : "scatter");
}

// scatter_inplace: the output is the input itself.
void scatter_inplace_kernel(KernelContext& ctx) {
  scatter_into(ctx.outputs[0], ctx.inputs[1], ctx.inputs[2], ctx.attrs.get<int64_t>("dim"), ctx.attrs.get<std::string>("reduce") == "add",
               "scatter_");
}

// inputs: grad, index; out = zeros with grad added at index.
void gather_grad_kernel(KernelContext& ctx) {
  Tensor& out = ctx.outputs[0];
  std::memset(out.data_ptr(), 0, static_cast<size_t>(out.numel()) * itemsize(out.dtype()));
  scatter_into(out, ctx.inputs[1], ctx.inputs[0], ctx.attrs.get<int64_t>("dim"), /*add=*/true, "gather_grad");
}

void masked_fill_kernel(KernelContext& ctx) {
  const Scalar& value = ctx.attrs.get<Scalar>("value");
  FLOW_DISPATCH_ALL(ctx.inputs[0].dtype(), "masked_fill", [&]<typename T>() {
    // The value goes in as a broadcast 0-d operand and the mask is read as bytes: that is the
    // loop shape GCC turns into a vectorised blend (a captured value or a `bool` operand gives a
    // branch per element, about 20x slower on random masks).
    Tensor fill = make_tensor({}, ctx.inputs[0].dtype(), kCPU);
    *static_cast<T*>(fill.data_ptr()) = value.is_floating() ? convert<T>(value.to_double()) : convert<T>(value.to_int());
    ternary_loop<T, uint8_t, T, T>(ctx.outputs[0], ctx.inputs[1], ctx.inputs[0], fill,
                                   [](uint8_t m, T x, T v) { return m != 0 ? v : x; });
  });
}

void one_hot_kernel(KernelContext& ctx) {
  const Tensor& indices = ctx.inputs[0];
  Tensor& out = ctx.outputs[0];
  const int64_t classes = ctx.attrs.get<int64_t>("num_classes");
  int64_t* dst = static_cast<int64_t*>(out.data_ptr());
  std::fill(dst, dst + out.numel(), 0);
  const int64_t* idx = static_cast<const int64_t*>(indices.data_ptr());
  for (int64_t k = 0; k < indices.numel(); ++k) {
    if (idx[k] < 0 || idx[k] >= classes) fail("one_hot", "class index ", idx[k], " is out of range [0, ", classes, ")");
    dst[k * classes + idx[k]] = 1;
  }
}

FLOW_REGISTER_KERNEL("cat", DeviceType::kCPU, all_dtypes(), cat_kernel);
FLOW_REGISTER_KERNEL("index_select", DeviceType::kCPU, all_dtypes(), index_select_kernel);
FLOW_REGISTER_KERNEL("gather", DeviceType::kCPU, all_dtypes(), gather_kernel);
FLOW_REGISTER_KERNEL("scatter", DeviceType::kCPU, all_dtypes(), scatter_kernel);
FLOW_REGISTER_KERNEL("scatter_inplace", DeviceType::kCPU, all_dtypes(), scatter_inplace_kernel);
FLOW_REGISTER_KERNEL("gather_grad", DeviceType::kCPU, all_dtypes(), gather_grad_kernel);
FLOW_REGISTER_KERNEL("masked_fill", DeviceType::kCPU, all_dtypes(), masked_fill_kernel);
FLOW_REGISTER_KERNEL("one_hot", DeviceType::kCPU, {kInt64}, one_hot_kernel);

}  // namespace
}  // namespace flow::cpu
