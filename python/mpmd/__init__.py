"""MPMD GPU kernels from Python.

A :class:`Module` is a parsed and validated ``.mpmd`` program; a backend
(:class:`Interpreter`, :class:`Wgpu`, :class:`Cuda`) runs calls of its maps
on numpy arrays (or anything with ``__dlpack__``: JAX and PyTorch CPU
arrays) and Python numbers, and keeps the module's device-resident refs
from call to call. :class:`Cuda` uses CUDA device arrays (PyTorch, JAX,
CuPy, through DLPack) in place and returns :class:`DeviceArray` s on the
device. ``mpmd.jax.kernel`` makes a map a function of ``jax.Array`` s
usable inside ``jax.jit`` (through an XLA FFI custom call: on a GPU, the
CUDA backend on XLA's own stream and buffers).

Messages are the Rust library's and the CLI's: a module that does not
validate raises :class:`ValidationError` whose message is exactly what
``mpmd check`` prints for it (before its final count line), and a call's
failure raises a :class:`RunError` subclass carrying the report
``mpmd run`` prints.
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional

import ml_dtypes
import numpy as np

from . import _mpmd
from ._mpmd import (
    BackendUnavailableError,
    DeviceArray,
    BadSemaphoreAmountError,
    LoopLimitError,
    DeadlockError,
    LowerError,
    Module,
    MpmdError,
    NondeterministicError,
    OutOfBoundsError,
    RaceError,
    RefusedError,
    RunError,
    UninitializedReadError,
    UnsupportedError,
    ValidationError,
    WaitTimeoutError,
)

__all__ = [
    "Module",
    "Interpreter",
    "Wgpu",
    "Cuda",
    "Backend",
    "Timing",
    "DeviceArray",
    "DTYPES",
    "generated_inputs",
    "MpmdError",
    "ValidationError",
    "LowerError",
    "BackendUnavailableError",
    "RunError",
    "RaceError",
    "DeadlockError",
    "OutOfBoundsError",
    "UninitializedReadError",
    "WaitTimeoutError",
    "BadSemaphoreAmountError",
    "LoopLimitError",
    "NondeterministicError",
    "UnsupportedError",
    "RefusedError",
]

#: numpy dtype of each element type's arrays (``bool`` arrays are numpy bools).
DTYPES: Dict[str, np.dtype] = {
    "float32": np.dtype(np.float32),
    "int32": np.dtype(np.int32),
    "uint32": np.dtype(np.uint32),
    "bool": np.dtype(np.bool_),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
}


def _as_numpy(name: str, value: Any) -> np.ndarray:
    """``value`` as a numpy array: numpy arrays as they are, DLPack objects
    through ``np.from_dlpack`` (no copy), anything else through
    ``np.asarray`` (which is also how a JAX bf16 array arrives: DLPack in
    numpy has no bfloat16)."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "__dlpack__"):
        try:
            return np.from_dlpack(value)
        except (RuntimeError, TypeError, BufferError, ValueError):
            pass
    try:
        return np.asarray(value)
    except Exception as error:  # noqa: BLE001: named in the message
        raise TypeError(
            f"input `{name}`: cannot read a {type(value).__name__} as an array ({error})"
        ) from error


def _triple(name: str, value: Any):
    """``(dtype name, shape, data)`` of an input: the data is the array
    itself where it is C-contiguous and little-endian (the extension reads
    its memory in place and copies it once), else a C-ordered
    little-endian copy of it."""
    array = _as_numpy(name, value)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    elif not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return (array.dtype.name, array.shape, array)


def _array(triple) -> np.ndarray:
    """The array of ``(dtype name, shape, data)``: the data is a bytearray,
    or a call's output words, which numpy takes without a copy through
    their ``__array_interface__`` (bytes; the array keeps them alive)."""
    dtype, shape, data = triple
    if not isinstance(data, (bytes, bytearray)):
        data = np.asarray(data)
    return np.frombuffer(data, dtype=DTYPES[dtype]).reshape(shape)


#: DLPack's device type of CUDA memory (``kDLCUDA``).
_DLPACK_CUDA = 2
#: The stream argument of ``__dlpack__`` naming CUDA's legacy default
#: stream, which :class:`Cuda` runs on.
_DLPACK_LEGACY_STREAM = 1


