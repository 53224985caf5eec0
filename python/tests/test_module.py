"""Parse, check and lower from Python; diagnostics as exceptions."""

import pytest

import mpmd
from conftest import CASES, EXAMPLES, ROOT, run_cli

TYPE_ERROR = """\
mesh m {
  grid [b = 1];
  threads t = 32;
}

kernel k(x: gmem<f32[32]>, y: gmem<f32[32]>) {
  let i: u32 = axis_index(t);
  y[i] = x[i] + 1u;
}

map k {
  programs [m: k];
  inputs [x: gmem<f32[32]>];
  outputs [y: gmem<f32[32]>];
}
"""


def test_a_module_lists_its_maps_operands_and_residents():
    module = mpmd.Module.from_file(EXAMPLES / "handoff.mpmd")
    assert module.maps == ["send", "receive"]
    assert module.inputs("send") == [("x", "float32", [128])]
    assert module.outputs("send") == [("sent", "uint32", [2])]
    assert module.outputs("receive") == [("y", "float32", [128])]
    assert module.inputs("receive") == []
    assert module.residents() == [("hand", "float32", [2, 64]), ("credits", "int32", [2, 1])]
    assert module.binds_residents("send") and module.binds_residents("receive")
    assert module.calls() == [("send", {}), ("receive", {})]
    elementwise = mpmd.Module.from_file(EXAMPLES / "elementwise.mpmd")
    assert elementwise.scalars("axpb") == [("alpha", "float32")]
    assert elementwise.calls() == [("axpb", {"alpha": 2.0})]
    assert not elementwise.binds_residents("axpb")
    with pytest.raises(KeyError, match=r"the module has no map `nope` \(its maps: `axpb`\)"):
        elementwise.outputs("nope")


def test_the_canonical_text_reads_back_as_the_same_module():
    module = mpmd.Module.from_file(EXAMPLES / "pipeline.mpmd")
    again = mpmd.Module.from_text(module.text())
    assert again.text() == module.text()
    assert again.maps == ["pipeline"]


def test_a_validation_error_is_the_rendered_diagnostic():
    with pytest.raises(mpmd.ValidationError) as caught:
        mpmd.Module.from_text(TYPE_ERROR, name="bad.mpmd")
    assert str(caught.value) == (
        "error[E0037]: operands of `+` have different types: `f32` and `u32`, in `x[i] + 1u` in kernel `k`\n"
        " --> bad.mpmd:8:3\n"
        "  |\n"
        "8 |   y[i] = x[i] + 1u;\n"
        "  |   ^^^^^^^^^^^^^^^^^\n"
        "  = rule: operators and functions get operands of the types they accept\n"
        "  = help: convert operands with casts such as `f32(i)` so that the types agree\n"
        "error: `bad.mpmd` has 1 error(s)"
    )
    assert isinstance(caught.value, mpmd.MpmdError)


SYNTAX_ERROR = b"mesh m {\n  grid [b = ];\n}\n"
NOT_UTF8 = b"// caf\xe9\nmesh m { grid [b = 1]; threads t = 32; }\n"


def cli_check_matches(path, cwd, monkeypatch):
    """`mpmd check PATH` run in `cwd` prints exactly the exception's message
    (then its count of rejected files)."""
    code, stdout, stderr = run_cli("check", path, cwd=cwd)
    assert (code, stdout) == (1, "")
    monkeypatch.chdir(cwd)
    with pytest.raises(mpmd.ValidationError) as caught:
        mpmd.Module.from_file(path)
    assert stderr.endswith("error: 1 of 1 file(s) rejected\n")
    assert str(caught.value) + "\n" == stderr.removesuffix("error: 1 of 1 file(s) rejected\n")


@pytest.mark.parametrize(
    "case",
    ["reject_e0037_type_error", "reject_e0016_param_not_an_operand", "reject_e0054_per_thread_semaphore_index"],
)
def test_a_validation_message_is_exactly_what_mpmd_check_prints(case, monkeypatch):
    cli_check_matches(f"conformance/cases/{case}.mpmd", ROOT, monkeypatch)


@pytest.mark.parametrize("text", [SYNTAX_ERROR, NOT_UTF8], ids=["syntax", "not_utf8"])
def test_a_parse_message_is_exactly_what_mpmd_check_prints(text, tmp_path, monkeypatch):
    (tmp_path / "bad.mpmd").write_bytes(text)
    cli_check_matches("bad.mpmd", tmp_path, monkeypatch)


def test_a_parse_error_is_rendered_at_its_place():
    with pytest.raises(mpmd.ValidationError) as caught:
        mpmd.Module.from_text("mesh m {\n  grid [b = ];\n}\n", name="syntax.mpmd")
    assert str(caught.value) == (
        "error: expected an axis size, found `]`\n"
        " --> syntax.mpmd:2:13\n"
        "  |\n"
        "2 |   grid [b = ];\n"
        "  |             ^"
    )


def test_files_that_cannot_be_read_or_decoded():
    with pytest.raises(OSError, match=r"cannot read `/nonexistent/x.mpmd`: No such file"):
        mpmd.Module.from_file("/nonexistent/x.mpmd")


def test_bytes_that_are_not_utf8_are_a_validation_error(tmp_path):
    path = tmp_path / "latin1.mpmd"
    path.write_bytes(NOT_UTF8)
    with pytest.raises(mpmd.ValidationError) as caught:
        mpmd.Module.from_file(path)
    assert str(caught.value).startswith(
        f"error: byte 0xE9 is not valid UTF-8; .mpmd files are UTF-8 (save the file as UTF-8)\n --> {path}:1:7\n"
    )


@pytest.mark.parametrize(
    "example, target, map_name",
    [
        ("pipeline", "plan", None),
        ("handoff", "plan", None),
        ("pipeline", "cuda", None),
        ("pipeline", "wgsl", "pipeline"),
        ("handoff", "wgsl", "receive"),
        ("bf16_rowsum", "cuda", "rowsum"),
    ],
)
def test_lower_is_what_mpmd_lower_prints(example, target, map_name):
    path = f"examples/{example}.mpmd"
    flags = ["--target", target] + (["--map", map_name] if map_name else [])
    code, stdout, stderr = run_cli("lower", *flags, path)
    assert code == 0, stderr
    text = mpmd.Module.from_file(ROOT / path).lower(target, map_name)
    assert text == stdout
    assert len(text) > 200


def test_lower_refuses_what_the_cli_refuses():
    handoff = mpmd.Module.from_file(EXAMPLES / "handoff.mpmd")
    with pytest.raises(ValueError) as caught:
        handoff.lower("wgsl")
    assert str(caught.value) == (
        "the module has 2 maps (`send`, `receive`), and the wgsl source of each is a file "
        "of its own: pass map=NAME"
    )
    with pytest.raises(ValueError, match=r'^target `ptx`: give "plan", "cuda" or "wgsl"$'):
        handoff.lower("ptx")
    with pytest.raises(KeyError, match="no map `nope`"):
        handoff.lower("plan", "nope")
