from os import PathLike
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

import numpy as np

__all__: List[str]

#: numpy dtype of each element type's arrays.
DTYPES: Dict[str, np.dtype]

Operands = List[Tuple[str, str, List[int]]]

class Module:
    """A parsed and validated `.mpmd` module."""

    @staticmethod
    def from_file(
        path: Union[str, PathLike[str]], consts: Optional[Dict[str, Union[bool, int, float]]] = None
    ) -> Module:
        """Reads, parses and validates a file; raises ValidationError with the
        CLI's rendered diagnostics, OSError when the file cannot be read.
        `consts` overrides module constants before they are resolved
        (ValueError for a name that is no constant or a value its type
        cannot hold)."""
    @staticmethod
    def from_text(
        text: str, name: str = "<text>", consts: Optional[Dict[str, Union[bool, int, float]]] = None
    ) -> Module:
        """Parses and validates text; diagnostics name it `name`; `consts` as for from_file."""
    @property
    def name(self) -> str: ...
    @property
    def maps(self) -> List[str]: ...
    def calls(self) -> List[Tuple[str, Dict[str, Any]]]:
        """The module's `call` lines: (map, {scalar: value})."""
    def text(self) -> str:
        """The canonical text."""
    def lower(self, target: str, map: Optional[str] = None) -> str:
        """The map's launch plan (`"plan"`), CUDA C (`"cuda"`) or WGSL (`"wgsl"`), as `mpmd lower` prints it."""
    def inputs(self, map: str) -> Operands:
        """(name, dtype, host shape) of each input a call uploads."""
    def outputs(self, map: str) -> Operands:
        """(name, dtype, host shape) of each output a call returns."""
    def scalars(self, map: str) -> List[Tuple[str, str]]:
        """(name, dtype) of each scalar parameter."""
    def residents(self) -> Operands:
        """(name, dtype, host shape) of each device-resident ref."""
    def binds_residents(self, map: str) -> bool: ...
    def aliases(self, map: str) -> List[Tuple[str, str]]:
        """(input, output) pairs of the map that share one buffer."""
    def generated_inputs(self, map: str, seed: int = 0, memory_limit: int = ...) -> Dict[str, Tuple[str, Tuple[int, ...], bytearray]]: ...

class Timing(NamedTuple):
    """A call's times as `mpmd run --time` reports them; str() is its line."""

    wall_ms: float
    kernel_ms: Optional[float]
    backend: str

class Backend:
    @property
    def name(self) -> str: ...
    @property
    def last_timing(self) -> Optional[Timing]:
        """The times of the last call that succeeded (None before one)."""
    def call(self, module: Module, map_name: str, /, **arguments: Any) -> Dict[str, np.ndarray]:
        """Runs one call: inputs as arrays (numpy, or anything with
        __dlpack__), scalars as Python numbers; returns {output: array}."""
    def resident(self, name: str) -> Optional[np.ndarray]: ...
    def set_resident(self, name: str, array: Any, module: Optional[Module] = None) -> None:
        """Gives resident `name` the data; with `module`, checked against its declaration."""

class Interpreter(Backend):
    def __init__(
        self,
        checked: bool = False,
        schedules: Optional[int] = None,
        *,
        seed: int = 0,
        timeout: Optional[float] = 60.0,
        memory_limit: int = ...,
    ) -> None: ...
    @property
    def schedules_run(self) -> Optional[int]: ...

class Wgpu(Backend):
    def __init__(
        self, checked: bool = False, *, co_resident: bool = False, timeout: Optional[float] = 60.0
    ) -> None: ...

class Cuda(Backend):
    """With any input in CUDA memory (DLPack), `call` runs on the device:
    device inputs in place, outputs as DeviceArrays on that device."""

    def __init__(
        self, checked: bool = False, *, wait_timeout: float = 10.0, time_kernels: bool = False
    ) -> None: ...

class DeviceArray:
    """An output kept on the CUDA device (DLPack producer; a bool output is uint32 0/1)."""

    @property
    def dtype(self) -> str: ...
    @property
    def shape(self) -> List[int]: ...
    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Optional[bool] = None) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    def numpy(self) -> np.ndarray:
        """A host copy."""

def generated_inputs(module: Module, map_name: str, seed: int = 0) -> Dict[str, np.ndarray]: ...

class MpmdError(Exception): ...
class ValidationError(MpmdError): ...
class LowerError(MpmdError): ...
class BackendUnavailableError(MpmdError): ...

class RunError(MpmdError):
    #: The corpus keyword of the error's class (`data_race`, `deadlock`, ...) or None.
    error_class: Optional[str]
    #: The map whose call failed (None for `set_resident`).
    map: Optional[str]

class RaceError(RunError): ...
class DeadlockError(RunError): ...
class OutOfBoundsError(RunError): ...
class UninitializedReadError(RunError): ...
class WaitTimeoutError(RunError): ...
class BadSemaphoreAmountError(RunError): ...
class LoopLimitError(RunError): ...
class NondeterministicError(RunError): ...
class UnsupportedError(RunError): ...
class RefusedError(RunError): ...
