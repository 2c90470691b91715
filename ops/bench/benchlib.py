#!/usr/bin/env python3
"""What the benchmarks in ops/bench/ share on the Python side (the standard library only, so
that any python3 runs it; the drivers' shell side is ops/bench/lib.sh).

Imported by the helpers (`import benchlib`: a helper's own folder is on its path):
  free_port()           a TCP port on the loopback address that nothing listens on now
  http_ok(HOSTPORT, P)  whether GET P on HOSTPORT answers 200
  http_ready(HOSTPORT, P)  the same as a callable, for Server's `ready`
  Server(...)           a child server: started, waited for until ready, stopped (TERM, then KILL)
                        by stop(), kill(), Server.stop_all() or at the interpreter's exit
  ratio(A, B), best(VALUES), pct(XS, P), med(XS)
  each_with_client(ENDPOINT, N, CONCURRENCY, HANDLE)
                        HANDLE(client, i) for i < N, CONCURRENCY threads with a troupe Client each

Run by the shell drivers (lib.sh: `bench_py NAME ARGS...`), one table or figure each:
  port                                 free_port()
  ratio A B                            A/B to two decimals (n/a when B is 0 or missing)
  best V...                            the largest of the values
  engine-rows LABEL OURS THEIRS [IK_PREFILL IK_DECODE]
                                       engine.sh: the engines' rows, then the ratio line
  serve-summary SERVED ALONE PEER      serve.sh: streams through the service against the peer
  sessions-restore WORK GGUF STORE_BYTES TROUPE CODEC
                                       sessions.sh: restore against recompute, store bytes
  sessions-latency WORK                sessions.sh: interactive p99 with a job against alone
  spec-engine-row W MODE ROUND RATE ACCEPTANCE SAME
  spec-service-row W ROUND LINE OFF_LINE
  spec-best RAW RATE_KEY               spec.sh: each mode's best round, its speed-up over off
  step-costs                           spec_bound.sh: `troupe bench --batch` lines (stdin) as
                                       milliseconds a step by tokens in it
  scale-placed ENDPOINT                scale_out.sh: each worker's share (troupe_client)
  scale-ratios ONE TWO                 scale_out.sh: two workers against one
  scale-session RESIDENT RESTORED MOVED COLD
                                       scale_out.sh: a session's next turn, against the local restore
"""
import atexit
import http.client
import json
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time


# ------------------------------------------------------------------------------------- clients

