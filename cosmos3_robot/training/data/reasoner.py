"""Reasoner-stage data: questions about the scene at one frame (from the recorded simulator state)
and captions, answered in text; with a ViT the frame is shown first as Qwen3-VL image placeholders,
then the episode's instruction (which names the target), then the question: the prefix
`<frame> <instruction>` is what a Generator clip with `reasoner_frame` shows the Reasoner.
Labels are next-token targets on the answer only. See `training/data/__init__.py` for the generator stage.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from cosmos3_robot.datasets import ClipDataset, ClipSpec
from cosmos3_robot.datasets.text import make_qa
from cosmos3_robot.encoders.vision_inputs import image_text_ids, vit_image_size
from cosmos3_robot.model.config import ModelConfig
from cosmos3_robot.processors.data_state import DataState
from cosmos3_robot.processors.tokenizers import load_tokenizer, pad_right
from cosmos3_robot.training.data.batches import IGNORE, TextBatch
from cosmos3_robot.training.data.common import (
    check_vocab,
    chunks,
    clip_dataset,
    dataset_meta,
    plan_loader,
    require_feature,
    split_dataset,
    val_indices,
)
from cosmos3_robot.training.data.config import TEXT_STYLES, DataConfig


def first_frame(ds: ClipDataset, row: int) -> Tensor:
    """The frame (3, H, W) of a 1-frame ClipDataset's row (LeRobot drops a length-1 time axis)."""
    video = ds[row]["video"]
    return video[0] if video.ndim == 4 else video


class _FirstFrames(Dataset):
    """Only the anchor frame of each row (no actions), for the ViT."""

    def __init__(self, ds: ClipDataset) -> None:
        self.ds = ds

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"frame": first_frame(self.ds, i)}


