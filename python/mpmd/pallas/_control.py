"""Rules for axes and control flow: axis_index, loops, branches, inlined
calls and run_scoped (see _program.py for the mapping)."""

from __future__ import annotations

from typing import List, Sequence

import numpy as np

from . import _compat as jx
from ._text import Unsupported, literal, mpmd_type, ref_type, u32
from . import _program
from ._program import (
    Array,
    CopyBarrier,
    ProgramCompiler,
    Ref,
    Scalar,
    Value,
    _index_text,
    _zero,
)
from ._compute import _as_array, _reindexed


# -------------------------------------------------------------- axes


def rule_axis_index(pc, eqn, ins):
    axis = eqn.params["axis_name"]
    if isinstance(axis, tuple):
        if len(axis) != 1:
            raise Unsupported("axis_index of several axes")
        axis = axis[0]
    if axis in pc.axes:
        return Scalar(pc.body.let("i32", f"i32(axis_index({pc.axes[axis]}))"), "i32")
    if axis == getattr(pc.mesh, "thread_name", None):
        return Scalar("0", "i32")
    if axis in pc.other_axes:
        raise Unsupported(
            f"axis_index of `{axis}`, an axis of another mesh (its size is lax.axis_size('{axis}'))"
        )
    raise Unsupported(f"axis_index of unknown axis `{axis}`")


def rule_program_id(pc, eqn, ins):
    axis = int(eqn.params["axis"])
    names = list(getattr(pc.mesh, "grid_names", ()))
    if axis >= len(names):
        raise Unsupported(f"program_id({axis}) of a mesh with {len(names)} grid axes")
    return Scalar(pc.body.let("i32", f"i32(axis_index({pc.axes[names[axis]]}))"), "i32")


def rule_num_programs(pc, eqn, ins):
    axis = int(eqn.params["axis"])
    return Scalar(str(int(list(getattr(pc.mesh, "grid", ()))[axis])), "i32")


# ------------------------------------------------------- control flow


def _carry_storage(pc: ProgramCompiler, value: Value, aval) -> Value:
    if isinstance(value, Ref):
        return value
    ty = mpmd_type(aval.dtype)
    if tuple(aval.shape) == ():
        name = pc.names.fresh("c")
        init = pc.scalar_of(value).expr if value is not None else _zero(ty)
        pc.body.emit(f"var {name}: {ty} = {init};")
        return Scalar(name, ty)
    buffer = pc.alloc(tuple(aval.shape), ty, "carry")
    if value is not None:
        pc.materialize(_as_array(value), into=buffer)
    return pc.buffer_array(buffer, tuple(aval.shape))


def _assign(pc: ProgramCompiler, holders: Sequence[Value], values: Sequence[Value]) -> None:
    """Loop carries (or cond results) take new values: arrays first (they
    may read the old scalars), then scalars through fresh lets."""
    staged = []
    for holder, value in zip(holders, values):
        if isinstance(holder, Array):
            staged.append(pc.materialize(_as_array(value)))
        else:
            staged.append(None)
    for holder, value in zip(holders, staged):
        if isinstance(holder, Array) and value is not None:
            pc.materialize(value, into=holder.ref)
    snapshots = []
    for holder, value in zip(holders, values):
        if isinstance(holder, Scalar):
            snapshots.append(pc.body.let(holder.ty, pc.scalar_of(value).expr, "n"))
        else:
            snapshots.append(None)
    for holder, snap in zip(holders, snapshots):
        if snap is not None:
            pc.body.emit(f"{holder.expr} = {snap};")


def rule_scan(pc, eqn, ins):
    p = eqn.params
    body = p["jaxpr"]
    n_consts, n_carry, length = int(p["num_consts"]), int(p["num_carry"]), int(p["length"])
    consts, init, xs = ins[:n_consts], ins[n_consts : n_consts + n_carry], ins[n_consts + n_carry :]
    carry_avals = [v.aval for v in body.jaxpr.invars[n_consts : n_consts + n_carry]]
    carries = [_carry_storage(pc, v, a) for v, a in zip(init, carry_avals)]
    y_avals = [v.aval for v in eqn.outvars[n_carry:]]
    ys = [pc.alloc(tuple(a.shape), mpmd_type(a.dtype), "ys") for a in y_avals]
    k = pc.names.fresh("k")

    def emit_body() -> None:
        step = k if not p["reverse"] else f"({u32(length - 1)} - {k})"
        x_values = []
        for x in xs:
            x = _as_array(x)
            sliced = _reindexed(pc, x, x.shape[1:], lambda index, x=x: [step, *index])
            x_values.append(pc.scalar_of(sliced) if sliced.shape == () else sliced)
        outs = pc.run(body.jaxpr, [*consts, *carries, *x_values], body.consts)
        new_carry, new_ys = outs[:n_carry], outs[n_carry:]
        for buffer, y in zip(ys, new_ys):
            y = _as_array(y)
            target = Ref(buffer.name, buffer.shape, buffer.ty, buffer.space, True)
            shape = y.shape

            def store(index: List[str], y=y, target=target) -> None:
                pc.body.emit(f"{target.name}[{_index_text([step, *index])}] = {y.at(index)};")

            pc.for_elements(shape, store)
            pc.body.emit("barrier;")
        _assign(pc, carries, new_carry)

    pc.uniform_loop(f"for {k}: u32 in 0u..{u32(length)}", emit_body)
    y_outs = [pc.buffer_array(b, tuple(a.shape)) for b, a in zip(ys, y_avals)]
    return [*carries, *y_outs]


