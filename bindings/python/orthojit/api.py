"""The functions of the orthojit package: orthogonalize, compile, load_program, tune, bench,
bench_model, plan and info. They check and convert their arguments, then call the C++ core
(orthojit._orthojit); the structured results are the JSON records the command line prints with
--json, as Python dicts and lists.

Arrays: NumPy arrays and PyTorch tensors, 2-D (one rows x cols matrix) or 3-D (a batch), C-contiguous.
float32 is read and written in place (no copy; ``out=`` receives the result where it lies); float64
goes through float32 on the cpu and cuda backends and stays float64 on ``backend="ref"``. torch
bfloat16/float16 tensors and ml_dtypes bfloat16 arrays are converted to float32 and the result
back to their dtype. CUDA tensors run on ``backend="cuda"`` through host memory (copied), when
this build and machine have the CUDA backend (``info()["cuda"]``).
"""

from __future__ import annotations

import json as _json
import numbers as _numbers
import os as _os
from typing import Callable, Any, Dict, Optional, Sequence, Tuple, Union

from . import _orthojit as _core
from .file_progress import file_progress as _file_progress

__all__ = [
    "Program",
    "Compiled",
    "orthogonalize",
    "compile",
    "load_program",
    "tune",
    "bench",
    "bench_model",
    "BenchModelResult",
    "plan",
    "inspect_state",
    "info",
]

Program = _core.Program
"""An orthogonalizer program: ``name``, ``storage``, ``steps`` (count), ``coefficients`` (one
(a, b, c) per step), ``normalization``, ``gram_restarts``, ``origin`` and ``where``."""


class Compiled:
    """A program compiled for one shape, strategy and backend (see :func:`compile`).

    Calling it, ``kernel(x, out=None)``, orthogonalizes an array of exactly that shape with the
    same conversions as :func:`orthogonalize`, without compiling again. Attributes: ``program``,
    ``shape`` (rows, cols), ``batch``, ``strategy``, ``strategy_reason``, ``backend``, ``target``
    (e.g. "cpu avx512f threads=2 ..."), ``storage``, ``jit_seconds``, ``ir`` (the scheduled IR).
    """

    def __init__(self, core: "_core.Compiled"):
        self._core = core

    def __call__(self, x, out=None):
        return _run(self._core.__call__, x, out, self._core.backend)

    def __getattr__(self, name):
        return getattr(self._core, name)

    def __repr__(self):
        return repr(self._core)


ProgramLike = Union[str, "os.PathLike[str]", "Program"]


def load_program(path_or_source: Union[str, "os.PathLike[str]"]) -> "Program":
    """Loads an orthogonalizer program: a shipped name (``"jordan_ns5"``), a path to a ``.oj``
    file, or DSL source text (docs/dsl.md). Returns a :class:`Program`, usable wherever a program
    name is. A program with an error raises ``ValueError`` whose message starts with
    ``file:line:column: error:`` (``<string>`` for source text)."""
    if isinstance(path_or_source, _os.PathLike):
        path_or_source = _os.fspath(path_or_source)
    if not isinstance(path_or_source, str):
        raise TypeError(f"load_program() takes a shipped name, a .oj path or DSL source text (str), got {type(path_or_source).__name__}")
    if _os.path.isdir(path_or_source):  # it was read as an empty program ("found end of file")
        raise ValueError(f"{path_or_source} is a directory; give a .oj file, a shipped name or DSL source text")
    return _core.load_program(path_or_source)


def _program(program) -> Union[str, "Program"]:
    if isinstance(program, _os.PathLike):
        return _os.fspath(program)
    if isinstance(program, (str, _core.Program)):
        return program
    raise TypeError(f"program: expected a shipped name, a .oj path, DSL source text or an orthojit.Program, got {type(program).__name__}")


def _precision(precision: Optional[str]) -> Optional[str]:
    if precision is None or isinstance(precision, str):
        return precision
    raise TypeError(f"precision: expected None or one of 'bf16', 'f16', 'f32', 'f64', got {type(precision).__name__}")


