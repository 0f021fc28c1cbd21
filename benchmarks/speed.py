"""Speed of the MoT on this machine, measured side by side in one run.

    python benchmarks/speed.py --preset sim-small --out benchmarks/results/speed.json

Every time is the fastest of --reps runs; the two sides of a comparison are run alternately so that
a burst of load on a shared machine hits both alike. Medians are saved (`*_median`) beside them.

Figures (JSON + a printed table):
  matmul_peak_gflops        measured fp32 and bf16 GEMM throughput of this machine (the MFU denominator)
  denoise_ms_cached         one request, N Euler steps, Reasoner run once and its K/V reused
  denoise_ms_uncached       the same request recomputing the whole sequence every step (Diffusers' way)
  kv_reuse_speedup          uncached / cached
  kv_reuse_flop_ratio       the same ratio predicted from FLOP counts
  step_to_pass_ratio        one Generator step / one Reasoner pass, each timed alone (per batch; the
                            FLOP prediction is step_to_pass_flop_ratio): what decides the speedup
  fixed_cost_batch1         the same step and pass at batch 1 with every layer 16 wide: the per-call
                            costs that do not shrink with the arithmetic
  reason_only_ms            a Reasoner-only forward (logits) of our model, as a WorldModel runs it
                            (packed CPU weights and fused kernels; `*_unpacked` beside it without either,
                            `--no-pack` for everything)
  reason_only_vs_hf_ratio   ours / a transformers Qwen3ForCausalLM of identical dims, same inputs and threads
  train_step_gflops, mfu    a Generator-stage training step (forward + backward), achieved / measured peak
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosmos3_robot.flow import (  # noqa: E402
    EulerSampler,
    SigmaSampler,
    add_noise,
    flow_loss,
    make_sigmas,
    velocity_target,
)
from cosmos3_robot.infra.cpu_kernels import available as kernels_available  # noqa: E402
from cosmos3_robot.infra.cpu_pack import available as packing_available  # noqa: E402
from cosmos3_robot.infra.cpu_pack import pack_for_cpu  # noqa: E402
from cosmos3_robot.model import GenInput, MoT, count_parameters, preset, series_stream, video_stream  # noqa: E402
from cosmos3_robot.model.config import TowerConfig  # noqa: E402
from cosmos3_robot.tasks.sampling import Prompt, sample  # noqa: E402


def timed_alternating(fns: list, reps: int, warmup: int = 1) -> list[tuple[float, float]]:
    """(min, median) ms of each fn, the fns timed in turn, so that machine noise hits all alike.

    The minimum is the cost on an undisturbed machine (what `timeit` recommends for comparing code);
    the median shows what a shared machine gave.
    """
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(reps):
        for fn, acc in zip(fns, times, strict=True):
            t0 = time.perf_counter()
            fn()
            acc.append((time.perf_counter() - t0) * 1e3)
    return [(min(t), statistics.median(t)) for t in times]


def gemm_gflops(rows: int, k: int, n: int, dtype: torch.dtype = torch.float32, reps: int = 50) -> float:
    """Best-of-reps throughput of a (rows x k) @ (k x n) product in GFLOP/s."""
    a, b = torch.randn(rows, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * rows * k * n / best / 1e9


def matmul_peak(dtype: torch.dtype, n: int = 2048) -> float:
    """The peak this machine reaches (a large square GEMM, best of 10): the MFU denominator."""
    return gemm_gflops(n, n, n, dtype, reps=10)


# ------------------------------------------------------------------------------------------------
# FLOP model (multiply-add = 2 FLOPs), forward only
# ------------------------------------------------------------------------------------------------


def tower_linear_flops_per_token(cfg, tower) -> float:
    a = cfg.attention
    c = tower.hidden_size
    qkvo = c * a.head_dim * (2 * a.num_heads + 2 * a.num_kv_heads)
    mlp = 3 * c * tower.intermediate_size
    return 2 * a.num_layers * (qkvo + mlp)


def attention_flops(cfg, n_q: int, n_k: int, causal: bool) -> float:
    a = cfg.attention
    pairs = n_q * n_k / (2 if causal else 1)
    return 2 * 2 * a.num_layers * a.num_heads * a.head_dim * pairs


def reasoner_flops(cfg, la: int, logits: bool) -> float:
    f = la * tower_linear_flops_per_token(cfg, cfg.reasoner) + attention_flops(cfg, la, la, True)
    return f + (2 * la * cfg.reasoner.hidden_size * cfg.vocab_size if logits else 0)


def generator_flops(cfg, la: int, ld: int) -> float:
    return ld * tower_linear_flops_per_token(cfg, cfg.generator) + attention_flops(cfg, ld, la + ld, False)


# ------------------------------------------------------------------------------------------------


def pass_and_step_ms(model: MoT, gen: GenInput, prompt: Prompt, sigmas: torch.Tensor, reps: int):
    """The two towers alone: ((ms, median ms) of one Reasoner pass, (ms, median) of one planned
    Generator step), alternated. A cached request is one pass and `steps` steps, an uncached one
    `steps` of each, so the step / pass ratio decides how close the speedup comes to the FLOP
    prediction: speedup = steps·(pass + step) / (pass + steps·step)."""
    request = model.prepare_request(prompt.run(model), gen, sigmas)
    sigma = float(sigmas[0])
    return timed_alternating([lambda: prompt.run(model), lambda: request.velocity(gen, sigma)], reps)


def make_request(cfg, batch: int, frames: int, grid: int, actions: int, ar_len: int, g: torch.Generator):
    lat = torch.randn(batch, cfg.latent_channels, frames, grid, grid, generator=g)
    ftime = torch.arange(frames).float().expand(batch, frames) / 6.0
    noisy = torch.arange(frames)[None].expand(batch, frames) >= 1
    video = video_stream(lat, ftime, noisy, torch.full((batch,), 0.5))
    act = series_stream(
        torch.randn(batch, actions, cfg.action_dim, generator=g),
        torch.arange(actions).float().expand(batch, actions) / 10.0,
        torch.ones(batch, actions, dtype=torch.bool),
        torch.full((batch,), 0.5),
        embodiment=torch.zeros(batch, dtype=torch.long),
    )
    ids = torch.randint(0, cfg.vocab_size, (batch, ar_len), generator=g)
    return GenInput(video=video, action=act), Prompt(ids)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="sim-small", help="model preset (tiny, sim-small)")
    p.add_argument("--steps", type=int, default=10, help="denoising steps per request")
    p.add_argument("--ar-len", type=int, default=256, help="Reasoner tokens per request")
    p.add_argument(
        "--reps",
        type=int,
        default=30,
        help="timed repetitions of the inference comparisons, alternated (fastest is the headline, "
        "median beside it); on a shared machine more repetitions find more undisturbed runs",
    )
    p.add_argument(
        "--no-pack", action="store_true", help="time inference without packed CPU weights and fused kernels"
    )
    p.add_argument("--train-reps", type=int, default=8, help="timed repetitions of the training step")
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--train-batch", type=int, default=32, help="clips per training step (MFU measurement)")
    p.add_argument(
        "--request-batch",
        type=int,
        default=1,
        help="requests per call of the headline KV-reuse figure (1 and 4 are always measured)",
    )
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/speed.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)

    res: dict = {
        "preset": args.preset,
        "threads": args.threads,
        "torch": torch.__version__,
        "steps": args.steps,
    }
    res["matmul_peak_gflops"] = {"fp32": matmul_peak(torch.float32), "bf16": matmul_peak(torch.bfloat16)}

    cfg = preset(args.preset)
    eager = MoT(cfg).eval()
    # The inference path a WorldModel uses: Linear weights packed once for the CPU and the fused
    # RMSNorm / QK-norm + rotation kernels (`cpu_pack`, `cpu_kernels`).
    model = eager if args.no_pack else pack_for_cpu(copy.deepcopy(eager))
    res["packed_linears"] = not args.no_pack and packing_available()
    res["fused_cpu_kernels"] = not args.no_pack and kernels_available()
    res["params"] = count_parameters(model)

    # --- KV reuse: AR segment 4x the DM segment --------------------------------------------------
    # DM tokens: (frames x grid/2 x grid/2) video tokens + actions. Pick a grid so DM ≈ AR / 4.
    frames, grid, actions = 2, 10, 14  # 2 * 25 + 14 = 64 DM tokens
    res["ar_tokens"], res["dm_tokens"] = args.ar_len, 2 * (grid // 2) ** 2 + actions
    f_ar = reasoner_flops(cfg, args.ar_len, logits=False)
    f_dm = generator_flops(cfg, args.ar_len, res["dm_tokens"])
    res["kv_reuse_flop_ratio"] = args.steps * (f_ar + f_dm) / (f_ar + args.steps * f_dm)
    res["step_to_pass_flop_ratio"] = f_dm / f_ar
    kv = {}
    sigmas = make_sigmas(args.steps)
    for b in sorted({1, 4, args.request_batch}):
        gen, prompt = make_request(cfg, b, frames, grid, actions, args.ar_len, g)

        def run(reuse: bool, gen=gen, prompt=prompt):
            sample(model, gen, EulerSampler(), prompt, num_steps=args.steps, reuse_cache=reuse,
                   generator=torch.Generator().manual_seed(1))  # fmt: skip

        with torch.inference_mode():
            (cached, cached_med), (uncached, uncached_med) = timed_alternating(
                [lambda run=run: run(True), lambda run=run: run(False)], args.reps
            )
            (r_ms, r_med), (g_ms, g_med) = pass_and_step_ms(model, gen, prompt, sigmas, 3 * args.reps)
        kv[b] = {
            "denoise_ms_cached": cached,
            "denoise_ms_uncached": uncached,
            "kv_reuse_speedup": uncached / cached,
            "denoise_ms_cached_median": cached_med,
            "denoise_ms_uncached_median": uncached_med,
            "kv_reuse_speedup_median": uncached_med / cached_med,
            "reasoner_pass_ms": r_ms,
            "generator_step_ms": g_ms,
            "step_to_pass_ratio": g_ms / r_ms,
            "step_to_pass_ratio_median": g_med / r_med,
        }
    # The fixed per-call costs alone: the same batch-1 request through the same layers made 16 wide,
    # where nearly nothing is arithmetic. What they take of a step is what keeps batch 1 from the
    # FLOP prediction.
    narrow = dataclasses.replace(
        cfg,
        reasoner=TowerConfig(hidden_size=16, intermediate_size=16),
        generator=TowerConfig(hidden_size=16, intermediate_size=16),
        attention=dataclasses.replace(cfg.attention, head_dim=8, rope_sections=None),
        timestep_embed_dim=16,
    )
    narrow_model = MoT(narrow).eval() if args.no_pack else pack_for_cpu(MoT(narrow).eval())
    gen, prompt = make_request(narrow, 1, frames, grid, actions, args.ar_len, g)
    with torch.inference_mode():
        (r_fixed, _), (g_fixed, _) = pass_and_step_ms(narrow_model, gen, prompt, sigmas, 3 * args.reps)
    res["fixed_cost_batch1"] = {"hidden_size": 16, "reasoner_pass_ms": r_fixed, "generator_step_ms": g_fixed}

    # Headline: --request-batch requests per call; the other batches are reported beside it.
    head = kv[args.request_batch]
    res["request_batch"] = args.request_batch
    res.update(head)
    res["kv_reuse_by_batch"] = {str(b): v for b, v in kv.items()}
    ld = res["dm_tokens"]
    # Why batch 1 falls short of the FLOP ratio on a CPU: a Generator step multiplies 64-row matrices,
    # a Reasoner pass 256-row ones, and this machine's GEMM is slower per FLOP on the thin ones.
    res["mlp_gemm_gflops_by_rows"] = {
        str(m): gemm_gflops(m, cfg.generator.hidden_size, cfg.generator.intermediate_size)
        for m in sorted({ld, args.ar_len, 4 * args.ar_len})
    }

    # --- Reasoner only vs transformers ----------------------------------------------------------
    from transformers import Qwen3Config, Qwen3ForCausalLM

    a = cfg.attention
    hf_cfg = Qwen3Config(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.reasoner.hidden_size,
        intermediate_size=cfg.reasoner.intermediate_size,
        num_hidden_layers=a.num_layers,
        num_attention_heads=a.num_heads,
        num_key_value_heads=a.num_kv_heads,
        head_dim=a.head_dim,
        rope_theta=a.rope_theta,
        rms_norm_eps=cfg.reasoner.rms_norm_eps,
        tie_word_embeddings=False,
        max_position_embeddings=4096,
    )
    hf_cfg._attn_implementation = "sdpa"
    hf = Qwen3ForCausalLM(hf_cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (4, args.ar_len), generator=g)
    with torch.inference_mode():
        (ours_ms, ours_med), (eager_ms, eager_med), (hf_ms, hf_med) = timed_alternating(
            [
                lambda: model.reason(ids),
                lambda: eager.reason(ids),
                lambda: hf(input_ids=ids, use_cache=False),
            ],
            args.reps,
        )
    res["reason_only_vs_hf_ratio_median"] = ours_med / hf_med
    res["reason_only_ms_unpacked"] = eager_ms
    res["reason_only_unpacked_vs_hf_ratio"] = eager_ms / hf_ms
    res["reason_only_unpacked_vs_hf_ratio_median"] = eager_med / hf_med
    res["reason_only_ms"], res["hf_reason_ms"] = ours_ms, hf_ms
    res["reason_only_vs_hf_ratio"] = ours_ms / hf_ms
    res["reason_only_batch"] = 4

    # --- Training step MFU -----------------------------------------------------------------------
    bt = args.train_batch
    train_model = MoT(cfg).train()
    opt = torch.optim.AdamW(train_model.generator_parameters(), lr=1e-4)
    tgen, tprompt = make_request(cfg, bt, frames, grid, actions, 64, g)
    sig = SigmaSampler()

    def train_step(dtype):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            with torch.no_grad():
                cache = train_model.reason(tprompt.input_ids, logits=False).cache
            s = sig.per_modality(bt, ["video", "action"], g)
            x, tgt = {}, {}
            for n, st in tgen.items():
                eps = torch.randn(st.latents.shape, generator=g)
                sn = torch.where(st.noisy, s[n][:, None], torch.zeros(()))
                x[n] = torch.where(st.noisy[..., None], add_noise(st.latents, eps, sn), st.latents)
                tgt[n] = velocity_target(st.latents, eps)
            pred = train_model.denoise(
                cache,
                tgen.replace_latents(
                    x, {n: torch.where(st.noisy, s[n][:, None], torch.zeros(())) for n, st in tgen.items()}
                ),
            )
            loss, _ = flow_loss(pred, tgt, {n: st.noisy for n, st in tgen.items()})
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    ld_t = tgen.length
    # forward AR (no grad) + 3x forward of the Generator (forward + backward)
    step_flops = bt * (reasoner_flops(cfg, 64, False) + 3 * generator_flops(cfg, 64, ld_t))
    train = {}
    for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        ((ms, ms_med),) = timed_alternating([lambda dt=dt: train_step(dt)], args.train_reps, warmup=2)
        gf = step_flops / (ms / 1e3) / 1e9
        train[name] = {
            "ms": ms,
            "gflops": gf,
            "mfu": gf / res["matmul_peak_gflops"][name],
            "ms_median": ms_med,
            "mfu_median": step_flops / (ms_med / 1e3) / 1e9 / res["matmul_peak_gflops"][name],
        }
    best = max(train, key=lambda k: train[k]["gflops"])
    res["train_step"] = train
    res["train_step_dtype"] = best
    res["train_step_gflops"] = train[best]["gflops"]
    res["mfu"] = train[best]["mfu"]
    res["train_batch"], res["train_tokens_per_sample"] = bt, 64 + ld_t

    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(res, indent=2))
    os.replace(tmp, args.out)

    print(f"speed benchmark — preset {args.preset}, {args.threads} threads, torch {torch.__version__}")
    print(f"  times: fastest of {args.reps} alternated runs (median in brackets)")
    rows = [
        (
            "matmul peak fp32 / bf16 (GFLOP/s)",
            f"{res['matmul_peak_gflops']['fp32']:.1f} / {res['matmul_peak_gflops']['bf16']:.1f}",
        ),
        *[
            row
            for b, v in kv.items()
            for row in (
                (
                    f"batch {b}: {args.steps} steps, AR {args.ar_len} / DM {ld} tokens, cached (ms)",
                    f"{v['denoise_ms_cached']:.1f} ({v['denoise_ms_cached_median']:.1f})",
                ),
                (
                    "  uncached, recompute every step (ms)",
                    f"{v['denoise_ms_uncached']:.1f} ({v['denoise_ms_uncached_median']:.1f})",
                ),
                (
                    "  kv_reuse_speedup (measured)",
                    f"{v['kv_reuse_speedup']:.2f}x ({v['kv_reuse_speedup_median']:.2f}x)",
                ),
                (
                    "  Generator step / Reasoner pass alone (ms, ratio)",
                    f"{v['generator_step_ms']:.2f} / {v['reasoner_pass_ms']:.2f} = "
                    f"{v['step_to_pass_ratio']:.3f} ({v['step_to_pass_ratio_median']:.3f})",
                ),
            )
        ],
        ("  kv_reuse_flop_ratio (theory)", f"{res['kv_reuse_flop_ratio']:.2f}x"),
        ("  step / pass FLOP ratio (theory)", f"{res['step_to_pass_flop_ratio']:.3f}"),
        (
            "  fixed costs: batch 1, layers 16 wide, step / pass (ms)",
            f"{g_fixed:.2f} / {r_fixed:.2f}",
        ),
        (f"Reasoner-only forward, batch 4 x {args.ar_len} (ms)", f"{ours_ms:.1f}"),
        ("  transformers Qwen3ForCausalLM, same dims (ms)", f"{hf_ms:.1f}"),
        (
            "  ours without packing / fused kernels (ms) / ratio",
            f"{eager_ms:.1f} / {res['reason_only_unpacked_vs_hf_ratio']:.2f}",
        ),
        (
            "  reason_only_vs_hf_ratio",
            f"{res['reason_only_vs_hf_ratio']:.2f} ({res['reason_only_vs_hf_ratio_median']:.2f})",
        ),
        *[
            (
                f"fp32 GEMM {m} x {cfg.generator.hidden_size} x {cfg.generator.intermediate_size} (GFLOP/s)",
                f"{gf:.1f}",
            )
            for m, gf in res["mlp_gemm_gflops_by_rows"].items()
        ],
    ]
    for name in ("fp32", "bf16"):
        t = train[name]
        rows.append(
            (
                f"train step {name}, batch {bt} (ms / GFLOP/s / MFU)",
                f"{t['ms']:.1f} / {t['gflops']:.1f} / {100 * t['mfu']:.1f}% ({100 * t['mfu_median']:.1f}%)",
            )
        )
    w = max(len(r[0]) for r in rows)
    for k, v in rows:
        print(f"  {k:<{w}}  {v}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
