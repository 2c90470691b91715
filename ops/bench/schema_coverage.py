#!/usr/bin/env python3
"""JSON Schema coverage on JSONSchemaBench: troupe's converter against llama.cpp's.

    schema_coverage.py TROUPE_BINARY JSONSCHEMABENCH [--subset S] [--limit N] [--jobs J] [--timing-tests T]

JSONSCHEMABENCH is a checkout of guidance-ai/jsonschemabench (its data/<subset>/*.json) or a
bare git mirror of it (read with `git show HEAD:data/...`). Per subset, every schema is
compiled

  * by troupe: `troupe grammar --json-schema FILE` (its default, generation profile); exit 0
    is covered, exit 1 with `troupe: error: <pointer>: <keyword>: ...` a refusal, counted by
    keyword;
  * by llama.cpp: llama-cpp-python's converter (`llama_cpp.llama_grammar.json_schema_to_gbnf`,
    what `LlamaGrammar.from_json_schema` runs) and then llama.cpp's own GBNF parser
    (`llama_sampler_init_grammar` over a vocab-only model; `LlamaGrammar.from_string` no longer
    parses). An exception or a grammar llama.cpp will not parse is not covered.

llama.cpp's converter never refuses a keyword: what it cannot enforce it drops. The
"ignores" column counts the llama.cpp-covered schemas that use a keyword it does not enforce
(number bounds, uniqueItems, patternProperties, not, if/then/else, oneOf's exclusivity, ...).
Compile times per schema: llama.cpp's in-process; troupe's in-process too with --timing-tests
(troupe_engine_tests' hidden [.schema_timing] case runs json_schema_to_gbnf and compile_gbnf
per schema), else the process's wall time less its median start-up (`troupe grammar` on `{}`),
which under load is mostly noise.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import re
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUBSETS = ["Github_trivial", "Github_easy", "Github_medium", "Github_hard", "Github_ultra", "Glaiveai2K",
           "JsonSchemaStore", "Kubernetes", "Snowplow", "WashingtonPost"]

# What llama-cpp-python's SchemaConverter.visit enforces; any other validation keyword it drops.
LLAMA_ENFORCED = {"type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
                  "maxItems", "enum", "const", "anyOf", "allOf", "$ref", "pattern", "format", "minLength",
                  "maxLength"}
LLAMA_FORMATS = {"date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5"}
VALIDATION_KEYWORDS = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "uniqueItems",
                       "patternProperties", "propertyNames", "minProperties", "maxProperties", "dependencies",
                       "dependentRequired", "dependentSchemas", "if", "then", "else", "not", "contains",
                       "minContains", "maxContains", "oneOf", "additionalItems", "unevaluatedProperties",
                       "unevaluatedItems"}
SCHEMA_KEYS = {"properties", "patternProperties", "definitions", "$defs", "dependentSchemas"}
SCHEMA_LISTS = {"anyOf", "allOf", "oneOf", "prefixItems"}
SCHEMA_ONE = {"additionalProperties", "items", "additionalItems", "not", "if", "then", "else", "contains",
              "propertyNames", "unevaluatedProperties", "unevaluatedItems"}


def llama_ignored(schema, out: set, depth=0):
    """Keywords in the schema that llama.cpp's converter does not enforce."""
    if depth > 200 or not isinstance(schema, dict):
        return out
    for k, v in schema.items():
        out.update(dropped_keywords(schema, k, v))
        for x in subschemas(k, v):
            llama_ignored(x, out, depth + 1)
    return out


def dropped_keywords(schema, k, v):
    """What of the schema's keyword `k` (value `v`) llama.cpp's converter drops."""
    dropped = set()
    # additionalItems means something only beside a list of items
    if k in VALIDATION_KEYWORDS and k not in LLAMA_ENFORCED and (
            k != "additionalItems" or isinstance(schema.get("items"), list)):
        dropped.add(k)
    if k == "format" and isinstance(v, str) and v not in LLAMA_FORMATS and schema.get("type") in (None, "string"):
        dropped.add("format")
    if k in ("minLength", "maxLength") and ("pattern" in schema or "format" in schema):
        dropped.add(k)
    return dropped


def subschemas(k, v):
    """The schemas the keyword `k` holds in `v` (none when it holds no schema)."""
    if k == "dependencies" or (k in SCHEMA_KEYS and isinstance(v, dict)):
        return list(v.values()) if isinstance(v, dict) else []
    if k in SCHEMA_LISTS and isinstance(v, list):
        return v
    if k in SCHEMA_ONE:
        return v if isinstance(v, list) else [v]
    return []


# ---- reading the bench -------------------------------------------------------------------------

