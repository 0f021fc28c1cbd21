"""Fused CPU kernels for small-batch inference: RMSNorm, and QK-norm with the rotary embedding.

A denoising step at batch 1 runs 64-row matrices. There PyTorch's RMSNorm is about ten kernels and a
layer's QK-norm + rotation about fifteen, each costing nearly as much as at 256 rows, so together they
take a tenth of a step. `cpu_kernels.c` does the same float32 arithmetic in one pass per call.

The C source ships with the package and is compiled with the system C compiler (`$CC`, else `cc`)
the first time a kernel is needed, into a cache folder keyed by the source, the compiler, its target
machine and the flags (`$COSMOS3_ROBOT_CACHE`, else `$XDG_CACHE_HOME/cosmos3_robot`, else
`~/.cache/cosmos3_robot`); it takes well under a second and nothing is downloaded. One binary serves
every x86-64 CPU (GCC picks the vector width when it loads). Without a compiler, or with
`COSMOS3_ROBOT_CPU_KERNELS=0`, every call returns None and the callers run their PyTorch ops: same
results, slower at small batch.

Like `cpu_pack`, this is applied from outside: `cpu_pack.pack_for_cpu` turns it on per module. A
kernel applies only where it is exact and worth it: float32 CPU tensors, no autograd graph to record,
unit-stride rows, and at most `MAX_ELEMENTS` elements (past that PyTorch's multi-threaded ops win).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path

import torch
import torch.autograd.forward_ad as forward_ad
from torch import Tensor

MAX_ELEMENTS = 1 << 18  # single-threaded kernels: beyond a megabyte, PyTorch's threads are faster
_SOURCE = Path(__file__).with_name("cpu_kernels.c")
_FLAGS = ("-O3", "-fopenmp-simd", "-fno-math-errno", "-ffp-contract=off", "-shared", "-fPIC")
_P, _I, _F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
_SIGNATURES = {
    "rms_norm_f32": [_P, _I, _I, _I, _P, _F, _P],
    "qk_norm_rope_f32": [_P, _I, _I, _I, _I, _I, _I, _P, _F, _P, _P, _I, _P],
}

_lock = threading.Lock()
_state: dict = {}  # "lib": the loaded library or None once a load was tried


def _cache_dir() -> Path:
    if root := os.environ.get("COSMOS3_ROBOT_CACHE"):
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "cosmos3_robot"


def _build() -> Path:
    """Compile the kernels (once per source, compiler, target and flags) and return the library's path."""
    cc = shlex.split(os.environ.get("CC", "cc"))
    if not cc or shutil.which(cc[0]) is None:
        raise OSError(f"no C compiler {' '.join(cc)!r} on PATH (install gcc, or point $CC at one)")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*cc, *args], capture_output=True, timeout=120)

    identity = run("--version").stdout + run("-dumpmachine").stdout + platform.machine().encode()
    key = hashlib.sha256(_SOURCE.read_bytes() + identity + " ".join(_FLAGS).encode()).hexdigest()[:16]
    out = _cache_dir() / "cpu_kernels" / f"cpu_kernels-{key}.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    # Compile beside the target and rename: concurrent processes (DDP ranks) never load a half-written file.
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    try:
        done = run(*_FLAGS, str(_SOURCE), "-o", tmp)
        if done.returncode != 0:
            raise OSError(
                f"{cc[0]} failed to compile {_SOURCE.name}:\n{done.stderr.decode(errors='replace').strip()}"
            )
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def _library() -> ctypes.CDLL | None:
    if "lib" in _state:
        return _state["lib"]
    with _lock:
        if "lib" not in _state:
            lib = None
            if os.environ.get("COSMOS3_ROBOT_CPU_KERNELS", "1") != "0":
                try:
                    lib = ctypes.CDLL(str(_build()))
                    for name, argtypes in _SIGNATURES.items():
                        getattr(lib, name).argtypes = argtypes
                except Exception as e:  # any failure only turns the kernels off: the model runs without them
                    warnings.warn(
                        f"fused CPU kernels are off, RMSNorm and RoPE run as PyTorch ops (slower at small "
                        f"batch): {e}",
                        stacklevel=3,
                    )
                    lib = None
            _state["lib"] = lib
    return _state["lib"]


