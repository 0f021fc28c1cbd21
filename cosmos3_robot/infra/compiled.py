"""What a policy plan runs, through `torch.compile` (Inductor), for closed-loop control on a CPU.

A denoising step of a policy plan is a few dozen tokens through every layer: its time is the fixed
cost of each kernel call and of the Python between them as much as arithmetic (`benchmarks/README.md`,
"Control latency"). Inductor traces a function once per input layout and emits one C++ program per
graph, with the element-wise work (norms, rotations, residuals, SiLU) fused, the frozen weights packed
for oneDNN and the products that read one input (query, key, value; gate, up) concatenated, so the
per-call cost is paid once per fused kernel instead of once per op.

    world.compile("bf16")   # WorldModel.from_folder(...); then plan as usual

What is compiled:
  - `compile_generator`: `MoT.step_velocity`, one whole denoising step (the step's latents embedded,
    the noise level's embedding added, the Generator tower, the velocities read out), and
    `MoT.euler_step`, the same with the Euler update after it (what an Euler plan calls: the
    sampler's arithmetic and the step in one program, one call per step). σ arrives as its
    embedding and σ_next − σ as a tensor, so one program serves every step of every plan; the
    instruction's length becomes symbolic the first time it changes (one more compile), then every
    instruction shares it;
  - `compile_encoder`: the VAE's `posterior_mean`, and `compile_estimator`: a state estimator's
    `read`, both in float32 and for static shapes (the same figures as eager, to float32 rounding:
    `tests/policies/test_policies.py`, `tests/encoders/test_state_estimator.py`).
What it costs and assumes:
  - a C++ compiler on the PATH; the first plan compiles for about 40 s on 2 cores (step, encoder and
    estimator), and the first change of instruction length about 15 s more;
  - the weights are frozen into the compiled programs: they serve inference only, and a model whose
    weights change afterwards needs compiling again;
  - `linear_dtype=torch.bfloat16` runs the step under bf16 autocast: products, attention and the
    element-wise work between them in bf16 (where `cpu_pack`'s bf16 mode rounds only the products'
    operands), the velocities back in float32.
`cpu_pack`'s modules are undone on the modules a step reads (each layer's Generator half, its final
norm, the video and audio projections): Inductor packs those weights itself, and the fused C kernels
(ctypes calls) would cut its graph. The Reasoner and the time embedding stay as `cpu_pack` left them.
"""

from __future__ import annotations

import shutil

import torch

from cosmos3_robot.infra.cpu_pack import LINEAR_DTYPES, unpack
from cosmos3_robot.model.request import euler_update

# Read when a graph compiles, which happens lazily inside a call (`options=` of torch.compile did not
# reach freezing: measured 10 ms slower). freezing: weights as constants, packed once; cpp_wrapper:
# the graph's kernels called from C++, not Python; enable_concat_linear: one product for the linears
# that read one input (`benchmarks/README.md`, "Where a plan's time goes").
INDUCTOR_OPTIONS = {"freezing": True, "cpp_wrapper": True, "cpp.enable_concat_linear": True}


def compiler_available() -> bool:
    return any(shutil.which(c) for c in ("c++", "g++", "clang++"))


def compile_generator(model, linear_dtype: torch.dtype | None = None) -> None:
    """Replace `model.step_velocity` and `model.euler_step` (an `MoT`) by their compiled forms, in place."""
    if linear_dtype not in LINEAR_DTYPES.values():
        raise ValueError(f"linear_dtype must be one of {list(LINEAR_DTYPES)} (None or torch.bfloat16)")
    _require_compiler()
    for layer in model.layers:
        unpack(layer.dm)
    for name in ("norm_dm", "video_in", "video_out", "audio_in", "audio_out"):
        if hasattr(model, name):
            unpack(getattr(model, name))
    eager = type(model).step_velocity.__get__(model)
    autocast = dict(device_type="cpu", dtype=linear_dtype or torch.bfloat16, enabled=linear_dtype is not None)

    def step_velocity(*args, **kwargs):
        with torch.autocast(**autocast):
            return {name: v.float() for name, v in eager(*args, **kwargs).items()}

    def euler_step(cache, gen, plan, t, h, rope):
        return euler_update(gen, step_velocity(cache, gen, plan, t, rope), h)

    # One program for every instruction: the Reasoner's keys vary in length with the instruction
    # (a new colour name is a new length), so the step is compiled with that length symbolic.
    # Each compiles on its first call: an Euler plan calls `euler_step` only.
    model.step_velocity = _compiled(step_velocity, dynamic=None)
    model.euler_step = _compiled(euler_step, dynamic=None)


def compile_encoder(vae) -> None:
    """Replace `vae.posterior_mean` (a `VideoVAE`) by its compiled form, in place, in float32."""
    _require_compiler()
    vae.posterior_mean = _compiled(type(vae).posterior_mean.__get__(vae))


def compile_estimator(estimator) -> None:
    """Replace `estimator.read` (a `StateEstimator`) by its compiled form, in place, in float32."""
    _require_compiler()
    estimator.read = _compiled(type(estimator).read.__get__(estimator))


def _compiled(fn, dynamic: bool | None = False):
    """`fn` compiled for inference (no autograd) under `INDUCTOR_OPTIONS`: for static shapes (one
    program per layout), or with `dynamic=None` as torch.compile's default (a size seen to change
    becomes symbolic)."""
    import torch._inductor.config as inductor_config  # loads Inductor: only where a model is compiled

    compiled = torch.compile(fn, dynamic=dynamic)
    options = inductor_config.patch(dict(INDUCTOR_OPTIONS))  # made once: its class is built per patch()

    def run(*args, **kwargs):
        with options, torch.no_grad():
            return compiled(*args, **kwargs)

    return run


def _require_compiler() -> None:
    if not compiler_available():
        raise RuntimeError(
            "compiling needs a C++ compiler (c++, g++ or clang++) on the PATH; install one "
            "(Debian: apt-get install g++) or run without --compile"
        )
