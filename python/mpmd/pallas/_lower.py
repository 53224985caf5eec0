"""The compiler from Pallas ``mpmd_map`` jaxprs to mpmd modules.

One rule per primitive (``RULES``), each turning the jaxpr equation's
operands into mpmd statements and values. docs/pallas.md is the user's
account of the mapping; this docstring is the implementer's.

**Blocks and threads.** A Pallas mesh becomes an mpmd mesh with the same
grid (and cluster) axes and ``threads tid = 128``: a Mosaic GPU "thread" is a
warpgroup of 128 CUDA threads, and a mesh runs one (``num_threads`` of 1 or
unset; more are refused). The kernel body runs once per block, so its
scalars (``i32[]`` values: grid indices, loop counters, tile offsets) are
``let``s every thread computes alike.

**Arrays.** An array value is spread over the block's 128 threads
element-cyclically: thread ``t`` owns the elements whose row-major flat
index ``e`` has ``e % 128 == t``. A value is *lazy* (a function from an
index to an mpmd expression: loads from a read-only input, elementwise
arithmetic, ``iota``, broadcasts, reshapes, transposes, slices) until it
must exist in memory: when it is used more than once and is not a plain
load, when it feeds a reduction or ``dot_general``, when it is read from a
ref that the call may write (a snapshot, as Pallas's value semantics
require), or when it grows deep. Then it is *materialized*: each thread
stores its elements to a temporary (``smem`` of the program's mesh while
the program's temporaries fit ``SMEM_TEMP_BUDGET``, else ``gmem`` owned by
the mesh: one instance per block), followed by a ``barrier``, after which
any thread may read any element.

**Memory.** Stores, ``addupdate`` and atomics are element loops over the
owned elements followed by a barrier; a store of a scalar is done by thread
0. Semaphore operations act once per block in mpmd, as they do for a
Pallas thread. Mosaic GPU's asynchronous copies run synchronously (each is
an element loop and a barrier), so the copy is complete by the time its
``barrier_wait`` / ``wait_smem_to_gmem`` returns, as Pallas promises; the
copy barriers themselves have no mpmd operand.

**Control flow.** ``scan`` (``fori_loop`` with static bounds) is a ``for``;
``while`` (``fori_loop`` with traced bounds, ``while_loop``) is
``while true max WHILE_MAX`` with a ``break``; ``cond`` (``pl.when``,
``lax.cond``, ``lax.switch``) is an ``if`` chain. Loop carries are ``var``s
(scalars) or temporaries (arrays). A loop whose body synchronises starts
each iteration with a barrier, so a temporary is never rewritten while a
slower thread still reads the previous iteration's value.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import MpmdError
from . import _compat as jx
from ._text import Body, Names, Unsupported, literal, mpmd_type, ref_type, u32

#: Threads of an mpmd block: one Mosaic GPU warpgroup.
THREADS = 128
#: Bytes of a program's temporaries kept in smem; the rest go to gmem.
SMEM_TEMP_BUDGET = 16 * 1024
#: The maximum of the `while` loops that `fori_loop` with traced bounds
#: and `while_loop` become: a loop that runs longer fails as `loop_limit`
#: in checked mode (and stops in fast mode). WGSL on lavapipe charges the
#: maximum against its 65,535-visit loop budget, so it stays modest.
WHILE_MAX = 1024
#: How deep a lazy expression may grow before it is materialized.
MAX_LAZY_DEPTH = 16

DOCS = "docs/pallas.md#supported-primitives"


# ----------------------------------------------------------------- values


@dataclasses.dataclass
class Scalar:
    """A value every thread of the block computes alike."""

    expr: str
    ty: str


@dataclasses.dataclass
class Array:
    """An array value: ``at(index)`` is the mpmd expression of an element
    (``index`` lists one u32 expression per dimension)."""

    shape: Tuple[int, ...]
    ty: str
    at: Callable[[List[str]], str]
    depth: int = 1
    #: A load from memory or a temporary: cheap to evaluate again.
    plain: bool = False
    #: The temporary holding it, when it is one.
    ref: Optional["Ref"] = None

    @property
    def size(self) -> int:
        return int(math.prod(self.shape))


@dataclasses.dataclass
class Ref:
    """An mpmd operand a kernel names (a Pallas ref)."""

    name: str
    shape: Tuple[int, ...]
    ty: str
    space: str  # gmem | smem | sem
    writable: bool


@dataclasses.dataclass
class CopyBarrier:
    """A Mosaic GPU copy barrier: copies are synchronous, so nothing."""


Value = Any  # Scalar | Array | Ref | CopyBarrier


def _index_text(index: Sequence[str]) -> str:
    return ", ".join(index) if index else "0u"


def _to_u32(value: Scalar) -> str:
    if value.ty == "u32":
        return value.expr
    return f"u32({value.expr})"


def _zero(ty: str) -> str:
    return literal(0, ty)


def _byte_size(ty: str) -> int:
    return 2 if ty in ("f16", "bf16") else 4


# ----------------------------------------------------------- the module


@dataclasses.dataclass
class Operand:
    name: str
    kind: str  # input | output | scalar | scratch
    text: str  # the map's operand text (type and suffixes)


@dataclasses.dataclass
class Compiled:
    """A lowered map: the module text and how Pallas's operands travel."""

    text: str
    #: One entry per Pallas input: ("input", name, shape) or ("scalar", name).
    inputs: List[Tuple[str, str, Tuple[int, ...]]]
    #: One entry per Pallas output: (name, shape).
    outputs: List[Tuple[str, Tuple[int, ...]]]
    map_name: str = "main"