def available() -> bool:
    """Whether the kernels are compiled and loaded (builds them on first call)."""
    return _library() is not None


def _applies(x: Tensor, weight: Tensor) -> bool:
    """Plain float32 CPU tensors, small enough, with no autograd graph or forward-mode tangent to
    record (kept cheap: called per layer). Subclasses and vmap/functorch wrappers have no plain data."""
    f32 = torch.float32
    if type(x) is not torch.Tensor or x.layout is not torch.strided or weight.layout is not torch.strided:
        return False
    if forward_ad._current_level >= 0 or torch._C._functorch.is_functorch_wrapped_tensor(x):
        return False
    if not (
        x.is_cpu
        and weight.is_cpu
        and x.dtype is f32
        and weight.dtype is f32
        and 0 < x.numel() <= MAX_ELEMENTS
    ):
        return False
    return not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))


def _row_stride(x: Tensor) -> int | None:
    """The distance in elements between consecutive rows of x (..., n) seen as (rows, n), or None
    when the rows are not evenly spaced (a contiguous tensor and a column slice of one are)."""
    dims = [(size, stride) for size, stride in zip(x.shape[:-1], x.stride()[:-1], strict=True) if size != 1]
    if not dims:
        return x.shape[-1]  # one row
    step = expected = dims[-1][1]
    for size, stride in reversed(dims):
        if stride != expected:
            return None
        expected *= size
    return step


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor | None:
    """`F.rms_norm(x, weight.shape, weight, eps)` over the last dim, or None where the kernel does not apply."""
    n = x.shape[-1]
    if not _applies(x, weight) or weight.shape != (n,) or not weight.is_contiguous():
        return None
    row_stride = n if x.is_contiguous() else _row_stride(x) if x.stride(-1) == 1 else None
    lib = _library()
    if row_stride is None or lib is None:
        return None
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    lib.rms_norm_f32(x.data_ptr(), x.numel() // n, n, row_stride, weight.data_ptr(), eps, y.data_ptr())
    return y


def qk_norm_rope(x: Tensor, weight: Tensor, eps: float, cos: Tensor, signed_sin: Tensor) -> Tensor | None:
    """`rope.rotate_heads(rms_norm(x), cos, signed_sin)` in one pass, or None where it does not apply.

    x (B, L, N, D) with each head contiguous (a view of a projection's output); weight (D,);
    cos, signed_sin (B or 1, L, 1, D) from `rope.rotation_table`. Returns (B, L, N, D) contiguous."""
    if x.ndim != 4 or cos.ndim != 4 or not _applies(x, weight):
        return None
    if type(cos) is not torch.Tensor or type(signed_sin) is not torch.Tensor:
        return None
    if not (
        cos.is_cpu and signed_sin.is_cpu and cos.dtype is torch.float32 and signed_sin.dtype is torch.float32
    ):
        return None
    if torch.is_grad_enabled() and (cos.requires_grad or signed_sin.requires_grad):
        return None
    b, seq, heads, d = x.shape
    if d % 2 or weight.shape != (d,) or not weight.is_contiguous() or x.stride()[2:] != (d, 1):
        return None
    if cos.shape != signed_sin.shape or cos.stride() != signed_sin.stride():
        return None
    if (
        cos.shape[1:] != (seq, 1, d)
        or cos.shape[0] not in (1, b)
        or cos.stride(-1) != 1
        or cos.stride(1) != d
    ):
        return None
    lib = _library()
    if lib is None:
        return None
    batch_stride = 0 if cos.shape[0] == 1 else cos.stride(0)
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    lib.qk_norm_rope_f32(
        x.data_ptr(), b, seq, heads, d, x.stride(0), x.stride(1), weight.data_ptr(), eps,
        cos.data_ptr(), signed_sin.data_ptr(), batch_stride, y.data_ptr(),
    )  # fmt: skip
    return y
