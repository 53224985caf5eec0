"""Rules for values: elementwise arithmetic, shapes, reductions and
dot_general (see _program.py for the mapping)."""

from __future__ import annotations

import contextlib
import math
from typing import Callable, List, Optional


from ._text import Unsupported, literal, mpmd_type, u32
from ._program import (
    THREADS,
    Array,
    ProgramCompiler,
    Scalar,
    Value,
    _index_text,
)


# ---------------------------------------------------------- arithmetic


def _elementwise(pc: ProgramCompiler, eqn, ins, make: Callable[..., str], out_ty: Optional[str] = None):
    aval = eqn.outvars[0].aval
    ty = out_ty or mpmd_type(aval.dtype)
    shape = tuple(aval.shape)
    if shape == ():
        args = [pc.scalar_of(v).expr for v in ins]
        return Scalar(pc.body.let(ty, make(*args)), ty)
    getters = [pc.operand_at(v, shape) for v in ins]
    depth = 1 + max((v.depth for v in ins if isinstance(v, Array)), default=0)
    return Array(shape, ty, lambda index: make(*[g(index) for g in getters]), depth)


def _binary(symbol: str):
    def rule(pc, eqn, ins):
        return _elementwise(pc, eqn, ins, lambda a, b: f"({a} {symbol} {b})")

    return rule


def _function(name: str):
    def rule(pc, eqn, ins):
        return _elementwise(pc, eqn, ins, lambda *a: f"{name}({', '.join(a)})")

    return rule


def _is_bool(eqn) -> bool:
    return mpmd_type(eqn.invars[0].aval.dtype) == "bool"


def rule_and(pc, eqn, ins):
    return _elementwise(
        pc, eqn, ins, (lambda a, b: f"({a} && {b})") if _is_bool(eqn) else (lambda a, b: f"({a} & {b})")
    )


def rule_or(pc, eqn, ins):
    return _elementwise(
        pc, eqn, ins, (lambda a, b: f"({a} || {b})") if _is_bool(eqn) else (lambda a, b: f"({a} | {b})")
    )


def rule_xor(pc, eqn, ins):
    return _elementwise(
        pc, eqn, ins, (lambda a, b: f"({a} != {b})") if _is_bool(eqn) else (lambda a, b: f"({a} ^ {b})")
    )


def rule_not(pc, eqn, ins):
    return _elementwise(pc, eqn, ins, (lambda a: f"(!{a})") if _is_bool(eqn) else (lambda a: f"(~{a})"))


def rule_neg(pc, eqn, ins):
    return _elementwise(pc, eqn, ins, lambda a: f"(-{a})")


def rule_sign(pc, eqn, ins):
    ty = mpmd_type(eqn.outvars[0].aval.dtype)
    if ty == "u32":
        return _elementwise(pc, eqn, ins, lambda a: f"select({a} > 0u, 1u, 0u)")
    one, zero, minus = literal(1, ty), literal(0, ty), literal(-1, ty)
    return _elementwise(
        pc, eqn, ins, lambda a: f"select({a} > {zero}, {one}, select({a} < {zero}, {minus}, {a}))"
    )


def rule_integer_pow(pc, eqn, ins):
    y = int(eqn.params["y"])
    if y < 0 or y > 16:
        raise Unsupported(f"integer_pow with exponent {y} (0 to 16 are lowered)")
    ty = mpmd_type(eqn.outvars[0].aval.dtype)

    def make(a):
        if y == 0:
            return literal(1, ty)
        return "(" + " * ".join([a] * y) + ")"

    return _elementwise(pc, eqn, ins, make)


def rule_square(pc, eqn, ins):
    return _elementwise(pc, eqn, ins, lambda a: f"({a} * {a})")


def rule_logistic(pc, eqn, ins):
    ty = mpmd_type(eqn.outvars[0].aval.dtype)
    one = literal(1, ty)
    return _elementwise(pc, eqn, ins, lambda a: f"({one} / ({one} + exp(-{a})))")


