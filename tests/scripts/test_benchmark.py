"""`cosmos3-robot benchmark policies`: bad input refused before any work; the smoke table end to end."""

from __future__ import annotations

import json

import pytest
import yaml

from cosmos3_robot.cli import main
from tests._data_fixtures import record_small


def error_line(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--tasks", "cosmos3_robot/MetaWorld-nope-v3"],
            "unknown task 'cosmos3_robot/MetaWorld-nope-v3'; known:",
        ),
        (["--minutes", "0.01"], "--minutes 0.01 is too small to train anything"),
        (["--variant", "full"], "the `ours` arm needs a frozen video VAE: --vae FOLDER"),
        (["--dataset", "reach"], "--dataset 'reach': give ENV=ROOT with ENV one of the tasks"),
        (["--modes", "dance=1"], "--modes 'dance=1': give MODE=WEIGHT, MODE one of action_policy,"),
        (["--modes", "policy=-1"], "--modes 'policy=-1': give MODE=WEIGHT"),
        (["--modes", "policy=0"], "at least one mode needs a positive weight"),
        (
            ["--variant", "metaworld", "--estimator-minutes", "20"],
            "--estimator-minutes 20.0 of --minutes 20.0 leaves the ours-estimator arm's policy 0 minutes",
        ),
        (
            ["--variant", "metaworld", "--demos", "10"],
            "--demos 10: the ours-estimator arm holds 10 demonstrations out",
        ),
        (["--state-noise", "-1"], "--state-noise must be a std >= 0, got -1.0"),
        (["--ensemble", "nan"], "--ensemble must be a finite weight decay >= 0"),
        (
            ["--ensemble", "0.01", "--arms", "ours", "diffusion"],
            "Diffusion Policy has no temporal ensembling",
        ),
    ],
)
def test_bad_input_is_refused_before_any_work(tmp_path, capsys, argv, message):
    out = tmp_path / "bench"
    assert main(["benchmark", "policies", "--out", str(out), *argv]) == 2
    assert message in error_line(capsys)
    assert not out.exists()


@pytest.fixture(scope="module")
def reach32(tmp_path_factory):
    return record_small(tmp_path_factory.mktemp("bench") / "reach", episodes=2).root  # 32 px frames


def test_a_dataset_of_another_action_width_or_frame_size_is_refused(reach32, tmp_path, capsys):
    """Our Reach's actions are 2 wide, Meta-World's 4; the smoke variant trains on 64 px frames."""
    out = ["benchmark", "policies", "--out", str(tmp_path / "b")]
    task = "cosmos3_robot/MetaWorld-reach-v3"
    assert main([*out, "--tasks", task, "--dataset", f"{task}={reach32}"]) == 2
    assert f"dataset {reach32}: actions are 2 wide but {task} takes 4-wide actions" in error_line(capsys)
    task = "cosmos3_robot/Reach-v0"
    assert main([*out, "--dataset", f"{task}={reach32}"]) == 2
    assert f"dataset {reach32}: frames are 32x32 px, the variant trains on 64 px" in error_line(capsys)
    assert not (tmp_path / "b").exists()


def test_the_vae_folder_sets_the_latent_width(tmp_path):
    from cosmos3_robot.scripts.benchmark import build_parser, resolve

    vae = tmp_path / "vae"
    vae.mkdir()
    (vae / "config.json").write_text('{"z_dim": 24}')
    args = build_parser().parse_args(["policies", "--out", "o", "--variant", "full", "--vae", str(vae)])
    v, _ = resolve(args)
    assert v.latent_channels == 24 and v.model == "sim-small"


