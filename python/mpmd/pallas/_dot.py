"""Rules for matrix products: `dot_general` (`jnp.dot`) and Mosaic GPU's
`wgmma` on an accumulator ref, on `mma_m16n8k16` where shapes allow (see
_program.py for the mapping)."""

from __future__ import annotations

from typing import List, Optional

from ._compute import _as_array
from ._memory import _ref_of, _split_transforms, _view
from ._program import THREADS, Array, Ref
from ._text import Unsupported, literal, mpmd_type, u32


def rule_dot_general(pc, eqn, ins):
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = eqn.params["dimension_numbers"]
    if lhs_batch or rhs_batch:
        raise Unsupported("dot_general with batch dimensions")
    lhs, rhs = (pc.prepared(_as_array(v)) for v in ins)
    if len(lhs.shape) != 2 or len(rhs.shape) != 2 or len(lhs_contract) != 1 or len(rhs_contract) != 1:
        raise Unsupported("dot_general of other than two 2-D tiles contracting one dimension each")
    out_ty = mpmd_type(eqn.outvars[0].aval.dtype)
    lc, rc = int(lhs_contract[0]), int(rhs_contract[0])
    out_shape = (lhs.shape[1 - lc], rhs.shape[1 - rc])
    result = pc.alloc(out_shape, out_ty, "dot")
    _dot_into(pc, lhs, rhs, lc, rc, result, None)
    return pc.buffer_array(result, out_shape)


def _dot_into(pc, lhs: Array, rhs: Array, lc: int, rc: int, result: Ref, initial: Optional[Array]) -> None:
    """``result = initial + lhs · rhs`` (``initial`` None: zero), accumulated
    in f32 for float outputs: on `mma_m16n8k16` where the tiles are whole
    blocks of 16-bit values, else one thread per output element. Both add
    exact products for k in order, so they give the same bits."""
    out_ty = result.ty
    acc_ty = "f32" if out_ty in ("f32", "f16", "bf16") else out_ty
    depth = lhs.shape[lc]
    out_shape = tuple(result.shape)
    if _fits_mma(lhs, rhs, out_shape, depth, acc_ty):
        _dot_mma(pc, lhs, rhs, lc, rc, out_shape, depth, result, out_ty, initial)
        return

    def widen(expr: str, ty: str) -> str:
        return expr if ty == acc_ty else f"{acc_ty}({expr})"

    def one(index: List[str]) -> None:
        i, j = index
        acc = pc.names.fresh("acc")
        k = pc.names.fresh("k")
        start = literal(0, acc_ty) if initial is None else initial.at([i, j])
        if initial is not None and initial.ty != acc_ty:
            start = f"{acc_ty}({start})"
        pc.body.emit(f"var {acc}: {acc_ty} = {start};")
        with pc.body.block(f"for {k}: u32 in 0u..{u32(depth)}"):
            a_index = [i, k] if lc == 1 else [k, i]
            b_index = [k, j] if rc == 0 else [j, k]
            pc.body.emit(
                f"{acc} = {acc} + {widen(lhs.at(a_index), lhs.ty)} * {widen(rhs.at(b_index), rhs.ty)};"
            )
        value = acc if out_ty == acc_ty else f"{out_ty}({acc})"
        pc.body.emit(f"{result.name}[{i}, {j}] = {value};")

    pc.for_elements(out_shape, one)
    pc.body.emit("barrier;")


#: The shape of one `mma_m16n8k16`: M, N, K.
MMA_M, MMA_N, MMA_K = 16, 8, 16


def _fits_mma(lhs: Array, rhs: Array, out_shape, depth: int, acc_ty: str) -> bool:
    """A 16-bit product with f32 accumulation whose tiles are whole mma blocks."""
    m, n = out_shape
    return (
        lhs.ty == rhs.ty
        and lhs.ty in ("f16", "bf16")
        and acc_ty == "f32"
        and m % MMA_M == 0
        and n % MMA_N == 0
        and depth % MMA_K == 0
    )


