"""The two servers structured_bench.py compares and the requests it sends them: `troupe serve`
and llama-server started on the same GGUF file and threads, one greedy request over ZeroMQ or
HTTP, streams side by side and their tok/s."""
import http.client
import json
import os
import shlex
import tempfile
import threading
import time

from benchlib import Server, free_port, http_ok


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