def rule_reciprocal(pc, eqn, ins):
    ty = mpmd_type(eqn.outvars[0].aval.dtype)
    return _elementwise(pc, eqn, ins, lambda a: f"({literal(1, ty)} / {a})")


def rule_is_finite(pc, eqn, ins):
    return _elementwise(
        pc,
        eqn,
        ins,
        lambda a: f"(abs({a}) < {literal(float('inf'), mpmd_type(eqn.invars[0].aval.dtype))})",
        "bool",
    )


def rule_clamp(pc, eqn, ins):
    return _elementwise(pc, eqn, ins, lambda lo, x, hi: f"min(max({x}, {lo}), {hi})")


def rule_select_n(pc, eqn, ins):
    predicate_ty = mpmd_type(eqn.invars[0].aval.dtype)

    def make(p, *cases):
        if predicate_ty == "bool":
            return f"select({p}, {cases[1]}, {cases[0]})" if len(cases) == 2 else cases[0]
        expr = cases[-1]
        for k in range(len(cases) - 2, -1, -1):
            expr = f"select({p} == {literal(k, predicate_ty)}, {cases[k]}, {expr})"
        return expr

    return _elementwise(pc, eqn, ins, make)


def rule_convert(pc, eqn, ins):
    ty = mpmd_type(eqn.params["new_dtype"])
    src = mpmd_type(eqn.invars[0].aval.dtype)
    if ty == src:
        value = ins[0]
        return value
    return _elementwise(pc, eqn, ins, lambda a: f"{ty}({a})", ty)


def rule_comparison(symbol: str):
    def rule(pc, eqn, ins):
        return _elementwise(pc, eqn, ins, lambda a, b: f"({a} {symbol} {b})", "bool")

    return rule


def rule_shift_right_logical(pc, eqn, ins):
    ty = mpmd_type(eqn.outvars[0].aval.dtype)
    if ty == "u32":
        return _elementwise(pc, eqn, ins, lambda a, b: f"({a} >> {b})")
    return _elementwise(pc, eqn, ins, lambda a, b: f"i32(u32({a}) >> u32({b}))")


def rule_identity(pc, eqn, ins):
    return ins[0]


# ------------------------------------------------------- array shapes


def rule_iota(pc, eqn, ins):
    ty = mpmd_type(eqn.params["dtype"])
    shape = tuple(eqn.params["shape"])
    dim = int(eqn.params["dimension"])
    return Array(shape, ty, lambda index: index[dim] if ty == "u32" else f"{ty}({index[dim]})", 1)


def _as_array(value: Value) -> Array:
    if isinstance(value, Scalar):
        return Array((), value.ty, lambda index: value.expr, 1, plain=True)
    return value


def rule_broadcast_in_dim(pc, eqn, ins):
    operand = _as_array(ins[0])
    shape = tuple(eqn.params["shape"])
    dims = tuple(eqn.params["broadcast_dimensions"])
    source_shape = operand.shape

    def at(index: List[str]) -> str:
        src = ["0u" if source_shape[k] == 1 and shape[d] != 1 else index[d] for k, d in enumerate(dims)]
        return operand.at(src)

    return Array(shape, operand.ty, at, operand.depth, operand.plain)


def _reindexed(pc, operand: Array, shape, to_source: Callable[[List[str]], List[str]]) -> Array:
    return Array(
        tuple(shape), operand.ty, lambda index: operand.at(to_source(index)), operand.depth, operand.plain
    )


