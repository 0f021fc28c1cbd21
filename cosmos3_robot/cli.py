"""The one `cosmos3-robot` command. Subcommands are registered by name with lazy imports, so
`cosmos3-robot --help` stays fast and a missing optional dependency only affects its own command.

Each entry points at a function `main(argv: list[str]) -> int | None` that parses its own arguments.
"""

from __future__ import annotations

import importlib
import sys

# name -> ("module:function", one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("cosmos3_robot.scripts.demo:main", "run the embedded end-to-end demo on the tiny defaults"),
    "info": ("cosmos3_robot.scripts.demo:info_main", "print model presets and their parameter counts"),
    "record": ("cosmos3_robot.scripts.record:main", "roll out a scripted expert and write a LeRobot dataset"),
    "train-vae": ("cosmos3_robot.scripts.train_vae:main", "train the small video VAE on a LeRobot dataset"),
    "train": ("cosmos3_robot.scripts.train:main", "train the model (stages: reasoner, generator)"),
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


def _usage() -> str:
    width = max(len(n) for n in COMMANDS)
    lines = ["usage: cosmos3-robot COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run `cosmos3-robot COMMAND --help` for the options of one command."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"cosmos3-robot: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    target, _ = COMMANDS[name]
    module_name, func_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("cosmos3_robot"):
            print(
                f"cosmos3-robot: command {name!r} is not available in this build ({e.name} missing)",
                file=sys.stderr,
            )
            return 2
        raise
    result = getattr(module, func_name)(rest)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
