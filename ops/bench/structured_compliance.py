"""structured_bench.py's part `compliance`: "a JSON instance of this schema" from each engine
for every chosen schema, finished and valid per JSONSchemaBench subset."""
import json
import os
import shutil

import structured_results
from structured_engines import Peer, Troupe, http_chat, parallel, zmq_chat
from structured_results import emit, log
from structured_schemas import _formats, checkable_formats, validate


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
    with open(os.path.join(structured_results.OUT_DIR, outname), "a") as f:
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
            d = os.path.join(structured_results.OUT_DIR, "troupe_failures")
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
