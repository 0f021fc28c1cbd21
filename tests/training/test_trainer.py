"""Trainer: each stage trains only its own parameters; mode mixing; config and input errors."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

from cosmos3_robot.interop.checkpoint import load_model
from cosmos3_robot.model import MoT, preset
from cosmos3_robot.scripts.train import compose, main
from cosmos3_robot.training.config import TrainConfig
from cosmos3_robot.training.data.synthetic import SyntheticData
from cosmos3_robot.training.trainer import Trainer
from tests.builders import make_cfg, make_trainer


def snapshot(params):
    return [p.detach().clone() for p in params]


def test_generator_stage_trains_only_the_generator(tmp_path):
    t = make_trainer(tmp_path, steps=3)
    ar0, dm0 = snapshot(t.model.reasoner_parameters()), snapshot(t.model.generator_parameters())
    summary = t.fit()
    assert summary["step"] == 3 and t.epoch == 1  # 2 batches per epoch: crossed into epoch 1
    for a, b in zip(ar0, t.model.reasoner_parameters(), strict=True):
        assert torch.equal(a, b)  # Reasoner bit-identical
    assert any(not torch.equal(a, b) for a, b in zip(dm0, t.model.generator_parameters(), strict=True))
    assert all(not p.requires_grad for p in t.model.reasoner_parameters())
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in t.history)
    modes = set().union(*(r["losses"] for r in t.history))
    assert modes <= {"forward_dynamics", "inverse_dynamics", "policy", "video"} and len(modes) >= 2
    assert t.model.config.null_condition  # prompt dropout > 0 → CFG-ready model
    # EMA (not the live weights) went into the exported model.
    live = dict(t.model.named_parameters())
    exported, _, _ = load_model(summary["model"])
    name = "video_out.weight"
    assert torch.equal(dict(exported.named_parameters())[name], t.ema.shadow[name])
    assert not torch.equal(t.ema.shadow[name], live[name])
    assert os.path.isfile(tmp_path / "run" / "metrics.jsonl")
    assert summary["plots"] and all(os.path.isfile(p) for p in summary["plots"])


def test_reasoner_stage_trains_only_the_reasoner(tmp_path):
    t = make_trainer(tmp_path, stage="reasoner", steps=3)
    ar0, dm0 = snapshot(t.model.reasoner_parameters()), snapshot(t.model.generator_parameters())
    t.fit()
    for a, b in zip(dm0, t.model.generator_parameters(), strict=True):
        assert torch.equal(a, b)  # Generator untouched
    assert all(not torch.equal(a, b) for a, b in zip(ar0, t.model.reasoner_parameters(), strict=True))
    assert set(t.history[-1]["losses"]) == {"text"}
    assert t.ema is None


def test_reasoner_stage_learns_counting(tmp_path):
    t = make_trainer(tmp_path, stage="reasoner", steps=50, optim={"lr": 1e-2})
    before = t.validate()["text"]
    t.fit()
    assert t.validate()["text"] < 0.7 * before


def test_action_free_clips_only_train_video_and_prompt_dropout(tmp_path):
    t = make_trainer(tmp_path, data_kw={"action_free": True}, generator=dataclasses.replace(
        TrainConfig().generator, prompt_dropout=0.5))  # fmt: skip
    batch = next(iter(t.data.train_batches(0)))
    dropped, modes = t._plan_global(batch)
    assert modes == ["video"] * 4
    null = dropped.lengths == 1
    assert null.any() and bool((dropped.input_ids[null] == 0).all())
    rec = t.train_step(batch)
    assert set(rec["losses"]) == {"video"}


def test_per_batch_mode_mix(tmp_path):
    g = dataclasses.replace(TrainConfig().generator, mode_mix="per_batch")
    t = make_trainer(tmp_path, generator=g)
    _, modes = t._plan_global(next(iter(t.data.train_batches(0))))
    assert len(set(modes)) == 1


def test_stage_whose_inputs_the_data_lacks(tmp_path):
    # Text data for the generator stage, clip data for the reasoner stage.
    cfg = make_cfg(tmp_path)
    model = MoT(preset("tiny"))
    text = SyntheticData(model.config, "reasoner", 4)
    with pytest.raises(ValueError, match="stage 'generator' trains on ClipBatch"):
        Trainer(cfg, text, model=model).fit()
    cfg = make_cfg(tmp_path / "b", stage="reasoner")
    clips = SyntheticData(model.config, "generator", 4)
    with pytest.raises(ValueError, match="stage 'reasoner' trains on TextBatch"):
        Trainer(cfg, clips, model=MoT(preset("tiny"))).fit()
    reasoner_only = MoT(dataclasses.replace(preset("tiny"), generator=None))
    with pytest.raises(ValueError, match="Generator tower"):
        Trainer(make_cfg(tmp_path / "c"), clips, model=reasoner_only)


def test_config_errors_are_clear(tmp_path, capsys):
    with pytest.raises(ValueError, match="'bogus'"):
        compose(["bogus=1"])
    with pytest.raises(ValueError, match="'nope'"):
        compose(["optim.nope=3"])
    with pytest.raises(ValueError, match="precision"):
        compose(["precision=fp8"])
    with pytest.raises(ValueError, match="unknown modes \\['dance'\\]"):
        compose(["generator.modes={dance: 1.0}"])
    # a mode the default mix lacks is accepted, and the given dict replaces the default whole
    assert compose(["generator.modes={action_policy: 1}"]).generator.modes == {"action_policy": 1.0}
    with pytest.raises(ValueError, match="unknown modes"):
        TrainConfig(generator=dataclasses.replace(TrainConfig().generator, modes={"dance": 1.0}))
    for bad in ("0", "-1", "inf", "nan"):
        with pytest.raises(ValueError, match=f"minutes must be > 0 .*got {bad}"):
            compose([f"minutes={bad}"])
    assert main(["bogus=1"]) == 2
    assert "bogus" in capsys.readouterr().err


def test_compose_presets_and_overrides(tmp_path):
    cwd = os.getcwd()
    cfg = compose(
        ["model=sim-small", "stage=reasoner", "steps=20", f"out={tmp_path}/x", "data.root=/data/push"]
    )
    assert (cfg.model.preset, cfg.stage, cfg.steps, cfg.data.root) == (
        "sim-small",
        "reasoner",
        20,
        "/data/push",
    )
    assert isinstance(cfg, TrainConfig) and os.getcwd() == cwd
    assert not (tmp_path / "x").exists()  # composing writes nothing


def test_help_and_print_config(capsys):
    assert main(["--help"]) == 0
    assert "stage=reasoner|generator" in capsys.readouterr().out
    assert main(["--print-config", "steps=5"]) == 0
    assert "steps: 5" in capsys.readouterr().out


def test_cli_run_end_to_end(tmp_path):
    out = tmp_path / "cli"
    rc = main([f"out={out}", "steps=2", "data.batch_size=2", "precision=fp32", "progress=false", "val_every=1",
               "threads=1"])  # fmt: skip
    assert rc == 0
    assert (out / "config.yaml").is_file() and (out / "model" / "model.safetensors").is_file()
    assert list((out / "plots").glob("loss_*.png"))
