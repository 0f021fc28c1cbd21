"""Our MoT vs Diffusers' `Cosmos3OmniTransformer` on the same weights and the same requests.

    python benchmarks/vs_diffusers.py --preset tiny|sim-small --steps 35 --out FILE

One random Cosmos3OmniTransformer (every parameter randomised) is saved in the Diffusers layout
and imported with `load_diffusers_cosmos3`, so both sides hold identical weights. Each request has
a 256-token Reasoner prompt (and a 256-token negative prompt under guidance), 3 latent frames of
an 8x8 latent grid at 15 fps (a 9-frame, 128x128 clip) and 8 actions, in three modes:

    forward_dynamics   clean: frame 0 + all actions      noisy: frames 1-2
    inverse_dynamics   clean: all frames                 noisy: actions
    policy             clean: frame 0                    noisy: frames 1-2 + actions

N Euler steps on the noisy tokens, with guidance (scale 3) and without:
  Diffusers: the transformer called per step on the whole joint sequence, once per prompt
             (two forwards per step under guidance), one request at a time — as its pipeline does.
  ours:      the Reasoner once per prompt (cond and uncond caches stacked with `ReasonerCache.cat`),
             then one Generator pass per step reading the cached K/V; batch 8 runs as one batch.

Reported per mode and guidance setting: wall time per batch (`diffusers_ms`, `ours_ms` at b1/b8),
`speedup_b1` = Diffusers / ours at batch 1, `throughput_ratio_b8` = requests/s ours / Diffusers
at batch 8, and the largest difference of the final latents at batch 1 (a correctness check).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosmos3_robot.flow import make_sigmas  # noqa: E402
from cosmos3_robot.interop.diffusers_io import config_to_diffusers, load_diffusers_cosmos3  # noqa: E402
from cosmos3_robot.interop.diffusers_positions import cosmos3_gen_input, diffusers_request, diffusers_step  # noqa: E402
from cosmos3_robot.model import ReasonerCache, preset, unpatchify  # noqa: E402

MODES = {  # (clean latent frames, clean actions) of a 3-frame, 8-action request
    "forward_dynamics": ([0], list(range(8))),
    "inverse_dynamics": ([0, 1, 2], []),
    "policy": ([0], []),
}
FRAMES, LATENT_HW, ACTIONS, FPS, DOMAIN = 3, (8, 8), 8, 15.0, 1


def random_cosmos3(preset_name: str, seed: int = 0):
    """A Diffusers Cosmos3OmniTransformer with our preset's shapes and every parameter random."""
    from diffusers.models.transformers.transformer_cosmos3 import Cosmos3OmniTransformer

    cfg = dataclasses.replace(preset(preset_name), timestep_embed_dim=256, audio_dim=None)
    kwargs = {k: v for k, v in config_to_diffusers(cfg).items() if k != "_class_name"}
    torch.manual_seed(seed)
    m = Cosmos3OmniTransformer(**kwargs).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.ndim == 1:
                p.copy_(("norm" in name) + 0.2 * torch.randn_like(p))
            else:
                fan_in = math.sqrt(p.shape[1]) if name.endswith("fc.weight") else p.shape[-1]
                p.copy_(torch.randn_like(p) / math.sqrt(fan_in))
    return m


def make_requests(n: int, cfg, prompt_len: int, seed: int) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    return [
        {
            "ids": torch.randint(0, cfg.vocab_size, (prompt_len,), generator=g).tolist(),
            "neg_ids": torch.randint(0, cfg.vocab_size, (prompt_len,), generator=g).tolist(),
            "video": torch.randn(1, cfg.latent_channels, FRAMES, *LATENT_HW, generator=g),
            "action": torch.randn(ACTIONS, cfg.action_dim, generator=g),
        }
        for _ in range(n)
    ]