def each_with_client(endpoint, count, concurrency, handle, timeout=3600):
    """handle(client, i) for every i < count, `concurrency` threads at a time, each with its own
    troupe_client.Client (one is not thread-safe). The first exception stops the others (each after
    its current item) and is raised here."""
    from troupe_client import Client
    todo = iter(range(count))
    lock = threading.Lock()
    errors = []

    def worker():
        try:
            with Client(endpoint, timeout=timeout) as c:
                while not errors:
                    with lock:
                        i = next(todo, None)
                    if i is None:
                        return
                    handle(c, i)
        except BaseException as e:  # noqa: BLE001  (raised again in the caller's thread)
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(max(1, min(concurrency, count)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


# ------------------------------------------------------------------------------------- processes

def free_port():
    """A TCP port on the loopback address that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_ok(hostport, path):
    """Whether GET `path` on HOSTPORT ("127.0.0.1:PORT") answers 200 within 2 s."""
    host, port = hostport.rsplit(":", 1)
    try:
        c = http.client.HTTPConnection(host, int(port), timeout=2)
        c.request("GET", path)
        return c.getresponse().status == 200
    except OSError:
        return False


def http_ready(hostport, path):
    return lambda: http_ok(hostport, path)


class Server:
    """A child server process, its output in `log` (truncated, or appended to with append=True:
    a restart on the same files), waited for until ready() (a callable) is true; stopped at exit
    whatever happens. In a session of its own: a Ctrl-C reaches the bench, which stops it."""
    live = []

    def __init__(self, name, argv, log, ready, wait_s=300, append=False):
        self.name, self.argv, self.logpath = name, argv, log
        self.logf = open(log, "a" if append else "w")
        self.proc = subprocess.Popen(argv, stdout=self.logf, stderr=subprocess.STDOUT, start_new_session=True)
        Server.live.append(self)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._forget()
                raise SystemExit(f"{name} exited ({self.proc.returncode}) while starting ({log}):\n{self.tail()}")
            if ready():
                return
            time.sleep(0.1)
        self.stop()
        raise SystemExit(f"{name} not ready after {wait_s} s ({log}):\n{self.tail()}")

    def tail(self, n=30):
        try:
            with open(self.logpath) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def alive(self):
        return self.proc.poll() is None

    def stop(self, timeout=30):
        """SIGTERM (a troupe server drains), SIGKILL after `timeout` seconds."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._forget()

    def kill(self):
        """SIGKILL: what a crash leaves behind stays behind."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self._forget()

    def _forget(self):
        self.logf.close()
        if self in Server.live:
            Server.live.remove(self)

    @classmethod
    def stop_all(cls):
        for s in list(cls.live):
            s.stop()


atexit.register(Server.stop_all)


# --------------------------------------------------------------------------------------- numbers

def ratio(a, b, digits=2):
    """a / b to `digits` decimals, as text; "n/a" when either is missing or b is 0."""
    try:
        return f"{float(a) / float(b):.{digits}f}"
    except (TypeError, ValueError, ZeroDivisionError):
        return "n/a"


def best(values):
    return max(float(v) for v in values)


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


# -------------------------------------------------------------------------- the drivers' tables

def engine_rows(label, ours, theirs, ik_prefill=None, ik_decode=None):
    """IK_PREFILL and IK_DECODE: bench_ik_best's lines ({ts, flags}), where ik_llama.cpp ran too."""
    a, b = json.loads(ours), json.loads(theirs)
    for r in (a, b):
        print(f"{label:<30} {r['engine']:<12} {r['prefill_tok_s']:>12.1f} {r['decode_tok_s']:>12.1f}")
    line = (f"{label}: prefill {a['prefill_tok_s'] / b['prefill_tok_s']:.2f}x "
            f"decode {a['decode_tok_s'] / b['decode_tok_s']:.2f}x")
    if ik_prefill and ik_decode:
        p, d = json.loads(ik_prefill), json.loads(ik_decode)
        print(f"{label:<30} {'ik_llama.cpp':<12} {p['ts']:>12.1f} {d['ts']:>12.1f}"
              f"   (prefill {p['flags']}; decode {d['flags']})")
        line += (f", against ik_llama.cpp prefill {a['prefill_tok_s'] / p['ts']:.2f}x "
                 f"decode {a['decode_tok_s'] / d['ts']:.2f}x")
    print(line)


def serve_summary(served, alone, peer):
    served, alone, peer = json.loads(served), json.loads(alone), json.loads(peer)
    s, a, p = served["aggregate_decode_tok_s"], alone["decode_tok_s"], peer["decode_tok_s"]
    w = served["all_decoding_tok_s"] or 0.0
    print(f"{served['streams']} streams: troupe serve {s:.1f} tok/s aggregate decode ({w:.1f} while all decode), "
          f"troupe engine alone {a:.1f}, llama.cpp batched {p:.1f}: serve/llama.cpp {s / p:.2f}x "
          f"(while all decode {w / p:.2f}x), engine/llama.cpp {a / p:.2f}x; "
          f"service cost {100 * served['service_cost']:.2f} % of busy time")


def sessions_restore(work, path, store_bytes, troupe, codec):
    store_bytes = int(store_bytes)
    first, restored, recomputed = (json.load(open(f"{work}/{p}.json")) for p in ("first", "restored", "recomputed"))
    log = open(f"{work}/serve.log").read()
    rates = {}
    line = r"kv: session '\w+' (wrote|read) (\d+) pages \(([\d.]+) MiB\) in ([\d.]+) ms"
    for verb, pages, mib, ms in re.findall(line, log):
        rates[verb] = (int(pages), float(mib), float(ms))
    info = subprocess.run([troupe, "inspect", path, "--no-tensors"], capture_output=True, text=True).stdout

    def meta(key):
        m = re.search(rf"\.{key}\D*(\d+)", info)
        return int(m.group(1)) if m else 0
    layers, heads = meta("block_count"), meta("attention.head_count")
    kv_heads, embd = meta("attention.head_count_kv"), meta("embedding_length")
    fp16_per_token = layers * 2 * kv_heads * (embd // heads) * 2
    spilled_tokens = first["pages_spilled"] * 16
    codec_per_token = (rates["wrote"][1] * (1 << 20) / (rates["wrote"][0] * 16)) if "wrote" in rates else float("nan")
    out = {
        "codec": codec,
        "session_prompt_tokens": restored["prompt_tokens"],
        "ttft_ms_restored": restored["ttft_ms"], "ttft_ms_recomputed": recomputed["ttft_ms"],
        "restore_speedup": round(recomputed["ttft_ms"] / restored["ttft_ms"], 2),
        "restored_prompt_tokens": restored["cached_prompt_tokens"], "same_greedy_tokens": recomputed["same_tokens"],
        "spill_mib_s": round(rates["wrote"][1] / rates["wrote"][2] * 1000, 1) if "wrote" in rates else None,
        "restore_read_mib_s": round(rates["read"][1] / rates["read"][2] * 1000, 1) if "read" in rates else None,
        "fp16_kv_bytes_per_token": fp16_per_token,
        "spilled_bytes_per_token": round(codec_per_token, 1),
        "store_bytes_per_token": round(store_bytes / spilled_tokens, 1) if spilled_tokens else None,
        "stored_vs_fp16": round(store_bytes / spilled_tokens / fp16_per_token, 3) if spilled_tokens else None,
    }
    print(json.dumps(out))


def sessions_latency(work):
    a, j = (json.load(open(f"{work}/{p}.json")) for p in ("alone", "job"))
    print(json.dumps({"interactive_ttft_p99_ratio_with_job": round(j["ttft_ms_p99"] / a["ttft_ms_p99"], 2),
                      "interactive_per_token_p99_ratio_with_job": round(j["per_token_ms_p99"] / a["per_token_ms_p99"],
                                                                        2),
                      "job_items_done_meanwhile": j["job_items_done_meanwhile"]}))


def spec_engine_row(workload, mode, round_, rate, acceptance, same):
    """One `troupe generate --speculation MODE` run: its decode tok/s and acceptance (from its
    stderr: "PCT WINDOW_MEAN", or nothing), and whether its tokens are off's (1 or 0)."""
    a = acceptance.split()
    print(json.dumps({"workload": workload, "mode": mode, "round": int(round_), "decode_tok_s": float(rate),
                      "acceptance_pct": int(a[0]) if a else None,
                      "mean_accepted_per_window": float(a[1]) if a else None, "same_tokens_as_off": same == "1"}))


def spec_service_row(workload, round_, line, off):
    a, o = json.loads(line), json.loads(off)
    a["workload"] = workload
    a["round"] = int(round_)
    a["same_tokens_as_off"] = a.pop("tokens") == o["tokens"]
    print(json.dumps(a))


def spec_best(raw, rate):
    """Best of the rounds per mode (the machine is shared: runs of the same mode vary by 10-20 %),
    the speed-up against the best `off`; the tokens must be off's in every round."""
    rows = [json.loads(line) for line in open(raw)]
    key = ("workload", "mode", "streams")
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k) for k in key), []).append(r)
    for g, runs in groups.items():
        top = max(runs, key=lambda r: r[rate])
        off = max(groups[(g[0], "off", g[2])], key=lambda r: r[rate])
        out = {k: v for k, v in top.items() if k not in ("round", "same_tokens_as_off")}
        out["rounds"] = len(runs)
        out["speedup_vs_off"] = round(top[rate] / off[rate], 2)
        out["same_tokens_as_off"] = all(r["same_tokens_as_off"] for r in runs)
        print(json.dumps(out))


