#!/usr/bin/env python3
"""The real `openai` package, curl-style raw HTTP and the Prometheus parser
against a live `troupe serve --http`: completions and chat, streaming and
not, n > 1, stop strings, usage, errors, a disconnect that frees its pages,
greedy text equal to the ZeroMQ path, and counters that move.

    test_openai.py TROUPE_BINARY WORK_DIR
(PYTHONPATH must hold build/python and clients/python.)
"""
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import openai
from prometheus_client.parser import text_string_to_metric_families

from serving import free_port, start_http_server
from troupe_client import Client


def check(ok, what):
    if not ok:
        raise SystemExit("FAILED: " + what)
    print("ok:", what)


def start(troupe, work):
    model = os.path.join(work, "openai.gguf")
    subprocess.run([troupe, "make-model", "-o", model, "--embd", "128", "--ff", "256", "--seed", "5"], check=True,
                   capture_output=True)
    port = free_port()
    endpoint = f"ipc://{work}/openai-{os.getpid()}.sock"
    log = os.path.join(work, "openai-serve.log")
    open(log, "w").close()
    server = start_http_server([troupe, "serve", "-m", model, "--listen", endpoint, "--http", f"127.0.0.1:{port}",
                                "--threads", "1", "--kv-tokens", "8192",
                                "--data-dir", tempfile.mkdtemp(prefix="openai-", suffix=".data", dir=work)], port, log)
    return server, endpoint, port, "openai"


