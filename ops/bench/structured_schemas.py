"""The schemas of structured_bench.py: JSONSchemaBench's files, the seeded choice among those
`troupe grammar` compiles, troupe's masks for them, and an output judged against its schema."""
import json
import os
import random
import subprocess
import time

from structured_results import emit

_VALIDATORS = {}


def validate(schema_text, text):
    """(valid, reason): valid is True, False, or None where jsonschema cannot judge (a remote $ref)."""
    import jsonschema
    try:
        inst = json.loads(text)
    except ValueError as e:
        return False, f"not JSON: {e}"
    v = _VALIDATORS.get(schema_text)
    if v is None:
        schema = json.loads(schema_text)
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        fmt = cls.FORMAT_CHECKER if '"format"' in schema_text else None
        v = _VALIDATORS[schema_text] = cls(schema, format_checker=fmt)
    try:
        err = jsonschema.exceptions.best_match(v.iter_errors(inst))
    except Exception as e:  # unresolvable $ref and the like
        return None, f"{type(e).__name__}: {str(e)[:200]}"
    if err is None:
        return True, ""
    return False, f"{'/'.join(map(str, err.absolute_path))}: {err.message[:200]}"


def checkable_formats():
    import jsonschema
    return sorted(jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers)


class Bench:
    """A checkout of github.com/guidance-ai/jsonschemabench (data/<Subset>/*.json), or a git
    repository of it (bare too: read with `git show HEAD:...`)."""

    def __init__(self, path):
        self.path = path
        self.files = {}
        data = os.path.join(path, "data")
        if os.path.isdir(data):
            self.git = False
            for sub in sorted(os.listdir(data)):
                d = os.path.join(data, sub)
                if os.path.isdir(d):
                    self.files[sub] = sorted(f"data/{sub}/{f}" for f in os.listdir(d) if f.endswith(".json"))
        else:
            self.git = True
            out = subprocess.run(["git", "-C", path, "ls-tree", "-r", "--name-only", "HEAD", "data"],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(f"{path}: neither a JSONSchemaBench checkout (data/) nor its git repository: "
                                 f"{out.stderr.strip()}")
            for f in out.stdout.split():
                parts = f.split("/")
                if len(parts) == 3 and f.endswith(".json"):
                    self.files.setdefault(parts[1], []).append(f)
        if not self.files:
            raise SystemExit(f"{path}: no data/<Subset>/*.json")

    def read(self, rel):
        if not self.git:
            with open(os.path.join(self.path, rel)) as f:
                return f.read()
        return subprocess.run(["git", "-C", self.path, "show", f"HEAD:{rel}"], capture_output=True, text=True,
                              check=True).stdout


def troupe_compile(args, path):
    """`troupe grammar --json-schema F`: (ok, wall seconds, refusal's first line)."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run([args.troupe, "grammar", "--json-schema", path], capture_output=True, text=True,
                           timeout=args.compile_timeout)
    except subprocess.TimeoutExpired:
        return False, args.compile_timeout, f"timeout after {args.compile_timeout} s"
    wall = time.perf_counter() - t0
    err = (p.stderr.strip().splitlines() or [""])[-1][:300]
    return p.returncode == 0, wall, err


def troupe_masks(args, path, gguf, prefixes):
    """`troupe grammar --json-schema F --model M`, one mask per prefix: [{"us", "allowed", "taken"}]."""
    lines = "".join(json.dumps({"tokens": p}) + "\n" for p in prefixes)
    p = subprocess.run([args.troupe, "grammar", "--json-schema", path, "--model", gguf], input=lines,
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"troupe grammar --model failed ({p.returncode}): {p.stderr.strip()[-300:]}")
    out = []
    for line in p.stdout.splitlines():
        d = json.loads(line)
        d.pop("mask", None)
        out.append(d)
    return out


def select_schemas(args, bench, work):
    """Per subset: a seeded shuffle, then the first N that troupe compiles."""
    subsets = sorted(bench.files) if args.subsets == "all" else [s for s in args.subsets.split(",") if s]
    chosen, tried = [], {}
    sdir = os.path.join(work, "schemas")
    os.makedirs(sdir, exist_ok=True)
    for sub in subsets:
        if sub not in bench.files:
            raise SystemExit(f"no subset {sub} in {bench.path} (have: {', '.join(sorted(bench.files))})")
        files = list(bench.files[sub])
        random.Random(f"{args.seed}:{sub}").shuffle(files)
        t = tried[sub] = {"tried": 0, "refused": 0, "not_json": 0, "refusals": []}
        got = 0
        for rel in files:
            if got >= args.n:
                break
            text = bench.read(rel)
            try:
                json.loads(text)
            except ValueError:
                t["not_json"] += 1
                continue
            path = os.path.join(sdir, rel.replace("/", "__"))
            with open(path, "w") as f:
                f.write(text)
            t["tried"] += 1
            ok, wall, err = troupe_compile(args, path)
            if not ok:
                t["refused"] += 1
                t["refusals"].append(f"{rel}: {err}")
                continue
            chosen.append({"subset": sub, "file": rel, "path": path, "text": text, "compile_wall_s": wall})
            got += 1
        emit({"part": "select", "subset": sub, "chosen": got, "tried": t["tried"], "refused_by_troupe": t["refused"],
              "refusals": t["refusals"][:5]})
    return chosen


def _formats(node):
    if isinstance(node, dict):
        if isinstance(node.get("format"), str):
            yield node["format"]
        for v in node.values():
            yield from _formats(v)
    elif isinstance(node, list):
        for v in node:
            yield from _formats(v)
