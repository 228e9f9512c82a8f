"""Checks an ONNX file written by flow's ONNX export, for tests/onnx.

Usage: check_onnx.py MODEL [--input X.bin DIMS ... --expected Y.bin DIMS] [--tolerance T]
  DIMS: comma-separated, e.g. 3,1,28,28 ("" for a 0-d tensor); --input once per model input, in
  order, each in the dtype the model declares; --expected holds the first output, float32.

Always runs onnx.checker.check_model(full_check=True) and strict shape inference. With --input,
also evaluates the model on those inputs and compares its first output with --expected. The
installed onnx (Debian's 1.12) has no onnx.reference evaluator, so the evaluation is the small
NumPy interpreter below: it follows the ONNX operator specifications for the ops the export
emits and raises on any other op. Exits 1 (with the reason on stderr) when a check fails.
"""
import argparse
import math
import sys

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference


def pad_hw(x, pads, value):
    top, left, bottom, right = pads
    return np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=value)


def windows(x, kernel, strides, dilations=(1, 1)):
    """Yields (ky, kx, view): x sampled at every output position for one kernel offset."""
    oh = (x.shape[2] - dilations[0] * (kernel[0] - 1) - 1) // strides[0] + 1
    ow = (x.shape[3] - dilations[1] * (kernel[1] - 1) - 1) // strides[1] + 1
    for ky in range(kernel[0]):
        for kx in range(kernel[1]):
            y0, x0 = ky * dilations[0], kx * dilations[1]
            yield ky, kx, x[:, :, y0:y0 + strides[0] * (oh - 1) + 1:strides[0], x0:x0 + strides[1] * (ow - 1) + 1:strides[1]]


def conv(x, w, b=None, kernel_shape=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1):
    x = pad_hw(x, pads, 0.0)
    per_group_in, per_group_out = x.shape[1] // group, w.shape[0] // group
    outs = []
    for g in range(group):
        xg = x[:, g * per_group_in:(g + 1) * per_group_in]
        wg = w[g * per_group_out:(g + 1) * per_group_out]
        acc = None
        for ky, kx, patch in windows(xg, w.shape[2:], strides, dilations):
            term = np.einsum("nchw,oc->nohw", patch, wg[:, :, ky, kx])
            acc = term if acc is None else acc + term
        outs.append(acc)
    out = np.concatenate(outs, axis=1)
    return out if b is None else out + b.reshape(1, -1, 1, 1)


def max_pool(x, kernel_shape, strides=(1, 1), pads=(0, 0, 0, 0)):
    return np.max(np.stack([v for _, _, v in windows(pad_hw(x, pads, -np.inf), kernel_shape, strides)]), axis=0)


def average_pool(x, kernel_shape, strides=(1, 1), pads=(0, 0, 0, 0), count_include_pad=0):
    if any(pads) and not count_include_pad:
        raise NotImplementedError("AveragePool with count_include_pad=0 and padding")
    total = sum(v for _, _, v in windows(pad_hw(x, pads, 0.0), kernel_shape, strides))
    return total / (kernel_shape[0] * kernel_shape[1])


def gemm(a, b, c=None, alpha=1.0, beta=1.0, transA=0, transB=0):
    out = alpha * ((a.T if transA else a) @ (b.T if transB else b))
    return out if c is None else out + beta * c


def batch_norm(x, scale, bias, mean, var, epsilon=1e-5):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + epsilon) * scale.reshape(shape) + bias.reshape(shape)


def layer_norm(x, scale, bias=None, axis=-1, epsilon=1e-5):
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + epsilon) * scale
    return y if bias is None else y + bias


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def clip(x, low=None, high=None):
    return np.clip(x, -np.inf if low is None else low, np.inf if high is None else high).astype(x.dtype)


def reshape(x, shape):
    shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape.tolist())]
    return x.reshape(shape)


def slice_(x, starts, ends, axes=None, steps=None):
    # Python's slices clamp and count negative bounds from the end, as ONNX's Slice does for positive steps.
    index = [slice(None)] * x.ndim
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    for start, end, axis, step in zip(starts.tolist(), ends.tolist(), list(axes), list(steps)):
        index[int(axis)] = slice(int(start), int(end), int(step))
    return x[tuple(index)]


def cum_sum(x, axis, exclusive=0, reverse=0):
    if exclusive:
        raise NotImplementedError("CumSum with exclusive=1")
    axis = int(axis)
    if reverse:
        return np.flip(np.cumsum(np.flip(x, axis), axis=axis, dtype=x.dtype), axis)
    return np.cumsum(x, axis=axis, dtype=x.dtype)


def top_k(x, k, axis=-1, largest=1, sorted=1):
    # A stable sort: of equal values the lower index comes first, as the specification says.
    order = np.argsort(-x if largest else x, axis=axis, kind="stable")
    indices = np.take(order, np.arange(int(k[0])), axis=axis)
    return np.take_along_axis(x, indices, axis=axis), indices.astype(np.int64)


def scatter_elements(x, indices, updates, axis=0, reduction=b"none"):
    grid = list(np.indices(indices.shape))
    grid[axis] = np.where(indices < 0, indices + x.shape[axis], indices)
    out = x.copy()
    if reduction == b"add":
        np.add.at(out, tuple(grid), updates)
    elif reduction == b"none":
        out[tuple(grid)] = updates
    else:
        raise NotImplementedError(f"ScatterElements with reduction {reduction}")
    return out


def one_hot(indices, depth, values, axis=-1):
    if axis != -1:
        raise NotImplementedError("OneHot along an axis other than the last")
    hot = np.eye(int(np.asarray(depth).reshape(-1)[0]), dtype=bool)[indices]
    return np.where(hot, values[1], values[0])


