"""Inverse dynamics over whole episodes: overlapping windows, several samples, one label per frame.

    labeller = EpisodeLabeller(world, stride=2, samples=2, batch=16)
    labels = labeller.label([frames_ep0, frames_ep1], ["push the puck ...", "..."])
    labels[0].actions        # (T, A) in env units, one per frame
    labels[0].confidence     # (T,) in (0, 1]

A window is one training clip: `num_frames` frames `frame_step` apart, whose `num_actions` actions
(one every `action_step` frames from the window's first frame) the model samples. Only the actions
the window's frames show are labels (`ClipGeometry.visible_actions`: an action shows in the frames
after it); a model trained on 1 s chunks of a 0.4 s clip also samples the later ones, which no frame
of the window supports. Windows start every `stride` frames; the last one is placed so that the
episode's last frame gets a label (frames past the end are the last frame repeated). Each frame's
label is the mean over every window and sample that predicts it (temporal ensembling with equal
weights); frames between action samples hold the previous one. Windows of all episodes are batched together.

Confidence: 1 / (1 + s), s = the spread (std) of those predictions in units of the action's
dataset std, averaged over dimensions: 1 when all windows and samples agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from cosmos3_robot.policies.runners import SamplingConfig, sample_mode
from cosmos3_robot.policies.world_model import WorldModel


@dataclass
class EpisodeLabels:
    actions: np.ndarray  # (T, A)
    confidence: np.ndarray  # (T,)
    spread: np.ndarray  # (T, A): std of the predictions, env units


class EpisodeLabeller:
    def __init__(self, world: WorldModel, stride: int | None = None, samples: int = 2, batch: int = 16,
                 sampling: SamplingConfig | None = None):  # fmt: skip
        if world.actions is None:
            raise ValueError("this model was trained without actions: it cannot label video")
        g = world.geometry
        self.world, self.g = world, g
        self.span = (g.num_frames - 1) * g.frame_step + 1  # dataset frames one window covers
        # Only the actions a window's frames show are labels (ClipGeometry.visible_actions).
        self.seen = g.visible_actions
        if self.seen < 1:
            raise ValueError(
                f"the model's clips ({g.num_frames} frames) show none of its actions; it cannot label"
            )
        self.stride = stride or max(1, self.seen * g.action_step // 2)
        if self.stride > self.seen * g.action_step:
            raise ValueError(
                f"stride {self.stride} skips frames: a window labels {self.seen * g.action_step} frames "
                f"(the actions its {g.num_frames} frames show); use a stride <= {self.seen * g.action_step}"
            )
        if self.stride < 1 or samples < 1 or batch < 1:
            raise ValueError(f"stride, samples and batch must be >= 1, got {self.stride}, {samples}, {batch}")
        self.samples, self.batch = samples, batch
        self.sampling = sampling or SamplingConfig()
        stats = world.actions.normalizer.stats[world.actions.key]
        self.action_std = np.maximum(np.asarray(stats.std, dtype=np.float64), 1e-6)

    def starts(self, length: int) -> list[int]:
        """Window starts of an episode of `length` frames; the last window's last label lands on the
        last frame (or later, for episodes shorter than one window's labels)."""
        reach = (self.seen - 1) * self.g.action_step  # first..last label of a window
        last = max(0, length - 1 - reach)
        out = list(range(0, last + 1, self.stride))
        if out[-1] != last:
            out.append(last)
        return out

    def _window(self, frames: np.ndarray, s: int) -> np.ndarray:
        idx = np.minimum(s + np.arange(self.g.num_frames) * self.g.frame_step, len(frames) - 1)
        return frames[idx]

    @torch.no_grad()
    def _predict(self, windows: list[np.ndarray], tasks: list[str]) -> np.ndarray:
        """(K, B, Na, A) actions for B windows, K samples each (batched)."""
        frames = torch.from_numpy(np.stack(windows))
        latents = self.world.encode_frames(frames)
        batch = self.world.clip_batch(tasks, latents, obs_frames=latents.shape[2], frames=frames[:, 0])
        out = []
        for k in range(self.samples):
            gen = torch.Generator().manual_seed(self.sampling.seed * 1000 + k)
            acts = sample_mode(self.world, "inverse_dynamics", batch, self.sampling, generator=gen)["action"]
            out.append(self.world.raw_actions(acts))
        return np.stack(out)

    def label(self, episodes: list[np.ndarray], tasks: list[str]) -> list[EpisodeLabels]:
        """Labels of whole episodes (uint8 (T, H, W, 3) each), windows batched across episodes."""
        if len(episodes) != len(tasks):
            raise ValueError(f"{len(episodes)} episodes but {len(tasks)} task texts")
        jobs = [(e, s) for e, f in enumerate(episodes) for s in self.starts(len(f))]
        dim = self.world.actions.dim
        sums = [np.zeros((len(f), dim)) for f in episodes]
        sq = [np.zeros((len(f), dim)) for f in episodes]
        count = [np.zeros(len(f)) for f in episodes]
        for i in range(0, len(jobs), self.batch):
            part = jobs[i : i + self.batch]
            pred = self._predict([self._window(episodes[e], s) for e, s in part], [tasks[e] for e, _ in part])
            for b, (e, s) in enumerate(part):
                for j in range(self.seen):
                    t = s + j * self.g.action_step
                    if t < len(episodes[e]):
                        sums[e][t] += pred[:, b, j].sum(0)
                        sq[e][t] += (pred[:, b, j] ** 2).sum(0)
                        count[e][t] += self.samples
        return [self._finish(sums[e], sq[e], count[e]) for e in range(len(episodes))]

    def _finish(self, total: np.ndarray, sq: np.ndarray, n: np.ndarray) -> EpisodeLabels:
        have = n > 0
        mean = np.zeros_like(total)
        var = np.zeros_like(total)
        mean[have] = total[have] / n[have, None]
        var[have] = np.maximum(sq[have] / n[have, None] - mean[have] ** 2, 0.0)
        for t in range(len(n)):  # frames between action samples hold the previous label
            if not have[t] and t > 0:
                mean[t], var[t] = mean[t - 1], var[t - 1]
        spread = np.sqrt(var)
        confidence = 1.0 / (1.0 + (spread / self.action_std).mean(-1))
        return EpisodeLabels(
            mean.astype(np.float32), confidence.astype(np.float32), spread.astype(np.float32)
        )
