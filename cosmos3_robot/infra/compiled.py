"""The Generator tower through `torch.compile` (Inductor), for closed-loop control on a CPU.

A denoising step of a policy plan is a few dozen tokens through every layer: its time is mostly the
fixed cost of each kernel call and of the Python between them, not arithmetic (`benchmarks/README.md`,
"Control latency"). Inductor traces `MoT.run_generator` once per input layout and emits one C++
program per graph, with the element-wise work (norms, rotations, residuals, SiLU) fused and the frozen
weights packed for oneDNN, so the per-call cost is paid once per fused kernel instead of once per op.

    world.compile_generator("bf16")   # or WorldModel.from_folder(...); then plan as usual

What it costs and assumes:
  - a C++ compiler on the PATH; the first plan of each new layout (e.g. another instruction length)
    compiles for about 20-30 s on 2 cores;
  - the weights are frozen into the compiled program: it serves inference only, and a model whose
    weights change afterwards needs compiling again;
  - `linear_dtype=torch.bfloat16` runs the tower under bf16 autocast: products, attention and the
    element-wise work between them in bf16 (where `cpu_pack`'s bf16 mode rounds only the products'
    operands), the output back in float32.
`cpu_pack`'s modules are undone on the Generator's modules only (each layer's Generator half and its
final norm): Inductor packs those weights itself, and the fused C kernels (ctypes calls) would cut its
graph. The Reasoner, the embeddings and the output heads stay as `cpu_pack` left them.
"""

from __future__ import annotations

import shutil

import torch

from cosmos3_robot.infra.cpu_pack import LINEAR_DTYPES, unpack


def compiler_available() -> bool:
    return any(shutil.which(c) for c in ("c++", "g++", "clang++"))


def compile_generator(model, linear_dtype: torch.dtype | None = None) -> None:
    """Replace `model.run_generator` (an `MoT`) by its compiled form, in place."""
    if linear_dtype not in LINEAR_DTYPES.values():
        raise ValueError(f"linear_dtype must be one of {list(LINEAR_DTYPES)} (None or torch.bfloat16)")
    if not compiler_available():
        raise RuntimeError(
            "compiling the Generator needs a C++ compiler (c++, g++ or clang++) on the PATH; install one "
            "(Debian: apt-get install g++) or run without --compile"
        )
    import torch._inductor.config as inductor_config  # loads Inductor: only where a model is compiled

    for layer in model.layers:
        unpack(layer.dm)
    unpack(model.norm_dm)
    eager = type(model).run_generator.__get__(model)

    def run_generator(*args, **kwargs):
        with (
            torch.no_grad(),
            torch.autocast("cpu", dtype=linear_dtype or torch.bfloat16, enabled=linear_dtype is not None),
        ):
            return eager(*args, **kwargs).float()

    compiled = torch.compile(run_generator)

    def run_compiled(*args, **kwargs):
        # Freezing (weights as constants, packed once) is read when a graph compiles, which happens
        # lazily inside a call; `options=` of torch.compile did not reach it (measured: 10 ms slower).
        with inductor_config.patch(freezing=True):
            return compiled(*args, **kwargs)

    model.run_generator = run_compiled
