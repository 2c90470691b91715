#!/usr/bin/env python3
"""Constrained decoding against llama.cpp's llama-server (ops/bench/structured.sh runs it).

Starts and stops the servers itself (`troupe serve`, llama-server; one GGUF file, the same
threads) and runs the parts named in --parts:

  compliance  JSONSchemaBench: N schemas per subset, a seeded choice among those troupe
              compiles; each engine writes "a JSON instance of this schema" (chat, greedy,
              the schema in the prompt and as the constraint); finished (finish_reason stop)
              and valid (jsonschema, FormatChecker for schemas with `format`) per subset.
  timing      per schema: wall time of `troupe grammar --json-schema F` (conversion +
              compile, the process included) and the first mask (`--model`, empty prefix);
              per token: the mask of every prefix of troupe's valid outputs, computed the
              first time (as the first request meets it) and again (cached).
  decode      ZeroMQ, greedy, B concurrent streams: constrained (a list of 8-12 records)
              against unconstrained on the same prompts, each unconstrained stream as long
              as its constrained twin (ignore_eos, max_tokens = the constrained length).
  jump        `serve` against `serve --no-jump-forward`: tok/s, decode steps (server Stats),
              and whether the greedy outputs are identical; a JSON schema with six long
              required keys, and the same shape as a GBNF grammar with literal keys.
  peer        troupe's HTTP against llama-server's, /v1/chat/completions with
              response_format json_schema, B concurrent streams (SSE), the decode schema.

Prints JSON lines (`{"part": ...}`) as it goes and a markdown summary at the end; every line
also goes to OUT/results.jsonl, outputs to OUT/*.jsonl. Knobs: --help (each has an env var).
"""
import argparse
import base64
import http.client
import json
import os
import random
import shutil
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import Server, free_port, http_ok

RESULTS = []
OUT_DIR = None


def emit(rec):
    RESULTS.append(rec)
    line = json.dumps(rec)
    print(line, flush=True)
    if OUT_DIR:
        with open(os.path.join(OUT_DIR, "results.jsonl"), "a") as f:
            f.write(line + "\n")


def save(name, rec):
    with open(os.path.join(OUT_DIR, name), "a") as f:
        f.write(json.dumps(rec) + "\n")


def log(msg):
    print(f"[structured] {msg}", file=sys.stderr, flush=True)


