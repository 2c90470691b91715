#!/usr/bin/env python3
"""The Python client against a real `troupe serve` process: greedy streams
equal `troupe generate`, chat, cancel, bad input, stats and ping.

    test_client.py TROUPE_BINARY WORK_DIR
(PYTHONPATH must hold the generated classes, build/python, and clients/python.)
"""
import os
import subprocess
import sys
import tempfile
import time

from troupe_client import Client, TroupeError


def greedy_ids(troupe, model, prompt):
    out = subprocess.run([troupe, "generate", "-m", model, "-p", prompt, "-n", "12", "-t", "0", "--print-ids", "-q",
                          "--threads", "1"], check=True, capture_output=True, text=True).stdout.split()
    return [int(t) for t in out]


def start_server(troupe, work):
    model = os.path.join(work, "python-client.gguf")
    subprocess.run([troupe, "make-model", "-o", model, "--embd", "128", "--ff", "256", "--seed", "5"], check=True,
                   capture_output=True)
    endpoint = f"ipc://{work}/python-client-{os.getpid()}.sock"
    log = open(os.path.join(work, "python-client-serve.log"), "w")
    server = subprocess.Popen([troupe, "serve", "-m", model, "--listen", endpoint, "--threads", "1",
                               "--kv-tokens", "8192",
                               "--data-dir", tempfile.mkdtemp(prefix="python-client-", suffix=".data", dir=work)], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(1200):  # 60 s: CI runs other servers beside this one
        if "listening on" in open(log.name).read():
            break
        time.sleep(0.05)
    else:
        server.terminate()
        raise SystemExit("server did not start: " + open(log.name).read())
    return server, model, endpoint


def check_streams(c, troupe, model):
    # Greedy streams equal the engine run alone.
    for prompt in ["Hello there", "The fox and the dog", "one two three four"]:
        stream = c.generate(prompt, max_tokens=12, temperature=0)
        pieces = list(stream)
        want = greedy_ids(troupe, model, prompt)
        check(stream.tokens == want, f"tokens of {prompt!r}: {stream.tokens} vs {want}")
        check("".join(pieces) == stream.text, "text deltas add up")
        check(stream.finish_reason in ("length", "stop"), stream.finish_reason)
        check(stream.usage["completion_tokens"] == len(stream.tokens), "usage counts the tokens")
    # Three greedy samples of one prompt: each the greedy continuation.
    multi = c.generate("Hello there", max_tokens=12, temperature=0, n=3)
    multi.read()
    first = greedy_ids(troupe, model, "Hello there")
    check(all(s == first for s in multi.samples), f"samples {multi.samples}")
    # Speculation: the same greedy tokens, and Done says what was drafted.
    rep = "one two three four one two three four one two"
    plain = c.generate(rep, max_tokens=24, temperature=0, speculation="off")
    plain.read()
    spec = c.generate(rep, max_tokens=24, temperature=0, speculation="ngram", max_draft=4)
    spec.read()
    check(spec.tokens == plain.tokens, f"speculation changed the tokens: {spec.tokens} vs {plain.tokens}")
    check(plain.speculation is None, "no speculation reported when off")
    # The response cache tier: the same greedy request again is a hit with the same tokens.
    first = c.generate(rep, max_tokens=24, temperature=0, response_cache=True)
    first.read()
    again = c.generate(rep, max_tokens=24, temperature=0, response_cache=True)
    again.read()
    check((first.response_cache, again.response_cache) == ("miss", "hit"),
          f"response cache: {first.response_cache}, then {again.response_cache}")
    check(again.tokens == first.tokens == plain.tokens and again.text == first.text, "a hit streams the stored answer")
    check(plain.response_cache == "not_asked", "a request that does not ask reports not_asked")
    # Chat, and two streams interleaved on one connection.
    a = c.chat([("system", "be brief"), ("user", "hi")], max_tokens=8, temperature=0)
    b = c.generate("interleaved", max_tokens=8, temperature=0)
    b.read()
    a.read()
    check(a.finish_reason is not None and b.finish_reason is not None, "both streams ended")
    # Arrival times, kept for frames buffered while another stream was read.
    for x in (a, b):
        check(len(x.token_times) == len(x.tokens), "one arrival time per token")
        check(x.token_times == sorted(x.token_times), "arrival times in order")
    # Cancel after the first text.
    s = c.generate("a long story", max_tokens=2000, temperature=0.9, seed=3)
    for _ in s:
        s.cancel()
        break
    s.read()
    check(s.finish_reason in ("cancelled", "stop"), f"cancelled, not {s.finish_reason}")


def check_bad_input(c):
    # Bad input answered with its error; the connection goes on.
    try:
        c.generate("x", max_tokens=0).read()
        check(False, "max_tokens 0 accepted")
    except TroupeError as e:
        check(e.code == "invalid_field" and "max_tokens" in e.message, str(e))
    try:
        c.generate("x", max_tokens=4, speculation="draft", draft_model="qwen2.5-coder-0.5b").read()
        check(False, "a draft model request served by a server without one")
    except TroupeError as e:
        check(e.code == "invalid_field" and "draft model" in e.message, str(e))
    for ratio, temperature in ((0.0, 0), (1.5, 0), (0.5, 0.8)):
        try:
            c.generate("x", max_tokens=4, temperature=temperature, accept_ratio=ratio).read()
            check(False, f"accept_ratio {ratio} at temperature {temperature} accepted")
        except TroupeError as e:
            check(e.code == "invalid_field" and "accept_ratio" in e.message, str(e))
    c.chat([("user", "x")], max_tokens=4, temperature=0, accept_ratio=0.5).read()  # greedy: a valid ratio
    c.send_raw(b"\x00garbage")
    r = c.receive_raw(10)
    check(r is not None and r.ClientRequestId() == 0, "malformed input answered")


def check_sessions_and_jobs(c):
    # A stored session: two turns, listed, shown, deleted.
    for text in ("first", "second"):
        c.chat([("user", text)], max_tokens=4, temperature=0, session_id="py").read()
    shown = c.show_session("py")
    check(shown["turns"] == 2 and [m[1] for m in shown["messages"]][::2] == ["first", "second"], str(shown))
    check(shown["turn_states"] == ["window", "window"] and shown["context_summary"] == "", str(shown))
    try:
        c.chat([("user", "x")], max_tokens=4, temperature=0, session_id="py", response_cache=True).read()
        check(False, "a session turn was answered from the response cache")
    except TroupeError as e:
        check(e.code == "invalid_field" and "response_cache" in e.message, str(e))
    # A context policy travels with the turn: summarize needs a session to keep its summary in.
    try:
        c.chat([("user", "x")], max_tokens=4, temperature=0, context_policy="summarize").read()
        check(False, "summarize without a session was accepted")
    except TroupeError as e:
        check(e.code == "invalid_field" and "session" in e.message, str(e))
    c.chat([("user", "third")], max_tokens=4, temperature=0, session_id="py", context_policy="window").read()
    check(c.show_session("py")["turns"] == 3, "a window turn is stored")
    check(any(s["session_id"] == "py" for s in c.list_sessions()), "listed")
    check("deleted" in c.delete_session("py"), "deleted")
    try:
        c.show_session("py")
        check(False, "a deleted session shows")
    except TroupeError as e:
        check(e.code == "unknown_session", str(e))
    # A batch job: accepted durable, runs, its results come back by index.
    job = c.submit_job(["alpha", "beta", "gamma"], "Say: {item}", max_tokens=4, temperature=0)
    for _ in range(600):
        if c.job_status(job["job_id"])["state"] != "running":
            break
        time.sleep(0.05)
    results = c.job_results(job["job_id"])
    check(sorted(r["index"] for r in results) == [0, 1, 2], str(results))
    check(any(j["job_id"] == job["job_id"] for j in c.list_jobs()), "job listed")
    stats = c.stats()
    check(stats["running"] == 0 and stats["pages_used"] == 0, f"pages returned: {stats}")


def check_slow_reader(c):
    # A reader slower than the stream is served slowly, not cut off: 2,000 tokens left unread for
    # 8 s (past ZeroMQ's 5 s heartbeat timeout, long after pyzmq's default queue of 1,000 would be
    # full), then read with pauses. With heartbeats on, libzmq aborted this process here.
    stream = c.generate("a slow reader", max_tokens=2000, temperature=0, ignore_eos=True)
    time.sleep(8)
    read = 0
    for _ in stream:
        read += 1
        if read % 500 == 0:
            time.sleep(1)
    check(len(stream.tokens) == 2000, f"the slow reader got {len(stream.tokens)} of 2000 tokens")
    check(stream.finish_reason == "length", f"the slow reader's stream ended with {stream.finish_reason}")
    check(c.ping(7), "the connection still answers after the slow read")


def main():
    troupe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    server, model, endpoint = start_server(troupe, work)
    try:
        with Client(endpoint, timeout=60) as c:
            check(c.ping(42), "ping")
            check_streams(c, troupe, model)
            check_bad_input(c)
            check_sessions_and_jobs(c)
            check_slow_reader(c)
    finally:
        server.terminate()
        server.wait(timeout=30)
    check_dead_endpoint(work)
    check_tiers(troupe, work, model)
    print("python client: all checks passed")


def check_tiers(troupe, work, large):
    # A server with two tiers: the client's tier= reaches it, and Done and stats report tiers.
    small = os.path.join(work, "python-client-small.gguf")
    subprocess.run([troupe, "make-model", "-o", small, "--embd", "128", "--ff", "256", "--seed", "6"], check=True,
                   capture_output=True)
    endpoint = f"ipc://{work}/python-tiers-{os.getpid()}.sock"
    log = open(os.path.join(work, "python-tiers-serve.log"), "w")
    server = subprocess.Popen([troupe, "serve", "--tiers", f"{small},{large}", "--escalate-budget", "0.5",
                               "--listen", endpoint, "--threads", "1",
                               "--kv-tokens", "4096", "--data-dir", tempfile.mkdtemp(prefix="python-tiers-", suffix=".data", dir=work)],
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(1200):
            if "listening on" in open(log.name).read():
                break
            time.sleep(0.05)
        else:
            raise SystemExit("tiered server did not start: " + open(log.name).read())
        names = ["python-client-small", "python-client"]
        with Client(endpoint, timeout=60) as c:
            for tier, name in (("small", names[0]), ("large", names[1]), (names[0], names[0])):
                stream = c.generate("The fox and the dog", max_tokens=6, temperature=0, tier=tier)
                stream.read()
                check(stream.tiers == [{"tier": name, "tokens": 6}], f"tier {tier}: {stream.tiers}")
            verified = c.generate("The fox and the dog", max_tokens=6, temperature=0, tier="verify")
            verified.read()
            check(verified.tiers == [{"tier": names[1], "tokens": 6}], f"verify: {verified.tiers}")
            esc = c.generate("The fox and the dog", max_tokens=6, temperature=0, tier="escalate", escalate_threshold=0.5)
            esc.read()
            check(sum(t["tokens"] for t in esc.tiers) == 6, f"escalate: {esc.tiers}")
            # Under --escalate-budget a named class gets its own figures (its own threshold wins above).
            named = c.generate("The fox and the dog", max_tokens=6, temperature=0, tier="escalate",
                               escalate_class="py-named")
            named.read()
            check(sum(t["tokens"] for t in named.tiers) == 6, f"escalate, named class: {named.tiers}")
            try:
                c.generate("x", max_tokens=4, temperature=0, tier="medium").read()
                check(False, "an unknown tier was accepted")
            except TroupeError as e:
                check(e.code == "invalid_field" and "no tier 'medium'" in e.message, str(e))
            c.chat([("user", "hi")], max_tokens=4, temperature=0, session_id="py-tiers", tier="large").read()
            shown = c.show_session("py-tiers")
            check(shown["model"] == names[1] and shown["escalations"] == 0, str(shown))
            job = c.submit_job(["a", "b"], "Say {item}", max_tokens=4, temperature=0, tier="small")
            for _ in range(600):
                if c.job_status(job["job_id"])["state"] == "finished":
                    break
                time.sleep(0.05)
            # A checked job: every small answer fails, so the large tier answers each again.
            checked = c.submit_job(["a", "b"], "Say {item}", max_tokens=4, temperature=0, tier="small",
                                   check=("contains", "no model writes this"))
            for _ in range(600):
                if c.job_status(checked["job_id"])["state"] == "finished":
                    break
                time.sleep(0.05)
            results = c.job_results(checked["job_id"])
            check([(r["check"], r["retried"]) for r in results] == [("failed", 1)] * 2, str(results))
            try:
                c.submit_job(["a"], "Say {item}", check=("regex", "(?=a)b"))
                check(False, "a check with a lookahead was accepted")
            except TroupeError as e:
                check(e.code == "invalid_field" and e.message.startswith("SubmitJob.check: "), str(e))
            stats = c.stats()
            check([t["check_failures"] for t in stats["tiers"]] == [2, 2], str(stats["tiers"]))
            check([t["name"] for t in stats["tiers"]] == names, str(stats["tiers"]))
            check(stats["tiers"][0]["requests"] >= 5 and stats["tiers"][1]["tokens"] >= 10, str(stats["tiers"]))
            classes = {x["class"]: x for x in stats["escalation_classes"]}
            check(classes.get("class/py-named", {}).get("judged") == 1 and classes["*"]["judged"] == 1,
                  str(stats["escalation_classes"]))
    finally:
        server.terminate()
        server.wait(timeout=30)


def check_dead_endpoint(work):
    # Nothing listens there: the constructor says so after connect_timeout, not after timeout.
    began = time.monotonic()
    try:
        Client(f"ipc://{work}/nobody-{os.getpid()}.sock", timeout=600, connect_timeout=0.5)
        check(False, "a dead endpoint was accepted")
    except ConnectionError as e:
        check("no troupe server answers at ipc://" in str(e), str(e))
    check(time.monotonic() - began < 5, "the dead endpoint was reported within the connect timeout")


def check(ok, what):
    if not ok:
        raise SystemExit("FAILED: " + what)


if __name__ == "__main__":
    main()
