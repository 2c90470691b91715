"""An independent forward pass of qwen2/qwen2moe/llama (dense or Mixtral-style)/gemma3/bloom/mpt
GGUF models in NumPy.

It shares no code with the engine: weights are read with the `gguf` package
(llama.cpp's own Python reader) and dequantized by it, and the transformer is
written out in float64 from the architecture's definition.
"""
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def _field(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    v = f.parts[f.data[0]]
    if f.types and f.types[0].name == "STRING":
        return bytes(v).decode()
    return v[0].item()


def rope_frequencies(head_dim, base, scaling):
    """The rotation frequency of each dimension pair under a RoPE scaling.

    scaling: None or a dict with "type" (linear, ntk, yarn), "factor" and, for
    yarn, "orig_ctx" (and optionally beta_fast, beta_slow, attn_factor). Written
    from the methods' definitions: position interpolation (Chen et al. 2023),
    NTK-aware base change (bloc97), and YaRN (Peng et al. 2023) as transformers
    and vLLM compute it for Qwen2.5: the blend between interpolated and original
    frequencies ramps linearly over the pair index between the pairs that turn
    beta_fast and beta_slow times within the original context.
    Returns (frequencies, magnitude applied to rotated q and k).
    """
    d = head_dim
    pair = np.arange(0, d, 2, dtype=np.float64)  # 2i
    kind = (scaling or {}).get("type", "none")
    if kind == "none":
        return base ** (-pair / d), 1.0
    s = float(scaling["factor"])
    if kind == "linear":
        return base ** (-pair / d) / s, 1.0
    if kind == "ntk":
        return (base * s ** (d / (d - 2))) ** (-pair / d), 1.0
    assert kind == "yarn", kind
    orig = float(scaling["orig_ctx"])
    beta_fast, beta_slow = scaling.get("beta_fast", 32.0), scaling.get("beta_slow", 1.0)

    def pair_turning(turns):  # the (fractional) pair index that turns `turns` times over orig
        return d * np.log(orig / (turns * 2 * np.pi)) / (2 * np.log(base))

    low = max(np.floor(pair_turning(beta_fast)), 0.0)
    high = min(np.ceil(pair_turning(beta_slow)), d - 1.0)
    if high == low:
        high += 0.001
    ramp = np.clip((np.arange(d // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    keep = 1.0 - ramp  # 1: the pair keeps its frequency (it turns often), 0: interpolated
    plain = base ** (-pair / d)
    freqs = plain / s * (1.0 - keep) + plain * keep
    magnitude = scaling.get("attn_factor", 1.0) * ((0.1 * np.log(s) + 1.0) if s > 1 else 1.0)
    return freqs, magnitude


def rope_scaling_of(reader, arch):
    """rope.scaling.* of a GGUF file (llama.cpp's keys), or None."""
    a = arch + "."
    kind = _field(reader, a + "rope.scaling.type")
    if kind in (None, "none"):
        return None
    out = {"type": kind, "factor": _field(reader, a + "rope.scaling.factor") or 1.0}
    orig = _field(reader, a + "rope.scaling.original_context_length")
    out["orig_ctx"] = orig if orig else _field(reader, a + "context_length")
    return out


def alibi_slopes(n_head, max_bias=8.0):
    """ALiBi's head slopes as the paper's reference code defines them (Press et al. 2022):
    a geometric sequence for a power of two, and for other counts the closest power of
    two's slopes followed by every other slope of twice that many heads."""
    def power_of_two(n):
        start = 2.0 ** (-max_bias / n)
        return [start ** (i + 1) for i in range(n)]
    closest = 2 ** int(np.floor(np.log2(n_head)))
    if closest == n_head:
        return np.array(power_of_two(n_head))
    return np.array(power_of_two(closest) + power_of_two(2 * closest)[0::2][:n_head - closest])


class ReferenceModel:
    def __init__(self, path, rope_scaling="file"):
        """rope_scaling: "file" (the file's metadata), or a dict as rope_frequencies takes."""
        r = GGUFReader(path)
        self.arch = _field(r, "general.architecture")
        a = self.arch + "."
        self.n_head = _field(r, a + "attention.head_count")
        self.n_head_kv = _field(r, a + "attention.head_count_kv") or self.n_head
        # bloom and mpt: LayerNorm, fused QKV, ALiBi, GELU without a gate; bloom's biases and
        # embedding norm; mpt's maximum ALiBi bias and optional QKV clamp in the file.
        self.bloom = self.arch in ("bloom", "mpt")
        self.eps = _field(r, a + ("attention.layer_norm_epsilon" if self.bloom else "attention.layer_norm_rms_epsilon"))
        self.max_alibi_bias = (_field(r, a + "attention.max_alibi_bias") or 0.0) if self.arch == "mpt" else 8.0
        self.clamp_kqv = _field(r, a + "attention.clamp_kqv") or 0.0
        self.rope_base = _field(r, a + "rope.freq_base") or 10000.0
        self.rope_scaling = rope_scaling_of(r, self.arch) if rope_scaling == "file" else rope_scaling
        self.n_layer = _field(r, a + "block_count")
        self.n_expert_used = _field(r, a + "expert_used_count") or 0
        self.w = {}
        for t in r.tensors:
            ne = [int(x) for x in t.shape]  # ggml order: ne[0] is contiguous
            values = dequantize(t.data, t.tensor_type).astype(np.float64)
            self.w[t.name] = values.reshape(list(reversed(ne)))
        self.n_embd = self.w["token_embd.weight"].shape[1]
        self.head_dim = _field(r, a + "attention.key_length") or self.n_embd // self.n_head
        self.halves = self.arch != "llama"
        # gemma3 (Gemma 3 technical report; Hugging Face's Gemma3 modelling):
        # every sixth layer global, the others attend a sliding window and
        # turn at base 10,000; embeddings scaled by sqrt(d); GELU (tanh).
        self.gemma3 = self.arch == "gemma3"
        self.window = _field(r, a + "attention.sliding_window") if self.gemma3 else 0

    def _local(self, layer):
        return self.gemma3 and layer % 6 != 5

    def _rmsnorm(self, x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * w

    def _norm(self, x, name):
        if not self.bloom:
            return self._rmsnorm(x, self.w[name + ".weight"])
        c = x - x.mean(-1, keepdims=True)
        return c / np.sqrt((c * c).mean(-1, keepdims=True) + self.eps) * self.w[name + ".weight"] + self.w.get(name + ".bias", 0)

    def _rope(self, x, pos, local=False):
        d = x.shape[-1]
        if local:
            inv, magnitude = rope_frequencies(d, 10000.0, None)
        else:
            inv, magnitude = rope_frequencies(d, self.rope_base, self.rope_scaling)
        ang = pos[:, None] * inv[None, :]
        cos, sin = magnitude * np.cos(ang)[:, None, :], magnitude * np.sin(ang)[:, None, :]
        if self.halves:
            x1, x2 = x[..., : d // 2], x[..., d // 2 :]
            return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
        out = np.empty_like(x)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out[..., 0::2] = x1 * cos - x2 * sin
        out[..., 1::2] = x1 * sin + x2 * cos
        return out

    def _attention(self, p, x, pos, local=False):
        t, hd = x.shape[0], self.head_dim
        if self.bloom:  # fused: the Q rows, then K, then V
            qkv = x @ self.w[p + "attn_qkv.weight"].T + self.w.get(p + "attn_qkv.bias", 0)
            if self.clamp_kqv > 0:
                qkv = np.clip(qkv, -self.clamp_kqv, self.clamp_kqv)
            nq, nkv = self.n_head * hd, self.n_head_kv * hd
            q, k, v = qkv[:, :nq], qkv[:, nq:nq + nkv], qkv[:, nq + nkv:]
        else:
            q = x @ self.w[p + "attn_q.weight"].T + self.w.get(p + "attn_q.bias", 0)
            k = x @ self.w[p + "attn_k.weight"].T + self.w.get(p + "attn_k.bias", 0)
            v = x @ self.w[p + "attn_v.weight"].T + self.w.get(p + "attn_v.bias", 0)
        q, k = q.reshape(t, self.n_head, hd), k.reshape(t, self.n_head_kv, hd)
        if p + "attn_q_norm.weight" in self.w:  # QK-norm: each head normalized
            q = self._rmsnorm(q, self.w[p + "attn_q_norm.weight"])
            k = self._rmsnorm(k, self.w[p + "attn_k_norm.weight"])
        if not self.bloom:
            q = self._rope(q, pos, local)
            k = self._rope(k, pos, local)
        v = v.reshape(t, self.n_head_kv, hd)
        group = self.n_head // self.n_head_kv
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd)
        distance = pos[:, None] - pos[None, :]  # query minus key position
        if self.bloom:
            scores = scores - alibi_slopes(self.n_head, self.max_alibi_bias)[:, None, None] * distance[None]
        masked = distance < 0
        if local:
            masked |= distance >= self.window
        scores = np.where(masked[None], -np.inf, scores)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        out = np.einsum("hts,shd->thd", scores, v).reshape(t, self.n_head * hd)
        return out @ self.w[p + "attn_output.weight"].T + self.w.get(p + "attn_output.bias", 0)

    def _ffn(self, p, x):
        if self.bloom:
            u = x @ self.w[p + "ffn_up.weight"].T + self.w.get(p + "ffn_up.bias", 0)
            act = 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u**3)))
            return act @ self.w[p + "ffn_down.weight"].T + self.w.get(p + "ffn_down.bias", 0)
        if p + "ffn_gate_inp.weight" in self.w:
            return self._moe(p, x)
        g = x @ self.w[p + "ffn_gate.weight"].T
        u = x @ self.w[p + "ffn_up.weight"].T
        if self.gemma3:
            act = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g**3)))
        else:
            act = g / (1 + np.exp(-g))
        return (act * u) @ self.w[p + "ffn_down.weight"].T

    def _moe(self, p, x):
        """Mixture of experts (Shazeer et al. 2017; Mixtral; Qwen1.5-MoE): softmax over the router's
        logits, the top k experts (a tie to the lower index), Mixtral renormalizing their
        weights to 1 and Qwen not, plus Qwen's shared expert behind a sigmoid gate."""
        silu = lambda v: v / (1 + np.exp(-v))  # noqa: E731
        logits = x @ self.w[p + "ffn_gate_inp.weight"].T
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        gate, up, down = (self.w[p + f"ffn_{n}_exps.weight"] for n in ("gate", "up", "down"))
        out = np.zeros_like(x)
        for t in range(x.shape[0]):
            ranked = sorted(range(probs.shape[1]), key=lambda e: (-probs[t, e], e))
            chosen = ranked[:self.n_expert_used]
            if self.n_expert_used < len(ranked):  # how near the last chosen expert was to the first left out
                gap = probs[t, ranked[self.n_expert_used - 1]] - probs[t, ranked[self.n_expert_used]]
                self.route_margin[t] = min(self.route_margin[t], gap)
            w = probs[t, chosen]
            if self.arch == "llama":
                w = w / w.sum()
            for e, we in zip(chosen, w):
                out[t] += we * (down[e] @ (silu(gate[e] @ x[t]) * (up[e] @ x[t])))
        if p + "ffn_gate_inp_shexp.weight" in self.w:
            h = silu(x @ self.w[p + "ffn_gate_shexp.weight"].T) * (x @ self.w[p + "ffn_up_shexp.weight"].T)
            shared = h @ self.w[p + "ffn_down_shexp.weight"].T
            out += shared / (1 + np.exp(-(x @ self.w[p + "ffn_gate_inp_shexp.weight"])))[:, None]
        return out

    def _post(self, p, name, y):
        return self._rmsnorm(y, self.w[p + name]) if p + name in self.w else y

    def logits(self, tokens):
        """Logits of every position, shape [len(tokens), n_vocab]."""
        # Per position, the smallest gap (in probability) between a chosen expert and the
        # first one left out, over the layers: where it is tiny, any rounding may swap them.
        self.route_margin = np.full(len(tokens), np.inf)
        x = self.w["token_embd.weight"][np.asarray(tokens)]
        if self.gemma3:
            x = x * np.sqrt(self.n_embd)
        if "token_embd_norm.weight" in self.w:
            x = self._norm(x, "token_embd_norm")
        pos = np.arange(len(tokens), dtype=np.float64)
        for i in range(self.n_layer):
            p = f"blk.{i}."
            a = self._attention(p, self._norm(x, p + "attn_norm"), pos, self._local(i))
            x = x + self._post(p, "post_attention_norm.weight", a)
            f = self._ffn(p, self._norm(x, p + "ffn_norm"))
            x = x + self._post(p, "post_ffw_norm.weight", f)
        x = self._norm(x, "output_norm")
        out = self.w.get("output.weight", self.w["token_embd.weight"])
        return x @ out.T
