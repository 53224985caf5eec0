"""The compiler from Pallas ``mpmd_map`` jaxprs to mpmd modules.

One rule per primitive (``RULES``), each turning the jaxpr equation's
operands into mpmd statements and values. docs/pallas.md is the user's
account of the mapping; this docstring is the implementer's. The rules
live in `_memory.py` (refs, semaphores, atomics, copies), `_compute.py`
(arithmetic, shapes, reductions, dot) and `_control.py` (axes, loops,
branches, inlining, run_scoped); `_lower.py` assembles the map.

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

#: The rule of each primitive, by name: `_lower.py` fills it from the rule
#: modules (`_memory.py`, `_compute.py`, `_control.py`).
RULES: Dict[str, Callable] = {}

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
        self.kernels: List[str] = []
        # Pallas axis name -> mpmd axis name (several meshes may share an
        # axis, with one size, which Pallas checks).
        self.axes: Dict[Any, str] = {}

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
        if axis not in self.axes:
            self.axes[axis] = self.names.claim(f"{axis}")
        return self.axes[axis]


class ProgramCompiler:
    """Compiles one program's jaxpr into one kernel."""

    def __init__(
        self, builder: ModuleBuilder, mesh_name: str, axes: Dict[Any, str], mesh, other_axes: Dict[Any, int]
    ) -> None:
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
            # run_scoped binds its closed-over values as constvars.
            known = isinstance(const, (Scalar, Array, Ref, CopyBarrier))
            env[var] = const if known else self.constant(const, var.aval)
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
                if (
                    isinstance(out, Array)
                    and not out.plain
                    and (uses.get(var, 0) > 1 or out.depth > MAX_LAZY_DEPTH)
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

    def alloc(self, shape: Sequence[int], ty: str, prefix: str = "tmp", space: Optional[str] = None) -> Ref:
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
            emit_body()
            inner = self.body.lines[start:]
            if any(
                line.strip() in ("barrier;",) or line.strip().startswith(("signal(", "wait("))
                for line in inner
            ):
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