class LoweringError(MpmdError, NotImplementedError):
    """A Pallas program outside the subset mpmd.pallas lowers; the message
    names the primitive, its source line and where the subset is listed."""


def _where(eqns) -> str:
    """`file:line (function)` of the user's code that made the innermost of
    ``eqns`` (the equations being lowered, outermost first) that knows it:
    an equation inside `jnp` code's own `jit` only knows JAX's lines."""
    for eqn in reversed(eqns):
        try:
            frame = jx.source_info_util.user_frame(eqn.source_info.traceback)
        except Exception:  # noqa: BLE001 - source info is best effort
            frame = None
        if frame is not None:
            return f"{frame.file_name}:{frame.start_line} ({frame.function_name})"
    return "an unknown line (the jaxpr carries no source information)"


class ModuleBuilder:
    """The module's meshes, operands and kernels."""

    def __init__(self) -> None:
        self.names = Names()
        self.meshes: List[str] = []
        self.scratch: List[Tuple[str, str]] = []  # (name, operand text)
        self.kernels: List[str] = []
        self.operands: List[Operand] = []

    def mesh(self, mesh, role: str) -> Tuple[str, Dict[Any, str]]:
        """Declares ``mesh``; returns its name and Pallas axis -> mpmd axis."""
        num_threads = getattr(mesh, "num_threads", None)
        if num_threads not in (None, 1):
            raise Unsupported(
                f"a mesh with num_threads={num_threads}: mpmd.pallas runs one Mosaic GPU "
                "thread (warpgroup) per block"
            )
        name = self.names.claim(getattr(mesh, "kernel_name", None) or role)
        axes: Dict[Any, str] = {}
        lines = [f"mesh {name} {{"]
        grid = list(zip(getattr(mesh, "grid_names", ()), getattr(mesh, "grid", ())))
        cluster = list(zip(getattr(mesh, "cluster_names", ()), getattr(mesh, "cluster", ())))
        for title, pairs in (("grid", grid), ("cluster", cluster)):
            if pairs:
                parts = []
                for axis, size in pairs:
                    mpmd_axis = self.axis_name(axis)
                    axes[axis] = mpmd_axis
                    parts.append(f"{mpmd_axis} = {int(size)}")
                lines.append(f"  {title} [{', '.join(parts)}];")
        lines.append(f"  threads tid = {THREADS};")
        lines.append("}")
        self.meshes.append("\n".join(lines))
        return name, axes

    def axis_name(self, axis) -> str:
        # Axes of several meshes may share a Pallas name (with one size, which
        # Pallas checks): one mpmd name each.
        key = ("axis", axis)
        if not hasattr(self, "_axes"):
            self._axes: Dict[Any, str] = {}
        if key not in self._axes:
            self._axes[key] = self.names.claim(f"{axis}")
        return self._axes[key]


