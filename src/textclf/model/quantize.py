"""int8 that gives a text the same answer whatever else is in its batch: each token row's
activations quantized with their own scale (docs/benchmarks.md, issue 51).

ONNX Runtime's dynamic quantization takes one activation scale per tensor, over the whole batch
with its padding (onnxruntime#10111), so a text's probabilities moved by up to 0.1 with its
neighbours. Here every MatMul of the encoder with a weight runs as: the row's scale
max|x| / 127 over its own features, x rounded to int8 (stored as uint8 around 128),
MatMulInteger against int8 weights with a scale per output channel, the int32 product times
both scales. Each row is computed from itself alone, and integer products are exact, so a row's
output does not depend on the other rows. The embeddings, pooler and classifier (Gather, Gemm)
stay float32.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS_DOMAIN = "com.microsoft"  # ONNX Runtime's contrib operators: MatMulIntegerToFloat
CONSTANTS = {"rowq_zero": np.uint8(128),
             "rowq_one": np.float32(1), "rowq_axis1": np.asarray([1]), "rowq_start": np.asarray([0]),
             "rowq_last": np.asarray([-1])}


def int8_columns(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(K, N) float weights -> (K, N) int8 and (N,) scales, symmetric, one scale per output
    column (per-channel: on BBC per-tensor changed 1 % of the labels, docs/benchmarks.md)."""
    scale = np.abs(weight).max(axis=0) / 127
    scale[scale == 0] = 1
    return np.clip(np.round(weight / scale), -127, 127).astype(np.int8), scale.astype(np.float32)


def row_quantize(x: str, width: int, levels: int = 127) -> tuple[list, str, str, str]:
    """Nodes quantizing (..., K) float x by rows -> (nodes, (M, K) uint8 x, (M, 1) row scales,
    x's leading dims), M the rows of x. One per-axis QuantizeLinear over the rows (axis 0 of x
    as (M, K)) with each row's max|x| / 127: round(x / scale) + 128, in uint8 so that ONNX
    Runtime runs its fast u8 x s8 product (s8 x s8 was 10 times slower here); the zero point
    128 undoes the shift exactly."""
    p = f"{x}_rowq"
    return [helper.make_node("Reshape", [x, f"rowq_k{width}"], [f"{p}_2d"]),
            helper.make_node("ReduceMax", [f"{p}_2d"], [f"{p}_max"], axes=[1], keepdims=0),
            helper.make_node("ReduceMin", [f"{p}_2d"], [f"{p}_min"], axes=[1], keepdims=0),
            helper.make_node("Neg", [f"{p}_min"], [f"{p}_neg"]),
            helper.make_node("Max", [f"{p}_max", f"{p}_neg", f"rowq_tiny{levels}"], [f"{p}_amax"]),  # tiny: zeros
            helper.make_node("Mul", [f"{p}_amax", f"rowq_inv{levels}"], [f"{p}_scale"]),  # (M,)
            helper.make_node("Shape", [f"{p}_scale"], [f"{p}_m"]),
            helper.make_node("ConstantOfShape", [f"{p}_m"], [f"{p}_zp"],
                             value=numpy_helper.from_array(np.asarray([128], np.uint8))),
            helper.make_node("QuantizeLinear", [f"{p}_2d", f"{p}_scale", f"{p}_zp"], [f"{p}_u8"], axis=0),
            helper.make_node("Unsqueeze", [f"{p}_scale", "rowq_axis1"], [f"{p}_col"]),  # (M, 1)
            helper.make_node("Shape", [x], [f"{p}_shape"]),
            helper.make_node("Slice", [f"{p}_shape", "rowq_start", "rowq_last"], [f"{p}_lead"]),
            ], f"{p}_u8", f"{p}_col", f"{p}_lead"


