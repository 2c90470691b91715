#!/usr/bin/env python3
"""Graceful drain: SIGTERM while 8 streams and a session run. New requests
are refused (`shutting_down`; HTTP 503 and /readyz 503), short streams
finish, long ones end with shutting_down at --drain-timeout, the process
exits 0, and the next start resumes the session from its spilled KV pages
(no prefill of its history).

    test_drain.py TROUPE_BINARY WORK_DIR
"""
import http.client
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from serving import check, free_port, start_http_server
from troupe_client import Client, TroupeError


def start(troupe, model, endpoint, port, data, log_path):
    return start_http_server([troupe, "serve", "-m", model, "--listen", endpoint, "--http", f"127.0.0.1:{port}",
                              "--threads", "1", "--kv-tokens", "40000", "--context", "4096", "--drain-timeout", "1",
                              "--data-dir", data], port, log_path)


def main():
    troupe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "drain.gguf")
    subprocess.run([troupe, "make-model", "-o", model, "--embd", "128", "--ff", "256", "--seed", "7"], check=True,
                   capture_output=True)
    endpoint = f"ipc://{work}/drain-{os.getpid()}.sock"
    port = free_port()
    data = tempfile.mkdtemp(prefix="drain-", suffix=".data", dir=work)
    log = os.path.join(work, "drain-serve.log")
    server = start(troupe, model, endpoint, port, data, log)

    c = Client(endpoint)
    for words in ["the first turn of a session", "and its second turn, a little longer than the first"]:
        c.chat([("user", words)], session_id="kept", max_tokens=24, temperature=0).read()
    history = c.stats()

    outcomes = [None] * 8
    started = threading.Barrier(9)

    def stream(i):
        cl = Client(endpoint)
        s = cl.generate(f"stream {i}", max_tokens=8 if i < 2 else 4000, temperature=0.7, seed=i, ignore_eos=True)
        it = iter(s)
        try:
            next(it)
            started.wait(timeout=60)
            for _ in it:
                pass
            outcomes[i] = s.finish_reason
        except TroupeError as e:
            outcomes[i] = e.code if hasattr(e, "code") else str(e)
        except threading.BrokenBarrierError:
            outcomes[i] = "no start"

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    started.wait(timeout=60)
    server.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    refused = None
    try:
        Client(endpoint, timeout=10).generate("too late", max_tokens=4).read()
    except TroupeError as e:
        refused = str(e)
    check(refused is not None and "shutting_down" in refused, f"a new request while draining: {refused}")
    hc = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    hc.request("GET", "/readyz")
    check(hc.getresponse().status == 503, "/readyz answers 503 while draining")
    hc = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    hc.request("POST", "/v1/completions", body='{"prompt":"x","max_tokens":2}')
    check(hc.getresponse().status == 503, "HTTP completions answer 503 while draining")
    for t in threads:
        t.join(timeout=60)
    rc = server.wait(timeout=60)
    print("outcomes:", outcomes)
    check(rc == 0, f"the drained server exits 0 (rc {rc})")
    check(outcomes[0] == "length" and outcomes[1] == "length", "short streams finish")
    check(all(o is not None and ("shutting_down" in o or o == "length") for o in outcomes[2:]),
          "long streams finish or end with shutting_down")
    check("drained" in open(log).read(), "the log says it drained")

    # The next start: the session's history comes from its spilled pages.
    server = start(troupe, model, endpoint, port, data, log)
    try:
        c = Client(endpoint)
        s = c.chat([("user", "a third turn")], session_id="kept", max_tokens=8, temperature=0)
        s.read()
        st = c.stats()
        check(st["pages_restored"] > 0, f"the session's pages were restored: {st['pages_restored']}")
        check(s.usage["cached_prompt_tokens"] >= 16 and
              s.usage["prompt_tokens"] - s.usage["cached_prompt_tokens"] < 48,  # the new turn and one partial page
              f"no prefill of its history: {s.usage}")
    finally:
        server.terminate()
        server.wait(timeout=60)
    print("all drain checks passed", history["tokens_generated"])


if __name__ == "__main__":
    main()
