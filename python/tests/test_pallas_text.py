"""The Pallas front end writes mpmd text in Python (`mpmd/pallas/_text.py`);
the one reader and printer of that text is Rust's. Every literal and ref
type `_text` writes must read back as the value and type it meant: the
canonical print of what Rust parsed equals the canonical print of the
literal written by its exact bits."""

from __future__ import annotations

import struct

import numpy as np
import pytest

pytest.importorskip("jax", reason="mpmd.pallas needs jax")
import ml_dtypes

import mpmd
from mpmd.pallas import _text


def canonical(ty: str, literal: str) -> str:
    """The text Rust prints for `literal` as a `let` of type `ty`."""
    source = (
        f"kernel k(y: gmem<{ty}[1]>) {{\n  let v: {ty} = {literal};\n  y[0u] = v;\n}}\n"
    )
    return mpmd.Module.from_text(source).text()


def bits_literal(ty: str, value) -> str:
    if ty == "f32":
        return f"f32_bits(0x{struct.unpack('<I', struct.pack('<f', float(np.float32(value))))[0]:08x})"
    dtype = np.float16 if ty == "f16" else ml_dtypes.bfloat16
    bits = int(np.asarray(value).astype(dtype).reshape(()).view(np.uint16))
    return f"{ty}_bits(0x{bits:04x})"


FLOATS = [
    0.0,
    -0.0,
    1.0,
    -1.5,
    0.1,
    3.4028235e38,
    1e-45,
    1.17549435e-38,
    6.1e-5,
    6e-8,
    65504.0,
    float("inf"),
    float("-inf"),
    float("nan"),
]


@pytest.mark.parametrize("ty", ["f32", "f16", "bf16"])
def test_float_literals_read_back_as_their_bits(ty):
    largest = {"f32": 3.4028235e38, "f16": 65504.0, "bf16": 3.3895314e38}[ty]
    for value in FLOATS:
        if np.isfinite(value) and abs(value) > largest:
            continue
        written = _text.literal(value, ty)
        assert canonical(ty, written) == canonical(ty, bits_literal(ty, value)), (
            ty,
            value,
            written,
        )


def test_integer_and_bool_literals_read_back_as_their_values():
    for ty, values in [
        ("i32", [0, -1, 2**31 - 1, -(2**31)]),
        ("u32", [0, 1, 2**32 - 1]),
    ]:
        for value in values:
            written = _text.literal(value, ty)
            expected = str(value) + ("u" if ty == "u32" else "")
            assert canonical(ty, written) == canonical(ty, expected), (
                ty,
                value,
                written,
            )
    assert canonical("bool", _text.literal(True, "bool")) == canonical("bool", "true")
    assert canonical("bool", _text.literal(0, "bool")) == canonical("bool", "false")


def test_ref_types_read_back_as_written():
    cases = [
        (("gmem", "f32", (4, 256), None), "gmem<f32[4, 256]>"),
        (("gmem", "bf16", (), None), "gmem<bf16[1]>"),
        (("smem", "f16", (2,), None), "smem<f16[2]>"),
        (("sem", "i32", (3,), "m"), "sem<[3]> @ m"),
    ]
    for (space, ty, shape, owner), printed in cases:
        written = _text.ref_type(space, ty, shape, owner=owner)
        mesh = "mesh m { grid [b = 1]; threads t = 1; }\n"
        source = mesh + f"kernel k(x: {written}) {{}}\n"
        assert f"x: {printed}" in mpmd.Module.from_text(source).text(), written
