"""Training checkpoints: exact resume, atomic writes, crash safety, keep-last-k, clear errors."""

from __future__ import annotations

import dataclasses
import shutil

import pytest
import torch

from cosmos3_robot import files
from cosmos3_robot.interop.checkpoint import load_model
from cosmos3_robot.training import checkpoint as ckpt
from tests.builders import make_trainer


def losses(trainer):
    return [(r["step"], r["loss"]) for r in trainer.history]


@pytest.mark.parametrize("stage", ["generator", "reasoner"])
def test_resume_reproduces_the_uninterrupted_run_bit_for_bit(tmp_path, stage):
    full = make_trainer(tmp_path / "a", stage=stage, steps=6, checkpoint=ckpt_cfg(every=3, keep_last=5))
    full.fit()
    # A second run that was "pre-empted" after step 3: it only has the step-3 checkpoint.
    b = tmp_path / "b" / "run" / "checkpoints"
    b.mkdir(parents=True)
    shutil.copytree(tmp_path / "a" / "run" / "checkpoints" / "step-00000003", b / "step-00000003")
    resumed = make_trainer(tmp_path / "b", stage=stage, steps=6, checkpoint=ckpt_cfg(every=3, keep_last=5))
    resumed.fit()
    assert [s for s, _ in losses(resumed)] == [4, 5, 6]
    assert losses(resumed) == losses(full)[3:]  # exact float equality
    for (n, p), (_, q) in zip(full.model.named_parameters(), resumed.model.named_parameters(), strict=True):
        assert torch.equal(p, q), n
    if full.ema is not None:
        for n in full.ema.shadow:
            assert torch.equal(full.ema.shadow[n], resumed.ema.shadow[n])


def ckpt_cfg(**kw):
    from cosmos3_robot.training.config import CheckpointSection

    return CheckpointSection(**kw)


def test_keep_last_k_and_model_folder(tmp_path):
    t = make_trainer(tmp_path, steps=4, checkpoint=ckpt_cfg(every=1, keep_last=2))
    t.fit()
    names = [p.name for p in ckpt.list_checkpoints(t.ckpt_root)]
    assert names == ["step-00000003", "step-00000004"]
    # The checkpoint's model/ folder is a regular model checkpoint.
    model, _, meta = load_model(t.ckpt_root / "step-00000004" / "model")
    for (n, p), (_, q) in zip(t.model.named_parameters(), model.named_parameters(), strict=True):
        assert torch.equal(p, q), n
    assert meta["step"] == 4 and meta["data"]["details"]["source"] == "synthetic"


def test_crash_while_saving_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    t = make_trainer(tmp_path, steps=2, checkpoint=ckpt_cfg(every=1, keep_last=3))
    t.fit()
    good = ckpt.latest_checkpoint(t.ckpt_root)
    real = files.save_tensors

    def failing(path, tensors):
        if path.name == "optimizer.safetensors":  # model and EMA already written: fail half-way
            raise OSError("disk full (simulated)")
        real(path, tensors)

    monkeypatch.setattr(files, "save_tensors", failing)
    t.step = 3
    with pytest.raises(OSError, match="simulated"):
        t.save()
    monkeypatch.undo()
    assert ckpt.latest_checkpoint(t.ckpt_root) == good
    assert not list(t.ckpt_root.glob(".step-*"))  # the temporary folder was removed
    ckpt.load_checkpoint(good)  # still loadable
    # A hard kill leaves a temporary folder behind: it is ignored, and the next save removes it.
    stale = t.ckpt_root / ".step-00000009.tmp-abc"
    (stale / "model").mkdir(parents=True)
    assert ckpt.latest_checkpoint(t.ckpt_root) == good
    t.save()
    assert not stale.exists() and ckpt.latest_checkpoint(t.ckpt_root).name == "step-00000003"


def test_truncated_checkpoint_is_a_clear_error(tmp_path):
    t = make_trainer(tmp_path, steps=1)
    t.fit()
    folder = ckpt.latest_checkpoint(t.ckpt_root)
    for rel in ("model/model.safetensors", "optimizer.safetensors"):
        broken = tmp_path / f"broken-{rel.replace('/', '_')}"
        shutil.copytree(folder, broken)
        path = broken / rel
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        with pytest.raises(ckpt.CheckpointError, match="truncated"):
            ckpt.load_checkpoint(broken)
    # A file whose size matches but whose contents are garbage: safetensors' own error, rephrased.
    broken = tmp_path / "garbage"
    shutil.copytree(folder, broken)
    path = broken / "rng.safetensors"
    path.write_bytes(b"\xff" * path.stat().st_size)
    with pytest.raises(ckpt.CheckpointError, match="truncated or corrupt"):
        ckpt.load_checkpoint(broken)
    meta = folder / "trainer.json"
    meta.write_text(meta.read_text()[:100])
    with pytest.raises(ckpt.CheckpointError, match="trainer.json is truncated"):
        ckpt.load_checkpoint(folder)


