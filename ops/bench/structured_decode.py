"""structured_bench.py's decode-speed parts and their workloads: `decode` (constrained against
unconstrained), `jump` (jump-forward on and off), `peer` (troupe against llama-server)."""
import json
import os
import statistics

import structured_results
from benchlib import med
from structured_engines import Peer, Troupe, http_chat, parallel, rates, zmq_client, zmq_generate
from structured_results import emit, save
from structured_schemas import validate

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


def without_history(args):
    """decode and jump repeat their prompts round after round and measure masks and
    jump-forward: their servers do not speculate (the server's default would draft a round
    from the round before), unless TROUPE_FLAGS names a mode."""
    return [] if "--speculation" in args.troupe_flags else ["--speculation", "off"]


def part_decode(args, work, model):
    srv = Troupe(args, model, work, extra=without_history(args), tag=model)
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
    on = Troupe(args, model, work, extra=without_history(args), tag=f"{model} (jump-forward)")
    off = Troupe(args, model, work, extra=["--no-jump-forward", *without_history(args)], tag=f"{model} --no-jump-forward")
    recs = []
    try:
        for kind in args.jump_kinds:
            rec = jump_kind(args, model, kind, kinds[kind], (("on", on), ("off", off)))
            emit(rec)
            recs.append(rec)
    finally:
        on.stop()
        off.stop()
    return recs


def jump_kind(args, model, kind, con, servers):
    """One constraint on both servers, args.rounds times; its record (and, when the greedy
    outputs differ, both sides in OUT for a look)."""
    prompts = [messages_prompt(jump_messages(i)) for i in range(args.jump_prompts)]
    for _, srv in servers:  # warm-up
        zmq_generate(srv.endpoint, prompts[0], 8, con)
    res = {"on": [], "off": []}
    outputs = {"on": {}, "off": {}}
    for _ in range(args.rounds):
        for name, srv in servers:
            jump_round(args, srv, prompts, con, (model, kind, name), res[name], outputs[name])
    identical = sum(outputs["on"][i] == outputs["off"][i] for i in outputs["on"])
    rec = jump_record(model, kind, len(prompts), res, identical)
    if identical < len(prompts):
        with open(os.path.join(structured_results.OUT_DIR, f"jump_{kind}_mismatch.json"), "w") as f:
            json.dump(outputs, f)
    return rec


def jump_round(args, srv, prompts, con, where, res, outputs):
    """Each prompt once on one server: a result per request into `res`, the first output per
    prompt kept in `outputs` (marked when a later round's differs)."""
    model, kind, name = where
    stats = zmq_client(srv.endpoint)
    try:
        for i, p in enumerate(prompts):
            s0 = stats.stats()
            r = zmq_generate(srv.endpoint, p, args.jump_max_tokens, con)
            s1 = stats.stats()
            if r.get("error"):
                raise SystemExit(f"jump ({kind}, {name}): {r['error']}")
            steps = s1["steps"] - s0["steps"]
            res.append(jump_result(r, steps, kind, con))
            if i not in outputs:
                save("jump_outputs.jsonl", {"model": model, "constraint": kind, "server": name,
                                            "prompt": i, "n": r["n"], "steps": steps,
                                            "finish": r["finish"], "text": r["text"]})
            outputs.setdefault(i, r["tokens"])
            if outputs[i] != r["tokens"]:
                outputs[i] = "differs between rounds"
    finally:
        stats.close()


def jump_result(r, steps, kind, con):
    span = r["t_last"] - r["t_first"]
    return {"tokens": r["n"], "steps": steps, "finish": r["finish"],
            "tok_s": (r["n"] - 1) / span if span > 0 else None,
            "valid": validate(con["json_schema"], r["text"])[0]
            if kind == "schema" and r["finish"] == "stop" else None}


