#!/usr/bin/env bash
# gpu-check.sh: the CUDA checks that need a GPU, on a machine with an NVIDIA
# GPU and driver but no Rust toolchain and no network.
#
#   scripts/gpu-check.sh BIN_DIR [OUT_FILE]
#   scripts/gpu-check.sh --dry-run BIN_DIR [OUT_FILE]
#
# --dry-run runs nothing on a GPU and needs none: it checks, where the bundle
# is built, that the run would start: BIN_DIR holds every file the steps
# use, the bundle and this checkout together fit the 64 MiB a GPU machine
# is sent, the NVRTC and cuBLAS searches below find them or say they do not,
# pytest collects python/tests_gpu with the bundle's extension (jax and
# torch are not imported to collect), and the steps' time limits add up to
# under 10 minutes. conformance/tests/gpu_check.rs runs it on a fake bundle.
#
# BIN_DIR holds release binaries built elsewhere (`cargo xtask gpu-bundle
# BIN_DIR` on a machine with Rust builds all of them):
#   mpmd-conformance  the conformance runner (or: xtask, used only when cargo
#                     is on PATH, since `xtask conformance` runs cargo)
#   cuda-bench        the CUDA benchmarks (backend-cuda/src/bin/cuda-bench/)
#   mpmd              the CLI (optional: a smoke run of `mpmd run --backend cuda`)
#   gpu_run           the backend's GPU tests (optional: the test binary of
#                     `cargo test --release -p mpmd-cuda --test gpu_run --no-run`)
#   gpu_embedding     the GPU tests of runs on caller-owned memory (optional:
#                     `... --test gpu_embedding --no-run`)
#   _mpmd.abi3.so     the Python package's extension (optional: `cargo build
#                     --release -p mpmd-python`, target/release/lib_mpmd.so),
#                     put beside this checkout's python/mpmd for the package's
#                     GPU tests (python/tests_gpu) and the JAX benchmark;
#                     they need a python3 with numpy, ml_dtypes, pytest, jax
#                     with CUDA and torch with CUDA
#   mpmd-fuzz         the differential fuzzer (optional: against CUDA)
#   wgsl_bench        the WGSL benchmark (optional: `cargo bench -p mpmd-wgpu
#                     --bench wgsl_vs_handwritten --no-run`), run with step 4
#   vulkan/*.deb      Debian packages of the Vulkan loader and GLVND
#                     (optional: unpacked when the machine has no
#                     libvulkan.so.1, so that WGSL runs on the GPU's own
#                     Vulkan driver)
# and NVRTC (libnvrtc.so.13 + libnvrtc-builtins.so.13.*), searched in order:
#   $MPMD_NVRTC_DIR, BIN_DIR/lib, BIN_DIR/nvidia/cu13/lib,
#   $CARGO_TARGET_DIR (default target)/mpmd-tools/python/nvidia/cu13/lib,
#   any python's nvidia/cu13/lib,
#   /usr/local/cuda/lib64, the ld.so cache, then a search of /opt, /usr and
#   /root. A BIN_DIR/libnvrtc.so.13.xz or .gz
#   (with libnvrtc-builtins.so.13.*.xz or .gz) is unpacked to a temporary folder.
# and, for the GEMM benchmark's baseline only, cuBLAS (libcublas.so.13 or
# .12 with its libcublasLt beside it; not shipped in the bundle, it is
# hundreds of MB: the CUDA toolkit, or the nvidia-cublas wheel that JAX
# and PyTorch with CUDA install), searched in order: $MPMD_CUBLAS_DIR,
# BIN_DIR/lib, BIN_DIR/nvidia/cu13/lib, BIN_DIR/nvidia/cublas/lib, any
# python's nvidia/cu13/lib and nvidia/cublas/lib, /usr/local/cuda/lib64,
# the ld.so cache, then a search of /opt, /usr and /root. Without it
# cuda-bench prints `gemm.cublas missing: ...` and the two GEMM goals stay
# "not measured" (never met).
#
# Runs, from the repository root (so that conformance finds its corpus):
#   1. device and driver facts (nvidia-smi);
#   2. the GPU tests (f16 and bf16 included) and those of runs on
#      caller-owned memory (and the CLI smoke run);
#   3. the conformance corpus with CUDA executing (backends interp,cuda);
#   4. when a Vulkan loader and the NVIDIA Vulkan driver are there, the
#      corpus again with WGSL on the GPU as well (interp,cuda,wgpu: CUDA and
#      WGSL judged against the interpreter and compared with each other),
#      then the WGSL benchmark on that adapter.
#      NVIDIA's subgroups are 32 wide, so WGSL runs the warp collectives and
#      mma on native subgroups (after the backend's probe dispatch agreed):
#      the report states the path (`wgpu warp collectives:`) and the warp and
#      mma cases' rows, i.e. whether native subgroups agreed with the
#      interpreter; any other path on this driver fails the step;
#   5. the benchmarks (f32, f16 and bf16; a prepared map on caller memory
#      against a raw launch; the bf16 GEMM example, stream-K and
#      data-parallel at 64x64 and 128x128 tiles, against cuBLAS, with
#      ptxas registers and spills of its kernels);
#   6. the Python package on the GPU: mpmd.Cuda on device arrays and
#      mpmd.jax under jit (pytest python/tests_gpu), then the JAX benchmark
#      (python/benches/jax_bench.py: against `jnp` at 1 MiB, and at 256 MiB
#      against the bare backend's figure from step 5);
#   7. the fuzzer with CUDA executing;
# and writes every figure to OUT_FILE (default gpu-check-report.txt), ending
# with a summary: test, corpus and fuzz counts, the GEMM figures (ptxas
# registers and spills, TFLOP/s against cuBLAS) and the speed goals. Each
# step has the time limit in the LIMIT_* table below; they add up to under
# 10 minutes (the dry run checks it), so the whole run fits one command on a
# lent GPU machine. Exit status: 0 when every step passed, 1 when a step
# failed, 2 when the set-up is missing something.
set -u -o pipefail