def run_diffusers(m, req: dict, mode: str, sigmas: torch.Tensor, scale: float | None) -> dict:
    """One request the way the Diffusers pipeline runs it: full forwards per step, one per prompt."""
    vcond, acond = MODES[mode]
    common = dict(vision_cond_frames=vcond, fps=FPS, action_len=ACTIONS, action_cond=acond, domain_id=DOMAIN)
    shape = tuple(req["video"].shape)
    static_c = diffusers_request(m, req["ids"], shape, **common)
    static_u = diffusers_request(m, req["neg_ids"], shape, **common) if scale is not None else None
    video, action = req["video"].clone(), req["action"].clone()
    for i in range(len(sigmas) - 1):
        t = float(sigmas[i]) * 1000
        vis, _, act = m(**diffusers_step(static_c, t, video, action=action))
        v_vis, v_act = vis[0], act[0]
        if static_u is not None:
            vis_u, _, act_u = m(**diffusers_step(static_u, t, video, action=action))
            v_vis = vis_u[0] + scale * (v_vis - vis_u[0])
            v_act = act_u[0] + scale * (v_act - act_u[0])
        h = float(sigmas[i + 1] - sigmas[i])
        video, action = video + h * v_vis, action + h * v_act  # velocities are 0 on clean tokens
    return {"video": video, "action": action}


def run_ours(
    model, compat, reqs: list[dict], mode: str, sigmas: torch.Tensor, scale: float | None
) -> list[dict]:
    """A batch of requests: Reasoner once per prompt, cached K/V reused by every Generator step."""
    vcond, acond = MODES[mode]
    b = len(reqs)
    cache = model.reason(torch.tensor([r["ids"] for r in reqs]), logits=False).cache
    if scale is not None:  # cond rows then uncond rows; prompts of other lengths are padded and masked
        neg = model.reason(torch.tensor([r["neg_ids"] for r in reqs]), logits=False).cache
        cache = ReasonerCache.cat([cache, neg])
    reps = 2 if scale is not None else 1
    video = torch.cat([r["video"] for r in reqs]).repeat(reps, 1, 1, 1, 1)
    action = torch.stack([r["action"] for r in reqs]).repeat(reps, 1, 1)
    v_noisy = torch.tensor([f not in vcond for f in range(FRAMES)])
    a_noisy = torch.tensor([i not in acond for i in range(ACTIONS)])
    lens = [len(r["ids"]) for r in reqs] + ([len(r["neg_ids"]) for r in reqs] if scale is not None else [])
    gen = cosmos3_gen_input(
        compat, lens, video, v_noisy, float(sigmas[0]), FPS, model.config.patch_size,
        action=action, action_noisy=a_noisy, embodiment=torch.full((b * reps,), DOMAIN),
    )  # fmt: skip
    x = {"video": gen.video.latents, "action": gen.action.latents}
    noisy = {"video": gen.video.noisy, "action": gen.action.noisy}
    # As `tasks.sampling.sample`: keys laid out once per request, positions rotated once, inputs
    # validated and noise levels embedded once (`plan_steps`), velocities only where tokens are noisy.
    request = model.prepare_request(cache, gen, sigmas)
    for i in range(len(sigmas) - 1):
        v = request.velocity(gen.replace_latents(x), float(sigmas[i]))
        if scale is not None:
            v = {k: t[b:] + scale * (t[:b] - t[b:]) for k, t in v.items()}
        h = float(sigmas[i + 1] - sigmas[i])
        x = {k: x[k] + h * v[k].repeat(reps, 1, 1) * noisy[k][..., None] for k in x}
    c = model.config.latent_channels
    videos = unpatchify(x["video"][:b], (c, FRAMES, *LATENT_HW), model.config.patch_size)
    return [{"video": videos[i : i + 1], "action": x["action"][i]} for i in range(b)]


