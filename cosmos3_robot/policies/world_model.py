"""A trained world model with everything it needs at the env boundary.

The MoT works on VAE latents, normalised actions and token ids; an env gives pixels and wants raw
actions. `WorldModel` holds the frozen VAE, the tokenizer and the action transform that travelled
with the checkpoint, and the clip geometry it was trained on, and turns one into the other.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from cosmos3_robot.encoders.vae import VideoVAE, load_vae
from cosmos3_robot.encoders.vision_inputs import image_text_prompts
from cosmos3_robot.encoders.vit import ViT
from cosmos3_robot.files import read_json
from cosmos3_robot.infra.cpu_pack import pack_for_cpu
from cosmos3_robot.interop.checkpoint import load_model
from cosmos3_robot.model import MoT
from cosmos3_robot.processors.actions import ActionTransform, pad_actions
from cosmos3_robot.processors.data_state import OBS_KEYS, DataState
from cosmos3_robot.processors.frames import resize_frames, to_uint8
from cosmos3_robot.processors.geometry import ClipGeometry
from cosmos3_robot.processors.normalize import key_parts
from cosmos3_robot.processors.tokenizers import load_tokenizer
from cosmos3_robot.tasks import ClipBatch
from cosmos3_robot.tasks.sampling import Prompt, ReasonedPrompt

POLICY_MODES = ("policy", "action_policy")  # the task heads a closed-loop policy can sample


class WorldModel:
    """A trained MoT with its frozen VAE, tokenizer, action transform and clip geometry."""

    def __init__(
        self,
        model: MoT,
        vae: VideoVAE,
        data_state: DataState,
        vit: ViT | None = None,
        modes: dict[str, float] | None = None,
    ):
        if data_state.geometry is None:
            raise ValueError(
                f"a world model needs a Generator-stage data state with clip geometry; this one is from "
                f"the {data_state.stage!r} stage"
            )
        if vae.latent_channels != model.config.latent_channels:
            raise ValueError(
                f"the VAE has {vae.latent_channels} latent channels but the model expects "
                f"{model.config.latent_channels}; give the VAE the model was trained with"
            )
        # Inference only: Linear weights packed once for the CPU kernels (a no-op on other devices).
        self.model = pack_for_cpu(model.eval())
        self.vae = vae.eval()
        self.data_state = data_state
        self.trained_modes = dict(modes) if modes else None  # generator.modes of its training; None = unknown
        self._warned_tasks: set[str] = set()
        self.geometry: ClipGeometry = data_state.geometry
        self.tokenizer = load_tokenizer(data_state.tokenizer)
        at = data_state.action_transform
        self.actions = ActionTransform.from_state_dict(at) if at else None
        st = data_state.state_transform
        self.state = ActionTransform.from_state_dict(st) if st else None
        if (self.state is None) != (model.config.state_dim is None):
            raise ValueError(
                f"the model's state_dim is {model.config.state_dim} but its data state "
                f"{'has no' if self.state is None else 'has a'} state transform; export the model again"
            )
        # A model trained with `reasoner_frame` shows the Reasoner the first observed frame through its ViT.
        shown = data_state.details.get("reasoner_frame")
        self.shown_size: int | None = shown["vit_image_size"] if shown else None
        if self.shown_size is not None and vit is None:
            raise ValueError(
                "this model was trained showing the Reasoner each clip's frame through a ViT, but no ViT was "
                "given: load the model folder with its vit.safetensors (WorldModel.from_folder does)"
            )
        self.vit = vit.eval() if vit is not None else None
        self.encode_seconds = 0.0  # time spent in the VAE encoder (for throughput reports)
        self.compiled: str | None = None  # the linear dtype of `compile`, once called

    @classmethod
    def from_folder(cls, folder: str | Path, vae: VideoVAE | None = None) -> WorldModel:
        """A trained model folder (`Trainer.export`: weights, config, data_state.json). Without `vae`,
        the VAE its data state names (a relative VAE path is read from the current directory, then
        from beside the model folder)."""
        folder = Path(folder)
        if not folder.is_dir():
            raise FileNotFoundError(
                f"model folder {folder} does not exist; give the model/ folder that `cosmos3-robot train` writes "
                "(OUT/model)"
            )
        state_path = folder / "data_state.json"
        if not state_path.exists():
            raise FileNotFoundError(
                f"{state_path} is missing: a world model needs the data state its trainer exported "
                "(normalisation stats, tokenizer, clip geometry, VAE)"
            )
        state = DataState.from_dict(read_json(state_path), source=str(state_path))
        model, vit, meta = load_model(folder, dtype=torch.float32)  # a bf16 export is upcast for the CPU
        if vae is None:
            ref = state.vae
            if ref is None:
                raise ValueError(f"{state_path} names no VAE; pass vae=VideoVAE.from_pretrained(...)")
            path = ref.path
            if path is not None and not Path(path).exists() and (folder / path).exists():
                path = str(folder / path)
            vae = load_vae(path, model.config.latent_channels, preset=ref.preset or "tiny", seed=ref.seed)
        return cls(model, vae, state, vit, meta.get("modes"))

    def set_linear_dtype(self, name: str) -> None:
        """Run the model's packed products in `name` ("fp32" or "bf16"; `infra/cpu_pack.py`)."""
        pack_for_cpu(self.model, self._linear_dtype(name))

    def compile(self, name: str = "fp32") -> None:
        """Run what a plan runs compiled by `torch.compile` (`infra/compiled.py`): the Generator's
        denoising step, its products in `name` ("fp32" or "bf16"), and the VAE's encoder in float32.
        Inference only: the weights are frozen into the compiled programs."""
        from cosmos3_robot.infra.compiled import compile_encoder, compile_generator

        compile_generator(self.model, self._linear_dtype(name))
        compile_encoder(self.vae)
        self.compiled = name

    def _linear_dtype(self, name: str) -> torch.dtype | None:
        """The dtype of the linear dtype `name`; refused once the Generator is compiled (its weights
        are frozen into the compiled program, so neither re-packing nor compiling again applies)."""
        from cosmos3_robot.infra.cpu_pack import LINEAR_DTYPES

        if name not in LINEAR_DTYPES:
            raise ValueError(f"the linear dtype must be one of {', '.join(LINEAR_DTYPES)}, got {name!r}")
        if self.compiled is not None:
            raise ValueError(
                f"the Generator is compiled already ({self.compiled}) with its weights frozen: load the model "
                "again to change how its products run"
            )
        return LINEAR_DTYPES[name]

    @property
    def policy_mode(self) -> str:
        """The mode a policy samples: `policy` (actions and future frames), or `action_policy` (actions
        alone) for a model trained on that and not on `policy`. A folder that records no modes: `policy`."""
        m = self.trained_modes or {}
        return "action_policy" if m.get("policy", 0) <= 0 < m.get("action_policy", 0) else "policy"

    def check_policy_mode(self, mode: str) -> None:
        """Refuse a policy mode that is not one, or that the model never trained on."""
        if mode not in POLICY_MODES:
            raise ValueError(f"policy mode {mode!r}: choose one of {', '.join(POLICY_MODES)}")
        if self.trained_modes is not None and self.trained_modes.get(mode, 0) <= 0:
            trained = ", ".join(f"{k} {v:g}" for k, v in sorted(self.trained_modes.items()) if v > 0)
            raise ValueError(
                f"the model never trained in mode {mode!r} (its generator.modes: {trained}); use "
                f"{self.policy_mode!r}, or train with generator.modes including {mode}"
            )

    @property
    def embodiment(self) -> int:
        if self.actions is None:
            raise ValueError("this world model was trained without actions")
        return self.actions.embodiment_id

    @property
    def env_id(self) -> str | None:
        """The env whose recordings the model was trained on (the dataset's robot_type), if known."""
        return (self.data_state.details.get("dataset") or {}).get("robot_type")

    def check_env(self, env_id: str) -> None:
        """Raise unless the model was trained on `env_id` (or its env is not recorded)."""
        if self.env_id is not None and self.env_id != env_id:
            raise ValueError(
                f"the model was trained on recordings of {self.env_id}, not {env_id}; roll it out in "
                f"{self.env_id}, or train a model on {env_id}"
            )

    @torch.no_grad()
    def encode_frames(self, frames: Tensor, resize: bool = False) -> Tensor:
        """uint8 (B, T, H, W, 3) or (B, T, 3, H, W) RGB -> latents (B, C, T_lat, h, w). Frames must be
        square at the model's size (`resize=True` resizes square frames of another size)."""
        frames = torch.as_tensor(frames)
        if frames.dtype != torch.uint8:
            raise ValueError(f"frames must be uint8 RGB images (0..255), got dtype {frames.dtype}")
        if frames.ndim != 5:
            raise ValueError(
                f"frames must be (B, T, H, W, 3) or (B, T, 3, H, W), got shape {tuple(frames.shape)}"
            )
        if frames.shape[-1] in (3, 4) and frames.shape[2] != 3:
            if frames.shape[-1] == 4:
                raise ValueError("frames have 4 channels (RGBA); give RGB frames (drop the alpha channel)")
            frames = frames.permute(0, 1, 4, 2, 3)
        if frames.shape[2] != 3:
            raise ValueError(f"frames must have 3 colour channels (RGB), got shape {tuple(frames.shape)}")
        size = self.geometry.image_size
        h, w = frames.shape[-2:]
        if (h, w) != (size, size):
            if h != w or not resize:
                raise ValueError(
                    f"frames are {h}x{w} px but the model was trained on {size}x{size}; render or crop them "
                    f"to {size}x{size}" + ("" if h != w else " (or pass resize=True / --resize)")
                )
            frames = torch.stack([resize_frames(f, size) for f in frames])
        t0 = time.perf_counter()
        latents = self.vae.encode(frames.float() / 255.0)
        self.encode_seconds += time.perf_counter() - t0
        return latents

    @torch.no_grad()
    def decode_latents(self, latents: Tensor) -> Tensor:
        """latents (B, C, T_lat, h, w) -> uint8 frames (B, T, 3, H, W)."""
        if latents.ndim != 5 or latents.shape[1] != self.vae.latent_channels:
            raise ValueError(
                f"latents must be (B, {self.vae.latent_channels}, T_lat, h, w), got shape {tuple(latents.shape)}"
            )
        if not bool(torch.isfinite(latents).all()):
            raise ValueError(
                "latents hold NaN/inf: the model that produced them is broken (check its weights)"
            )
        return to_uint8(self.vae.decode(latents))

    def prompt(self, texts: list[str]) -> tuple[Tensor, Tensor]:
        self.check_texts(texts)
        return self.tokenizer.batch_encode(texts)

    def check_texts(self, texts: list[str]) -> None:
        """Refuse a task text that is not a string; warn about one the model never saw (`check_tasks`)."""
        bad = [t for t in texts if not isinstance(t, str)]
        if bad:
            raise ValueError(f"task texts must be strings, got {bad!r} (use '' for no instruction)")
        self.check_tasks(texts)

    @property
    def tasks(self) -> list[str] | None:
        """The instructions of the dataset the model was trained on (None for models exported before
        they were recorded)."""
        return (self.data_state.details.get("dataset") or {}).get("tasks")

    def check_tasks(self, texts: list[str]) -> None:
        """Warn, once per text, about an instruction the model never saw in training: it still runs
        (an instruction is free text), but nothing measured says what the model does with it."""
        known = self.tasks
        if known is None:
            return
        for text in dict.fromkeys(texts):
            if text and text not in known and text not in self._warned_tasks:
                self._warned_tasks.add(text)
                shown = "; ".join(repr(t) for t in known[:8]) + ("; ..." if len(known) > 8 else "")
                warnings.warn(
                    f"instruction {text!r} is not one the model was trained on; it runs on it untested. "
                    f"The training data had {len(known)}: {shown}",
                    UserWarning,
                    stacklevel=3,
                )

    @property
    def reads_frames(self) -> bool:
        """Whether the Reasoner is shown the first observed frame (then `clip_batch` needs `frames`)."""
        return self.shown_size is not None

    def prompt_fields(self, tasks: list[str], frames) -> dict:
        """ClipBatch prompt fields: the instructions, after the frames (uint8 (B, H, W, 3) or (B, 3, H, W))
        when the model reads frames."""
        if not self.reads_frames:
            ids, lengths = self.prompt(tasks)
            return {"input_ids": ids, "lengths": lengths}
        if frames is None or len(frames) != len(tasks):
            raise ValueError(
                "this model shows its Reasoner the first observed frame: pass frames= (uint8, one (H, W, 3) "
                f"frame per task, {len(tasks)} here) to clip_batch"
            )
        self.check_texts(tasks)
        ids, lengths, images = image_text_prompts(
            self.tokenizer, tasks, list(torch.as_tensor(np.asarray(frames))), self.vit.config, self.shown_size
        )
        return {"input_ids": ids, "lengths": lengths, "images": images}

    def reasoned(self, batch: ClipBatch) -> ReasonedPrompt:
        """The batch's Reasoner pass (its frames through the ViT, if shown), for one or more requests."""
        return batch.prompt(self.model, self.vit).reasoned(self.model)

    def reasoned_text(self, task: str) -> ReasonedPrompt:
        """The Reasoner pass of one instruction alone, before any frame is seen: what `reasoned` gives
        for a batch of that task, for a model whose Reasoner reads only the text."""
        if self.reads_frames:
            raise ValueError(
                "this model shows its Reasoner the observed frame: its Reasoner pass needs the frame "
                "(use reasoned(clip_batch(..., frames=...)))"
            )
        ids, lengths = self.prompt([task])
        return Prompt(ids, lengths).reasoned(self.model)

    @property
    def needs_state(self) -> bool:
        """Whether policy and forward dynamics are conditioned on proprioceptive state."""
        return self.state is not None

    @property
    def state_obs_keys(self) -> list[str]:
        """The env observation keys the model's state comes from, concatenated in this order
        (`agent_pos` for `observation.state`, `environment_state` for `observation.environment_state`,
        both for the joined key); [] when not state-conditioned."""
        return [] if self.state is None else [OBS_KEYS.get(k, k) for k in key_parts(self.state.key)]

    def obs_state(self, obs: dict) -> np.ndarray | None:
        """The raw state (S,) of one env observation (its `state_obs_keys` concatenated); None when not
        state-conditioned. The caller checks the keys are there (`runners.check_obs`)."""
        if self.state is None:
            return None
        return np.concatenate([np.asarray(obs[k], dtype=np.float32).reshape(-1) for k in self.state_obs_keys])

    def state_batch(self, state, batch: int) -> tuple[Tensor, Tensor]:
        """Raw state (B, S) at the observed frame (env units, `self.obs_state(obs)`) -> normalised
        (B, 1, width) and its time (B, 1)."""
        want = (batch, self.state.dim)
        s = raw_input(state, want, "state", f"(batch, state dims) = {want} (the model was trained on "
                      f"{self.state.key} of {self.state.dim} dims)")  # fmt: skip
        norm, _ = self.state.encode(s[:, None])
        return norm, torch.zeros(batch, 1)

    def clip_batch(
        self,
        tasks: list[str],
        latents: Tensor,
        actions: Tensor | None = None,
        obs_frames: int | None = None,
        state=None,
        frames=None,
    ) -> ClipBatch:
        """A full-length clip batch. `latents` (B, C, T, h, w) may hold fewer than T_lat frames: the rest
        are zero placeholders (they are generated). `actions` raw (B, Na, A) or None = placeholders.
        `state` raw (B, S) at the first frame: required by a state-conditioned model for policy and
        forward dynamics, ignored by inverse dynamics. `frames` uint8 (B, H, W, 3): the first observed
        frame of each clip, required by a model that shows it to the Reasoner (`reads_frames`)."""
        g = self.geometry
        b, c, t, h, w = latents.shape
        if t < g.latent_frames:
            latents = torch.cat([latents, latents.new_zeros(b, c, g.latent_frames - t, h, w)], dim=2)
        batch = ClipBatch(
            **self.prompt_fields(tasks, frames),
            video=latents,
            video_time=g.video_time().expand(b, -1).clone(),
            video_valid=torch.ones(b, g.latent_frames, dtype=torch.bool),
            obs_frames=g.obs_frames if obs_frames is None else obs_frames,
        )
        if self.actions is not None:
            if actions is None:  # placeholders (the actions are generated): zeros, with the real mask
                norm, mask = pad_actions(torch.zeros(b, g.num_actions, self.actions.dim), self.actions.width)
            else:
                want = (b, g.num_actions, self.actions.dim)
                actions = raw_input(
                    actions, want, "actions", f"(batch, actions per clip, action dims) = {want} in env units"
                )
                norm, mask = self.actions.encode(actions)
            batch.action = norm
            batch.action_time = g.action_time().expand(b, -1).clone()
            batch.action_valid = torch.ones(b, g.num_actions, dtype=torch.bool)
            batch.action_mask = mask.reshape(1, -1).expand(b, -1).clone()
            batch.embodiment = torch.full((b,), self.embodiment, dtype=torch.long)
        if self.state is not None and state is not None:
            batch.state, batch.state_time = self.state_batch(state, b)
        return batch

    def require_state(self, state, what: str) -> None:
        """Raise, naming what to pass, when a state-conditioned model is asked for `what` without state."""
        if self.needs_state and state is None:
            raise ValueError(
                f"this model is conditioned on proprioceptive state ({self.state.key}, {self.state.dim} dims): "
                f"{what} needs it (an env observation's {' + '.join(map(repr, self.state_obs_keys))})"
            )

    def raw_actions(self, normalised: Tensor) -> np.ndarray:
        """(B, Na, W) model actions -> (B, Na, A) in the env's units."""
        return self.actions.decode(normalised).cpu().numpy()


def raw_input(value, want: tuple[int, ...], name: str, expected: str) -> Tensor:
    """`value` (env units, array-like) as float32, refused unless of shape `want` and finite."""
    x = torch.as_tensor(np.asarray(value, dtype=np.float32))
    if tuple(x.shape) != want:
        raise ValueError(f"{name} must be {expected}, got shape {tuple(x.shape)}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} must be finite numbers, got NaN/inf")
    return x
