"""troupe's GBNF on llguidance's side: sentences sampled from a grammar (the .gbnf corpus), the
grammar converted to Lark (llguidance.gbnf_to_lark, with its \\u escapes mended; and once more
with one-character lexemes), and troupe's `ws` rule as llguidance's JSON whitespace options."""
import json
import re

from llguidance.gbnf_to_lark import AlternativeNode, GrammarParser, LiteralNode, RegexNode, RepetitionNode
from llguidance.gbnf_to_lark import RuleRefNode, SequenceNode, resolve

from llguidance_instances import sample_regex

# The header of the grammars given to llguidance: without it, where the grammar forces bytes,
# llguidance allows only the first token of their canonical tokenization, and troupe's mask is
# every token the grammar allows.
NO_FORCING = '%llguidance {"no_forcing": true}'
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
