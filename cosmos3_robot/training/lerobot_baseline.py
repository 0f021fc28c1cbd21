"""LeRobot's ACT and Diffusion Policy trained here, on the same LeRobot datasets as our model, for a
step or wall-clock budget: the baselines of `benchmarks/` (issue 20).

    summary = train_baseline(BaselineConfig(kind="act", root="data/reach", out="runs/act", minutes=15))
    # runs/act/model/ is a LeRobot checkpoint: `cosmos3-robot rollout --policy lerobot:runs/act/model`

Random initialisation everywhere (`pretrained_backbone_weights=None`: nothing can be downloaded).
Inputs are the camera (`observation.image`) and the proprioceptive state (`observation.state`), the
same observations our state-conditioned policy reads; the simulator's own state
(`observation.environment_state`) only when `environment_state` is set, for the privileged-state
comparison (ACT and Diffusion Policy read it natively, as in LeRobot's PushT keypoints setting).
Delta timestamps, normalisation and the optimiser are LeRobot's own for each policy type (its
`resolve_delta_timestamps`, `make_pre_post_processors`, `get_optim_params` and the config's learning
rate / weight decay), so the baseline is the one a LeRobot user would train, at CPU-sized settings
named in `BaselineConfig`. A run is resumable: weights, optimiser, step and elapsed time are saved
every `save_every` steps (atomically), and the same call continues from there.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from cosmos3_robot.datasets.sources import open_lerobot_dataset, open_lerobot_metadata
from cosmos3_robot.files import atomic_folder, write_json_atomic

KINDS = ("act", "diffusion")
STATE_FILE = "train_state.pt"


@dataclass
class BaselineConfig:
    kind: str  # "act" or "diffusion"
    root: str  # LeRobot dataset folder
    out: str
    repo_id: str | None = None
    steps: int | None = None  # a step budget; None = only the time budget
    minutes: float | None = None  # a wall-clock budget (training steps only, not loading or saving)
    batch_size: int = 8
    chunk: int = 10  # ACT: chunk_size; Diffusion: horizon (rounded up to what its U-Net divides)
    execute: int = 5  # n_action_steps: actions executed per chunk before re-planning
    seed: int = 0
    save_every: int = 200
    episodes: list[int] | None = None  # training episodes (default: all)
    environment_state: bool = False  # also read observation.environment_state (privileged)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"baseline kind {self.kind!r}; choose one of {list(KINDS)}")
        if self.steps is None and self.minutes is None:
            raise ValueError("give a budget: steps, minutes, or both (whichever ends first)")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.minutes is not None and not (math.isfinite(self.minutes) and self.minutes > 0):
            raise ValueError(f"minutes must be a finite number > 0, got {self.minutes}")
        for name in ("batch_size", "chunk", "execute", "save_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.execute > self.chunk:
            raise ValueError(f"execute={self.execute} cannot exceed the chunk of {self.chunk} actions")


def policy_config(cfg: BaselineConfig, meta):
    """The LeRobot config of the baseline for this dataset's features."""
    from lerobot.configs.types import FeatureType
    from lerobot.utils.feature_utils import dataset_to_policy_features

    feats = dataset_to_policy_features(meta.features)
    keys = ["observation.image", "observation.state"]
    if cfg.environment_state:
        keys.append("observation.environment_state")
    missing = [k for k in [*keys, "action"] if k not in feats]
    if missing:
        raise ValueError(
            f"dataset {cfg.root} lacks {missing}; a baseline reads the camera and the state"
            + (" (and the environment state: drop --environment-state)" if cfg.environment_state else "")
        )
    inputs = {k: f for k, f in feats.items() if k in keys}
    outputs = {k: f for k, f in feats.items() if f.type == FeatureType.ACTION}
    common = dict(input_features=inputs, output_features=outputs, device="cpu", push_to_hub=False,
                  pretrained_backbone_weights=None)  # fmt: skip
    if cfg.kind == "act":
        from lerobot.policies.act.configuration_act import ACTConfig

        return ACTConfig(**common, chunk_size=cfg.chunk, n_action_steps=cfg.execute)
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig

    # Its U-Net halves the horizon once per entry of down_dims.
    factor = 2 ** len(DiffusionConfig.__dataclass_fields__["down_dims"].default)
    horizon = factor * math.ceil(max(cfg.chunk, cfg.execute + 1) / factor)
    size = int(inputs["observation.image"].shape[-1])
    return DiffusionConfig(**common, horizon=horizon, n_action_steps=cfg.execute, crop_shape=(size, size),
                           crop_is_random=False, num_inference_steps=10)  # fmt: skip