class Bench:
    def __init__(self, where: str):
        self.where = Path(where)
        self.git = None
        self.missing = []
        if (self.where / "data").is_dir():
            self.data = self.where / "data"
        elif self.where.is_dir() and (self.where / "HEAD").exists():
            self.git = str(self.where)
        elif (self.where / "repo" / "HEAD").exists():
            self.git = str(self.where / "repo")
        elif self.where.is_dir() and any(self.where.glob("*/*.json")):
            self.data = self.where
        else:
            sys.exit(f"{where}: neither a checkout (data/<subset>/*.json) nor a bare git mirror")
        if self.git:
            names = subprocess.run(["git", "-C", self.git, "ls-tree", "-r", "--name-only", "HEAD", "data"],
                                   check=True, capture_output=True, text=True).stdout.split()
            self.files = collections.defaultdict(list)
            for n in names:
                parts = n.split("/")
                if len(parts) == 3 and n.endswith(".json"):
                    self.files[parts[1]].append(n)

    def subsets(self):
        if self.git:
            return [s for s in SUBSETS if s in self.files]
        return [s for s in SUBSETS if (self.data / s).is_dir()]

    def schemas(self, subset: str):
        """(name, text) of each schema, sorted by name."""
        if self.git:
            names = sorted(self.files[subset])
            # One `git cat-file --batch` for the lot.
            proc = subprocess.run(["git", "-C", self.git, "cat-file", "--batch"],
                                  input="".join(f"HEAD:{n}\n" for n in names).encode(), capture_output=True, check=True)
            out, at = [], 0
            buf = proc.stdout
            for n in names:
                nl = buf.index(b"\n", at)
                header = buf[at:nl].split()
                if len(header) < 3 or header[1] != b"blob":  # "<name> missing": a blob the mirror lacks
                    self.missing.append(n)
                    at = nl + 1
                    continue
                size = int(header[2])
                out.append((Path(n).name, buf[nl + 1:nl + 1 + size].decode("utf-8", "replace")))
                at = nl + 1 + size + 1
            return out
        return [(p.name, p.read_text(encoding="utf-8", errors="replace")) for p in sorted((self.data / subset).glob("*.json"))]


# ---- engines ---------------------------------------------------------------------------------

def troupe_compile(binary: str, path: str):
    t0 = time.perf_counter()
    p = subprocess.run([binary, "grammar", "--json-schema", path], capture_output=True, text=True, timeout=120)
    dt = time.perf_counter() - t0
    if p.returncode == 0:
        return True, None, dt
    # "troupe: error: <pointer>: <keyword>: <why>" (a keyword may hold ':')
    line = next((l for l in p.stderr.splitlines() if l.startswith("troupe: error: ")), "")
    parts = line[len("troupe: error: "):].split(": ", 2)
    if p.returncode == 1 and len(parts) == 3:
        return False, parts[1], dt
    return False, "(exit %d: %s)" % (p.returncode, p.stderr.strip()[:80]), dt


