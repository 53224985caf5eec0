"""Rules for refs: loads, stores, addupdate, atomics, semaphores and
Mosaic GPU copies (see _program.py for the mapping)."""

from __future__ import annotations

import dataclasses
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from . import _compat as jx
from ._text import Unsupported, u32
from ._program import (
    Array,
    ProgramCompiler,
    Ref,
    Scalar,
    Value,
    _index_text,
    _to_u32,
    _zero,
)


# ----------------------------------------------------------------- refs


def _view(
    pc: ProgramCompiler, ref: Ref, transforms
) -> Tuple[Tuple[int, ...], Callable[[List[str]], List[str]]]:
    """The shape of ``ref`` seen through Pallas indexers and the map from a
    view index to the ref's index."""
    shape = tuple(ref.shape)
    to_base: Callable[[List[str]], List[str]] = lambda index: list(index)
    for transform in transforms or ():
        if not isinstance(transform, jx.NDIndexer):
            raise Unsupported(f"ref transform {type(transform).__name__} (only indexing)")
        dims = []  # per base dim: ("slice", start, stride, size) | ("int", expr)
        out_shape = []
        for indexer in transform.indices:
            if isinstance(indexer, jx.Slice):
                start = _static_or_scalar(pc, indexer.start)
                size = indexer.size
                if not isinstance(size, (int, np.integer)):
                    raise Unsupported("a slice of traced size")
                dims.append(("slice", start, int(indexer.stride), int(size)))
                out_shape.append(int(size))
            else:
                value = _static_or_scalar(pc, indexer)
                if value is None:
                    raise Unsupported("indexing a ref with an array of indices (gather)")
                dims.append(("int", value))
        if transform.int_indexer_shape not in ((), None) and tuple(transform.int_indexer_shape) != ():
            raise Unsupported("indexing a ref with an array of indices (gather)")
        previous = to_base

        def mapped(index: List[str], dims=dims, previous=previous) -> List[str]:
            out = []
            k = 0
            for dim in dims:
                if dim[0] == "int":
                    out.append(dim[1])
                else:
                    _, start, stride, _size = dim
                    i = index[k]
                    k += 1
                    term = i if stride == 1 else f"{i} * {u32(stride)}"
                    out.append(term if start == "0u" else f"{start} + {term}")
            return previous(out)

        to_base = mapped
        shape = tuple(out_shape)
    return shape, to_base


def _static_or_scalar(pc: ProgramCompiler, value) -> Optional[str]:
    """A u32 expression of a static int or a scalar jaxpr value; None for arrays."""
    if isinstance(value, (int, np.integer)):
        return u32(int(value))
    if isinstance(value, Scalar):
        return _to_u32(value)
    if isinstance(value, Array):
        if value.shape == ():
            return _to_u32(pc.scalar_of(value))
        return None
    if isinstance(value, jx.jax_core.Literal):
        return u32(int(value.val))
    raise Unsupported(f"an index of kind {type(value).__name__}")


def _unflatten_args(eqn, ins, tree_param: str = "tree"):
    return jx.tree_util.tree_unflatten(eqn.params[tree_param], ins)


def _ref_of(value) -> Ref:
    if isinstance(value, Ref):
        return value
    raise Unsupported("expected a ref")


def rule_get(pc: ProgramCompiler, eqn, ins):
    ref = _ref_of(ins[0])
    transforms = _unflatten_args(eqn, ins[1:])
    shape, to_base = _view(pc, ref, transforms)
    name = ref.name
    if ref.space == "sem":
        raise Unsupported("reading a semaphore as memory (use pl.semaphore_read)")

    def at(index: List[str]) -> str:
        return f"{name}[{_index_text(to_base(index))}]"

    if shape == ():
        return Scalar(pc.body.let(ref.ty, at([])), ref.ty)
    value = Array(shape, ref.ty, at, 1, plain=True)
    if ref.writable:
        # Pallas reads are values: a later write must not change them.
        return pc.materialize(dataclasses.replace(value, plain=False))
    return value


def _store_loop(
    pc: ProgramCompiler, ref: Ref, transforms, value: Value, combine: Callable[[str, str], str]
) -> Tuple[int, ...]:
    if not ref.writable:
        raise Unsupported(f"a write to input `{ref.name}` (pass a jax.new_ref to write in place)")
    shape, to_base = _view(pc, ref, transforms)
    element = pc.operand_at(value, shape)

    def store(index: List[str]) -> None:
        target = f"{ref.name}[{_index_text(to_base(index))}]"
        pc.body.emit(f"{target} = {combine(target, element(index))};")

    pc.for_elements(shape, store)
    pc.body.emit("barrier;")
    return shape


def rule_swap(pc: ProgramCompiler, eqn, ins):
    ref = _ref_of(ins[0])
    value = ins[1]
    transforms = _unflatten_args(eqn, ins[2:])
    old = None
    if pc.uses.get(eqn.outvars[0], 0) > 0:
        old = rule_get(pc, eqn, [ref, *ins[2:]])
    _store_loop(pc, ref, transforms, value, lambda _target, v: v)
    if old is None:
        shape, _ = _view(pc, ref, transforms)
        return Scalar(_zero(ref.ty), ref.ty) if shape == () else Array(shape, ref.ty, lambda i: _zero(ref.ty))
    return old


def rule_addupdate(pc: ProgramCompiler, eqn, ins):
    ref = _ref_of(ins[0])
    transforms = _unflatten_args(eqn, ins[2:])
    _store_loop(pc, ref, transforms, ins[1], lambda target, v: f"{target} + {v}")
    return []


