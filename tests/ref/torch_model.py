"""Plain-PyTorch reference of the Hugging Face decoder families llama, mistral,
qwen2, qwen3, gemma2, gemma3 (text and the multimodal checkpoint's text part),
phi3 and smollm3, with MLX-LM's LoRA and full fine-tuning, the masked loss and
MLX's optimizers. Independent of the C engine: written from the HF modelling
code and MLX-LM's tuner, with no `transformers` import (not installed).

The newer families, as their HF modelling code computes them:
- gemma2/gemma3: RMSNorm x * rsqrt(mean(x^2) + eps) * (1 + w); embeddings times
  sqrt(hidden_size) rounded to the embedding's dtype; four norms per block
  (input, post_attention on the attention output, pre_feedforward, post_feedforward
  on the MLP output, each before its residual add); MLP down(gelu_tanh(gate) * up);
  attention scale query_pre_attn_scalar^-1/2; sliding layers from layer_types
  or the pattern (gemma3: sliding iff (i + 1) % sliding_window_pattern, 6 by
  default; gemma2: even layers) see keys j with i - j < sliding_window.
  gemma3: q/k norms (1 + w) before RoPE; sliding layers use rope_local_base_freq
  without scaling, full layers rope_theta with rope_scaling. gemma2: scores
  softcap * tanh(scores / softcap) before the mask; logits likewise with the
  final cap. The multimodal gemma3 reads text_config and names its weights
  language_model.model.* (adapter keys the same, as MLX-LM's module paths).
- phi3: qkv_proj (q rows, k, v) and gate_up_proj (gate rows, up); RoPE on the
  first int(head_dim * partial_rotary_factor) dims; longrope: inv_freq divided
  by short_factor when the sequence length (T here) is at most
  original_max_position_embeddings, long_factor beyond, cos and sin times
  attention_factor (given, or sqrt(1 + ln(max/orig) / ln(orig))); a
  sliding_window applies to every layer.
- smollm3: llama blocks; no RoPE on layers whose no_rope_layers entry is 0
  (default: every no_rope_layer_interval-th).

Used by tests/ref/gen_refs.py (float64 reference values checked into
tests/ref/data/) and by bench/torch_*.py (the PyTorch speed baseline, fp32).

Conventions
- Weights come as a dict of HF names -> tensors (any dtype). They are upcast to
  `compute_dtype` (float64 for the references, float32 for the benchmark).
- RMSNorm as HF LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) * w.
- RoPE as HF: rotate_half, inv_freq = 1 / theta^(arange(0, D, 2) / D), optional
  llama3 rope_scaling (HF `_compute_llama3_parameters`). Positions 0..T-1.
- Causal GQA attention, scale 1/sqrt(head_dim), written with matmul + mask +
  softmax (query head h reads kv head h // (H / KVH), as HF `repeat_kv`).
  There is no padding mask: rows are right-padded, so pads never reach earlier
  positions (as in MLX-LM).
- qwen3: q_norm / k_norm are RMSNorms over head_dim applied per head BEFORE RoPE.
- qwen2: q/k/v always carry a bias. llama/qwen3: only if `attention_bias`.
- LoRA (MLX-LM math): y = W x + b + scale * ((x @ A) @ B), A (in, r), B (r, out),
  no dropout. Adapter names: model.layers.{i}.{key}.lora_a / .lora_b.
- DoRA (MLX-LM DoRALinear): y = (m / stop_grad(||W + scale B^T A^T||_row)) *
  (W x + scale (x A) B) + b, m (out) trainable (name ....m), init row norms of W.
  A "peft" convention is also available for the export check:
  y = W x + b + (alpha / r) * (x @ A_peft^T) @ B_peft^T, A_peft (r, in), B_peft (out, r).
- Full fine-tuning: every parameter of the last N blocks is trainable
  (norms, projections, biases, q/k norms); embeddings, final norm, lm_head frozen.
- Loss: inputs = tokens[:, :-1], targets = tokens[:, 1:]; position j counts iff
  s = j + 1 satisfies offset <= s < length (strictly less: MLX-LM's `<=`
  counts the first pad, an off-by-one we fix); loss = sum CE / number counted.

bf16 weights
- bf16_mode="emulate" (references): every weight is upcast exactly to
  compute_dtype. To emulate the C engine, which feeds bf16-rounded activations
  to oneDNN's bf16 matmul with fp32 accumulation, the INPUT of every linear whose
  weight was bf16 in the file and is frozen (the LM head included) is rounded to
  bf16 before the product, x.to(bfloat16).to(float64), in the forward pass
  only: the backward pass treats the rounding as the identity. The LoRA branch
  sees the unrounded input. Trainable weights (full fine-tuning) start from the
  exact bf16 value and are not rounded again. The embedding is a lookup (exact).
- bf16_mode="stream" (benchmark): frozen bf16 weights stay bf16 in memory and
  are upcast to fp32 on the fly inside each matmul (forward and backward, see
  `_FrozenBF16Linear`), so compute is fp32 and no fp32 copy of a frozen weight
  is kept alive by autograd. Trainable weights are fp32 masters.
"""

