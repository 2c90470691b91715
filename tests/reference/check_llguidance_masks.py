"""Token masks: troupe's grammar engine against llguidance, on real schemas and grammars.

usage: check_llguidance_masks.py TROUPE_BINARY MODEL_GGUF [-v] [--only NAME...]

llguidance (PyPI llguidance 1.9.1, in the test venv only; troupe shares no code with it) is the
reference. Both engines see the same vocabulary: troupe reads the GGUF; llguidance gets an
LLTokenizer built here from the GGUF's tokenizer.ggml.tokens (gguf-py), each token's bytes
as troupe's trie has them, the end-of-generation tokens as llama.cpp picks them (its EOS
tokens) and control tokens marked special. Token prefixes come from `troupe tokenize`.

Corpus: tests/reference/llguidance_schemas/*.json (JSON Schemas as users send them) and
*.gbnf. For each schema, valid instances are generated here (fixed seed, checked with
`jsonschema`) and laid out as troupe's grammar takes them (json.dumps' default, compact,
indented); every prefix of each instance's tokens is a test point: mid-key, mid-string,
mid-number, inside nested arrays, between values, the whole text. Instances of the .gbnf
files are sampled from the grammar.

1. Same grammar, two mask engines. troupe's GBNF (`troupe grammar --json-schema`),
   converted by llguidance's gbnf_to_lark (its \\u/\\U escapes mended), runs in
   llguidance's LLMatcher with no_forcing (else llguidance allows only the canonical token
   where the grammar forces bytes); troupe's masks come from `troupe grammar --model`. The
   allowed sets must be equal. A difference is explained only where llguidance, given the
   same grammar with one-character lexemes, then equals troupe: its lexer matches a converted
   terminal greedily (longest match), a plain CFG does not. Any other difference fails.
2. Two schema converters. llguidance's own JSON Schema compiler (`%json` in Lark, x-guidance
   whitespace_pattern = troupe's `ws` rule, general \\u escapes on) on the same prefixes:
   the equal masks are counted and each difference is classified at the byte where the
   other engine refuses the token. A token only troupe allows is completed (llguidance
   running troupe's grammar) to a whole document and validated with `jsonschema`; and
   invalid instances (a valid one broken in one place) must be refused whole by troupe.
   Either failing is troupe allowing invalid output: a failure.

A summary table goes to stdout; the exit status is non-zero on an unexplained part-1
difference or a troupe-allows-invalid case.
"""
import base64
import collections
import datetime
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import uuid

try:
    import re._parser as sre_parse  # Python 3.11+
    from re._constants import (ANY, AT, BRANCH, CATEGORY, CATEGORY_DIGIT, CATEGORY_NOT_DIGIT, CATEGORY_NOT_SPACE,
                               CATEGORY_NOT_WORD, CATEGORY_SPACE, CATEGORY_WORD, IN, LITERAL, MAX_REPEAT, MAXREPEAT,
                               MIN_REPEAT, NEGATE, NOT_LITERAL, RANGE, SUBPATTERN)
except ImportError:  # pragma: no cover
    import sre_parse
    from sre_constants import (ANY, AT, BRANCH, CATEGORY, CATEGORY_DIGIT, CATEGORY_NOT_DIGIT, CATEGORY_NOT_SPACE,
                               CATEGORY_NOT_WORD, CATEGORY_SPACE, CATEGORY_WORD, IN, LITERAL, MAX_REPEAT, MAXREPEAT,
                               MIN_REPEAT, NEGATE, NOT_LITERAL, RANGE, SUBPATTERN)

import gguf
import jsonschema
import llguidance
import numpy as np
from llguidance.gbnf_to_lark import AlternativeNode, GrammarParser, LiteralNode, RegexNode, RepetitionNode
from llguidance.gbnf_to_lark import RuleRefNode, SequenceNode, resolve

SEED = 20261205
CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llguidance_schemas")
MIN_PREFIXES = 200       # per schema or grammar
MAX_INSTANCES = 14       # per schema, before giving up on MIN_PREFIXES
MAX_GENERATED = 200      # instances generated per schema at most (a scalar root needs many)
MAX_INVALID = 40         # invalid instances per schema, each must be refused whole
MAX_CHECKS = 700         # troupe-only tokens (part 2) completed and validated, in all
CHECKS_PER_CLASS = 6     # of them per schema and difference class
COMPLETION_STEPS = 400
VERBOSE = "-v" in sys.argv
ONLY = sys.argv[sys.argv.index("--only") + 1:] if "--only" in sys.argv else None

# llama.cpp's end-of-generation texts (llama-vocab.cpp), which troupe's tokenizer follows: the
# tokens allowed exactly where the text is whole. Given to llguidance as its EOS tokens.
EOG_TEXTS = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
             "_<EOT>", "<|end_of_text|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"}


def log(*a):
    print(*a, flush=True)


# ---- the vocabulary, for llguidance --------------------------------------------------------------


def gpt2_byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class Vocab:
    """The GGUF's tokens as bytes, their types, and an llguidance tokenizer over them."""

    def __init__(self, model):
        r = gguf.GGUFReader(model)
        assert r.fields["tokenizer.ggml.model"].contents() == "gpt2", "byte-level BPE vocabulary expected"
        f = r.fields["tokenizer.ggml.tokens"]
        texts = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        self.types = list(r.fields["tokenizer.ggml.token_type"].contents())
        eos = int(r.fields["tokenizer.ggml.eos_token_id"].contents())
        dec = gpt2_byte_decoder()
        # normal 1, unknown 2, control 3, user-defined 4, unused 5, byte 6
        self.bytes = []
        for t, ty in zip(texts, self.types):
            if ty in (1, 6):
                self.bytes.append(bytes(dec[c] for c in t))
            elif ty == 4:  # user-defined (Qwen's <tool_call>): its text, as troupe's trie has it
                self.bytes.append(t.encode("utf-8"))
            else:
                self.bytes.append(b"")
        self.n = len(texts)
        self.special = {i for i, ty in enumerate(self.types) if ty in (2, 3, 4)}
        self.unused = {i for i, ty in enumerate(self.types) if ty == 5}
        # As llama.cpp: any token with such a text, whatever its type (Qwen2.5's normal token 128247
        # "</s>" becomes a control token that ends generation).
        self.eog = sorted({eos} | {i for i, t in enumerate(texts) if t in EOG_TEXTS})
        self.eog_set = set(self.eog)
        lltokens = []
        for i, (b, ty) in enumerate(zip(self.bytes, self.types)):
            if ty in (2, 3) or i in self.eog_set:
                lltokens.append(b"\xff" + texts[i].encode("utf-8"))  # llguidance's mark of a special token
            else:
                lltokens.append(b)
        vocab = self

        class Wrapped:
            eos_token_id = eos
            bos_token_id = None
            tokens = lltokens
            special_token_ids = sorted(i for i, ty in enumerate(vocab.types) if ty == 3)

            def __call__(self, s):  # llguidance tokenizes only for prompts and forced tokens
                return vocab.greedy(s if isinstance(s, bytes) else s.encode("utf-8"))

        self._trie = None
        self.ll = llguidance.LLTokenizer(llguidance.TokenizerWrapper(Wrapped()), n_vocab=self.n, eos_token=self.eog)
        self.single = {}
        for i, b in enumerate(self.bytes):
            if len(b) == 1 and i not in self.special:
                self.single.setdefault(b, i)
        assert len(self.single) == 256, "a byte-level vocabulary has a token for every byte"
        self.byte_token = [self.single[bytes([b])] for b in range(256)]

    def greedy(self, data):
        if self._trie is None:
            self._trie = {}
            for i, b in enumerate(self.bytes):
                if b and i not in self.special and i not in self.eog_set:
                    self._trie.setdefault(b, i)
        out, at = [], 0
        while at < len(data):
            for k in range(min(64, len(data) - at), 0, -1):
                t = self._trie.get(data[at:at + k])
                if t is not None:
                    out.append(t)
                    at += k
                    break
            else:
                raise ValueError("untokenizable byte")
        return out

    def show(self, t):
        return f"{t} {self.bytes[t]!r}" if self.bytes[t] else f"{t} <special {t}>"