def rule_while(pc, eqn, ins):
    p = eqn.params
    cond, body = p["cond_jaxpr"], p["body_jaxpr"]
    nc, nb = int(p["cond_nconsts"]), int(p["body_nconsts"])
    cond_consts, body_consts, init = ins[:nc], ins[nc : nc + nb], ins[nc + nb :]
    carries = [_carry_storage(pc, v, var.aval) for v, var in zip(init, body.jaxpr.invars[nb:])]

    def emit_body() -> None:
        (go,) = pc.run(cond.jaxpr, [*cond_consts, *carries], cond.consts)
        go = pc.scalar_of(go)
        with pc.body.block(f"if !({go.expr})"):
            pc.body.emit("break;")
        outs = pc.run(body.jaxpr, [*body_consts, *carries], body.consts)
        _assign(pc, carries, outs)

    pc.uniform_loop(f"while true max {u32(_program.WHILE_MAX)}", emit_body)
    return carries


def rule_cond(pc, eqn, ins):
    branches = eqn.params["branches"]
    index = pc.scalar_of(ins[0])
    operands = ins[1:]
    holders = [_carry_storage(pc, None, v.aval) for v in eqn.outvars]

    def emit_branch(k: int) -> None:
        outs = pc.run(branches[k].jaxpr, operands, branches[k].consts)
        _assign(pc, holders, outs)

    def chain(k: int) -> None:
        if k == len(branches) - 1:
            emit_branch(k)
            return
        test = (
            f"{index.expr} <= {literal(k, index.ty)}" if k == 0 else f"{index.expr} == {literal(k, index.ty)}"
        )
        with pc.body.block(f"if {test}"):
            emit_branch(k)
        with pc.body.else_block():
            chain(k + 1)

    chain(0)
    return holders


def rule_inline(param: str):
    def rule(pc, eqn, ins):
        closed = eqn.params[param]
        jaxpr = getattr(closed, "jaxpr", closed)
        consts = getattr(closed, "consts", ())
        return pc.run(jaxpr, ins, consts)

    return rule


def rule_custom_vjp(pc, eqn, ins):
    for name in ("call_jaxpr", "fun_jaxpr"):
        if name in eqn.params:
            return rule_inline(name)(pc, eqn, ins)
    raise Unsupported("custom_vjp_call without its primal jaxpr")


def rule_run_scoped(pc, eqn, ins):
    jaxpr = eqn.params["jaxpr"]
    refs = []
    for var in jaxpr.invars:
        refs.append(scratch_ref(pc, var.aval, "scoped"))
    # The eqn's operands are the values the body closes over (constvars).
    return pc.run(jaxpr, refs, ins)


def scratch_ref(pc: ProgramCompiler, aval, prefix: str) -> Value:
    """A ref run_scoped allocates: the program's own scratch operand."""
    inner = getattr(aval, "inner_aval", aval)
    dtype = inner.dtype
    shape = tuple(inner.shape)
    if isinstance(dtype, jx.AbstractSemaphoreTy):
        name = pc.names.fresh(prefix)
        pc.own_scratch.append((name, ref_type("sem", "i32", shape, owner=pc.mesh_name)))
        return Ref(name, shape or (1,), "i32", "sem", True) if shape else Ref(name, (1,), "i32", "sem", True)
    if not isinstance(dtype, np.dtype) and "barrier" in str(dtype).lower():
        return CopyBarrier()
    memory_space = str(getattr(aval, "memory_space", None)).lower()
    ty = mpmd_type(dtype)
    if "regs" in memory_space:
        # A wgmma accumulator (plgpu.ACC): a temporary that starts at zero.
        buffer = pc.alloc(shape, ty, "acc")
        pc.materialize(Array(shape, ty, lambda index: _zero(ty), 1), into=buffer)
        return buffer
    return pc.alloc(shape, ty, prefix, _space_of(memory_space))


def _space_of(memory_space) -> str:
    text = str(memory_space).lower()
    if "smem" in text:
        return "smem"
    return "gmem"