import math

import torch
import torch.nn.functional as F
import torch.utils.checkpoint

LINEAR_KEYS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
               "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
               "mlp.down_proj")
FUSED_KEYS = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")
SUPPORTED_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "gemma3", "phi3", "smollm3")
GEMMA = ("gemma2", "gemma3_text")


def linear_keys(config):
    """MLX-LM's LoRA keys (every linear of a block) of a config."""
    return FUSED_KEYS if config.get("model_type") == "phi3" else LINEAR_KEYS


def text_config(config):
    """(the text model's config, the weight prefix): the multimodal gemma3
    nests its text model in text_config, weights under language_model.model."""
    if config.get("model_type") != "gemma3":
        return config, "model."
    text = dict(config["text_config"])
    text["model_type"] = "gemma3_text"
    text.setdefault("tie_word_embeddings", config.get("tie_word_embeddings", True))
    return text, "language_model.model."


def layer_kinds(config, L):
    """Per layer: (window or 0, uses RoPE, RoPE base key) as HF builds them."""
    mt = config["model_type"]
    window = config.get("sliding_window") or 0
    sliding = [False] * L
    if mt in GEMMA:
        types = config.get("layer_types")
        if types:
            sliding = [t == "sliding_attention" for t in types]
        else:
            pattern = config.get("sliding_window_pattern", 2 if mt == "gemma2" else 6)
            sliding = [bool((i + 1) % pattern) for i in range(L)]
    elif mt in ("mistral", "phi3"):
        sliding = [bool(window)] * L
    elif mt in ("qwen2", "qwen3") and config.get("use_sliding_window"):
        first = config.get("max_window_layers", 28)
        sliding = [i >= first for i in range(L)]
    rope = [True] * L
    if mt == "smollm3":
        nope = config.get("no_rope_layers")
        if nope is None:
            interval = config.get("no_rope_layer_interval", 4)
            nope = [int((i + 1) % interval != 0) for i in range(L)]
        rope = [bool(nope[i]) for i in range(L)]
        if config.get("use_sliding_window") and window:
            sliding = [not r for r in rope]
    kinds = []
    for i in range(L):
        w = window if sliding[i] else 0
        base = "local" if (mt == "gemma3_text" and sliding[i]) else "global"
        kinds.append((w, rope[i], base))
    return kinds


class _RoundToBF16(torch.autograd.Function):
    """Forward: round to the nearest bf16 and back. Backward: identity."""

    @staticmethod
    def forward(ctx, x):
        return x.to(torch.bfloat16).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad


class _FrozenBF16Linear(torch.autograd.Function):
    """y = x @ W^T with W frozen and stored in bf16; compute in x's dtype.
    Saves only the bf16 weight; the upcast copy is transient in both passes."""

    @staticmethod
    def forward(ctx, x, weight_bf16):
        ctx.save_for_backward(weight_bf16)
        return F.linear(x, weight_bf16.to(x.dtype))

    @staticmethod
    def backward(ctx, grad):
        (weight_bf16,) = ctx.saved_tensors
        return grad @ weight_bf16.to(grad.dtype), None