# Each step's time limit in seconds (`timeout`); the dry run adds them up.
LIMIT_CLI=15
LIMIT_GPU_TESTS=60
LIMIT_EMBEDDING_TESTS=40
LIMIT_CONFORMANCE=100
LIMIT_WGSL_CONFORMANCE=95
LIMIT_WGSL_BENCH=30
LIMIT_BENCH=90
LIMIT_PYTEST=40
LIMIT_JAX_BENCH=40
LIMIT_FUZZ=30
FUZZ_SECONDS=20
STEP_LIMITS=(LIMIT_CLI LIMIT_GPU_TESTS LIMIT_EMBEDDING_TESTS LIMIT_CONFORMANCE LIMIT_WGSL_CONFORMANCE
  LIMIT_WGSL_BENCH LIMIT_BENCH LIMIT_PYTEST LIMIT_JAX_BENCH LIMIT_FUZZ)
# Under 10 minutes, with a minute left for the set-up (library searches,
# unpacking) and the report.
LIMITS_TOTAL_MAX=540
# What a lent GPU machine is sent: this checkout and the bundle, 64 MiB.
CARRY_MAX_BYTES=$((64 * 1024 * 1024))
# The bundle's files each step runs (`cargo xtask gpu-bundle` writes them).
BUNDLE_FILES=(mpmd mpmd-conformance mpmd-fuzz cuda-bench gpu_run gpu_embedding _mpmd.abi3.so wgsl_bench)
# The checkout's files and folders the steps read.
CHECKOUT_PATHS=(conformance/cases examples python/mpmd/__init__.py python/mpmd/jax.py python/mpmd/py.typed
  python/tests_gpu/conftest.py python/tests_gpu/test_cuda.py python/benches/jax_bench.py python/benches/axpb.mpmd)

DRY_RUN=0
if [ "${1:-}" = "--dry-run" ]; then
  DRY_RUN=1
  shift
