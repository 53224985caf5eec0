"""The type stubs describe the package that exists: every public name of
`mpmd` and `mpmd.jax` is in its stub, and every name a stub declares exists."""

import ast
from pathlib import Path

import mpmd
import mpmd.jax

PACKAGE = Path(mpmd.__file__).parent


def declared(stub):
    tree = ast.parse((PACKAGE / stub).read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names - {"__all__", "Operands"}


def test_the_package_stub_matches_the_package():
    assert declared("__init__.pyi") == set(mpmd.__all__) | {"generated_inputs"}
    for name in declared("__init__.pyi"):
        assert hasattr(mpmd, name), name


def test_the_jax_stub_matches_mpmd_jax():
    assert declared("jax.pyi") == set(mpmd.jax.__all__) == {"kernel", "synchronize"}


def test_module_methods_in_the_stub_exist():
    tree = ast.parse((PACKAGE / "__init__.pyi").read_text())
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for member in cls.body:
            if isinstance(member, ast.FunctionDef) and not member.name.startswith("__"):
                assert hasattr(getattr(mpmd, cls.name), member.name), f"{cls.name}.{member.name}"
