"""Plain-PyTorch reference of Qwen3.5's text decoder (dense), built on
torch_model.DecoderLM (LoRA / DoRA / full fine-tuning, bf16 emulation, loss)
and gdn_ref.py (the Gated DeltaNet mixer in the plain recurrent form).

What it computes, as read in transformers models/qwen3_5/modeling_qwen3_5.py
and MLX-LM mlx_lm/models/qwen3_5.py + qwen3_next.py:
- layer i is full attention when layer_types[i] == "full_attention", else
  Gated DeltaNet; without layer_types, layer i is full attention when
  (i + 1) % full_attention_interval == 0 (4: layers 3, 7, ...).
- every RMSNorm but the DeltaNet's gated one is zero-centred: x * rsqrt(mean x^2
  + eps) * (1 + w) (Qwen3_5RMSNorm): input_layernorm, post_attention_layernorm,
  model.norm, q_norm, k_norm.
- full attention: q_proj gives (H, 2 D) per token: per head the query (first D)
  then the output gate (next D); q_norm / k_norm per head before RoPE; RoPE
  (rotate_half) on the first rd = int(D * partial_rotary_factor) dims of each
  head, inv_freq = 1 / theta^(2i / rd) (text positions: every mrope section
  gets the same position, so mrope reduces to this); causal GQA softmax
  attention with scale D^-1/2; o_proj(att * sigmoid(gate)); no biases.
- Gated DeltaNet: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a of the normed
  input, then gdn_ref.mixer, then out_proj.
- MLP: down(silu(gate x) * up x).

Names. The model works on canonical names ("model.layers.{i}.<...>",
"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"); the
generator maps them to a checkpoint's names (nested: "model.language_model.")
and to the adapter names (MLX: "language_model.model.layers...").
conv1d.weight is taken as (C, 1, K) (the HF file layout).
"""

import math

import torch
import torch.nn.functional as F

import gdn_ref
import torch_model as tm

GDN_KEYS = ("linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.in_proj_b",
            "linear_attn.in_proj_a", "linear_attn.out_proj")
ATTN_KEYS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj")
MLP_KEYS = ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
ALL_KEYS = ATTN_KEYS + GDN_KEYS + MLP_KEYS


def layer_types(tc):
    if tc.get("layer_types"):
        return list(tc["layer_types"])
    k = int(tc.get("full_attention_interval", 4))
    return ["full_attention" if (i + 1) % k == 0 else "linear_attention" for i in range(int(tc["num_hidden_layers"]))]


def rope_params(tc):
    rp = tc.get("rope_parameters") or {}
    theta = float(rp.get("rope_theta", tc.get("rope_theta", 10000.0)))
    factor = float(rp.get("partial_rotary_factor", tc.get("partial_rotary_factor", 0.25)))
    return theta, factor


def rms_norm_1p(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)