fi
if [ $# -lt 1 ] || [ ! -d "$1" ]; then
  echo "usage: $0 [--dry-run] BIN_DIR [OUT_FILE]" >&2
  exit 2
fi
BIN_DIR=$(cd "$1" && pwd)
REPO_ROOT=$(cd "$(dirname "$0")/.." && pwd)
# `cargo xtask setup`'s tools (on the machine that built the bundle).
TOOLS_DIR="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/mpmd-tools"
OUT=${2:-gpu-check-report.txt}
case "$OUT" in /*) ;; *) OUT="$PWD/$OUT" ;; esac
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mpmd-gpu-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
START=$(date +%s)
STATUS=0

: >"$OUT"
say() { echo "$*" | tee -a "$OUT"; }
section() { say ""; say "== $* (t=$(( $(date +%s) - START ))s)"; }
# judge LABEL RC LIMIT: reports a step's exit status (124: its time limit ran
# out), fails the check unless it is 0, and returns whether it was.
judge() {
  if [ "$2" -eq 124 ]; then
    say "$1 TIMED OUT after $3 s"
  elif [ "$2" -ne 0 ]; then
    say "$1 FAILED (exit $2)"
  else
    say "$1 ok"
    return 0
  fi
  STATUS=1
  return 1
}

say "mpmd gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "bin_dir $BIN_DIR"
say "repo $REPO_ROOT $(cat "$REPO_ROOT/.git/HEAD" 2>/dev/null || echo '')"

section "device"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | sed 's/^/gpu /' | tee -a "$OUT"
else
  say "gpu nvidia-smi not found (the driver library may still be present)"
fi

# The site-packages folders of each python on PATH, one a line (where the
# nvidia-* wheels put their libraries).
python_site_dirs() {
  local py
  for py in python3 python; do
    if command -v "$py" >/dev/null 2>&1; then
      "$py" -c 'import site; print("\n".join(site.getsitepackages()+[site.getusersitepackages()]))' 2>/dev/null || true
    fi
  done
}

# ---- NVRTC --------------------------------------------------------------
find_nvrtc_dir() {
  local candidates=()
  [ -n "${MPMD_NVRTC_DIR:-}" ] && candidates+=("$MPMD_NVRTC_DIR")
  candidates+=("$BIN_DIR/lib" "$BIN_DIR/nvidia/cu13/lib" "$TOOLS_DIR/python/nvidia/cu13/lib")
  local site
  while IFS= read -r site; do
    [ -n "$site" ] && candidates+=("$site/nvidia/cu13/lib")
  done < <(python_site_dirs)
  candidates+=("/usr/local/cuda/lib64")
  local dir
  for dir in "${candidates[@]}"; do
    if [ -f "$dir/libnvrtc.so.13" ]; then
      echo "$dir"
      return 0
    fi
  done
  # Compressed copies shipped next to the binaries.
  local packed
  for packed in "$BIN_DIR"/libnvrtc.so.13.xz "$BIN_DIR"/libnvrtc.so.13.gz; do
    if [ -f "$packed" ]; then
      mkdir -p "$WORK/nvrtc"
      local f
      for f in "$BIN_DIR"/libnvrtc*.so.13*.xz; do [ -f "$f" ] && xz -dc "$f" >"$WORK/nvrtc/$(basename "${f%.xz}")"; done
      for f in "$BIN_DIR"/libnvrtc*.so.13*.gz; do [ -f "$f" ] && gzip -dc "$f" >"$WORK/nvrtc/$(basename "${f%.gz}")"; done
      echo "$WORK/nvrtc"
      return 0
    fi
  done
  if command -v ldconfig >/dev/null 2>&1 && ldconfig -p 2>/dev/null | grep -q 'libnvrtc.so.13 '; then
    echo "system"
    return 0
  fi
  local found
  found=$(find /opt /usr /root -maxdepth 8 -name libnvrtc.so.13 2>/dev/null | head -n 1)
  if [ -n "$found" ]; then
    dirname "$found"
    return 0
  fi
  return 1
}

section "tools"
if NVRTC_DIR=$(find_nvrtc_dir); then
  if [ "$NVRTC_DIR" != "system" ]; then
    export LD_LIBRARY_PATH="$NVRTC_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  say "nvrtc $NVRTC_DIR"
elif [ "$DRY_RUN" -eq 1 ]; then
  say "nvrtc not found here: libnvrtc.so.13 (the GPU machine needs it: nvidia/cu13/lib of the nvidia-cuda-nvrtc wheel in $BIN_DIR/lib, MPMD_NVRTC_DIR, or a python's nvidia-cuda-nvrtc)"
else
  say "FATAL nvrtc: libnvrtc.so.13 not found (put nvidia/cu13/lib of the nvidia-cuda-nvrtc wheel in $BIN_DIR/lib, or set MPMD_NVRTC_DIR)"
  exit 2
fi
# ---- cuBLAS (the GEMM benchmark's baseline) -----------------------------------
find_cublas_dir() {
  local candidates=()
  [ -n "${MPMD_CUBLAS_DIR:-}" ] && candidates+=("$MPMD_CUBLAS_DIR")
  candidates+=("$BIN_DIR/lib" "$BIN_DIR/nvidia/cu13/lib" "$BIN_DIR/nvidia/cublas/lib")
  local site
  while IFS= read -r site; do
    [ -n "$site" ] && candidates+=("$site/nvidia/cu13/lib" "$site/nvidia/cublas/lib")
  done < <(python_site_dirs)
  candidates+=("/usr/local/cuda/lib64")
  local dir soname
  for dir in "${candidates[@]}"; do
    for soname in libcublas.so.13 libcublas.so.12; do
      if [ -f "$dir/$soname" ]; then
        echo "$dir"
        return 0
      fi
    done
  done
  if command -v ldconfig >/dev/null 2>&1 && ldconfig -p 2>/dev/null | grep -qE 'libcublas\.so\.1[23] '; then
    echo "system"
    return 0
  fi
  local found
  found=$(find /opt /usr /root -maxdepth 8 \( -name libcublas.so.13 -o -name libcublas.so.12 \) 2>/dev/null | head -n 1)
  if [ -n "$found" ]; then
    dirname "$found"
    return 0
  fi
  return 1
}
if CUBLAS_DIR=$(find_cublas_dir); then
  if [ "$CUBLAS_DIR" != "system" ]; then
    # Last: a python's nvidia/cu13/lib may hold another NVRTC than the one chosen above.
    export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$CUBLAS_DIR"
  fi
  say "cublas $CUBLAS_DIR"
else
  say "cublas not found (libcublas.so.13 or .12; set MPMD_CUBLAS_DIR): the GEMM benchmark runs without its baseline and its goals are not measured"
fi
# ptxas is only needed for compile-only checks; runs load CUBINs from NVRTC.
for dir in "$BIN_DIR/bin" "$BIN_DIR/nvidia/cu13/bin" "$TOOLS_DIR/python/nvidia/cu13/bin" /usr/local/cuda/bin; do
  if [ -x "$dir/ptxas" ]; then export PATH="$dir:$PATH"; break; fi
done
say "ptxas $(command -v ptxas || echo 'not found (compile-only figures will fail; runs do not need it)')"
export MPMD_CACHE_DIR="$WORK/cache"
# Cases that must deadlock end by the wait time limit; 2 s keeps them short.
export MPMD_CUDA_WAIT_TIMEOUT_MS="${MPMD_CUDA_WAIT_TIMEOUT_MS:-2000}"
say "wait_timeout_ms $MPMD_CUDA_WAIT_TIMEOUT_MS"

bin() { # the binary NAME in BIN_DIR or BIN_DIR/release, or nothing
  local name=$1
  for candidate in "$BIN_DIR/$name" "$BIN_DIR/release/$name"; do
    if [ -x "$candidate" ]; then echo "$candidate"; return 0; fi
  done
  return 1
}

# The checkout's package with the bundle's extension, under $WORK/py.
stage_python_package() {
  mkdir -p "$WORK/py/mpmd"
  cp "$REPO_ROOT"/python/mpmd/*.py "$REPO_ROOT"/python/mpmd/*.pyi "$REPO_ROOT/python/mpmd/py.typed" "$WORK/py/mpmd/" &&
    cp "$BIN_DIR/_mpmd.abi3.so" "$WORK/py/mpmd/_mpmd.abi3.so"
}

# ---- dry run: would the run start? ------------------------------------------
if [ "$DRY_RUN" -eq 1 ]; then
  section "dry run"
  DRY_FAILED=0
  dry_fail() { say "dry-run FAILED $*"; DRY_FAILED=1; }
  for name in "${BUNDLE_FILES[@]}"; do
    case "$name" in
      *.so) if [ -f "$BIN_DIR/$name" ]; then say "dry-run bundle $name ok"; else dry_fail "bundle $name: not in $BIN_DIR"; fi ;;
      *) if bin "$name" >/dev/null; then say "dry-run bundle $name ok"; else dry_fail "bundle $name: no executable $name in $BIN_DIR"; fi ;;
    esac
  done
  debs=$(find "$BIN_DIR/vulkan" -maxdepth 1 -name '*.deb' 2>/dev/null | wc -l)
  say "dry-run bundle vulkan/*.deb: $debs (optional: used where the GPU machine has no libvulkan.so.1)"
  for path in "${CHECKOUT_PATHS[@]}"; do
    if [ -e "$REPO_ROOT/$path" ]; then say "dry-run checkout $path ok"; else dry_fail "checkout $path: missing in $REPO_ROOT"; fi
  done
  bundle_bytes=$(du -sb "$BIN_DIR" | cut -f1)
  if checkout_list=$(cd "$REPO_ROOT" && git ls-files -z --cached --others --exclude-standard 2>/dev/null | tr '\0' '\n'); then
    checkout_bytes=$(cd "$REPO_ROOT" && printf '%s\n' "$checkout_list" | while IFS= read -r f; do [ -f "$f" ] && [ ! -L "$f" ] && stat -c %s "$f"; done | awk '{ s += $1 } END { print s + 0 }')
    carried=$((bundle_bytes + checkout_bytes))
    line="checkout $checkout_bytes + bundle $bundle_bytes = $carried bytes, limit $CARRY_MAX_BYTES"
    if [ "$carried" -lt "$CARRY_MAX_BYTES" ]; then say "dry-run size ok: $line"; else dry_fail "size: $line"; fi
  else
    dry_fail "size: $REPO_ROOT is not a git checkout, so what is sent cannot be measured"
  fi
  limits_total=0
  for limit in "${STEP_LIMITS[@]}"; do
    say "dry-run limit $limit ${!limit} s"
    limits_total=$((limits_total + ${!limit}))
  done
  if [ "$limits_total" -le "$LIMITS_TOTAL_MAX" ]; then
    say "dry-run limits ok: $limits_total s (at most $LIMITS_TOTAL_MAX s, under 10 minutes with the set-up)"
  else
    dry_fail "limits: the steps' limits add up to $limits_total s, more than $LIMITS_TOTAL_MAX s"
  fi
  if [ "$FUZZ_SECONDS" -ge "$LIMIT_FUZZ" ]; then
    dry_fail "limits: the fuzzer's --time $FUZZ_SECONDS leaves nothing of LIMIT_FUZZ ($LIMIT_FUZZ s) for its last program"
  fi
  # The GPU machine's python3 runs the steps; here MPMD_GPU_CHECK_PYTHON may
  # name one that has numpy and pytest (e.g. `cargo xtask pytest`'s).
  PYTHON=${MPMD_GPU_CHECK_PYTHON:-$(command -v python3 || command -v python || true)}
  if [ -z "$PYTHON" ]; then
    dry_fail "python: no python3 on PATH to collect python/tests_gpu"
  elif ! "$PYTHON" -c 'import numpy, pytest' >"$WORK/py-imports.txt" 2>&1; then
    dry_fail "python: $PYTHON cannot import numpy and pytest (collecting python/tests_gpu needs them): $(tail -n 1 "$WORK/py-imports.txt")"
  elif ! stage_python_package; then
    dry_fail "python: cannot stage the package with $BIN_DIR/_mpmd.abi3.so"
  else
    say "dry-run python $("$PYTHON" -c 'import sys; print(sys.version.split()[0])') at $PYTHON"
    for module in jax torch ml_dtypes; do
      version=$("$PYTHON" -c "import $module; print($module.__version__)" 2>/dev/null) || version="not installed here (the GPU steps need it; collecting does not)"
      say "dry-run python $module $version"
    done
    (cd "$REPO_ROOT" && PYTHONPATH="$WORK/py${PYTHONPATH:+:$PYTHONPATH}" timeout "$LIMIT_PYTEST" "$PYTHON" -m pytest python/tests_gpu --collect-only -q -p no:cacheprovider) >"$WORK/pytest-collect.txt" 2>&1
    rc=$?
    collected=$(grep -cE '^(python/)?tests_gpu/[^ ]*::' "$WORK/pytest-collect.txt")
    if [ $rc -eq 0 ] && [ "$collected" -gt 0 ]; then
      say "dry-run python collected $collected tests in python/tests_gpu"
    else
      dry_fail "python: pytest --collect-only python/tests_gpu (exit $rc, $collected tests):"
      tail -n 15 "$WORK/pytest-collect.txt" | sed 's/^/python | /' | tee -a "$OUT"
    fi
  fi
  if [ "$DRY_FAILED" -eq 0 ]; then
    say "dry-run ok: the GPU check would start with this bundle"
  fi
  say "status $DRY_FAILED elapsed $(( $(date +%s) - START ))s report $OUT"
  exit $DRY_FAILED
fi

# ---- CLI smoke run ------------------------------------------------------
section "cli"
if MPMD=$(bin mpmd); then
  example=$(ls "$REPO_ROOT"/examples/*.mpmd 2>/dev/null | head -n 1)
  if [ -n "$example" ]; then
    say "cli mpmd run --backend cuda $(basename "$example")"
    if timeout "$LIMIT_CLI" "$MPMD" run --backend cuda "$example" >"$WORK/cli.txt" 2>&1; then
      say "cli ok"
    elif grep -q "not built yet" "$WORK/cli.txt"; then
      say "cli not run: this mpmd build does not wire the CUDA backend yet"
    else
      say "cli FAILED"
      STATUS=1
    fi
    head -n 40 "$WORK/cli.txt" | sed 's/^/cli | /' | tee -a "$OUT" >/dev/null
  else
    say "cli not run: no examples/*.mpmd in $REPO_ROOT"
  fi
else
  say "cli not run: no mpmd binary in $BIN_DIR"
fi

# ---- GPU tests ------------------------------------------------------------
section "gpu tests"
if TESTS=$(bin gpu_run); then
  (cd "$REPO_ROOT/backend-cuda" && timeout "$LIMIT_GPU_TESTS" "$TESTS" --test-threads 1 --include-ignored) >"$WORK/tests.txt" 2>&1
  rc=$?
  tee -a "$OUT" <"$WORK/tests.txt" >/dev/null
  grep -E '^test result' "$WORK/tests.txt" | sed 's/^/tests /' | tee -a "$OUT" >/dev/null
  judge "gpu tests" $rc "$LIMIT_GPU_TESTS"
else
  say "gpu tests not run: no gpu_run test binary in $BIN_DIR"
fi
if EMBED_TESTS=$(bin gpu_embedding); then
  (cd "$REPO_ROOT/backend-cuda" && timeout "$LIMIT_EMBEDDING_TESTS" "$EMBED_TESTS" --test-threads 1 --include-ignored) >"$WORK/embed-tests.txt" 2>&1
  rc=$?
  tee -a "$OUT" <"$WORK/embed-tests.txt" >/dev/null
  grep -E '^test result' "$WORK/embed-tests.txt" | sed 's/^/tests /' | tee -a "$OUT" >/dev/null
  judge "embedding tests" $rc "$LIMIT_EMBEDDING_TESTS"
else
  say "embedding tests not run: no gpu_embedding test binary in $BIN_DIR"
fi

# ---- conformance ----------------------------------------------------------
section "conformance (interp,cuda)"
CONF_ARGS=(--backends interp,cuda --json "$WORK/conformance.json")
# The runner's built-in corpus path is the build machine's; name this checkout's.
if [ -d "$REPO_ROOT/conformance/cases" ]; then
  CONF_ARGS+=(--cases "$REPO_ROOT/conformance/cases")
fi
if CONF=$(bin mpmd-conformance); then
  CONF_CMD=("$CONF" "${CONF_ARGS[@]}")
elif XTASK=$(bin xtask) && command -v cargo >/dev/null 2>&1; then
  CONF_CMD=("$XTASK" conformance --release "${CONF_ARGS[@]}")
else
  CONF_CMD=()
fi
if [ ${#CONF_CMD[@]} -gt 0 ]; then
  say "conformance command: ${CONF_CMD[*]}"
  (cd "$REPO_ROOT" && timeout "$LIMIT_CONFORMANCE" "${CONF_CMD[@]}") >"$WORK/conformance.txt" 2>&1
  rc=$?
  cat "$WORK/conformance.txt" >>"$OUT"
  judge conformance $rc "$LIMIT_CONFORMANCE"
  if [ -f "$WORK/conformance.json" ]; then
    say "conformance json:"
    cat "$WORK/conformance.json" >>"$OUT"
    echo >>"$OUT"
  fi
else
  say "conformance not run: no mpmd-conformance in $BIN_DIR (xtask needs cargo, which is not on PATH)"
  STATUS=1
fi

# ---- WGSL on the GPU (Vulkan) ---------------------------------------------
section "conformance (interp,cuda,wgpu) on the GPU's Vulkan driver"
has_vulkan_loader() { ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1 '; }
if ! has_vulkan_loader && ls "$BIN_DIR"/vulkan/*.deb >/dev/null 2>&1; then
  mkdir -p "$WORK/vulkan"
  for deb in "$BIN_DIR"/vulkan/*.deb; do
    if command -v dpkg-deb >/dev/null 2>&1; then
      dpkg-deb -x "$deb" "$WORK/vulkan"
    else
      # A .deb is an ar archive whose data.tar.* holds the files.
      mkdir -p "$WORK/deb" && (cd "$WORK/deb" && rm -f data.tar.* && ar x "$deb" && tar -xf data.tar.* -C "$WORK/vulkan")
    fi
  done
  VK_LIBS=$(dirname "$(find "$WORK/vulkan" -name 'libvulkan.so.1*' | head -n 1)")
  export LD_LIBRARY_PATH="$VK_LIBS:${LD_LIBRARY_PATH:-}"
  say "vulkan loader unpacked from $BIN_DIR/vulkan into $VK_LIBS"
fi
VK_ICD=$(ls /usr/share/vulkan/icd.d/nvidia_icd*.json /etc/vulkan/icd.d/nvidia_icd*.json 2>/dev/null | head -n 1)
if [ -z "${CONF:-}" ]; then
  say "wgsl not run: no mpmd-conformance in $BIN_DIR"
elif ! has_vulkan_loader && [ -z "${VK_LIBS:-}" ]; then
  say "wgsl not run: no Vulkan loader (libvulkan.so.1) and no $BIN_DIR/vulkan/*.deb"
elif [ -z "$VK_ICD" ]; then
  say "wgsl not run: no NVIDIA Vulkan driver manifest (nvidia_icd.json) under /usr/share/vulkan or /etc/vulkan"
else
  say "vulkan driver manifest $VK_ICD"
  # --wgpu-co-resident: the corpus's cycles run as one fused dispatch, which
  # the backend cannot establish on this driver; their results are unverified.
  WGSL_ARGS=(--backends interp,cuda,wgpu --wgpu-co-resident --json "$WORK/conformance-wgsl.json")
  [ -d "$REPO_ROOT/conformance/cases" ] && WGSL_ARGS+=(--cases "$REPO_ROOT/conformance/cases")
  (cd "$REPO_ROOT" && VK_ICD_FILENAMES="$VK_ICD" timeout "$LIMIT_WGSL_CONFORMANCE" "$CONF" "${WGSL_ARGS[@]}") >"$WORK/conformance-wgsl.txt" 2>&1
  rc=$?
  cat "$WORK/conformance-wgsl.txt" >>"$OUT"
  judge "wgsl conformance" $rc "$LIMIT_WGSL_CONFORMANCE"
  # Native warp collectives are the point of running WGSL here: say which
  # path ran, and fail the step when it was not native.
  WARP_LINE=$(grep -m1 '^  wgpu warp collectives:' "$WORK/conformance-wgsl.txt")
  case "$WARP_LINE" in
    *"wgpu warp collectives: native subgroups"*) say "wgsl warp collectives ran on native subgroups" ;;
    *) say "wgsl warp collectives did NOT run on native subgroups on this driver: ${WARP_LINE:-no line in the report}"; STATUS=1 ;;
  esac
  if WGSL_BENCH=$(bin wgsl_bench); then
    say "wgsl benchmark (generated WGSL against hand-written WGSL, same adapter):"
    VK_ICD_FILENAMES="$VK_ICD" timeout "$LIMIT_WGSL_BENCH" "$WGSL_BENCH" --bench >"$WORK/wgsl-bench.txt" 2>&1
    rc=$?
    tee -a "$OUT" <"$WORK/wgsl-bench.txt" >/dev/null
    judge "wgsl benchmark" $rc "$LIMIT_WGSL_BENCH"
  else
    say "wgsl benchmark not run: no wgsl_bench in $BIN_DIR"
  fi
fi

# ---- benchmarks -----------------------------------------------------------
section "benchmarks"
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
if BENCH=$(bin cuda-bench); then
  MPMD_BENCH_ARCH="${ARCH:-90}" timeout "$LIMIT_BENCH" "$BENCH" --examples "$REPO_ROOT/examples" >"$WORK/bench.txt" 2>&1
  rc=$?
  tee -a "$OUT" <"$WORK/bench.txt"
  if judge benchmarks $rc "$LIMIT_BENCH" && grep -q '^gpu skipped' "$WORK/bench.txt"; then
    say "benchmarks did not reach the GPU"
    STATUS=1
  fi
else
  say "benchmarks not run: no cuda-bench binary in $BIN_DIR"
  STATUS=1
fi

# ---- the Python package on the GPU ------------------------------------------
section "python (mpmd.Cuda on device arrays, mpmd.jax under jit)"
PYTHON=$(command -v python3 || command -v python || true)
if [ ! -f "$BIN_DIR/_mpmd.abi3.so" ]; then
  say "python not run: no _mpmd.abi3.so in $BIN_DIR"
  STATUS=1
elif [ -z "$PYTHON" ] || ! "$PYTHON" -c 'import numpy, ml_dtypes, pytest, jax, torch' >"$WORK/py-imports.txt" 2>&1; then
  say "python not run: ${PYTHON:-python3} cannot import numpy, ml_dtypes, pytest, jax and torch:"
  sed 's/^/python | /' "$WORK/py-imports.txt" | tee -a "$OUT"
  STATUS=1
else
  stage_python_package
  say "python $("$PYTHON" -c 'import sys, jax, torch; print(sys.version.split()[0], "jax", jax.__version__, "torch", torch.__version__)')"
  # JAX and PyTorch share the GPU: JAX takes memory as it needs it.
  export XLA_PYTHON_CLIENT_PREALLOCATE=false
  (cd "$REPO_ROOT" && PYTHONPATH="$WORK/py${PYTHONPATH:+:$PYTHONPATH}" timeout "$LIMIT_PYTEST" "$PYTHON" -m pytest python/tests_gpu -q -p no:cacheprovider) >"$WORK/pytest-gpu.txt" 2>&1
  rc=$?
  tee -a "$OUT" <"$WORK/pytest-gpu.txt" >/dev/null
  judge "python gpu tests" $rc "$LIMIT_PYTEST"
  (cd "$REPO_ROOT" && PYTHONPATH="$WORK/py${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 timeout "$LIMIT_JAX_BENCH" "$PYTHON" python/benches/jax_bench.py) >"$WORK/jax-bench.txt" 2>&1
  rc=$?
  tee -a "$OUT" <"$WORK/jax-bench.txt"
  judge "jax benchmark" $rc "$LIMIT_JAX_BENCH"
fi
# JAX under jit against the bare backend on the same 256 MiB map: within 5 %.
bare_ms=$(sed -n 's/^bench\.embedding\.bare_256mib ms=\([0-9.]*\).*/\1/p' "$WORK/bench.txt" 2>/dev/null | head -n 1)
jax_ms=$(sed -n 's/^bench\.jax\.axpb_256mib mpmd_ms=\([0-9.]*\).*/\1/p' "$WORK/jax-bench.txt" 2>/dev/null | head -n 1)
if [ -n "$bare_ms" ] && [ -n "$jax_ms" ]; then
  awk -v jax="$jax_ms" -v bare="$bare_ms" 'BEGIN {
    r = jax / bare
    printf "goal.jax_256mib_vs_bare_backend figure=%.3f target=1.05 %s (jax %s ms, bare backend %s ms a call)\n", r, (r <= 1.05 ? "met" : "NOT met"), jax, bare
  }' | tee -a "$OUT" "$WORK/goals-extra.txt" >/dev/null