@pytest.mark.slow
def test_smoke_table_end_to_end_and_resumed(tmp_path, capsys):
    """All three arms on 2 recorded demonstrations, the shortest budget, 1 held-out episode each:
    a table row per arm, per-episode JSON, and a re-run that trains nothing more."""
    out = tmp_path / "bench"
    argv = ["benchmark", "policies", "--out", str(out), "--demos", "2", "--episodes", "1", "--minutes", "0.25",
            "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    res = json.loads((out / "results.json").read_text())
    assert [r["arm"] for r in res["rows"]] == ["ours", "act", "diffusion"]
    for r in res["rows"]:
        assert r["episodes"] == 1 and r["eval_seeds"] == [10_000, 10_000]
        assert r["train_steps"] >= 1 and 15 <= r["train_seconds"] < 60
        episodes = json.loads((out / "reach-v0" / r["arm"] / "rollout" / "results.json").read_text())
        assert episodes["episodes_detail"][0]["seed"] == 10_000
    assert "| cosmos3_robot/Reach-v0 | act |" in (out / "table.md").read_text()
    record = json.loads((out / "record.json").read_text())
    assert record["summary"] == res and record["rollouts"]["reach-v0/act"]["episodes"] == 1
    training = record["training"]
    assert [training[f"reach-v0/{a}"]["kind"] for a in ("act", "diffusion")] == ["act", "diffusion"]
    assert training["reach-v0/ours"]["last_train"]["step"] == res["rows"][0]["train_steps"]
    steps = [r["train_steps"] for r in res["rows"]]
    capsys.readouterr()
    assert main([*argv[:-5], "--episodes", "2", "--minutes", "0.25", "--no-progress"]) == 0
    again = json.loads((out / "results.json").read_text())
    assert [r["train_steps"] for r in again["rows"]] == steps  # the budget was spent: nothing retrained
    assert [r["episodes"] for r in again["rows"]] == [2, 2, 2]


def test_the_metaworld_variant_names_avdcs_tasks_and_only_the_camera_arm_needs_a_vae(tmp_path, capsys):
    from cosmos3_robot.envs.metaworld import AVDC_TASKS, TASKS
    from cosmos3_robot.scripts.benchmark import VARIANTS

    v = VARIANTS["metaworld"]
    assert v.tasks == [f"cosmos3_robot/MetaWorld-{t}" for t in TASKS]  # oracle: the registered suite
    assert v.tasks[:11] == [f"cosmos3_robot/MetaWorld-{t}" for t in AVDC_TASKS]
    assert v.arms == ("ours-estimator", "act", "diffusion")  # perception through the estimator: no VAE
    out = tmp_path / "bench"
    assert main(["benchmark", "policies", "--variant", "metaworld", "--arms", "ours", "--out", str(out)]) == 2
    assert "the `ours` arm needs a frozen video VAE" in error_line(capsys)


@pytest.mark.slow
def test_the_estimator_arm_end_to_end(tmp_path):
    """ours-estimator on 3 recorded Reach demonstrations: the estimator trains on 2 and is scored on the
    third, the policy reads the 4-D joint state + the 6-D scene state, and the rollout reads the scene
    state off the frame."""
    out = tmp_path / "bench"
    argv = ["benchmark", "policies", "--out", str(out), "--arms", "ours-estimator", "--demos", "3",
            "--episodes", "1", "--minutes", "0.5", "--estimator-minutes", "0.25", "--modes", "action_policy=1",
            "--ensemble", "0.01", "--state-noise", "0.1", "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    (r,) = json.loads((out / "results.json").read_text())["rows"]
    assert r["arm"] == "ours-estimator" and r["episodes"] == 1 and r["estimator_steps"] >= 1
    assert r["train_steps"] >= 1 and 25 <= r["train_seconds"] < 90  # estimator + policy: one budget
    run = out / "reach-v0" / "ours-estimator"
    training = json.loads((out / "record.json").read_text())["training"]["reach-v0/ours-estimator"]
    assert training["estimator"]["step"] == r["estimator_steps"]
    assert training["policy"]["last_train"]["step"] == r["train_steps"]
    rollout = json.loads((run / "rollout" / "results.json").read_text())
    assert rollout["config"]["estimator"] == str(run / "estimator" / "estimator")
    assert rollout["config"]["ensemble"] == 0.01  # re-planned every step
    assert rollout["episodes_detail"][0]["replans"] == rollout["episodes_detail"][0]["steps"]
    assert yaml.safe_load((run / "policy" / "config.yaml").read_text())["generator"]["state_noise"] == 0.1
    model = json.loads((run / "policy" / "model" / "config.json").read_text())
    assert model["meta"]["modes"] == {"action_policy": 1.0} and model["model"]["state_dim"] == 4 + 6


def test_an_option_before_another_tables_name_is_refused_not_run_as_policies(tmp_path, capsys):
    out = tmp_path / "bench"
    for table in ("imagination", "labels"):
        assert main(["benchmark", "--out", str(out), table]) == 2
        assert f"put the table first: cosmos3-robot benchmark {table}" in error_line(capsys)
    assert not out.exists()


def test_table_pools_each_arm_over_tasks_and_shows_the_instruction_pass():
    from cosmos3_robot.scripts.benchmark import table

    def r(task, arm, k, setup):
        return dict(task=task, arm=arm, episodes=50, successes=k, success_rate=k / 50, wilson95=(0.5, 0.9),
                    latency_p50_ms=41.2, latency_p95_ms=52.7, setup_p50_ms=setup, train_steps=10,
                    train_seconds=1200)  # fmt: skip

    text = table(
        [r("a", "ours", 40, 6.24), r("a", "act", 50, None), r("b", "ours", 30, 7.0), r("b", "act", 20, None)]
    )
    assert "| a | ours | 40/50 = 80% | 50%-90% | 41 / 53 | 6.2 | 10 / 20.0 |" in text
    assert "| a | act | 50/50 = 100% | 50%-90% | 41 / 53 | n/a | 10 / 20.0 |" in text
    # 70 of 100: Wilson 95 % = 60.4 %-78.1 % (p ± z·sqrt(p(1-p)/n + z²/4n²), over 1 + z²/n)
    assert "| all 2 tasks | ours | 70/100 = 70% | 60%-78% |" in text
    assert "| all 2 tasks | act | 70/100 = 70% | 60%-78% |" in text
    assert "all 1 tasks" not in table([r("a", "ours", 40, 6.2)])


def test_an_output_folder_from_before_the_new_options_still_resumes(tmp_path):
    """Its run.json has no state_noise / ensemble in the variant: the defaults leave them out of the
    identity, so the same command resumes it; setting either is another run."""
    import dataclasses

    from cosmos3_robot.scripts.benchmark import VARIANTS, variant_identity
    from cosmos3_robot.scripts.common import claim_output

    v = VARIANTS["metaworld"]
    old = {k: x for k, x in dataclasses.asdict(v).items() if k not in ("state_noise", "ensemble")}
    config = {"table": "policies", "variant": old | {"episodes": None}, "vae": None, "datasets": {}}
    claim_output(tmp_path / "run", "benchmark policies", config)
    now = {**config, "variant": variant_identity(v) | {"episodes": None}}
    assert claim_output(tmp_path / "run", "benchmark policies", now)["config"] == json.loads(
        json.dumps(config)
    )
    other = {
        **config,
        "variant": variant_identity(dataclasses.replace(v, ensemble=0.01)) | {"episodes": None},
    }
    with pytest.raises(ValueError, match="belongs to another run"):
        claim_output(tmp_path / "run", "benchmark policies", other)