_MAX_THREADS = 1024  # the runtime's bound (kMaxThreads, compiler/cpu/thread_pool.h)
_MAX_DIMENSION = 2**31 - 1  # a size the core takes (its own checks then bound the elements)


def _whole(name: str, value: Any, least: int, most: int) -> int:
    """An integer argument, checked here rather than converted: 8.7, "2" or True would be truncated
    or cast without a word, and a value beyond the core's int a bare signature error."""
    if isinstance(value, bool) or not isinstance(value, _numbers.Integral):
        raise TypeError(f"{name} must be a whole number (an int), got {value!r}")
    if not least <= int(value) <= most:
        raise ValueError(f"{name} = {int(value)}: expected a whole number from {least} to {most}")
    return int(value)


def _threads(threads: Any) -> int:
    if isinstance(threads, bool) or not isinstance(threads, _numbers.Integral) or not 0 <= int(threads) <= _MAX_THREADS:
        raise ValueError(f"threads = {threads!r}: expected 0 (one per logical core) or a whole number from 1 to {_MAX_THREADS}")
    return int(threads)


def _check_choice(name: str, value: str, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(repr(c) for c in choices)}, got {value!r}")
    return value


_ACCEPTED = ("NumPy arrays (float32, float64, ml_dtypes bfloat16) and torch tensors (float32, float64, bfloat16, float16; "
             "CPU, or CUDA with the cuda backend)")


def _torch():
    import sys
    return sys.modules.get("torch")


def _is_torch_tensor(x) -> bool:
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def _is_numpy_bf16(x) -> bool:
    dtype = getattr(x, "dtype", None)
    return dtype is not None and getattr(dtype, "name", "") == "bfloat16" and type(x).__module__ == "numpy"


def _run(call, x, out, backend: str):
    """Runs ``call(x, out)`` (a core function taking float32/float64 host arrays), converting 16-bit
    and CUDA inputs first and the result back."""
    if _is_torch_tensor(x):
        torch = _torch()
        if x.device.type not in ("cpu", "cuda"):
            raise TypeError(f"x is a tensor on device {x.device}; accepted: cpu, or cuda with the cuda backend")
        if x.is_cuda:
            if backend not in ("auto", "cuda"):
                raise TypeError(f"x is a CUDA tensor ({x.device}); backend={backend!r} runs on host memory: use backend='cuda' or x.cpu()")
            reason = _cuda_unavailable_reason()
            if reason:
                raise TypeError(f"x is a CUDA tensor ({x.device}) but the cuda backend cannot run here: {reason}")
            if out is not None and (not _is_torch_tensor(out) or out.device != x.device or out.dtype != x.dtype or out.shape != x.shape):
                raise TypeError("out must be a tensor on x's device with x's dtype and shape")
            host = x.detach().to("cpu", torch.float32)
            result = _run(call, host, None, "cuda")
            result = result.to(x.device, x.dtype)
            if out is not None:
                out.copy_(result)
                return out
            return result
        if x.dtype in (torch.bfloat16, torch.float16):
            if out is not None and (not _is_torch_tensor(out) or out.dtype != x.dtype or out.shape != x.shape or out.is_cuda):
                raise TypeError(f"out must be a CPU tensor of x's dtype ({x.dtype}) and shape {tuple(x.shape)}")
            result = call(x.detach().float(), None).to(x.dtype)
            if out is not None:
                out.copy_(result)
                return out
            return result
        if x.requires_grad:
            x = x.detach()
    elif _is_numpy_bf16(x):
        import numpy as np
        if out is not None and (getattr(out, "dtype", None) != x.dtype or out.shape != x.shape):
            raise TypeError(f"out must be an array of x's dtype (bfloat16) and shape {x.shape}")
        result = call(np.ascontiguousarray(x, dtype=np.float32), None).astype(x.dtype)
        if out is not None:
            out[...] = result
            return out
        return result
    elif not hasattr(x, "__dlpack__") and not hasattr(x, "__array_interface__"):
        raise TypeError(f"x: expected an array, got {type(x).__name__}; accepted: {_ACCEPTED}")
    if out is not None and _is_torch_tensor(out) != _is_torch_tensor(x):
        raise TypeError(f"out must be of x's kind ({'a torch tensor' if _is_torch_tensor(x) else 'an array'}), "
                        f"got {type(out).__module__}.{type(out).__name__}")
    if out is not None and _is_torch_tensor(out) and out.requires_grad:
        raise ValueError("out requires grad; pass a tensor that does not (or out.detach())")
    return call(x, out)