def rule_reshape(pc, eqn, ins):
    if eqn.params.get("dimensions") not in (None, ()):
        raise Unsupported("reshape with dimensions")
    operand = _as_array(ins[0])
    shape = tuple(eqn.outvars[0].aval.shape)
    source = operand.shape
    if shape == ():
        return pc.scalar_of(operand)

    def to_source(index: List[str]) -> List[str]:
        flat = pc.flat_index(shape, index)
        out = []
        stride = int(math.prod(source))
        for size in source:
            stride //= int(size)
            expr = flat if stride == 1 else f"(({flat}) / {u32(stride)})"
            out.append(f"({expr} % {u32(size)})")
        return out

    return _reindexed(pc, operand, shape, to_source)


def rule_squeeze(pc, eqn, ins):
    operand = _as_array(ins[0])
    dims = set(int(d) % len(operand.shape) for d in eqn.params["dimensions"])
    shape = tuple(eqn.outvars[0].aval.shape)
    if shape == ():
        return pc.scalar_of(operand)

    def to_source(index: List[str]) -> List[str]:
        it = iter(index)
        return ["0u" if k in dims else next(it) for k in range(len(operand.shape))]

    return _reindexed(pc, operand, shape, to_source)


def rule_expand_dims(pc, eqn, ins):
    return rule_reshape(pc, eqn, ins)


def rule_transpose(pc, eqn, ins):
    operand = _as_array(ins[0])
    perm = tuple(eqn.params["permutation"])
    shape = tuple(eqn.outvars[0].aval.shape)

    def to_source(index: List[str]) -> List[str]:
        source = [""] * len(perm)
        for out_dim, src_dim in enumerate(perm):
            source[src_dim] = index[out_dim]
        return source

    return _reindexed(pc, operand, shape, to_source)


def rule_slice(pc, eqn, ins):
    operand = _as_array(ins[0])
    starts = eqn.params["start_indices"]
    strides = eqn.params.get("strides") or (1,) * len(starts)
    shape = tuple(eqn.outvars[0].aval.shape)

    def to_source(index: List[str]) -> List[str]:
        return [f"({u32(s)} + {i} * {u32(st)})" for s, st, i in zip(starts, strides, index)]

    return _reindexed(pc, operand, shape, to_source)


def rule_dynamic_slice(pc, eqn, ins):
    operand = _as_array(ins[0])
    shape = tuple(eqn.outvars[0].aval.shape)
    starts = []
    for size, limit, value in zip(shape, operand.shape, ins[1:]):
        start = pc.scalar_of(value)
        # XLA clamps the start so the slice stays inside the operand.
        clamped = pc.body.let("u32", f"u32(min(max({_i32_expr(start)}, 0), {int(limit) - int(size)}))", "s")
        starts.append(clamped)

    def to_source(index: List[str]) -> List[str]:
        return [f"({s} + {i})" for s, i in zip(starts, index)]

    return _reindexed(pc, operand, shape, to_source)


def _i32_expr(value: Scalar) -> str:
    return value.expr if value.ty == "i32" else f"i32({value.expr})"


def rule_concatenate(pc, eqn, ins):
    dim = int(eqn.params["dimension"])
    operands = [_as_array(v) for v in ins]
    shape = tuple(eqn.outvars[0].aval.shape)
    offsets = []
    total = 0
    for op in operands:
        offsets.append(total)
        total += op.shape[dim]

    def at(index: List[str]) -> str:
        expr = None
        for op, offset in reversed(list(zip(operands, offsets))):
            shifted = list(index)
            shifted[dim] = f"({index[dim]} - {u32(offset)})"
            value = op.at(shifted)
            expr = (
                value
                if expr is None
                else f"select({index[dim]} < {u32(offset + op.shape[dim])}, {value}, {expr})"
            )
        return expr

    return Array(shape, operands[0].ty, at, 1 + max(o.depth for o in operands))


# ---------------------------------------------------------- reductions


