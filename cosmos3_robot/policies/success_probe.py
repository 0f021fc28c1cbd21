"""Success in imagination: a linear probe on the world model's own VAE latents of one frame.

    probe = SuccessProbe.fit(world, "cosmos3_robot/Reach-v0", episodes=40, seed=30_000)
    probe.save("runs/reach/model/success_probe")
    probe.predict(world, frames)        # uint8 (N, H, W, 3) -> (N,) bool

Its training frames come from rollouts of the env's noisy scripted expert, each frame labelled by
the env's own `info["is_success"]` after the step that produced it. A recorded dataset cannot serve:
an episode ends on its successful step, so its last (successful) observation is never recorded. To
see more than one successful frame per episode, the expert keeps acting for `linger` steps after
success (it stays on the goal). Features: the normalised VAE latent of the frame alone (latent
frame 0), flattened; logistic regression with balanced classes. A quarter of the episodes are held
out for its accuracy; `agreement` measures it on fresh rollouts of other seeds.

The learned simulator (`cosmos3_robot/Learned-v0`) reads `success_probe/` beside the model's
weights: with it, an imagined frame it calls a success ends the episode with `is_success` True.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from cosmos3_robot.files import atomic_folder, read_json, read_tensors, write_checkpoint
from cosmos3_robot.policies.world_model import WorldModel

PROBE_DIR = "success_probe"


@torch.no_grad()
def frame_features(world: WorldModel, frames: np.ndarray, batch: int = 64) -> torch.Tensor:
    """uint8 (N, H, W, 3) -> (N, D): each frame's own latent, flattened."""
    out = []
    for i in range(0, len(frames), batch):
        x = torch.from_numpy(np.ascontiguousarray(frames[i : i + batch]))[:, None]  # (b, 1, H, W, 3)
        out.append(world.encode_frames(x)[:, :, 0].flatten(1))
    return torch.cat(out)


@dataclass
class SuccessProbe:
    weight: torch.Tensor  # (D,)
    bias: torch.Tensor  # ()
    mean: torch.Tensor  # (D,) feature standardisation
    std: torch.Tensor
    report: dict

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        return ((features - self.mean) / self.std) @ self.weight + self.bias

    def predict(self, world: WorldModel, frames: np.ndarray) -> np.ndarray:
        return (self.logits(frame_features(world, frames)) > 0).numpy()

    @classmethod
    def fit(
        cls, world: WorldModel, env_id: str, episodes: int = 40, seed: int = 30_000, steps: int = 500
    ) -> SuccessProbe:
        frames, labels, episode = rollout_frames(world, env_id, episodes, seed)
        x, y = frame_features(world, frames), torch.as_tensor(labels, dtype=torch.float32)
        held = episode >= episodes - max(1, episodes // 4)
        probe = cls._train(x[~held], y[~held], steps)
        probe.report = {
            "env": env_id, "episodes": episodes, "seed": seed, "frames": int(len(y)),
            "success_frames": int(y.sum()), "train_accuracy": probe._accuracy(x[~held], y[~held]),
            "heldout_accuracy": probe._accuracy(x[held], y[held]), "heldout_episodes": int(episodes // 4 or 1),
        }  # fmt: skip
        return probe

    @classmethod
    def _train(cls, x: torch.Tensor, y: torch.Tensor, steps: int) -> SuccessProbe:
        if y.sum() == 0 or y.sum() == len(y):
            raise ValueError("the training frames are all successes or all failures; record more episodes")
        mean, std = x.mean(0), x.std(0).clamp(min=1e-6)
        z = (x - mean) / std
        w = torch.zeros(z.shape[1], requires_grad=True)
        b = torch.zeros((), requires_grad=True)
        pos_weight = (len(y) - y.sum()) / y.sum()  # balanced classes
        opt = torch.optim.Adam([w, b], lr=0.05)
        for _ in range(steps):
            loss = torch.nn.functional.binary_cross_entropy_with_logits(z @ w + b, y, pos_weight=pos_weight)
            loss = loss + 1e-3 * w.square().sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return cls(w.detach(), b.detach(), mean, std, {})

    def _accuracy(self, x: torch.Tensor, y: torch.Tensor) -> dict:
        pred = (self.logits(x) > 0).float()
        pos = y > 0.5
        return {
            "accuracy": float((pred == y).float().mean()),
            "true_positive_rate": float(pred[pos].mean()) if pos.any() else None,
            "true_negative_rate": float(1 - pred[~pos].mean()) if (~pos).any() else None,
        }

    def save(self, folder: str | Path) -> Path:
        tensors = {"weight": self.weight, "bias": self.bias.reshape(1), "mean": self.mean, "std": self.std}
        with atomic_folder(folder) as tmp:
            write_checkpoint(tmp, {"probe.safetensors": tensors}, {"report.json": self.report})
        return Path(folder)

    @classmethod
    def load(cls, folder: str | Path) -> SuccessProbe:
        folder = Path(folder)
        t = read_tensors(folder / "probe.safetensors")
        return cls(t["weight"], t["bias"][0], t["mean"], t["std"], read_json(folder / "report.json"))


def rollout_frames(world: WorldModel, env_id: str, episodes: int, seed: int, linger: int = 5):
    """Frames after every step of noisy-expert rollouts (uint8 (N, H, W, 3)), the env's success of
    each (N,) and its episode index (N,); after a success the expert keeps acting `linger` steps."""
    from cosmos3_robot.envs import make_env, make_expert

    g = world.geometry
    env = make_env(env_id, image_size=g.image_size, control_hz=int(g.fps))
    frames, labels, episode = [], [], []
    try:
        for e in range(episodes):
            obs, _ = env.reset(seed=seed + e)
            expert = make_expert(env, noise=0.2, seed=seed + e)
            left, done = linger, False
            while not done and left > 0:
                obs, _, terminated, truncated, info = env.step(expert.act(obs))
                frames.append(obs["pixels"])
                labels.append(bool(info["is_success"]))
                episode.append(e)
                left -= labels[-1]
                done = truncated
    finally:
        env.close()
    return np.stack(frames), np.asarray(labels), np.asarray(episode)


def agreement(world: WorldModel, probe: SuccessProbe, env_id: str, episodes: int, seed: int) -> dict:
    """The probe against the real env's `is_success` on fresh noisy-expert rollouts: per frame, and
    per episode ("succeeded at some step")."""
    frames, truth, episode = rollout_frames(world, env_id, episodes, seed, linger=1)
    said = probe.predict(world, frames)
    per_episode = [said[episode == e].any() == truth[episode == e].any() for e in range(episodes)]
    return {"episodes": episodes, "seed": seed, "frame_agreement": float((said == truth).mean()),
            "episode_agreement": float(np.mean(per_episode)), "success_frames": int(truth.sum())}  # fmt: skip