def troupe_timings(tests_binary: str, paths):
    """In-process microseconds per schema (convert + compile), from the engine tests' hidden
    [.schema_timing] case: process start-up, which dwarfs most schemas, left out."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(paths) + "\n")
        listing = f.name
    out = subprocess.run([tests_binary, "[.schema_timing]"], capture_output=True, text=True,
                         env=dict(os.environ, TROUPE_SCHEMA_TIMING=listing)).stdout
    os.unlink(listing)
    times = {}
    for line in out.splitlines():
        if line.startswith("schema_timing\t"):
            _, path, ok, us = line.split("\t")
            times[path] = float(us) / 1e6
    return times


_llama = None


def llama_init():
    global _llama
    if _llama is not None:
        return _llama
    from llama_cpp import llama_cpp as L
    from llama_cpp.llama_grammar import json_schema_to_gbnf
    vocab_path = os.environ.get("LLAMA_VOCAB_GGUF")
    if not vocab_path:
        import llama_cpp
        root = Path.home() / ".cache/troupe/llama-tools" / llama_cpp.__version__ / "src/vendor/llama.cpp/models"
        cands = sorted(root.glob("ggml-vocab-llama-bpe.gguf")) or sorted(root.glob("ggml-vocab-*.gguf"))
        vocab_path = str(cands[0]) if cands else None
    if not vocab_path:
        sys.exit("a vocab-only GGUF for llama.cpp's grammar parser is needed (LLAMA_VOCAB_GGUF)")
    quiet = L.llama_log_callback(lambda level, text, user: None)
    L.llama_log_set(quiet, None)
    L.llama_backend_init()
    params = L.llama_model_default_params()
    params.vocab_only = True
    model = L.llama_model_load_from_file(vocab_path.encode(), params)
    if not model:
        sys.exit(f"{vocab_path}: llama.cpp could not load it")
    _llama = (L, L.llama_model_get_vocab(model), json_schema_to_gbnf, model, quiet)
    return _llama


def llama_compile_here(text: str):
    L, vocab, convert, _, _ = llama_init()
    t0 = time.perf_counter()
    try:
        gbnf = convert(text)
        sampler = L.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
        ok = bool(sampler)
        if ok:
            L.llama_sampler_free(sampler)
    except BaseException as e:  # noqa: BLE001 (the converter raises anything, RecursionError included)
        if isinstance(e, KeyboardInterrupt):
            raise
        ok = False
    return ok, time.perf_counter() - t0


def llama_worker():
    """One schema per stdin line (JSON string), one result per stdout line."""
    sys.setrecursionlimit(5000)
    llama_init()
    for line in sys.stdin:
        ok, dt = llama_compile_here(json.loads(line))
        sys.stdout.write(json.dumps([ok, dt]) + "\n")
        sys.stdout.flush()


class LlamaPool:
    """llama.cpp in a child process: some grammars crash it (a deep recursion in its parser), which
    then counts as not covered, and a fresh child takes the next schema."""

    def __init__(self):
        self.proc = None
        self.failures = 0  # crashes and time-outs

    def start(self):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--llama-worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def compile(self, text: str, timeout: float = 60.0):
        """(covered, seconds); a crash or a run past `timeout` is not covered (seconds: nan)."""
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        line = ""
        try:
            self.proc.stdin.write(json.dumps(text) + "\n")
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
            if ready:
                line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None
            self.failures += 1
            return False, float("nan")
        ok, dt = json.loads(line)
        return ok, dt

    def close(self):
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait()


def pct(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("troupe")
    ap.add_argument("bench")
    ap.add_argument("--subset", action="append", help="a subset (repeatable); default all")
    ap.add_argument("--limit", type=int, default=0, help="the first N schemas of each subset")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="troupe processes at once")
    ap.add_argument("--no-llama", action="store_true", help="troupe only")
    ap.add_argument("--top", type=int, default=5, help="refusal keywords listed per subset")
    ap.add_argument("--json", help="also write per-schema results here")
    ap.add_argument("--refusals", help="write `subset name keyword` lines for troupe's refusals here")
    ap.add_argument("--timing-tests", help="troupe_engine_tests: time troupe in-process with its hidden "
                                           "[.schema_timing] case (else: process wall time less start-up)")
    return ap.parse_args()


def troupe_startup(binary):
    """Process start-up, to separate from compile time: the median of `troupe grammar` on `{}`."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write("{}")
        empty = f.name
    startup = statistics.median(troupe_compile(binary, empty)[2] for _ in range(10))
    os.unlink(empty)
    return startup


def write_schemas(tmp, subset, schemas):
    """Each schema in a file of its own (troupe reads a file); their paths."""
    paths = []
    for name, text in schemas:
        p = os.path.join(tmp, f"{subset}__{name}")
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)
        paths.append(p)
    return paths


def add_llama(rec, result, text, l_times):
    """llama.cpp's result into the schema's record; returns the keywords it dropped (if covered)."""
    lok, ldt = result
    if ldt == ldt:  # nan: a crash or a time-out, no time to count
        l_times.append(ldt)
    rec.update(llama=lok, llama_s=ldt)
    if not lok:
        return set()
    try:
        ign = llama_ignored(json.loads(text), set())
    except (ValueError, RecursionError):
        ign = set()
    if ign:
        rec["llama_ignores"] = sorted(ign)
    return ign


def cover_subset(args, bench, pool, tmp, subset, startup):
    """One subset through both converters: (its table row, per-schema records, refusal lines)."""
    schemas = bench.schemas(subset)
    if args.limit:
        schemas = schemas[: args.limit]
    paths = write_schemas(tmp, subset, schemas)
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        troupe_results = list(ex.map(lambda p: troupe_compile(args.troupe, p), paths))
    in_process = troupe_timings(args.timing_tests, paths) if args.timing_tests else {}
    llama_results = [] if args.no_llama else [pool.compile(text) for _, text in schemas]
    refusals = collections.Counter()
    t_times, l_times = [], []
    ignoring = 0
    ignored_kw = collections.Counter()
    records, refusal_lines = [], []
    for i, (name, text) in enumerate(schemas):
        ok, kw, dt = troupe_results[i]
        t_times.append(in_process[paths[i]] if paths[i] in in_process else max(dt - startup, 0.0))
        if not ok:
            refusals[kw] += 1
            refusal_lines.append(f"{subset} {name} {kw}")
        rec = {"subset": subset, "name": name, "troupe": ok, "refusal": kw, "troupe_s": dt}
        if llama_results:
            ign = add_llama(rec, llama_results[i], text, l_times)
            if ign:
                ignoring += 1
                ignored_kw.update(ign)
        records.append(rec)
    n = len(schemas)
    t_ok = sum(r[0] for r in troupe_results)
    l_ok = sum(r[0] for r in llama_results)
    print(f"{subset}: {n} schemas, troupe {t_ok}, llama.cpp {l_ok}", file=sys.stderr, flush=True)
    row = dict(subset=subset, n=n, t_ok=t_ok, l_ok=l_ok, ignoring=ignoring, refusals=refusals,
               ignored=ignored_kw, t_times=t_times, l_times=l_times)
    return row, records, refusal_lines