# ---- sampling regexes (patterns), formats and strings --------------------------------------------

POOL = [chr(c) for c in range(0x20, 0x7F)] + list("éüñßø中文字😀")


def sample_regex(pattern, rng):
    out = []

    def in_set(items, c):
        for op, av in items:
            if op == LITERAL and ord(c) == av:
                return True
            if op == RANGE and av[0] <= ord(c) <= av[1]:
                return True
            if op == CATEGORY:
                if av == CATEGORY_DIGIT and c.isdigit() and c.isascii():
                    return True
                if av == CATEGORY_WORD and (c.isalnum() or c == "_") and c.isascii():
                    return True
                if av == CATEGORY_SPACE and c in " \t\n\r\f\v":
                    return True
        return False

    def gen(seq):
        for op, av in seq:
            if op == LITERAL:
                out.append(chr(av))
            elif op == NOT_LITERAL:
                out.append(rng.choice([c for c in POOL if ord(c) != av]))
            elif op == ANY:
                out.append(rng.choice(POOL[:95]))
            elif op == IN:
                negate = av and av[0][0] == NEGATE
                items = av[1:] if negate else av
                if not negate and all(o in (LITERAL, RANGE) for o, _ in items):
                    o, v = rng.choice(items)
                    out.append(chr(v) if o == LITERAL else chr(rng.randint(v[0], v[1])))
                else:
                    cands = [c for c in POOL if in_set(items, c) != negate]
                    out.append(rng.choice(cands))
            elif op == CATEGORY:
                cands = [c for c in POOL if {CATEGORY_DIGIT: c.isdigit(), CATEGORY_WORD: c.isalnum() or c == "_",
                                             CATEGORY_SPACE: c == " ", CATEGORY_NOT_DIGIT: not c.isdigit(),
                                             CATEGORY_NOT_WORD: not (c.isalnum() or c == "_"),
                                             CATEGORY_NOT_SPACE: c != " "}[av] and c.isascii()]
                out.append(rng.choice(cands))
            elif op in (MAX_REPEAT, MIN_REPEAT):
                lo, hi, sub = av
                hi = lo + 3 if hi == MAXREPEAT else hi
                for _ in range(rng.randint(lo, hi)):
                    gen(sub)
            elif op == SUBPATTERN:
                gen(av[-1])
            elif op == BRANCH:
                gen(rng.choice(av[1]))
            elif op == AT:
                pass
            else:
                raise ValueError(f"pattern {pattern!r}: no sampler for {op}")

    gen(sre_parse.parse(pattern))
    return "".join(out)


WORDS = ("alpha bravo delta echo river stone cloud maple quartz orbit harbor velvet Ada Lovelace Grace Hopper Paris "
         "Berlin Zürich São Paulo naïve café 東京 北京 résumé data-driven 42 v2.1 O'Brien C++ x86_64 "
         "new\nline tab\there \"quoted\" back\\slash path/to/file emoji😀 smile☺ 100% a&b <tag> {braces} [brackets]").split(" ")


def sample_text(rng, lo=0, hi=None):
    hi = hi if hi is not None else max(lo, 24)
    target = rng.randint(lo, min(hi, lo + 30))
    s = ""
    while len(s) < target:
        s += (" " if s else "") + rng.choice(WORDS)
    s = s[:target]
    if len(s) < lo:
        s += "x" * (lo - len(s))
    return s


def sample_format(fmt, rng):
    if fmt == "date":
        d = datetime.date(1950, 1, 1) + datetime.timedelta(days=rng.randint(0, 40000))
        return d.isoformat()
    if fmt == "date-time":
        d = datetime.datetime(1990, 1, 1) + datetime.timedelta(seconds=rng.randint(0, 1_500_000_000))
        s = d.strftime("%Y-%m-%dT%H:%M:%S")
        if rng.random() < 0.3:
            s += "." + str(rng.randint(0, 999)).zfill(3)
        return s + rng.choice(["Z", "Z", "+02:00", "-05:30", "+00:00"])
    if fmt == "time":
        return f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"
    if fmt == "uuid":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    if fmt == "email":
        user = rng.choice(["ada", "grace.hopper", "j_smith", "ops+alerts", "x"])
        return f"{user}@{rng.choice(['example.com', 'mail.example.org', 'uni.edu', 'a.io'])}"
    if fmt == "ipv4":
        return ".".join(str(rng.choice([0, 1, 10, 127, 192, 255, rng.randint(0, 255)])) for _ in range(4))
    raise ValueError(f"no sampler for format {fmt}")


# ---- valid instances of a schema, as value trees ---------------------------------------------------


class Node:
    """A generated JSON value with the subschema it was generated for."""

    def __init__(self, kind, schema, value, children=None):
        self.kind, self.schema, self.value, self.children = kind, schema, value, children

    def py(self):
        if self.kind == "object":
            return {k: v.py() for k, v in self.children}
        if self.kind == "array":
            return [v.py() for v in self.children]
        return self.value


class InstanceGenerator:
    def __init__(self, root, rng):
        self.root, self.rng = root, rng

    def resolve(self, s):
        while "$ref" in s:
            ref = s["$ref"]
            assert ref.startswith("#/"), ref
            t = self.root
            for part in ref[2:].split("/"):
                t = t[part]
            s = {**t, **{k: v for k, v in s.items() if k != "$ref"}} if len(s) > 1 else t
        return s

    def gen(self, s, depth=0):
        rng = self.rng
        s = self.resolve(s)
        if "const" in s:
            return Node("scalar", s, s["const"])
        if "enum" in s:
            return Node("scalar", s, rng.choice(s["enum"]))
        for key in ("anyOf", "oneOf"):
            if key in s:
                branches = s[key]
                if depth > 3:  # recursion: prefer a branch without a $ref
                    leaves = [b for b in branches if "$ref" not in b] or branches
                    branches = leaves
                return self.gen({**{k: v for k, v in s.items() if k != key}, **rng.choice(branches)}, depth)
        t = s.get("type")
        if isinstance(t, list):
            t = rng.choice(t)
        if t == "null":
            return Node("scalar", s, None)
        if t == "boolean":
            return Node("scalar", s, rng.random() < 0.5)
        if t == "integer":
            lo, hi = s.get("minimum"), s.get("maximum")
            if lo is None and hi is None:
                v = rng.choice([0, 1, 7, 42, -3, 1234, -987654, 2 ** 31, rng.randint(-10 ** 6, 10 ** 6)])
            else:
                lo = lo if lo is not None else hi - 10 ** rng.randint(1, 6)
                hi = hi if hi is not None else lo + 10 ** rng.randint(1, 6)
                v = rng.choice([lo, hi, rng.randint(lo, hi), rng.randint(lo, hi)])
            return Node("number", s, int(v))
        if t == "number":
            lo = s.get("minimum", -1e6 if rng.random() < 0.3 else 0)
            hi = s.get("maximum", 1e6)
            r = rng.random()
            if r < 0.2:
                v = float(rng.randint(int(max(lo, -1000)), int(min(hi, 1000))))
            elif r < 0.25:
                v = rng.choice([1.5e-7, 6.02e23, 3e20]) if lo <= 1.5e-7 else lo
            else:
                v = round(rng.uniform(lo, min(hi, lo + 10 ** rng.randint(1, 5))), rng.randint(1, 4))
            v = min(max(v, lo), hi)
            if rng.random() < 0.25 and v == int(v) and abs(v) < 1e15:
                v = int(v)
            return Node("number", s, v)
        if t == "string":
            if "format" in s:
                v = sample_format(s["format"], rng)
            elif "pattern" in s:
                v = sample_regex(s["pattern"], rng)
            else:
                v = sample_text(rng, s.get("minLength", 0), s.get("maxLength"))
            return Node("string", s, v)
        if t == "array":
            lo = s.get("minItems", 0)
            hi = s.get("maxItems", lo + 3)
            n = rng.randint(lo, min(hi, lo + (3 if depth < 2 else 1 if depth < 4 else 0)))
            return Node("array", s, None, [self.gen(s["items"], depth + 1) for _ in range(n)])
        if t == "object" or "properties" in s:
            req = set(s.get("required", []))
            kids = []
            for k, sub in s.get("properties", {}).items():
                if k in req or rng.random() < (0.7 if depth < 3 else 0.2):
                    kids.append((k, self.gen(sub, depth + 1)))
            return Node("object", s, None, kids)
        raise ValueError(f"no generator for {s}")


