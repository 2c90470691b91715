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
