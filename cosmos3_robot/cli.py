"""The one `cosmos3-robot` command. Subcommands are registered by name with lazy imports, so
`cosmos3-robot --help` stays fast and a missing optional dependency only affects its own command.

Each entry points at a function `main(argv: list[str]) -> int | None` in `cosmos3_robot/scripts/`
that parses its own arguments.

One error path for every command: an error prints one line, `cosmos3-robot COMMAND: error: ...`,
naming the problem and the fix, and exits 2 for bad input (a wrong option, a missing or unreadable
file, a model that does not fit the data) or 1 for a failure while running (the disk filled up, a
worker died). The traceback is printed only with `--debug` (anywhere on the command line) or
`COSMOS3_ROBOT_DEBUG=1`. Ctrl-C exits 130 after the command has kept what it finished.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings

# name -> ("module:function", one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("cosmos3_robot.scripts.demo:main", "run the embedded end-to-end demo on the tiny defaults"),
    "info": ("cosmos3_robot.scripts.demo:info_main", "print model presets and their parameter counts"),
    "record": ("cosmos3_robot.scripts.record:main", "roll out a scripted expert and write a LeRobot dataset"),
    "train-vae": ("cosmos3_robot.scripts.train_vae:main", "train the small video VAE on a LeRobot dataset"),
    "train-estimator": (
        "cosmos3_robot.scripts.train_estimator:main",
        "learn to read the scene state (e.g. the goal's position) off the frame",
    ),
    "train-labeller": (
        "cosmos3_robot.scripts.train_labeller:main",
        "learn the actions from the motion between frames, to label video (label --labeller)",
    ),
    "train": ("cosmos3_robot.scripts.train:main", "train the model (stages: reasoner, generator)"),
    "rollout": (
        "cosmos3_robot.scripts.rollout:main",
        "run a trained policy closed loop in an env; success, videos",
    ),
    "label": (
        "cosmos3_robot.scripts.label:main",
        "label action-free videos with actions (a new LeRobot dataset)",
    ),
    "evaluate": ("cosmos3_robot.scripts.evaluate:main", "predicted futures and actions against ground truth"),
    "train-baseline": (
        "cosmos3_robot.scripts.train_baseline:main",
        "train LeRobot's ACT or Diffusion Policy for a step or time budget",
    ),
    "benchmark": (
        "cosmos3_robot.scripts.benchmark:main",
        "tables: our policy against LeRobot's ACT and Diffusion Policy; the world model as a simulator",
    ),
    "train-probe": (
        "cosmos3_robot.scripts.train_probe:main",
        "teach a model to judge success in imagination",
    ),
    "export-bf16": (
        "cosmos3_robot.scripts.export_bf16:main",
        "a bf16 copy of a trained model, estimator or labeller folder, for shipping",
    ),
    "import-diffusers": (
        "cosmos3_robot.scripts.interop:import_diffusers_main",
        "import a Diffusers Cosmos3OmniTransformer folder",
    ),
    "export-diffusers": (
        "cosmos3_robot.scripts.interop:export_diffusers_main",
        "export our weights to the Diffusers Cosmos 3 layout",
    ),
    "import-qwen3vl": (
        "cosmos3_robot.scripts.interop:import_qwen3vl_main",
        "build both towers from a Qwen3-VL folder",
    ),
}

# Input problems (exit 2): the message names what to change. Everything else is a failure (exit 1).
USAGE_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError, KeyError, TypeError)


def _usage() -> str:
    width = max(len(n) for n in COMMANDS)
    lines = ["usage: cosmos3-robot [--debug] COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run `cosmos3-robot COMMAND --help` for the options of one command."]
    return "\n".join(lines)


def _one_line(e: BaseException) -> str:
    msg = str(e).strip() or type(e).__name__
    if isinstance(e, KeyError) and len(e.args) == 1:
        msg = f"missing key {e.args[0]!r}"
    return " ".join(msg.split())


def run_command(name: str, argv: list[str], debug: bool = False) -> int:
    """Run one subcommand through the shared error path; returns the exit code."""
    target, _ = COMMANDS[name]
    module_name, func_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
        return int(getattr(module, func_name)(argv) or 0)
    except SystemExit as e:  # argparse: usage errors (2) and --help (0) print their own text
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except KeyboardInterrupt:
        print(f"cosmos3-robot {name}: interrupted; what was finished is kept", file=sys.stderr)
        return 130
    except Exception as e:
        if debug:
            raise
        code = 2 if isinstance(e, USAGE_ERRORS) else 1
        kind = "error" if code == 2 else f"failed ({type(e).__name__})"
        print(f"cosmos3-robot {name}: {kind}: {_one_line(e)}", file=sys.stderr)
        print("  (run with --debug for the traceback)", file=sys.stderr)
        return code


def main(argv: list[str] | None = None) -> int:
    # Commands print their own progress; `datasets` would add a bar per saved LeRobot episode.
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    # ... which LeRobot's SuppressProgressBars then tries to re-enable, warning every time.
    warnings.filterwarnings("ignore", message="Cannot enable progress bars")
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("COSMOS3_ROBOT_DEBUG", "") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    if not argv:
        print(_usage(), file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"cosmos3-robot: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    return run_command(name, rest, debug)


if __name__ == "__main__":
    sys.exit(main())