def _preload_nvrtc() -> None:
    """Loads NVRTC from an installed ``nvidia-cuda-nvrtc`` wheel
    (``site-packages/nvidia/cu13/lib``, which is not on the loader's path),
    so that the CUDA backend, which loads it by name, finds it; does
    nothing where there is none (the system's, or LD_LIBRARY_PATH's, is
    used then)."""
    import ctypes
    import importlib.util
    import os

    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return
    for root in (spec.submodule_search_locations or []) if spec else []:
        for folder in ("cu13/lib", "cuda_nvrtc/lib"):
            path = os.path.join(root, folder, "libnvrtc.so.13")
            if os.path.exists(path):
                try:
                    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                    return
                except OSError:
                    continue


def _on_cuda(value: Any) -> bool:
    """Whether ``value`` is a DLPack array in CUDA device memory."""
    device = getattr(value, "__dlpack_device__", None)
    if device is None or isinstance(value, np.ndarray):
        return False
    try:
        kind, _ = device()
    except Exception:  # noqa: BLE001: not a device array then
        return False
    return int(kind) == _DLPACK_CUDA


class Timing(NamedTuple):
    """The times of one call, as ``mpmd run --time`` reports them.

    ``wall_ms`` is the backend's whole run of the call (compiling a plan
    it has not seen yet, uploads, launch, read-back), not the conversion of
    Python's arguments and results; ``kernel_ms`` the kernel's time between
    two events around the launch, measured on :class:`Cuda` with
    ``time_kernels=True`` only (None elsewhere). ``str()`` gives the CLI's
    line."""

    wall_ms: float
    kernel_ms: Optional[float]
    backend: str

    def __str__(self) -> str:
        if self.kernel_ms is not None:
            kernel = f", kernel {self.kernel_ms:.3f} ms"
        elif self.backend == "cuda":
            kernel = "; kernel time: not measured on cuda (time_kernels=False)"
        else:
            kernel = f"; kernel time: not measured on {self.backend}"
        return f"time: wall {self.wall_ms:.3f} ms{kernel}"


class Backend:
    """What every backend does; use :class:`Interpreter`, :class:`Wgpu` or
    :class:`Cuda`."""

    _raw: Any

    @property
    def name(self) -> str:
        """``interp``, ``wgpu`` or ``cuda``."""
        return self._raw.name

    def call(self, module: Module, map_name: str, /, **arguments: Any) -> Dict[str, np.ndarray]:
        """Runs one call of ``map_name``: each input the call uploads is a
        keyword argument (a numpy array, or an object with ``__dlpack__``,
        of exactly the input's dtype and host shape), each scalar a Python
        number. Returns ``{output: array}`` in the map's order, each of the
        output's dtype and host shape. Residents the map binds are the
        backend's and stay with it. A C-contiguous input array may be read
        in place while the call runs (without the GIL): do not write it from
        another thread meanwhile."""
        scalar_names = {name for name, _ in module.scalars(map_name)}
        arrays = {}
        scalars = {}
        for name, value in arguments.items():
            if name in scalar_names or isinstance(value, (bool, int, float, np.generic)):
                scalars[name] = value.item() if isinstance(value, np.generic) else value
            else:
                arrays[name] = value
        if isinstance(self, Cuda) and any(_on_cuda(v) for v in arrays.values()):
            inputs = {
                name: (
                    value.__dlpack__(stream=_DLPACK_LEGACY_STREAM)
                    if _on_cuda(value)
                    else _triple(name, value)
                )
                for name, value in arrays.items()
            }
            outputs = dict(self._raw.call_device(module, map_name, inputs, scalars))
            # An output aliased to a device input is that array, written in place.
            for input_name, output_name in module.aliases(map_name):
                if output_name not in outputs and input_name in arrays:
                    outputs[output_name] = arrays[input_name]
            return {name: outputs[name] for name, _, _ in module.outputs(map_name)}
        inputs = {name: _triple(name, value) for name, value in arrays.items()}
        outputs = self._raw.call(module, map_name, inputs, scalars)
        return {name: _array(triple) for name, triple in outputs.items()}

    @property
    def last_timing(self) -> Optional[Timing]:
        """The :class:`Timing` of the last call that succeeded on this
        backend (None before one)."""
        times = self._raw.last_timing
        return None if times is None else Timing(times[0], times[1], self._raw.name)

    def resident(self, name: str) -> Optional[np.ndarray]:
        """A copy of device-resident ref ``name`` as the last call left it
        (its host shape: the owner mesh's block axes first), or None while
        no call and no :meth:`set_resident` created it."""
        triple = self._raw.resident(name)
        return None if triple is None else _array(triple)

    def set_resident(self, name: str, array: Any, module: Optional[Module] = None) -> None:
        """Gives device-resident ref ``name`` the data ``array``, before a
        call or between calls. With ``module`` the array must have exactly
        the dtype and host shape the module declares for it (a ValueError
        otherwise); without, the next call that binds the resident checks
        them (a RunError)."""
        self._raw.set_resident(name, _triple(name, array), module)

    def __repr__(self) -> str:
        return f"mpmd.{type(self).__name__}()"