class ProgramCompiler:
    """Compiles one program's jaxpr into one kernel."""

    def __init__(self, builder: ModuleBuilder, mesh_name: str, axes: Dict[Any, str],
                 mesh, other_axes: Dict[Any, int]) -> None:
        self.builder = builder
        self.names = builder.names
        self.body = Body(builder.names)
        self.mesh_name = mesh_name
        self.axes = axes
        self.mesh = mesh
        self.other_axes = other_axes
        self.smem_bytes = 0
        self.own_scratch: List[Tuple[str, str]] = []
        #: The equations being lowered, outermost first.
        self.eqns: List[Any] = []
        self.uses: Dict[Any, int] = {}

    # ------------------------------------------------------- environment

    def read(self, env: Dict[Any, Value], atom) -> Value:
        if isinstance(atom, jx.jax_core.Literal):
            return self.constant(atom.val, atom.aval)
        return env[atom]

    def constant(self, value, aval) -> Value:
        ty = mpmd_type(aval.dtype)
        array = np.asarray(value)
        if array.shape == ():
            return Scalar(literal(array, ty), ty)
        if array.size > 64:
            raise Unsupported(f"a constant array of {array.size} elements (pass it as an input)")
        flat = [literal(v, ty) for v in array.reshape(-1)]
        shape = tuple(array.shape)

        def at(index: List[str]) -> str:
            flat_index = self.flat_index(shape, index)
            expr = flat[-1]
            for k in range(len(flat) - 2, -1, -1):
                expr = f"select({flat_index} == {u32(k)}, {flat[k]}, {expr})"
            return expr

        return Array(shape, ty, at, depth=len(flat))

    def run(self, jaxpr, args: Sequence[Value], consts: Sequence[Any] = ()) -> List[Value]:
        env: Dict[Any, Value] = {}
        for var, const in zip(jaxpr.constvars, consts):
            env[var] = self.constant(const, var.aval)
        for var, arg in zip(jaxpr.invars, args):
            env[var] = arg
        uses = _use_counts(jaxpr)
        outer_uses = self.uses
        self.uses = uses
        for eqn in jaxpr.eqns:
            rule = RULES.get(eqn.primitive.name)
            self.eqns.append(eqn)
            try:
                if rule is None:
                    raise Unsupported("this primitive is not in the supported subset")
                ins = [self.read(env, v) for v in eqn.invars]
                outs = rule(self, eqn, ins)
            except Unsupported as why:
                raise LoweringError(
                    f"mpmd.pallas cannot lower `{eqn.primitive.name}` at {_where(self.eqns)}: {why} "
                    f"(the supported primitives are listed in {DOCS})"
                ) from None
            finally:
                self.eqns.pop()
            if not eqn.primitive.multiple_results:
                outs = [outs]
            for var, out in zip(eqn.outvars, outs):
                if isinstance(var, jx.jax_core.DropVar):
                    continue
                if isinstance(out, Array) and not out.plain and (
                    uses.get(var, 0) > 1 or out.depth > MAX_LAZY_DEPTH
                ):
                    out = self.materialize(out)
                env[var] = out
        self.uses = outer_uses
        return [self.read(env, v) for v in jaxpr.outvars]

    # ------------------------------------------------------------ threads

    def flat_index(self, shape: Sequence[int], index: Sequence[str]) -> str:
        if not shape:
            return "0u"
        expr = index[0]
        for size, i in zip(shape[1:], index[1:]):
            expr = f"({expr}) * {u32(size)} + {i}"
        return expr

    def unflatten(self, shape: Sequence[int], flat: str) -> List[str]:
        """Lets for the multi-index of row-major flat index ``flat``."""
        index: List[str] = []
        stride = int(math.prod(shape))
        for d, size in enumerate(shape):
            stride //= int(size)
            expr = flat if stride == 1 else f"{flat} / {u32(stride)}"
            if d > 0:
                expr = f"({expr}) % {u32(size)}"
            index.append(self.body.let("u32", expr, "i"))
        return index

    def for_elements(self, shape: Sequence[int], emit: Callable[[List[str]], None]) -> None:
        """Runs ``emit(index)`` for each element this thread owns."""
        n = int(math.prod(shape))
        if n == 0:
            return
        if not shape:
            with self.body.block("if axis_index(tid) == 0u"):
                emit([])
            return
        if n <= THREADS:
            with self.body.block(f"if axis_index(tid) < {u32(n)}"):
                flat = self.body.let("u32", "axis_index(tid)", "e")
                emit(self.unflatten(shape, flat) if len(shape) > 1 else [flat])
            return
        rounds = -(-n // THREADS)
        r = self.names.fresh("r")
        with self.body.block(f"for {r}: u32 in 0u..{u32(rounds)}"):
            flat = self.body.let("u32", f"axis_index(tid) + {r} * {u32(THREADS)}", "e")

            def inner() -> None:
                emit(self.unflatten(shape, flat) if len(shape) > 1 else [flat])

            if n % THREADS:
                with self.body.block(f"if {flat} < {u32(n)}"):
                    inner()
            else:
                inner()

    def alloc(self, shape: Sequence[int], ty: str, prefix: str = "tmp",
              space: Optional[str] = None) -> Ref:
        """A temporary (or run_scoped scratch) of this program's blocks."""
        shape = tuple(int(d) for d in shape) or (1,)
        name = self.names.fresh(prefix)
        size = int(math.prod(shape)) * _byte_size(ty)
        if space is None:
            space = "smem" if self.smem_bytes + size <= SMEM_TEMP_BUDGET else "gmem"
        if space == "smem":
            self.smem_bytes += size
        text = ref_type(space, ty, shape, owner=self.mesh_name)
        self.own_scratch.append((name, text))
        return Ref(name, shape, ty, space, writable=True)

    def materialize(self, value: Array, into: Optional[Ref] = None) -> Array:
        target = into or self.alloc(value.shape, value.ty)
        shape = value.shape

        def store(index: List[str]) -> None:
            self.body.emit(f"{target.name}[{_index_text(index)}] = {value.at(index)};")

        self.for_elements(shape, store)
        self.body.emit("barrier;")
        return self.buffer_array(target, shape)

    def buffer_array(self, ref: Ref, shape: Tuple[int, ...]) -> Array:
        name = ref.name
        return Array(shape, ref.ty, lambda index: f"{name}[{_index_text(index)}]", 1, plain=True, ref=ref)

    def scalar_of(self, value: Value) -> Scalar:
        """A 0-d array as a Scalar (a let of its one element)."""
        if isinstance(value, Scalar):
            return value
        if isinstance(value, Array) and value.shape == ():
            if not value.plain:
                value = self.materialize(value)
            return Scalar(self.body.let(value.ty, value.at([])), value.ty)
        raise Unsupported("expected a scalar")

    def operand_at(self, value: Value, shape: Tuple[int, ...]) -> Callable[[List[str]], str]:
        """Element access of an elementwise operand broadcast to ``shape``."""
        if isinstance(value, Scalar):
            return lambda index: value.expr
        if value.shape == () and shape != ():
            return lambda index: value.at([])
        return value.at

    def prepared(self, value: Value) -> Value:
        """A value read many times (reductions, dot): materialized unless plain."""
        if isinstance(value, Array) and not value.plain:
            return self.materialize(value)
        return value

    def uniform_loop(self, header: str, emit_body: Callable[[], None]) -> None:
        """A loop whose body starts with a barrier when it synchronises."""
        with self.body.block(header):
            start = len(self.body.lines)
            self.body.loops += 1
            try:
                emit_body()
            finally:
                self.body.loops -= 1
            inner = self.body.lines[start:]
            if any(line.strip() in ("barrier;",) or line.strip().startswith(("signal(", "wait("))
                   for line in inner):
                self.body.lines.insert(start, "  " * self.body.depth + "barrier;")


def _use_counts(jaxpr) -> Dict[Any, int]:
    counts: Dict[Any, int] = {}
    for eqn in jaxpr.eqns:
        for v in eqn.invars:
            if isinstance(v, jx.jax_core.Var):
                counts[v] = counts.get(v, 0) + 1
    for v in jaxpr.outvars:
        if isinstance(v, jx.jax_core.Var):
            counts[v] = counts.get(v, 0) + 1
    return counts


# ----------------------------------------------------------------- refs


def _view(pc: ProgramCompiler, ref: Ref, transforms) -> Tuple[Tuple[int, ...], Callable[[List[str]], List[str]]]:
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


def _store_loop(pc: ProgramCompiler, ref: Ref, transforms, value: Value,
                combine: Callable[[str, str], str]) -> Tuple[int, ...]:
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


ATOMICS = {"ADD": "atomic_add", "MAX": "atomic_max", "MIN": "atomic_min",
           "AND": "atomic_and", "OR": "atomic_or", "XOR": "atomic_xor"}


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
        n = tree.num_leaves
        out.append(jx.tree_util.tree_unflatten(tree, rest[:n]))
        rest = rest[n:]
    return out, rest


def rule_copy_gmem_to_smem(pc: ProgramCompiler, eqn, ins):
    if eqn.params.get("collective_axes"):
        raise Unsupported("a collective (multicast) copy")
    (src_t, dst_t, _bar_t), _ = _split_transforms(
        eqn, ins, ["src_transforms_treedef", "dst_transforms_treedef", "barrier_transforms_treedef"], 3)
    _copy(pc, _ref_of(ins[0]), src_t, _ref_of(ins[1]), dst_t)
    return []


def rule_copy_smem_to_gmem(pc: ProgramCompiler, eqn, ins):
    if eqn.params.get("reduction_op") is not None:
        raise Unsupported("a reducing copy")
    (src_t, dst_t), rest = _split_transforms(
        eqn, ins, ["src_transforms_treedef", "dst_transforms_treedef"], 2)
    if eqn.params.get("has_user_predicate"):
        raise Unsupported("a predicated copy")
    _copy(pc, _ref_of(ins[0]), src_t, _ref_of(ins[1]), dst_t)
    return []


def rule_no_op(pc: ProgramCompiler, eqn, ins):
    # Copies complete synchronously, so waiting for them is a barrier at most.
    pc.body.emit("barrier;")
    return []


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
    return _elementwise(pc, eqn, ins, (lambda a, b: f"({a} && {b})") if _is_bool(eqn) else (lambda a, b: f"({a} & {b})"))


def rule_or(pc, eqn, ins):
    return _elementwise(pc, eqn, ins, (lambda a, b: f"({a} || {b})") if _is_bool(eqn) else (lambda a, b: f"({a} | {b})"))


def rule_xor(pc, eqn, ins):
    return _elementwise(pc, eqn, ins, (lambda a, b: f"({a} != {b})") if _is_bool(eqn) else (lambda a, b: f"({a} ^ {b})"))


def rule_not(pc, eqn, ins):
    return _elementwise(pc, eqn, ins, (lambda a: f"(!{a})") if _is_bool(eqn) else (lambda a: f"(~{a})"))


def rule_neg(pc, eqn, ins):
    return _elementwise(pc, eqn, ins, lambda a: f"(-{a})")


def rule_sign(pc, eqn, ins):
    ty = mpmd_type(eqn.outvars[0].aval.dtype)
    if ty == "u32":
        return _elementwise(pc, eqn, ins, lambda a: f"select({a} > 0u, 1u, 0u)")
    one, zero, minus = literal(1, ty), literal(0, ty), literal(-1, ty)
    return _elementwise(pc, eqn, ins, lambda a: f"select({a} > {zero}, {one}, select({a} < {zero}, {minus}, {a}))")


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
    return _elementwise(pc, eqn, ins, lambda a: f"(abs({a}) < {literal(float('inf'), mpmd_type(eqn.invars[0].aval.dtype))})", "bool")


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
    return Array(tuple(shape), operand.ty, lambda index: operand.at(to_source(index)), operand.depth, operand.plain)


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
        clamped = pc.body.let(
            "u32", f"u32(min(max({_i32_expr(start)}, 0), {int(limit) - int(size)}))", "s")
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
            expr = value if expr is None else f"select({index[dim]} < {u32(offset + op.shape[dim])}, {value}, {expr})"
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
    return {"f32": "-inf", "i32": "-2147483648", "u32": "0u", "f16": "f16(-inf)", "bf16": "bf16(-inf)",
            "bool": "false"}[ty]


def _highest(ty: str) -> str:
    return {"f32": "inf", "i32": "2147483647", "u32": "4294967295u", "f16": "f16(inf)", "bf16": "bf16(inf)",
            "bool": "true"}[ty]


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
            loops = []
            for size in reduced:
                k = pc.names.fresh("k")
                loops.append(pc.body.block(f"for {k}: u32 in 0u..{u32(size)}"))
                loops[-1].__enter__()
                loops[-1].var = k  # type: ignore[attr-defined]
            red_index = [blk.var for blk in loops]  # type: ignore[attr-defined]
            pc.body.emit(f"{acc} = {combine(acc, operand.at(full_index(out_index, red_index)))};")
            for blk in reversed(loops):
                blk.__exit__(None, None, None)
            pc.body.emit(f"{result.name}[{_index_text(out_index)}] = {acc};")

        pc.for_elements(out_shape, reduce_one)
        pc.body.emit("barrier;")
        if out_shape == ():
            return Scalar(pc.body.let(ty, f"{result.name}[0u]"), ty)
        return pc.buffer_array(result, out_shape)

    return rule


def rule_dot_general(pc, eqn, ins):
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = eqn.params["dimension_numbers"]
    if lhs_batch or rhs_batch:
        raise Unsupported("dot_general with batch dimensions")
    lhs, rhs = (pc.prepared(_as_array(v)) for v in ins)
    if len(lhs.shape) != 2 or len(rhs.shape) != 2 or len(lhs_contract) != 1 or len(rhs_contract) != 1:
        raise Unsupported("dot_general of other than two 2-D tiles contracting one dimension each")
    out_ty = mpmd_type(eqn.outvars[0].aval.dtype)
    acc_ty = "f32" if out_ty in ("f32", "f16", "bf16") else out_ty
    lc, rc = int(lhs_contract[0]), int(rhs_contract[0])
    depth = lhs.shape[lc]
    m_dim, n_dim = 1 - lc, 1 - rc
    out_shape = (lhs.shape[m_dim], rhs.shape[n_dim])
    result = pc.alloc(out_shape, out_ty, "dot")

    def widen(expr: str, ty: str) -> str:
        return expr if ty == acc_ty else f"{acc_ty}({expr})"

    def one(index: List[str]) -> None:
        i, j = index
        acc = pc.names.fresh("acc")
        k = pc.names.fresh("k")
        pc.body.emit(f"var {acc}: {acc_ty} = {literal(0, acc_ty)};")
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
    return pc.buffer_array(result, out_shape)


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
        raise Unsupported(f"axis_index of `{axis}`, an axis of another mesh (its size is "
                          f"lax.axis_size('{axis}'))")
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
    consts, init, xs = ins[:n_consts], ins[n_consts:n_consts + n_carry], ins[n_consts + n_carry:]
    carry_avals = [v.aval for v in body.jaxpr.invars[n_consts:n_consts + n_carry]]
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
    cond_consts, body_consts, init = ins[:nc], ins[nc:nc + nb], ins[nc + nb:]
    carries = [_carry_storage(pc, v, var.aval) for v, var in zip(init, body.jaxpr.invars[nb:])]

    def emit_body() -> None:
        (go,) = pc.run(cond.jaxpr, [*cond_consts, *carries], cond.consts)
        go = pc.scalar_of(go)
        with pc.body.block(f"if !({go.expr})"):
            pc.body.emit("break;")
        outs = pc.run(body.jaxpr, [*body_consts, *carries], body.consts)
        _assign(pc, carries, outs)

    pc.uniform_loop(f"while true max {u32(WHILE_MAX)}", emit_body)
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
        test = f"{index.expr} <= {literal(k, index.ty)}" if k == 0 else f"{index.expr} == {literal(k, index.ty)}"
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
    return pc.run(jaxpr, [*refs], ())


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
    space = _space_of(getattr(aval, "memory_space", None))
    ty = mpmd_type(dtype)
    return pc.alloc(shape, ty, prefix, space)


def _space_of(memory_space) -> str:
    text = str(memory_space).lower()
    if "smem" in text:
        return "smem"
    return "gmem"


RULES: Dict[str, Callable] = {
    "get": rule_get,
    "swap": rule_swap,
    "addupdate": rule_addupdate,
    "mgpu_atomic_store": rule_mgpu_atomic,
    "semaphore_signal": rule_semaphore_signal,
    "semaphore_wait": rule_semaphore_wait,
    "semaphore_read": rule_semaphore_read,
    "copy_gmem_to_smem": rule_copy_gmem_to_smem,
    "copy_smem_to_gmem": rule_copy_smem_to_gmem,
    "barrier_wait": rule_no_op,
    "barrier_arrive": rule_no_op,
    "commit_smem": rule_no_op,
    "commit_group": rule_no_op,
    "wait_smem_to_gmem": rule_no_op,
    "add": _binary("+"),
    "sub": _binary("-"),
    "mul": _binary("*"),
    "div": _binary("/"),
    "rem": _binary("%"),
    "max": _function("max"),
    "min": _function("min"),
    "pow": _function("pow"),
    "exp": _function("exp"),
    "log": _function("log"),
    "sqrt": _function("sqrt"),
    "rsqrt": _function("rsqrt"),
    "sin": _function("sin"),
    "cos": _function("cos"),
    "tanh": _function("tanh"),
    "abs": _function("abs"),
    "floor": _function("floor"),
    "ceil": _function("ceil"),
    "neg": rule_neg,
    "sign": rule_sign,
    "integer_pow": rule_integer_pow,
    "square": rule_square,
    "logistic": rule_logistic,
    "reciprocal": rule_reciprocal,
    "is_finite": rule_is_finite,
    "clamp": rule_clamp,
    "and": rule_and,
    "or": rule_or,
    "xor": rule_xor,
    "not": rule_not,
    "shift_left": _binary("<<"),
    "shift_right_arithmetic": _binary(">>"),
    "shift_right_logical": rule_shift_right_logical,
    "eq": rule_comparison("=="),
    "ne": rule_comparison("!="),
    "lt": rule_comparison("<"),
    "le": rule_comparison("<="),
    "gt": rule_comparison(">"),
    "ge": rule_comparison(">="),
    "select_n": rule_select_n,
    "convert_element_type": rule_convert,
    "multiple_of": rule_identity,
    "optimization_barrier": lambda pc, eqn, ins: list(ins),
    "iota": rule_iota,
    "broadcast_in_dim": rule_broadcast_in_dim,
    "reshape": rule_reshape,
    "squeeze": rule_squeeze,
    "expand_dims": rule_expand_dims,
    "transpose": rule_transpose,
    "slice": rule_slice,
    "dynamic_slice": rule_dynamic_slice,
    "concatenate": rule_concatenate,
    "reduce_sum": rule_reduce("reduce_sum"),
    "reduce_prod": rule_reduce("reduce_prod"),
    "reduce_max": rule_reduce("reduce_max"),
    "reduce_min": rule_reduce("reduce_min"),
    "reduce_and": rule_reduce("reduce_and"),
    "reduce_or": rule_reduce("reduce_or"),
    "dot_general": rule_dot_general,
    "axis_index": rule_axis_index,
    "program_id": rule_program_id,
    "num_programs": rule_num_programs,
    "scan": rule_scan,
    "while": rule_while,
    "cond": rule_cond,
    "pjit": rule_inline("jaxpr"),
    "jit": rule_inline("jaxpr"),
    "closed_call": rule_inline("call_jaxpr"),
    "core_call": rule_inline("call_jaxpr"),
    "custom_jvp_call": rule_inline("call_jaxpr"),
    "custom_vjp_call": rule_custom_vjp,
    "custom_vjp_call_jaxpr": rule_custom_vjp,
    "run_scoped": rule_run_scoped,
}


# ----------------------------------------------------------- the map


def _arg_names(jaxpr, count: int) -> List[Optional[str]]:
    info = getattr(jaxpr, "debug_info", None)
    names = list(getattr(info, "arg_names", None) or [])
    out: List[Optional[str]] = []
    for k in range(count):
        name = names[k] if k < len(names) else None
        if name:
            name = str(name).split("[")[0].split(".")[0] or None
        # Pallas's own rewrites (discharging Refs, closed-over constants)
        # name every parameter `args`: role names read better.
        if name in ("args", "arg"):
            name = None
        out.append(name)
    return out


def _func_name(jaxpr, fallback: str) -> str:
    info = getattr(jaxpr, "debug_info", None)
    name = getattr(info, "func_name", None) or fallback
    name = str(name).split(" ")[0].split(".")[-1] or fallback
    return fallback if name in ("new_body", "_rewritten_body", "<lambda>") else name


def compile_map(jaxprs, meshes, external_meshes, in_avals, out_avals,
                input_output_aliases, name: Optional[str] = None) -> Compiled:
    """Lowers one ``mpmd_map`` (its parameters as the primitive binds them,
    after Refs were discharged into aliases) to an mpmd module."""
    try:
        return _compile_map(jaxprs, meshes, external_meshes, in_avals, out_avals,
                            input_output_aliases, name)
    except Unsupported as why:
        raise LoweringError(f"mpmd.pallas cannot lower this mpmd_map: {why} (see {DOCS})") from None


def _compile_map(jaxprs, meshes, external_meshes, in_avals, out_avals, aliases, name):
    builder = ModuleBuilder()
    n_in, n_out = len(in_avals), len(out_avals)
    first = jaxprs[0]
    n_scratch = len(first.invars) - n_in - n_out
    arg_names = _arg_names(first, len(first.invars))
    aliases = {int(i): int(o) for i, o in dict(aliases).items()}
    aliased_outputs = {o: i for i, o in aliases.items()}

    # Operands: names from the first program's parameters.
    values: List[Value] = [None] * len(first.invars)
    inputs_spec: List[Tuple[str, str, Tuple[int, ...]]] = []
    outputs_spec: List[Tuple[str, Tuple[int, ...]]] = []
    map_inputs, map_outputs, map_scalars, map_scratch, map_aliases = [], [], [], [], []
    params: List[str] = []
    out_names: Dict[int, str] = {}
    for j, aval in enumerate(out_avals):
        wanted = arg_names[n_in + j] or f"out{j}"
        if j in aliased_outputs:
            wanted = (arg_names[aliased_outputs[j]] or f"in{aliased_outputs[j]}") + "_out"
        out_names[j] = builder.names.claim(wanted)
    for k, aval in enumerate(in_avals):
        ty = mpmd_type(aval.dtype)
        shape = tuple(int(d) for d in aval.shape)
        name = builder.names.claim(arg_names[k] or f"in{k}")
        if k in aliases:
            target = out_names[aliases[k]]
            text = ref_type("gmem", ty, shape)
            map_inputs.append(f"{name}: {text}")
            map_aliases.append(f"{name} -> {target}")
            params.append(f"{name}: {text}")
            values[k] = Ref(target, shape or (1,), ty, "gmem", True)
            inputs_spec.append(("input", name, shape))
        elif shape == ():
            map_scalars.append(f"{name}: {ty}")
            params.append(f"{name}: {ty}")
            values[k] = Scalar(name, ty)
            inputs_spec.append(("scalar", name, shape))
        else:
            text = ref_type("gmem", ty, shape)
            map_inputs.append(f"{name}: {text}")
            params.append(f"{name}: {text}")
            values[k] = Ref(name, shape, ty, "gmem", False)
            inputs_spec.append(("input", name, shape))
    for j, aval in enumerate(out_avals):
        ty = mpmd_type(aval.dtype)
        shape = tuple(int(d) for d in aval.shape)
        name = out_names[j]
        text = ref_type("gmem", ty, shape)
        map_outputs.append(f"{name}: {text}")
        params.append(f"{name}: {text}")
        values[n_in + j] = Ref(name, shape or (1,), ty, "gmem", True)
        outputs_spec.append((name, shape))

    # Meshes: the programs', then the external ones.
    mesh_names = []
    mesh_axes = []
    for k, mesh in enumerate(meshes):
        mesh_name, axes = builder.mesh(mesh, f"mesh{k}")
        mesh_names.append(mesh_name)
        mesh_axes.append(axes)
    all_axes: Dict[Any, int] = {}
    for mesh in [*meshes, *external_meshes]:
        for axis, size in zip(getattr(mesh, "grid_names", ()), getattr(mesh, "grid", ())):
            all_axes[axis] = int(size)
    for k, mesh in enumerate(external_meshes):
        builder.mesh(mesh, f"external{k}")

    # User scratch: gmem and semaphores are one per call; smem belongs to
    # the mesh the memory space names (or the only program).
    scratch_values: List[Value] = []
    for s in range(n_scratch):
        var = first.invars[n_in + n_out + s]
        aval = var.aval
        inner = getattr(aval, "inner_aval", aval)
        shape = tuple(int(d) for d in inner.shape)
        memory_space = getattr(aval, "memory_space", None)
        name = builder.names.claim(arg_names[n_in + n_out + s] or f"scratch{s}")
        if isinstance(inner.dtype, jx.AbstractSemaphoreTy):
            text = ref_type("sem", "i32", shape)
            scratch_values.append(Ref(name, shape or (1,), "i32", "sem", True))
        elif not isinstance(inner.dtype, np.dtype) and "barrier" in str(inner.dtype).lower():
            scratch_values.append(CopyBarrier())
            continue
        else:
            ty = mpmd_type(inner.dtype)
            space = _space_of(getattr(memory_space, "memory_space", memory_space))
            owner = None
            if space == "smem":
                owner_mesh = getattr(memory_space, "mesh", None)
                if owner_mesh is not None and owner_mesh in meshes:
                    owner = mesh_names[list(meshes).index(owner_mesh)]
                elif len(meshes) == 1:
                    owner = None
                else:
                    raise Unsupported(f"smem scratch `{name}` without a program mesh that owns it")
            text = ref_type(space, ty, shape, owner)
            scratch_values.append(Ref(name, shape or (1,), ty, space, True))
        map_scratch.append(f"{name}: {text}")
        params.append(f"{name}: {text}")
    for s, value in enumerate(scratch_values):
        values[n_in + n_out + s] = value

    programs = []
    kernel_names = []
    for k, (mesh, jaxpr) in enumerate(zip(meshes, jaxprs)):
        pc = ProgramCompiler(builder, mesh_names[k], mesh_axes[k], mesh,
                             {a: s for a, s in all_axes.items() if a not in mesh_axes[k]})
        kernel_name = builder.names.claim(_func_name(jaxpr, f"kernel{k}"))
        kernel_names.append(kernel_name)
        pc.run(jaxpr, values[: len(jaxpr.invars)], ())
        own = [f"{n}: {t}" for n, t in pc.own_scratch]
        map_scratch.extend(own)
        header = f"kernel {kernel_name}({', '.join(params + own)}) {{"
        builder.kernels.append(header + "\n" + pc.body.text() + "\n}")
        programs.append(f"{mesh_names[k]}: {kernel_name}")

    lines = ["map main {", f"  programs [{', '.join(programs)}];"]
    for title, items in (("inputs", map_inputs), ("outputs", map_outputs), ("scalars", map_scalars),
                         ("scratch", map_scratch), ("aliases", map_aliases)):
        if items:
            lines.append(f"  {title} [{', '.join(items)}];")
    lines.append("}")
    title = f"// Lowered by mpmd.pallas from the mpmd_map `{name or kernel_names[0]}`."
    text = "\n\n".join([title, *builder.meshes, *builder.kernels, "\n".join(lines)]) + "\n"
    return Compiled(text, inputs_spec, outputs_spec)