def pct(xs, p):
    """Nearest-rank percentile (p in 0..100); None for no data."""
    xs = sorted(xs)
    if not xs:
        return None
    k = max(0, min(len(xs) - 1, int(-(-p * len(xs) // 100)) - 1))
    return xs[k]


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


# ---------------------------------------------------------------------------------------- servers

class Troupe(Server):
    def __init__(self, args, model, work, extra=(), tag=""):
        d = tempfile.mkdtemp(prefix="troupe-", dir=work)
        self.endpoint = f"ipc://{d}/s.sock"
        self.hostport = f"127.0.0.1:{free_port()}"
        argv = [args.troupe, "serve", "-m", model, "--listen", self.endpoint, "--http", self.hostport,
                "--data-dir", f"{d}/data", "--threads", str(args.threads), "--kv-tokens", str(args.kv_tokens),
                "--drain-timeout", "0", *shlex.split(args.troupe_flags), *extra]
        super().__init__(f"troupe serve {tag}".strip(), argv, f"{d}/log", lambda: http_ok(self.hostport, "/readyz"))


class Peer(Server):
    def __init__(self, args, gguf, work, slots, ctx):
        self.hostport = f"127.0.0.1:{free_port()}"
        host, port = self.hostport.split(":")
        logpath = os.path.join(work, f"llama-server-{port}.log")
        argv = [args.llama_server, "-m", gguf, "-t", str(args.threads), "-np", str(slots), "-c", str(ctx),
                "--host", host, "--port", port]
        super().__init__("llama-server", argv, logpath, lambda: http_ok(self.hostport, "/health"))


# ---------------------------------------------------------------------------------------- clients

def zmq_client(endpoint):
    from troupe_client import Client
    return Client(endpoint, timeout=900)


def zmq_chat(endpoint, messages, max_tokens, constraint):
    """One greedy chat turn over ZeroMQ."""
    from troupe_client import TroupeError
    c = zmq_client(endpoint)
    try:
        t0 = time.perf_counter()
        s = c.chat(messages, max_tokens=max_tokens, temperature=0, top_k=0, top_p=1.0, min_p=0.0,
                   constraint=constraint)
        try:
            s.read()
        except TroupeError as e:
            return {"error": f"{e.code}: {e.message}"}
        return {"text": s.text, "tokens": list(s.tokens), "finish": s.finish_reason,
                "completion_tokens": (s.usage or {}).get("completion_tokens", len(s.tokens)),
                "wall_s": time.perf_counter() - t0}
    finally:
        c.close()


def zmq_generate(endpoint, prompt, max_tokens, constraint=None, ignore_eos=False):
    """One greedy raw completion over ZeroMQ (the prompt already in the chat template)."""
    from troupe_client import TroupeError
    c = zmq_client(endpoint)
    try:
        t0 = time.perf_counter()
        s = c.generate(prompt, max_tokens=max_tokens, temperature=0, top_k=0, top_p=1.0, min_p=0.0, special=True,
                       ignore_eos=ignore_eos, constraint=constraint)
        try:
            s.read()
        except TroupeError as e:
            return {"error": f"{e.code}: {e.message}", "t0": t0}
        tt = s.token_times
        return {"text": s.text, "tokens": list(s.tokens), "finish": s.finish_reason, "n": len(s.tokens), "t0": t0,
                "t_first": tt[0] if tt else None, "t_last": tt[-1] if tt else None}
    finally:
        c.close()


def http_chat(hostport, body, stream=False, timeout=900):
    """POST /v1/chat/completions. Streaming: per-chunk arrival times; returns a dict."""
    host, port = hostport.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=timeout)
    body = dict(body, stream=stream)
    if stream:
        body["stream_options"] = {"include_usage": True}
    t0 = time.perf_counter()
    try:
        c.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            return {"error": f"HTTP {r.status}: {r.read()[:400].decode(errors='replace')}", "t0": t0}
        if not stream:
            d = json.loads(r.read())
            ch = d["choices"][0]
            return {"text": ch["message"].get("content") or "", "finish": ch.get("finish_reason"),
                    "completion_tokens": (d.get("usage") or {}).get("completion_tokens"),
                    "wall_s": time.perf_counter() - t0, "t0": t0}
        text, finish, usage, times = [], None, None, []
        for line in r:
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for ch in chunk.get("choices") or []:
                piece = (ch.get("delta") or {}).get("content")
                if piece:
                    text.append(piece)
                    times.append(time.perf_counter())
                if ch.get("finish_reason"):
                    finish = ch["finish_reason"]
        n = (usage or {}).get("completion_tokens") or len(times)
        return {"text": "".join(text), "finish": finish, "n": n, "t0": t0,
                "t_first": times[0] if times else None, "t_last": times[-1] if times else None}
    except (OSError, http.client.HTTPException, ValueError) as e:
        return {"error": f"{type(e).__name__}: {e}", "t0": t0}
    finally:
        c.close()


def parallel(fn, argsets):
    out = [None] * len(argsets)

    def one(i):
        try:
            out[i] = fn(*argsets[i])
        except Exception as e:  # a stream's failure is a result, not the end of the run
            out[i] = {"error": f"{type(e).__name__}: {e}"}

    ts = [threading.Thread(target=one, args=(i,)) for i in range(len(argsets))]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out, t0


def rates(results, t_start):
    """decode: tokens after each stream's first / (last token anywhere - first token anywhere);
    e2e: all tokens / (last token - start). One stream: its own decode rate."""
    ok = [r for r in results if r and not r.get("error") and r.get("t_first") is not None]
    if not ok or len(ok) < len(results):
        return None, None
    span = max(r["t_last"] for r in ok) - min(r["t_first"] for r in ok)
    after_first = sum(r["n"] - 1 for r in ok)
    decode = after_first / span if span > 0 else None
    e2e = sum(r["n"] for r in ok) / (max(r["t_last"] for r in ok) - t_start)
    return decode, e2e


# ---------------------------------------------------------------------------------------- validation

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


# ---------------------------------------------------------------------------------------- JSONSchemaBench

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


def instance_prompt(args, schema_text):
    compact = json.dumps(json.loads(schema_text), separators=(",", ":"))
    if len(compact) > args.prompt_chars:
        compact = compact[:args.prompt_chars] + " ...(truncated)"
    return [{"role": "system", "content": "You are a helpful assistant. You answer with JSON only."},
            {"role": "user", "content": "Write a JSON instance of this JSON Schema: a JSON value that validates "
                                        f"against it, with realistic values.\n\nSchema:\n{compact}"}]


def generate_instances(args, engine, target, chosen, outname):
    """Each schema once, `streams` at a time; results in chosen order."""
    def one(s):
        msgs = instance_prompt(args, s["text"])
        if engine == "troupe":
            r = zmq_chat(target, msgs, args.max_tokens, {"json_schema": s["text"]})
        else:
            r = http_chat(target, {"messages": msgs, "max_tokens": args.max_tokens, "temperature": 0,
                                   "response_format": {"type": "json_schema",
                                                       "json_schema": {"name": "s", "schema": json.loads(s["text"])}}},
                          timeout=args.request_timeout)
        if not r.get("error"):
            r["valid"], r["why"] = validate(s["text"], r["text"]) if r["finish"] == "stop" else (None, "unfinished")
        return r

    results = [None] * len(chosen)
    for i in range(0, len(chosen), args.compliance_streams):
        batch = list(range(i, min(i + args.compliance_streams, len(chosen))))
        out, _ = parallel(lambda k: one(chosen[k]), [(k,) for k in batch])
        for k, r in zip(batch, out):
            results[k] = r
        log(f"{engine}: {min(i + args.compliance_streams, len(chosen))}/{len(chosen)} schemas")
    with open(os.path.join(OUT_DIR, outname), "a") as f:
        for s, r in zip(chosen, results):
            f.write(json.dumps({"subset": s["subset"], "file": s["file"], **{k: v for k, v in r.items()
                                                                                 if k != "tokens"}}) + "\n")
    return results


def compliance_table(chosen, results):
    rows = {}
    for s, r in zip(chosen, results):
        row = rows.setdefault(s["subset"], {"schemas": 0, "compiled": 0, "finished": 0, "valid": 0, "unjudged": 0,
                                            "failures": []})
        row["schemas"] += 1
        if r.get("error"):
            row["failures"].append(f"{s['file']}: {r['error'][:200]}")
            continue
        row["compiled"] += 1
        if r["finish"] == "stop":
            row["finished"] += 1
            if r["valid"] is True:
                row["valid"] += 1
            elif r["valid"] is None:
                row["unjudged"] += 1
                row["failures"].append(f"{s['file']}: not judged: {r['why']}")
            else:
                row["failures"].append(f"{s['file']}: INVALID: {r['why']}")
    for row in rows.values():
        judged = row["finished"] - row["unjudged"]
        row["compliance"] = row["valid"] / judged if judged else None
    return rows


def part_compliance(args, work, chosen, gguf, model):
    formats = sorted({f for s in chosen for f in _formats(json.loads(s["text"]))})
    can = checkable_formats()
    emit({"part": "compliance", "formats_in_chosen": formats, "formats_jsonschema_checks": can,
          "formats_not_checked": [f for f in formats if f not in can]})
    srv = Troupe(args, model, work, tag=model)
    try:
        mine = generate_instances(args, "troupe", srv.endpoint, chosen, "compliance_troupe.jsonl")
    finally:
        srv.stop()
    theirs = None
    if args.llama_server:
        peer = Peer(args, gguf, work, args.compliance_streams, args.compliance_streams * args.peer_ctx_per_slot)
        try:
            theirs = generate_instances(args, "llama-server", peer.hostport, chosen, "compliance_peer.jsonl")
        finally:
            peer.stop()
    for s, r in zip(chosen, mine):  # troupe's must all validate: keep what shows one that does not
        if r.get("error") or (r["finish"] == "stop" and r["valid"] is not True):
            d = os.path.join(OUT_DIR, "troupe_failures")
            os.makedirs(d, exist_ok=True)
            base = os.path.join(d, s["file"].replace("/", "__"))
            shutil.copy(s["path"], base)
            with open(base + ".output.json", "w") as f:
                json.dump(r, f)
            emit({"part": "compliance", "troupe_failure": s["file"], "error": r.get("error"), "why": r.get("why"),
                  "schema": base, "output": base + ".output.json",
                  "check": f"troupe grammar --json-schema {base} --model {gguf} < tokens (one {{\"tokens\": [...]}} "
                           "line from the output file)"})
    tm = compliance_table(chosen, mine)
    tp = compliance_table(chosen, theirs) if theirs else {}
    for sub in tm:
        emit({"part": "compliance", "model": model, "subset": sub, "troupe": tm[sub], "llama_server": tp.get(sub)})
    return mine, tm, tp


def _formats(node):
    if isinstance(node, dict):
        if isinstance(node.get("format"), str):
            yield node["format"]
        for v in node.values():
            yield from _formats(v)
    elif isinstance(node, list):
        for v in node:
            yield from _formats(v)


def part_timing(args, chosen, outputs, gguf, model):
    walls = [s["compile_wall_s"] * 1000 for s in chosen]
    empty = os.path.join(os.path.dirname(chosen[0]["path"]), "empty.json")
    with open(empty, "w") as f:
        f.write("{}")
    process = med([troupe_compile(args, empty)[1] * 1000 for _ in range(5)])  # the process alone, near enough
    first_us, cold, warm, failures = [], [], [], []
    for s, r in zip(chosen, outputs or [None] * len(chosen)):
        toks = (r or {}).get("tokens") if r and r.get("valid") else None
        prefixes = [[]] if not toks else [toks[:i] for i in range(len(toks) + 1)]
        try:
            got = troupe_masks(args, s["path"], gguf, prefixes + (prefixes if toks else []))
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            failures.append(f"{s['file']}: {e}")
            continue
        first_us.append(got[0]["us"])
        if toks:
            half = len(prefixes)
            if any(g["taken"] != len(p) for g, p in zip(got, prefixes)):
                failures.append(f"{s['file']}: troupe grammar refused a token of troupe's own output")
            cold += [g["us"] for g in got[1:half]]
            warm += [g["us"] for g in got[half + 1:]]
    rec = {"part": "timing", "model": model, "schemas": len(chosen),
           "compile_wall_ms": {"median": med(walls), "p99": pct(walls, 99), "max": max(walls, default=None)},
           "process_wall_ms_schema_empty": process,
           "first_mask_us": {"median": med(first_us), "p99": pct(first_us, 99)},
           "mask_us_first_time": {"median": med(cold), "p99": pct(cold, 99), "tokens": len(cold)},
           "mask_us_cached": {"median": med(warm), "p99": pct(warm, 99), "tokens": len(warm)},
           "failures": failures[:10]}
    emit(rec)
    return rec


# ---------------------------------------------------------------------------------------- decode workloads

RECORDS_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["records"],
    "properties": {"records": {"type": "array", "minItems": 8, "maxItems": 12, "items": {
        "type": "object", "additionalProperties": False, "required": ["id", "name", "city", "age", "tags"],
        "properties": {"id": {"type": "integer"}, "name": {"type": "string"}, "city": {"type": "string"},
                       "age": {"type": "integer"},
                       "tags": {"type": "array", "maxItems": 4, "items": {"type": "string"}}}}}}}

TOPICS = ["customers of a bakery", "members of a chess club", "employees of a bike shop", "students of a music school",
          "patients of a dentist", "players of a football team", "guests of a hotel", "authors at a book fair",
          "volunteers at a food bank", "pilots of an airline", "chefs of a restaurant chain", "tenants of a building",
          "researchers in a lab", "drivers of a taxi company", "runners in a marathon", "artists in a gallery"]


def chatml(system, user):
    return (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            "<|im_start|>assistant\n")


def records_messages(i, salt=0):
    topic = TOPICS[(i + salt) % len(TOPICS)]
    return [{"role": "system", "content": "You are a helpful assistant. You answer with JSON only."},
            {"role": "user", "content": f"Invent 10 {topic} (number {i + salt}) as a JSON object "
                                        '{"records": [...]}, each record with id (integer), name, city, age (integer) '
                                        "and up to 4 short tags."}]


def messages_prompt(msgs):
    return chatml(msgs[0]["content"], msgs[1]["content"])


def part_decode(args, work, model):
    srv = Troupe(args, model, work, tag=model)
    schema_text = json.dumps(RECORDS_SCHEMA)
    recs = []
    try:
        for b in args.batches:
            prompts = [messages_prompt(records_messages(i)) for i in range(b)]
            # Warm-up: the prompts' prefixes cached for both kinds alike, the grammar's masks built.
            parallel(zmq_generate, [(srv.endpoint, p, 8, {"json_schema": schema_text}) for p in prompts])
            rounds, valid, stopped, total = [], 0, 0, 0
            for _ in range(args.rounds):
                con, t0 = parallel(zmq_generate, [(srv.endpoint, p, args.decode_max_tokens,
                                                   {"json_schema": schema_text}) for p in prompts])
                errs = [r["error"] for r in con if r.get("error")]
                if errs:
                    raise SystemExit(f"constrained decode failed: {errs[0]}")
                for r in con:
                    total += 1
                    stopped += r["finish"] == "stop"
                    valid += r["finish"] == "stop" and validate(schema_text, r["text"])[0] is True
                free, f0 = parallel(zmq_generate, [(srv.endpoint, p, max(r["n"], 1), None, True)
                                                   for p, r in zip(prompts, con)])
                for i, (a, z) in enumerate(zip(con, free)):
                    save("decode_outputs.jsonl", {"model": model, "batch": b, "stream": i, "n": a["n"],
                                                  "finish": a["finish"], "constrained": a["text"],
                                                  "unconstrained": z.get("text"), "unconstrained_n": z.get("n")})
                cd, ce = rates(con, t0)
                fd, fe = rates(free, f0)
                rounds.append({"constrained": cd, "free": fd, "constrained_e2e": ce, "free_e2e": fe,
                               "tokens": sum(r["n"] for r in con)})
            c, f = med(r["constrained"] for r in rounds), med(r["free"] for r in rounds)
            rec = {"part": "decode", "model": model, "batch": b, "constrained_tok_s": c, "unconstrained_tok_s": f,
                   "ratio": c / f if c and f else None,
                   "constrained_e2e_tok_s": med(r["constrained_e2e"] for r in rounds),
                   "unconstrained_e2e_tok_s": med(r["free_e2e"] for r in rounds),
                   "mean_tokens": statistics.mean(r["tokens"] for r in rounds) / b,
                   "finished": f"{stopped}/{total}", "valid": f"{valid}/{stopped}",
                   "rounds": [{k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()} for r in rounds]}
            emit(rec)
            recs.append(rec)
    finally:
        srv.stop()
    return recs


LONG_KEYS = ["customer_account_identifier", "primary_shipping_address_line", "preferred_contact_phone_number",
             "loyalty_program_membership_tier", "total_lifetime_purchase_count", "most_recent_order_reference"]

LONG_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["customers"],
    "properties": {"customers": {"type": "array", "minItems": 4, "maxItems": 6, "items": {
        "type": "object", "additionalProperties": False, "required": LONG_KEYS,
        "properties": {k: ({"type": "integer"} if k == "total_lifetime_purchase_count" else {"type": "string"})
                       for k in LONG_KEYS}}}}}


def long_gbnf():
    """The LONG_SCHEMA shape as GBNF with literal keys and fixed separators: long forced runs."""
    fields = []
    for k in LONG_KEYS:
        fields.append(f'"\\"{k}\\": " ' + ("int" if k == "total_lifetime_purchase_count" else "str"))
    rec = ' ", " '.join(fields)
    return "\n".join([
        'root ::= "{\\"customers\\": [" rec (", " rec){3,5} "]}"',
        f'rec ::= "{{" {rec} "}}"',
        'str ::= "\\"" [a-zA-Z0-9 .,@#-]{1,40} "\\""',
        'int ::= "0" | [1-9] [0-9]{0,6}',
    ]) + "\n"


def jump_messages(i):
    keys = ", ".join(LONG_KEYS)
    return [{"role": "system", "content": "You are a helpful assistant. You answer with JSON only."},
            {"role": "user", "content": f"Invent 5 customers of shop number {i + 1} as a JSON object "
                                        f'{{"customers": [...]}}, each with the fields {keys}.'}]


def part_jump(args, work, model):
    kinds = {"schema": {"json_schema": json.dumps(LONG_SCHEMA)}, "gbnf": {"grammar": long_gbnf()}}
    on = Troupe(args, model, work, tag=f"{model} (jump-forward)")
    off = Troupe(args, model, work, extra=["--no-jump-forward"], tag=f"{model} --no-jump-forward")
    recs = []
    try:
        for kind in args.jump_kinds:
            con = kinds[kind]
            prompts = [messages_prompt(jump_messages(i)) for i in range(args.jump_prompts)]
            for srv in (on, off):  # warm-up
                zmq_generate(srv.endpoint, prompts[0], 8, con)
            res = {"on": [], "off": []}
            outputs = {"on": {}, "off": {}}
            for _ in range(args.rounds):
                for name, srv in (("on", on), ("off", off)):
                    stats = zmq_client(srv.endpoint)
                    try:
                        for i, p in enumerate(prompts):
                            s0 = stats.stats()
                            r = zmq_generate(srv.endpoint, p, args.jump_max_tokens, con)
                            s1 = stats.stats()
                            if r.get("error"):
                                raise SystemExit(f"jump ({kind}, {name}): {r['error']}")
                            steps = s1["steps"] - s0["steps"]
                            span = r["t_last"] - r["t_first"]
                            res[name].append({"tokens": r["n"], "steps": steps, "finish": r["finish"],
                                              "tok_s": (r["n"] - 1) / span if span > 0 else None,
                                              "valid": validate(con["json_schema"], r["text"])[0]
                                              if kind == "schema" and r["finish"] == "stop" else None})
                            if i not in outputs[name]:
                                save("jump_outputs.jsonl", {"model": model, "constraint": kind, "server": name,
                                                            "prompt": i, "n": r["n"], "steps": steps,
                                                            "finish": r["finish"], "text": r["text"]})
                            outputs[name].setdefault(i, r["tokens"])
                            if outputs[name][i] != r["tokens"]:
                                outputs[name][i] = "differs between rounds"
                    finally:
                        stats.close()
            identical = sum(outputs["on"][i] == outputs["off"][i] for i in outputs["on"])
            on_tok, off_tok = med(x["tok_s"] for x in res["on"]), med(x["tok_s"] for x in res["off"])
            on_steps = sum(x["steps"] for x in res["on"])
            off_steps = sum(x["steps"] for x in res["off"])
            toks = sum(x["tokens"] for x in res["on"])
            rec = {"part": "jump", "model": model, "constraint": kind, "prompts": len(prompts),
                   "tok_s_jump": on_tok, "tok_s_no_jump": off_tok,
                   "speedup": on_tok / off_tok if on_tok and off_tok else None,
                   "tokens": toks, "steps_jump": on_steps, "steps_no_jump": off_steps,
                   "tokens_per_step_jump": toks / on_steps if on_steps else None,
                   "identical": f"{identical}/{len(prompts)}",
                   "finished": f"{sum(x['finish'] == 'stop' for x in res['on'])}/{len(res['on'])}",
                   "valid": (f"{sum(x['valid'] is True for x in res['on'])}/"
                             f"{sum(x['finish'] == 'stop' for x in res['on'])}") if kind == "schema" else None}
            if identical < len(prompts):
                with open(os.path.join(OUT_DIR, f"jump_{kind}_mismatch.json"), "w") as f:
                    json.dump(outputs, f)
            emit(rec)
            recs.append(rec)
    finally:
        on.stop()
        off.stop()
    return recs


def part_peer(args, work, model, gguf):
    schema = RECORDS_SCHEMA
    schema_text = json.dumps(schema)
    srv = Troupe(args, model, work, tag=model)
    top = max(args.batches)
    peer = Peer(args, gguf, work, top, top * max(2048, args.decode_max_tokens + 1024))
    recs = []
    try:
        for b in args.batches:
            bodies = [{"messages": records_messages(i), "max_tokens": args.decode_max_tokens, "temperature": 0,
                       "response_format": {"type": "json_schema", "json_schema": {"name": "records", "schema": schema}}}
                      for i in range(b)]
            for hp in (srv.hostport, peer.hostport):  # warm-up: prompts cached, grammar built
                parallel(http_chat, [(hp, dict(x, max_tokens=8), True) for x in bodies])
            res = {"troupe": [], "llama": []}
            checks = {"troupe": [0, 0, 0], "llama": [0, 0, 0]}  # streams, finished, valid
            for _ in range(args.rounds):
                for name, hp in (("troupe", srv.hostport), ("llama", peer.hostport)):
                    out, t0 = parallel(http_chat, [(hp, x, True) for x in bodies])
                    errs = [r["error"] for r in out if r.get("error")]
                    if errs:
                        emit({"part": "peer", "model": model, "batch": b, "engine": name, "error": errs[0]})
                    for i, r in enumerate(out):
                        save("peer_outputs.jsonl", {"model": model, "batch": b, "engine": name, "stream": i,
                                                    **{k: r.get(k) for k in ("n", "finish", "text", "error")}})
                        if r.get("error"):
                            continue
                        checks[name][0] += 1
                        if r["finish"] == "stop":
                            checks[name][1] += 1
                            checks[name][2] += validate(schema_text, r["text"])[0] is True
                    d, e = rates(out, t0)
                    res[name].append((d, e, sum(r.get("n") or 0 for r in out) / b))
            t, p = med(x[0] for x in res["troupe"]), med(x[0] for x in res["llama"])
            rec = {"part": "peer", "model": model, "batch": b, "troupe_tok_s": t, "llama_server_tok_s": p,
                   "ratio": t / p if t and p else None,
                   "troupe_e2e_tok_s": med(x[1] for x in res["troupe"]),
                   "llama_server_e2e_tok_s": med(x[1] for x in res["llama"]),
                   "troupe_mean_tokens": med(x[2] for x in res["troupe"]),
                   "llama_server_mean_tokens": med(x[2] for x in res["llama"]),
                   "troupe_finished_valid": f"{checks['troupe'][1]}/{checks['troupe'][0]} finished, "
                                            f"{checks['troupe'][2]} valid",
                   "llama_server_finished_valid": f"{checks['llama'][1]}/{checks['llama'][0]} finished, "
                                                  f"{checks['llama'][2]} valid"}
            emit(rec)
            recs.append(rec)
    finally:
        srv.stop()
        peer.stop()
    return recs


# ---------------------------------------------------------------------------------------- summary

def f1(x, nd=1):
    return "–" if x is None else f"{x:.{nd}f}"


def summary(args, comp, timing, decode, jump, peer, coverage_note):
    L = ["", "## Structured output (ops/bench/structured.sh)", ""]
    L.append(f"{args.cpu}; {args.threads} threads each; greedy. Peer: "
             f"{'llama-server ' + args.llama_version if args.llama_server else 'none (PEER=0 or not built)'}.")
    if coverage_note:
        L.append(coverage_note)
    for model, (tm, tp) in comp.items():
        L += ["", f"**JSONSchemaBench compliance**, {model}, N={args.n} per subset (seed {args.seed}, chosen among "
                  "schemas troupe compiles), chat, max_tokens "
                  f"{args.max_tokens}; compliance = valid / finished:", "",
              "| subset | troupe compiled | finished | valid | compliance | llama-server compiled | finished | valid "
              "| compliance |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        tot = {"t": [0, 0, 0, 0], "p": [0, 0, 0, 0]}
        for sub in sorted(tm):
            a, b = tm[sub], tp.get(sub)
            cell = lambda r: "–" if r is None or r["compliance"] is None else f"{100 * r['compliance']:.0f} %"
            pb = (f"{b['compiled']}/{b['schemas']} | {b['finished']} | {b['valid']} | {cell(b)}" if b
                  else "– | – | – | –")
            L.append(f"| {sub} | {a['compiled']}/{a['schemas']} | {a['finished']} | {a['valid']} | {cell(a)} | {pb} |")
            for k, r in (("t", a), ("p", b)):
                if r:
                    for j, key in enumerate(("schemas", "compiled", "finished", "valid")):
                        tot[k][j] += r[key]
        ct = f"{100 * tot['t'][3] / tot['t'][2]:.1f} %" if tot["t"][2] else "–"
        cp = f"{100 * tot['p'][3] / tot['p'][2]:.1f} %" if tot["p"][2] else "–"
        L.append(f"| **all** | {tot['t'][1]}/{tot['t'][0]} | {tot['t'][2]} | {tot['t'][3]} | {ct} | "
                 + (f"{tot['p'][1]}/{tot['p'][0]} | {tot['p'][2]} | {tot['p'][3]} | {cp} |" if tp
                    else "– | – | – | – |"))
    if timing:
        t = timing
        L += ["", f"**Compile and mask time**, {t['model']}'s vocabulary, {t['schemas']} schemas:", "",
              "| measure | median | p99 |", "| --- | --- | --- |",
              f"| `troupe grammar --json-schema F` wall, ms (conversion + compile + process start) | "
              f"{f1(t['compile_wall_ms']['median'])} | {f1(t['compile_wall_ms']['p99'])} |",
              f"| the same for the schema `{{}}` (the process alone, near enough), ms | "
              f"{f1(t['process_wall_ms_schema_empty'])} | |",
              f"| first mask (empty prefix), µs | {f1(t['first_mask_us']['median'])} | "
              f"{f1(t['first_mask_us']['p99'])} |",
              f"| mask per token, first time, µs ({t['mask_us_first_time']['tokens']} tokens) | "
              f"{f1(t['mask_us_first_time']['median'], 2)} | {f1(t['mask_us_first_time']['p99'], 2)} |",
              f"| mask per token, cached, µs | {f1(t['mask_us_cached']['median'], 2)} | "
              f"{f1(t['mask_us_cached']['p99'], 2)} |"]
    if decode:
        L += ["", "**Decode with a schema against without** (ZeroMQ, 8-12 records; the unconstrained twin as long "
                  "as the constrained answer), decode tok/s:", "",
              "| model | streams | constrained | unconstrained | ratio | target | finished | valid |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in decode:
            L.append(f"| {r['model']} | {r['batch']} | {f1(r['constrained_tok_s'])} | {f1(r['unconstrained_tok_s'])} | "
                     f"{f1(r['ratio'], 3)} | ≥ {0.95 if r['batch'] == 1 else 0.9} | {r['finished']} | {r['valid']} |")
    if jump:
        L += ["", "**Jump-forward** (six required keys of 27-31 characters), one stream:", "",
              "| model | constraint | tok/s jump | tok/s --no-jump-forward | speedup | tokens/step | identical |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in jump:
            L.append(f"| {r['model']} | {r['constraint']} | {f1(r['tok_s_jump'])} | {f1(r['tok_s_no_jump'])} | "
                     f"{f1(r['speedup'], 2)} | {f1(r['tokens_per_step_jump'], 2)} ({r['steps_jump']} against "
                     f"{r['steps_no_jump']} steps) | {r['identical']} |")
    if peer:
        L += ["", "**Constrained decode against llama-server** (HTTP/SSE chat, response_format json_schema, the "
                  "records schema), decode tok/s:", "",
              "| model | streams | troupe | llama-server | troupe/llama-server | target | troupe | llama-server |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in peer:
            L.append(f"| {r['model']} | {r['batch']} | {f1(r['troupe_tok_s'])} | {f1(r['llama_server_tok_s'])} | "
                     f"{f1(r['ratio'], 2)}× | ≥ 2× | {r['troupe_finished_valid']} | "
                     f"{r['llama_server_finished_valid']} |")
    print("\n".join(L), flush=True)


# ---------------------------------------------------------------------------------------- main

def main():
    E = os.environ.get
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--troupe", required=True)
    ap.add_argument("--llama-server", default="", help="llama-server binary ('' leaves the peer out)")
    ap.add_argument("--llama-version", default="")
    ap.add_argument("--models", default=E("MODELS", "qwen2.5-coder-0.5b,qwen2.5-coder-1.5b"))
    ap.add_argument("--ggufs", required=True, help="the models' GGUF paths, comma-separated, in --models order")
    ap.add_argument("--compliance-model", default=E("COMPLIANCE_MODEL", ""), help="default: the first of --models")
    ap.add_argument("--parts", default=E("PARTS", "compliance,timing,decode,jump,peer"))
    ap.add_argument("--bench", default=E("JSONSCHEMABENCH", ""))
    ap.add_argument("--n", type=int, default=int(E("N", "8")))
    ap.add_argument("--subsets", default=E("SUBSETS", "all"))
    ap.add_argument("--seed", type=int, default=int(E("SEED", "0")))
    ap.add_argument("--max-tokens", type=int, default=int(E("MAX_TOKENS", "512")))
    ap.add_argument("--prompt-chars", type=int, default=int(E("PROMPT_CHARS", "6000")),
                    help="the schema in the prompt is cut after this many characters (the constraint is whole)")
    ap.add_argument("--compliance-streams", type=int, default=int(E("COMPLIANCE_STREAMS", "4")))
    ap.add_argument("--compile-timeout", type=float, default=float(E("COMPILE_TIMEOUT", "60")))
    ap.add_argument("--request-timeout", type=float, default=float(E("REQUEST_TIMEOUT", "900")))
    ap.add_argument("--batches", default=E("BATCHES", "1,16"))
    ap.add_argument("--rounds", type=int, default=int(E("ROUNDS", "3")))
    ap.add_argument("--decode-max-tokens", type=int, default=int(E("DECODE_MAX_TOKENS", "512")))
    ap.add_argument("--jump-kinds", default=E("JUMP_KINDS", "schema,gbnf"))
    ap.add_argument("--jump-prompts", type=int, default=int(E("JUMP_PROMPTS", "3")))
    ap.add_argument("--jump-max-tokens", type=int, default=int(E("JUMP_MAX_TOKENS", "600")))
    ap.add_argument("--threads", type=int, default=int(E("THREADS", "2")))
    ap.add_argument("--kv-tokens", type=int, default=int(E("KV_TOKENS", "32768")))
    ap.add_argument("--peer-ctx-per-slot", type=int, default=int(E("PEER_CTX_PER_SLOT", "8192")))
    ap.add_argument("--troupe-flags", default=E("TROUPE_FLAGS", ""),
                    help="more `troupe serve` flags for every troupe server (e.g. --speculation ngram)")
    ap.add_argument("--cpu", default="")
    ap.add_argument("--coverage", default="", help="a file with schema_coverage.py's output, for the summary")
    ap.add_argument("--out", default=E("OUT", ""))
    args = ap.parse_args()
    args.batches = [int(x) for x in args.batches.split(",") if x]
    args.jump_kinds = [k for k in args.jump_kinds.split(",") if k]
    parts = [p for p in args.parts.split(",") if p]
    bad = set(parts) - {"compliance", "timing", "decode", "jump", "peer", "coverage"}
    if bad:
        raise SystemExit(f"unknown parts: {', '.join(sorted(bad))}")
    models = [m for m in args.models.split(",") if m]
    ggufs = dict(zip(models, args.ggufs.split(",")))
    cmodel = args.compliance_model or models[0]
    if cmodel not in ggufs:
        raise SystemExit(f"COMPLIANCE_MODEL {cmodel} is not among MODELS")

    global OUT_DIR
    OUT_DIR = args.out or tempfile.mkdtemp(prefix="troupe-structured-")
    os.makedirs(OUT_DIR, exist_ok=True)
    work = tempfile.mkdtemp(prefix="troupe-structured-work-")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    log(f"outputs in {OUT_DIR}")
    comp, timing, decode, jump, peer = {}, None, [], [], []
    try:
        chosen, outputs = [], None
        if "compliance" in parts or "timing" in parts:
            if not args.bench:
                raise SystemExit("compliance/timing need JSONSchemaBench (JSONSCHEMABENCH=DIR)")
            chosen = select_schemas(args, Bench(args.bench), work)
        if "compliance" in parts and chosen:
            outputs, tm, tp = part_compliance(args, work, chosen, ggufs[cmodel], cmodel)
            comp[cmodel] = (tm, tp)
        if "timing" in parts and chosen:
            if outputs is None:  # troupe's outputs, for the per-token masks
                srv = Troupe(args, cmodel, work, tag=cmodel)
                try:
                    outputs = generate_instances(args, "troupe", srv.endpoint, chosen, "timing_troupe.jsonl")
                finally:
                    srv.stop()
            timing = part_timing(args, chosen, outputs, ggufs[cmodel], cmodel)
        for m in models:
            if "decode" in parts:
                decode += part_decode(args, work, m)
            if "jump" in parts:
                jump += part_jump(args, work, m)
            if "peer" in parts and args.llama_server:
                peer += part_peer(args, work, m, ggufs[m])
        cov = ""
        if args.coverage and os.path.exists(args.coverage):
            cov = f"Coverage of JSONSchemaBench (schema_coverage.py): see {args.coverage}."
        summary(args, comp, timing, decode, jump, peer, cov)
    finally:
        Server.stop_all()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