def ms(v):
    return f"{1000 * v:.1f}"


def print_coverage(args, rows):
    print("\n| subset | schemas | troupe covered | llama.cpp covered | llama.cpp covered, using keywords it ignores | "
          "troupe's top refusals |")
    print("|---|---:|---:|---:|---:|---|")
    for r in rows:
        top = ", ".join(f"{k} {c}" for k, c in r["refusals"].most_common(args.top)) or "-"
        lcov = "-" if args.no_llama else f"{100 * r['l_ok'] / max(r['n'], 1):.1f} %"
        ign = "-" if args.no_llama else str(r["ignoring"])
        print(f"| {r['subset']} | {r['n']} | {100 * r['t_ok'] / max(r['n'], 1):.1f} % | {lcov} | {ign} | {top} |")
    totals = collections.Counter()
    allref = collections.Counter()
    for r in rows:
        totals.update(n=r["n"], t_ok=r["t_ok"], l_ok=r["l_ok"], ignoring=r["ignoring"])
        allref.update(r["refusals"])
    n = totals["n"]
    top = ", ".join(f"{k} {c}" for k, c in allref.most_common(args.top + 3)) or "-"
    lcov = "-" if args.no_llama else f"{100 * totals['l_ok'] / max(n, 1):.1f} %"
    print(f"| **all** | {n} | {100 * totals['t_ok'] / max(n, 1):.1f} % | {lcov} | "
          f"{'-' if args.no_llama else totals['ignoring']} | {top} |")


def print_times(args, rows, startup):
    how = ("in-process, convert + compile_gbnf (troupe_engine_tests [.schema_timing])" if args.timing_tests else
           f"the process's wall time less its start-up, {ms(startup)} ms")
    print(f"\nTime to compile a schema, ms (troupe: {how}; llama.cpp: converter + GBNF parser, in-process):\n")
    print("| subset | troupe median | troupe p99 | llama.cpp median | llama.cpp p99 |")
    print("|---|---:|---:|---:|---:|")
    all_t = [t for r in rows for t in r["t_times"]]
    all_l = [t for r in rows for t in r["l_times"]]
    for r in rows + [dict(subset="**all**", t_times=all_t, l_times=all_l)]:
        lm = "-" if args.no_llama else ms(pct(r["l_times"], 0.5))
        lp = "-" if args.no_llama else ms(pct(r["l_times"], 0.99))
        print(f"| {r['subset']} | {ms(pct(r['t_times'], 0.5))} | {ms(pct(r['t_times'], 0.99))} | {lm} | {lp} |")


def print_notes(args, pool, bench, rows):
    """What the tables leave out: llama.cpp's crashes, blobs the mirror lacks, the keywords dropped."""
    if not args.no_llama and pool.failures:
        print(f"\nllama.cpp crashed or ran past 60 s on {pool.failures} schemas (counted as not covered).")
    if bench.missing:
        print(f"\nNot in the mirror (listed, contents absent), left out: {len(bench.missing)}: "
              + ", ".join(bench.missing[:10]))
    if not args.no_llama:
        ign = collections.Counter()
        for r in rows:
            ign.update(r["ignored"])
        print("\nKeywords llama.cpp dropped in the schemas it covered (schemas using each): "
              + (", ".join(f"{k} {c}" for k, c in ign.most_common()) or "-"))


def main():
    if sys.argv[1:] == ["--llama-worker"]:
        return llama_worker()
    args = parse_args()

    bench = Bench(args.bench)
    subsets = args.subset or bench.subsets()
    startup = troupe_startup(args.troupe)

    rows, per_schema, refusal_lines = [], [], []
    pool = LlamaPool()
    with tempfile.TemporaryDirectory() as tmp:
        for subset in subsets:
            row, records, lines = cover_subset(args, bench, pool, tmp, subset, startup)
            rows.append(row)
            per_schema += records
            refusal_lines += lines
    pool.close()

    print_coverage(args, rows)
    print_times(args, rows, startup)
    print_notes(args, pool, bench, rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(per_schema, f, indent=1)
    if args.refusals:
        with open(args.refusals, "w") as f:
            f.write("\n".join(refusal_lines) + "\n")


if __name__ == "__main__":
    main()
