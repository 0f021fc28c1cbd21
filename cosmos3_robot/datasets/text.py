"""Text for the Reasoner: tokenizers, and questions/answers and captions from simulator state.

Tokenizers (saveable transforms that travel with a checkpoint, STYLE.md):

    ByteTokenizer   from-scratch models: 0 = null/pad, 1 = BOS, 2 = EOS, 3 + byte for UTF-8 bytes,
                    then the vision specials <vision_start> <image> <vision_end> <video>; 263 ids,
                    within the `tiny` / `sim-small` vocab (300)
    HFTokenizer     a local Hugging Face tokenizer folder (e.g. Qwen3-VL's); never downloads

    tok = load_tokenizer(None)                       # ByteTokenizer
    ids, lengths = tok.batch_encode(["push", "reach the red target"])   # (B, L) right-padded, (B,)

Questions from simulator state. Our envs record `observation.environment_state` as named 2-D
points (`goal_x, goal_y, fingertip_x, ...`, see envs/reach.py and envs/push.py), in metres on the
table plane seen from the top camera: +x is right and +y is up in the image. From those points:

    relative  "where is the target relative to the fingertip?" -> "up and to the left, 0.12 m"
    distance  "how far is the puck from the goal?"             -> "0.07 m"
    caption   "what is the task?"                              -> the episode's instruction

Directions are the 8 compass sectors of the offset (each 45° wide, centred on right, up-right, up,
...); distances are Euclidean, rounded to centimetres. A sample's question is a pure function of
(seed, episode, frame), so a dataset's text never changes between runs or epochs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from cosmos3_robot.model.multimodal import VisionTokenIds

# ------------------------------------------------------------------------------------------------
# Tokenizers
# ------------------------------------------------------------------------------------------------


class Tokenizer(Protocol):
    name: str
    vocab_size: int
    pad_id: int
    bos_id: int | None
    eos_id: int | None
    vision_ids: VisionTokenIds

    def encode(self, text: str, bos: bool = True, eos: bool = False) -> list[int]: ...

    def decode(self, ids: list[int] | Tensor) -> str: ...

    def state(self) -> dict[str, Any]: ...


def batch_encode(
    tok: Tokenizer, texts: list[str], bos: bool = True, eos: bool = False
) -> tuple[Tensor, Tensor]:
    """Encode and right-pad with `tok.pad_id`: ids (B, L) long, lengths (B,) long."""
    return pad_right([tok.encode(t, bos=bos, eos=eos) for t in texts], tok.pad_id)


def pad_right(seqs: list[list[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    if not seqs:
        raise ValueError("nothing to pad: empty list of sequences")
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    ids = torch.full((len(seqs), max(1, int(lengths.max()))), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return ids, lengths


class ByteTokenizer:
    """UTF-8 bytes as tokens; exact round trip for any text, nothing to train or download."""

    PAD, BOS, EOS, OFFSET = 0, 1, 2, 3
    name = "byte"

    def __init__(self) -> None:
        first = self.OFFSET + 256
        self.vision_ids = VisionTokenIds(
            vision_start_token_id=first,
            image_token_id=first + 1,
            vision_end_token_id=first + 2,
            video_token_id=first + 3,
        )
        self.vocab_size = first + 4
        self.pad_id, self.bos_id, self.eos_id = self.PAD, self.BOS, self.EOS

    def encode(self, text: str, bos: bool = True, eos: bool = False) -> list[int]:
        ids = [b + self.OFFSET for b in text.encode("utf-8")]
        return ([self.BOS] if bos else []) + ids + ([self.EOS] if eos else [])

    def decode(self, ids: list[int] | Tensor) -> str:
        """Bytes back to text; specials (pad, BOS, EOS, vision) are dropped."""
        ids = ids.tolist() if isinstance(ids, Tensor) else ids
        data = bytes(i - self.OFFSET for i in ids if self.OFFSET <= i < self.OFFSET + 256)
        return data.decode("utf-8", errors="replace")

    def batch_encode(self, texts: list[str], bos: bool = True, eos: bool = False) -> tuple[Tensor, Tensor]:
        return batch_encode(self, texts, bos, eos)

    def state(self) -> dict[str, Any]:
        return {"type": "byte", "vocab_size": self.vocab_size}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        if path.suffix != ".json":
            path.mkdir(parents=True, exist_ok=True)
            path = path / "tokenizer.json"
        path.write_text(json.dumps(self.state(), indent=2))
        return path


# Qwen3-VL's names for the vision specials.
_HF_VISION_TOKENS = {
    "vision_start_token_id": "<|vision_start|>",
    "image_token_id": "<|image_pad|>",
    "vision_end_token_id": "<|vision_end|>",
    "video_token_id": "<|video_pad|>",
}


class HFTokenizer:
    """A Hugging Face tokenizer folder on disk (tokenizer.json / tokenizer_config.json)."""

    def __init__(self, path: str | Path) -> None:
        from transformers import AutoTokenizer

        self.path = Path(path)
        if not self.path.is_dir():
            raise FileNotFoundError(f"tokenizer folder {self.path} does not exist")
        self.tok = AutoTokenizer.from_pretrained(str(self.path), local_files_only=True)
        self.name = f"hf:{self.path}"
        self.vocab_size = len(self.tok)
        self.bos_id = self.tok.bos_token_id
        self.eos_id = self.tok.eos_token_id
        self.pad_id = self.tok.pad_token_id if self.tok.pad_token_id is not None else (self.eos_id or 0)
        ids = {}
        for field_name, token in _HF_VISION_TOKENS.items():
            tid = self.tok.convert_tokens_to_ids(token)
            ids[field_name] = -1 if tid is None or tid == self.tok.unk_token_id else int(tid)
        self.vision_ids = VisionTokenIds(**ids)

    def encode(self, text: str, bos: bool = True, eos: bool = False) -> list[int]:
        ids = list(self.tok.encode(text, add_special_tokens=False))
        if bos and self.bos_id is not None:
            ids = [self.bos_id] + ids
        if eos and self.eos_id is not None:
            ids = ids + [self.eos_id]
        return ids

    def decode(self, ids: list[int] | Tensor) -> str:
        ids = ids.tolist() if isinstance(ids, Tensor) else ids
        return self.tok.decode(ids, skip_special_tokens=True)

    def batch_encode(self, texts: list[str], bos: bool = True, eos: bool = False) -> tuple[Tensor, Tensor]:
        return batch_encode(self, texts, bos, eos)

    def state(self) -> dict[str, Any]:
        return {"type": "hf", "path": str(self.path), "vocab_size": self.vocab_size}


def load_tokenizer(source: str | Path | dict | None = None) -> ByteTokenizer | HFTokenizer:
    """None or "byte" -> ByteTokenizer; a saved state dict / tokenizer json of ours; else a local HF folder."""
    if source is None or source == "byte":
        return ByteTokenizer()
    if isinstance(source, dict):
        kind = source.get("type")
        if kind == "byte":
            return ByteTokenizer()
        if kind == "hf":
            return HFTokenizer(source["path"])
        raise ValueError(f"unknown tokenizer state {source!r}; expected type 'byte' or 'hf'")
    path = Path(source)
    ours = path if path.suffix == ".json" else path / "tokenizer.json"
    if ours.is_file():
        try:
            state = json.loads(ours.read_text())
        except json.JSONDecodeError:
            state = None
        if isinstance(state, dict) and state.get("type") == "byte":
            return ByteTokenizer()
    if path.is_dir():
        return HFTokenizer(path)
    raise FileNotFoundError(
        f"tokenizer {path}: not a saved byte tokenizer nor a local Hugging Face tokenizer folder"
    )


# ------------------------------------------------------------------------------------------------
# Questions and answers from simulator state
# ------------------------------------------------------------------------------------------------

# How the env-state point names read in English.
DISPLAY_NAMES = {
    "goal": "target",
    "fingertip": "fingertip",
    "distractor": "distractor",
    "puck": "puck",
    "pusher": "pusher",
}
# Sector k covers angles (k·45° ± 22.5°), counter-clockwise from +x (right); +y is up in the image.
DIRECTIONS = (
    "to the right",
    "up and to the right",
    "up",
    "up and to the left",
    "to the left",
    "down and to the left",
    "down",
    "down and to the right",
)
SAME_PLACE_M = 0.005  # closer than this: "at the same place"
QA_KINDS = ("relative", "distance", "caption")


@dataclass(frozen=True)
class QA:
    question: str
    answer: str
    kind: str

    def prompt(self) -> str:
        """The text before the answer; the model is trained on the answer only."""
        return f"Q: {self.question} A: "


def scene_points(names: list[str], values: np.ndarray | Tensor) -> dict[str, np.ndarray]:
    """Named 2-D points from env-state feature names `<point>_x, <point>_y` and one row of values."""
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if len(names) != len(values):
        raise ValueError(f"environment_state has {len(values)} values but {len(names)} names {names}")
    index = {n: i for i, n in enumerate(names)}
    points = {}
    for n in names:
        if n.endswith("_x") and n[:-2] + "_y" in index:
            p = n[:-2]
            points[p] = np.array([values[index[n]], values[index[p + "_y"]]])
    return points


def direction(offset: np.ndarray) -> str:
    """Compass word of a 2-D offset (x right, y up)."""
    angle = math.degrees(math.atan2(float(offset[1]), float(offset[0])))
    return DIRECTIONS[int(round(angle / 45.0)) % 8]


def relative_answer(a: np.ndarray, b: np.ndarray) -> str:
    """Where a is, seen from b: "up and to the left, 0.12 m"."""
    offset = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    dist = float(np.hypot(*offset))
    if dist < SAME_PLACE_M:
        return f"at the same place, {dist:.2f} m"
    return f"{direction(offset)}, {dist:.2f} m"


def display(point: str) -> str:
    return DISPLAY_NAMES.get(point, point.replace("_", " "))


def qa_rng(seed: int, episode: int, frame: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), int(episode), int(frame)])


def make_qa(
    names: list[str],
    env_state: np.ndarray | Tensor,
    task: str,
    *,
    seed: int,
    episode: int,
    frame: int,
    kinds: tuple[str, ...] = QA_KINDS,
) -> QA:
    """One question about the scene, chosen by (seed, episode, frame); the answer is exact geometry."""
    bad = [k for k in kinds if k not in QA_KINDS]
    if bad or not kinds:
        raise ValueError(f"question kinds {list(kinds)}: choose a non-empty subset of {QA_KINDS}")
    rng = qa_rng(seed, episode, frame)
    points = scene_points(names, env_state)
    usable = [k for k in kinds if k == "caption" or len(points) >= 2]
    if not usable:
        raise ValueError(f"environment_state names {names} hold fewer than two <name>_x/<name>_y points")
    kind = usable[int(rng.integers(len(usable)))]
    if kind == "caption":
        return QA("what is the task?", task.strip() or "nothing", kind)
    keys = sorted(points)
    i, j = rng.choice(len(keys), size=2, replace=False)
    a, b = keys[int(i)], keys[int(j)]
    if kind == "relative":
        return QA(
            f"where is the {display(a)} relative to the {display(b)}?",
            relative_answer(points[a], points[b]),
            kind,
        )
    dist = float(np.hypot(*(points[a] - points[b])))
    return QA(f"how far is the {display(a)} from the {display(b)}?", f"{dist:.2f} m", kind)


def caption(task: str) -> QA:
    """A caption sample: the instruction as the description of the episode."""
    return QA("what is the robot doing?", task.strip() or "nothing", "caption")