def raw(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request(method, path, body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, r.read().decode()


def metrics(port, names=None):
    """Every sample's value by (name, labels); `names` collects every series
    name the families declare (a counter's _total, a histogram's _bucket...)."""
    status, text = raw(port, "GET", "/metrics")
    check(status == 200, "/metrics answers")
    values = {}
    for family in text_string_to_metric_families(text):
        if names is not None:
            names.add(family.name)
            suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}.get(family.type, [])
            names.update(family.name + x for x in suffixes)
        for s in family.samples:
            values[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return values


def check_dashboard(names):
    """ops/grafana-dashboard.json asks only for series the server exports."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "ops", "grafana-dashboard.json")
    dashboard = json.load(open(path))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = set(re.findall(r"\btroupe_[a-z_]+", " ".join(exprs)))
    check(len(dashboard["panels"]) >= 10 and used, f"the dashboard has panels ({len(dashboard['panels'])})")
    check(used <= names, f"every series the dashboard uses is exported: missing {sorted(used - names)}")
    for family in ("troupe_time_to_first_token_seconds_bucket", "troupe_inter_token_seconds_bucket",
                   "troupe_queue_wait_seconds_bucket", "troupe_step_seconds_bucket", "troupe_kv_pages_used",
                   "troupe_sessions", "troupe_jobs_running", "troupe_speculation_accepted_tokens_total"):
        check(family in used, f"the dashboard shows {family}")


def stats(port):
    return json.loads(raw(port, "GET", "/v1/troupe/stats")[1])


def tiers_in_metrics(troupe, work):
    """On `serve --tiers`, /metrics and /v1/troupe/stats have each tier's series (the
    figures `troupe stats` prints), and they move with a request."""
    small, large = os.path.join(work, "tier-small.gguf"), os.path.join(work, "tier-large.gguf")
    for path, embd, seed in ((small, "64", "6"), (large, "128", "5")):
        subprocess.run([troupe, "make-model", "-o", path, "--embd", embd, "--ff", "256", "--seed", seed], check=True,
                       capture_output=True)
    port = free_port()
    log = os.path.join(work, "openai-tiers.log")
    server = start_http_server([troupe, "serve", "--tiers", f"{small},{large}", "--listen",
                                f"ipc://{work}/tiers-{os.getpid()}.sock", "--http", f"127.0.0.1:{port}", "--threads",
                                "1", "--kv-tokens", "8192", "--data-dir",
                                tempfile.mkdtemp(prefix="tiers-", suffix=".data", dir=work)], port, log)
    try:
        status, body = raw(port, "POST", "/v1/completions", json.dumps({"prompt": "The fox", "max_tokens": 4,
                                                                        "temperature": 0}))
        check(status == 200, f"a completion on two tiers: {status}")
        values = metrics(port)
        requests = {dict(labels)["tier"]: v for (name, labels), v in values.items()
                    if name == "troupe_tier_requests_total"}
        check(set(requests) == {"tier-small", "tier-large"} and sum(requests.values()) >= 1,
              f"/metrics has each tier's requests: {requests}")
        check(any(name == "troupe_tier_tokens_total" and v >= 4 for (name, _), v in values.items()),
              "and the tokens a tier wrote")
        tiers = [t["tier"] for t in json.loads(raw(port, "GET", "/v1/troupe/stats")[1])["tiers"]]
        check(tiers == ["tier-small", "tier-large"], f"/v1/troupe/stats lists the tiers: {tiers}")
    finally:
        server.terminate()
        server.wait(timeout=60)


PROMPT = "The fox and the dog"


def check_same_as_zmq(api, model, endpoint):
    """Greedy text over HTTP equals the ZeroMQ path's, byte for byte; returns the HTTP answer."""
    whole = api.completions.create(model=model, prompt=PROMPT, max_tokens=16, temperature=0)
    zmq = Client(endpoint).generate(PROMPT, max_tokens=16, temperature=0, top_k=0, top_p=1.0, min_p=0.0)
    zmq.read()
    check(whole.choices[0].text == zmq.text, f"greedy HTTP text equals ZeroMQ's: {whole.choices[0].text!r}")
    check(whole.usage.completion_tokens == 16 and whole.usage.prompt_tokens > 0, f"usage {whole.usage}")
    check(whole.choices[0].finish_reason == "length", "finish_reason length")
    return whole


def check_streaming(api, model, whole):
    """The deltas add up to the whole; usage comes last when asked for."""
    chunks = list(api.completions.create(model=model, prompt=PROMPT, max_tokens=16, temperature=0, stream=True,
                                         stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    check(text == whole.choices[0].text, "streamed completion equals the whole one")
    check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 16, "usage chunk at the end")


def check_chat(api, model):
    """Chat, whole and streamed, n = 2 (greedy: both samples alike)."""
    msgs = [{"role": "user", "content": "Say something"}]
    chat = api.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0, n=2)
    check(len(chat.choices) == 2 and chat.choices[0].message.content == chat.choices[1].message.content,
          "n = 2 gives two greedy choices alike")
    check(chat.usage.completion_tokens == sum(12 if c.finish_reason == "length" else 0 for c in chat.choices)
          or chat.usage.completion_tokens > 0, "chat usage counts both samples")
    streamed = "".join(c.choices[0].delta.content or "" for c in
                       api.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0,
                                                   stream=True) if c.choices)
    check(streamed == chat.choices[0].message.content, "streamed chat equals the whole one")


def check_stop_string(api, model, whole):
    """A stop string: the text ends before it, finish_reason stop."""
    full = whole.choices[0].text
    stop = full[len(full) // 2:len(full) // 2 + 3]
    if stop.strip():
        cut = api.completions.create(model=model, prompt=PROMPT, max_tokens=16, temperature=0, stop=[stop])
        check(cut.choices[0].text == full[:full.index(stop)] and cut.choices[0].finish_reason == "stop",
              f"stop string {stop!r} ends the text before it")


def check_errors(api, port, model):
    """OpenAI's exceptions with the right status, error objects on raw HTTP, and serving goes on."""
    try:
        api.completions.create(model=model, prompt=PROMPT, max_tokens=4, temperature=7)
        check(False, "temperature 7 refused")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "temperature" in str(e), "temperature 7: 400 naming the field")
    try:
        api.completions.create(model="gpt-4", prompt=PROMPT, max_tokens=4)
        check(False, "unknown model refused")
    except openai.NotFoundError as e:
        check(e.status_code == 404, "an unknown model: 404")
    status, body = raw(port, "POST", "/v1/chat/completions", "{not json")
    check(status == 400 and json.loads(body)["error"]["code"] == "malformed", "malformed JSON: 400, error object")
    status, body = raw(port, "POST", "/v1/completions", "x" * (5 << 20))
    check(status == 413 and "error" in json.loads(body), "an oversized body: 413, error object")
    status, body = raw(port, "POST", "/v1/completions", json.dumps({"prompt": "a " * 20000, "max_tokens": 4}))
    check(status == 413 and json.loads(body)["error"]["code"] == "too_long", "a prompt past the context: 413")
    check(api.completions.create(model=model, prompt=PROMPT, max_tokens=2, temperature=0).choices[0].text != None,
          "the server goes on serving after bad input")


