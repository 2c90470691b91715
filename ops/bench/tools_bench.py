#!/usr/bin/env python3
"""Tool-calling accuracy on BFCL (the Berkeley Function Calling Leaderboard's
`simple_python` and `multiple` categories), troupe against llama-server
--jinja on the same GGUF, same threads, same run (ops/bench/tools.sh).

Each item is one chat request with its functions as OpenAI tools (BFCL's
own conversion: names with '.' written with '_', `dict` -> object, `float`
-> number, `tuple` -> array, `any` -> no type), greedy, to both servers,
with tool_choice `auto` and `required`. Per engine and choice:
  - answered with a call: the answer has at least one tool call;
  - parse and validate: every call's arguments are JSON and validate
    (jsonschema) against its tool's parameters, of the answers with calls
    that ended by themselves (an answer cut at max_tokens, counted apart,
    may end in a call cut short);
  - right call: BFCL's AST check, simplified: the first call names the
    expected function, has every required argument with an accepted value,
    no argument the function does not take, and optional ones absent or
    accepted (strings compared as BFCL does: case, spaces and
    punctuation ,./-_*^ ignored; numbers by value).

    tools_bench.py --troupe BIN --llama-server BIN --gguf FILE --bfcl DIR [--n 50] [--out DIR]
DIR: a checkout (or bare git repository) of github.com/ShishirPatil/gorilla.
"""
import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile

import jsonschema
import openai

from benchlib import Server, free_port, http_ready

DATA = "berkeley-function-call-leaderboard/bfcl_eval/data"
CATEGORIES = ("simple_python", "multiple")


def read_lines(bfcl, rel):
    """JSON lines of a file in a checkout or a bare repository."""
    path = os.path.join(bfcl, rel)
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    else:
        text = subprocess.run(["git", "-C", bfcl, "show", f"HEAD:{rel}"], capture_output=True, text=True,
                              check=True).stdout
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load(bfcl, category):
    """BFCL v4's files (v3's names as a fallback)."""
    for v in ("v4", "v3"):
        try:
            q = read_lines(bfcl, f"{DATA}/BFCL_{v}_{category}.json")
            a = read_lines(bfcl, f"{DATA}/possible_answer/BFCL_{v}_{category}.json")
            answers = {x["id"]: x["ground_truth"] for x in a}
            return [dict(x, ground_truth=answers[x["id"]]) for x in q if x["id"] in answers]
        except (subprocess.CalledProcessError, FileNotFoundError):
            continue
    raise SystemExit(f"BFCL category {category} not found under {bfcl}")


def to_schema(p):
    """BFCL's parameter types in JSON Schema."""
    if isinstance(p, dict):
        out = {}
        for k, v in p.items():
            if k == "type":
                t = {"dict": "object", "float": "number", "tuple": "array", "any": None}.get(v, v)
                if t is not None:
                    out["type"] = t
            elif k in ("properties",):
                out[k] = {name: to_schema(s) for name, s in v.items()}
            elif k in ("items", "additionalProperties"):
                out[k] = to_schema(v)
            elif k in ("optional",):
                continue
            else:
                out[k] = v
        return out
    return p


def openai_name(name):
    return re.sub(r"[^a-zA-Z0-9_-]", "_", name)


def tools_of(item):
    return [{"type": "function", "function": {"name": openai_name(f["name"]), "description": f.get("description", ""),
                                              "parameters": to_schema(f["parameters"])}} for f in item["function"]]


def norm(v):
    if isinstance(v, str):
        return re.sub(r"[ ,./\-_*^]", "", v).lower()
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, list):
        return [norm(x) for x in v]
    if isinstance(v, dict):
        return {k: norm(x) for k, x in v.items()}
    return v


def right_call(item, calls):
    """BFCL's AST check on the first call (simple and multiple expect one)."""
    if not calls:
        return False
    (want_name, params), = item["ground_truth"][0].items()
    name, raw = calls[0]
    if name != openai_name(want_name):
        return False
    try:
        args = json.loads(raw)
    except ValueError:
        return False
    fn = next(f for f in item["function"] if f["name"] == want_name)
    declared = fn["parameters"].get("properties", {})
    if any(k not in declared for k in args):
        return False
    for k, accepted in params.items():
        if k not in args:
            if "" not in accepted:
                return False
            continue
        if norm(args[k]) not in [norm(x) for x in accepted if x != ""]:
            return False
    return True