else
  echo "goal.jax_256mib_vs_bare_backend not measured" | tee -a "$OUT" "$WORK/goals-extra.txt" >/dev/null
fi

# ---- fuzzing --------------------------------------------------------------
section "fuzz (cuda)"
if FUZZ=$(bin mpmd-fuzz); then
  (cd "$REPO_ROOT" && timeout "$LIMIT_FUZZ" "$FUZZ" --seed "$(date +%s)" --time "$FUZZ_SECONDS" --backends cuda --timeout 10 --found-dir "$WORK/found") >"$WORK/fuzz.txt" 2>&1
  rc=$?
  tail -n 20 "$WORK/fuzz.txt" | tee -a "$OUT"
  if [ $rc -ne 0 ]; then
    say "fuzz FAILED (exit $rc); reproducers were written to $WORK/found (copied below)"
    for f in "$WORK"/found/*.mpmd; do [ -f "$f" ] && { say "--- $(basename "$f")"; cat "$f" >>"$OUT"; }; done
    STATUS=1
  fi
else
  say "fuzz not run: no mpmd-fuzz binary in $BIN_DIR"
fi

section "summary"
grep -hE '^(test result|[0-9]+ passed, [0-9]+ failed|triage:|fuzz: |[0-9]+ (passed|failed))' \
  "$WORK/tests.txt" "$WORK/embed-tests.txt" "$WORK/conformance.txt" "$WORK/conformance-wgsl.txt" \
  "$WORK/pytest-gpu.txt" "$WORK/fuzz.txt" 2>/dev/null | tee -a "$OUT"
grep -hE '^(  wgpu warp collectives:|warp_|mma_|user_warp_)' "$WORK/conformance-wgsl.txt" 2>/dev/null | sed 's/^/wgsl /' | tee -a "$OUT"
grep -hE '^(ptxas\.gemm\.|bench\.gemm\.|gemm\.)' "$WORK/bench.txt" 2>/dev/null | tee -a "$OUT"
grep -h '^goal\.' "$WORK/bench.txt" "$WORK/jax-bench.txt" "$WORK/goals-extra.txt" 2>/dev/null | tee -a "$OUT"

section "done"
say "status $STATUS elapsed $(( $(date +%s) - START ))s report $OUT"
exit $STATUS
