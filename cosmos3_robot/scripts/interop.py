"""Interop commands: `import-diffusers`, `export-diffusers`, `import-qwen3vl` (the library is in
`cosmos3_robot/interop/`)."""

from __future__ import annotations

import argparse
import sys

import torch

from cosmos3_robot.interop.checkpoint import load_model, save_model
from cosmos3_robot.interop.diffusers_config import DIFFUSERS_CLASS, DiffusersCompat
from cosmos3_robot.interop.diffusers_io import COMPAT_META, export_diffusers_cosmos3, load_diffusers_cosmos3
from cosmos3_robot.interop.qwen3vl import load_qwen3vl
from cosmos3_robot.model import preset
from cosmos3_robot.scripts.common import HelpFormatter

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def import_diffusers_main(argv: list[str] | None = None) -> int:
    """`cosmos3-robot import-diffusers SRC DST`: Diffusers Cosmos 3 folder -> our checkpoint folder."""
    ap = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        prog="cosmos3-robot import-diffusers",
        description=import_diffusers_main.__doc__,
    )
    ap.add_argument(
        "src", help="Diffusers Cosmos3OmniTransformer folder (or a pipeline folder with transformer/)"
    )
    ap.add_argument("dst", help="output checkpoint folder (our format, see cosmos3_robot.interop.checkpoint)")
    ap.add_argument(
        "--dtype", choices=sorted(_DTYPES), default=None, help="cast weights (default: as stored)"
    )
    args = ap.parse_args(argv)
    model, compat = load_diffusers_cosmos3(args.src, dtype=_DTYPES.get(args.dtype))
    save_model(args.dst, model, meta={COMPAT_META: compat.to_dict(), "imported_from": str(args.src)})
    n = sum(p.numel() for p in model.parameters())
    print(f"imported {n / 1e6:.1f} M parameters from {args.src} into {args.dst}")
    return 0


def export_diffusers_main(argv: list[str] | None = None) -> int:
    """`cosmos3-robot export-diffusers SRC DST`: our checkpoint folder -> Diffusers Cosmos 3 folder.
    Models of the presets sim-small, nano and super export; tiny does not (its time projection is
    narrower than the 256 Diffusers' layer has)."""
    ap = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        prog="cosmos3-robot export-diffusers",
        description=export_diffusers_main.__doc__,
    )
    ap.add_argument("src", help="our checkpoint folder (cosmos3_robot.interop.checkpoint format)")
    ap.add_argument("dst", help="output Diffusers transformer folder")
    ap.add_argument(
        "--dtype", choices=sorted(_DTYPES), default=None, help="weight dtype (default: as stored)"
    )
    ap.add_argument("--max-shard-gb", type=float, default=5.0, help="largest safetensors shard, in GB")
    args = ap.parse_args(argv)
    model, _, meta = load_model(args.src)
    compat = DiffusersCompat.from_dict(meta[COMPAT_META]) if COMPAT_META in meta else None
    export_diffusers_cosmos3(
        model,
        args.dst,
        compat,
        dtype=_DTYPES.get(args.dtype),
        max_shard_bytes=int(args.max_shard_gb * 1024**3),
    )
    print(f"exported {args.src} to {args.dst} ({DIFFUSERS_CLASS})")
    return 0


def import_qwen3vl_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        prog="cosmos3-robot import-qwen3vl",
        description="Build both towers (and the ViT) from a local Hugging Face Qwen3-VL folder and save "
        "them as a cosmos3-robot checkpoint. Nothing is downloaded.",
    )
    parser.add_argument("source", help="folder with config.json and *.safetensors (a Qwen3-VL checkpoint)")
    parser.add_argument("output", help="checkpoint folder to write (replaced atomically)")
    parser.add_argument("--dtype", default=None, help="float32 | bfloat16 | float16 (default: as stored)")
    parser.add_argument("--reasoner-only", action="store_true", help="no Generator tower (reasoning only)")
    parser.add_argument(
        "--preset", default="nano", help="preset giving the Generator-only fields (default nano)"
    )
    args = parser.parse_args(argv)
    try:
        model, vit, meta = load_qwen3vl(
            args.source, dtype=args.dtype, with_generator=not args.reasoner_only, template=preset(args.preset)
        )
        extra = meta.pop("extra_files")
        save_model(args.output, model, vit, meta, reasoner_only=args.reasoner_only, extra_files=extra)
    except (FileNotFoundError, ValueError) as e:
        print(f"cosmos3-robot import-qwen3vl: {e}", file=sys.stderr)
        return 2
    n = sum(p.numel() for p in model.parameters()) + sum(p.numel() for p in vit.parameters())
    print(f"wrote {args.output}: {n / 1e6:.1f} M parameters, {len(extra)} pass-through files")
    return 0
