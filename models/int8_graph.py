"""Rewrites of the graph `quantize_static` writes (`models.quantize`'s static int8 scheme), done in place on the
loaded model (the caller loads and saves the file once for all of them): the float inputs given back to the consumers
that are not quantized (`restore_float_side_inputs`), and each quantized MatMul with its bias Add written as one
`com.microsoft.MatMulIntegerToFloat` (`fuse_matmul_bias`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx


def fuse_matmul_bias(model: onnx.ModelProto, quantized: set[str]) -> int:
    """Replace DequantizeLinear(x_q), DequantizeLinear(W_q) → MatMul [→ Add(bias)] by one MatMulIntegerToFloat
    (x_q, W_q, x_scale, W_scale, x_zero_point, W_zero_point[, bias]); returns how many were replaced.

    That is the node ONNX Runtime's QDQ transformer makes of the pattern at session start, except that it leaves
    the bias Add (and the Add of the first feed-forward layer folded into BiasGelu) as separate passes over the
    activations, one per biased MatMul (their cost: docs/decisions.md). The arithmetic is the same."""
    from onnx import helper

    graph = model.graph
    original = list(graph.node)  # one set of Python objects, so that id() names a node throughout
    producer = {out: node for node in original for out in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in original:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    vectors = {t.name for t in graph.initializer if len(t.dims) == 1}
    replaced: dict[int, onnx.NodeProto] = {}  # id() of the MatMul whose place the fused node takes → fused node
    dropped: set[int] = set()  # id() of the bias Adds folded in
    for node in original:
        if node.name not in quantized or node.op_type != "MatMul":
            continue
        dq_a, dq_b = producer.get(node.input[0]), producer.get(node.input[1])
        if dq_a is None or dq_b is None or dq_a.op_type != "DequantizeLinear" or dq_b.op_type != "DequantizeLinear":
            continue
        axis = next((a.i for a in dq_b.attribute if a.name == "axis"), 1)
        if axis not in (1, -1):  # per output column of W (K × N) is what MatMulIntegerToFloat's b_scale means
            continue
        inputs = [dq_a.input[0], dq_b.input[0], dq_a.input[1], dq_b.input[1], dq_a.input[2], dq_b.input[2]]
        output = node.output[0]
        users = consumers.get(output, [])
        if len(users) == 1 and users[0].op_type == "Add" and output not in {o.name for o in graph.output}:
            add = users[0]
            bias = add.input[1] if add.input[0] == output else add.input[0]
            if bias in vectors:
                inputs.append(bias)
                output = add.output[0]
                dropped.add(id(add))
        replaced[id(node)] = helper.make_node("MatMulIntegerToFloat", inputs, [output], f"{node.name}_int8",
                                               domain="com.microsoft")
    nodes = [replaced.get(id(n), n) for n in original if id(n) not in dropped]
    used = {name for n in nodes for name in n.input} | {o.name for o in graph.output}
    while True:  # drop the DequantizeLinear nodes (and their now unused weight copies) nothing reads any more
        dead = {id(n) for n in nodes if n.op_type == "DequantizeLinear" and not set(n.output) & used}
        if not dead:
            break
        nodes = [n for n in nodes if id(n) not in dead]
        used = {name for n in nodes for name in n.input} | {o.name for o in graph.output}
    del graph.node[:]
    graph.node.extend(nodes)
    if not any(op.domain == "com.microsoft" for op in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return len(replaced)


def restore_float_side_inputs(model: onnx.ModelProto, quantized: set[str]) -> None:
    """Give every consumer of a quantize-dequantize pair that is not a quantized node its float input back.

    `quantize_static` rewires *all* consumers of a quantized activation to the dequantized copy, so a LayerNorm
    output that feeds both a quantized MatMul and the residual Add would carry its int8 rounding into the
    residual stream. Only the quantized MatMuls should see it."""
    producer = {out: node for node in model.graph.node for out in node.output}
    float_of = {}
    for node in model.graph.node:
        q = producer.get(node.input[0]) if node.op_type == "DequantizeLinear" else None
        if q is not None and q.op_type == "QuantizeLinear":
            float_of[node.output[0]] = q.input[0]
    if any(out.name in float_of for out in model.graph.output):
        raise ValueError("a graph output is quantized")
    for node in model.graph.node:
        if node.name in quantized or node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        for i, name in enumerate(node.input):
            if name in float_of:
                node.input[i] = float_of[name]
