"""The task-head interface: one model, several action modes.

Axis glossary:  B batch · La Reasoner tokens · C latent channels · T latent frames · H, W latent grid ·
                Na action samples · A (padded) action width · Ns audio tokens

A mode differs from another only in which Generator tokens are clean (conditioning, σ = 0) and which
are noised (generated) — docs/design.md, "The three action modes":

    mode               clean                              generated
    forward_dynamics   observed frames + all actions      future frames (+ future audio)
    inverse_dynamics   all frames (+ audio)               actions
    policy             observed frames (+ instruction)    actions and future frames, independent σ
    action_policy      observed frames (+ instruction)    actions; future frames absent
    video              observed frames                    future frames; actions absent

Proprioceptive state (when the batch has it) is clean conditioning at its own timestamps in forward
dynamics and policy; inverse dynamics and video leave it out (they label / predict video alone).

A head implements `noisy_masks(batch)`; building the sequence, the loss and sampling are shared.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

import torch
from torch import Tensor

from cosmos3_robot.encoders.vision_inputs import reasoner_kwargs, select_images
from cosmos3_robot.flow import Sampler, SigmaSampler, add_noise, flow_loss, velocity_target
from cosmos3_robot.model import GenInput, MoT, ReasonerCache, series_stream, unpatchify, video_stream
from cosmos3_robot.tasks.sampling import Prompt, ReasonedPrompt, sample


@dataclass
class ClipBatch:
    """A model-ready batch of clips: token ids, VAE latents, normalised actions, audio latents.

    Times are real seconds from the start of the clip; `*_valid` flag padding.
    """

    input_ids: Tensor  # (B, La) right-padded prompt tokens
    lengths: Tensor  # (B,)
    video: Tensor | None = None  # (B, C, T, H, W) normalised VAE latents
    video_time: Tensor | None = None  # (B, T)
    video_valid: Tensor | None = None  # (B, T) bool
    obs_frames: int = 1  # leading latent frames that are observed (clean) in forward dynamics / policy
    action: Tensor | None = None  # (B, Na, A) normalised, zero-padded to A
    action_time: Tensor | None = None  # (B, Na)
    action_valid: Tensor | None = None  # (B, Na) bool
    action_mask: Tensor | None = None  # (B, A) bool: which action dimensions are real
    embodiment: Tensor | None = None  # (B,) long
    audio: Tensor | None = None  # (B, Ns, Ca)
    audio_time: Tensor | None = None  # (B, Ns)
    audio_valid: Tensor | None = None  # (B, Ns) bool
    state: Tensor | None = None  # (B, Ns_state, S) normalised proprioception at observed times, padded to S
    state_time: Tensor | None = None  # (B, Ns_state)
    state_mask: Tensor | None = None  # (B, S) bool: real state dims (set in training; None at inference)
    # With a frame shown to the Reasoner (one per sample, before the instruction): the ViT inputs
    # `pixel_values`, `image_grid_thw`, `vision_token_ids` (encoders/vision_inputs.image_text_prompts).
    images: dict[str, Any] = field(default_factory=dict)

    @property
    def batch(self) -> int:
        return self.input_ids.shape[0]

    @property
    def has_images(self) -> bool:
        return "pixel_values" in self.images

    def has(self, modality: str) -> bool:
        return getattr(self, modality) is not None

    def observed(self) -> ClipBatch:
        """The clips cut after their observed frames: later video frames leave the sequence, audio
        from the first of them on is marked invalid (actions and state are kept)."""
        if not self.has("video") or self.obs_frames >= self.video.shape[2]:
            return self
        k = self.obs_frames
        cut = replace(
            self,
            video=self.video[:, :, :k],
            video_time=self.video_time[:, :k],
            video_valid=None if self.video_valid is None else self.video_valid[:, :k],
        )
        if self.has("audio"):
            t0 = self.video_time[:, k]
            before = self.audio_time < t0[:, None] - 1e-6
            cut.audio_valid = before if self.audio_valid is None else self.audio_valid & before
        return cut

    def _map(self, fn) -> ClipBatch:
        """A copy with fn applied to every tensor field (ints such as obs_frames stay)."""
        return replace(
            self,
            **{
                f.name: fn(getattr(self, f.name))
                for f in fields(self)
                if isinstance(getattr(self, f.name), Tensor)
            },
        )

    def to(self, device) -> ClipBatch:
        images = {k: v.to(device) if isinstance(v, Tensor) else v for k, v in self.images.items()}
        return replace(self._map(lambda t: t.to(device)), images=images)

    def select(self, idx: Tensor) -> ClipBatch:
        """The sub-batch at indices idx (along B)."""
        return replace(self._map(lambda t: t[idx]), images=select_images(self.images, idx))

    def reasoner_inputs(self, model: MoT, vit=None) -> dict[str, Any]:
        """Keyword arguments of `model.reason(...)`: the prompt ids, with the ViT's tokens of the
        shown frame spliced in when the batch has one (then `vit` is required)."""
        return reasoner_kwargs(model, vit, self.input_ids, self.lengths, self.images)

    def prompt(self, model: MoT | None = None, vit=None) -> Prompt:
        """The Reasoner input; a batch with frames needs the model and its ViT to embed them."""
        if not self.has_images:
            return Prompt(self.input_ids, self.lengths)
        if model is None:
            raise ValueError("this batch shows the Reasoner a frame: call batch.prompt(model, vit)")
        kw = self.reasoner_inputs(model, vit)
        return Prompt(None, kw["lengths"], kw["inputs_embeds"], kw["positions"], kw["deepstack"])

    def drop_prompts(self, drop: Tensor, null_token: int) -> ClipBatch:
        """Classifier-free-guidance dropout of the rows `drop` (B,) bool: their instruction becomes the
        null prompt (one `null_token`). A shown frame stays (the null condition is "no instruction"), so
        every row keeps its image and its ViT inputs."""
        if not bool(drop.any()):
            return self
        ids, lengths = self.input_ids.clone(), self.lengths.clone()
        keep = torch.zeros_like(lengths)
        if self.has_images:  # keep <bos> <vision_start> <image>... <vision_end>
            end = self.images["vision_token_ids"].vision_end_token_id
            keep = (ids == end).long().argmax(dim=1) + 1
        pos = torch.arange(ids.shape[1])[None]
        cut = drop[:, None] & (pos >= keep[:, None])
        ids[cut] = null_token
        lengths = torch.where(drop, keep + 1, lengths)
        return replace(self, input_ids=ids, lengths=lengths)


class TaskHead:
    """Base class: subclasses set `name`, `needs`, `generates` and implement `noisy_masks`."""

    name: ClassVar[str] = ""
    needs: ClassVar[tuple[str, ...]] = ()  # modalities the batch must carry
    drops: ClassVar[tuple[str, ...]] = ()  # modalities left out of the sequence in this mode
    generates: ClassVar[tuple[str, ...]] = ()  # modalities with noised tokens (each gets its own σ)
    future_frames: ClassVar[bool] = True  # False: the frames after the observed ones leave the sequence

    def __init__(self, per_frame_sigma: bool = False):
        self.per_frame_sigma = per_frame_sigma  # diffusion forcing: an independent σ per latent frame

    # -- what is clean and what is noised ------------------------------------------------------
    def noisy_masks(self, batch: ClipBatch) -> dict[str, Tensor]:
        """{modality: (B, T) for video frames / (B, N) for audio and action tokens} bool."""
        raise NotImplementedError

    def loss_masks(self, batch: ClipBatch) -> dict[str, Tensor]:
        """{modality: (B, N) bool}: generated tokens that carry loss, beyond `valid` (default: all)."""
        return {}

    def check(self, batch: ClipBatch) -> None:
        missing = [m for m in self.needs if not batch.has(m)]
        if missing:
            raise ValueError(f"task {self.name!r} needs {missing} in the batch, which lacks them")
        if batch.has("video") and not 0 <= batch.obs_frames <= batch.video.shape[2]:
            raise ValueError(
                f"obs_frames={batch.obs_frames} is outside [0, {batch.video.shape[2]}] latent frames"
            )
        if not self.future_frames and batch.obs_frames < 1:
            raise ValueError(f"task {self.name!r} reads the observed frames: obs_frames must be >= 1, got 0")

    def in_sequence(self, batch: ClipBatch) -> ClipBatch:
        """The part of the clips this mode puts in the Generator sequence: all of it, or the observed
        frames alone in a mode without future frames."""
        return batch if self.future_frames else batch.observed()

    def _future(self, batch: ClipBatch) -> dict[str, Tensor]:
        """Frames after the observed ones, and the audio from their time on, are generated."""
        m = {"video": self._future_video(batch)}
        if batch.has("audio"):
            m["audio"] = self._future_audio(batch)
        return m

    def _future_video(self, batch: ClipBatch) -> Tensor:
        b, t = batch.video.shape[0], batch.video.shape[2]
        return (torch.arange(t, device=batch.video.device) >= batch.obs_frames)[None].expand(b, t)

    def _future_audio(self, batch: ClipBatch) -> Tensor:
        """Audio at or after the first generated frame's time is generated with it."""
        if batch.has("video") and batch.obs_frames < batch.video.shape[2]:
            t0 = batch.video_time[:, batch.obs_frames]
            return batch.audio_time >= t0[:, None] - 1e-6
        return torch.zeros_like(batch.audio_time, dtype=torch.bool)

    # -- the Generator sequence ---------------------------------------------------------------
    def streams(
        self,
        batch: ClipBatch,
        latents: dict[str, Tensor] | None = None,
        sigma: dict[str, Tensor] | None = None,
    ) -> GenInput:
        """The Generator input of this mode. latents overrides the clean latents (video as (B,C,T,H,W));
        sigma {modality: (B,) or (B, T)/(B, N)} gives noisy tokens their level (default 0)."""
        self.check(batch)
        batch = self.in_sequence(batch)
        if not self.future_frames and "video" in (latents or {}):
            latents = {**latents, "video": latents["video"][:, :, : batch.video.shape[2]]}
        latents, sigma, noisy = latents or {}, sigma or {}, self.noisy_masks(batch)
        out = {}
        if batch.has("video") and "video" not in self.drops:
            nv = noisy.get("video", torch.zeros(batch.video.shape[0], batch.video.shape[2], dtype=torch.bool))
            out["video"] = video_stream(
                latents.get("video", batch.video),
                batch.video_time,
                nv,
                sigma.get("video"),
                frame_valid=batch.video_valid,
            )
        if batch.has("audio") and "audio" not in self.drops:
            na = noisy.get("audio", torch.zeros_like(batch.audio_time, dtype=torch.bool))
            out["audio"] = series_stream(
                latents.get("audio", batch.audio),
                batch.audio_time,
                na,
                sigma.get("audio"),
                valid=batch.audio_valid,
            )
        if batch.has("action") and "action" not in self.drops:
            nact = noisy.get("action", torch.zeros_like(batch.action_time, dtype=torch.bool))
            out["action"] = series_stream(
                latents.get("action", batch.action),
                batch.action_time,
                nact,
                sigma.get("action"),
                valid=batch.action_valid,
                embodiment=batch.embodiment,
            )
        if batch.has("state") and "state" not in self.drops:
            out["state"] = series_stream(
                batch.state,
                batch.state_time,
                torch.zeros_like(batch.state_time, dtype=torch.bool),
                embodiment=batch.embodiment,
            )
        return GenInput(**out)

    # -- training -----------------------------------------------------------------------------
    def draw_sigma(
        self, batch: ClipBatch, sampler: SigmaSampler, generator: torch.Generator | None
    ) -> dict[str, Tensor]:
        b = batch.batch
        dev = batch.input_ids.device
        sig = {}
        for m in self.generates:
            if not batch.has(m):
                continue
            if m == "video" and self.per_frame_sigma:
                sig[m] = sampler((b, batch.video.shape[2]), generator).to(dev)
            else:
                sig[m] = sampler((b,), generator).to(dev)
        return sig

    def loss(
        self,
        model: MoT,
        batch: ClipBatch,
        cache: ReasonerCache,
        sigma_sampler: SigmaSampler,
        generator: torch.Generator | None = None,
        weights: dict[str, float] | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Flow-matching loss of this mode: noise the generated tokens, predict their velocity."""
        sig = self.draw_sigma(batch, sigma_sampler, generator)
        noised = self.streams(batch, sigma=sig)  # clean latents, with σ on the tokens to be noised
        x, target = {}, {}
        for name, s in noised.items():
            eps = torch.randn(s.latents.shape, generator=generator).to(s.latents)
            x[name] = torch.where(s.noisy[..., None], add_noise(s.latents, eps, s.sigma), s.latents)
            target[name] = velocity_target(s.latents, eps)
        gen = noised.replace_latents(x)
        pred = model.denoise(cache, gen)
        noisy = {n: s.noisy for n, s in gen.items()}
        valid = {n: s.valid for n, s in gen.items()}
        for n, keep in self.loss_masks(batch).items():
            valid[n] = keep if valid.get(n) is None else valid[n] & keep
        cmask = {"action": batch.action_mask} if batch.action_mask is not None else None
        # A mode may generate nothing in a batch (e.g. a clip with no future frame): zero loss.
        if not any(bool(v.any()) for v in noisy.values()):
            zero = sum(p.sum() * 0 for p in pred.values())
            return zero, {}
        return flow_loss(
            {n: pred[n] for n in noisy if bool(noisy[n].any())},
            target,
            noisy,
            valid,
            weights,
            cmask,
        )

    # -- inference ----------------------------------------------------------------------------
    @torch.no_grad()
    def sample(
        self,
        model: MoT,
        batch: ClipBatch,
        sampler: Sampler,
        num_steps: int = 10,
        *,
        shift: float = 1.0,
        guidance: float = 1.0,
        null_prompt: Prompt | ReasonedPrompt | None = None,
        generator: torch.Generator | None = None,
        reuse_cache: bool = True,
        prompt: ReasonedPrompt | None = None,
        noise_scale: float = 1.0,
    ) -> dict[str, Tensor]:
        """Generate this mode's noised modalities. Returns {modality: latents} with video as
        (B, C, T, H, W) (observed frames copied through; only those in a mode without future frames),
        actions (B, Na, A), audio (B, Ns, Ca).

        prompt: the batch's instruction already reasoned (`batch.prompt().reasoned(model)`), when
        several requests share it; None runs the Reasoner on `batch.prompt()`."""
        gen = self.streams(batch)
        out = sample(
            model,
            gen,
            sampler,
            batch.prompt() if prompt is None else prompt,
            num_steps=num_steps,
            shift=shift,
            guidance=guidance,
            null_prompt=null_prompt,
            generator=generator,
            reuse_cache=reuse_cache,
            noise_scale=noise_scale,
        )
        res = {}
        for name in out:
            if name == "video":
                _, c, t, h, w = self.in_sequence(batch).video.shape
                res[name] = unpatchify(out[name], (c, t, h, w), model.config.patch_size)
            else:
                res[name] = out[name]
        return res