def step_costs():
    print(json.dumps({str(r["batch"]): round(1000 * r["batch"] / r["decode_tok_s"], 1)
                      for r in map(json.loads, sys.stdin)}))


def scale_placed(endpoint):
    from troupe_client import Client
    with Client(endpoint) as c:
        print(json.dumps([{"worker": w["endpoint"].rsplit("/", 1)[-1], "requests": w["requests"],
                           "tokens": w["tokens"], "step_ms": round(w["step_ms"], 1)} for w in c.stats()["workers"]]))


def scale_ratios(one, two):
    one, two = json.loads(one), json.loads(two)
    for key in ("aggregate_decode_tok_s", "all_decoding_tok_s", "output_tok_s_wall"):
        a, b = one[key], two[key]
        print(f"{key}: one worker {a}, two workers {b}: {b / a:.2f}x" if a and b else f"{key}: n/a")


def scale_session(*turns):
    names = ("resident in memory", "restored locally", "moved to the other worker", "recomputed")
    rows = [json.loads(a) for a in turns if a != "{}"]
    peer = rows[1]["first_token_ms"]
    for name, r in zip(names, rows):
        print(f"{name}: first token {r['first_token_ms']} ms ({r['first_token_ms'] / peer:.2f}x the local restore), "
              f"{r['cached_prompt_tokens']} of {r['prompt_tokens']} prompt tokens from cache, worker {r['worker']}")


COMMANDS = {
    "port": lambda: print(free_port()),
    "ratio": lambda a, b: print(ratio(a, b)),
    "best": lambda *v: print(best(v)),
    "engine-rows": engine_rows,
    "serve-summary": serve_summary,
    "sessions-restore": sessions_restore,
    "sessions-latency": sessions_latency,
    "spec-engine-row": spec_engine_row,
    "spec-service-row": spec_service_row,
    "spec-best": spec_best,
    "step-costs": step_costs,
    "scale-placed": scale_placed,
    "scale-ratios": scale_ratios,
    "scale-session": scale_session,
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__)
    COMMANDS[sys.argv[1]](*sys.argv[2:])