REDUCERS = {
    "reduce_sum": (lambda a, b: f"{a} + {b}", lambda ty: literal(0, ty)),
    "reduce_prod": (lambda a, b: f"{a} * {b}", lambda ty: literal(1, ty)),
    "reduce_max": (lambda a, b: f"max({a}, {b})", lambda ty: _lowest(ty)),
    "reduce_min": (lambda a, b: f"min({a}, {b})", lambda ty: _highest(ty)),
    "reduce_and": (lambda a, b: f"{a} && {b}", lambda ty: "true"),
    "reduce_or": (lambda a, b: f"{a} || {b}", lambda ty: "false"),
}


def _lowest(ty: str) -> str:
    return {
        "f32": "-inf",
        "i32": "-2147483648",
        "u32": "0u",
        "f16": "f16(-inf)",
        "bf16": "bf16(-inf)",
        "bool": "false",
    }[ty]


def _highest(ty: str) -> str:
    return {
        "f32": "inf",
        "i32": "2147483647",
        "u32": "4294967295u",
        "f16": "f16(inf)",
        "bf16": "bf16(inf)",
        "bool": "true",
    }[ty]


def rule_reduce(kind: str):
    combine, identity = REDUCERS[kind]

    def rule(pc, eqn, ins):
        operand = pc.prepared(_as_array(ins[0]))
        axes = sorted(int(a) for a in eqn.params["axes"])
        ty = operand.ty
        shape = operand.shape
        kept = [d for d in range(len(shape)) if d not in axes]
        out_shape = tuple(shape[d] for d in kept)
        reduced = [shape[d] for d in axes]
        count = int(math.prod(reduced))
        init = identity(ty)

        def full_index(out_index: List[str], red_index: List[str]) -> List[str]:
            index = [""] * len(shape)
            for d, i in zip(kept, out_index):
                index[d] = i
            for d, i in zip(axes, red_index):
                index[d] = i
            return index

        if out_shape == () and count > THREADS:
            # Two levels: each thread reduces its strided share, then thread 0
            # combines the 128 partial results in thread order.
            partials = pc.alloc((THREADS,), ty, "part")
            acc = pc.names.fresh("acc")
            pc.body.emit(f"var {acc}: {ty} = {init};")

            def add(index: List[str]) -> None:
                pc.body.emit(f"{acc} = {combine(acc, operand.at(index))};")

            pc.for_elements(tuple(reduced), lambda red: add(full_index([], red)))
            pc.body.emit(f"{partials.name}[axis_index(tid)] = {acc};")
            pc.body.emit("barrier;")
            result = pc.alloc((1,), ty, "red")
            with pc.body.block("if axis_index(tid) == 0u"):
                total = pc.names.fresh("acc")
                pc.body.emit(f"var {total}: {ty} = {partials.name}[0u];")
                j = pc.names.fresh("j")
                with pc.body.block(f"for {j}: u32 in 1u..{u32(THREADS)}"):
                    pc.body.emit(f"{total} = {combine(total, f'{partials.name}[{j}]')};")
                pc.body.emit(f"{result.name}[0u] = {total};")
            pc.body.emit("barrier;")
            return Scalar(pc.body.let(ty, f"{result.name}[0u]"), ty)

        result = pc.alloc(out_shape, ty, "red")

        def reduce_one(out_index: List[str]) -> None:
            acc = pc.names.fresh("acc")
            pc.body.emit(f"var {acc}: {ty} = {init};")
            with contextlib.ExitStack() as loops:
                red_index = []
                for size in reduced:
                    k = pc.names.fresh("k")
                    loops.enter_context(pc.body.block(f"for {k}: u32 in 0u..{u32(size)}"))
                    red_index.append(k)
                pc.body.emit(f"{acc} = {combine(acc, operand.at(full_index(out_index, red_index)))};")
            pc.body.emit(f"{result.name}[{_index_text(out_index)}] = {acc};")

        pc.for_elements(out_shape, reduce_one)
        pc.body.emit("barrier;")
        if out_shape == ():
            return Scalar(pc.body.let(ty, f"{result.name}[0u]"), ty)
        return pc.buffer_array(result, out_shape)

    return rule
