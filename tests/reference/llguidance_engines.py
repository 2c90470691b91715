"""The two mask engines of check_llguidance_masks.py: troupe's command line (`troupe grammar`,
`troupe tokenize`) and llguidance's matcher, each mask as bits over the vocabulary."""
import base64
import json
import subprocess

import llguidance
import numpy as np


class Troupe:
    def __init__(self, binary, model):
        self.binary, self.model = binary, model

    def gbnf(self, flag, path):
        p = subprocess.run([self.binary, "grammar", flag, path], capture_output=True, text=True)
        if p.returncode != 0:
            return None, (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
        return p.stdout, None

    def tokenize(self, texts):
        lines = "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in texts)
        p = subprocess.run([self.binary, "tokenize", "--model", self.model, "--json-lines"], input=lines,
                           capture_output=True, text=True, check=True)
        out = [json.loads(l)["ids"] for l in p.stdout.splitlines() if l.strip()]
        assert len(out) == len(texts), (len(out), len(texts))
        return out

    def masks(self, flag, path, prefixes, n):
        lines = "".join(json.dumps({"tokens": t}) + "\n" for t in prefixes)
        p = subprocess.run([self.binary, "grammar", flag, path, "--model", self.model], input=lines.encode(),
                           capture_output=True, check=True)
        out = []
        for l in p.stdout.splitlines():
            if l.strip():
                r = json.loads(l)
                bits = np.frombuffer(base64.b64decode(r.pop("mask")), dtype=np.uint8)
                assert len(bits) * 8 >= n and not bits[(n + 7) // 8:].any(), "troupe's mask is not over the n tokens"
                r["bits"] = bits[:(n + 7) // 8]
                out.append(r)
        assert len(out) == len(prefixes), (len(out), len(prefixes))
        return out


def matcher(vocab, grammar):
    m = llguidance.LLMatcher(vocab.ll, grammar, log_level=0)
    return m, (m.get_error() if m.is_error() else None)


def bitmask(m, n):
    """llguidance's mask, cut to n tokens (it allocates one 32-bit word more than it needs)."""
    b = np.frombuffer(m.compute_bitmask(), dtype=np.uint8)
    assert not b[(n + 7) // 8:].any() and (n % 8 == 0 or not b[n // 8] >> (n % 8)), "llguidance allows a token past n"
    return b[:(n + 7) // 8]


def tokens_of(bits, n):
    return np.flatnonzero(np.unpackbits(bits, bitorder="little")[:n])
