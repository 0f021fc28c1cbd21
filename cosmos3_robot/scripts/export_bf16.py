"""`cosmos3-robot export-bf16`: a bf16 copy of a trained folder, half the size, for shipping.

    cosmos3-robot export-bf16 runs/reach/model artefacts/reach/policy
    cosmos3-robot export-bf16 runs/reach_estimator/estimator artefacts/reach/estimator

Reads a folder that `train` (OUT/model), `train-estimator` (OUT/estimator) or `train-labeller`
(OUT/labeller) wrote. Writes --out atomically: every file copied, every float tensor of its
safetensors files stored as bf16, except the normalisation buffers `mean` and `std` of an estimator
or labeller (kept float32: they carry the dataset's units at full precision). The loaders read the
copy as they read the original (a world model is upcast to float32 on load). `export.json` records
the source folder, the command line and the commit.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from cosmos3_robot.scripts.common import HelpFormatter, provenance, run_config

KEEP_FP32 = ("mean", "std")


def folder_kind(folder: Path) -> str:
    if (folder / "data_state.json").exists() and (folder / "model.safetensors").exists():
        return "world model"
    if (folder / "estimator.json").exists():
        return "state estimator"
    if (folder / "labeller.json").exists():
        return "labeller"
    raise ValueError(
        f"{folder} is not a folder that train (OUT/model), train-estimator (OUT/estimator) or train-labeller "
        "(OUT/labeller) wrote; give one of those"
    )


def export_bf16(src: Path, out: Path, record: dict) -> dict:
    import torch

    from cosmos3_robot.files import atomic_folder, read_tensors, save_tensors

    kind = folder_kind(src)
    sizes = {"before": 0, "after": 0}
    with atomic_folder(out) as tmp:
        for path in sorted(src.rglob("*")):
            if path.is_dir():
                continue
            dest = tmp / path.relative_to(src)
            dest.parent.mkdir(parents=True, exist_ok=True)
            sizes["before"] += path.stat().st_size
            if path.suffix == ".safetensors":
                tensors = {
                    k: v.to(torch.bfloat16)
                    if v.is_floating_point() and k.split(".")[-1] not in KEEP_FP32
                    else v
                    for k, v in read_tensors(path).items()
                }
                save_tensors(dest, tensors)
            else:
                shutil.copy2(path, dest)
            sizes["after"] += dest.stat().st_size
        summary = {**record, "kind": kind, "source": str(src), "bytes": sizes}
        (tmp / "export.json").write_text(json.dumps(summary, indent=2))
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="cosmos3-robot export-bf16", description=__doc__, formatter_class=HelpFormatter
    )
    p.add_argument("src", type=Path, help="the trained folder (OUT/model, OUT/estimator or OUT/labeller)")
    p.add_argument("out", type=Path, help="the bf16 copy to write (must not exist)")
    args = p.parse_args(argv)
    if args.out.exists():
        raise ValueError(f"{args.out} exists; give a new folder (an export is never merged into another)")
    s = export_bf16(args.src, args.out, provenance("export-bf16", run_config(args)))
    print(
        f"{args.out}: {s['kind']} in bf16, {s['bytes']['before'] / 1e6:.1f} MB -> {s['bytes']['after'] / 1e6:.1f} MB"
    )
    return 0
