"""A LeRobot policy checkpoint as a rollout policy, so baselines run through the same harness.

    policy = LeRobotPolicy.from_folder("outputs/act/checkpoints/last/pretrained_model")
    for ep in run_episodes("cosmos3_robot/Reach-v0", policy, 50, seed=10_000, image_size=policy.image_size):
        ...

The folder is what `lerobot-train` (or `policy.save_pretrained` + the processors'
`save_pretrained`) writes: `config.json`, `model.safetensors`, `policy_preprocessor.json` and
`policy_postprocessor.json` (the normalisation). Supported types: ACT and Diffusion Policy. Our env
observations map onto LeRobot's keys as `record` writes them: `pixels` -> `observation.image`
(float in [0, 1], channel-first), `agent_pos` -> `observation.state`, `environment_state` ->
`observation.environment_state`. `chunks` records the latency of every `select_action` call that
planned (LeRobot's queue was empty); the others pop a queued action.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from cosmos3_robot.policies.rollout import Chunk
from cosmos3_robot.policies.runners import check_ensemble
from cosmos3_robot.processors.data_state import OBS_KEYS

SUPPORTED = ("act", "diffusion")


class LeRobotPolicy:
    def __init__(self, policy, preprocessor, postprocessor, image_size: int):
        self.policy, self.pre, self.post = policy, preprocessor, postprocessor
        self.image_size = image_size
        self.chunks: list[Chunk] = []
        self._step = 0

    @classmethod
    def from_folder(cls, folder: str | Path, ensemble: float | None = None) -> LeRobotPolicy:
        """The checkpoint in `folder`. `ensemble=M` runs ACT with its temporal ensembling (LeRobot's
        `temporal_ensemble_coeff`: a chunk every step, the overlapping ones averaged with weights
        w_i = exp(-M·i), i = 0 for the oldest chunk, so the oldest weighs most; M=0.01 is the ACT
        paper's), whatever `n_action_steps` it was trained with; Diffusion Policy has none and is
        refused."""
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors

        folder = Path(folder)
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(
                f"{folder} has no config.json: give a LeRobot policy checkpoint folder (e.g. "
                "outputs/train/checkpoints/last/pretrained_model)"
            )
        cfg = PreTrainedConfig.from_pretrained(folder)
        if cfg.type not in SUPPORTED:
            raise ValueError(
                f"{folder} holds a {cfg.type!r} policy; the rollout harness supports {list(SUPPORTED)}"
            )
        cfg.device = "cpu"
        if ensemble is not None:
            if cfg.type != "act":
                raise ValueError(
                    f"{folder} holds a {cfg.type!r} policy: LeRobot has temporal ensembling for ACT only; "
                    "drop --ensemble and use --execute"
                )
            check_ensemble(ensemble)
            cfg.temporal_ensemble_coeff, cfg.n_action_steps = float(ensemble), 1  # ACT needs both
        unknown = sorted(set(cfg.input_features) - set(OBS_KEYS))
        if unknown:
            raise ValueError(f"{folder} reads observation keys {unknown}; our envs give {sorted(OBS_KEYS)}")
        image = cfg.input_features.get("observation.image")
        if image is None:
            raise ValueError(f"{folder} reads no observation.image; our envs' policies see the camera")
        policy = get_policy_class(cfg.type).from_pretrained(folder, config=cfg).eval()
        pre, post = make_pre_post_processors(cfg, pretrained_path=str(folder))
        return cls(policy, pre, post, image_size=int(image.shape[-1]))

    def queued_actions(self) -> int:
        """Actions LeRobot's policy has queued: ACT keeps `_action_queue`, Diffusion Policy
        `_queues["action"]`; 0 (plan on the next call) for a policy without a queue."""
        queue = getattr(self.policy, "_action_queue", None)
        if queue is None:
            queue = (getattr(self.policy, "_queues", None) or {}).get("action")
        return 0 if queue is None else len(queue)

    def seed(self, seed: int) -> None:
        """Diffusion Policy samples from torch's global generator: seeded by the episode's env seed,
        a resumed rollout repeats the uninterrupted one."""
        torch.manual_seed(seed)

    def reset(self) -> None:
        self.policy.reset()
        self.chunks, self._step = [], 0

    @torch.no_grad()
    def act(self, obs: dict, task: str) -> np.ndarray:
        batch = {"task": task}
        wanted = {key: ours for key, ours in OBS_KEYS.items() if key in self.policy.config.input_features}
        missing = [ours for ours in wanted.values() if ours not in obs]
        if missing:
            raise ValueError(
                f"this LeRobot policy reads {sorted(wanted)}: obs needs {missing}, got keys {sorted(obs)}"
            )
        for key, ours in wanted.items():
            value = torch.as_tensor(np.asarray(obs[ours]))
            if key == "observation.image":
                value = value.permute(2, 0, 1).float() / 255.0
            batch[key] = value.float()[None]
        planning = self.queued_actions() == 0
        t0 = time.perf_counter()
        action = self.post(self.policy.select_action(self.pre(batch)))
        if planning:
            self.chunks.append(Chunk(self._step, (time.perf_counter() - t0) * 1e3))
        self._step += 1
        return np.asarray(action, dtype=np.float32).reshape(-1)