_cuda_reason_cache: Dict[str, str] = {}


def _cuda_unavailable_reason() -> str:
    if "reason" not in _cuda_reason_cache:
        _cuda_reason_cache["reason"] = info()["cuda"].get("reason", "")
    return _cuda_reason_cache["reason"]


def orthogonalize(x, program: ProgramLike = "jordan_ns5", strategy: str = "auto", precision: Optional[str] = None,
                  backend: str = "auto", out=None, *, threads: int = 0):
    """Orthogonalizes a matrix (2-D, rows x cols) or a batch of matrices (3-D) with a Newton-Schulz-type
    program: returns approximately U·Vᵀ of each matrix's SVD, as the program's iteration gives it.

    Args:
        x: a NumPy array or torch tensor, C-contiguous: float32 or float64 (torch bfloat16/float16 and
            ml_dtypes bfloat16 are converted through float32). CPU memory, or a CUDA tensor with
            ``backend="cuda"`` (copied through the host).
        program: a shipped name (``"jordan_ns5"``, ``"jordan_ns5_f32"``, ``"polar_express5"``, ...), a
            ``.oj`` path, DSL source text, or a :class:`Program`.
        strategy: ``"auto"`` (this device's tuning record, else the heuristic), ``"standard"`` or ``"gram"``.
        precision: None (the program's storage type) or ``"bf16"``, ``"f16"``, ``"f32"``, ``"f64"`` (f64 on ``ref`` only).
        backend: ``"auto"`` (cuda for CUDA tensors; else ref for ``precision="f64"``, cpu otherwise), ``"cpu"``, ``"ref"`` (the float64 reference
            interpreter) or ``"cuda"``.
        out: where to write the result: an array of x's kind, dtype and shape. float32 results are
            written in place with no copy.
        threads: cpu worker threads (0: one per logical core).

    Returns: ``out`` when given, else a new array of x's kind (NumPy or torch), dtype and shape.

    Raises: TypeError for a wrong type, dtype or device; ValueError for a wrong rank, a
    non-contiguous array, a wrong ``out`` shape, or a bad option or program.
    """
    program = _program(program)
    precision = _precision(precision)
    _check_choice("strategy", strategy, ("auto", "standard", "gram"))
    _check_choice("backend", backend, ("auto", "cpu", "ref", "cuda"))
    if _is_torch_tensor(x) and x.is_cuda and backend == "auto":
        backend = "cuda"

    threads = _threads(threads)

    def call(array, target):
        return _core.orthogonalize(array, program, strategy, precision, backend, target, threads)

    return _run(call, x, out, backend)


def compile(program: ProgramLike, shape: Sequence[int], batch: int = 1, strategy: str = "auto", precision: Optional[str] = None,
            backend: str = "auto", *, threads: int = 0) -> Compiled:
    """Compiles ``program`` for ``batch`` matrices of ``shape`` = (rows, cols) (or shape = (batch, rows,
    cols)) on a backend and returns a :class:`Compiled` kernel: call it as ``kernel(x, out=None)`` on
    arrays of that shape; the compiled (and, under ``strategy="auto"``, tuned) kernel is reused."""
    program = _program(program)
    precision = _precision(precision)
    _check_choice("strategy", strategy, ("auto", "standard", "gram"))
    _check_choice("backend", backend, ("auto", "cpu", "ref", "cuda"))
    dims = _shape(shape, "shape")
    batch = _whole("batch", batch, 1, _MAX_DIMENSION)
    threads = _threads(threads)
    if len(dims) == 3:
        if batch != 1 and batch != dims[0]:
            raise ValueError(f"shape {tuple(shape)} has batch {dims[0]} but batch={batch} was given")
        batch, dims = dims[0], dims[1:]
    if len(dims) != 2:
        raise ValueError(f"shape: expected (rows, cols) or (batch, rows, cols), got {tuple(shape)}")
    return Compiled(_core.compile(program, dims[0], dims[1], batch, strategy, precision, backend, threads))


