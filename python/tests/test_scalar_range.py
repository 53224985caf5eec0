"""Scalar arguments follow core's one rule (`host::scalar_value`), which
`mpmd run --scalar` shares: a number past its type's range is a ValueError,
for every type, never a silent infinity or wrapped integer."""

import pytest

import mpmd
from conftest import ROOT

SCALARS = (ROOT / "defects" / "t3" / "scalar_flag_overflow.mpmd").read_text()
GOOD = dict(a=1.0, b=1, c=1, d=1.0, e=1.0)


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("a", 1e39, "scalar `a` of map `k`: `1e39` is out of range for `f32` (its largest finite value is 3.4028235e38; give `inf` for infinity)"),
        ("d", 70000.0, "scalar `d` of map `k`: `70000.0` is out of range for `f16` (its largest finite value is 6.5504e4; give `inf` for infinity)"),
        ("e", 1e39, "scalar `e` of map `k`: `1e39` is out of range for `bf16` (its largest finite value is 3.3895314e38; give `inf` for infinity)"),
        ("c", 2**32, "scalar `c` of map `k`: `4294967296` is out of range for `u32` (it holds 0 to 4294967295)"),
        ("b", -(2**31) - 1, "scalar `b` of map `k`: `-2147483649` is out of range for `i32` (it holds -2147483648 to 2147483647)"),
    ],
)
def test_out_of_range_scalars_are_value_errors(name, value, message):
    module = mpmd.Module.from_text(SCALARS, "scalars.mpmd")
    with pytest.raises(ValueError) as caught:
        mpmd.Interpreter().call(module, "k", **{**GOOD, name: value})
    assert str(caught.value) == message


def test_infinity_given_as_infinity_passes():
    module = mpmd.Module.from_text(SCALARS, "scalars.mpmd")
    out = mpmd.Interpreter().call(module, "k", **{**GOOD, "a": float("inf"), "d": 65504.0})
    assert out["y"][0] == float("inf")
    assert float(out["h"][0]) == 65504.0