def rms_norm(x, weight, eps, plus_one=False):
    variance = x.pow(2).mean(-1, keepdim=True)
    if plus_one:  # Gemma: zero-centred weights
        return x * torch.rsqrt(variance + eps) * (1.0 + weight)
    return x * torch.rsqrt(variance + eps) * weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_inv_freq(config, head_dim, dtype=torch.float64, seq_len=0):
    """(inv_freq over head_dim rotary dims, the factor cos and sin are scaled
    by: longrope's attention factor, else 1). seq_len picks longrope's factors."""
    theta = float(config.get("rope_theta", 10000.0))
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    scaling = config.get("rope_scaling")
    if scaling:
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind == "default":
            pass
        elif kind == "linear":
            inv_freq = inv_freq / float(scaling["factor"])
        elif kind in ("longrope", "su"):  # HF _compute_longrope_parameters + longrope_frequency_update
            orig = config.get("original_max_position_embeddings") or config["max_position_embeddings"]
            factor = config["max_position_embeddings"] / orig
            ext = scaling["long_factor"] if seq_len > orig else scaling["short_factor"]
            inv_freq = inv_freq / torch.tensor(ext, dtype=torch.float64)
            attn = scaling.get("attention_factor")
            if attn is None:
                attn = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
            return inv_freq.to(dtype), float(attn)
        elif kind == "llama3":  # HF _compute_llama3_parameters
            factor = float(scaling["factor"])
            low_freq_factor = float(scaling["low_freq_factor"])
            high_freq_factor = float(scaling["high_freq_factor"])
            old_context_len = float(scaling["original_max_position_embeddings"])
            low_freq_wavelen = old_context_len / low_freq_factor
            high_freq_wavelen = old_context_len / high_freq_factor
            wavelen = 2 * math.pi / inv_freq
            inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
            smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
            is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
            inv_freq = torch.where(is_medium, smoothed, inv_freq_llama)
        else:
            raise ValueError(f"unsupported rope_scaling type {kind!r}")
    return inv_freq.to(dtype), 1.0


def rope_cos_sin(config, head_dim, T, dtype):
    inv_freq, amp = rope_inv_freq(config, head_dim, torch.float64, seq_len=T)
    pos = torch.arange(T, dtype=torch.float64)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)  # (T, D)
    if amp != 1.0:
        return (emb.cos() * amp).to(dtype), (emb.sin() * amp).to(dtype)
    return emb.cos().to(dtype), emb.sin().to(dtype)