def _shape(shape, name: str) -> Tuple[int, ...]:
    if isinstance(shape, str):
        parts = shape.lower().split("x")
        try:
            dims = tuple(int(p) for p in parts)
        except ValueError:
            raise ValueError(f"{name}: expected 'MxN', 'MxNxB' or a tuple of ints, got {shape!r}") from None
        if len(dims) == 3:  # the CLI's MxNxB: batch last
            dims = (dims[2], dims[0], dims[1])
        return dims
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(f"{name}: expected a tuple of ints, got {type(shape).__name__}") from None
    if any(isinstance(d, bool) or not isinstance(d, _numbers.Integral) for d in dims):
        raise TypeError(f"{name}: expected whole numbers (ints), got {tuple(shape)!r}")
    dims = tuple(int(d) for d in dims)
    if any(d > _MAX_DIMENSION for d in dims):
        raise ValueError(f"{name}: {tuple(shape)} has a size above {_MAX_DIMENSION}")
    if any(d < 1 for d in dims) or len(dims) not in (2, 3):
        raise ValueError(f"{name}: expected (rows, cols) or (batch, rows, cols) with positive sizes, got {tuple(shape)}")
    return dims


def _triple(shape) -> Tuple[int, int, int]:
    """(rows, cols, batch) for the core."""
    dims = _shape(shape, "shape")
    return (dims[0], dims[1], 1) if len(dims) == 2 else (dims[1], dims[2], dims[0])


def _model(model_config) -> Tuple[str, bool]:
    """(path or JSON text, is_json)."""
    if isinstance(model_config, dict):
        return _json.dumps(model_config), True
    if isinstance(model_config, (str, _os.PathLike)):
        path = _os.fspath(model_config)
        if _os.path.isdir(path):  # it was reported as "not valid JSON"
            raise ValueError(f"model_config {path!r} is a directory; give its config.json")
        return path, False
    raise TypeError(f"model_config: expected a path to a Hugging Face config.json, a dict of it, or 'default', got {type(model_config).__name__}")