def quantize_rows(source: Path, target: Path, keep_float: Callable[[str], bool] = lambda name: False,
                  smooth: dict[str, np.ndarray] | None = None, levels: int = 127) -> int:
    """The float32 graph at `source` -> `target` with every MatMul against a 2-D weight
    replaced by the per-row int8 product, but those whose node name `keep_float` keeps.
    Inputs shared by several MatMuls (query, key, value) are quantized once, and so is a weight
    shared by several -> the number of MatMuls replaced. `smooth` (input name -> (K,) factors
    s, SmoothQuant): x / s is quantized against s · W, the same product with x's outlier
    channels tamed (a static factor per channel: no row depends on another). `levels`: a row's
    largest |x| maps to it (63: 7 bits, which no CPU's int16 pair sums can saturate)."""
    model = onnx.load(str(source))
    graph = model.graph
    weights = {init.name: init for init in graph.initializer}
    nodes: list = []
    rows: dict[str, list[str]] = {}  # float input -> its uint8 rows, their scales, its leading dims
    replaced, constants, done = 0, dict(CONSTANTS), set()
    constants.update({f"rowq_inv{levels}": np.float32(1 / levels), f"rowq_tiny{levels}": np.float32(levels * 1e-12)})
    smooth = smooth or {}
    for node in graph.node:
        weight = weights.get(node.input[1]) if node.op_type == "MatMul" else None
        if weight is None or len(weight.dims) != 2 or keep_float(node.name):
            nodes.append(node)
            continue
        x, (width, cols) = node.input[0], weight.dims
        if x not in rows:
            source_x = x
            if x in smooth:  # x · (1 / s), one Mul before the rows are quantized
                constants[f"{x}_smooth_inv"] = (1.0 / smooth[x]).astype(np.float32)
                nodes.append(helper.make_node("Mul", [x, f"{x}_smooth_inv"], [f"{x}_smoothed"]))
                source_x = f"{x}_smoothed"
            quantize, *rows[x] = row_quantize(source_x, width, levels)
            nodes += quantize
        xq, scale, lead = rows[x]
        if weight.name not in done:  # one weight may feed several MatMuls: its int8 copy is one initializer
            done.add(weight.name)
            w = numpy_helper.to_array(weight)
            wq, wscale = int8_columns(w * smooth[x][:, None] if x in smooth else w)
            graph.initializer.extend([numpy_helper.from_array(wq, f"{weight.name}_int8"),
                                      numpy_helper.from_array(wscale, f"{weight.name}_scale")])
        constants.update({f"rowq_k{width}": np.asarray([-1, width]), f"rowq_n{cols}": np.asarray([cols])})
        out = node.output[0]
        # int32 product x per-column scale in one kernel (a_scale 1: its a_scale is one number
        # for the whole tensor), then each row's own scale. Never MatMulInteger -> Cast ->
        # Mul(row scale x column scale): ONNX Runtime fuses that into this kernel, which takes
        # one scale for the whole tensor (60 % agreement with PyTorch on fortunes, 1.32)
        nodes += [helper.make_node("MatMulIntegerToFloat", [xq, f"{weight.name}_int8", "rowq_one",
                                                            f"{weight.name}_scale", "rowq_zero"],
                                   [f"{out}_cols"], domain=MS_DOMAIN),
                  helper.make_node("Mul", [f"{out}_cols", scale], [f"{out}_2d"]),
                  helper.make_node("Concat", [lead, f"rowq_n{cols}"], [f"{out}_shape"], axis=0),
                  helper.make_node("Reshape", [f"{out}_2d", f"{out}_shape"], [out])]
        replaced += 1
    graph.initializer.extend(numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items())
    used = {name for node in nodes for name in node.input}
    kept = [init for init in graph.initializer if init.name in used]
    del graph.node[:], graph.initializer[:]
    graph.node.extend(nodes)
    graph.initializer.extend(kept)
    if not any(op.domain == MS_DOMAIN for op in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    onnx.save(model, str(target))
    return replaced
