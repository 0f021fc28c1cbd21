"""More of issue 21's cases, found by a new-user pass over the commands: non-square frames, the
repo id a dataset was recorded under, option keys, resumes across versions, and what --help shows."""

from __future__ import annotations

import argparse
import re
from types import SimpleNamespace

import pytest
import torch

from cosmos3_robot.cli import main


def one_line_error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines and "Traceback" not in err, err
    return lines[0]


def test_non_square_frames_are_refused_not_squashed():
    from cosmos3_robot.processors.frames import resize_frames
    from cosmos3_robot.training.data.common import square_image_size

    frames = torch.zeros(2, 3, 32, 64, dtype=torch.uint8)
    with pytest.raises(ValueError, match="32x64 px .* would squash them"):
        resize_frames(frames, 32)
    assert resize_frames(frames, None) is frames  # no resize asked: kept as they are
    meta = SimpleNamespace(
        features={"observation.image": {"shape": [32, 64, 3], "names": ["height", "width", "channels"]}}
    )
    with pytest.raises(ValueError, match="frames are 32x64 px; the model needs square frames"):
        square_image_size(meta, "local/ns", "observation.image")
    meta.features["observation.image"] = {"shape": [3, 48, 48], "names": ["channels", "height", "width"]}
    assert square_image_size(meta, "local/sq", "observation.image") == 48


def test_record_keeps_its_repo_id_and_refuses_another_on_the_same_root(tmp_path, capsys):
    from cosmos3_robot.datasets.sources import open_lerobot_dataset

    root = tmp_path / "reach"
    args = [
        "record",
        "--env",
        "cosmos3_robot/Reach-v0",
        "--root",
        str(root),
        "--image-size",
        "32",
        "--no-progress",
    ]
    assert main([*args, "--episodes", "1", "--repo-id", "me/reach"]) == 0
    assert "repo id me/reach" in capsys.readouterr().out
    assert open_lerobot_dataset(None, root).repo_id == "me/reach"  # a loader given only the root
    assert main([*args, "--episodes", "2", "--repo-id", "you/reach"]) == 2
    assert "created as repo id 'me/reach', not 'you/reach'" in one_line_error(capsys.readouterr().err)
    assert main([*args, "--episodes", "2"]) == 0  # without --repo-id: the recorded one
    assert open_lerobot_dataset(None, root).meta.total_episodes == 2


def test_data_option_keys_are_checked_and_the_plus_is_explained(capsys):
    from cosmos3_robot.scripts.train import build_data, compose

    assert main(["train", "data.options.num_frames=5", "--print-config"]) == 2
    assert "each key needs a leading +: +data.options.KEY=VALUE" in one_line_error(capsys.readouterr().err)
    cfg = compose(["data.source=lerobot", "+data.options.nosuch=3"])
    with pytest.raises(ValueError, match=r"unknown data option\(s\) \['nosuch'\].*num_frames"):
        build_data(cfg, cfg.model.config())


def test_a_resume_after_an_upgrade_that_added_a_key_is_no_change():
    from cosmos3_robot.training.trainer_checkpoints import state_changes

    saved = {"stage": "generator", "details": {"data_config": {"num_frames": 5}}}
    now = {
        "stage": "generator",
        "details": {"data_config": {"num_frames": 5, "state_key": "observation.state"}},
    }
    assert state_changes(saved, now) == []
    now["details"]["data_config"]["num_frames"] = 9
    assert state_changes(saved, now) == [("details.data_config.num_frames", 5, 9)]


COMMANDS = ["record", "demo", "train-vae", "rollout", "label", "evaluate", "train-probe", "export-diffusers",
            "import-diffusers", "import-qwen3vl"]  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS)
def test_help_gives_every_default(command, capsys, monkeypatch):
    """Each option with a default value shows it in --help (the formatter adds what the text lacks)."""
    seen: list[argparse.ArgumentParser] = []
    original = argparse.ArgumentParser.parse_args

    def spy(self, *a, **k):
        seen.append(self)
        return original(self, *a, **k)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", spy)
    assert main([command, "--help"]) == 0
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert "(default: None)" not in text
    for action in seen[-1]._actions:
        if action.option_strings and action.default not in (None, argparse.SUPPRESS) and action.help:
            if not isinstance(action.default, bool):
                assert "default" in (action.help or "") or f"(default: {action.default})" in text, action.dest


def test_train_help_defaults_match_the_config():
    from cosmos3_robot.scripts.train import HELP, compose

    cfg = compose([]).to_dict()
    pairs = dict(re.findall(r"([\w.]+)=[\w|/=-]* ?\[([^\]]+)\]", HELP))
    checked = 0
    for key, shown in pairs.items():
        value = cfg
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is None or key == "model":
            continue
        assert str(value) == shown or (isinstance(value, float) and float(shown) == value), (
            key,
            shown,
            value,
        )
        checked += 1
    assert checked >= 12


def test_train_says_what_it_does_before_the_first_step(tmp_path, capsys):
    assert main(["train", "model=tiny", "steps=1", f"out={tmp_path / 'run'}", "progress=true"]) == 0
    out = capsys.readouterr().out
    for phase in ("building the model (tiny)", "opening the data (synthetic", "ready in", "trained 1 steps"):
        assert phase in out, out