class ReasonerData:
    """TextBatches of questions about the scene (from the recorded simulator state) and captions."""

    def __init__(self, cfg: DataConfig, model_cfg: ModelConfig, vit=None) -> None:
        self.cfg, self.model_cfg, self.vit = cfg, model_cfg, vit
        self.tokenizer = load_tokenizer(cfg.tokenizer)
        check_vocab(self.tokenizer, model_cfg)
        meta, self.name = dataset_meta(cfg)
        self.kinds = TEXT_STYLES[cfg.text]
        if self.kinds != ("caption",):
            require_feature(
                meta, self.name, cfg.env_state_key, "reasoner QA",
                "record with cosmos3-robot record, or use DataConfig(text='caption')",
            )  # fmt: skip
            feature = meta.features[cfg.env_state_key]
            self.state_names = list(feature.get("names") or [])
            if isinstance(feature.get("names"), dict):  # LeRobot's {"axes": [...]} form
                self.state_names = list(next(iter(feature["names"].values())))
        else:
            self.state_names = []
        if vit is not None:
            require_feature(
                meta, self.name, cfg.image_key, "reasoner training with images", "set DataConfig.image_key"
            )
            vc = vit.config
            if vc.out_hidden_size != model_cfg.reasoner.hidden_size:
                raise ValueError(
                    f"ViT out_hidden_size={vc.out_hidden_size} != Reasoner hidden_size={model_cfg.reasoner.hidden_size}"
                )
            if min(dataclasses.astuple(self.tokenizer.vision_ids)) < 0:
                raise ValueError(f"tokenizer {self.tokenizer.name} has no vision tokens (<|image_pad|> ...)")
            size = cfg.vit_image_size or cfg.image_size or int(meta.features[cfg.image_key]["shape"][0])
            self.vit_size = vit_image_size(vc, size)
        self.split = split_dataset(cfg, meta, self.name)
        spec = ClipSpec(num_frames=1, num_actions=0)
        self.ds = clip_dataset(cfg, spec, None)
        rows = self._rows(self.ds)
        self.train_rows = [r for r in rows if r["episode"] in set(self.split.train)]
        self.val_rows = [r for r in rows if r["episode"] in set(self.split.val)]
        self._val: list[TextBatch] | None = None

    def _rows(self, ds: ClipDataset) -> list[dict[str, Any]]:
        """Per usable row: episode, frame, task and environment state, read from the table (no decoding)."""
        table = ds.lerobot.hf_dataset.data
        tasks = {int(row.task_index): str(name) for name, row in ds.lerobot.meta.tasks.iterrows()}
        task_index = table.column("task_index").to_numpy()
        env = None
        if self.state_names:
            col = table.column(self.cfg.env_state_key).combine_chunks()
            env = np.asarray(col.flatten().to_numpy(zero_copy_only=False), dtype=np.float64).reshape(
                len(col), -1
            )
        rows = []
        for i in range(len(table)):
            if ds.row_frame[i] % self.cfg.clip_stride:
                continue
            rows.append(
                {
                    "row": i,
                    "episode": int(ds.row_episode[i]),
                    "frame": int(ds.row_frame[i]),
                    "task": tasks[int(task_index[i])],
                    "env": None if env is None else env[i],
                }
            )
        return rows

    def qa(self, row: dict[str, Any]):
        return make_qa(
            self.state_names, row["env"] if row["env"] is not None else np.zeros(0), row["task"],
            seed=self.cfg.seed, episode=row["episode"], frame=row["frame"], kinds=self.kinds,
        )  # fmt: skip

    def text_batch(
        self, rows: list[dict[str, Any]], frames: list[Tensor] | None = None, answers: bool = True
    ) -> TextBatch:
        """The rows' questions (after their frames, when given) and answers; `answers=False`: the
        prompts alone, for generating the answers."""
        tok = self.tokenizer
        seqs, starts, pixels, grids = [], [], [], []
        for n, row in enumerate(rows):
            qa = self.qa(row)
            if frames is not None:  # the frame, the instruction (which names the target), the question
                text = f"{row['task']} {qa.prompt()}"
                prompt, px, grid = image_text_ids(tok, text, frames[n], self.vit.config, self.vit_size)
                pixels.append(px)
                grids.append(grid)
            else:
                prompt = tok.encode(qa.prompt(), bos=True)
            seqs.append(prompt + (tok.encode(qa.answer, bos=False, eos=True) if answers else []))
            starts.append(len(prompt))
        ids, lengths = pad_right(seqs, tok.pad_id)
        labels = torch.full_like(ids, IGNORE)
        for b, (p, n) in enumerate(zip(starts, lengths.tolist(), strict=True)):
            labels[b, p - 1 : n - 1] = ids[b, p:n]  # logits at t predict the answer token at t + 1
        kwargs: dict[str, Any] = {}
        if frames is not None:
            kwargs = {
                "pixel_values": torch.cat(pixels),
                "image_grid_thw": torch.cat(grids),
                "vision_token_ids": tok.vision_ids,
            }
        return TextBatch(input_ids=ids, lengths=lengths, labels=labels, reason_kwargs=kwargs)

    def _batches(self, rows: list[dict[str, Any]], plan: list[list[int]]) -> Iterator[TextBatch]:
        if self.vit is None:
            for b in plan:
                yield self.text_batch([rows[i] for i in b])
            return
        loader = plan_loader(
            _FirstFrames(self.ds), [[rows[i]["row"] for i in b] for b in plan], self.cfg.num_workers
        )
        for b, samples in zip(plan, loader, strict=True):
            yield self.text_batch([rows[i] for i in b], [s["frame"] for s in samples])

    def train_batches(self, epoch: int, start: int = 0) -> Iterator[TextBatch]:
        rng = np.random.default_rng([self.cfg.seed, epoch])
        plan = chunks(rng.permutation(len(self.train_rows)), self.cfg.batch_size)[start:]
        return self._batches(self.train_rows, plan)

    def val_batches(self) -> list[TextBatch]:
        if self._val is None:
            plan = val_indices(len(self.val_rows), self.cfg.batch_size, self.cfg.max_val_batches)
            self._val = list(self._batches(self.val_rows, plan)) if plan else []
        return self._val

    def state(self) -> DataState:
        return DataState(
            stage="reasoner",
            tokenizer=self.tokenizer.state(),
            details={
                "data_config": asdict(self.cfg),
                "dataset": {"name": self.name},
                "split": {"train": self.split.train, "val": self.split.val, "seed": self.split.seed},
                "text": {
                    "style": self.cfg.text,
                    "kinds": list(self.kinds),
                    "env_state_names": self.state_names,
                },
                "vit_image_size": getattr(self, "vit_size", None),
            },
        )
