"""Does the reasoner stage see the scene? Its answers to held-out questions about the frame.

    python benchmarks/reasoner_qa.py MODEL_DIR --root DATA/reach128 [--max-rows 400] [--out JSON]

MODEL_DIR is a reasoner-stage model folder with its ViT (`train stage=reasoner model.vit=...`). The
questions are the stage's own (`datasets/text.py`), on the validation episodes of the same split
(`val_fraction` 0.1, seed 0, as the recipes train): the frame, the instruction, then "where is the A
relative to the B?" (8 compass words) or "how far is the A from the B?" (cm). Each answer is generated
greedily and checked against the simulator's geometry (the recorded environment state). Baselines from
the training rows: the most common direction per question, and the mean distance per question.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import torch

from cosmos3_robot.interop.checkpoint import load_model
from cosmos3_robot.tasks.text_generation import generate
from cosmos3_robot.training.data import DataConfig, make_reasoner_data
from cosmos3_robot.training.data.reasoner import first_frame


def parse(answer: str) -> tuple[str, float | None]:
    """ "up and to the left, 0.12 m" -> ("up and to the left", 0.12); "0.07 m" -> ("", 0.07)."""
    head, _, tail = answer.rpartition(",") if "," in answer else ("", "", answer)
    try:
        return head.strip(), float(tail.strip().removesuffix("m").strip())
    except ValueError:
        return head.strip(), None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--root", required=True)
    ap.add_argument("--max-rows", type=int, default=400)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    model, vit, _ = load_model(args.model)
    if vit is None:
        raise SystemExit(f"{args.model} has no ViT: give a reasoner-stage model trained with model.vit=...")
    src = make_reasoner_data(
        DataConfig(root=args.root, val_fraction=0.1, seed=0, text="qa"), model.config, vit
    )
    train_dirs, train_dist = defaultdict(Counter), defaultdict(list)
    for row in src.train_rows:
        qa = src.qa(row)
        d, m = parse(qa.answer)
        if qa.kind == "relative":
            train_dirs[qa.question].update([d])
        train_dist[qa.question].append(m)
    rows = src.val_rows[:: max(1, len(src.val_rows) // args.max_rows)][: args.max_rows]
    per_q = defaultdict(
        lambda: {"n": 0, "direction_ok": 0, "majority_ok": 0, "abs_err": [], "mean_abs_err": []}
    )
    for lo in range(0, len(rows), args.batch):
        chunk = rows[lo : lo + args.batch]
        batch = src.text_batch(chunk, [first_frame(src.ds, r["row"]) for r in chunk], answers=False)
        with torch.no_grad():
            out = generate(model, **batch.reasoner_inputs(model, vit), max_new_tokens=28,
                           eos_token_id=src.tokenizer.eos_id)  # fmt: skip
        for r, toks, n in zip(chunk, out.tokens, out.lengths.tolist(), strict=True):
            qa = src.qa(r)
            got_d, got_m = parse(src.tokenizer.decode(toks[:n]))
            want_d, want_m = parse(qa.answer)
            s = per_q[qa.question]
            s["n"] += 1
            if qa.kind == "relative":
                s["direction_ok"] += got_d == want_d
                s["majority_ok"] += train_dirs[qa.question].most_common(1)[0][0] == want_d
            s["abs_err"].append(abs(got_m - want_m) if got_m is not None else float("nan"))
            s["mean_abs_err"].append(abs(float(np.mean(train_dist[qa.question])) - want_m))
    table = {}
    for q, s in sorted(per_q.items()):
        err = np.array(s["abs_err"], dtype=float)
        table[q] = {
            "n": s["n"],
            "direction_accuracy": s["direction_ok"] / s["n"] if "where" in q else None,
            "majority_direction_accuracy": s["majority_ok"] / s["n"] if "where" in q else None,
            "distance_mae_m": float(np.nanmean(err)) if np.isfinite(err).any() else None,
            "unparsed": int(np.isnan(err).sum()),
            "mean_distance_mae_m": float(np.mean(s["mean_abs_err"])),
        }
        print(f"{q:55s} n={s['n']:3d} " + " ".join(f"{k}={v:.3f}" for k, v in table[q].items()
                                                  if isinstance(v, float)))  # fmt: skip
    rel = [v for v in table.values() if v["direction_accuracy"] is not None]
    n_rel, n_all = sum(v["n"] for v in rel), sum(v["n"] for v in table.values())
    overall = {
        "direction_accuracy": sum(v["direction_accuracy"] * v["n"] for v in rel) / max(n_rel, 1),
        "majority_direction_accuracy": sum(v["majority_direction_accuracy"] * v["n"] for v in rel)
        / max(n_rel, 1),
        "direction_questions": n_rel,
        "distance_mae_m": float(np.nanmean(np.concatenate([per_q[q]["abs_err"] for q in table]))),
        "mean_distance_mae_m": float(np.mean(np.concatenate([per_q[q]["mean_abs_err"] for q in table]))),
        "questions": n_all,
    }
    print(
        "overall: "
        + " ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in overall.items())
    )
    result = {
        "model": str(Path(args.model).resolve()),
        "root": args.root,
        "rows": len(rows),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "overall": overall,
        "questions": table,
    }
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