def _dot_mma(
    pc,
    lhs: Array,
    rhs: Array,
    lc: int,
    rc: int,
    out_shape,
    depth: int,
    result,
    out_ty: str,
    initial: Optional[Array],
) -> None:
    """C = A B as `mma_m16n8k16` sequences: each warp computes whole 16x8
    tiles of C, gathering its fragments with the layout of docs/text-format.md
    ("Matrix multiply-accumulate"). Every warp runs the same number of rounds
    (a warp past the last tile recomputes it and stores nothing), so each mma
    stands in block-uniform control flow, as WGSL's emulation needs. The sum
    is the scalar path's: products exact, added for k in order in f32."""
    m, n = out_shape
    tiles_n = n // MMA_N
    tiles = (m // MMA_M) * tiles_n
    warps = THREADS // 32
    rounds = -(-tiles // warps)
    body, fresh = pc.body, pc.names.fresh
    lane = body.let("u32", "axis_index(tid) % 32u", "lane")
    warp = body.let("u32", "axis_index(tid) / 32u", "warp")
    g = body.let("u32", f"{lane} >> 2u", "g")
    q = body.let("u32", f"{lane} % 4u", "q")

    def a_at(row: str, k: str) -> str:
        return lhs.at([row, k] if lc == 1 else [k, row])

    def b_at(k: str, col: str) -> str:
        return rhs.at([k, col] if rc == 0 else [col, k])

    r = fresh("r")
    with body.block(f"for {r}: u32 in 0u..{u32(rounds)}"):
        wanted = body.let("u32", f"{warp} + {r} * {u32(warps)}", "tile")
        tile = body.let("u32", f"min({wanted}, {u32(tiles - 1)})", "tile")
        row0 = body.let("u32", f"{tile} / {u32(tiles_n)} * {u32(MMA_M)}", "row")
        col0 = body.let("u32", f"{tile} % {u32(tiles_n)} * {u32(MMA_N)}", "col")
        fa, fb, acc = fresh("fa"), fresh("fb"), fresh("acc")
        body.emit(f"local {fa}: {lhs.ty}[8];")
        body.emit(f"local {fb}: {rhs.ty}[4];")
        body.emit(f"local {acc}: f32[4];")
        i = fresh("i")
        with body.block(f"for {i}: u32 in 0u..4u"):
            if initial is None:
                body.emit(f"{acc}[{i}] = 0.0;")
            else:
                start = initial.at([f"{row0} + {g} + 8u * ({i} / 2u)", f"{col0} + 2u * {q} + {i} % 2u"])
                body.emit(f"{acc}[{i}] = {start if initial.ty == 'f32' else f'f32({start})'};")
        kk = fresh("kk")
        with body.block(f"for {kk}: u32 in 0u..{u32(depth // MMA_K)}"):
            k0 = body.let("u32", f"{kk} * {u32(MMA_K)}", "k")
            i = fresh("i")
            with body.block(f"for {i}: u32 in 0u..8u"):
                row = f"{row0} + {g} + 8u * ({i} / 2u % 2u)"
                col = f"{k0} + 2u * {q} + {i} % 2u + 8u * ({i} / 4u)"
                body.emit(f"{fa}[{i}] = {a_at(row, col)};")
            i = fresh("i")
            with body.block(f"for {i}: u32 in 0u..4u"):
                k = f"{k0} + 2u * {q} + {i} % 2u + 8u * ({i} / 2u)"
                body.emit(f"{fb}[{i}] = {b_at(k, f'{col0} + {g}')};")
            body.emit(f"mma_m16n8k16({acc}, {fa}, {fb}, {acc});")
        with body.block(f"if {wanted} < {u32(tiles)}"):
            i = fresh("i")
            with body.block(f"for {i}: u32 in 0u..4u"):
                value = f"{acc}[{i}]" if out_ty == "f32" else f"{out_ty}({acc}[{i}])"
                body.emit(
                    f"{result.name}[{row0} + {g} + 8u * ({i} / 2u), {col0} + 2u * {q} + {i} % 2u] = {value};"
                )
    body.emit("barrier;")


def rule_wgmma_ref(pc, eqn, ins):
    """``acc += a @ b`` on refs (the accumulator from ``run_scoped(...,
    plgpu.ACC(...))``, the operands in SMEM, untransformed or indexed)."""
    (acc_t, a_t, b_t), _ = _split_transforms(
        eqn, ins, ["acc_transforms_tree", "a_transforms_tree", "b_transforms_tree"], 3
    )
    acc, a, b = (_ref_of(v) for v in ins[:3])
    operands = []
    for ref, transforms in ((a, a_t), (b, b_t)):
        shape, to_base = _view(pc, ref, transforms)
        name = ref.name
        operands.append(
            Array(shape, ref.ty, lambda index, f=to_base, n=name: f"{n}[{', '.join(f(index))}]", 1, True)
        )
    acc_shape, _ = _view(pc, acc, acc_t)
    if acc_t or len(acc_shape) != 2:
        raise Unsupported("a transformed wgmma accumulator")
    lhs, rhs = operands
    if lhs.shape[1] != rhs.shape[0] or (lhs.shape[0], rhs.shape[1]) != tuple(acc_shape):
        raise Unsupported(f"wgmma of shapes {lhs.shape} @ {rhs.shape} into {acc_shape}")
    # The sum reads the accumulator while it writes it: a snapshot first.
    before = pc.materialize(_reading(acc))
    _dot_into(pc, lhs, rhs, 1, 0, acc, before)
    return []


def rule_wgmma_accumulator_deref(pc, eqn, ins):
    acc = _ref_of(ins[0])
    # A value: a later wgmma must not change it.
    return pc.materialize(_reading(acc))


def _reading(ref: Ref) -> Array:
    """The ref's elements as a value to snapshot (not plain, so it is copied)."""
    return Array(tuple(ref.shape), ref.ty, lambda index: f"{ref.name}[{', '.join(index)}]", 1, False)
