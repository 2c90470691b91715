"""What check_llguidance_masks.py counts as it goes, and the summary table it prints."""
import collections

import numpy as np


def log(*a):
    print(*a, flush=True)


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
