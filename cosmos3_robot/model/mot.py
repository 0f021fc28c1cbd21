"""The Mixture-of-Transformers world model.

Axis glossary:  B batch · La Reasoner tokens · Ld Generator tokens · C hidden width · V vocabulary ·
                G kv heads · D head_dim

    input_ids ─► embed ─► [ layer 0 .. n: Reasoner half ] ─► norm ─► lm_head ─► logits
                                   │ per-layer (K, V)  =  ReasonerCache (read-only)
                                   ▼
    GenInput ─► latent in-projections + modality/noise embeddings
                 ─► [ layer 0 .. n: Generator half, reads the cache ] ─► norm_dm ─► out-projections
                 ─► velocities per stream

Entry points:
  `reason`   — Reasoner only (a reasoning request never reads a Generator weight); returns logits
               and the cache the Generator reads.
  `denoise`  — Generator only, given a cache: one velocity prediction, each token at its own σ.
  `plan_steps` / `denoise_step` / `euler_step` — the same for a sampler: a request's fixed parts are
               computed once.
  `forward`  — `reason` then `denoise`: the generation forward used for training.
  `decode`   — incremental causal decoding of text with a KV cache (`TextCache.start`).

Noise-level conditioning follows Cosmos 3: a timestep embedding of σ is added to every *noisy*
token at the input (clean tokens get none); audio, action and state tokens also get a learned
modality embedding (state is clean conditioning: no output). The 2x2 patch merge of video latents
happens in `sequence.patchify`, the linear part in `video_in`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from cosmos3_robot.model.block import MoTBlock
from cosmos3_robot.model.caches import ReasonerCache, ReasonerOutput, StepPlan, TextCache
from cosmos3_robot.model.config import ModelConfig
from cosmos3_robot.model.layers import EmbodimentLinear, RMSNorm, TimestepEmbedder
from cosmos3_robot.model.request import SamplingRequest, euler_update
from cosmos3_robot.model.rope import rope_cos_sin, rotation_table, text_positions, time_positions
from cosmos3_robot.model.sequence import GenInput, Stream


class MoT(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        ar, dm, attn = config.reasoner, config.generator, config.attention
        self.embed_tokens = nn.Embedding(config.vocab_size, ar.hidden_size)
        self.layers = nn.ModuleList([MoTBlock(ar, dm, attn) for _ in range(attn.num_layers)])
        self.norm = RMSNorm(ar.hidden_size, ar.rms_norm_eps)
        self.lm_head = nn.Linear(ar.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        if dm is not None:
            c = dm.hidden_size
            self.norm_dm = RMSNorm(c, dm.rms_norm_eps)
            self.time_embed = TimestepEmbedder(config.timestep_embed_dim, c)
            self.video_in = nn.Linear(config.patch_dim, c)
            self.video_out = nn.Linear(c, config.patch_dim)
            if config.audio_dim is not None:
                self.audio_in = nn.Linear(config.audio_dim, c)
                self.audio_out = nn.Linear(c, config.audio_dim)
                self.audio_embed = nn.Parameter(torch.zeros(c))
            if config.action_dim is not None:
                self.action_in = EmbodimentLinear(config.action_dim, c, config.num_embodiments)
                self.action_out = EmbodimentLinear(c, config.action_dim, config.num_embodiments)
                self.action_embed = nn.Parameter(torch.zeros(c))
            if config.state_dim is not None:  # conditioning only: no output projection
                self.state_in = EmbodimentLinear(config.state_dim, c, config.num_embodiments)
                self.state_embed = nn.Parameter(torch.zeros(c))

    # ------------------------------------------------------------------------------------------
    # Reasoner
    # ------------------------------------------------------------------------------------------

    def _rope(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """positions (B, 3, L) -> the `rotation_table` (B, L, 1, D) every layer applies."""
        a = self.config.attention
        return rotation_table(*rope_cos_sin(positions, a.head_dim, a.rope_theta, a.rope_sections))

    def reason(
        self,
        input_ids: Tensor | None = None,
        lengths: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        positions: Tensor | None = None,
        deepstack: list[Tensor] | None = None,
        logits: bool = True,
        keep_text_kv: bool = False,
    ) -> ReasonerOutput:
        """Run the Reasoner alone.

        input_ids (B, La) right-padded, lengths (B,) real lengths (None = all La); or inputs_embeds
        (B, La, C) (e.g. text with ViT tokens spliced in). positions (B, 3, La): mRoPE positions
        (default (i, i, i)). deepstack: tensors (B, La, C) added to the hidden state after layers
        0, 1, ... (Qwen3-VL's DeepStack injection of intermediate ViT features).
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("give exactly one of input_ids or inputs_embeds")
        if input_ids is not None:
            if input_ids.ndim != 2:
                raise ValueError(f"input_ids must have shape (B, La), got {tuple(input_ids.shape)}")
            if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= self.config.vocab_size):
                raise ValueError(f"input_ids must lie in [0, vocab_size={self.config.vocab_size})")
            x = self.embed_tokens(input_ids)
        else:
            x = inputs_embeds
        b, la = x.shape[:2]
        valid = None
        if lengths is not None:
            if lengths.shape != (b,) or (lengths < 1).any() or (lengths > la).any():
                raise ValueError(f"lengths must be a (B,) = ({b},) tensor with values in [1, {la}]")
            valid = torch.arange(la, device=x.device)[None, :] < lengths[:, None]
            if bool(valid.all()):
                valid = None
        if positions is None:
            positions = text_positions(b, la, device=x.device)
        elif positions.shape != (b, 3, la):
            raise ValueError(
                f"positions must have shape (B, 3, La) = {(b, 3, la)}, got {tuple(positions.shape)}"
            )
        rope = self._rope(positions)
        kv, text_kv = [], []
        for i, layer in enumerate(self.layers):
            x, kv_dm, kv_self = layer.reason(x, rope)
            kv.append(kv_dm)
            if keep_text_kv:
                text_kv.append(kv_self)
            if deepstack is not None and i < len(deepstack):
                x = x + deepstack[i].to(x.dtype)
        h = self.norm(x)
        # The Generator's time axis starts after the last Reasoner position, plus a margin.
        last = positions.amax(dim=1)  # (B, La)
        if valid is not None:
            last = last.masked_fill(~valid, float("-inf"))
        next_position = last.amax(dim=1) + 1
        cache = ReasonerCache(kv=kv, valid=valid, next_position=next_position)
        return ReasonerOutput(
            hidden=h,
            logits=self.lm_head(h) if logits else None,
            cache=cache,
            text_kv=text_kv if keep_text_kv else None,
        )

    def decode(self, token: Tensor, cache: TextCache) -> Tensor:
        """One step of causal decoding: token (B,) -> logits (B, V); the cache grows by one slot."""
        if cache.length >= cache.valid.shape[1]:
            raise ValueError("text cache is full; pass a larger max_new_tokens to TextCache.start")
        b = token.shape[0]
        if b != cache.valid.shape[0]:
            raise ValueError(f"cache was built for batch {cache.valid.shape[0]}, got {b} tokens")
        x = self.embed_tokens(token)[:, None, :]
        pos = cache.next_position.float().view(b, 1, 1).expand(b, 3, 1)
        rope = self._rope(pos)
        idx = cache.length
        cache.valid[:, idx] = True
        key_valid = cache.valid[:, : idx + 1]
        for i, layer in enumerate(self.layers):
            x = layer.decode(x, rope, cache.k[i], cache.v[i], idx, key_valid)
        cache.length += 1
        cache.next_position = cache.next_position + 1
        return self.lm_head(self.norm(x))[:, 0]

    # ------------------------------------------------------------------------------------------
    # Generator
    # ------------------------------------------------------------------------------------------

    def _stream_width(self, name: str) -> int:
        width = self.config.patch_dim if name == "video" else getattr(self.config, f"{name}_dim")
        if width is None:
            raise ValueError(f"this model has no {name} projection (ModelConfig.{name}_dim is None)")
        return width

    def _embed_stream(self, name: str, s: Stream) -> Tensor:
        """Stream -> tokens (B, N, C) with the modality embedding (the noise level comes after)."""
        lat = s.latents.to(self.video_in.weight.dtype)
        if name == "video":
            return self.video_in(lat)
        if name == "audio":
            return self.audio_in(lat) + self.audio_embed
        return getattr(self, f"{name}_in")(lat, s.embodiment) + getattr(self, f"{name}_embed")

    def _embed_latents(self, gen: GenInput) -> Tensor:
        """GenInput -> tokens (B, Ld, C) with modality embeddings, before any noise-level embedding."""
        return torch.cat([self._embed_stream(name, s) for name, s in gen.items()], dim=1)

    def _level_embedding(self, levels: Tensor) -> Tensor:
        """Noise levels σ (N,) -> their embeddings (N, C)."""
        return self.time_embed(levels * self.config.sigma_scale)

    def _time_embedding(self, sigma: Tensor) -> Tensor:
        """σ (B, L) -> its embedding (B, L, C). The MLP runs once per distinct noise level (a
        sampling step has one or two, a training batch one per sample and modality), not per token."""
        levels, index = torch.unique(sigma, return_inverse=True)
        return self._level_embedding(levels)[index]

    def _stream_positions(self, s: Stream, offset: Tensor) -> Tensor:
        """RoPE positions (B, 3, N) of a stream: explicit, or from its timestamps and grid."""
        if s.positions is not None:
            return s.positions.float()
        pos = time_positions(s.time_s, offset, self.config.time_units_per_second)
        if s.grid is not None:
            pos[:, 1:] = s.grid.transpose(1, 2).float()
        return pos

    def _require_generator(self) -> None:
        if self.config.generator is None:
            raise ValueError(
                "this model has no Generator tower (Reasoner-only checkpoint); it can only reason"
            )

    def _check_generator_input(self, cache: ReasonerCache, gen: GenInput, validate: bool) -> None:
        self._require_generator()
        b = gen.batch
        if b != cache.batch:
            raise ValueError(
                f"the Reasoner cache was built for batch {cache.batch}, the Generator input has {b}"
            )
        if validate:
            self._validate_streams(gen)

    def _validate_streams(self, gen: GenInput) -> None:
        for name, s in gen.items():
            s.validate(name, self._stream_width(name))
            if name in ("action", "state"):  # per-embodiment projections
                getattr(self, f"{name}_in").check(s.embodiment, gen.batch)

    def generator_positions(self, cache: ReasonerCache, gen: GenInput) -> Tensor:
        """RoPE positions (B, 3, Ld) of a Generator request: after the Reasoner segment + margin."""
        offset = cache.next_position + self.config.modality_margin
        return torch.cat([self._stream_positions(s, offset) for _, s in gen.items()], dim=2)

    def _embed_tokens(
        self, cache: ReasonerCache, gen: GenInput, validate: bool
    ) -> tuple[Tensor, Tensor | None]:
        """GenInput -> tokens (B, Ld, C) and validity (B, Ld) or None."""
        self._check_generator_input(cache, gen, validate)
        streams = gen.items()
        x = self._embed_latents(gen)
        noisy = torch.cat([s.noisy for _, s in streams], dim=1)
        if bool(noisy.any()):  # Cosmos 3: the noise-level embedding goes to noisy tokens only
            t = self._time_embedding(torch.cat([s.sigma for _, s in streams], dim=1)).to(x.dtype)
            x = torch.where(noisy[..., None], x + t, x)
        return x, self._generator_valid(gen)

    @staticmethod
    def _generator_valid(gen: GenInput) -> Tensor | None:
        """Validity (B, Ld) of the Generator tokens, or None when nothing is padded."""
        streams = gen.items()
        if all(s.valid is None for _, s in streams):
            return None
        dm_valid = torch.cat([s.valid_mask() for _, s in streams], dim=1)
        return None if bool(dm_valid.all()) else dm_valid

    def embed_generator(
        self, cache: ReasonerCache, gen: GenInput, validate: bool = True
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """GenInput -> tokens (B, Ld, C), positions (B, 3, Ld), validity (B, Ld) or None."""
        x, dm_valid = self._embed_tokens(cache, gen, validate)
        return x, self.generator_positions(cache, gen), dm_valid

    def run_generator(
        self,
        cache: ReasonerCache,
        x: Tensor,
        positions: Tensor | None,
        dm_valid: Tensor | None,
        rope: tuple[Tensor, Tensor] | None = None,
        outputs: Tensor | None = None,
    ) -> Tensor:
        """The Generator tower over embedded tokens x (B, Ld, C), reading the cache -> (B, Ld, C) normed.

        rope: the precomputed `rotation_table` of `positions` (fixed across denoising steps).
        outputs: indices (Lo,) of the tokens whose outputs are wanted -> (B, Lo, C). The last layer
        then runs its queries, output projection and MLP for those tokens only (all tokens still
        serve as keys and values there, and run fully in the layers before)."""
        rope = rope if rope is not None else self._rope(positions)
        if cache.room and cache.room != x.shape[1]:
            raise ValueError(
                f"the cache has room for {cache.room} Generator tokens but the input has {x.shape[1]}; "
                "build it with cache.with_room(number of Generator tokens)"
            )
        ar_len = cache.length if cache.room else None
        last = len(self.layers) - 1
        for i, (layer, kv) in enumerate(zip(self.layers, cache.kv, strict=True)):
            x = layer.generate(x, rope, kv, cache.valid, dm_valid, ar_len, outputs if i == last else None)
        return self.norm_dm(x)

    def denoise(
        self,
        cache: ReasonerCache,
        gen: GenInput,
        *,
        validate: bool = True,
        rope: tuple[Tensor, Tensor] | None = None,
        noisy_only: bool = False,
    ) -> dict[str, Tensor]:
        """One Generator pass over `gen`, reading the Reasoner's cache. Returns the predicted
        velocity per stream, {name: (B, N, width)} (zeros where a token is padding).

        Each token's noise level is read from its stream's σ. A sampler, whose steps share one σ,
        calls `denoise_step` with a `plan_steps` plan instead. With `noisy_only`, velocities are
        computed only at tokens noisy in some sample of the batch (zeros elsewhere): clean
        conditioning tokens serve as keys and values, but their own outputs are never used, so the
        last layer skips them (`run_generator(outputs=...)`)."""
        x, dm_valid = self._embed_tokens(cache, gen, validate)
        positions = self.generator_positions(cache, gen) if rope is None else None
        outputs, wanted = self._outputs(gen) if noisy_only else (None, None)
        h = self.run_generator(cache, x, positions, dm_valid, rope, outputs)
        return self._velocities(gen, h, outputs, wanted)

    def plan_steps(self, gen: GenInput, sigmas: Tensor, noisy_only: bool = True) -> StepPlan:
        """Validate a sampling request once and compute what its steps share: which tokens are
        noisy and padded, which outputs are read (noisy ones, with `noisy_only`), and the noise-level
        embedding of every σ of the schedule `sigmas` (one MLP call instead of one per step)."""
        self._require_generator()
        self._validate_streams(gen)
        noisy = torch.cat([s.noisy for _, s in gen.items()], dim=1)
        outputs, wanted = self._outputs(gen) if noisy_only else (None, None)
        sigmas = sigmas.detach().float().cpu()
        emb = self._level_embedding(sigmas.to(noisy.device))
        levels = dict(zip(sigmas.tolist(), emb.unbind(0), strict=True))
        return StepPlan(noisy, self._generator_valid(gen), outputs, wanted, levels)

    def prepare_request(self, cache: ReasonerCache, gen: GenInput, sigmas: Tensor) -> SamplingRequest:
        """A sampling request over `gen` with the schedule `sigmas` (see `model/request.py`)."""
        return SamplingRequest(self, cache, gen, sigmas)

    def denoise_step(
        self,
        cache: ReasonerCache,
        gen: GenInput,
        plan: StepPlan,
        sigma: float,
        rope: tuple[Tensor, Tensor] | None = None,
    ) -> dict[str, Tensor]:
        """`denoise` for one sampling step of a planned request: every noisy token is at noise
        level `sigma` (the streams' σ fields are not read) and nothing the plan holds is recomputed.
        rope: `generator_rope(cache, gen)`, fixed while the cache is (None: computed here)."""
        self.check_step(cache, gen, plan)
        t = plan.levels.get(sigma)
        if t is None:  # a level outside the planned schedule (in float32, as `_time_embedding`)
            level = torch.full((1,), sigma, dtype=torch.float32, device=plan.noisy.device)
            t = self._level_embedding(level)[0]
        rope = rope if rope is not None else self._rope(self.generator_positions(cache, gen))
        return self.step_velocity(cache, gen, plan, t, rope)

    def check_step(self, cache: ReasonerCache, gen: GenInput, plan: StepPlan) -> None:
        """Raise unless `gen` has the batch of `cache` and the layout `plan` was built for."""
        self._check_generator_input(cache, gen, validate=False)
        if plan.noisy.shape != (gen.batch, gen.length):
            raise ValueError(
                f"the plan was built for {tuple(plan.noisy.shape)} (batch, tokens) but the Generator input "
                f"has {(gen.batch, gen.length)}; plan the input the steps see (both halves under guidance)"
            )

    def euler_step(
        self,
        cache: ReasonerCache,
        gen: GenInput,
        plan: StepPlan,
        t: Tensor,
        h: Tensor,
        rope: tuple[Tensor, Tensor],
    ) -> dict[str, Tensor]:
        """`step_velocity`, then the Euler update x + h·v of the noisy tokens (h: σ_next − σ, a tensor):
        one denoising step, one program under `compile_generator`. Checked already (`check_step`)."""
        return euler_update(gen, self.step_velocity(cache, gen, plan, t, rope), h)

    def step_velocity(
        self, cache: ReasonerCache, gen: GenInput, plan: StepPlan, t: Tensor, rope: tuple[Tensor, Tensor]
    ) -> dict[str, Tensor]:
        """The tensor work of `denoise_step`, checked already: embed the step's latents, add the noise
        level's embedding `t` (C,) to the noisy tokens, run the Generator, read the velocities. No
        Python value varies between steps (σ arrives as its embedding), so `compile_generator` can
        compile it as one program for every step of every plan of a layout."""
        x = self._embed_latents(gen)
        x = torch.where(plan.noisy[..., None], x + t.to(x.dtype), x)
        h = self.run_generator(cache, x, None, plan.dm_valid, rope, plan.outputs)
        return self._velocities(gen, h, plan.outputs, plan.wanted)

    @staticmethod
    def _outputs(gen: GenInput) -> tuple[Tensor | None, Tensor | None]:
        """Indices (Lo,) and mask (Ld,) of the tokens noisy in some sample; (None, None) if all are."""
        wanted = torch.cat([s.noisy.any(dim=0) for _, s in gen.items()])
        if bool(wanted.all()):
            return None, None
        return wanted.nonzero().squeeze(1), wanted

    def _velocities(
        self, gen: GenInput, h: Tensor, outputs: Tensor | None, wanted: Tensor | None
    ) -> dict[str, Tensor]:
        """The Generator's normed output (B, Ld or Lo, C) -> velocity per stream, zero where a token
        is padding or was not computed."""
        streams = gen.items()
        if outputs is not None:  # back to every token; the rows not computed are masked below
            h = h.new_zeros(h.shape[0], gen.length, h.shape[2]).index_copy_(1, outputs, h)
        lengths = [s.length for _, s in streams]
        wanted_parts = torch.split(wanted, lengths) if wanted is not None else [None] * len(streams)
        out = {}
        for (name, s), part, w in zip(streams, torch.split(h, lengths, dim=1), wanted_parts, strict=True):
            if name == "video":
                v = self.video_out(part)
            elif name == "audio":
                v = self.audio_out(part)
            elif name == "state":  # conditioning only: never generated, no velocity
                v = part.new_zeros(*part.shape[:2], s.latents.shape[-1])
            else:
                v = self.action_out(part, s.embodiment)
            mask = s.valid
            if w is not None:
                mask = w[None] if mask is None else mask & w[None]
            out[name] = v if mask is None else v * mask[..., None].to(v.dtype)
        return out

    def generator_rope(
        self, cache: ReasonerCache, gen: GenInput, validate: bool = True
    ) -> tuple[Tensor, Tensor]:
        """RoPE (cos, sin) of a Generator request; fixed for all its denoising steps. `validate=False`
        when the request is validated already (`plan_steps`)."""
        self._check_generator_input(cache, gen, validate)
        return self._rope(self.generator_positions(cache, gen))

    def forward(
        self,
        input_ids: Tensor,
        gen: GenInput,
        lengths: Tensor | None = None,
        positions: Tensor | None = None,
    ) -> tuple[ReasonerOutput, dict[str, Tensor]]:
        """The generation forward: Reasoner, then Generator reading the Reasoner's K/V."""
        r = self.reason(input_ids, lengths=lengths, positions=positions)
        return r, self.denoise(r.cache, gen)

    # ------------------------------------------------------------------------------------------

    def generator_parameters(self) -> list[nn.Parameter]:
        """Parameters that only the Generator path reads."""
        ar_ids = {id(p) for p in self.reasoner_parameters()}
        return [p for p in self.parameters() if id(p) not in ar_ids]

    def reasoner_parameters(self) -> list[nn.Parameter]:
        """Parameters the Reasoner path reads, each once (tied ones too), in module order."""
        params = [*self.embed_tokens.parameters(), *self.norm.parameters(), *self.lm_head.parameters()]
        for layer in self.layers:
            params += list(layer.ar.parameters())  # (ar_key_norm_for_dm is read only by the Generator)
        return list({id(p): p for p in params}.values())


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