class Qwen35LM(tm.DecoderLM):
    def __init__(self, text_config, weights, compute_dtype=torch.float64, bf16_mode="emulate"):
        tc = dict(text_config)
        tc.setdefault("model_type", "qwen3")  # DecoderLM's checks; the block is ours
        base_cfg = dict(tc, model_type="qwen3")
        super().__init__(base_cfg, weights, compute_dtype=compute_dtype, bf16_mode=bf16_mode)
        self.config = tc
        self.kinds = layer_types(tc)
        self.Hk = int(tc["linear_num_key_heads"])
        self.Hv = int(tc["linear_num_value_heads"])
        self.Dk = int(tc["linear_key_head_dim"])
        self.Dv = int(tc["linear_value_head_dim"])
        self.theta, factor = rope_params(tc)
        self.rd = int(self.D * factor)

    def set_lora(self, num_layers, keys, rank, scale, adapters=None, generator=None, dora=False):
        """As DecoderLM.set_lora, except that a key adapts only the layers that
        have the module (MLX-LM matches keys by module path)."""
        for i in range(self._lowest(num_layers), self.L):
            self.trainable_layers.add(i)
            for key in keys:
                base = f"model.layers.{i}.{key}"
                if base + ".weight" not in self.params:
                    continue
                W = self.params[base + ".weight"]
                out_f, in_f = W.shape
                if adapters is not None:
                    A = adapters[base + ".lora_a"].to(self.dtype).clone()
                    B = adapters[base + ".lora_b"].to(self.dtype).clone()
                else:
                    bound = 1.0 / math.sqrt(in_f)
                    A = ((torch.rand(in_f, rank, generator=generator, dtype=torch.float64) * 2 - 1) * bound)
                    A = A.to(self.dtype)
                    B = torch.zeros(rank, out_f, dtype=self.dtype)
                A.requires_grad_(True)
                B.requires_grad_(True)
                self.lora[base] = (A, B, float(scale), "mlx")
                self.trainable[base + ".lora_a"] = A
                self.trainable[base + ".lora_b"] = B
                if dora:
                    m = adapters[base + ".m"].to(self.dtype).clone() if adapters is not None \
                        else W.to(self.dtype).norm(dim=1)
                    m.requires_grad_(True)
                    self.dora_m[base] = m
                    self.trainable[base + ".m"] = m

    def rope(self, x, cos, sin):
        rd = self.rd
        xr, xp = x[..., :rd], x[..., rd:]
        return torch.cat((xr * cos + tm.rotate_half(xr) * sin, xp), dim=-1)

    def attention_block(self, i, x):
        p = f"model.layers.{i}."
        Bsz, T, _ = x.shape
        H, KVH, D = self.H, self.KVH, self.D
        qg = self.linear(x, p + "self_attn.q_proj").view(Bsz, T, H, 2 * D)
        q, gate = qg[..., :D], qg[..., D:].reshape(Bsz, T, H * D)
        k = self.linear(x, p + "self_attn.k_proj").view(Bsz, T, KVH, D)
        v = self.linear(x, p + "self_attn.v_proj").view(Bsz, T, KVH, D)
        q = rms_norm_1p(q, self._w(p + "self_attn.q_norm.weight"), self.eps)
        k = rms_norm_1p(k, self._w(p + "self_attn.k_norm.weight"), self.eps)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, self.rd, 2, dtype=torch.float64) / self.rd))
        freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(self.dtype), emb.sin().to(self.dtype)
        q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
        rep = H // KVH
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D))
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        att = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(Bsz, T, H * D)
        return self.linear(att * torch.sigmoid(gate), p + "self_attn.o_proj")

    def gdn_block(self, i, x):
        p = f"model.layers.{i}.linear_attn."
        qkv = self.linear(x, p + "in_proj_qkv")
        z = self.linear(x, p + "in_proj_z")
        b = self.linear(x, p + "in_proj_b")
        a = self.linear(x, p + "in_proj_a")
        conv_w = self._w(p + "conv1d.weight")
        conv_w = conv_w.reshape(conv_w.shape[0], -1)  # (C, 1, K) -> (C, K)
        y = gdn_ref.mixer(qkv, z, a, b, conv_w, self._w(p + "A_log"), self._w(p + "dt_bias"),
                          self._w(p + "norm.weight"), self.Hk, self.Hv, self.Dk, self.Dv, self.eps)
        return self.linear(y, p + "out_proj")

    def block(self, i, h, cos=None, sin=None):
        p = f"model.layers.{i}."
        x = rms_norm_1p(h, self._w(p + "input_layernorm.weight"), self.eps)
        if self.kinds[i] == "full_attention":
            h = h + self.attention_block(i, x)
        else:
            h = h + self.gdn_block(i, x)
        x = rms_norm_1p(h, self._w(p + "post_attention_layernorm.weight"), self.eps)
        g = self.linear(x, p + "mlp.gate_proj")
        u = self.linear(x, p + "mlp.up_proj")
        return h + self.linear(F.silu(g) * u, p + "mlp.down_proj")

    def logits(self, inputs):
        h = self._w("model.embed_tokens.weight")[inputs]
        for i in range(self.L):
            if self.checkpoint_blocks and i in self.trainable_layers:
                h = torch.utils.checkpoint.checkpoint(self.block, i, h, use_reentrant=False)
            else:
                h = self.block(i, h)
        h = rms_norm_1p(h, self._w("model.norm.weight"), self.eps)
        head = "model.embed_tokens" if self.tied else "lm_head"
        return self.linear(h, head)