def valid_calls(item, calls):
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools_of(item)}
    for name, raw in calls:
        try:
            jsonschema.validate(json.loads(raw), schemas[name])
        except (KeyError, ValueError, jsonschema.ValidationError, jsonschema.SchemaError):
            return False
    return True


def ask(client, model, item, choice, max_tokens):
    try:
        r = client.chat.completions.create(model=model, messages=item["question"][0], tools=tools_of(item),
                                           tool_choice=choice, temperature=0, max_tokens=max_tokens)
    except openai.APIError as e:
        return {"error": str(e)[:200]}
    m = r.choices[0].message
    return {"calls": [(c.function.name, c.function.arguments) for c in m.tool_calls or []], "content": m.content,
            "finish": r.choices[0].finish_reason}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--troupe", required=True)
    ap.add_argument("--llama-server", default="")
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--bfcl", required=True)
    ap.add_argument("--n", type=int, default=50, help="items per category (the first N)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--out", default="")
    ap.add_argument("--cpu", default="")
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="troupe-tools-")
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="troupe-tools-work-")
    items = {c: load(a.bfcl, c)[:a.n] for c in CATEGORIES}
    model = os.path.splitext(os.path.basename(a.gguf))[0]  # the name `troupe serve -m FILE` answers to
    servers = []
    tp = free_port()
    servers.append(Server("troupe", [a.troupe, "serve", "-m", a.gguf, "--listen", f"ipc://{work}/s.sock", "--http",
                                     f"127.0.0.1:{tp}", "--threads", str(a.threads), "--data-dir", f"{work}/data",
                                     "--drain-timeout", "0"], f"{out}/troupe.log",
                          http_ready(f"127.0.0.1:{tp}", "/readyz")))
    engines = {"troupe": tp}
    if a.llama_server:
        lp = free_port()
        servers.append(Server("llama-server", [a.llama_server, "-m", a.gguf, "--jinja", "-t", str(a.threads), "-np",
                                               str(a.streams), "-c", str(4096 * a.streams), "--host", "127.0.0.1",
                                               "--port", str(lp)], f"{out}/llama-server.log",
                              http_ready(f"127.0.0.1:{lp}", "/health")))
        engines["llama-server"] = lp
    rows = []
    try:
        with open(os.path.join(out, "answers.jsonl"), "w") as log:
            for engine, port in engines.items():
                client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0,
                                       timeout=900)
                for choice in ("auto", "required"):
                    for cat, its in items.items():
                        with concurrent.futures.ThreadPoolExecutor(a.streams) as pool:
                            answers = list(pool.map(lambda it: ask(client, model, it, choice, a.max_tokens), its))
                        called = valid = right = errors = calls = cut = 0
                        for it, ans in zip(its, answers):
                            log.write(json.dumps({"engine": engine, "choice": choice, "id": it["id"], **ans}) + "\n")
                            if "error" in ans:
                                errors += 1
                                continue
                            if ans["calls"]:
                                called += 1
                                calls += len(ans["calls"])
                                if ans["finish"] == "length":
                                    cut += 1
                                else:
                                    valid += valid_calls(it, ans["calls"])
                            right += right_call(it, ans["calls"])
                        row = {"engine": engine, "tool_choice": choice, "category": cat, "items": len(its),
                               "errors": errors, "answered_with_call": called, "cut_off": cut, "valid": valid,
                               "right": right}
                        rows.append(row)
                        print(json.dumps(row), flush=True)
    finally:
        for s in servers:
            s.stop()
    print(f"\n{a.cpu}; {os.path.basename(a.gguf)}; greedy; {a.streams} requests at a time; BFCL first {a.n} "
          f"items per category\n")
    print("| engine | tool_choice | category | answered with a call | cut at max_tokens | calls parse and validate "
          "| right call |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    for r in rows:
        pct = lambda x, d: f"{x}/{d} ({100 * x / d:.0f} %)" if d else "–"
        print(f"| {r['engine']} | {r['tool_choice']} | {r['category']} | {pct(r['answered_with_call'], r['items'])} | "
              f"{r['cut_off']} | {pct(r['valid'], r['answered_with_call'] - r['cut_off'])} | "
              f"{pct(r['right'], r['items'])} |")
    print(f"\nanswers: {out}/answers.jsonl")


if __name__ == "__main__":
    sys.exit(main())