def timed(fn, repeats: int) -> tuple[float, float, object]:
    """Best-of-`repeats` wall-clock and process-CPU milliseconds (the CPU clock is robust to other
    processes on a shared machine), and the last result."""
    wall, cpu, out = float("inf"), float("inf"), None
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        wall, cpu = min(wall, time.perf_counter() - w0), min(cpu, time.process_time() - c0)
    return wall * 1000, cpu * 1000, out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=["tiny", "sim-small"], default="tiny")
    ap.add_argument("--steps", type=int, default=35)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--guidance-scale", type=float, default=3.0)
    ap.add_argument("--shift", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2, help="best of N timings (after one warm-up)")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall", help="clock of the headline figures")
    ap.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    ref = random_cosmos3(args.preset)
    with tempfile.TemporaryDirectory() as tmp:
        ref.save_pretrained(tmp)
        model, compat = load_diffusers_cosmos3(tmp)
    cfg = model.config
    sigmas = make_sigmas(args.steps, args.shift)
    reqs = make_requests(args.batch, cfg, args.prompt_tokens, seed=1)
    per_frame = (LATENT_HW[0] // cfg.patch_size) * (LATENT_HW[1] // cfg.patch_size)
    report = {
        "preset": args.preset,
        "steps": args.steps,
        "batch": args.batch,
        "reasoner_tokens": args.prompt_tokens,
        "generator_tokens": FRAMES * per_frame + ACTIONS,
        "threads": args.threads,
        "guidance_scale": args.guidance_scale,
        "clock": args.clock,
        "results": {},
    }
    print(
        f"{args.preset}: {args.steps} Euler steps, {args.prompt_tokens} Reasoner tokens, "
        f"{report['generator_tokens']} Generator tokens, {args.threads} threads, {args.clock} clock (ms)\n"
        f"{'mode':<17} {'guidance':<11} | {'diff b1':>9} {'ours b1':>8} {'speedup':>8} | "
        f"{'diff b' + str(args.batch):>9} {'ours b' + str(args.batch):>8} {'thru':>8} | max|Δ|"
    )
    with torch.inference_mode():
        for mode in args.modes:
            report["results"][mode] = {}
            for label, scale in (("guidance", args.guidance_scale), ("no_guidance", None)):
                run_ours(model, compat, reqs[:1], mode, sigmas[:3], scale)  # warm-up
                run_diffusers(ref, reqs[0], mode, sigmas[:3], scale)
                # Diffusers serves one request at a time: batch B = B requests in sequence.
                d = [timed(lambda r=r: run_diffusers(ref, r, mode, sigmas, scale), 1) for r in reqs[1:]]  # noqa: B023
                d1 = timed(lambda: run_diffusers(ref, reqs[0], mode, sigmas, scale), args.repeats)  # noqa: B023
                o1 = timed(lambda: run_ours(model, compat, reqs[:1], mode, sigmas, scale), args.repeats)  # noqa: B023
                o8 = timed(lambda: run_ours(model, compat, reqs, mode, sigmas, scale), args.repeats)  # noqa: B023
                d8 = (d1[0] + sum(x[0] for x in d), d1[1] + sum(x[1] for x in d))
                k = 0 if args.clock == "wall" else 1
                diff = max((o1[2][0][n] - d1[2][n]).abs().max().item() for n in ("video", "action"))
                bn = f"b{args.batch}"
                r = report["results"][mode][label] = {
                    "diffusers_ms": {"b1": round(d1[k], 1), bn: round(d8[k], 1)},
                    "ours_ms": {"b1": round(o1[k], 1), bn: round(o8[k], 1)},
                    "speedup_b1": round(d1[k] / o1[k], 2),
                    f"throughput_ratio_{bn}": round(d8[k] / o8[k], 2),
                    "other_clock": {
                        "clock": "cpu" if k == 0 else "wall",
                        "diffusers_ms": {"b1": round(d1[1 - k], 1), bn: round(d8[1 - k], 1)},
                        "ours_ms": {"b1": round(o1[1 - k], 1), bn: round(o8[1 - k], 1)},
                    },
                    "max_abs_diff_b1": diff,
                }
                print(
                    f"{mode:<17} {label:<11} | {d1[k]:9.1f} {o1[k]:8.1f} {r['speedup_b1']:7.2f}x | "
                    f"{d8[k]:9.1f} {o8[k]:8.1f} {r[f'throughput_ratio_{bn}']:7.2f}x | {diff:.1e}",
                    flush=True,
                )
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