class Interpreter(Backend):
    """The reference interpreter (the oracle every backend is judged against).

    ``checked=True`` reports out-of-bounds accesses, data races and reads of
    unwritten memory, and runs ``schedules`` extra seeded schedules (default
    2, as ``mpmd run --checked``), so results that differ between schedules
    are an error too; ``seed`` seeds them. ``timeout`` (seconds; 0 or None:
    no bound) bounds one call, ``memory_limit`` (bytes) what one call
    allocates."""

    def __init__(
        self,
        checked: bool = False,
        schedules: Optional[int] = None,
        *,
        seed: int = 0,
        timeout: Optional[float] = 60.0,
        memory_limit: int = 4 << 30,
    ) -> None:
        self._raw = _mpmd._Backend.interpreter(checked, schedules, seed, timeout, memory_limit)

    @property
    def schedules_run(self) -> Optional[int]:
        """Schedules the last call ran (1: the lockstep one only)."""
        return self._raw.schedules_run


class Wgpu(Backend):
    """The WGSL backend on the default WebGPU adapter (a GPU's Vulkan, Metal
    or DX12 driver, or Mesa's lavapipe on the CPU).

    ``checked=True`` reports out-of-bounds accesses. A map whose programs
    wait on each other within one dispatch needs co-resident workgroups,
    which no adapter promises: it is refused unless ``co_resident=True``
    declares the adapter runs every workgroup at once (such results are
    unverified). ``timeout`` (seconds; 0 or None: no bound) bounds one call:
    compiling the pipelines, the dispatches and reading back, as ``mpmd run
    --backend wgpu --timeout`` (a compile or dispatch past it goes on in
    the background). Raises :class:`BackendUnavailableError` without an
    adapter."""

    def __init__(
        self,
        checked: bool = False,
        *,
        co_resident: bool = False,
        timeout: Optional[float] = 60.0,
    ) -> None:
        self._raw = _mpmd._Backend.wgpu(checked, co_resident, timeout)


class Cuda(Backend):
    """The CUDA backend (NVRTC, one fused kernel a call) on the first NVIDIA
    GPU. ``checked=True`` reports out-of-bounds accesses. Raises
    :class:`BackendUnavailableError`, saying why, on a machine without an
    NVIDIA GPU and driver.

    :meth:`call` with any input in CUDA memory (an object whose
    ``__dlpack_device__`` is CUDA: a PyTorch, JAX or CuPy array on the GPU)
    runs on the device: such inputs are used in place (C-contiguous, exactly
    the input's dtype and shape; a ``bool`` input as ``uint32`` 0/1, how
    mpmd keeps bools on the device), host inputs are copied there, and every
    output comes back as a :class:`DeviceArray` on that device (no host
    copy; ``torch.from_dlpack(out)``, ``jax.dlpack.from_dlpack(out)`` or
    ``out.numpy()``). The call waits for the kernel, so its errors raise
    here. With host inputs only, outputs are numpy arrays.

    ``wait_timeout`` (seconds, default 10) bounds one semaphore wait (the
    CLI's ``$MPMD_CUDA_WAIT_TIMEOUT_MS``); ``time_kernels=True`` times each
    kernel with a pair of events (:attr:`Backend.last_timing`'s
    ``kernel_ms``; a few microseconds a call, as ``mpmd run --time``)."""

    def __init__(
        self,
        checked: bool = False,
        *,
        wait_timeout: float = 10.0,
        time_kernels: bool = False,
    ) -> None:
        _preload_nvrtc()
        self._raw = _mpmd._Backend.cuda(checked, wait_timeout, time_kernels)


def generated_inputs(module: Module, map_name: str, seed: int = 0) -> Dict[str, np.ndarray]:
    """The inputs ``mpmd run --seed SEED`` generates for a call of
    ``map_name`` (the module's ``generate`` lines, else a default per type):
    run the CLI's data from Python."""
    return {name: _array(t) for name, t in module.generated_inputs(map_name, seed).items()}
