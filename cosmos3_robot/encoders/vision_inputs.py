"""Reasoner inputs from text + images/videos: ViT tokens spliced into the text embeddings, 3-D mRoPE
positions and DeepStack tensors — exactly what Qwen3-VL feeds its language model.

Axis glossary:  B batch · L prompt tokens · C Reasoner width · M merged ViT tokens · m merge size

A prompt holds placeholder tokens where visual tokens go, one per merged ViT token:

    text ... <vision_start> <image> × (h/m · w/m) <vision_end> ... text

Video follows Qwen3-VL: every temporal patch ("frame") is its own group, preceded by its timestamp
written as text, e.g. `<0.5 seconds><vision_start><video> × (h/m · w/m)<vision_end>`.

Positions (t, h, w), as in Qwen3-VL's `get_rope_index`:
  - a run of text tokens continues a counter p: (p, p, p), (p+1, p+1, p+1), ...
  - a visual group with grid (t, h/m, w/m) starting at counter p gets (p + k, p + row, p + col)
    for frame k (always 0 for a video group: its frames are split), then p += max(h/m, w/m).
So the text after an image continues from its largest spatial extent, not from its token count;
the position after the prompt (`next_position`) is therefore smaller than its length, and decoding
continues from there (`MoT.reason` computes it from these positions).

DeepStack: for each DeepStack level j, a (B, L, C) tensor that holds the ViT's level-j features at
visual positions and zeros elsewhere; `MoT.reason` adds level j after Reasoner layer j.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from cosmos3_robot.encoders.vit import ViT
from cosmos3_robot.model.mot import MoT
from cosmos3_robot.processors.tokenizers import VisionTokenIds

TEXT, IMAGE, VIDEO = 0, 1, 2  # token types (Qwen3-VL's mm_token_type_ids)


@dataclass
class ReasonerInputs:
    """Everything `MoT.reason` needs for a multimodal prompt."""

    inputs_embeds: Tensor  # (B, L, C)
    positions: Tensor  # (B, 3, L) float
    deepstack: list[Tensor] | None  # per level, (B, L, C); zeros at non-visual positions
    lengths: Tensor | None  # (B,) real lengths of right-padded prompts; None = no padding

    def reason_kwargs(self) -> dict[str, Any]:
        return dict(
            inputs_embeds=self.inputs_embeds,
            positions=self.positions,
            deepstack=self.deepstack,
            lengths=self.lengths,
        )


def token_types(input_ids: Tensor, ids: VisionTokenIds) -> Tensor:
    """(B, L) long: IMAGE at image placeholders, VIDEO at video placeholders, TEXT elsewhere."""
    types = torch.zeros_like(input_ids)
    types[input_ids == ids.image_token_id] = IMAGE
    types[input_ids == ids.video_token_id] = VIDEO
    return types


def _runs(types: list[int]) -> list[tuple[int, int, int]]:
    """Maximal runs of equal values: (value, start, end)."""
    runs, start = [], 0
    for i in range(1, len(types) + 1):
        if i == len(types) or types[i] != types[start]:
            runs.append((types[start], start, i))
            start = i
    return runs


def _frame_grids(grid_thw: Tensor | None, split_time: bool) -> list[tuple[int, int, int]]:
    if grid_thw is None:
        return []
    if grid_thw.ndim != 2 or grid_thw.shape[1] != 3:
        raise ValueError(f"grid_thw must have shape (n, 3), got {tuple(grid_thw.shape)}")
    grids = [tuple(int(v) for v in row) for row in grid_thw.tolist()]
    if split_time:  # Qwen3-VL: each temporal patch of a video is its own group (timestamps separate them)
        grids = [(1, h, w) for t, h, w in grids for _ in range(t)]
    return grids


def mrope_positions(
    types: Tensor,
    image_grid_thw: Tensor | None = None,
    video_grid_thw: Tensor | None = None,
    spatial_merge_size: int = 2,
    lengths: Tensor | None = None,
) -> Tensor:
    """Qwen3-VL 3-D positions for right-padded prompts. types (B, L) from `token_types`; grids in
    patches (n, 3), in the order their placeholders appear (batch-major). Returns (B, 3, L) float;
    padding positions continue the text counter (they are never attended to)."""
    b, n = types.shape
    m = spatial_merge_size
    grids: dict[int, Iterator[tuple[int, int, int]]] = {
        IMAGE: iter(_frame_grids(image_grid_thw, split_time=False)),
        VIDEO: iter(_frame_grids(video_grid_thw, split_time=True)),
    }
    out = torch.zeros(b, 3, n, dtype=torch.float64)
    for i in range(b):
        length = n if lengths is None else int(lengths[i])
        pos, cols = 0, []
        for kind, start, end in _runs(types[i, :length].tolist()):
            if kind == TEXT:
                cols.append(torch.arange(end - start, dtype=torch.float64).expand(3, -1) + pos)
                pos += end - start
                continue
            name, covered = ("image" if kind == IMAGE else "video"), 0
            while covered < end - start:  # a run may hold several groups back to back
                grid = next(grids[kind], None)
                if grid is None:
                    raise ValueError(
                        f"sample {i}: more {name} placeholder tokens than {name}_grid_thw describes "
                        f"(run at tokens [{start}, {end}))"
                    )
                t, h, w = grid[0], grid[1] // m, grid[2] // m
                tt = torch.arange(t, dtype=torch.float64).view(t, 1, 1).expand(t, h, w)
                hh = torch.arange(h, dtype=torch.float64).view(1, h, 1).expand(t, h, w)
                ww = torch.arange(w, dtype=torch.float64).view(1, 1, w).expand(t, h, w)
                cols.append(torch.stack([tt, hh, ww]).reshape(3, -1) + pos)
                pos += max(h, w)
                covered += t * h * w
            if covered != end - start:
                raise ValueError(
                    f"sample {i}: {end - start} {name} placeholder tokens at [{start}, {end}) do not match "
                    f"whole {name} grids ({covered} tokens); check {name}_grid_thw and spatial_merge_size={m}"
                )
        cols.append(torch.arange(n - length, dtype=torch.float64).expand(3, -1) + pos)
        out[i] = torch.cat(cols, dim=1)
    for kind, name in ((IMAGE, "image"), (VIDEO, "video")):
        if next(grids[kind], None) is not None:
            raise ValueError(f"{name}_grid_thw describes more {name}s than the prompt has placeholders for")
    return out.float()


def _splice(
    x: Tensor, mask: Tensor, vit: ViT, pixels: Tensor, grid_thw: Tensor, name: str
) -> tuple[Tensor, list[Tensor]]:
    """Run the ViT and write its tokens into x at mask (in order). Returns (x, deepstack features)."""
    out = vit(pixels, grid_thw)
    need = int(mask.sum())
    if out.tokens.shape[0] != need:
        raise ValueError(
            f"the prompt has {need} {name} placeholder tokens but {name}_grid_thw gives {out.tokens.shape[0]} "
            f"ViT tokens ({grid_thw.tolist()}, merge {vit.config.spatial_merge_size})"
        )
    x = x.clone()
    x[mask] = out.tokens.to(x.dtype)
    return x, out.deepstack


def build_reasoner_inputs(
    model: MoT,
    vit: ViT | None,
    input_ids: Tensor,
    token_ids: VisionTokenIds,
    *,
    lengths: Tensor | None = None,
    pixel_values: Tensor | None = None,
    image_grid_thw: Tensor | None = None,
    pixel_values_videos: Tensor | None = None,
    video_grid_thw: Tensor | None = None,
    mm_token_type_ids: Tensor | None = None,
) -> ReasonerInputs:
    """Text + images/videos -> Reasoner inputs. input_ids (B, L) right-padded (`lengths`), with one
    placeholder token per merged ViT token; pixel_values / pixel_values_videos and their grids as
    Qwen's processors produce them (or `vit.patchify`). mm_token_type_ids, if given (processor
    output), must agree with the placeholders."""
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids must have shape (B, L), got {tuple(input_ids.shape)}")
    b, n = input_ids.shape
    valid = torch.ones(b, n, dtype=torch.bool, device=input_ids.device)
    if lengths is not None:
        valid = torch.arange(n, device=input_ids.device)[None] < lengths.to(input_ids.device)[:, None]
    types = token_types(input_ids, token_ids) * valid
    if mm_token_type_ids is not None and not torch.equal(mm_token_type_ids.to(types) * valid, types):
        raise ValueError("mm_token_type_ids disagree with the image/video placeholder tokens in input_ids")
    x = model.embed_tokens(input_ids)
    features: list[tuple[Tensor, list[Tensor]]] = []
    for kind, name, pixels, grid in (
        (IMAGE, "image", pixel_values, image_grid_thw),
        (VIDEO, "video", pixel_values_videos, video_grid_thw),
    ):
        mask = types == kind
        if pixels is None:
            if grid is not None or bool(mask.any()):
                raise ValueError(
                    f"the prompt has {name} placeholders or {name}_grid_thw but no pixels for them"
                )
            continue
        if vit is None:
            raise ValueError(f"{name} pixels given but no ViT")
        if grid is None:
            raise ValueError(f"{name} pixels given without {name}_grid_thw")
        x, ds = _splice(x, mask, vit, pixels, grid, name)
        features.append((mask, ds))
    deepstack = None
    if features and features[0][1]:
        deepstack = []
        for level in range(len(features[0][1])):
            d = torch.zeros_like(x)
            for mask, ds in features:
                d[mask] = ds[level].to(d.dtype)
            deepstack.append(d)
    merge = vit.config.spatial_merge_size if vit is not None else 2
    positions = mrope_positions(types.cpu(), image_grid_thw, video_grid_thw, merge, lengths).to(x.device)
    return ReasonerInputs(inputs_embeds=x, positions=positions, deepstack=deepstack, lengths=lengths)


def image_placeholder(grid_thw: tuple[int, int, int], token_ids: VisionTokenIds, merge: int = 2) -> list[int]:
    """Token ids for one image: <vision_start> <image> × tokens <vision_end>."""
    t, h, w = grid_thw
    return (
        [token_ids.vision_start_token_id]
        + [token_ids.image_token_id] * (t * h * w // merge**2)
        + [token_ids.vision_end_token_id]
    )


def video_placeholder(
    grid_thw: tuple[int, int, int],
    token_ids: VisionTokenIds,
    merge: int = 2,
    frame_prefixes: list[list[int]] | None = None,
) -> list[int]:
    """Token ids for one video: per temporal patch, its prefix (the tokenised timestamp, e.g.
    "<0.5 seconds>") then <vision_start> <video> × tokens <vision_end>."""
    t, h, w = grid_thw
    if frame_prefixes is not None and len(frame_prefixes) != t:
        raise ValueError(f"need one prefix per temporal patch ({t}), got {len(frame_prefixes)}")
    ids: list[int] = []
    for k in range(t):
        ids += frame_prefixes[k] if frame_prefixes is not None else []
        ids += [token_ids.vision_start_token_id] + [token_ids.video_token_id] * (h * w // merge**2)
        ids += [token_ids.vision_end_token_id]
    return ids


# ------------------------------------------------------------------------------------------------
# A frame shown to the Reasoner before the instruction (Reasoner QA, Generator clips, policy plans)
# ------------------------------------------------------------------------------------------------


def vit_image_size(vit_cfg, size: int) -> int:
    """The square side a frame of `size` px is resized to for the ViT: a multiple of patch · merge."""
    unit = vit_cfg.patch_size * vit_cfg.spatial_merge_size
    return max(unit, size // unit * unit)


def frame_patches(frame: Tensor, vit_cfg, size: int) -> tuple[Tensor, Tensor]:
    """One RGB frame, uint8 (3, H, W) / (H, W, 3) or float in [0, 1] (3, H, W), -> ViT pixels
    (N, patch_dim) and grid_thw (1, 3): resized to size x size and normalised as Qwen-VL does (mean
    and std 0.5)."""
    from cosmos3_robot.encoders.vit import image_patches

    x = torch.as_tensor(frame)
    if x.ndim != 3 or 3 not in (x.shape[0], x.shape[-1]):
        raise ValueError(f"a frame must be (3, H, W) or (H, W, 3), got shape {tuple(x.shape)}")
    if x.shape[0] != 3:
        x = x.permute(2, 0, 1)
    x = x.float() / 255.0 if x.dtype == torch.uint8 else x.float()
    x = x[None]
    if tuple(x.shape[-2:]) != (size, size):
        x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", antialias=True)
    return image_patches((x.clamp(0, 1) - 0.5) / 0.5, vit_cfg)


def image_text_ids(
    tokenizer, text: str, frame: Tensor, vit_cfg, size: int
) -> tuple[list[int], Tensor, Tensor]:
    """One prompt `<bos> <vision_start> <image> × n <vision_end> text`: its ids, and the frame's ViT
    pixels and grid_thw (`frame_patches`)."""
    px, grid = frame_patches(frame, vit_cfg, size)
    head = [tokenizer.bos_id] if tokenizer.bos_id is not None else []
    head += image_placeholder(tuple(grid[0].tolist()), tokenizer.vision_ids, vit_cfg.spatial_merge_size)
    return head + tokenizer.encode(text, bos=False), px, grid


def image_text_prompts(
    tokenizer, texts: list[str], frames: list[Tensor], vit_cfg, size: int
) -> tuple[Tensor, Tensor, dict[str, Any]]:
    """Prompts `<bos> <vision_start> <image> × n <vision_end> text` for one frame and one text each:
    right-padded ids (B, L), lengths (B,) and the ViT inputs (`pixel_values`, `image_grid_thw`,
    `vision_token_ids`) that `reasoner_kwargs` turns into Reasoner inputs."""
    if len(texts) != len(frames):
        raise ValueError(f"{len(texts)} texts but {len(frames)} frames: give one frame per prompt")
    from cosmos3_robot.processors.tokenizers import pad_right

    ids = tokenizer.vision_ids
    if min(ids.image_token_id, ids.vision_start_token_id, ids.vision_end_token_id) < 0:
        raise ValueError(f"tokenizer {tokenizer.name} has no vision tokens (<|image_pad|> ...)")
    seqs, pixels, grids = [], [], []
    for text, frame in zip(texts, frames, strict=True):
        seq, px, grid = image_text_ids(tokenizer, text, frame, vit_cfg, size)
        seqs.append(seq)
        pixels.append(px)
        grids.append(grid)
    input_ids, lengths = pad_right(seqs, tokenizer.pad_id)
    kwargs = {"pixel_values": torch.cat(pixels), "image_grid_thw": torch.cat(grids), "vision_token_ids": ids}
    return input_ids, lengths, kwargs


def reasoner_kwargs(model: MoT, vit: ViT | None, input_ids: Tensor, lengths: Tensor, images: dict) -> dict:
    """Keyword arguments of `model.reason(...)` for a prompt batch: the ids alone without images, else
    the ViT's tokens spliced in at the placeholders (`images` as `image_text_prompts` returns them)."""
    if "pixel_values" not in images:
        return {"input_ids": input_ids, "lengths": lengths}
    if vit is None:
        raise ValueError(
            "this batch shows the Reasoner a frame, but no ViT was given: load the model folder with its "
            "vit.safetensors (the reasoner stage's ViT)"
        )
    return build_reasoner_inputs(
        model,
        vit,
        input_ids,
        images["vision_token_ids"],
        lengths=lengths,
        pixel_values=images["pixel_values"],
        image_grid_thw=images["image_grid_thw"],
    ).reason_kwargs()


def select_images(images: dict, rows: Tensor | list[int]) -> dict:
    """The ViT inputs of the batch rows `rows` (each row's patches are t·h·w of its grid), in that order."""
    if "pixel_values" not in images:
        return images
    grid = images["image_grid_thw"]
    per = grid.prod(-1).tolist()
    start = [0]
    for n in per:
        start.append(start[-1] + n)
    rows = [int(r) for r in (rows.tolist() if isinstance(rows, Tensor) else rows)]
    if not rows:
        return {}
    pix = torch.cat([images["pixel_values"][start[r] : start[r + 1]] for r in rows])
    return {**images, "pixel_values": pix, "image_grid_thw": grid[rows]}