ATOMICS = {
    "ADD": "atomic_add",
    "MAX": "atomic_max",
    "MIN": "atomic_min",
    "AND": "atomic_and",
    "OR": "atomic_or",
    "XOR": "atomic_xor",
}


def rule_mgpu_atomic(pc: ProgramCompiler, eqn, ins):
    ref, transforms, value = _unflatten_args(eqn, ins, "args_tree")
    ref = _ref_of(ref)
    op = ATOMICS.get(getattr(eqn.params["atomic_type"], "name", str(eqn.params["atomic_type"])))
    if op is None:
        raise Unsupported(f"atomic {eqn.params['atomic_type']}")
    shape, to_base = _view(pc, ref, transforms)
    element = pc.operand_at(value, shape)

    def atomic(index: List[str]) -> None:
        pc.body.emit(f"{op}({ref.name}[{_index_text(to_base(index))}], {element(index)});")

    pc.for_elements(shape, atomic)
    pc.body.emit("barrier;")
    return []


def _sem_target(pc: ProgramCompiler, ref: Ref, transforms) -> str:
    if ref.space != "sem":
        raise Unsupported("a semaphore operation on a ref that is not a semaphore")
    shape, to_base = _view(pc, ref, transforms)
    if shape != ():
        raise Unsupported("a semaphore operation on several semaphores at once")
    return f"{ref.name}[{_index_text(to_base([]))}]"


def rule_semaphore_signal(pc: ProgramCompiler, eqn, ins):
    args = _unflatten_args(eqn, ins, "args_tree")
    ref, transforms, amount = args[0], args[1], args[2]
    if len(args) > 3 and any(a is not None for a in args[3:]):
        raise Unsupported("signalling another device or core (device_id / core_index)")
    target = _sem_target(pc, _ref_of(ref), transforms)
    pc.body.emit(f"signal({target}, {_i32(pc, amount)});")
    return []


def rule_semaphore_wait(pc: ProgramCompiler, eqn, ins):
    args = _unflatten_args(eqn, ins, "args_tree")
    ref, transforms, amount = args[0], args[1], args[2]
    decrement = args[3] if len(args) > 3 else True
    if isinstance(decrement, Scalar):
        # A static flag travels as a literal operand of the equation.
        if decrement.expr not in ("true", "false"):
            raise Unsupported("a semaphore_wait whose `decrement` is not known when traced")
        decrement = decrement.expr == "true"
    target = _sem_target(pc, _ref_of(ref), transforms)
    op = "wait" if decrement else "wait_nodec"
    pc.body.emit(f"{op}({target}, {_i32(pc, amount)});")
    return []


def rule_semaphore_read(pc: ProgramCompiler, eqn, ins):
    ref, transforms = _unflatten_args(eqn, ins, "args_tree")
    target = _sem_target(pc, _ref_of(ref), transforms)
    return Scalar(pc.body.let("i32", f"read({target})"), "i32")


def _i32(pc: ProgramCompiler, value) -> str:
    scalar = pc.scalar_of(value)
    return scalar.expr if scalar.ty == "i32" else f"i32({scalar.expr})"


def _copy(pc: ProgramCompiler, src: Ref, src_t, dst: Ref, dst_t) -> None:
    src_shape, src_base = _view(pc, src, src_t)
    dst_shape, dst_base = _view(pc, dst, dst_t)
    if src_shape != dst_shape:
        raise Unsupported(f"a copy from shape {src_shape} to shape {dst_shape}")
    if not dst.writable:
        raise Unsupported(f"a copy into input `{dst.name}`")

    def copy(index: List[str]) -> None:
        pc.body.emit(
            f"{dst.name}[{_index_text(dst_base(index))}] = {src.name}[{_index_text(src_base(index))}];"
        )

    pc.for_elements(src_shape, copy)
    pc.body.emit("barrier;")


def _split_transforms(eqn, ins, names: Sequence[str], fixed: int):
    trees = [eqn.params[n] for n in names]
    rest = list(ins[fixed:])
    out = []
    for tree in trees:
        if tree is None:  # no transforms (wgmma passes None)
            out.append(())
            continue
        n = tree.num_leaves
        out.append(jx.tree_util.tree_unflatten(tree, rest[:n]))
        rest = rest[n:]
    return out, rest


def rule_copy_gmem_to_smem(pc: ProgramCompiler, eqn, ins):
    if eqn.params.get("collective_axes"):
        raise Unsupported("a collective (multicast) copy")
    (src_t, dst_t, _bar_t), _ = _split_transforms(
        eqn, ins, ["src_transforms_treedef", "dst_transforms_treedef", "barrier_transforms_treedef"], 3
    )
    _copy(pc, _ref_of(ins[0]), src_t, _ref_of(ins[1]), dst_t)
    return []


def rule_copy_smem_to_gmem(pc: ProgramCompiler, eqn, ins):
    if eqn.params.get("reduction_op") is not None:
        raise Unsupported("a reducing copy")
    (src_t, dst_t), rest = _split_transforms(
        eqn, ins, ["src_transforms_treedef", "dst_transforms_treedef"], 2
    )
    if eqn.params.get("has_user_predicate"):
        raise Unsupported("a predicated copy")
    _copy(pc, _ref_of(ins[0]), src_t, _ref_of(ins[1]), dst_t)
    return []


def rule_no_op(pc: ProgramCompiler, eqn, ins):
    # Copies complete synchronously, so waiting for them is a barrier at most.
    pc.body.emit("barrier;")
    return []
