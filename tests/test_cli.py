"""The one `cosmos3-robot` command: help, dispatch, errors."""

from __future__ import annotations

import pytest

from cosmos3_robot.cli import COMMANDS, main


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)


def test_unknown_command_is_an_error(capsys):
    assert main(["fly"]) == 2
    assert "unknown command 'fly'" in capsys.readouterr().err


def test_info_prints_preset_sizes(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "nano" in out and "15165.3 M" in out and "64009.3 M" in out


@pytest.mark.parametrize(
    "name", ["demo", "record", "train-vae", "train", "import-diffusers", "import-qwen3vl"]
)
def test_subcommand_help_exits_cleanly(name, capsys):
    try:
        code = main([name, "--help"])
    except SystemExit as e:  # argparse commands exit from --help
        code = e.code
    assert code == 0
    out = capsys.readouterr().out.lower()
    assert "usage" in out or name in out