class _TuneProgressBar:
    """A progress bar over every shape's candidates: tqdm (its notebook widget in Jupyter) where it
    is installed, else one line per shape on stderr when stderr is a terminal, else nothing."""

    def __init__(self, enabled):
        self.bar = None
        self.shape = -1
        self.plain = False
        if not enabled:
            return
        try:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=0, unit="candidate", desc="tune", leave=True)
        except ImportError:
            import sys

            self.plain = sys.stderr.isatty()

    def __call__(self, shape, shapes, text, candidate, candidates, phase, label):
        if self.bar is not None:
            if shape != self.shape:  # a new shape: its candidates join the total
                self.shape = shape
                self.base = self.bar.n
                self.bar.total += candidates
                self.bar.set_description(f"tune [{shape + 1}/{shapes}] {text}")
            self.bar.n = self.base + (candidate if phase in ("done", "cached") else candidate - 1)
            self.bar.set_postfix_str(f"{phase} {label}".strip())
            self.bar.refresh()
        elif self.plain and phase in ("done", "cached"):
            import sys

            print(f"tune [{shape + 1}/{shapes}] {text}: {phase}", file=sys.stderr, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _restarts(restarts) -> Optional[str]:
    """tune(restarts=...) as the text the core parses: None, "auto", "none", "program" or "2,4"."""
    if restarts is None or isinstance(restarts, str):
        return restarts
    if isinstance(restarts, bool):
        raise TypeError(f"restarts must be 'auto', 'none', step indices or None, got {restarts!r}")
    if isinstance(restarts, int):
        return str(restarts)
    try:
        positions = list(restarts)
    except TypeError:
        raise TypeError(f"restarts must be 'auto', 'none', step indices or None, got {restarts!r}") from None
    if not positions:
        return "none"
    for position in positions:
        if isinstance(position, bool) or not isinstance(position, int):
            raise TypeError(f"restarts: {position!r} is not a step index (an int in 1..steps-1)")
        if position < 0:
            raise ValueError(f"restarts: {position} is not a step index (valid: 1..steps-1)")
    return ",".join(str(position) for position in positions)


def tune(model_config=None, budget: float = 90, backend: str = "cpu", program: ProgramLike = "jordan_ns5", precision: Optional[str] = None,
         per_head: bool = False, out: Optional[Union[str, "os.PathLike[str]"]] = None, *, shape=None, retune: bool = False, threads: int = 0,
         verbose: bool = False, progress: Union[bool, Callable[..., None]] = True,
         restarts: Union[None, str, int, Sequence[int]] = None) -> Dict[str, Any]:
    """Tunes every distinct matrix shape Muon orthogonalizes in a model (``orthojit tune --model``), or one
    ``shape`` (``--shape``), and merges the winners into this device's tuning records, which
    ``strategy="auto"`` then uses. Shapes already recorded are not timed again unless ``retune``.

    Args:
        model_config: a path to a Hugging Face config.json, the config as a dict, or ``"default"`` (a small
            embedded Llama-style model). Give this or ``shape``.
        budget: seconds for all shapes together.
        backend: ``"cpu"`` or ``"cuda"``.
        program, precision: the orthogonalizer and an optional storage override (bf16, f16, f32).
        per_head: split attention projections into per-head blocks.
        out: the records file (default: ``$ORTHOJIT_TUNING_FILE``, else the device's file in the cache dir).
        shape: (rows, cols) or (batch, rows, cols) instead of a model.
        verbose: the CLI's report on stderr.
        progress: ``True`` (the default): a progress bar over the shapes' candidates (tqdm where
            installed, its widget in a notebook; else a line per shape on a terminal); ``False``:
            none; or a callable ``progress(shape, shapes, text, candidate, candidates, phase, label)``:
            an exception it raises (Ctrl-C's KeyboardInterrupt too) stops the tuning and reaches the
            caller; the shapes finished before it are in the records file.
        restarts: the gram restarts the candidates are tuned with (``orthojit tune --restarts``), stored
            in each shape's record and applied with it: ``"auto"`` (the restart search of
            docs/autotuning.md, "Gram restarts"), ``"none"`` or ``[]``, step indices (``2``, ``[2, 4]``,
            ``"2,4"``; each in 1..steps-1), or ``None``: the program's own.

    Returns: ``{"records": path, "elapsed_s", "program", "backend", "device": fingerprint,
    "shapes": [...], "adamw": [...]}``; each shape row is what ``tune --json`` prints (rows, cols,
    batch, count, cached, winner, winner_ms, speedup_over_default, ...) plus ``key`` and ``entry``:
    the tuning-record entry as written to the file (candidates, winner, default, bench).
    """
    if (model_config is None) == (shape is None):
        raise ValueError("tune(): give exactly one of model_config or shape=")
    model, is_json = _model(model_config) if model_config is not None else (None, False)
    triple = _triple(shape) if shape is not None else None
    _check_choice("backend", backend, ("cpu", "cuda"))
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget > 0:
        raise ValueError(f"budget must be a positive number of seconds, got {budget!r}")
    restart_text = _restarts(restarts)
    threads = _threads(threads)
    bar = progress if callable(progress) else _TuneProgressBar(bool(progress))
    try:
        text = _core.tune(model, is_json, triple, _program(program), _precision(precision), float(budget), backend,
                          _os.fspath(out) if out is not None else None, bool(per_head), bool(retune), threads, bool(verbose), bar,
                          restart_text)
    finally:
        if isinstance(bar, _TuneProgressBar):
            bar.close()
    return _json.loads(text)


def bench(program: ProgramLike, shape, backend: str = "cpu", strategy: str = "auto", precision: Optional[str] = None, repeat: int = 7, *,
          threads: int = 0, isa: str = "", variant: str = "", kernel: str = "") -> Dict[str, Any]:
    """Times ``program`` on a random Gaussian input of ``shape`` ((rows, cols), (batch, rows, cols) or
    "MxN[xB]"): one warm-up, then ``repeat`` runs. ``kernel`` (cpu, bf16 products): "fma", "bf16dot"
    or "amx"; "" is the tuning record's, else the path's default. Returns the ``orthojit bench
    --json`` record: program, shape [rows, cols, batch], backend, target, strategy, storage,
    median_s, p20_s, p80_s, repeat, jit_s, dense_equivalent_gflop, gflops, engine, peak_gflops,
    fraction_of_peak, peak; plus median_ms, p20_ms and p80_ms."""
    _check_choice("backend", backend, ("cpu", "ref", "cuda"))
    _check_choice("strategy", strategy, ("auto", "standard", "gram"))
    _check_choice("kernel", kernel, ("", "fma", "bf16dot", "amx"))
    repeat = _whole("repeat", repeat, 1, 1_000_000)
    threads = _threads(threads)
    rows, cols, batch = _triple(shape)
    record = _json.loads(_core.bench(_program(program), rows, cols, batch, backend, strategy, _precision(precision), repeat, threads, isa, variant, kernel))
    for name in ("median", "p20", "p80"):
        record[name + "_ms"] = record[name + "_s"] * 1e3
    return record


class BenchModelResult(dict):
    """What bench_model returns: the record as a dict (``{"title", "shapes": [...]}``, the JSON of
    ``orthojit bench --model ... --json``) that can also draw itself."""

    def plot(self, path: Optional[Union[str, "_os.PathLike[str]"]] = None, *, ax=None):
        """Draws the chart ``orthojit bench --model ... --plot PNG`` draws (the same script): per
        shape, Gram NS over standard NS and orthojit's best over the best vendor NS. Into ``ax`` (a
        matplotlib Axes) when given, else a new figure; saved to ``path`` (PNG) when given. Returns
        the figure, which a notebook shows. Needs matplotlib."""
        try:
            import matplotlib
            if ax is None and path is not None and _os.environ.get("MPLBACKEND") is None and "matplotlib.pyplot" not in __import__("sys").modules:
                matplotlib.use("Agg")  # a file is asked for and no backend chosen: no window needed
            import matplotlib.pyplot as plt
        except ImportError as error:
            raise ImportError("BenchModelResult.plot() needs matplotlib (pip install matplotlib, or Debian's python3-matplotlib)") from error
        from . import _speedup_chart
        if ax is None:
            figure, ax = plt.subplots(figsize=_speedup_chart.figure_size(self))
        else:
            figure = ax.figure
        _speedup_chart.draw(self, ax)
        if path is not None:
            figure.tight_layout()
            figure.savefig(_os.fspath(path), dpi=130)
        return figure


def bench_model(model_config=None, budget: float = 60, program: ProgramLike = "jordan_ns5", precision: Optional[str] = None,
                per_head: bool = False, *, shape=None, threads: int = 0) -> BenchModelResult:
    """Times standard Newton-Schulz, Gram Newton-Schulz and OpenBLAS side by side on every distinct
    Muon shape of a model (or one ``shape``), as ``orthojit bench --model ... --json`` does:
    ``{"title", "shapes": [{rows, cols, batch, count, label, standard_ms, gram_ms, openblas_ms,
    gram_speedup, vendor_speedup, ...}]}``. cpu backend. The result's ``plot()`` draws the CLI's
    speedup chart."""
    if (model_config is None) == (shape is None):
        raise ValueError("bench_model(): give exactly one of model_config or shape=")
    model, is_json = _model(model_config) if model_config is not None else (None, False)
    triple = _triple(shape) if shape is not None else None
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget > 0:
        raise ValueError(f"budget must be a positive number of seconds, got {budget!r}")
    threads = _threads(threads)
    return BenchModelResult(_json.loads(_core.bench_model(model, is_json, triple, _program(program), _precision(precision), float(budget), threads, bool(per_head))))


def plan(model_config, world: int, stage: int, mode: str = "deepspeed", alignment: int = 1, per_head: bool = False, *,
         parameter_bytes: int = 2, gradient_bytes: int = 2) -> Dict[str, Any]:
    """The ZeRO partition plan of a model for ``world`` data-parallel ranks at ``stage`` 1, 2 or 3, as
    ``orthojit plan --json`` prints it: title, world, stage, mode, padded_elements,
    partition_elements, ideal_cost, max_cost, mean_cost, tensors (name, offset, elements, muon,
    owners, orthogonalizers, cost), ranks (begin, end, orthogonalization_cost, matrices,
    optimizer_bytes, gradient_bytes, parameter_bytes), collectives (name, bytes, bytes_per_rank,
    formula) and straddling_muon_matrices.

    ``mode``: ``"deepspeed"`` (every owner of a straddling matrix computes it) or ``"balanced"``
    (each matrix once, longest-processing-time). ``model_config``: a config.json path, a dict, or
    ``"default"``."""
    model, is_json = _model(model_config)
    _check_choice("mode", mode, ("deepspeed", "balanced"))
    for name, value in (("world", world), ("stage", stage), ("alignment", alignment), ("parameter_bytes", parameter_bytes),
                        ("gradient_bytes", gradient_bytes)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
        _whole(name, value, 0, 2**31 - 1)  # beyond the core's int: a bare signature error
    return _json.loads(_core.plan(model, is_json, world, stage, mode, alignment, bool(per_head), parameter_bytes, gradient_bytes))


def inspect_state(path: Union[str, "_os.PathLike[str]"], verify: bool = True, progress: Union[bool, Callable[[str, int, int], None], None] = False) -> Dict[str, Any]:
    """What a saved optimizer state holds, as ``orthojit inspect-state --json`` prints it: path,
    metadata (orthojit.format, .preset, .steps_taken, .momentum_kind, .momentum, .muon_variant,
    and the param_groups the Python optimizers save), data_bytes, muon and adam (``[{name,
    elements}]``), adam_steps (``[min, max]``), unknown (tensors of neither kind), checksum,
    checksum_verified, tensors (``[{name, dtype, shape}]``). ``verify`` reads every byte and checks
    the SHA-256 the file records: OSError (the file named) when the data does not match it.
    Any orthojit state file: Muon's, DistributedMuon's (any world size), the C++ and C
    optimizers'. ValueError for a safetensors file that is not an optimizer state. ``progress``:
    True for a progress line on stderr while the checksum is verified, or a callable
    ``progress(phase, done, total)`` (orthojit.file_progress)."""
    if not isinstance(verify, bool):
        raise TypeError(f"verify must be True or False, got {verify!r}")
    with _file_progress(progress, f"verifying {_os.fspath(path)}") as report:
        return _json.loads(_core.inspect_state(_os.fspath(path), verify, report))


def info() -> Dict[str, Any]:
    """What ``orthojit info`` prints: version, backends, cuda ({"available", "reason" or "device"}),
    host_cpu (model, logical_cores and ISA features), cpu_paths, cpu_default_path, bf16_kernel
    ({"default": fma, bf16dot or amx, "vdpbf16ps_over_f32_fma": the measured ratio, "reason"}), cache_dir,
    tuning (where this device's records are) and the shipped programs."""
    return _json.loads(_core.info())