# ---- invalid instances: one valid instance broken in one place ----------------------------------

BAD_FORMATS = {"date": ["2023-02-30", "2023-13-01", "23-01-01"], "date-time": ["2023-01-01T25:00:00Z",
               "2023-01-01T10:00:00", "2023-02-30T10:00:00Z"], "uuid": ["123e4567-e89b-12d3-a456-42661417400",
               "123e4567-e89b-12d3-a456-42661417400g", "123e4567e89b12d3a456426614174000"],
               "email": ["no-at-sign", "a b@example.com", "@example.com"], "ipv4": ["256.1.1.1", "1.2.3", "1.2.3.4.5"]}
NOT_OF_TYPE = [("integer", 0), ("string", "x"), ("boolean", True), ("null", None), ("array", []), ("object", {})]


def json_types(s):
    t = s.get("type")
    if t is None:
        if "enum" in s or "const" in s:
            vals = s.get("enum", [s.get("const")])
            return {{bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}[type(v)]
                    for v in vals}
        return None
    t = set(t) if isinstance(t, list) else {t}
    return t | ({"integer"} if "number" in t else set())


def leaf(v, schema):
    if isinstance(v, list):
        return Node("array", schema, None, [])
    if isinstance(v, dict):
        return Node("object", schema, None, [])
    return Node("scalar", schema, v)