def jump_record(model, kind, prompts, res, identical):
    on_tok, off_tok = med(x["tok_s"] for x in res["on"]), med(x["tok_s"] for x in res["off"])
    on_steps = sum(x["steps"] for x in res["on"])
    off_steps = sum(x["steps"] for x in res["off"])
    toks = sum(x["tokens"] for x in res["on"])
    return {"part": "jump", "model": model, "constraint": kind, "prompts": prompts,
            "tok_s_jump": on_tok, "tok_s_no_jump": off_tok,
            "speedup": on_tok / off_tok if on_tok and off_tok else None,
            "tokens": toks, "steps_jump": on_steps, "steps_no_jump": off_steps,
            "tokens_per_step_jump": toks / on_steps if on_steps else None,
            "identical": f"{identical}/{prompts}",
            "finished": f"{sum(x['finish'] == 'stop' for x in res['on'])}/{len(res['on'])}",
            "valid": (f"{sum(x['valid'] is True for x in res['on'])}/"
                      f"{sum(x['finish'] == 'stop' for x in res['on'])}") if kind == "schema" else None}


def part_peer(args, work, model, gguf):
    schema_text = json.dumps(RECORDS_SCHEMA)
    srv = Troupe(args, model, work, tag=model)
    top = max(args.batches)
    peer = Peer(args, gguf, work, top, top * max(2048, args.decode_max_tokens + 1024))
    recs = []
    try:
        for b in args.batches:
            rec = peer_batch(args, model, b, (("troupe", srv.hostport), ("llama", peer.hostport)), schema_text)
            emit(rec)
            recs.append(rec)
    finally:
        srv.stop()
        peer.stop()
    return recs


def peer_batch(args, model, b, hosts, schema_text):
    """b concurrent streams on each engine, args.rounds times; the batch's record."""
    def bodies(salt):
        return [{"messages": records_messages(i, salt), "max_tokens": args.decode_max_tokens, "temperature": 0,
                 "response_format": {"type": "json_schema",
                                     "json_schema": {"name": "records", "schema": RECORDS_SCHEMA}}}
                for i in range(b)]
    for _, hp in hosts:  # warm-up: the system prompt cached, the grammar built
        parallel(http_chat, [(hp, dict(x, max_tokens=8), True) for x in bodies(7)])
    res = {"troupe": [], "llama": []}
    checks = {"troupe": [0, 0, 0], "llama": [0, 0, 0]}  # streams, finished, valid
    for r in range(args.rounds):
        # each round asks for other records: a server that drafts from earlier outputs
        # (--speculation suffix or auto) never sees the answer it is asked for again
        salt = 100 + r * b
        for name, hp in hosts:
            out, t0 = parallel(http_chat, [(hp, x, True) for x in bodies(salt)])
            peer_outputs(model, b, name, out, checks[name], schema_text)
            d, e = rates(out, t0)
            res[name].append((d, e, sum(r.get("n") or 0 for r in out) / b))
    return peer_record(model, b, res, checks)


def peer_outputs(model, b, name, out, checks, schema_text):
    """Saves one engine's outputs of a round and counts them into `checks`: streams, finished, valid."""
    errs = [r["error"] for r in out if r.get("error")]
    if errs:
        emit({"part": "peer", "model": model, "batch": b, "engine": name, "error": errs[0]})
    for i, r in enumerate(out):
        save("peer_outputs.jsonl", {"model": model, "batch": b, "engine": name, "stream": i,
                                    **{k: r.get(k) for k in ("n", "finish", "text", "error")}})
        if r.get("error"):
            continue
        checks[0] += 1
        if r["finish"] == "stop":
            checks[1] += 1
            checks[2] += validate(schema_text, r["text"])[0] is True


def peer_record(model, b, res, checks):
    t, p = med(x[0] for x in res["troupe"]), med(x[0] for x in res["llama"])
    return {"part": "peer", "model": model, "batch": b, "troupe_tok_s": t, "llama_server_tok_s": p,
            "ratio": t / p if t and p else None,
            "troupe_rounds_tok_s": [x[0] for x in res["troupe"]], "llama_server_rounds_tok_s": [x[0] for x in res["llama"]],
            "troupe_e2e_tok_s": med(x[1] for x in res["troupe"]),
            "llama_server_e2e_tok_s": med(x[1] for x in res["llama"]),
            "troupe_mean_tokens": med(x[2] for x in res["troupe"]),
            "llama_server_mean_tokens": med(x[2] for x in res["llama"]),
            "troupe_finished_valid": f"{checks['troupe'][1]}/{checks['troupe'][0]} finished, "
                                     f"{checks['troupe'][2]} valid",
            "llama_server_finished_valid": f"{checks['llama'][1]}/{checks['llama'][0]} finished, "
                                           f"{checks['llama'][2]} valid"}