def check_disconnect(api, port, model):
    """A client that disconnects mid-stream: its request ends, its pages come back.
    Returns the pages in use before it, the baseline the gauge must come back to."""
    baseline = stats(port)["pages_used"]
    s = api.completions.create(model=model, prompt=PROMPT, max_tokens=4000, temperature=0.8, stream=True,
                               extra_body={"ignore_eos": True})
    for i, _ in enumerate(s):
        if i == 3:
            break
    s.close()
    for _ in range(200):
        st = stats(port)
        if st["running"] == 0 and st["pages_used"] == baseline:
            break
        time.sleep(0.05)
    check(st["running"] == 0 and st["pages_used"] == baseline, f"a disconnect frees its pages: {st}")
    return baseline


def check_counters(port, before, baseline):
    """The counters moved as the requests above say."""
    after = metrics(port)
    def moved(name, labels=()):
        key = (name, tuple(sorted(labels)))
        return after.get(key, 0) - before.get(key, 0)
    check(moved("troupe_requests_total", [("outcome", "client_gone")]) >= 1, "client_gone counted")
    check(moved("troupe_requests_total", [("outcome", "length")]) >= 4, "length outcomes counted")
    check(moved("troupe_requests_total", [("outcome", "too_long")]) == 1, "the too-long prompt counted")
    check(moved("troupe_time_to_first_token_seconds_count") >= 6, "TTFT observed per request")
    check(moved("troupe_http_requests_total", [("route", "/v1/completions"), ("status", "200")]) >= 4,
          "HTTP routes counted")
    check(after[("troupe_kv_pages_used", ())] == baseline, "the pages gauge is back to baseline")


def check_gauges(api, port, model):
    """A session and a job: the gauges count them; the dashboard's series are all exported."""
    api.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                temperature=0, extra_body={"session": "gauge"})
    status, body = raw(port, "POST", "/v1/troupe/jobs",
                       json.dumps({"items": ["a", "b"], "template": "Say {item}", "max_tokens": 2}))
    check(status == 200, f"a job over HTTP: {status} {body}")

    names = set()
    later = metrics(port, names)
    check(later.get(("troupe_sessions", ()), 0) >= 1, "the sessions gauge counts the stored session")
    check(("troupe_jobs_running", ()) in later, "the jobs gauge is exported")
    check_dashboard(names)


def main():
    troupe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    server, endpoint, port, model = start(troupe, work)
    try:
        api = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        check([m.id for m in api.models.list().data] == [model], "models lists the served model")
        before = metrics(port)
        whole = check_same_as_zmq(api, model, endpoint)
        check_streaming(api, model, whole)
        check_chat(api, model)
        check_stop_string(api, model, whole)
        check_errors(api, port, model)
        baseline = check_disconnect(api, port, model)
        check_counters(port, before, baseline)
        check_gauges(api, port, model)
    finally:
        server.terminate()
        server.wait(timeout=60)
    tiers_in_metrics(troupe, work)
    print("all openai checks passed")


if __name__ == "__main__":
    main()
