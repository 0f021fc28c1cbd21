"""What a checkpoint needs to become a policy, saved beside the weights as `data_state.json`.

The MoT works on VAE latents, normalised actions and token ids; an env gives pixels and wants raw
actions. A trainer's data pipeline writes a `DataState`: the tokenizer, the action transform, the
clip geometry and the VAE it trained with. `policies.WorldModel` reads it back, with no import from
`training/`. Anything else the pipeline records (its config, the episode split, the latent cache)
travels in `details`, so that a resumed run can check it is reading the same data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cosmos3_robot.processors.geometry import ClipGeometry

FORMAT_VERSION = 1
# Dataset key (LeRobot's names, as `record` writes them) -> the env observation key it comes from.
OBS_KEYS = {"observation.image": "pixels", "observation.state": "agent_pos",
            "observation.environment_state": "environment_state"}  # fmt: skip


@dataclass(frozen=True)
class VAEReference:
    """The frozen VAE a model was trained on: a saved folder, or the seeded random VAE of a preset."""

    path: str | None = None
    preset: str | None = None  # used when path is None
    seed: int = 0
    fingerprint: str | None = None  # hash of the weights the model saw (see latent_cache)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "preset": self.preset, "seed": self.seed, "fingerprint": self.fingerprint}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VAEReference:
        return cls(d.get("path"), d.get("preset"), int(d.get("seed", 0)), d.get("fingerprint"))


@dataclass(frozen=True)
class DataState:
    stage: str  # "generator" or "reasoner"
    tokenizer: dict[str, Any]  # `Tokenizer.state()`
    geometry: ClipGeometry | None = None  # generator stage only
    action_transform: dict[str, Any] | None = None  # `ActionTransform.state_dict()`; None = no actions
    vae: VAEReference | None = None  # generator stage only
    # `ActionTransform.state_dict()` of `observation.state`; None = not state-conditioned
    state_transform: dict[str, Any] | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "stage": self.stage,
            "tokenizer": self.tokenizer,
            "geometry": None if self.geometry is None else self.geometry.to_dict(),
            "action_transform": self.action_transform,
            "vae": None if self.vae is None else self.vae.to_dict(),
            "state_transform": self.state_transform,
            "details": self.details,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "data state") -> DataState:
        version = d.get("format_version")
        if version != FORMAT_VERSION:
            raise ValueError(
                f"{source}: format_version {version!r}, this cosmos3-robot reads version {FORMAT_VERSION}; "
                + (
                    "it was written by a newer cosmos3-robot: upgrade"
                    if isinstance(version, int) and version > FORMAT_VERSION
                    else "export the model again with this version's trainer"
                )
            )
        missing = [k for k in ("stage", "tokenizer") if k not in d]
        if missing:
            raise ValueError(f"{source}: missing {missing}; export the model again")
        return cls(
            stage=d["stage"],
            tokenizer=d["tokenizer"],
            geometry=None if d.get("geometry") is None else ClipGeometry.from_dict(d["geometry"]),
            action_transform=d.get("action_transform"),
            vae=None if d.get("vae") is None else VAEReference.from_dict(d["vae"]),
            state_transform=d.get("state_transform"),
            details=dict(d.get("details") or {}),
        )