def arg_extremum(fn):
    def run(x, axis=0, keepdims=1, select_last_index=0):
        if select_last_index:
            raise NotImplementedError("select_last_index=1")
        out = fn(x, axis=axis).astype(np.int64)
        return np.expand_dims(out, axis) if keepdims else out
    return run


def reduce(fn):
    def run(x, axes=None, keepdims=1):
        return fn(x, axis=None if axes is None else tuple(int(a) for a in axes), keepdims=bool(keepdims)).astype(x.dtype)
    return run


OPS = {
    "Conv": conv, "MaxPool": max_pool, "AveragePool": average_pool, "Gemm": gemm, "BatchNormalization": batch_norm,
    "LayerNormalization": layer_norm,
    "MatMul": np.matmul, "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": np.power,
    "Max": np.maximum, "Min": np.minimum, "Neg": np.negative, "Abs": np.abs, "Sign": np.sign, "Exp": np.exp, "Log": np.log,
    "Sqrt": np.sqrt, "Reciprocal": np.reciprocal, "Sin": np.sin, "Cos": np.cos, "Tanh": np.tanh,
    "Sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "Relu": lambda x: np.maximum(x, 0).astype(x.dtype),
    "Erf": lambda x: np.vectorize(math.erf)(x).astype(x.dtype), "Clip": clip, "Identity": lambda x: x,
    "Reshape": reshape, "Transpose": lambda x, perm=None: np.transpose(x, perm), "Expand": lambda x, s: x * np.ones(s.tolist(), x.dtype),
    "Where": np.where, "Gather": lambda x, i, axis=0: np.take(x, i, axis=axis),
    "GatherElements": lambda x, i, axis=0: np.take_along_axis(x, i, axis=axis), "Slice": slice_,
    "Concat": lambda *xs, axis: np.concatenate(xs, axis=axis), "Softmax": softmax, "LogSoftmax": lambda x, axis=-1: np.log(softmax(x, axis)),
    "Cast": lambda x, to: x.astype(onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[to]),
    "ReduceSum": reduce(np.sum), "ReduceMax": reduce(np.max), "ReduceMin": reduce(np.min), "ReduceProd": reduce(np.prod),
    "ArgMax": arg_extremum(np.argmax), "ArgMin": arg_extremum(np.argmin), "TopK": top_k, "CumSum": cum_sum,
    "Trilu": lambda x, k=None, upper=1: (np.triu if upper else np.tril)(x, 0 if k is None else int(k)),
    "ScatterElements": scatter_elements, "OneHot": one_hot, "Equal": np.equal, "Less": np.less, "LessOrEqual": np.less_equal,
    "Greater": np.greater, "GreaterOrEqual": np.greater_equal, "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
    "Not": np.logical_not,
}


def evaluate(model, feeds):
    values = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    values.update(feeds)
    for node in model.graph.node:
        if node.op_type not in OPS:
            raise NotImplementedError(f"the NumPy interpreter has no {node.op_type}")
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        args = [values[name] if name else None for name in node.input]
        results = OPS[node.op_type](*args, **attrs)
        for name, result in zip(node.output, results if isinstance(results, tuple) else (results,)):
            values[name] = np.asarray(result)
    return [values[out.name] for out in model.graph.output]


def check_output_shapes(model):
    """Strict shape inference, with the outputs' declared shapes compared to the inferred ones."""
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    for output in stripped.graph.output:
        output.type.tensor_type.ClearField("shape")
    inferred = shape_inference.infer_shapes(stripped, check_type=True, strict_mode=True)
    for declared, found in zip(model.graph.output, inferred.graph.output):
        want, got = declared.type.tensor_type, found.type.tensor_type
        same = want.elem_type == got.elem_type and len(want.shape.dim) == len(got.shape.dim)
        for a, b in zip(want.shape.dim, got.shape.dim):
            # A symbolic dim may be inferred as unknown (after a Reshape), never as a number.
            if b.HasField("dim_value") and (a.HasField("dim_param") or a.dim_value != b.dim_value):
                same = False
        if not same:
            sys.exit(f"output '{declared.name}' is declared {want} but shape inference gives {got}")


def dims(text):
    return tuple(int(d) for d in text.split(",") if d)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--input", nargs=2, action="append")
    parser.add_argument("--expected", nargs=2)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()

    onnx.checker.check_model(args.model, full_check=True)
    model = onnx.load(args.model)
    check_output_shapes(model)
    print(f"checker ok: opset {model.opset_import[0].version}, {len(model.graph.node)} nodes")
    if not args.input:
        return
    # Each input as the model declares it (float32, or int64 token ids), little-endian as flow wrote it.
    feeds = {}
    for declared, (path, shape) in zip(model.graph.input, args.input):
        input_type = np.dtype(onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[declared.type.tensor_type.elem_type]).newbyteorder("<")
        feeds[declared.name] = np.fromfile(path, dtype=input_type).reshape(dims(shape))
    if len(feeds) != len(model.graph.input):
        sys.exit(f"{len(args.input)} inputs given, the model has {len(model.graph.input)}")
    expected = np.fromfile(args.expected[0], dtype="<f4").reshape(dims(args.expected[1]))
    actual = evaluate(model, feeds)[0]
    if actual.shape != expected.shape:
        sys.exit(f"output shape {actual.shape}, expected {expected.shape}")
    error = float(np.max(np.abs(actual - expected) / np.maximum(1.0, np.abs(expected))))
    print(f"evaluated: max error {error:.3g} (tolerance {args.tolerance})")
    if not error <= args.tolerance:
        sys.exit(f"output differs from flow's by {error:.3g} > {args.tolerance}")


if __name__ == "__main__":
    main()
