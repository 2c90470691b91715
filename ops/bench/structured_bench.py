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
# The servers, the schemas, each part and the summary live beside this file in structured_*.py
# (ops/bench/README.md lists them).
import argparse
import os
import shutil
import signal
import sys
import tempfile

import structured_results
from benchlib import Server
from structured_compliance import generate_instances, part_compliance
from structured_decode import part_decode, part_jump, part_peer
from structured_engines import Troupe
from structured_results import log
from structured_schemas import Bench, select_schemas
from structured_summary import summary
from structured_timing import part_timing


def parse_args():
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
    return args


def main():
    args = parse_args()
    parts = [p for p in args.parts.split(",") if p]
    bad = set(parts) - {"compliance", "timing", "decode", "jump", "peer", "coverage"}
    if bad:
        raise SystemExit(f"unknown parts: {', '.join(sorted(bad))}")
    models = [m for m in args.models.split(",") if m]
    ggufs = dict(zip(models, args.ggufs.split(",")))
    cmodel = args.compliance_model or models[0]
    if cmodel not in ggufs:
        raise SystemExit(f"COMPLIANCE_MODEL {cmodel} is not among MODELS")

    # Where emit and save write, and the parts keep their outputs: read from the module at each use.
    structured_results.OUT_DIR = args.out or tempfile.mkdtemp(prefix="troupe-structured-")
    os.makedirs(structured_results.OUT_DIR, exist_ok=True)
    work = tempfile.mkdtemp(prefix="troupe-structured-work-")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    log(f"outputs in {structured_results.OUT_DIR}")
    try:
        comp, timing = schema_parts(args, parts, work, ggufs[cmodel], cmodel)
        decode, jump, peer = speed_parts(args, parts, work, models, ggufs)
        cov = ""
        if args.coverage and os.path.exists(args.coverage):
            cov = f"Coverage of JSONSchemaBench (schema_coverage.py): see {args.coverage}."
        summary(args, comp, timing, decode, jump, peer, cov)
    finally:
        Server.stop_all()
        shutil.rmtree(work, ignore_errors=True)


def schema_parts(args, parts, work, gguf, cmodel):
    """compliance and timing, on one seeded choice of JSONSchemaBench schemas: (comp, timing)."""
    comp, timing = {}, None
    chosen, outputs = [], None
    if "compliance" in parts or "timing" in parts:
        if not args.bench:
            raise SystemExit("compliance/timing need JSONSchemaBench (JSONSCHEMABENCH=DIR)")
        chosen = select_schemas(args, Bench(args.bench), work)
    if "compliance" in parts and chosen:
        outputs, tm, tp = part_compliance(args, work, chosen, gguf, cmodel)
        comp[cmodel] = (tm, tp)
    if "timing" in parts and chosen:
        if outputs is None:  # troupe's outputs, for the per-token masks
            srv = Troupe(args, cmodel, work, tag=cmodel)
            try:
                outputs = generate_instances(args, "troupe", srv.endpoint, chosen, "timing_troupe.jsonl")
            finally:
                srv.stop()
        timing = part_timing(args, chosen, outputs, gguf, cmodel)
    return comp, timing


def speed_parts(args, parts, work, models, ggufs):
    """decode, jump and peer, model by model: their records, (decode, jump, peer)."""
    decode, jump, peer = [], [], []
    for m in models:
        if "decode" in parts:
            decode += part_decode(args, work, m)
        if "jump" in parts:
            jump += part_jump(args, work, m)
        if "peer" in parts and args.llama_server:
            peer += part_peer(args, work, m, ggufs[m])
    return decode, jump, peer


if __name__ == "__main__":
    main()
