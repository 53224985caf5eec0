"""Pieces of mpmd text the Pallas compiler writes: types, literals, names
and a kernel body writer with indentation and fresh names.

The compiler builds the module as `.mpmd` text and the Rust side parses
and validates it (``mpmd.Module.from_text``), so every rule of the language
is checked where it lives, once, and the module a Pallas program lowered to
is the same text ``to_module(...).text()`` prints, the CLI checks and the
conformance corpus holds.
"""

from __future__ import annotations

import re
import struct
from contextlib import contextmanager
from typing import Dict, Iterator, List, Optional, Set

import numpy as np

#: numpy dtype name -> mpmd scalar type.
DTYPE_TO_MPMD = {
    "float32": "f32",
    "int32": "i32",
    "uint32": "u32",
    "bool": "bool",
    "float16": "f16",
    "bfloat16": "bf16",
}

KEYWORDS = set(
    """mesh grid cluster threads kernel map programs inputs outputs scalars scratch
    aliases fast_math debug resident zeroed call case generate compare expect let var
    local for while break continue const fn return in if else barrier true false inf
    nan f32 i32 u32 bool f16 bf16 gmem smem sem""".split()
)

#: Builtin function names; never used for generated names (the parser tells
#: them by position, but a reader should not have to).
BUILTINS = set(
    """axis_index axis_size exp log sqrt rsqrt sin cos tanh abs min max floor ceil
    fma pow select bitcast read signal wait wait_nodec atomic_add atomic_min atomic_max
    atomic_and atomic_or atomic_xor atomic_exchange atomic_compare_exchange atomic_load
    atomic_store shfl_idx shfl_up shfl_down shfl_xor vote_any vote_all ballot reduce_add
    reduce_min reduce_max block_broadcast block_any block_all block_count mma_m16n8k16
    mma_load_a mma_load_b f32_bits f16_bits bf16_bits""".split()
)


class Unsupported(Exception):
    """A Pallas construct outside the subset mpmd.pallas lowers."""


def mpmd_type(dtype) -> str:
    """The mpmd scalar type of a numpy/JAX dtype, or Unsupported."""
    name = np.dtype(dtype).name if not hasattr(dtype, "name") else dtype.name
    try:
        return DTYPE_TO_MPMD[name]
    except KeyError:
        raise Unsupported(f"element type {name} (mpmd has {', '.join(DTYPE_TO_MPMD)})") from None


def literal(value, ty: str) -> str:
    """The mpmd literal of ``value`` as type ``ty``, exact bits for floats."""
    if ty == "bool":
        return "true" if bool(value) else "false"
    if ty == "i32":
        v = int(np.asarray(value).astype(np.int64))
        if not -(2**31) <= v < 2**31:
            raise Unsupported(f"literal {v} does not fit i32")
        return str(v)
    if ty == "u32":
        v = int(np.asarray(value).astype(np.int64))
        if not 0 <= v < 2**32:
            raise Unsupported(f"literal {v} does not fit u32")
        return f"{v}u"
    if ty == "f32":
        bits = struct.unpack("<I", struct.pack("<f", float(np.float32(value))))[0]
        return f"f32_bits(0x{bits:08x})" if not _plain_f32(bits) else _f32_text(bits)
    if ty in ("f16", "bf16"):
        import ml_dtypes  # noqa: F401 - registers bfloat16 with numpy

        dtype = np.float16 if ty == "f16" else np.dtype("bfloat16")
        bits = int(np.asarray(value).astype(dtype).reshape(()).view(np.uint16))
        return f"{ty}_bits(0x{bits:04x})"
    raise Unsupported(f"literal of type {ty}")


def _plain_f32(bits: int) -> bool:
    exponent = (bits >> 23) & 0xFF
    return exponent != 0xFF or (bits & 0x7FFFFF) == 0


def _f32_text(bits: int) -> str:
    value = struct.unpack("<f", struct.pack("<I", bits))[0]
    if value == float("inf"):
        return "inf"
    if value == float("-inf"):
        return "-inf"
    if value == 0.0:
        return "-0.0" if bits >> 31 else "0.0"
    text = repr(value)
    if "." not in text and "e" not in text:
        text += ".0"
    if bits & 0x7F800000 == 0:
        # Subnormals: exact bits, so nothing depends on decimal rounding.
        return f"f32_bits(0x{bits:08x})"
    return text


def u32(n: int) -> str:
    return f"{int(n)}u"


def sanitize(name: str) -> str:
    """An identifier for a user-given name (operand, axis)."""
    text = re.sub(r"[^A-Za-z0-9_]", "_", str(name)) or "x"
    if text[0].isdigit():
        text = "n" + text
    if text in KEYWORDS or text in BUILTINS:
        text += "_"
    return text


class Names:
    """Fresh names for one module: never a keyword, a builtin or a name
    already taken (operands, axes, meshes)."""

    def __init__(self) -> None:
        self.taken: Set[str] = set()
        self.counters: Dict[str, int] = {}

    def claim(self, wanted: str) -> str:
        base = sanitize(wanted)
        name = base
        k = 1
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name

    def fresh(self, prefix: str) -> str:
        while True:
            k = self.counters.get(prefix, 0)
            self.counters[prefix] = k + 1
            name = f"{prefix}{k}"
            if name not in self.taken and name not in KEYWORDS and name not in BUILTINS:
                self.taken.add(name)
                return name


class Body:
    """Statements of one kernel, with indentation."""

    def __init__(self, names: Names) -> None:
        self.names = names
        self.lines: List[str] = []
        self.depth = 1

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def let(self, ty: str, expr: str, prefix: str = "v") -> str:
        name = self.names.fresh(prefix)
        self.emit(f"let {name}: {ty} = {expr};")
        return name

    @contextmanager
    def block(self, header: str) -> Iterator[None]:
        self.emit(header + " {")
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            self.emit("}")

    @contextmanager
    def else_block(self) -> Iterator[None]:
        # Reopens the `if` just closed: `} else {`.
        closing = self.lines.pop()
        assert closing.strip() == "}"
        self.lines.append(closing + " else {")
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            self.emit("}")

    def text(self) -> str:
        return "\n".join(self.lines)


def format_shape(shape) -> str:
    return ", ".join(str(int(d)) for d in shape) if shape else "1"


def ref_type(space: str, ty: str, shape, owner: Optional[str] = None) -> str:
    if space == "sem":
        text = f"sem<[{format_shape(shape)}]>"
    else:
        text = f"{space}<{ty}[{format_shape(shape)}]>"
    return f"{text} @ {owner}" if owner else text
