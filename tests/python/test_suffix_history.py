#!/usr/bin/env python3
"""Suffix speculation's history through restarts, on a real model: a stored
session past its context window, its server killed (SIGKILL) between turns,
and a batch job killed part way and resumed, each on a server whose requests
draft from suffix trees (`--speculation suffix`). Every greedy answer must
equal the one a server with speculation off gives for the same turns and
items; the restarted server's trees are rebuilt from the store (the
session's answers the window no longer shows, the job's finished items), and
`troupe stats` reports suffix drafts and the trees' bytes.

    test_suffix_history.py TROUPE WORK_DIR MODEL.gguf
"""
import os
import signal
import sys
import tempfile
import time

from serving import check, start_server
from troupe_client import Client

TASKS = ["parse a date written as DD/MM/YYYY", "count the vowels in a string", "reverse the words of a sentence",
         "check that brackets are balanced", "merge two sorted lists", "remove duplicates but keep the order",
         "find the longest common prefix of some strings", "convert Celsius to Fahrenheit",
         "split a list into chunks of n", "flatten a nested list", "compute a running average",
         "validate an email address"]
TURNS = [f"Write a Python function that can {t}. Code only, with a docstring." for t in TASKS]
ITEMS = ["a queue", "a stack", "a heap", "a trie", "a linked list", "a hash map", "a ring buffer", "a bloom filter"]
ANSWER_TOKENS = 64
HALF = len(TURNS) // 2


def serve(troupe, model, data, mode, log):
    """`troupe serve` on the store in `data`, ZeroMQ only; returns (process, endpoint)."""
    endpoint = f"ipc://{data}/serve.sock"
    return start_server([troupe, "serve", "-m", model, "--listen", endpoint, "--threads", "2", "--kv-tokens", "8192",
                         "--context", "1024", "--speculation", mode, "--data-dir", f"{data}/store"], log), endpoint


def turns(endpoint, which):
    """The session's turns `which` (indexes into TURNS), greedy; their token lists. The session has
    a system prompt of its own, so that no page of it is a prefix the job's items share: a
    session's pages restored from the store are k8v4 by default (docs/DECISIONS.md), not the bits a
    fresh prefill computes, and whether a job item found them cached would depend on timing."""
    out = []
    with Client(endpoint, timeout=300) as c:
        for i in which:
            first = [("system", "You are a terse Python coding assistant.")] if i == 0 else []
            s = c.chat(first + [("user", TURNS[i])], session_id="coding", max_tokens=ANSWER_TOKENS, temperature=0,
                       context_policy="window")
            s.read()
            out.append(list(s.tokens))
    return out


def submit(endpoint):
    with Client(endpoint, timeout=300) as c:
        return c.submit_job(ITEMS, "Describe {item} as a data structure: what it stores, its operations and their "
                                   "costs, in the same three short paragraphs each time.",
                            max_tokens=ANSWER_TOKENS, temperature=0)["job_id"]


def results(endpoint, job_id):
    with Client(endpoint, timeout=300) as c:
        deadline = time.monotonic() + 600
        while c.job_status(job_id)["state"] == "running" and time.monotonic() < deadline:
            time.sleep(0.3)
        return {r["index"]: r["text"] for r in c.job_results(job_id)}


def stats(endpoint):
    with Client(endpoint, timeout=60) as c:
        return c.stats()


def session_across_kill(troupe, model, data, mode, log):
    """The session's turns on a server killed (SIGKILL) halfway and started again on its store;
    (turn tokens, the server now running, its endpoint)."""
    p, endpoint = serve(troupe, model, data, mode, log)
    got = turns(endpoint, range(HALF))
    p.send_signal(signal.SIGKILL)
    p.wait()
    p, endpoint = serve(troupe, model, data, mode, log)
    try:
        got += turns(endpoint, range(HALF, len(TURNS)))
    except BaseException:
        p.kill()
        raise
    return got, p, endpoint


def reference(troupe, model, work):
    """The answers of a server with speculation off: the session across the same kill (its
    restored pages are the same), the job without one."""
    data = tempfile.mkdtemp(prefix="suffix-off-", dir=work)
    session, p, endpoint = session_across_kill(troupe, model, data, "off", os.path.join(work, "suffix-off.log"))
    try:
        job = results(endpoint, submit(endpoint))
    finally:
        p.kill()
        p.wait()
    return session, job


def main():
    troupe, work, model = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(work, exist_ok=True)
    want_session, want_job = reference(troupe, model, work)
    check(len(want_job) == len(ITEMS), "the reference server answered every item")

    data = tempfile.mkdtemp(prefix="suffix-on-", dir=work)
    log = os.path.join(work, "suffix-on.log")
    got, p, endpoint = session_across_kill(troupe, model, data, "suffix", log)
    try:
        same = sum(a == b for a, b in zip(got, want_session))
        check(same == len(TURNS), f"a session killed (SIGKILL) after turn {HALF} and resumed answers as with "
                                  f"speculation off: {same}/{len(TURNS)} turns equal")
        with Client(endpoint, timeout=60) as c:
            states = c.show_session("coding")["turn_states"]
        check(states[0] == "archived" and states[-1] == "window",
              f"the session went past its window (its first turns are out of the prompt: their answers "
              f"rebuilt the session's tree after the kill): {states}")
        st = stats(endpoint)
        suffix = st["speculation"].get("suffix", {})
        check(suffix.get("drafted", 0) > 0 and suffix.get("accepted", 0) > 0,
              f"the resumed session drafted from suffix trees: {suffix}")
        check(st["suffix_trees"] >= 1 and st["suffix_tree_bytes"] > 0,
              f"troupe stats reports the trees: {st['suffix_trees']} scope trees, {st['suffix_tree_bytes']} bytes")

        job_id = submit(endpoint)
        with Client(endpoint, timeout=300) as c:
            deadline = time.monotonic() + 300
            while c.job_status(job_id)["finished_items"] < 3 and time.monotonic() < deadline:
                time.sleep(0.1)
        p.send_signal(signal.SIGKILL)
        p.wait()
        p, endpoint = serve(troupe, model, data, "suffix", log)
        got_job = results(endpoint, job_id)
        check("resuming job" in open(log).read(), "the job resumed after the kill")
        same = sum(got_job.get(i) == want_job[i] for i in want_job)
        for i in want_job:
            if got_job.get(i) != want_job[i]:
                print(f"item {i}:\n  off:    {want_job[i]!r}\n  suffix: {got_job.get(i)!r}")
        check(same == len(ITEMS), f"a job killed part way and resumed answers every item as with speculation off: "
                                  f"{same}/{len(ITEMS)}")
        st = stats(endpoint)
        check(st["speculation"].get("suffix", {}).get("drafted", 0) > 0 and st["suffix_trees"] >= 1,
              f"the resumed job's items drafted from suffix trees: {st['speculation']}, {st['suffix_trees']} trees")
    finally:
        p.kill()
        p.wait()
    print("PASSED")


if __name__ == "__main__":
    main()
