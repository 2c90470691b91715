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
difference or a troupe-allows-invalid case. The parts live beside this file, in
llguidance_*.py (tests/reference/README.md says which does what).
"""
import collections
import json
import os
import random
import re
import sys
import tempfile
import time

import jsonschema
import llguidance

from llguidance_classify import MAX_CLASSIFIED, classify
from llguidance_completion import complete
from llguidance_engines import Troupe, bitmask, matcher, tokens_of
from llguidance_formats import FORMATS
from llguidance_gbnf import NO_FORCING, GbnfSampler, gbnf_to_lark, gbnf_to_lark_by_char, whitespace_options
from llguidance_instances import InstanceGenerator
from llguidance_layout import LAYOUTS, context_at, serialize
from llguidance_mutations import mutations
from llguidance_report import Totals, log, report, short
from llguidance_vocab import Vocab

SEED = 20261205
CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llguidance_schemas")
MIN_PREFIXES = 200       # per schema or grammar
MAX_INSTANCES = 14       # per schema, before giving up on MIN_PREFIXES
MAX_GENERATED = 200      # instances generated per schema at most (a scalar root needs many)
MAX_INVALID = 40         # invalid instances per schema, each must be refused whole
MAX_CHECKS = 700         # troupe-only tokens (part 2) completed and validated, in all
CHECKS_PER_CLASS = 6     # of them per schema and difference class
VERBOSE = "-v" in sys.argv
ONLY = sys.argv[sys.argv.index("--only") + 1:] if "--only" in sys.argv else None


# ---- one schema or grammar ---------------------------------------------------------------------


def run_case(name, kind, path, troupe, vocab, rng, totals, checks_left):
    case = Case(name, kind, path, troupe, vocab, rng, totals, checks_left)
    case.run()
    return case.checks_left


def troupe_allows(tm, t):
    return bool((tm["bits"][t >> 3] >> (t & 7)) & 1)


def allowed_by(tm, t):
    return "troupe" if troupe_allows(tm, t) else "llguidance"


def p1_class(vocab, t):
    """Why a token's masks differ under the same grammar, where that is not the grammar's doing."""
    if t in vocab.eog_set:
        return "end-of-generation token"
    if t in vocab.unused or t >= len(vocab.bytes):
        return "id past the tokenizer"
    if t in vocab.special:
        return "special token"
    return "UNEXPLAINED"


def invalid_instances(by_desc, validator):
    """(text, what breaks it): every kind of break first, then more of each, while MAX_INVALID allows."""
    negs = []
    for round_ in range(MAX_GENERATED):
        for desc in sorted(by_desc):
            if round_ < len(by_desc[desc]) and len(negs) < MAX_INVALID:
                bad = by_desc[desc][round_]
                if list(validator.iter_errors(bad.py())):
                    negs.append((serialize(bad, LAYOUTS[round_ % 2], False)[0], desc))
    return negs


class Case:
    """One schema or grammar, both parts; what it finds goes into `totals`, and each troupe-only
    token it completes and validates takes one of `checks_left`."""

    def __init__(self, name, kind, path, troupe, vocab, rng, totals, checks_left):
        self.name, self.path, self.troupe, self.vocab, self.rng, self.totals = name, path, troupe, vocab, rng, totals
        self.checks_left = checks_left
        self.schema = json.load(open(path)) if kind == "schema" else None
        self.flag = "--json-schema" if kind == "schema" else "--grammar"
        self.gbnf = None
        self.m1 = None   # troupe's grammar in llguidance
        self.m1c = None  # troupe's grammar with one-character lexemes, where the masks differ
        self.g2 = None   # llguidance's own compilation of the schema (None: not part of this case)
        self.m2 = None

    def run(self):
        totals = self.totals
        self.gbnf, err = self.troupe.gbnf(self.flag, self.path)
        if self.gbnf is None:
            totals.refused.append((self.name, err))
            log(f"  {self.name}: troupe refuses it: {err}")
            return
        self.build_matchers()
        cands, negs = self.instances()
        # one tokenize call per case
        ids = self.troupe.tokenize([c[0].decode("utf-8") for c in cands] + [t.decode("utf-8") for t, _ in negs])
        neg_ids, ids = ids[len(cands):], ids[:len(cands)]
        suspects = self.suspects(negs, neg_ids)
        chosen = self.choose(cands, ids)
        if not chosen:
            log(f"  {self.name}: troupe's grammar accepts none of the generated instances")
            totals.unexplained += 1
            return
        prefixes = [toks[:k] for (_, _, _, _, toks) in chosen for k in range(len(toks) + 1)]
        t_masks = self.troupe.masks(self.flag, self.path, prefixes + [toks for _, _, toks in suspects], self.vocab.n)
        self.check_suspects(suspects, t_masks[len(prefixes):])
        row = collections.Counter()
        row["instances"] = len(chosen)
        layouts = collections.Counter(c[2] for c in chosen)
        base = 0  # where this instance's prefixes start in t_masks
        for text, spans, lay, value, toks in chosen:
            self.compare_instance(text, spans, lay, toks, t_masks[base:base + len(toks) + 1], row)
            base += len(toks) + 1
        row["layouts"] = ", ".join(f"{k} {v}" for k, v in sorted(layouts.items()))
        totals.rows.append((self.name, row))

    def build_matchers(self):
        # no_forcing: where the grammar forces bytes, llguidance would otherwise allow only the first
        # token of their canonical tokenization; troupe's mask (and the comparison) is every token
        # the grammar allows.
        lark = gbnf_to_lark(self.gbnf).replace("%llguidance {}", NO_FORCING, 1)
        self.m1, e1 = matcher(self.vocab, llguidance.LLMatcher.grammar_from_lark(lark))
        if e1:
            raise SystemExit(f"{self.name}: llguidance cannot build troupe's grammar: {e1}")
        if self.schema is None:
            return
        opts = {**self.schema.get("x-guidance", {}), **LLG_JSON_OPTIONS}
        self.g2 = llguidance.LLMatcher.grammar_from_lark(
            f"{NO_FORCING}\nstart: %json " + json.dumps({**self.schema, "x-guidance": opts}))
        self.m2, e2 = matcher(self.vocab, self.g2)
        if e2:
            self.totals.refused.append((self.name, "llguidance: " + e2.splitlines()[0]))
            self.g2 = None

    # ---- instances -----------------------------------------------------------------------------

    def instances(self):
        """(cands, negs): cands (text bytes, spans, layout name, python value) laid out every way
        troupe's grammar takes them; negs (text bytes of an invalid instance, what breaks it)."""
        if self.schema is None:
            sampler = GbnfSampler(self.gbnf, self.rng)
            return [(sampler.sample().encode("utf-8"), [], "grammar", None) for _ in range(MAX_INSTANCES * 2)], []
        gen = InstanceGenerator(self.schema, self.rng)
        validator = jsonschema.Draft202012Validator(self.schema, format_checker=FORMATS)
        cands, by_desc = self.schema_instances(gen, validator)
        return cands, invalid_instances(by_desc, validator)

    def schema_instances(self, gen, validator):
        """Valid instances in every layout, and the invalid ones each breaks into, by kind of break."""
        cands = []
        by_desc = collections.defaultdict(list)
        size = 0
        for _ in range(MAX_GENERATED):
            if len(cands) >= MAX_INSTANCES * 3 * len(LAYOUTS) and size >= 8 * MIN_PREFIXES:
                break  # enough text for MIN_PREFIXES (small instances, a scalar root, need more)
            node = gen.gen(self.schema)
            value = node.py()
            errs = list(validator.iter_errors(value))
            assert not errs, f"{self.name}: generated an invalid instance {value}: {errs[0].message}"
            ascii_only = self.rng.random() < 0.2
            for lay in self.rng.sample(LAYOUTS, len(LAYOUTS)):
                text, spans = serialize(node, lay, ascii_only)
                cands.append((text, spans, lay.name, value))
            size += len(text)
            for desc, bad in mutations(node, gen, self.rng):
                by_desc[desc].append(bad)
        return cands, by_desc

    def suspects(self, negs, neg_ids):
        """Invalid instances: troupe's grammar must refuse each (llguidance running it says which to
        ask troupe about; troupe's own answer decides)."""
        suspects = []
        for (text, desc), toks in zip(negs, neg_ids):
            self.m1.reset()
            if self.m1.try_consume_tokens(toks) == len(toks) and self.m1.is_accepting():
                suspects.append((text, desc, toks))
        self.totals.negatives += len(negs)
        for _, desc in negs:
            self.totals.neg_kinds[re.sub(r"^type .*", "wrong type", re.sub(r"(required|declared) \S+", r"\1 X", desc))] += 1
        return suspects

    def check_suspects(self, suspects, results):
        for (text, desc, toks), r in zip(suspects, results):
            if r["taken"] == len(toks) and r["can_end"]:
                self.totals.invalid.append((self.name, "", "", "invalid instance accepted: " + desc,
                                            "troupe's grammar takes it whole", short(text, 200)))

    def choose(self, cands, ids):
        """The instances to compare on (text, spans, layout, value, tokens): one per value, those
        troupe's grammar (run by llguidance) takes, until MIN_PREFIXES."""
        chosen, n_prefixes = [], 0
        per_value = collections.defaultdict(int)
        m1 = self.m1
        for (text, spans, lay, value), toks in zip(cands, ids):
            if n_prefixes >= MIN_PREFIXES and len(chosen) >= 3:
                break
            key = json.dumps(value, sort_keys=True) if value is not None else text
            if per_value[key] >= 1:
                continue
            assert self.vocab.ll.decode_bytes(toks) == text, f"{self.name}: troupe's tokens do not spell {short(text)}"
            m1.reset()
            taken = m1.try_consume_tokens(toks)
            if taken < len(toks) or not m1.is_accepting():
                if self.schema is not None and lay == "compact" or self.schema is None:
                    at = len(self.vocab.ll.decode_bytes(toks[:taken]))
                    self.totals.troupe_refused_instances.append((self.name, lay, text, at))
                continue
            per_value[key] += 1
            chosen.append((text, spans, lay, value, toks))
            n_prefixes += len(toks) + 1
        return chosen

    # ---- every prefix of one instance ----------------------------------------------------------

    def compare_instance(self, text, spans, lay, toks, masks, row):
        """Both parts on each prefix of `toks`; `masks` holds troupe's answer per prefix."""
        vocab = self.vocab
        self.m1.reset()
        alive2 = self.g2 is not None
        if alive2:
            self.m2 = self.m2 if not self.m2.is_error() else matcher(vocab, self.g2)[0]  # an error state outlives reset()
            self.m2.reset()
        for k in range(len(toks) + 1):
            tm = masks[k]
            row["prefixes"] += 1
            prefix_bytes = vocab.ll.decode_bytes(toks[:k])
            self.count_context(spans, len(prefix_bytes), text, k == len(toks))
            self.totals.us.append(tm["us"])
            if not self.part1(tm, toks, k, prefix_bytes, row):
                break
            if alive2:
                self.part2(tm, prefix_bytes, row)
            if k < len(toks):
                assert self.m1.consume_token(toks[k]), (self.name, k)
                if alive2 and not self.m2.consume_token(toks[k]):
                    alive2 = False
                    at = len(vocab.ll.decode_bytes(toks[:k + 1]))
                    self.totals.llg_refused_instances.append((self.name, lay, text, at, vocab.show(toks[k])))

    def count_context(self, spans, at, text, whole):
        ctx, sub, adepth = context_at(spans, at, len(text)) if self.schema is not None else \
            ("full text" if whole else "grammar", None, 0)
        self.totals.contexts[ctx] += 1
        if adepth >= 2:
            self.totals.contexts["inside nested arrays"] += 1

    def part1(self, tm, toks, k, prefix_bytes, row):
        """The same grammar in both engines; False where troupe refused a prefix token (the rest of
        the instance is not compared)."""
        vocab, totals = self.vocab, self.totals
        l1 = bitmask(self.m1, vocab.n)
        if tm["taken"] != k:
            totals.unexplained += 1
            totals.p1_classes["troupe refused a prefix token llguidance took"] += 1
            totals.p1_examples.setdefault("troupe refused a prefix token llguidance took",
                                          (self.name, short(prefix_bytes), vocab.show(toks[tm["taken"]]), "llguidance"))
            return False
        row["p1 compared"] += 1
        d = tokens_of(tm["bits"] ^ l1, vocab.n)
        if len(d) and self.lexed_greedily(tm, toks[:k], d, prefix_bytes):
            row["p1 explained"] += 1
        elif not len(d):
            row["p1 equal"] += 1
        else:
            self.classify_p1(tm, d, prefix_bytes)
        return True

    def lexed_greedily(self, tm, prefix, d, prefix_bytes):
        """Whether the masks' difference `d` is llguidance's lexer's: it joins the characters of a
        converted terminal greedily (longest match); with one-character lexemes it runs the grammar
        exactly, and then equals troupe."""
        vocab, totals = self.vocab, self.totals
        if self.m1c is None:
            self.m1c, e = matcher(vocab, llguidance.LLMatcher.grammar_from_lark(gbnf_to_lark_by_char(self.gbnf)))
            assert not e, e
        self.m1c.reset()
        if not self.m1c.consume_tokens(prefix):
            return False
        lc = bitmask(self.m1c, vocab.n)
        if tokens_of(tm["bits"] ^ lc, vocab.n).size:
            return False
        c = "llguidance lexes a converted terminal greedily (equal with one-character lexemes)"
        totals.p1_classes[c] += 1
        if c not in totals.p1_examples:
            t = int(d[0])
            totals.p1_examples[c] = (self.name, short(prefix_bytes), vocab.show(t), allowed_by(tm, t))
        return True

    def classify_p1(self, tm, d, prefix_bytes):
        vocab, totals = self.vocab, self.totals
        classes = set()
        for t in d:
            t = int(t)
            c = p1_class(vocab, t)
            classes.add(c)
            totals.p1_examples.setdefault(c, (self.name, short(prefix_bytes), vocab.show(t), allowed_by(tm, t)))
        for c in classes:
            totals.p1_classes[c] += 1
        if "UNEXPLAINED" in classes:
            totals.unexplained += 1
            if VERBOSE:
                log(f"    part 1 {self.name} at {short(prefix_bytes)}: {len(d)} tokens differ, e.g. "
                    f"{[vocab.show(int(t)) for t in d[:5]]}")

    def part2(self, tm, prefix_bytes, row):
        """llguidance's own JSON Schema converter: each differing token classified."""
        row["p2 compared"] += 1
        l2 = bitmask(self.m2, self.vocab.n)
        d2 = tokens_of(tm["bits"] ^ l2, self.vocab.n)
        if not len(d2):
            row["p2 equal"] += 1
            return
        seen = set()
        memo = {True: {}, False: {}}
        if len(d2) > MAX_CLASSIFIED:
            d2 = sorted(random.Random(len(d2)).sample(list(d2), MAX_CLASSIFIED))
        for t in d2:
            self.classify_p2(int(t), tm, prefix_bytes, seen, memo)

    def classify_p2(self, t, tm, prefix_bytes, seen, memo):
        """One token of a part-2 difference; a troupe-only one is also completed and validated,
        while the checks allow."""
        vocab, totals, name = self.vocab, self.totals, self.name
        troupe_only = troupe_allows(tm, t)
        c = classify(vocab, t, prefix_bytes, self.schema, self.m2 if troupe_only else self.m1, memo[troupe_only])
        key = (c, "troupe only" if troupe_only else "llguidance only")
        totals.p2_tokens[key] += 1
        if key not in seen:
            seen.add(key)
            totals.p2_classes[key] += 1
            totals.p2_examples.setdefault(key, (name, short(prefix_bytes), vocab.show(t)))
        if troupe_only and self.checks_left > 0 and totals.checked[(name, c)] < CHECKS_PER_CLASS:
            totals.checked[(name, c)] += 1
            self.checks_left -= 1
            check_troupe_only(name, self.schema, vocab, self.m1, t, prefix_bytes, c, totals)


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


if __name__ == "__main__":
    sys.exit(main())
