"""How much of batch 1's KV-reuse speedup the small element-wise kernels cost, and what fusing them gave.

    python benchmarks/glue_bound.py --out benchmarks/results/glue_bound.json

`speed.py` times a request with the Reasoner's K/V reused against the same request recomputed every
step. At batch 1 a Generator step multiplies 64-row matrices, and the kernels that are not matrix
products (RMSNorm, the rotary embedding) cost nearly as much per call there as in a 256-row
Reasoner pass. Fusing them is the obvious lever. This script times the same two requests three ways:

  pytorch    RMSNorm, QK-norm and the rotation as PyTorch ops (`cpu_kernels` off)
  fused      as shipped: `cpu_pack.pack_for_cpu` with the fused `cpu_kernels`
  free_glue  every RMSNorm and every rotation replaced by the identity, as if they cost nothing: the
             bound no fusion can pass. Its outputs are wrong; only its timings mean anything.

All modes run in one process, alternated request by request, after the same large allocations as
`speed.py` (so glibc's allocator is in the same state). Times are the fastest of --reps runs, with
medians beside them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from speed import make_request, matmul_peak  # noqa: E402

from cosmos3_robot.flow import EulerSampler  # noqa: E402
from cosmos3_robot.infra import cpu_kernels  # noqa: E402
from cosmos3_robot.infra.cpu_pack import CPUTowerAttention, pack_for_cpu, set_fused_kernels  # noqa: E402
from cosmos3_robot.model import MoT, preset  # noqa: E402
from cosmos3_robot.model.layers import RMSNorm  # noqa: E402
from cosmos3_robot.tasks.sampling import sample  # noqa: E402

MODES = ("pytorch", "fused", "free_glue")


class FreeNorm(RMSNorm):
    """An RMSNorm that costs nothing and does nothing (wrong outputs)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class FreeGlueAttention(CPUTowerAttention):
    """Packed q/k/v with QK-norm and the rotation skipped (wrong outputs)."""

    def norm_and_rotate(self, q, k, rope, extra_key_norm=None):
        return q, k, None


@contextlib.contextmanager
def free_glue(model: torch.nn.Module) -> Iterator[None]:
    """Every RMSNorm and every QK-norm + rotation of `model` becomes the identity while the block
    runs: modules swapped from outside, as `cpu_pack` swaps them, and swapped back after."""
    swapped = []
    for module in model.modules():
        for plain, free in ((CPUTowerAttention, FreeGlueAttention), (RMSNorm, FreeNorm)):
            if isinstance(module, plain):
                swapped.append((module, module.__class__))
                module.__class__ = free
                break
    try:
        yield
    finally:
        for module, cls in swapped:
            module.__class__ = cls


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="sim-small", help="model preset (tiny, sim-small)")
    p.add_argument("--steps", type=int, default=10, help="denoising steps per request")
    p.add_argument("--ar-len", type=int, default=256, help="Reasoner tokens per request")
    p.add_argument("--batch", type=int, default=1, help="requests per call")
    p.add_argument("--reps", type=int, default=30, help="timed repetitions of each (mode, request) pair")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/glue_bound.json"))
    args = p.parse_args(argv)
    for name in ("steps", "ar_len", "batch", "reps"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")

    matmul_peak(torch.float32)  # the allocations speed.py makes first: same allocator state
    matmul_peak(torch.bfloat16)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    cfg = preset(args.preset)
    model = pack_for_cpu(MoT(cfg).eval())
    gen, prompt = make_request(cfg, args.batch, 2, 10, 14, args.ar_len, g)

    def run(reuse: bool) -> None:
        sample(model, gen, EulerSampler(), prompt, num_steps=args.steps, reuse_cache=reuse,
               generator=torch.Generator().manual_seed(1))  # fmt: skip

    times = {(m, r): [] for m in MODES for r in (True, False)}
    with torch.inference_mode():
        for rep in range(args.reps + 1):  # the first round warms up and is not kept
            for mode in MODES:
                set_fused_kernels(model, mode != "pytorch")
                with free_glue(model) if mode == "free_glue" else contextlib.nullcontext():
                    for reuse in (True, False):
                        t0 = time.perf_counter()
                        run(reuse)
                        if rep:
                            times[(mode, reuse)].append((time.perf_counter() - t0) * 1e3)

    res: dict = {
        "fused_cpu_kernels": cpu_kernels.available(),
        "preset": args.preset,
        "batch": args.batch,
        "steps": args.steps,
        "ar_tokens": args.ar_len,
        "threads": torch.get_num_threads(),
        "reps": args.reps,
    }
    print(f"{'mode':<10} {'cached ms':>10} {'uncached ms':>12} {'speedup':>8} {'median':>8}")
    for mode in MODES:
        cached, uncached = times[(mode, True)], times[(mode, False)]
        row = {
            "denoise_ms_cached": min(cached),
            "denoise_ms_uncached": min(uncached),
            "kv_reuse_speedup": min(uncached) / min(cached),
            "kv_reuse_speedup_median": statistics.median(uncached) / statistics.median(cached),
        }
        res[mode] = row
        print(
            f"{mode:<10} {row['denoise_ms_cached']:>10.1f} {row['denoise_ms_uncached']:>12.1f} "
            f"{row['kv_reuse_speedup']:>7.2f}x {row['kv_reuse_speedup_median']:>7.2f}x"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(res, indent=2))
    tmp.replace(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
