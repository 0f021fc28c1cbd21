"""Tokenizers: saveable transforms that travel with a checkpoint (STYLE.md), and the vision
special token ids a VLM's tokenizer defines.

    ByteTokenizer   from-scratch models: 0 = null/pad, 1 = BOS, 2 = EOS, 3 + byte for UTF-8 bytes,
                    then the vision specials <vision_start> <image> <vision_end> <video>; 263 ids,
                    within the `tiny` / `sim-small` vocab (300)
    HFTokenizer     a local Hugging Face tokenizer folder (e.g. Qwen3-VL's); never downloads

    tok = load_tokenizer(None)                       # ByteTokenizer
    ids, lengths = tok.batch_encode(["push", "reach the red target"])   # (B, L) right-padded, (B,)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor


@dataclass(frozen=True)
class VisionTokenIds:
    """Special token ids of a VLM's tokenizer (Qwen3-VL defaults)."""

    image_token_id: int = 151655
    video_token_id: int = 151656
    vision_start_token_id: int = 151652
    vision_end_token_id: int = 151653


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