def mutations(node, gen, rng):
    """(description, mutated copy) for ways to break the instance `node` in one place."""
    import copy
    out = []
    spots = []

    def walk(n, parent, idx):
        spots.append((n, parent, idx))
        for i, c in enumerate(n.children or []):
            walk(c[1] if n.kind == "object" else c, n, i)

    walk(node, None, None)
    for n, parent, idx in spots:
        s = gen.resolve(n.schema) if n.schema is not None else {}
        if any(k in s for k in ("anyOf", "oneOf")):
            continue
        bad = []
        types = json_types(s)
        if types:
            bad += [(f"type {t} where {'/'.join(sorted(types))}", leaf(v, s)) for t, v in NOT_OF_TYPE
                    if t not in types and not (t == "integer" and "number" in types)]
        if "enum" in s or "const" in s:
            bad.append(("value outside enum/const", leaf("zzz-not-allowed", s)))
        if n.kind == "number":
            if "minimum" in s:
                bad.append(("below minimum", Node("number", s, s["minimum"] - (1 if s.get("type") == "integer" else 0.5))))
            if "maximum" in s:
                bad.append(("above maximum", Node("number", s, s["maximum"] + 1)))
            if s.get("type") == "integer":
                bad.append(("fraction for an integer", Node("number", s, 1.5)))
        if n.kind == "string":
            if "maxLength" in s:
                bad.append(("longer than maxLength", Node("string", s, "x" * (s["maxLength"] + 1))))
                bad.append(("longer than maxLength (escapes)", Node("string", s, "\n\"" * (s["maxLength"] // 2 + 1))))
            if s.get("minLength", 0) > 0:
                bad.append(("shorter than minLength", Node("string", s, "x" * (s["minLength"] - 1))))
                # one code point each, four UTF-8 bytes, two UTF-16 units (\\ud83d\\ude00 when escaped)
                bad.append(("shorter than minLength (astral characters)", Node("string", s, "😀" * (s["minLength"] - 1))))
                bad.append(("shorter than minLength (astral, escaped)", Node("string", s, Escaped("😀" * (s["minLength"] - 1)))))
            if "pattern" in s:
                bad.append(("not matching pattern", Node("string", s, n.value + "!")))
            for v in BAD_FORMATS.get(s.get("format"), []):
                bad.append((f"bad {s['format']}", Node("string", s, v)))
        if n.kind == "array":
            if "maxItems" in s and n.children:
                bad.append(("more than maxItems", Node("array", s, None, n.children + [n.children[0]] * (s["maxItems"] + 1 - len(n.children)))))
            if s.get("minItems", 0) > 0:
                bad.append(("fewer than minItems", Node("array", s, None, n.children[:s["minItems"] - 1])))
        if n.kind == "object":
            for k in s.get("required", []):
                bad.append((f"required {k} missing", Node("object", s, None, [c for c in n.children if c[0] != k])))
            if s.get("additionalProperties") is False:
                bad.append(("additional property", Node("object", s, None, n.children + [("extra_key", Node("scalar", None, 1))])))
            else:  # a declared property, of a wrong type, where an additional property may stand
                have = {c[0] for c in n.children}
                for k, sub in s.get("properties", {}).items():
                    t = json_types(gen.resolve(sub)) or set()
                    if k not in have and "integer" not in t and "number" not in t:
                        bad.append((f"declared {k} of a wrong type first", Node("object", s, None, [(k, leaf(7, None))] + n.children)))
                        bad.append((f"declared {k} of a wrong type first, its name escaped",
                                    Node("object", s, None, [(Escaped(k), leaf(7, None))] + n.children)))
                        break
        for desc, repl in bad:
            if parent is None:
                out.append((desc, repl))
                continue
            p2 = copy.copy(parent)
            p2.children = list(parent.children)
            p2.children[idx] = (parent.children[idx][0], repl) if parent.kind == "object" else repl
            out.append((desc, replace_node(node, parent, p2)))
    return out


def replace_node(root, old, new):
    if root is old:
        return new
    if not root.children:
        return root
    kids = [(k, replace_node(v, old, new)) for k, v in root.children] if root.kind == "object" else \
        [replace_node(v, old, new) for v in root.children]
    return Node(root.kind, root.schema, root.value, kids)


# ---- laying an instance out as text, with where every key and value lies ------------------------


class Layout:
    def __init__(self, name, item_sep, key_sep, indent=None):
        self.name, self.item_sep, self.key_sep, self.indent = name, item_sep, key_sep, indent


LAYOUTS = [Layout("json.dumps default", ", ", ": "), Layout("compact", ",", ":"), Layout("indent 2", ",", ": ", 2),
           Layout("indent 4", ",", ": ", 4)]


class Escaped(str):
    """A string written with every character \\u-escaped (UTF-16 units, as JSON has it)."""


def json_string(s, ascii_only):
    if isinstance(s, Escaped):
        units = s.encode("utf-16-be")
        return '"' + "".join(f"\\u{units[i]:02x}{units[i + 1]:02x}" for i in range(0, len(units), 2)) + '"'
    return json.dumps(s, ensure_ascii=ascii_only)


def json_number(v):
    return json.dumps(v)


def serialize(node, layout, ascii_only):
    """Text as bytes and spans (start, end, kind, schema, array depth) of keys and scalar values."""
    out = bytearray()
    spans = []

    def emit(s):
        out.extend(s.encode("utf-8"))

    def nl(depth):
        if layout.indent is not None:
            emit("\n" + " " * (layout.indent * depth))

    def walk(n, depth, arrays):
        if n.kind == "object" or n.kind == "array":
            opening, closing = ("{", "}") if n.kind == "object" else ("[", "]")
            start = len(out)
            emit(opening)
            inner = arrays + (1 if n.kind == "array" else 0)
            items = n.children
            for i, item in enumerate(items):
                if i:
                    emit(layout.item_sep)
                nl(depth + 1)
                if n.kind == "object":
                    k, v = item
                    ks = len(out)
                    emit(json_string(k, ascii_only))
                    spans.append((ks, len(out), "key", n.schema, inner))
                    emit(layout.key_sep)
                    walk(v, depth + 1, inner)
                else:
                    walk(item, depth + 1, inner)
            if items:
                nl(depth)
            emit(closing)
            spans.append((start, len(out), n.kind, n.schema, inner))
        else:
            start = len(out)
            if n.kind == "string":
                emit(json_string(n.value, ascii_only))
            elif n.kind == "number":
                emit(json_number(n.value))
            else:
                emit(json.dumps(n.value, ensure_ascii=ascii_only))
            kind = n.kind if n.kind != "scalar" else ("string" if isinstance(n.value, str) else "literal")
            spans.append((start, len(out), kind, n.schema, arrays))

    walk(node, 0, 0)
    return bytes(out), spans


def context_at(spans, p, total):
    """Where a prefix of p bytes ends: ('mid-<kind>' | 'before-<kind>' | 'end', schema, array depth)."""
    if p >= total:
        return "full text", None, 0
    inside = [s for s in spans if s[0] < p < s[1] and s[2] not in ("object", "array")]
    depth = max([s[4] for s in spans if s[0] < p < s[1] and s[2] == "array"] + [0])
    if inside:
        s = inside[0]
        return "mid-" + s[2], s[3], depth
    upcoming = sorted((s for s in spans if s[0] >= p), key=lambda s: (s[0], -(s[1] - s[0])))
    if upcoming:
        return "before-" + upcoming[0][2], upcoming[0][3], depth
    return "before-close", None, depth


# ---- sentences of a GBNF grammar (the .gbnf files) ------------------------------------------------

GBNF_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\", "[": "[", "]": "]"}


def gbnf_unescape(s):
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\":
            c = s[i + 1]
            if c in GBNF_ESCAPES:
                out.append(GBNF_ESCAPES[c])
                i += 2
            else:
                width = {"x": 2, "u": 4, "U": 8}[c]
                out.append(chr(int(s[i + 2:i + 2 + width], 16)))
                i += 2 + width
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


class GbnfSampler:
    def __init__(self, text, rng):
        self.rules = GrammarParser().parse(text)
        self.rng = rng
        self.height = {k: float("inf") for k in self.rules}
        for _ in range(len(self.rules) + 1):
            for k, r in self.rules.items():
                self.height[k] = self.h(r.alternatives)

    def h(self, n):
        if isinstance(n, RuleRefNode):
            return self.height[n.name] + 1
        if isinstance(n, SequenceNode):
            return max([self.h(c) for c in n.nodes] + [0])
        if isinstance(n, AlternativeNode):
            return min(self.h(c) for c in n.alternatives)
        if isinstance(n, RepetitionNode):
            return 0 if n.min_times == 0 else self.h(n.node)
        return 0

    def gen(self, n, depth, out):
        rng = self.rng
        if isinstance(n, LiteralNode):
            out.append(gbnf_unescape(n.value))
        elif isinstance(n, RegexNode):
            out.append(sample_regex(n.rx.replace("\\/", "/"), rng))
        elif isinstance(n, RuleRefNode):
            self.gen(self.rules[n.name].alternatives, depth + 1, out)
        elif isinstance(n, SequenceNode):
            for c in n.nodes:
                self.gen(c, depth, out)
        elif isinstance(n, AlternativeNode):
            alts = n.alternatives
            if depth > 8:
                best = min(self.h(a) for a in alts)
                alts = [a for a in alts if self.h(a) == best]
            self.gen(rng.choice(alts), depth, out)
        elif isinstance(n, RepetitionNode):
            hi = n.max_times if n.max_times is not None else n.min_times + 3
            hi = min(hi, n.min_times + (3 if depth < 6 else 0))
            for _ in range(rng.randint(n.min_times, hi)):
                self.gen(n.node, depth + 1, out)
        else:
            raise ValueError(f"no sampler for {n}")

    def sample(self):
        out = []
        self.gen(self.rules["root"].alternatives, 0, out)
        return "".join(out)


# ---- GBNF to Lark (llguidance.gbnf_to_lark, with its \\u escapes mended) ------------------------


class FixedGrammarParser(GrammarParser):
    """llguidance 1.9.1's gbnf_to_lark writes \\uXXXX and \\UXXXXXXXX with their leading zeros
    stripped (\\U0010FFFF becomes \\U10FFFF, which its own regex parser refuses, and \\u00e9
    becomes \\ue9); here they become \\x{...} in character classes and the character itself in
    literals. Everything else is the library's converter."""

    in_class = False

    def _parse_char_class(self, pos):
        self.in_class = True
        try:
            return super()._parse_char_class(pos)
        finally:
            self.in_class = False

    def _parse_char(self, pos):
        if pos.current() == "\\" and pos.peek(2)[1:] in ("u", "U"):
            width = 4 if pos.peek(2)[1] == "u" else 8
            digits = pos.peek(2 + width)[2:]
            cp = int(digits, 16)
            pos = pos.advance(2 + width)
            if self.in_class:
                return f"\\x{{{cp:X}}}", pos
            c = chr(cp)
            return (json.dumps(c)[1:-1] if c in '"\\' or cp < 0x20 else c), pos
        return super()._parse_char(pos)


def gbnf_to_lark(text):
    rules = FixedGrammarParser().parse(text)
    # Names made unique after the converter's renaming (root becomes `start`, which may exist;
    # fooBar and foo-bar both become foo_bar).
    names = {k: k if k == "root" else f"r{i}_{re.sub('[^a-z0-9]', '_', k.lower())}" for i, k in enumerate(rules)}

    def rename(n):
        if isinstance(n, RuleRefNode):
            n.name = names.get(n.name, n.name)
        for c in n.children():
            rename(c)

    for r in rules.values():
        r.name = names[r.name]
        rename(r.alternatives)
    rules = {r.name: r for r in rules.values()}
    resolve(rules)
    out = "%llguidance {}\n\n"
    for r in sorted(rules.values(), key=lambda r: r.order):
        out += str(r) + "\n\n"
    return out


def gbnf_to_lark_by_char(text):
    """The same grammar with every rule a Lark rule and every lexeme one character: llguidance's
    lexer then cannot join characters into a longer lexeme greedily, and it runs the grammar as
    a plain context-free grammar over characters, as troupe does."""
    rules = FixedGrammarParser().parse(text)
    names = {k: "start" if k == "root" else f"r{i}_{re.sub('[^a-z0-9]', '_', k.lower())}" for i, k in enumerate(rules)}

    def emit(n):
        if isinstance(n, RuleRefNode):
            return names[n.name]
        if isinstance(n, LiteralNode):
            chars = gbnf_unescape(n.value)
            return " ".join(json.dumps(c) for c in chars) if chars else '""'
        if isinstance(n, RegexNode):
            return str(n)
        if isinstance(n, SequenceNode):
            return "(" + " ".join(emit(c) for c in n.nodes) + ")" if n.nodes else '""'
        if isinstance(n, AlternativeNode):
            return "(" + " | ".join(emit(c) for c in n.alternatives) + ")"
        if isinstance(n, RepetitionNode):
            hi = "" if n.max_times is None else str(n.max_times)
            return f"({emit(n.node)}){{{n.min_times},{hi}}}"
        raise ValueError(f"cannot convert {n}")

    return NO_FORCING + "\n" + "".join(f"{names[k]}: {emit(r.alternatives)}\n" for k, r in rules.items())


# ---- troupe ------------------------------------------------------------------------------------


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


# ---- llguidance --------------------------------------------------------------------------------


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


# ---- checking a token only troupe allows (part 2) --------------------------------------------------

PREFERENCE = [b'"', b"}", b"]", b",", b":"] + [bytes([c]) for c in b"0123456789abcdefghijklmnopqrstuvwxyz"] + \
             [bytes([c]) for c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZ-.+ \n"] + [bytes([c]) for c in range(0x20, 0x7F)]

RFC3339 = re.compile(r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])[Tt]([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?"
                     r"([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)$")
FORMATS = jsonschema.FormatChecker()


def full_date(s):
    """RFC 3339 full-date, years 0000-9999 (Python's date, which jsonschema uses, starts at 0001)."""
    m = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", s)
    if not m:
        return False
    y, mo, d = map(int, m.groups())
    leap = y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
    return 1 <= mo <= 12 and 1 <= d <= [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][mo - 1]


@FORMATS.checks("date")
def _date(s):
    return not isinstance(s, str) or full_date(s)


@FORMATS.checks("date-time")
def _date_time(s):
    return not isinstance(s, str) or (RFC3339.match(s) is not None and full_date(s[:10]))


@FORMATS.checks("email")
def _email(s):  # RFC 5321 addr-spec, dot-atom local part (what jsonschema's "@ in it" does not check)
    return not isinstance(s, str) or re.fullmatch(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
                                                  r"@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*"
                                                  r"[A-Za-z0-9])?)*", s) is not None


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


# ---- classifying part-2 differences --------------------------------------------------------------

WS = b" \t\n\r"
MAX_CLASSIFIED = 400  # tokens per mask; past that a fixed sample is classified


class JsonScan:
    """The lexical state of a JSON text prefix and the path to where it ends."""

    def __init__(self, data):
        self.stack = []          # [kind, key or index, keys seen]
        self.mode = "value"      # value | value_or_close | key_or_close | key | colon | after | string | number | literal | done
        self.is_key = False
        self.escape = b""        # the escape being read inside a string
        self.buf = bytearray()   # the current string or number
        for b in data:
            self.feed(b)

    def feed(self, b):
        c = bytes([b])
        m = self.mode
        if m == "string":
            if self.escape:
                self.escape += c
                if self.escape[1:2] != b"u":
                    self.buf += {b"n": b"\n", b"t": b"\t", b"r": b"\r", b"b": b"\b", b"f": b"\f"}.get(c, c)
                    self.escape = b""
                elif len(self.escape) == 6:
                    self.buf += chr(int(self.escape[2:], 16)).encode("utf-8", "surrogatepass")
                    self.escape = b""
            elif c == b"\\":
                self.escape = c
            elif c == b'"':
                if self.is_key:
                    self.stack[-1][1] = self.buf.decode("utf-8", "replace")
                    self.stack[-1][2].add(self.stack[-1][1])
                    self.mode = "colon"
                else:
                    self.end_value()
            else:
                self.buf += c
            return
        if m in ("number", "literal"):
            if (m == "number" and c in b"0123456789.eE+-") or (m == "literal" and c.isalpha()):
                self.buf += c
                return
            self.end_value()
            m = self.mode
        if c in WS:
            return
        if m in ("value", "value_or_close"):
            if c == b"]" and m == "value_or_close":
                self.stack.pop()
                self.end_value()
            elif c == b"{":
                self.stack.append(["obj", None, set()])
                self.mode = "key_or_close"
            elif c == b"[":
                self.stack.append(["arr", 0, None])
                self.mode = "value_or_close"
            elif c == b'"':
                self.mode, self.is_key, self.buf = "string", False, bytearray()
            elif c in b"-0123456789":
                self.mode, self.buf = "number", bytearray(c)
            else:
                self.mode, self.buf = "literal", bytearray(c)
        elif m in ("key", "key_or_close"):
            if c == b"}" and m == "key_or_close":
                self.stack.pop()
                self.end_value()
            elif c == b'"':
                self.mode, self.is_key, self.buf = "string", True, bytearray()
        elif m == "colon" and c == b":":
            self.mode = "value"
        elif m == "after":
            if c == b",":
                if self.stack[-1][0] == "obj":
                    self.stack[-1][1] = None
                    self.mode = "key"
                else:
                    self.stack[-1][1] += 1
                    self.mode = "value"
            elif c in b"}]":
                self.stack.pop()
                self.end_value()

    def end_value(self):
        self.mode = "after" if self.stack else "done"

    def path(self):
        return [f[1] for f in self.stack if f[1] is not None]


def schemas_at(root, path):
    """The subschemas (anyOf/oneOf branches spread, $refs resolved) a path can lead to."""
    gen = InstanceGenerator(root, None)

    def spread(s):
        s = gen.resolve(s)
        for key in ("anyOf", "oneOf"):
            if key in s:
                rest = {k: v for k, v in s.items() if k != key}
                return [x for b in s[key] for x in spread({**rest, **b})]
        return [s]

    cur = spread(root)
    for p in path:
        nxt = []
        for s in cur:
            if isinstance(p, int) and "items" in s:
                nxt += spread(s["items"])
            elif isinstance(p, str) and p in s.get("properties", {}):
                nxt += spread(s["properties"][p])
        cur = nxt
    return cur


def rejection_point(vocab, base, data, memo):
    """How many bytes of `data` the matcher `base` takes one at a time (len(data): all of them)."""
    memo.setdefault(b"", base)
    for i in range(len(data)):
        key = data[:i + 1]
        if key not in memo:
            parent = memo[data[:i]]
            m = parent.deep_copy()
            memo[key] = m if m.consume_token(vocab.byte_token[data[i]]) else False
        if memo[key] is False:
            return i
    return len(data)


def classify(vocab, token, prefix, schema, other, memo):
    """Why one engine allows `token` after `prefix` and the other (matcher `other`) does not."""
    if token in vocab.eog_set:
        return "end of generation where the text is whole"
    b = vocab.bytes[token]
    if not b:
        return "special token"
    i = rejection_point(vocab, other, b, memo)
    if i == len(b):
        return "token refused whole, its bytes taken one by one"
    scan = JsonScan(prefix + b[:i])
    c = b[i:i + 1]
    subs = schemas_at(schema, scan.path())
    has = lambda k: any(k in s for s in subs)
    m = scan.mode
    if m == "string" and scan.is_key:
        return "escapes in property names" if scan.escape or c == b"\\" else "property names (additional, order)"
    if m == "string":
        if scan.escape or c == b"\\":
            esc = (scan.escape + c).decode("latin-1")
            what = [k for k in ("format", "pattern", "enum", "const") if has(k)]
            if what:
                return f"string escapes in {'/'.join(what)} strings"
            if esc == "\\":
                return "string escapes (a backslash at all)"
            if esc.startswith("\\u"):
                h = esc[2:]
                surrogate = h[:1] in ("d", "D") and len(h) > 1 and h[1] in "89abcdefABCDEF"
                return "string escapes (\\u surrogates)" if surrogate else "string escapes (\\u)"
            return f"string escapes ({esc[:2]})"
        if c == b"\x7f":
            return "raw DEL (0x7F) in strings"
        if c < b"\x20":
            return "raw control characters in strings"
        for k in ("format", "pattern"):
            if has(k):
                return f"string {k} " + ", ".join(sorted({str(s[k]) for s in subs if k in s}))
        if has("enum") or has("const"):
            return "enum / const strings"
        if has("minLength") or has("maxLength"):
            return "string length"
        return "non-ASCII string content" if c >= b"\x80" else "string content"
    if c in (b" ", b"\t", b"\n", b"\r"):
        return "whitespace"
    if m == "number" or (m in ("value", "value_or_close") and c in b"-0123456789"):
        ints = [s for s in subs if s.get("type") == "integer" or "integer" in (s.get("type") or [])]
        mins = [s["minimum"] for s in subs if "minimum" in s]
        kind = "integer" if ints else "number"
        if mins and min(mins) >= 0 and (c == b"-" or scan.buf == b"-"):
            return f"-0 where minimum >= 0 ({kind})"
        if ints and any("minimum" in s or "maximum" in s for s in ints):
            return "integer bounds"
        if c in b"eE+" or (c == b"-" and scan.buf[-1:] in (b"e", b"E")):
            return "number exponent" + (" (number with minimum)" if mins else "")
        if c == b".":
            return "number fraction"
        if scan.buf in (b"-0", b"0") and c in b"0123456789":
            return "number leading zero"
        return "number format"
    if m in ("key", "key_or_close"):
        return "object end (required properties)" if c == b"}" else "property names (additional, order)"
    if m == "after":
        if c == b",":
            return "another property or item (additionalProperties, maxItems)"
        return "object/array end (required properties, minItems)"
    if m in ("value", "value_or_close"):
        if c == b'"':
            return "string where the schema has another type"
        if c == b"]":
            return "array end (minItems)"
        return "value type (const, enum, literal, object, array)"
    if m == "literal":
        return "literal"
    return f"after the value ({m})"


# ---- one schema or grammar ---------------------------------------------------------------------


class Totals:
    def __init__(self):
        self.rows = []
        self.p1_classes = collections.Counter()
        self.p2_classes = collections.Counter()      # (class, which engine) -> masks with it
        self.p2_tokens = collections.Counter()       # (class, which engine) -> tokens
        self.p2_examples = {}
        self.p1_examples = {}
        self.refused = []
        self.troupe_refused_instances = []
        self.llg_refused_instances = []
        self.invalid = []
        self.negatives = 0
        self.neg_kinds = collections.Counter()
        self.checked = collections.Counter()
        self.contexts = collections.Counter()
        self.us = []
        self.unexplained = 0


def short(b, n=70):
    s = b.decode("utf-8", "replace")
    return repr(s if len(s) <= n else "…" + s[-n:])


def run_case(name, kind, path, troupe, vocab, rng, totals, checks_left):
    schema = json.load(open(path)) if kind == "schema" else None
    flag = "--json-schema" if kind == "schema" else "--grammar"
    gbnf, err = troupe.gbnf(flag, path)
    if gbnf is None:
        totals.refused.append((name, err))
        log(f"  {name}: troupe refuses it: {err}")
        return checks_left
    # no_forcing: where the grammar forces bytes, llguidance would otherwise allow only the first
    # token of their canonical tokenization; troupe's mask (and the comparison) is every token
    # the grammar allows.
    lark = gbnf_to_lark(gbnf).replace("%llguidance {}", NO_FORCING, 1)
    m1, e1 = matcher(vocab, llguidance.LLMatcher.grammar_from_lark(lark))
    if e1:
        raise SystemExit(f"{name}: llguidance cannot build troupe's grammar: {e1}")
    g2 = None
    if schema is not None:
        opts = {**schema.get("x-guidance", {}), **LLG_JSON_OPTIONS}
        g2 = llguidance.LLMatcher.grammar_from_lark(f"{NO_FORCING}\nstart: %json " + json.dumps({**schema, "x-guidance": opts}))
        m2, e2 = matcher(vocab, g2)
        if e2:
            totals.refused.append((name, "llguidance: " + e2.splitlines()[0]))
            g2 = None

    # Instances, laid out every way troupe's grammar takes them; one tokenize call per case.
    cands = []  # (text bytes, spans, layout name, python value)
    negs = []   # (text bytes of an invalid instance, what breaks it)
    by_desc = collections.defaultdict(list)
    if schema is not None:
        gen = InstanceGenerator(schema, rng)
        validator = jsonschema.Draft202012Validator(schema, format_checker=FORMATS)
        size = 0
        for _ in range(MAX_GENERATED):
            if len(cands) >= MAX_INSTANCES * 3 * len(LAYOUTS) and size >= 8 * MIN_PREFIXES:
                break  # enough text for MIN_PREFIXES (small instances, a scalar root, need more)
            node = gen.gen(schema)
            value = node.py()
            errs = list(validator.iter_errors(value))
            assert not errs, f"{name}: generated an invalid instance {value}: {errs[0].message}"
            ascii_only = rng.random() < 0.2
            for lay in rng.sample(LAYOUTS, len(LAYOUTS)):
                text, spans = serialize(node, lay, ascii_only)
                cands.append((text, spans, lay.name, value))
            size += len(text)
            for desc, bad in mutations(node, gen, rng):
                by_desc[desc].append(bad)
    else:
        sampler = GbnfSampler(gbnf, rng)
        for _ in range(MAX_INSTANCES * 2):
            text = sampler.sample().encode("utf-8")
            cands.append((text, [], "grammar", None))
    # Every kind of break first, then more of each, while MAX_INVALID allows.
    for round_ in range(MAX_GENERATED):
        for desc in sorted(by_desc):
            if round_ < len(by_desc[desc]) and len(negs) < MAX_INVALID:
                bad = by_desc[desc][round_]
                if list(validator.iter_errors(bad.py())):
                    negs.append((serialize(bad, LAYOUTS[round_ % 2], False)[0], desc))
    ids = troupe.tokenize([c[0].decode("utf-8") for c in cands] + [t.decode("utf-8") for t, _ in negs])
    neg_ids, ids = ids[len(cands):], ids[:len(cands)]
    # Invalid instances: troupe's grammar must refuse each (llguidance running it says which to ask
    # troupe about; troupe's own answer decides).
    suspects = []
    for (text, desc), toks in zip(negs, neg_ids):
        m1.reset()
        if m1.try_consume_tokens(toks) == len(toks) and m1.is_accepting():
            suspects.append((text, desc, toks))
    totals.negatives += len(negs)
    for _, desc in negs:
        totals.neg_kinds[re.sub(r"^type .*", "wrong type", re.sub(r"(required|declared) \S+", r"\1 X", desc))] += 1

    chosen, n_prefixes = [], 0
    per_value = collections.defaultdict(int)
    for (text, spans, lay, value), toks in zip(cands, ids):
        if n_prefixes >= MIN_PREFIXES and len(chosen) >= 3:
            break
        key = json.dumps(value, sort_keys=True) if value is not None else text
        if per_value[key] >= 1:
            continue
        assert vocab.ll.decode_bytes(toks) == text, f"{name}: troupe's tokens do not spell {short(text)}"
        m1.reset()
        taken = m1.try_consume_tokens(toks)
        if taken < len(toks) or not m1.is_accepting():
            if schema is not None and lay == "compact" or schema is None:
                at = len(vocab.ll.decode_bytes(toks[:taken]))
                totals.troupe_refused_instances.append((name, lay, text, at))
            continue
        per_value[key] += 1
        chosen.append((text, spans, lay, value, toks))
        n_prefixes += len(toks) + 1
    if not chosen:
        log(f"  {name}: troupe's grammar accepts none of the generated instances")
        totals.unexplained += 1
        return checks_left

    prefixes = [toks[:k] for (_, _, _, _, toks) in chosen for k in range(len(toks) + 1)]
    t_masks = troupe.masks(flag, path, prefixes + [toks for _, _, toks in suspects], vocab.n)
    for (text, desc, toks), r in zip(suspects, t_masks[len(prefixes):]):
        if r["taken"] == len(toks) and r["can_end"]:
            totals.invalid.append((name, "", "", "invalid instance accepted: " + desc, "troupe's grammar takes it whole",
                                   short(text, 200)))

    row = collections.Counter()
    row["instances"] = len(chosen)
    m1c = None  # troupe's grammar with one-character lexemes, where the masks differ
    layouts = collections.Counter(c[2] for c in chosen)
    base = 0  # where this instance's prefixes start in t_masks
    for text, spans, lay, value, toks in chosen:
        m1.reset()
        alive2 = g2 is not None
        if alive2:
            m2 = m2 if not m2.is_error() else matcher(vocab, g2)[0]  # an error state outlives reset()
            m2.reset()
        base += len(toks) + 1
        for k in range(len(toks) + 1):
            tm = t_masks[base - len(toks) - 1 + k]
            row["prefixes"] += 1
            prefix_bytes = vocab.ll.decode_bytes(toks[:k])
            ctx, sub, adepth = context_at(spans, len(prefix_bytes), len(text)) if schema is not None else \
                ("full text" if k == len(toks) else "grammar", None, 0)
            totals.contexts[ctx] += 1
            if adepth >= 2:
                totals.contexts["inside nested arrays"] += 1
            totals.us.append(tm["us"])
            # Part 1: the same grammar in both engines.
            l1 = bitmask(m1, vocab.n)
            if tm["taken"] != k:
                totals.unexplained += 1
                totals.p1_classes["troupe refused a prefix token llguidance took"] += 1
                totals.p1_examples.setdefault("troupe refused a prefix token llguidance took",
                                              (name, short(prefix_bytes), vocab.show(toks[tm["taken"]]), "llguidance"))
                break
            row["p1 compared"] += 1
            d = tokens_of(tm["bits"] ^ l1, vocab.n)
            if len(d):
                # llguidance's lexer joins the characters of a converted terminal greedily (longest
                # match); with one-character lexemes it runs the grammar exactly.
                if m1c is None:
                    m1c, e = matcher(vocab, llguidance.LLMatcher.grammar_from_lark(gbnf_to_lark_by_char(gbnf)))
                    assert not e, e
                m1c.reset()
                if m1c.consume_tokens(toks[:k]):
                    lc = bitmask(m1c, vocab.n)
                    if not tokens_of(tm["bits"] ^ lc, vocab.n).size:
                        c = "llguidance lexes a converted terminal greedily (equal with one-character lexemes)"
                        totals.p1_classes[c] += 1
                        if c not in totals.p1_examples:
                            t = int(d[0])
                            who = "troupe" if (tm["bits"][t >> 3] >> (t & 7)) & 1 else "llguidance"
                            totals.p1_examples[c] = (name, short(prefix_bytes), vocab.show(t), who)
                        d = None
                        row["p1 explained"] += 1
            if d is None:
                pass
            elif not len(d):
                row["p1 equal"] += 1
            else:
                classes = set()
                for t in d:
                    t = int(t)
                    who = "troupe" if (tm["bits"][t >> 3] >> (t & 7)) & 1 else "llguidance"
                    if t in vocab.eog_set:
                        c = "end-of-generation token"
                    elif t in vocab.unused or t >= len(vocab.bytes):
                        c = "id past the tokenizer"
                    elif t in vocab.special:
                        c = "special token"
                    else:
                        c = "UNEXPLAINED"
                    classes.add(c)
                    totals.p1_examples.setdefault(c, (name, short(prefix_bytes), vocab.show(t), who))
                for c in classes:
                    totals.p1_classes[c] += 1
                if "UNEXPLAINED" in classes:
                    totals.unexplained += 1
                    if VERBOSE:
                        log(f"    part 1 {name} at {short(prefix_bytes)}: {len(d)} tokens differ, e.g. "
                            f"{[vocab.show(int(t)) for t in d[:5]]}")
            # Part 2: llguidance's own JSON Schema converter.
            if alive2:
                row["p2 compared"] += 1
                l2 = bitmask(m2, vocab.n)
                d2 = tokens_of(tm["bits"] ^ l2, vocab.n)
                if not len(d2):
                    row["p2 equal"] += 1
                else:
                    seen = set()
                    memo = {True: {}, False: {}}
                    if len(d2) > MAX_CLASSIFIED:
                        d2 = sorted(random.Random(len(d2)).sample(list(d2), MAX_CLASSIFIED))
                    for t in d2:
                        t = int(t)
                        troupe_only = bool((tm["bits"][t >> 3] >> (t & 7)) & 1)
                        c = classify(vocab, t, prefix_bytes, schema, m2 if troupe_only else m1, memo[troupe_only])
                        key = (c, "troupe only" if troupe_only else "llguidance only")
                        totals.p2_tokens[key] += 1
                        if key not in seen:
                            seen.add(key)
                            totals.p2_classes[key] += 1
                            totals.p2_examples.setdefault(key, (name, short(prefix_bytes), vocab.show(t)))
                        if troupe_only and checks_left > 0 and totals.checked[(name, c)] < CHECKS_PER_CLASS:
                            totals.checked[(name, c)] += 1
                            checks_left -= 1
                            check_troupe_only(name, schema, vocab, m1, t, prefix_bytes, c, totals)
            if k < len(toks):
                assert m1.consume_token(toks[k]), (name, k)
                if alive2 and not m2.consume_token(toks[k]):
                    alive2 = False
                    at = len(vocab.ll.decode_bytes(toks[:k + 1]))
                    totals.llg_refused_instances.append((name, lay, text, at, vocab.show(toks[k])))
    row["layouts"] = ", ".join(f"{k} {v}" for k, v in sorted(layouts.items()))
    totals.rows.append((name, row))
    return checks_left


def check_troupe_only(name, schema, vocab, m1, token, prefix_bytes, cls, totals):
    """Complete prefix + token under troupe's grammar and validate the document against the schema."""
    m = m1.deep_copy()
    if not m.consume_token(token):
        totals.invalid.append((name, short(prefix_bytes), vocab.show(token), cls, "llguidance refuses the token under "
                               "troupe's own grammar (a part-1 difference)", ""))
        return
    rest = complete(vocab, m, prefix_bytes + vocab.bytes[token], schema)
    if rest is None:
        totals.checked["unfinished"] += 1
        if VERBOSE:
            log(f"    unfinished: {name} after {short(prefix_bytes)} + {vocab.show(token)}")
        return
    doc = prefix_bytes + vocab.bytes[token] + b"".join(vocab.bytes[t] for t in rest)
    try:
        value = json.loads(doc.decode("utf-8"))
        errs = list(jsonschema.Draft202012Validator(schema, format_checker=FORMATS).iter_errors(value))
        why = errs[0].message if errs else None
    except (ValueError, UnicodeDecodeError) as e:
        why = f"not JSON: {e}"
    totals.checked["completed"] += 1
    if why:
        totals.invalid.append((name, short(prefix_bytes), vocab.show(token), cls, why, short(doc, 200)))


# llguidance JSON options matching troupe's layout (set in main from troupe's whitespace rule).
LLG_JSON_OPTIONS = {}
NO_FORCING = '%llguidance {"no_forcing": true}'


def main():
    args = [a for a in sys.argv[1:sys.argv.index("--only") if ONLY is not None else None] if a != "-v"]
    if len(args) != 2:
        raise SystemExit(__doc__.split("\n\n")[1])
    troupe = Troupe(os.path.abspath(args[0]), args[1])
    t0 = time.time()
    vocab = Vocab(args[1])
    log(f"llguidance {llguidance.__version__}: vocabulary of {vocab.n} tokens "
        f"({len(vocab.special)} special, {len(vocab.unused)} unused), end of generation {vocab.eog} "
        f"({time.time() - t0:.1f} s)")
    LLG_JSON_OPTIONS.update(json_options_for(troupe))
    log(f"llguidance JSON options: {LLG_JSON_OPTIONS}")
    files = sorted(f for f in os.listdir(CORPUS) if f.endswith((".json", ".gbnf")))
    if ONLY:
        files = [f for f in files if os.path.splitext(f)[0] in ONLY]
    totals = Totals()
    checks_left = MAX_CHECKS
    for f in files:
        kind = "schema" if f.endswith(".json") else "grammar"
        name = os.path.splitext(f)[0] + ("" if kind == "schema" else ".gbnf")
        # Each case's own seed: its instances do not depend on which other cases run.
        checks_left = run_case(name, kind, os.path.join(CORPUS, f), troupe, vocab, random.Random(f"{SEED}:{name}"),
                               totals, checks_left)
    report(totals, len(files), time.time() - t0)
    failed = totals.unexplained or totals.invalid
    log("FAIL" if failed else "OK")
    return 1 if failed else 0


def json_options_for(troupe):
    """llguidance's whitespace options closest to the whitespace troupe's JSON grammar allows."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                   "additionalProperties": False}, f)
    try:
        gbnf, err = troupe.gbnf("--json-schema", f.name)
    finally:
        os.unlink(f.name)
    if gbnf is None:
        raise SystemExit(f"troupe refuses the probe schema: {err}")
    return whitespace_options(gbnf)


def whitespace_options(gbnf):
    """troupe's `ws` rule as llguidance's whitespace_pattern (one optional occurrence between
    tokens, as troupe puts ws). Unicode escapes: troupe allows any \\uXXXX (surrogates paired),
    llguidance by default only \\u0000-\\u001F and \\u007F; general ones is the closer setting."""
    rules = FixedGrammarParser().parse(gbnf)
    ws = rules.get("ws") or rules.get("space")
    if ws is None:
        return {"whitespace_flexible": False, "json_allow_general_unicode_escapes": True}

    def rx(n):
        if isinstance(n, LiteralNode):
            return re.escape(gbnf_unescape(n.value))
        if isinstance(n, RegexNode):
            return n.rx
        if isinstance(n, SequenceNode):
            return "".join(rx(c) for c in n.nodes)
        if isinstance(n, AlternativeNode):
            return "(?:" + "|".join(rx(c) for c in n.alternatives) + ")"
        if isinstance(n, RepetitionNode):
            hi = "" if n.max_times is None else str(n.max_times)
            return f"(?:{rx(n.node)}){{{n.min_times},{hi}}}"
        raise ValueError(f"ws rule: cannot convert {n}")

    return {"whitespace_flexible": True, "whitespace_pattern": rx(ws.alternatives),
            "json_allow_general_unicode_escapes": True}


def report(t, n_files, seconds):
    log("")
    hdr = f"{'schema / grammar':28} {'inst':>4} {'prefixes':>8} {'p1 equal':>10} {'expl':>4} {'p2 equal':>10}  layouts"
    log(hdr)
    log("-" * len(hdr))
    tot = collections.Counter()
    for name, r in t.rows:
        tot.update({k: v for k, v in r.items() if isinstance(v, int)})
        p2 = f"{r['p2 equal']}/{r['p2 compared']}" if r["p2 compared"] else "-"
        log(f"{name:28} {r['instances']:>4} {r['prefixes']:>8} {r['p1 equal']:>5}/{r['p1 compared']:<4} "
            f"{r['p1 explained']:>4} {p2:>10}  {r['layouts']}")
    log("-" * len(hdr))
    log(f"{'total':28} {tot['instances']:>4} {tot['prefixes']:>8} {tot['p1 equal']:>5}/{tot['p1 compared']:<4} "
        f"{tot['p1 explained']:>4} {tot['p2 equal']:>5}/{tot['p2 compared']}")
    log("(p1: part 1, troupe's GBNF in both engines; expl: different, explained; p2: part 2, llguidance's own "
        "JSON Schema compiler)")
    log(f"\ncorpus: {n_files} files; compared: {len(t.rows)}; refused: {len(t.refused)}")
    for name, why in t.refused:
        log(f"  refused {name}: {why}")
    log("prefix contexts: " + ", ".join(f"{k} {v}" for k, v in sorted(t.contexts.items())))
    if t.us:
        log(f"troupe mask time: mean {np.mean(t.us):.1f} us, median {np.median(t.us):.1f} us, max {np.max(t.us):.0f} us "
            f"over {len(t.us)} masks")
    log("\npart 1 (troupe's grammar in both engines): masks with a difference, by class")
    if not t.p1_classes:
        log("  none")
    for c, n in t.p1_classes.most_common():
        name, prefix, tok, who = t.p1_examples[c]
        log(f"  {c}: {n} masks   e.g. {name} after {prefix}: token {tok}, allowed by {who} only")
    log("\npart 2 (llguidance's own JSON Schema converter): masks with a difference, by class")
    for (c, who), n in sorted(t.p2_classes.items(), key=lambda kv: -kv[1]):
        ex = t.p2_examples[(c, who)]
        log(f"  {c} [{who}]: {n} masks, {t.p2_tokens[(c, who)]} tokens classified   e.g. {ex[0]} after {ex[1]}: {ex[2]}")
    if not t.p2_classes:
        log("  none")
    log(f"  troupe-only tokens completed and validated: {t.checked['completed']} "
        f"(unfinished completions {t.checked['unfinished']})")
    log(f"  invalid instances (one valid instance broken in one place) given whole to troupe's grammar: "
        f"{t.negatives}, accepted: {sum(1 for x in t.invalid if x[3].startswith('invalid instance'))}")
    log("    by break: " + ", ".join(f"{k} {v}" for k, v in sorted(t.neg_kinds.items())))
    if t.troupe_refused_instances:
        log(f"\nvalid instances troupe's grammar refuses (compact layout): {len(t.troupe_refused_instances)}")
        for name, lay, text, at in t.troupe_refused_instances[:20]:
            log(f"  {name}: {short(text[:at])} ^ {short(text[at:at + 30], 30)}")
    if t.llg_refused_instances:
        log(f"\ninstances llguidance's converter refuses: {len(t.llg_refused_instances)}")
        for name, lay, text, at, tok in t.llg_refused_instances[:30]:
            log(f"  {name} ({lay}): {short(text[:at])} at token {tok}")
    if t.invalid:
        log(f"\nTROUPE ALLOWS INVALID OUTPUT: {len(t.invalid)}")
        for name, prefix, tok, cls, why, doc in t.invalid[:30]:
            where = f" after {prefix}: token {tok}" if tok else ""
            log(f"  {name}{where} [{cls}]: {why}\n      document: {doc}")
    log(f"\n{seconds:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