class DecoderLM:
    """A HF decoder of one of SUPPORTED_TYPES as plain tensors.

    weights: HF name -> tensor. fine_tune: None | ("lora", num_layers) | ("full", num_layers).
    """

    def __init__(self, config, weights, compute_dtype=torch.float64, bf16_mode="emulate"):
        mt = config.get("model_type")
        if mt not in SUPPORTED_TYPES:
            raise ValueError(f"unsupported model_type {mt!r}")
        config, self.prefix = text_config(config)
        mt = config["model_type"]
        self.config = config
        self.model_type = mt
        gemma = mt in GEMMA
        self.C = int(config["hidden_size"])
        self.L = int(config["num_hidden_layers"])
        self.H = int(config["num_attention_heads"])
        self.KVH = int(config.get("num_key_value_heads") or self.H)
        self.D = int(config.get("head_dim") or self.C // self.H)
        self.V = int(config["vocab_size"])
        self.eps = float(config.get("rms_norm_eps", 1e-6))
        self.tied = bool(config.get("tie_word_embeddings", gemma or mt == "smollm3"))
        self.qk_norm = mt in ("qwen3", "gemma3_text")
        self.attn_bias = mt == "qwen2" or bool(config.get("attention_bias", False))
        self.gemma = gemma
        self.fused = mt == "phi3"
        self.rd = int(self.D * float(config.get("partial_rotary_factor", 1.0))) if mt == "phi3" else self.D
        self.scale = float(config["query_pre_attn_scalar"]) ** -0.5 if gemma else 1.0 / math.sqrt(self.D)
        caps = (50.0, 30.0) if mt == "gemma2" else (None, None)
        self.attn_cap = config.get("attn_logit_softcapping", caps[0]) if gemma else None
        self.final_cap = config.get("final_logit_softcapping", caps[1]) if gemma else None
        self.kinds = layer_kinds(config, self.L)
        if config.get("mlp_bias"):
            raise ValueError("mlp_bias is not supported")
        self.dtype = compute_dtype
        self.bf16_mode = bf16_mode
        self.params = {}
        self.was_bf16 = set()
        for name, t in weights.items():
            if t.dtype == torch.bfloat16:
                self.was_bf16.add(name)
                if bf16_mode == "stream":
                    self.params[name] = t
                    continue
            self.params[name] = t.to(compute_dtype)
        self.trainable = {}  # name -> leaf tensor (requires_grad)
        self.lora = {}       # "model.layers.i.key" -> (A, B, scale, convention)
        self.dora_m = {}     # "model.layers.i.key" -> m (out): DoRA magnitudes
        self.trainable_layers = set()
        self.checkpoint_blocks = False
        self.visible = None  # (T, T) bool: which keys each query sees; None: causal
        self.round_inputs = bf16_mode == "emulate"  # can be switched off for finite differences

    # ---- trainable parameters -------------------------------------------------
    def _lowest(self, num_layers):
        if num_layers > self.L:
            raise ValueError("num_layers > number of layers")
        n = self.L if num_layers <= 0 else num_layers
        return self.L - n

    def set_full(self, num_layers):
        for i in range(self._lowest(num_layers), self.L):
            self.trainable_layers.add(i)
            prefix = f"{self.prefix}layers.{i}."
            for name in list(self.params):
                if name.startswith(prefix):
                    t = self.params[name]
                    t = t.to(self.dtype).clone().requires_grad_(True)
                    self.params[name] = t
                    self.trainable[name] = t

    def set_lora(self, num_layers, keys, rank, scale, adapters=None, generator=None, dora=False):
        """adapters: optional dict of MLX names -> tensors; else MLX init
        (A uniform +-1/sqrt(in), B zero, DoRA m = row norms of W)."""
        for i in range(self._lowest(num_layers), self.L):
            self.trainable_layers.add(i)
            for key in keys:
                base = f"{self.prefix}layers.{i}.{key}"
                W = self.params[base + ".weight"]
                out_f, in_f = W.shape
                if adapters is not None:
                    A = adapters[base + ".lora_a"].to(self.dtype).clone()
                    B = adapters[base + ".lora_b"].to(self.dtype).clone()
                else:
                    bound = 1.0 / math.sqrt(in_f)
                    A = (torch.rand(in_f, rank, generator=generator, dtype=torch.float64) * 2 - 1) * bound
                    A = A.to(self.dtype)
                    B = torch.zeros(rank, out_f, dtype=self.dtype)
                A.requires_grad_(True)
                B.requires_grad_(True)
                self.lora[base] = (A, B, float(scale), "mlx")
                self.trainable[base + ".lora_a"] = A
                self.trainable[base + ".lora_b"] = B
                if dora:
                    if adapters is not None:
                        m = adapters[base + ".m"].to(self.dtype).clone()
                    else:
                        m = W.to(self.dtype).norm(dim=1)
                    m.requires_grad_(True)
                    self.dora_m[base] = m
                    self.trainable[base + ".m"] = m

    def set_lora_peft(self, peft_tensors, alpha, rank):
        """PEFT convention (frozen, for the export check). peft_tensors: HF PEFT names."""
        for name, A in peft_tensors.items():
            if not name.endswith(".lora_A.weight"):
                continue
            base = name[len("base_model.model."):-len(".lora_A.weight")]
            B = peft_tensors[name.replace("lora_A", "lora_B")]
            self.lora[base] = (A.to(self.dtype), B.to(self.dtype), float(alpha) / rank, "peft")

    # ---- forward --------------------------------------------------------------
    def _w(self, name):
        t = self.params[name]
        return t if t.dtype == self.dtype else t.to(self.dtype)

    def linear(self, x, base, has_bias=False):
        W = self.params[base + ".weight"]
        frozen = not W.requires_grad
        if W.dtype == torch.bfloat16:  # "stream" mode: frozen bf16 storage
            y = _FrozenBF16Linear.apply(x, W)
        else:
            xin = x
            if frozen and self.round_inputs and (base + ".weight") in self.was_bf16:
                xin = _RoundToBF16.apply(x)
            y = F.linear(xin, W)
        lo = self.lora.get(base)
        if lo is not None:
            A, B, scale, conv = lo
            if conv == "mlx":
                y = y + scale * ((x @ A) @ B)
            else:
                y = y + scale * ((x @ A.t()) @ B.t())
            m = self.dora_m.get(base)
            if m is not None:
                # MLX DoRALinear: out = (m / stop_grad(||W + scale B^T A^T||_row)) * (W x + scale (x A) B) + b
                adapted = W.to(self.dtype) + (scale * B.t()) @ A.t()
                denom = adapted.norm(dim=1).detach()
                y = (m / denom) * y
        if has_bias:
            y = y + self._w(base + ".bias")
        return y

    def norm(self, x, name):
        return rms_norm(x, self._w(name), self.eps, self.gemma)

    def attention(self, q, k, v, window):
        """q (B, H, T, D), k/v (B, KVH, T, D): causal (and windowed) softmax attention."""
        T = q.shape[2]
        rep = self.H // self.KVH
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        scores = (q @ k.transpose(-1, -2)) * self.scale  # (B, H, T, T)
        if self.attn_cap:
            scores = self.attn_cap * torch.tanh(scores / self.attn_cap)
        hidden = ~self.visible if self.visible is not None else torch.ones(T, T, dtype=torch.bool).triu(1)
        if window:  # keys j with i - j >= window are out of the window
            hidden = hidden | torch.ones(T, T, dtype=torch.bool).tril(-window)
        scores = scores.masked_fill(hidden, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        return probs @ v

    def rope(self, x, cos, sin):
        """rotate_half RoPE on the first rd dims (x: (B, heads, T, D))."""
        if cos is None:
            return x
        if self.rd == self.D:
            return x * cos + rotate_half(x) * sin
        xr, xp = x[..., :self.rd], x[..., self.rd:]
        return torch.cat((xr * cos + rotate_half(xr) * sin, xp), dim=-1)

    def block(self, i, h, ropes):
        p = f"{self.prefix}layers.{i}."
        Bsz, T, _ = h.shape
        H, KVH, D = self.H, self.KVH, self.D
        window, use_rope, base = self.kinds[i]
        x = self.norm(h, p + "input_layernorm.weight")
        if self.fused:
            qkv = self.linear(x, p + "self_attn.qkv_proj")
            q, k, v = qkv.split([H * D, KVH * D, KVH * D], dim=-1)
            q, k, v = q.reshape(Bsz, T, H, D), k.reshape(Bsz, T, KVH, D), v.reshape(Bsz, T, KVH, D)
        else:
            q = self.linear(x, p + "self_attn.q_proj", self.attn_bias).view(Bsz, T, H, D)
            k = self.linear(x, p + "self_attn.k_proj", self.attn_bias).view(Bsz, T, KVH, D)
            v = self.linear(x, p + "self_attn.v_proj", self.attn_bias).view(Bsz, T, KVH, D)
        if self.qk_norm:
            q = self.norm(q, p + "self_attn.q_norm.weight")
            k = self.norm(k, p + "self_attn.k_norm.weight")
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, heads, T, D)
        cos, sin = ropes[base] if use_rope else (None, None)
        q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
        att = self.attention(q, k, v, window).transpose(1, 2).reshape(Bsz, T, H * D)
        o = self.linear(att, p + "self_attn.o_proj")
        if self.gemma:
            h = h + self.norm(o, p + "post_attention_layernorm.weight")
            x = self.norm(h, p + "pre_feedforward_layernorm.weight")
        else:
            h = h + o
            x = self.norm(h, p + "post_attention_layernorm.weight")
        if self.fused:
            g, u = self.linear(x, p + "mlp.gate_up_proj").chunk(2, dim=-1)
        else:
            g = self.linear(x, p + "mlp.gate_proj")
            u = self.linear(x, p + "mlp.up_proj")
        a = F.gelu(g, approximate="tanh") if self.gemma else F.silu(g)
        m = self.linear(a * u, p + "mlp.down_proj")
        if self.gemma:
            return h + self.norm(m, p + "post_feedforward_layernorm.weight")
        return h + m

    def ropes(self, T):
        """cos/sin (T, rd) of each RoPE base the layers use."""
        out = {"global": rope_cos_sin(self.config, self.rd, T, self.dtype)}
        if self.model_type == "gemma3_text":
            local = {"rope_theta": self.config.get("rope_local_base_freq", 10000.0)}
            out["local"] = rope_cos_sin(local, self.rd, T, self.dtype)
        return out

    def logits(self, inputs):
        """inputs: (B, T) int64 -> logits (B, T, V) in compute dtype."""
        T = inputs.shape[1]
        emb_name = self.prefix + "embed_tokens.weight"
        h = self._w(emb_name)[inputs] if self.bf16_mode != "stream" else \
            self.params[emb_name][inputs].to(self.dtype)
        if self.gemma:  # sqrt(hidden_size) in the embedding's dtype (HF: embed_scale.to(weight.dtype))
            edt = torch.bfloat16 if emb_name in self.was_bf16 else torch.float32
            h = h * torch.tensor(self.C ** 0.5, dtype=torch.float32).to(edt).to(self.dtype)
        ropes = self.ropes(T)
        for i in range(self.L):
            if self.checkpoint_blocks and i in self.trainable_layers:
                h = torch.utils.checkpoint.checkpoint(self.block, i, h, ropes, use_reentrant=False)
            else:
                h = self.block(i, h, ropes)
        h = self.norm(h, self.prefix + "norm.weight")
        head = self.prefix + "embed_tokens" if self.tied else self.head_name()
        z = self.linear(h, head)
        if self.final_cap:
            z = self.final_cap * torch.tanh(z / self.final_cap)
        return z

    def head_name(self):
        return "language_model.lm_head" if self.prefix == "language_model.model." else "lm_head"


def loss_mask(tokens, lengths, offsets):
    """(B, W-1) bool: target j counts iff offset <= j+1 < length."""
    W = tokens.shape[1]
    s = torch.arange(1, W)
    return (s[None, :] >= offsets[:, None]) & (s[None, :] < lengths[:, None])


def masked_loss(logits, tokens, lengths, offsets):
    """Returns (loss, ntokens). logits (B, W-1, V) for inputs tokens[:, :-1]."""
    targets = tokens[:, 1:].long()
    mask = loss_mask(tokens, lengths, offsets)
    V = logits.shape[-1]
    ce = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction="none")
    ce = ce.view(targets.shape)
    ntok = int(mask.sum())
    return (ce * mask.to(ce.dtype)).sum() / ntok, ntok


def forward_loss(model, tokens, lengths, offsets):
    tokens = tokens.long()
    logits = model.logits(tokens[:, :-1])
    loss, ntok = masked_loss(logits, tokens, lengths.long(), offsets.long())
    return loss, ntok, logits


class AdamMLX:
    """MLX Adam defaults: no bias correction.
    m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; w -= lr * m / (sqrt(v) + eps)."""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8):
        self.params, self.lr, self.b1, self.b2, self.eps = list(params), lr, betas[0], betas[1], eps
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def step(self):
        for p, m, v in zip(self.params, self.m, self.v):
            g = p.grad
            m.mul_(self.b1).add_(g, alpha=1 - self.b1)
            v.mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
            p.addcdiv_(m, v.sqrt().add_(self.eps), value=-self.lr)
            p.grad = None


class SGDMLX:
    """MLX SGD with momentum, dampening 0, no nesterov, no weight decay:
    v = momentum v + g; w -= lr v."""

    def __init__(self, params, lr, momentum=0.0):
        self.params, self.lr, self.momentum = list(params), lr, momentum
        self.v = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def step(self):
        for p, v in zip(self.params, self.v):
            v.mul_(self.momentum).add_(p.grad)
            p.add_(v, alpha=-self.lr)
            p.grad = None
