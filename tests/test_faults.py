"""Bad input and faults, as a new user meets them: each case is a clear one-line error naming the
problem and the fix (exit 2 for bad input, 1 for a failure), never a silent wrong result, and nothing
already committed is lost. The kill -9 / disk-full cases of `record`, `train` and `train-vae` live
beside their commands (tests/envs/test_record.py, tests/training/test_train_checkpoint.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from cosmos3_robot.cli import main


def cli(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    err = capsys.readouterr().err
    return code, err


def one_line_error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines and "Traceback" not in err, err
    return lines[0]


# ---- the CLI itself ---------------------------------------------------------------------------------
def test_no_arguments_is_usage_and_exit_2(capsys):
    code, err = cli([], capsys)
    assert code == 2 and "usage: cosmos3-robot" in err


def test_errors_are_one_line_and_debug_shows_the_traceback(capsys, tmp_path, monkeypatch):
    code, err = cli(["train-vae", "--out", str(tmp_path / "v"), "--root", str(tmp_path / "missing")], capsys)
    assert code == 2
    line = one_line_error(err)
    assert line.startswith("cosmos3-robot train-vae: error:") and "missing" in line
    assert not (tmp_path / "v").exists()  # refused before anything was written
    with pytest.raises(FileNotFoundError):
        main(["--debug", "train-vae", "--out", str(tmp_path / "v"), "--root", str(tmp_path / "missing")])
    monkeypatch.setenv("COSMOS3_ROBOT_DEBUG", "1")
    with pytest.raises(FileNotFoundError):
        main(["train-vae", "--out", str(tmp_path / "v"), "--root", str(tmp_path / "missing")])


# ---- train-vae ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "flag,value,match",
    [
        ("--steps", "0", "steps must be a positive integer"),
        ("--steps", "-3", "steps must be a positive integer"),
        ("--batch-frames", "0", "batch_frames must be a positive integer"),
        ("--video-fraction", "2", r"video_fraction is a share of steps, in \[0, 1\]"),
        ("--kl-weight", "nan", "kl_weight must be a finite number"),
        ("--lr", "nan", "lr must be a finite number"),
        ("--size", "50", "not divisible by 32"),
        ("--threads", "-2", "--threads must be >= 1"),
    ],
)
def test_train_vae_refuses_bad_numbers_before_work(flag, value, match, tmp_path, capsys):
    code, err = cli(["train-vae", "--out", str(tmp_path / "v"), "--root", str(tmp_path), flag, value], capsys)
    assert code == 2
    assert pytest.importorskip("re").search(match, one_line_error(err)), err
    assert not (tmp_path / "v").exists()


def test_train_vae_needs_a_dataset(tmp_path, capsys):
    code, err = cli(["train-vae", "--out", str(tmp_path / "v")], capsys)
    assert code == 2 and "needs a dataset: give --root" in one_line_error(err)


# ---- train ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "override,match",
    [
        ("optim.grad_clip=nan", "optim.grad_clip must be a finite number"),
        ("optim.lr=nan", "optim.lr must be a finite number"),
        ("generator.sigma.shift=nan", "generator.sigma.shift must be a finite number"),
        ("generator.modes={video:nan}", "generator.modes weights must be finite numbers"),
        ("threads=-2", "threads must be >= 1"),
        ("nosuchkey=1", "bad train config"),
    ],
)
def test_train_config_refuses_nan_and_nonsense_naming_the_key(override, match, capsys):
    code, err = cli(["train", override, "--print-config"], capsys)
    assert code == 2 and match in one_line_error(err), err


def test_a_modes_dict_replaces_the_default_instead_of_merging():
    from cosmos3_robot.scripts.train import compose

    assert compose(["generator.modes={video:1.0}"]).generator.modes == {"video": 1.0}
    assert compose([]).generator.modes == {
        "forward_dynamics": 0.3, "inverse_dynamics": 0.3, "policy": 0.3, "video": 0.1,
    }  # fmt: skip


def test_model_init_must_match_the_preset_it_claims(tmp_path):
    from cosmos3_robot.interop.checkpoint import save_model
    from cosmos3_robot.model import MoT, preset
    from cosmos3_robot.scripts.train import compose
    from cosmos3_robot.training.trainer import build_model

    save_model(tmp_path / "tiny", MoT(preset("tiny")))
    with pytest.raises(ValueError, match="differs from model=sim-small"):
        build_model(compose(["model=sim-small", f"model.init={tmp_path / 'tiny'}"]))
    model, _ = build_model(compose(["model=tiny", f"model.init={tmp_path / 'tiny'}"]))
    assert model.config.latent_channels == 8


def test_a_finished_run_says_so_and_exits_0(tmp_path, capsys):
    argv = ["train", "model=tiny", "steps=2", f"out={tmp_path / 'r'}", "progress=false", "data.batch_size=2",
            "val_every=0", "log_every=1"]  # fmt: skip
    assert main(argv) == 0
    assert "trained 2 steps (to step 2)" in capsys.readouterr().out
    assert main(argv) == 0
    assert "already trained to step 2" in capsys.readouterr().out


# ---- truncated or garbage files ------------------------------------------------------------------------------
def test_garbage_weights_and_configs_name_the_file(tmp_path):
    from cosmos3_robot.encoders.vae import VideoVAE, vae_config
    from cosmos3_robot.files import CheckpointError
    from cosmos3_robot.interop.checkpoint import load_model, save_model
    from cosmos3_robot.model import MoT, preset

    folder = save_model(tmp_path / "m", MoT(preset("tiny")))
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # truncated
    with pytest.raises(CheckpointError, match=f"{weights}.*truncated or corrupt"):
        load_model(folder)
    (folder / "config.json").write_bytes(b"\xff\xfe garbage")
    with pytest.raises(CheckpointError, match="config.json is not valid JSON"):
        load_model(folder)
    cfg = json.loads((save_model(tmp_path / "n", MoT(preset("tiny"))) / "config.json").read_text())
    (tmp_path / "n" / "config.json").write_text(json.dumps({**cfg, "format_version": 99}))
    with pytest.raises(ValueError, match="newer than this cosmos3-robot reads"):
        load_model(tmp_path / "n")
    vae = tmp_path / "vae"
    VideoVAE(vae_config("tiny")).save_pretrained(vae)
    for w in vae.glob("*.safetensors"):
        w.unlink()
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors weights"):
        VideoVAE.from_pretrained(vae)


def test_import_commands_name_a_garbage_file(tmp_path, capsys):
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text("{not json")
    code, err = cli(["import-qwen3vl", str(folder), str(tmp_path / "out")], capsys)
    assert code == 2 and "config.json is not valid JSON" in err
    code, err = cli(["import-diffusers", str(folder), str(tmp_path / "out")], capsys)
    assert code == 2 and "config.json is not valid JSON" in one_line_error(err)


# ---- the VAE and the world model, as an API caller meets them ------------------------------------------------
def test_one_nan_pixel_is_refused_before_it_poisons_every_latent():
    from cosmos3_robot.encoders.vae import VideoVAE, vae_config

    frames = torch.rand(1, 1, 3, 32, 32)
    frames[0, 0, 0, 3, 3] = math.nan
    with pytest.raises(ValueError, match="NaN/inf value"):
        VideoVAE(vae_config("tiny")).encode(frames)


@pytest.fixture(scope="module")
def world(tiny_world):
    from cosmos3_robot.policies.world_model import WorldModel

    return WorldModel.from_folder(tiny_world[0])


def test_world_model_inputs_in_the_callers_terms(world):
    from cosmos3_robot.policies.runners import LearnedSimulator, PolicyRunner, SamplingConfig

    runner = PolicyRunner(world, execute=2, sampling=SamplingConfig(steps=1))
    task = "move the fingertip to the red target"
    with pytest.raises(ValueError, match="'pixels' image"):
        runner.act({"agent_pos": np.zeros(4)}, task)
    with pytest.raises(ValueError, match="task must be the instruction text"):
        runner.act({"pixels": np.zeros((32, 32, 3), np.uint8)}, None)
    with pytest.raises(
        ValueError, match=r"obs\['pixels'\] must be one RGB image .* got shape \(1, 32, 32, 3\)"
    ):
        runner.act({"pixels": np.zeros((1, 32, 32, 3), np.uint8)}, task)
    with pytest.raises(ValueError, match="RGBA"):
        world.encode_frames(torch.zeros(1, 1, 32, 32, 4, dtype=torch.uint8))
    with pytest.raises(ValueError, match="must be uint8 RGB images"):
        world.encode_frames(torch.zeros(1, 1, 32, 32, 3))
    with pytest.raises(ValueError, match=r"must be \(B, T, H, W, 3\)"):
        world.encode_frames(torch.zeros(32, 32, 3, dtype=torch.uint8))
    with pytest.raises(ValueError, match="48x64 px but the model was trained on 32x32"):
        world.encode_frames(np.zeros((1, 1, 48, 64, 3), np.uint8))  # numpy frames are fine, sizes are not
    sim = LearnedSimulator(world, SamplingConfig(steps=1))
    frames = torch.zeros(1, 1, 32, 32, 3, dtype=torch.uint8)
    with pytest.raises(
        ValueError, match=r"actions must be \(batch, actions per clip, action dims\) = \(1, 4, 2\)"
    ):
        sim.predict(frames, torch.zeros(4, 2), task)
    with pytest.raises(ValueError, match="latents hold NaN"):
        world.decode_latents(torch.full((1, 8, 2, 2, 2), math.nan))


def test_a_model_with_nan_weights_does_not_act(tiny_world):
    from cosmos3_robot.policies.runners import PolicyRunner, SamplingConfig
    from cosmos3_robot.policies.world_model import WorldModel

    world = WorldModel.from_folder(tiny_world[0])
    with torch.no_grad():
        for p in world.model.parameters():
            p.fill_(math.nan)
    runner = PolicyRunner(world, execute=2, sampling=SamplingConfig(steps=1))
    with pytest.raises((FloatingPointError, ValueError), match="NaN"):
        runner.act({"pixels": np.zeros((32, 32, 3), np.uint8)}, "move the fingertip to the red target")


def test_world_model_folder_works_from_another_directory(tiny_world, tmp_path, monkeypatch):
    from cosmos3_robot.policies.world_model import WorldModel

    monkeypatch.chdir(tmp_path)
    assert WorldModel.from_folder(tiny_world[0]).geometry.image_size == 32


def test_a_dataset_left_mid_write_says_how_to_repair_it(tiny_world, tmp_path, capsys):
    import shutil

    from cosmos3_robot.datasets.writer import STATE_DIR

    root = tmp_path / "copy"
    shutil.copytree(tiny_world[1], root)
    (root / STATE_DIR / "IN_PROGRESS").touch()  # what a killed `record` leaves
    code, err = cli(
        ["evaluate", "--model", str(tiny_world[0]), "--root", str(root), "--out", str(tmp_path / "e")], capsys
    )
    assert code == 2 and "left mid-write" in one_line_error(err) and "run the same command again" in err


def test_train_vae_resumed_with_another_preset_is_refused_before_loading(tmp_path):
    from cosmos3_robot.encoders.vae import VideoVAE, vae_config
    from cosmos3_robot.files import CheckpointError
    from cosmos3_robot.training.vae import load_vae_checkpoint, save_vae_checkpoint

    vae = VideoVAE(vae_config("tiny"))
    opt = torch.optim.AdamW(vae.autoencoder.parameters())
    gen = torch.Generator()
    from dataclasses import asdict

    save_vae_checkpoint(tmp_path / "c.safetensors", vae, opt, gen, {"vae_config": asdict(vae.config)})
    other = VideoVAE(vae_config("sim-small"))
    with pytest.raises(CheckpointError, match="holds a VAE with other settings.*base_dim"):
        load_vae_checkpoint(
            tmp_path / "c.safetensors", other, torch.optim.AdamW(other.autoencoder.parameters()), gen
        )


def test_a_second_train_on_the_same_out_is_refused_while_the_first_runs(tmp_path, capsys):
    import fcntl

    out = tmp_path / "r"
    with open(tmp_path / ".r.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running `train` holds it
        code, err = cli(
            ["train", "model=tiny", "steps=1", f"out={out}", "progress=false", "data.batch_size=2"], capsys
        )
    assert code == 1 and "another `cosmos3-robot train` is writing" in one_line_error(err)
    assert not (out / "checkpoints").exists()


@pytest.fixture
def read_only_dir(tmp_path):
    """A folder nothing can be written into, even by root (ext4's immutable flag); skipped where
    `chattr` cannot set it."""
    import shutil
    import subprocess

    folder = tmp_path / "ro"
    folder.mkdir()
    if (
        shutil.which("chattr") is None
        or subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode
    ):
        pytest.skip("cannot make a read-only folder here (chattr +i)")
    try:
        yield folder
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=False)


def test_read_only_output_is_a_one_line_failure_and_writes_nothing(read_only_dir, tiny_world, capsys):
    model, root, _ = tiny_world
    cases = [
        ["record", "--env", "cosmos3_robot/Reach-v0", "--episodes", "1", "--root", str(read_only_dir / "d"),
         "--image-size", "32", "--no-progress"],
        ["rollout", "--model", str(model), "--env", "cosmos3_robot/Reach-v0", "--episodes", "1", "--steps", "1",
         "--out", str(read_only_dir / "r"), "--no-progress"],
        ["label", "--model", str(model), "--source", str(root), "--out", str(read_only_dir / "l"), "--steps", "1",
         "--no-progress"],
        ["train", "model=tiny", "steps=1", f"out={read_only_dir / 't'}", "progress=false", "data.batch_size=2"],
    ]  # fmt: skip
    for argv in cases:
        code, err = cli(argv, capsys)
        assert code == 1, (argv[0], err)
        line = one_line_error(err)
        assert (
            line.startswith(f"cosmos3-robot {argv[0]}: failed (PermissionError)")
            and str(read_only_dir) in line
        )
    assert list(read_only_dir.iterdir()) == []
