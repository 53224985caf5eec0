"""Assembles an mpmd module from the jaxprs of one Pallas ``mpmd_map``:
meshes, operands, one kernel per program (each compiled by
``_program.ProgramCompiler`` with the rules below) and the map ``main``."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from . import _compat as jx
from ._text import Unsupported, mpmd_type, ref_type
from ._program import (
    DOCS,
    RULES,
    Compiled,
    CopyBarrier,
    LoweringError,
    ModuleBuilder,
    ProgramCompiler,
    Ref,
    Scalar,
    Value,
)
from . import _compute as compute, _control as control, _dot as dot, _memory as memory
from ._control import _space_of

RULES.update(
    {
        "get": memory.rule_get,
        "swap": memory.rule_swap,
        "addupdate": memory.rule_addupdate,
        "mgpu_atomic_store": memory.rule_mgpu_atomic,
        "semaphore_signal": memory.rule_semaphore_signal,
        "semaphore_wait": memory.rule_semaphore_wait,
        "semaphore_read": memory.rule_semaphore_read,
        "copy_gmem_to_smem": memory.rule_copy_gmem_to_smem,
        "copy_smem_to_gmem": memory.rule_copy_smem_to_gmem,
        "barrier_wait": memory.rule_no_op,
        "barrier_arrive": memory.rule_no_op,
        "commit_smem": memory.rule_no_op,
        "commit_group": memory.rule_no_op,
        "wait_smem_to_gmem": memory.rule_no_op,
        "add": compute._binary("+"),
        "sub": compute._binary("-"),
        "mul": compute._binary("*"),
        "div": compute._binary("/"),
        "rem": compute._binary("%"),
        "max": compute._function("max"),
        "min": compute._function("min"),
        "pow": compute._function("pow"),
        "exp": compute._function("exp"),
        "log": compute._function("log"),
        "sqrt": compute._function("sqrt"),
        "rsqrt": compute._function("rsqrt"),
        "sin": compute._function("sin"),
        "cos": compute._function("cos"),
        "tanh": compute._function("tanh"),
        "abs": compute._function("abs"),
        "floor": compute._function("floor"),
        "ceil": compute._function("ceil"),
        "neg": compute.rule_neg,
        "sign": compute.rule_sign,
        "integer_pow": compute.rule_integer_pow,
        "square": compute.rule_square,
        "logistic": compute.rule_logistic,
        "reciprocal": compute.rule_reciprocal,
        "is_finite": compute.rule_is_finite,
        "clamp": compute.rule_clamp,
        "and": compute.rule_and,
        "or": compute.rule_or,
        "xor": compute.rule_xor,
        "not": compute.rule_not,
        "shift_left": compute._binary("<<"),
        "shift_right_arithmetic": compute._binary(">>"),
        "shift_right_logical": compute.rule_shift_right_logical,
        "eq": compute.rule_comparison("=="),
        "ne": compute.rule_comparison("!="),
        "lt": compute.rule_comparison("<"),
        "le": compute.rule_comparison("<="),
        "gt": compute.rule_comparison(">"),
        "ge": compute.rule_comparison(">="),
        "select_n": compute.rule_select_n,
        "convert_element_type": compute.rule_convert,
        "multiple_of": compute.rule_identity,
        "optimization_barrier": lambda pc, eqn, ins: list(ins),
        "iota": compute.rule_iota,
        "broadcast_in_dim": compute.rule_broadcast_in_dim,
        "reshape": compute.rule_reshape,
        "squeeze": compute.rule_squeeze,
        "expand_dims": compute.rule_expand_dims,
        "transpose": compute.rule_transpose,
        "slice": compute.rule_slice,
        "dynamic_slice": compute.rule_dynamic_slice,
        "concatenate": compute.rule_concatenate,
        "reduce_sum": compute.rule_reduce("reduce_sum"),
        "reduce_prod": compute.rule_reduce("reduce_prod"),
        "reduce_max": compute.rule_reduce("reduce_max"),
        "reduce_min": compute.rule_reduce("reduce_min"),
        "reduce_and": compute.rule_reduce("reduce_and"),
        "reduce_or": compute.rule_reduce("reduce_or"),
        "dot_general": dot.rule_dot_general,
        "wgmma_ref": dot.rule_wgmma_ref,
        "wgmma_wait": memory.rule_no_op,
        "wgmma_accumulator_deref_p": dot.rule_wgmma_accumulator_deref,
        "axis_index": control.rule_axis_index,
        "program_id": control.rule_program_id,
        "num_programs": control.rule_num_programs,
        "scan": control.rule_scan,
        "while": control.rule_while,
        "cond": control.rule_cond,
        "pjit": control.rule_inline("jaxpr"),
        "jit": control.rule_inline("jaxpr"),
        "closed_call": control.rule_inline("call_jaxpr"),
        "core_call": control.rule_inline("call_jaxpr"),
        "custom_jvp_call": control.rule_inline("call_jaxpr"),
        "custom_vjp_call": control.rule_custom_vjp,
        "custom_vjp_call_jaxpr": control.rule_custom_vjp,
        "run_scoped": control.rule_run_scoped,
    }
)


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


def compile_map(
    jaxprs, meshes, external_meshes, in_avals, out_avals, input_output_aliases, name: Optional[str] = None
) -> Compiled:
    """Lowers one ``mpmd_map`` (its parameters as the primitive binds them,
    after Refs were discharged into aliases) to an mpmd module."""
    try:
        return _compile_map(jaxprs, meshes, external_meshes, in_avals, out_avals, input_output_aliases, name)
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
        pc = ProgramCompiler(
            builder,
            mesh_names[k],
            mesh_axes[k],
            mesh,
            {a: s for a, s in all_axes.items() if a not in mesh_axes[k]},
        )
        kernel_name = builder.names.claim(_func_name(jaxpr, f"kernel{k}"))
        kernel_names.append(kernel_name)
        pc.run(jaxpr, values[: len(jaxpr.invars)], ())
        own = [f"{n}: {t}" for n, t in pc.own_scratch]
        map_scratch.extend(own)
        header = f"kernel {kernel_name}({', '.join(params + own)}) {{"
        builder.kernels.append(header + "\n" + pc.body.text() + "\n}")
        programs.append(f"{mesh_names[k]}: {kernel_name}")

    lines = ["map main {", f"  programs [{', '.join(programs)}];"]
    for title, items in (
        ("inputs", map_inputs),
        ("outputs", map_outputs),
        ("scalars", map_scalars),
        ("scratch", map_scratch),
        ("aliases", map_aliases),
    ):
        if items:
            lines.append(f"  {title} [{', '.join(items)}];")
    lines.append("}")
    title = f"// Lowered by mpmd.pallas from the mpmd_map `{name or kernel_names[0]}`."
    text = "\n\n".join([title, *builder.meshes, *builder.kernels, "\n".join(lines)]) + "\n"
    return Compiled(text, inputs_spec, outputs_spec)