def test_checkpoint_of_a_different_config_names_the_fields(tmp_path):
    t = make_trainer(tmp_path, steps=1)
    t.fit()
    other = make_trainer(tmp_path, steps=1, seed=5, optim={"lr": 5e-4})
    with pytest.raises(ckpt.CheckpointError) as e:
        other.fit()  # checkpoint.resume=auto finds the first run's checkpoint
    msg = str(e.value)
    assert "seed: 0 -> 5" in msg and "optim.lr" in msg and "steps" not in msg
    # Where-to-write / how-often fields may differ.
    fine = make_trainer(tmp_path, steps=1, log_every=7)
    fine.resume(ckpt.latest_checkpoint(t.ckpt_root))
    # A resume that asks for "never" refuses to mix runs.
    never = make_trainer(tmp_path, steps=1, checkpoint=ckpt_cfg(resume="never"))
    with pytest.raises(ValueError, match="already holds checkpoints"):
        never.fit()
    # Another stage: the config diff says so.
    stage = make_trainer(tmp_path, stage="reasoner", steps=1)
    with pytest.raises(ckpt.CheckpointError, match="stage: 'generator' -> 'reasoner'"):
        stage.fit()


def test_snapshot_round_trip_of_rng_and_optimizer(tmp_path):
    t = make_trainer(tmp_path, steps=2)
    t.fit()
    snap = ckpt.load_checkpoint(ckpt.latest_checkpoint(t.ckpt_root))
    before = dataclasses.replace(snap)
    assert before.step == 2 and before.trainer_state["ema_updates"] == 2
    g = torch.Generator()
    ckpt.restore_rng(snap, g)
    assert torch.equal(g.get_state(), t.generator.get_state())
    names = {k.partition("::")[0] for k in snap.optim_tensors}
    assert names and names <= set(t.param_names)  # (audio projections: no audio data, no state)


@pytest.mark.slow
def test_train_killed_while_saving_resumes_to_the_uninterrupted_run(tmp_path):
    """kill -9 inside the second checkpoint save of `cosmos3-robot train`, then the same command."""
    import json
    import os
    import subprocess
    import sys

    def argv(out):
        return ["train", "model=tiny", "steps=4", f"out={out}", "progress=false", "data.batch_size=2",
                "checkpoint.every=2", "val_every=0", "log_every=1", "precision=fp32", "threads=1"]  # fmt: skip

    script = f"""
import os, signal
from cosmos3_robot.training import checkpoint
real, calls = checkpoint.save_checkpoint, []
def dying(root, snap, keep_last):
    calls.append(1)
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(root, snap, keep_last)
checkpoint.save_checkpoint = dying
from cosmos3_robot.cli import main
main({argv(tmp_path / "killed")!r})
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env={**os.environ})
    assert r.returncode == -9, r.stderr[-2000:]
    from cosmos3_robot.cli import main

    assert main(argv(tmp_path / "killed")) == 0
    assert main(argv(tmp_path / "straight")) == 0

    def losses(out):
        rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        return [(r["step"], r["loss"]) for r in rows if r["split"] == "train"]

    assert losses(tmp_path / "killed") == losses(tmp_path / "straight")  # the same curve, step for step


def test_a_minutes_budget_stops_saves_and_carries_over_resumes(tmp_path, capsys):
    """`minutes` stops at the first step past the budget, with a checkpoint and a model there; the
    time spent is kept, so a resume under the same budget trains nothing more; lifting the budget
    continues exactly as the uninterrupted run."""
    full = make_trainer(tmp_path / "full", steps=4)
    full.fit()
    tiny = 1e-9  # minutes: spent by the first step
    first = make_trainer(tmp_path / "b", steps=4, minutes=tiny)
    summary = first.fit()
    assert summary["step"] == 1 and summary["train_seconds"] > 0
    assert "stopping at step 1 of 4: minutes=1e-09 reached" in capsys.readouterr().out
    assert [p.name for p in ckpt.list_checkpoints(first.ckpt_root)] == ["step-00000001"]
    assert (first.out / "model").is_dir()
    again = make_trainer(tmp_path / "b", steps=4, minutes=tiny).fit()
    assert again["step"] == 1 and again["steps_run"] == 0
    assert again["train_seconds"] == pytest.approx(summary["train_seconds"])
    rest = make_trainer(tmp_path / "b", steps=4)
    rest.fit()
    assert losses(rest) == losses(full)[1:]


def test_under_a_minutes_budget_the_schedule_spans_the_steps_the_time_allows(tmp_path):
    t = make_trainer(tmp_path, steps=1000, minutes=1.0)
    assert t._schedule_length() == 1000  # no pace measured yet
    t.step, t.train_seconds = 10, 6.0  # 10 steps in 6 s: 100 steps fit in a minute
    assert t._schedule_length() == 100
    t.cfg.steps = 50  # the step budget ends first
    assert t._schedule_length() == 50
    t.cfg.steps, t.train_seconds = 1000, 120.0  # past the time already: the schedule ends here
    assert t._schedule_length() == 11


def test_a_checkpoint_from_before_a_new_config_field_still_resumes():
    """A saved config that lacks a field added later (generator.state_noise) counts it at its default;
    a run that sets it otherwise is still refused, naming the field."""
    from cosmos3_robot.training.config import TrainConfig, config_diff

    current = TrainConfig().to_dict()
    saved = TrainConfig().to_dict()
    del saved["generator"]["state_noise"]
    assert config_diff(saved, current) == []
    noisy = TrainConfig().to_dict()
    noisy["generator"]["state_noise"] = 0.1
    assert config_diff(saved, noisy) == ["generator.state_noise: 0.0 -> 0.1"]
    saved["generator"]["prompt_dropout"] = 0.3  # a field both have still counts
    assert config_diff(saved, current) == ["generator.prompt_dropout: 0.3 -> 0.1"]
