"""An independent forward pass of qwen2/llama GGUF models in NumPy.

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


class ReferenceModel:
    def __init__(self, path):
        r = GGUFReader(path)
        self.arch = _field(r, "general.architecture")
        a = self.arch + "."
        self.n_head = _field(r, a + "attention.head_count")
        self.n_head_kv = _field(r, a + "attention.head_count_kv") or self.n_head
        self.eps = _field(r, a + "attention.layer_norm_rms_epsilon")
        self.rope_base = _field(r, a + "rope.freq_base") or 10000.0
        self.n_layer = _field(r, a + "block_count")
        self.w = {}
        for t in r.tensors:
            ne = [int(x) for x in t.shape]  # ggml order: ne[0] is contiguous
            values = dequantize(t.data, t.tensor_type).astype(np.float64)
            self.w[t.name] = values.reshape(list(reversed(ne)))
        self.n_embd = self.w["token_embd.weight"].shape[1]
        self.head_dim = self.n_embd // self.n_head
        self.halves = self.arch != "llama"

    def _rmsnorm(self, x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * w

    def _rope(self, x, pos):
        d = x.shape[-1]
        inv = self.rope_base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        ang = pos[:, None] * inv[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        if self.halves:
            x1, x2 = x[..., : d // 2], x[..., d // 2 :]
            return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
        out = np.empty_like(x)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out[..., 0::2] = x1 * cos - x2 * sin
        out[..., 1::2] = x1 * sin + x2 * cos
        return out

    def _attention(self, p, x, pos):
        t, hd = x.shape[0], self.head_dim
        q = x @ self.w[p + "attn_q.weight"].T + self.w.get(p + "attn_q.bias", 0)
        k = x @ self.w[p + "attn_k.weight"].T + self.w.get(p + "attn_k.bias", 0)
        v = x @ self.w[p + "attn_v.weight"].T + self.w.get(p + "attn_v.bias", 0)
        q = self._rope(q.reshape(t, self.n_head, hd), pos)
        k = self._rope(k.reshape(t, self.n_head_kv, hd), pos)
        v = v.reshape(t, self.n_head_kv, hd)
        group = self.n_head // self.n_head_kv
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd)
        scores = scores + np.triu(np.full((t, t), -np.inf), 1)[None]
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        out = np.einsum("hts,shd->thd", scores, v).reshape(t, self.n_head * hd)
        return out @ self.w[p + "attn_output.weight"].T

    def _ffn(self, p, x):
        g = x @ self.w[p + "ffn_gate.weight"].T
        u = x @ self.w[p + "ffn_up.weight"].T
        return (g / (1 + np.exp(-g)) * u) @ self.w[p + "ffn_down.weight"].T

    def logits(self, tokens):
        """Logits of every position, shape [len(tokens), n_vocab]."""
        x = self.w["token_embd.weight"][np.asarray(tokens)]
        pos = np.arange(len(tokens), dtype=np.float64)
        for i in range(self.n_layer):
            p = f"blk.{i}."
            x = x + self._attention(p, self._rmsnorm(x, self.w[p + "attn_norm.weight"]), pos)
            x = x + self._ffn(p, self._rmsnorm(x, self.w[p + "ffn_norm.weight"]))
        x = self._rmsnorm(x, self.w["output_norm.weight"])
        out = self.w.get("output.weight", self.w["token_embd.weight"])
        return x @ out.T
