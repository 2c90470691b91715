"""structured_bench.py's markdown summary: one table per part that ran."""


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
