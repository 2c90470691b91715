"""Finishing a document from a prefix (check_llguidance_masks.py, part 2): a token only troupe
allows is followed to a whole document under troupe's grammar, which is then validated."""
import random

import numpy as np

from llguidance_classify import JsonScan, schemas_at
from llguidance_engines import bitmask

COMPLETION_STEPS = 400
PREFERENCE = [b'"', b"}", b"]", b",", b":"] + [bytes([c]) for c in b"0123456789abcdefghijklmnopqrstuvwxyz"] + \
             [bytes([c]) for c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZ-.+ \n"] + [bytes([c]) for c in range(0x20, 0x7F)]


def next_bytes(scan, schema):
    """The bytes a short completion would rather write next: close what is open, write the
    required properties that are missing (by name), end strings and numbers."""
    m = scan.mode
    missing = []
    if scan.stack and scan.stack[-1][0] == "obj":
        frame = scan.stack[-1]
        path = [f[1] for f in scan.stack[:-1]]
        for s in schemas_at(schema, path):
            missing += [k for k in s.get("required", []) if k not in frame[2] and k not in missing]
    if m == "string" and scan.is_key:
        have = scan.buf.decode("utf-8", "replace")
        for k in missing:
            if k.startswith(have):
                return [k[len(have)].encode() if len(k) > len(have) else b'"']
        return [b'"']
    if m == "string":
        path = scan.path()
        if any(s.get("format") == "email" for s in schemas_at(schema, path)):
            return [b'"', b"@", b".", b"a"]
        return [b'"'] + [bytes([c]) for c in b"a0.@-:+TZ"]
    if m in ("key", "key_or_close"):
        return [b'"'] if missing else [b"}", b'"']
    if m == "after":
        return [b","] if missing else [b"}", b"]", b","]
    if m == "number":
        return [b"}", b"]", b","]
    if m in ("value", "value_or_close"):
        return [b"]", b"0", b'"', b"n", b"f", b"t", b"{", b"[", b"-"]
    return []


def complete(vocab, base, data, schema, attempts=4, limit=COMPLETION_STEPS):
    """Tokens that finish the text `data` in matcher `base` (left as it is), one byte at a time:
    first by next_bytes, then PREFERENCE, then the lowest allowed token; where that finds no end
    in `limit` tokens, walks that mix next_bytes with random allowed bytes. None if none ends."""
    pref = [vocab.single[b] for b in PREFERENCE]
    printable = np.zeros(vocab.n, dtype=bool)
    printable[[vocab.single[bytes([c])] for c in range(0x20, 0x7F)]] = True
    rng = random.Random(len(data))
    for attempt in range(attempts):
        m = base.deep_copy()
        scan = JsonScan(data) if schema is not None else None
        out = []
        for _ in range(limit):
            if m.is_error():
                break
            allowed = np.unpackbits(bitmask(m, vocab.n), bitorder="little")[:vocab.n].astype(bool)
            if any(allowed[e] for e in vocab.eog):
                return out
            first = [vocab.single[b] for b in next_bytes(scan, schema)] if scan else []
            pick = None
            if attempt and rng.random() < 0.6:
                cands = np.flatnonzero(allowed & printable)
                pick = int(rng.choice(list(cands))) if len(cands) else None
            if pick is None:
                pick = next((t for t in first + pref if allowed[t]), None)
            if pick is None:
                nz = np.flatnonzero(allowed)
                if not len(nz):
                    if m.is_accepting():
                        return out
                    break
                pick = int(nz[0])
            if not m.consume_token(pick):
                break
            out.append(pick)
            if scan:
                for b in vocab.bytes[pick]:
                    scan.feed(b)
    return None