def train_baseline(cfg: BaselineConfig, progress: bool = True) -> dict:
    """Train (or resume) to the budget; returns the summary also written to OUT/train_log.json."""
    from lerobot.datasets.factory import resolve_delta_timestamps
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors
    from tqdm import tqdm

    out = Path(cfg.out)
    meta = open_lerobot_metadata(cfg.repo_id, cfg.root)
    pcfg = policy_config(cfg, meta)
    torch.manual_seed(cfg.seed)
    policy = get_policy_class(pcfg.type)(pcfg).train()
    pre, post = make_pre_post_processors(pcfg, dataset_stats=meta.stats)
    dataset = open_lerobot_dataset(cfg.repo_id, cfg.root, episodes=cfg.episodes,
                                   delta_timestamps=resolve_delta_timestamps(pcfg, meta))  # fmt: skip
    opt = torch.optim.AdamW(policy.get_optim_params(), lr=pcfg.optimizer_lr,
                            weight_decay=pcfg.optimizer_weight_decay)  # fmt: skip
    step, elapsed, losses = resume(out, cfg, policy, opt)
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
    loader = iter(())
    bar = tqdm(total=cfg.steps, initial=step, desc=f"train {cfg.kind}", unit="step", disable=not progress)
    while not budget_spent(cfg, step, elapsed):
        t_step = time.perf_counter()  # the clock counts data and steps, not saving (as `train minutes=`)
        batch = next(loader, None)
        if batch is None:  # a new epoch
            loader = iter(torch.utils.data.DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True,
                                                      drop_last=True, generator=gen, num_workers=0))  # fmt: skip
            batch = next(loader)
        loss, _ = policy.forward(pre(batch))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 10.0)
        opt.step()
        step += 1
        losses.append(loss.item())
        elapsed += time.perf_counter() - t_step
        bar.update(1)
        bar.set_postfix(loss=f"{losses[-1]:.4f}")
        if step % cfg.save_every == 0:
            save(out, cfg, policy, pre, post, opt, step, elapsed, losses)
    bar.close()
    return save(out, cfg, policy, pre, post, opt, step, elapsed, losses)


def budget_spent(cfg: BaselineConfig, step: int, seconds: float) -> bool:
    return (cfg.steps is not None and step >= cfg.steps) or (
        cfg.minutes is not None and seconds >= 60 * cfg.minutes
    )


def resume(out: Path, cfg: BaselineConfig, policy, opt) -> tuple[int, float, list[float]]:
    path = out / STATE_FILE
    if not path.exists():
        return 0, 0.0, []
    state = torch.load(path, weights_only=False)
    if state["config"]["kind"] != cfg.kind or state["config"]["root"] != cfg.root:
        raise ValueError(
            f"{out} holds a {state['config']['kind']} run on {state['config']['root']}; use another out"
        )
    policy.load_state_dict(state["policy"])
    opt.load_state_dict(state["optimizer"])
    return int(state["step"]), float(state["seconds"]), list(state["losses"])


def save(out: Path, cfg: BaselineConfig, policy, pre, post, opt, step, seconds, losses) -> dict:
    """The LeRobot checkpoint (OUT/model), the resume state and the log, each replaced atomically."""
    out.mkdir(parents=True, exist_ok=True)
    with atomic_folder(out / "model") as tmp:
        for part in (policy, pre, post):
            part.save_pretrained(tmp)
    state = {"config": asdict(cfg), "policy": policy.state_dict(), "optimizer": opt.state_dict(),
             "step": step, "seconds": seconds, "losses": losses}  # fmt: skip
    torch.save(state, out / f".{STATE_FILE}.tmp")
    (out / f".{STATE_FILE}.tmp").replace(out / STATE_FILE)
    params = sum(p.numel() for p in policy.parameters())
    summary = {
        "kind": cfg.kind, "step": step, "train_seconds": round(seconds, 1), "params": params,
        "seconds_per_step": round(seconds / max(step, 1), 3),
        "final_loss": sum(losses[-20:]) / max(len(losses[-20:]), 1) if losses else None,
        "model": str(out / "model"), "config": asdict(cfg), "loss_every_50": losses[::50],
    }  # fmt: skip
    write_json_atomic(out / "train_log.json", json.loads(json.dumps(summary)))
    return summary
