"""Pallas (JAX's GPU interpret mode) against mpmd's interpreter on the same
kernels, side by side in one run: `cargo xtask bench report` runs this in
the environment `cargo xtask pytest` builds (target/mpmd-tools/pyenv) and
writes the figures it prints into target/bench/report.md (docs/bench.md).

Kernels (bench/kernels/*.mpmd on the mpmd side; the same operation over the
same sizes as Pallas writes it here):

- elementwise: y = 2x + 1 over 2^20 f32;
- reduction: the sum of each 4096 elements of 2^20 f32;
- producer_consumer: buf = 3x then y = buf + 1 over 2^20 f32 (mpmd: two
  programs of one call and semaphores; Pallas: two kernels in one jit);
- matmul: C = A B, 256 x 256 x 256 f32 (mpmd: 16 x 16 smem tiles with 2-D
  indexing; Pallas: a 64 x 64 output tile a block with `jnp.dot`).

Each kernel runs with detection off and on: Pallas `pl.kernel` on a
`plgpu.Mesh` with `interpret=InterpretGPUParams(detect_races=False/True)`
under `jax.jit`; mpmd through the release CLI (`mpmd run --time`, and
`--checked --schedules 0`: detection on, one schedule) and through
`mpmd.Interpreter().call` (`Interpreter(checked=True, schedules=0)`). Every
variant is called once to warm up (Pallas: tracing and compiling), then
once a round, the variants of a kernel one after the other in each round,
so a change in the machine's load reaches all alike; a figure is the
median over the rounds.

Also: a tiny map (256 f32, y = 2x + 1) per `Interpreter().call`, under
`jax.jit` through `mpmd.jax.kernel`, and `jax.jit` of the same `jnp`
expression, each the median over rounds of the mean of a batch of calls.

Prints one JSON object. What cannot run is named in `missing` (with the
reason), and its figures are null: never a made-up figure.

    python bench/pallas_vs_mpmd.py --cli target/release/mpmd --rounds 3
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
N = 1 << 20
BLOCK = 4096
KERNELS = ("elementwise", "reduction", "producer_consumer", "matmul_tiled")

missing = []

try:
    import numpy as np
except ImportError as e:  # pragma: no cover: said in the report
    np = None
    missing.append(f"numpy: {e}")

jax = jnp = lax = pl = plgpu = InterpretGPUParams = None
try:
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import pallas as pl
except ImportError as e:
    missing.append(f"jax with Pallas (pip install 'jax>=0.10,<0.12'): {e}")
if pl is not None:
    try:
        from jax.experimental.pallas import mosaic_gpu as plgpu
    except ImportError as e:
        plgpu = None
        missing.append(f"jax.experimental.pallas.mosaic_gpu (needs absl-py): {e}")
if plgpu is not None:
    InterpretGPUParams = getattr(plgpu, "InterpretGPUParams", None)
    if InterpretGPUParams is None:
        try:
            from jax._src.pallas.mosaic_gpu.interpret.params import InterpretGPUParams
        except ImportError as e:
            missing.append(f"Pallas GPU interpret mode (InterpretGPUParams) in jax {jax.__version__}: {e}")

mpmd = None
try:
    import mpmd
    import mpmd.jax
except ImportError as e:
    missing.append(f"the mpmd package (maturin develop --release in python/): {e}")


def pallas_kernels(detect: bool):
    """The Pallas side: name -> (jitted function, arguments)."""
    interpret = InterpretGPUParams(detect_races=detect)
    f32 = jnp.float32
    x = jnp.arange(N, dtype=f32) * (1.0 / 1024)
    mesh = plgpu.Mesh(grid=(N // BLOCK,), grid_names=("b",))

    @pl.kernel(out_type=jax.ShapeDtypeStruct((N,), f32), mesh=mesh, interpret=interpret)
    def elementwise(x_ref, y_ref):
        tile = pl.ds(lax.axis_index("b") * BLOCK, BLOCK)
        y_ref[tile] = 2.0 * x_ref[tile] + 1.0

    @pl.kernel(out_type=jax.ShapeDtypeStruct((N // BLOCK,), f32), mesh=mesh, interpret=interpret)
    def reduction(x_ref, sums_ref):
        b = lax.axis_index("b")
        sums_ref[b] = jnp.sum(x_ref[pl.ds(b * BLOCK, BLOCK)])

    @pl.kernel(out_type=jax.ShapeDtypeStruct((N,), f32), mesh=mesh, interpret=interpret)
    def produce(x_ref, buf_ref):
        tile = pl.ds(lax.axis_index("b") * BLOCK, BLOCK)
        buf_ref[tile] = x_ref[tile] * 3.0

    @pl.kernel(out_type=jax.ShapeDtypeStruct((N,), f32), mesh=mesh, interpret=interpret)
    def consume(buf_ref, y_ref):
        tile = pl.ds(lax.axis_index("b") * BLOCK, BLOCK)
        y_ref[tile] = buf_ref[tile] + 1.0

    tiles = plgpu.Mesh(grid=(4, 4), grid_names=("i", "j"))

    @pl.kernel(out_type=jax.ShapeDtypeStruct((256, 256), f32), mesh=tiles, interpret=interpret)
    def matmul(a_ref, b_ref, c_ref):
        i, j = lax.axis_index("i"), lax.axis_index("j")
        a = a_ref[pl.ds(i * 64, 64), :]
        b = b_ref[:, pl.ds(j * 64, 64)]
        c_ref[pl.ds(i * 64, 64), pl.ds(j * 64, 64)] = jnp.dot(a, b)

    a = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (256, 256)).astype(np.float32))
    b = jnp.asarray(np.random.default_rng(1).uniform(-1, 1, (256, 256)).astype(np.float32))
    return {
        "elementwise": (jax.jit(elementwise), (x,)),
        "reduction": (jax.jit(reduction), (x,)),
        "producer_consumer": (jax.jit(lambda x: consume(produce(x))), (x,)),
        "matmul_tiled": (jax.jit(matmul), (a, b)),
    }


WALL = re.compile(r"time: wall ([0-9.]+) ms")


def cli_seconds(cli: str, path: Path, checked: bool) -> float:
    """One `mpmd run --time` of the file's call: the `time: wall` figure."""
    command = [cli, "run", str(path), "--time"]
    if checked:
        command += ["--checked", "--schedules", "0"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")
    walls = WALL.findall(done.stdout)
    if len(walls) != 1:
        raise RuntimeError(f"{' '.join(command)}: expected one `time: wall` line:\n{done.stdout}")
    return float(walls[0]) / 1e3


def clocked(f) -> float:
    start = time.perf_counter()
    f()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", required=True, help="the release `mpmd` binary")
    parser.add_argument("--kernels", default=str(HERE / "kernels"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tiny-calls", type=int, default=200)
    args = parser.parse_args()
    kernels = Path(args.kernels)
    report = {
        "rounds": args.rounds,
        "missing": missing,
        "versions": {
            "python": platform.python_version(),
            "jax": getattr(jax, "__version__", None),
            "numpy": getattr(np, "__version__", None),
        },
        "rows": [],
        "tiny": None,
    }
    pallas_ok = InterpretGPUParams is not None and np is not None
    mpmd_ok = mpmd is not None and np is not None

    # name -> variant -> a callable running it once (None: cannot run).
    variants = {}
    for name in KERNELS:
        path = kernels / f"{name}.mpmd"
        v = {
            "cli_off": lambda p=path: cli_seconds(args.cli, p, False),
            "cli_on": lambda p=path: cli_seconds(args.cli, p, True),
        }
        if mpmd_ok:
            module = mpmd.Module.from_file(path)
            map_name = module.maps[0]
            inputs = mpmd.generated_inputs(module, map_name)
            off, on = mpmd.Interpreter(), mpmd.Interpreter(checked=True, schedules=0)
            v["py_off"] = lambda m=module, n=map_name, i=inputs, b=off: clocked(lambda: b.call(m, n, **i))
            v["py_on"] = lambda m=module, n=map_name, i=inputs, b=on: clocked(lambda: b.call(m, n, **i))
        variants[name] = v
    if pallas_ok:
        for detect, key in ((False, "pallas_off"), (True, "pallas_on")):
            for name, (f, fargs) in pallas_kernels(detect).items():
                variants[name][key] = lambda f=f, a=fargs: clocked(lambda: jax.block_until_ready(f(*a)))

    times = {name: {key: [] for key in v} for name, v in variants.items()}
    for name, v in variants.items():
        for key, run in v.items():
            run()  # warm-up
            print(f"warm-up {name} {key}", file=sys.stderr, flush=True)
    for r in range(args.rounds):
        for name, v in variants.items():
            for key, run in v.items():
                times[name][key].append(run())
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    for name in KERNELS:
        row = {"kernel": name}
        for key in ("pallas_off", "pallas_on", "cli_off", "cli_on", "py_off", "py_on"):
            t = times[name].get(key)
            row[key] = statistics.median(t) if t else None
        report["rows"].append(row)

    if mpmd_ok:
        report["tiny"] = tiny_map(args.rounds, args.tiny_calls)
    print(json.dumps(report, indent=1))
    return 0


TINY = """
mesh m { threads t = 256; }
kernel axpb(x: gmem<f32[256]>, y: gmem<f32[256]>) {
  let i: u32 = axis_index(t);
  y[i] = x[i] * 2.0 + 1.0;
}
map tiny { programs [m: axpb]; inputs [x: gmem<f32[256]>]; outputs [y: gmem<f32[256]>]; }
"""


def tiny_map(rounds: int, calls: int):
    """Seconds per call of a 256-element map: `Interpreter().call`, under
    `jax.jit` through `mpmd.jax.kernel`, and `jax.jit` of `jnp`."""
    module = mpmd.Module.from_text(TINY, "tiny.mpmd")
    x = np.arange(256, dtype=np.float32)
    backend = mpmd.Interpreter()
    ways = {"call": lambda: backend.call(module, "tiny", x=x)}
    if jax is not None:
        kernel = mpmd.jax.kernel(module, "tiny")
        with_mpmd = jax.jit(lambda x: kernel(x)["y"])
        with_jnp = jax.jit(lambda x: x * 2.0 + 1.0)
        xj = jnp.asarray(x)
        ways["jax_jit"] = lambda: with_mpmd(xj).block_until_ready()
        ways["jnp_jit"] = lambda: with_jnp(xj).block_until_ready()
    for f in ways.values():
        f()
    per_call = {k: [] for k in ways}
    for _ in range(rounds):
        for k, f in ways.items():
            start = time.perf_counter()
            for _ in range(calls):
                f()
            per_call[k].append((time.perf_counter() - start) / calls)
    return {k: statistics.median(v) for k, v in per_call.items()} | {"calls": calls}


if __name__ == "__main__":
    raise SystemExit(main())
