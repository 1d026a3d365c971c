"""The int8 export as ONNX Runtime runs it on a CPU without VNNI, on any CPU (issue 61).

Without VNNI, the u8 x s8 kernel (AVX2's vpmaddubsw) multiplies each uint8 activation by its
int8 weight and adds the products of adjacent k (2j, 2j + 1) in int16, saturating at ±32 767,
before summing in int32; the zero point's correction (128 x the column's weight sum) comes after,
exact. With VNNI the sum is exact in int32. Here every MatMulIntegerToFloat of the export's graph
(textclf.model.quantize) is rewritten into plain ONNX operators computing that saturated sum, so
the graph answers as a non-VNNI CPU would wherever it runs; on a CPU without VNNI it must equal
ONNX Runtime's own answers, which checks the emulation itself. Memory grows as rows x K/2 x N:
score one text at a time.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from textclf.model.checksums import write_checksums
from textclf.model.exported import EXPORT_FILE, read_export

INT16 = (np.int32(-32768), np.int32(32767))


def saturating(node, weights: dict[str, np.ndarray]) -> tuple[list, dict[str, np.ndarray]]:
    """MatMulIntegerToFloat(a u8 (M, K), w s8 (K, N), a_scale 1, w_scale (N,), a_zero 128)
    -> (nodes computing it with int16 pair sums, the constants they read)."""
    a, w, _, w_scale, a_zero = node.input
    q, p = weights[w].astype(np.int32), f"{node.output[0]}_nv"  # (K, N)
    k, n = q.shape
    assert k % 2 == 0 and int(weights[a_zero]) == 128, (node.name, k)
    consts = {f"{p}_even": q[0::2], f"{p}_odd": q[1::2],  # (K/2, N) each
              f"{p}_zero": (128 * q.sum(axis=0)).astype(np.int32),  # (N,): the zero point's share, exactly
              f"{p}_pairs": np.asarray([-1, k // 2, 2]), f"{p}_lo": INT16[0], f"{p}_hi": INT16[1],
              f"{p}_i0": np.asarray(0), f"{p}_i1": np.asarray(1)}
    nodes = [helper.make_node("Cast", [a], [f"{p}_a"], to=TensorProto.INT32),
             helper.make_node("Reshape", [f"{p}_a", f"{p}_pairs"], [f"{p}_a3"]),  # (M, K/2, 2)
             helper.make_node("Gather", [f"{p}_a3", f"{p}_i0"], [f"{p}_ae"], axis=2),  # (M, K/2)
             helper.make_node("Gather", [f"{p}_a3", f"{p}_i1"], [f"{p}_ao"], axis=2),
             helper.make_node("Unsqueeze", [f"{p}_ae", "nv_axis2"], [f"{p}_ae3"]),  # (M, K/2, 1)
             helper.make_node("Unsqueeze", [f"{p}_ao", "nv_axis2"], [f"{p}_ao3"]),
             helper.make_node("Mul", [f"{p}_ae3", f"{p}_even"], [f"{p}_pe"]),  # (M, K/2, N)
             helper.make_node("Mul", [f"{p}_ao3", f"{p}_odd"], [f"{p}_po"]),
             helper.make_node("Add", [f"{p}_pe", f"{p}_po"], [f"{p}_pair"]),
             helper.make_node("Clip", [f"{p}_pair", f"{p}_lo", f"{p}_hi"], [f"{p}_sat"]),  # int16's range
             helper.make_node("ReduceSum", [f"{p}_sat", "nv_axis1"], [f"{p}_sum"], keepdims=0),  # (M, N)
             helper.make_node("Sub", [f"{p}_sum", f"{p}_zero"], [f"{p}_int"]),
             helper.make_node("Cast", [f"{p}_int"], [f"{p}_float"], to=TensorProto.FLOAT),
             helper.make_node("Mul", [f"{p}_float", w_scale], node.output)]
    return nodes, consts


def without_vnni(export_dir: Path, out: Path) -> tuple[Path, int]:
    """A copy of the int8 export folder at `out` whose graph sums as a non-VNNI CPU does
    (checksums rewritten) -> (out, the number of products rewritten)."""
    shutil.copytree(export_dir, out)
    path = out / read_export(out)["file"]
    assert read_export(out)["format"] == "onnx-int8", read_export(out)["format"]
    model = onnx.load(str(path))
    graph = model.graph
    weights = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    nodes, consts, rewritten = [], {"nv_axis1": np.asarray([1]), "nv_axis2": np.asarray([2])}, 0
    for node in graph.node:
        if node.op_type != "MatMulIntegerToFloat":
            nodes.append(node)
            continue
        made, more = saturating(node, weights)
        nodes += made
        consts.update(more)
        rewritten += 1
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items())
    onnx.save(model, str(path))
    assert (out / EXPORT_FILE).is_file()
    write_checksums(out)
    return out, rewritten
