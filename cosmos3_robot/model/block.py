"""The Mixture-of-Transformers block: one layer holding two full towers that share attention.

    x_ar ─► norm ─► QKV_ar ─┬─► causal attn(ar) ─► O_ar ─► + ─► norm ─► MLP_ar ─► + ─► x_ar'
                            │ K_ar, V_ar (cached once per request)
                            ▼
    x_dm ─► norm ─► QKV_dm ──► full attn(dm → [ar; dm]) ─► O_dm ─► + ─► norm ─► MLP_dm ─► + ─► x_dm'

Each tower (`ar` = Reasoner, `dm` = Generator) owns its norms, projections, QK-norm and MLP, named
as in Qwen3 so that a VLM's layer loads into either tower one to one. Because the Reasoner never
reads Generator tokens, a layer runs in two independent halves: `reason` (Reasoner only, returns the
keys/values the Generator will read) and `generate` (Generator only, given those keys/values).
"""

from __future__ import annotations

from torch import Tensor, nn

from cosmos3_robot.model.attention import (
    TowerAttention,
    decode_attention,
    generator_attention,
    reasoner_attention,
)
from cosmos3_robot.model.config import AttentionConfig, TowerConfig
from cosmos3_robot.model.layers import GatedMLP, RMSNorm


class TowerLayer(nn.Module):
    """One tower's weights in one layer."""

    def __init__(self, tower: TowerConfig, attn: AttentionConfig):
        super().__init__()
        c = tower.hidden_size
        self.input_layernorm = RMSNorm(c, tower.rms_norm_eps)
        self.self_attn = TowerAttention(
            c,
            attn.num_heads,
            attn.num_kv_heads,
            attn.head_dim,
            tower.attention_bias,
            tower.qk_norm,
            tower.rms_norm_eps,
        )
        self.post_attention_layernorm = RMSNorm(c, tower.rms_norm_eps)
        self.mlp = GatedMLP(c, tower.intermediate_size)

    def finish(self, x: Tensor, o: Tensor) -> Tensor:
        """Residual after attention, then the MLP residual. x (B, L, C), o (B, H, L, D)."""
        x = x + self.self_attn.output(o)
        return x + self.mlp(self.post_attention_layernorm(x))


class MoTBlock(nn.Module):
    def __init__(self, reasoner: TowerConfig, generator: TowerConfig | None, attn: AttentionConfig):
        super().__init__()
        self.ar = TowerLayer(reasoner, attn)
        self.dm = TowerLayer(generator, attn) if generator is not None else None
        # Cosmos 3 Edge: Reasoner keys pass through their own RMSNorm when the Generator reads them.
        self.ar_key_norm_for_dm = (
            RMSNorm(attn.head_dim, reasoner.rms_norm_eps) if attn.ar_key_norm_for_dm else None
        )

    def reason(
        self, x: Tensor, rope: tuple[Tensor, Tensor]
    ) -> tuple[Tensor, tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
        """Reasoner half. x (B, La, C), rope a `rotation_table` -> (x', (K for dm, V), (K, V) for
        text decoding)."""
        q, k, v, k_for_dm = self.ar.self_attn.qkv(self.ar.input_layernorm(x), rope, self.ar_key_norm_for_dm)
        x = self.ar.finish(x, reasoner_attention(q, k, v))
        return x, (k if k_for_dm is None else k_for_dm, v), (k, v)

    def decode(
        self,
        x: Tensor,
        rope: tuple[Tensor, Tensor],
        cache_k: Tensor,
        cache_v: Tensor,
        index: int,
        key_valid: Tensor | None,
    ) -> Tensor:
        """One new Reasoner token per sample, appended to a preallocated cache at `index`.

        x (B, 1, C); cache_k/cache_v (B, G, Lmax, D), written in place; key_valid (B, index+1).
        """
        q, k, v, _ = self.ar.self_attn.qkv(self.ar.input_layernorm(x), rope)
        cache_k[:, :, index : index + 1] = k
        cache_v[:, :, index : index + 1] = v
        o = decode_attention(q, cache_k[:, :, : index + 1], cache_v[:, :, : index + 1], key_valid)
        return self.ar.finish(x, o)

    def generate(
        self,
        x: Tensor,
        rope: tuple[Tensor, Tensor],
        kv_ar: tuple[Tensor, Tensor],
        ar_valid: Tensor | None,
        dm_valid: Tensor | None,
        ar_len: int | None = None,
        queries: Tensor | None = None,
    ) -> Tensor:
        """Generator half. x (B, Ld, C); kv_ar = the Reasoner's (K, V) of this layer, (B, G, La, D),
        or with ar_len = La a (B, G, La + Ld, D) buffer whose last Ld slots this call fills.

        queries: indices (Lq,) of the tokens whose outputs are wanted, -> (B, Lq, C). Every token
        still provides keys and values; only the selected ones attend, project and pass the MLP."""
        if self.dm is None:
            raise ValueError(
                "this model has no Generator tower (Reasoner-only checkpoint); it can only reason"
            )
        q, k, v, _ = self.dm.self_attn.qkv(self.dm.input_layernorm(x), rope)
        if queries is not None:
            q, x = q[:, :, queries], x[:, queries]
        o = generator_attention(q, kv_ar[0], kv_ar[1], k, v, ar_valid, dm_valid, ar_len)
        return self.dm.finish(x, o)
