#!/usr/bin/env python3
"""Session memory on a real model (docs/PROTOCOL.md, "Session memory"): a
session far past a small context window still answers from what the user said
early on, when the user pinned it (ZeroMQ and HTTP, under window) or merely
stated it (under summarize, where the user's own statements stay verbatim beside the
summary of their turns),
and after the server is killed (SIGKILL) and started again on its store; the
same session without the pin, under window, has lost it, so the pin is what
kept it.

    test_session_memory.py TROUPE WORK_DIR MODEL.gguf
"""
import json
import os
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request

from serving import check, free_port, start_server
from troupe_client import Client

SYSTEM = "You are a helpful assistant. Answer in one short sentence."
FILLER = ["Explain what a mutex is.", "What is a B-tree used for?", "Explain what a hash map is.",
          "What does a compiler do?", "Explain what TCP is.", "What is a linked list?", "Explain recursion.",
          "What is a database index?", "Explain what an API is.", "What is a race condition?"]
ANSWER_TOKENS = 40


def serve(troupe, model, data, port, log):
    """`troupe serve` on the store in `data` with ZeroMQ and HTTP; returns (process, endpoint)."""
    endpoint = f"ipc://{data}/serve.sock"
    return start_server([troupe, "serve", "-m", model, "--listen", endpoint, "--http", f"127.0.0.1:{port}",
                         "--threads", "2", "--kv-tokens", "8192", "--context", "512", "--data-dir", f"{data}/store"],
                        log), endpoint


def say(c, session, messages, policy):
    s = c.chat(messages, session_id=session, max_tokens=ANSWER_TOKENS, temperature=0, context_policy=policy)
    return s.read()  # an Error raises


def session(endpoint, name, first, policy):
    """A session whose first user message is `first` (a message dict), then the fillers."""
    with Client(endpoint, timeout=300) as c:
        say(c, name, [("system", SYSTEM), first], policy)
        for q in FILLER:
            say(c, name, [("user", q)], policy)
        shown = c.show_session(name)
        check("window" not in shown["turn_states"][:1], f"{name}: its first turn left the window "
              f"({shown['turn_states'][:3]})")
        return shown


def summarized(endpoint, name):
    """Waits for the session's first summary to land (batch work in the background): the user's
    statements join the memory with the summary of their turns."""
    deadline = time.monotonic() + 300
    with Client(endpoint, timeout=300) as c:
        while time.monotonic() < deadline:
            if "summarized" in c.show_session(name)["turn_states"]:
                return
            time.sleep(0.5)
    check(False, f"{name}: a summary lands")


def ask(endpoint, name, question, policy):
    with Client(endpoint, timeout=300) as c:
        return say(c, name, [("user", question)], policy)


def http_turn(port, name, messages):
    body = json.dumps({"session": name, "max_tokens": ANSWER_TOKENS, "temperature": 0,
                       "messages": messages}).encode()
    r = urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                                      headers={"Content-Type": "application/json"}), timeout=300)
    return json.loads(r.read())["choices"][0]["message"]["content"]


def main():
    troupe, work, model = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    data = tempfile.mkdtemp(prefix="session-memory-", dir=work)
    log = f"{data}/serve.log"
    port = free_port()
    server, endpoint = serve(troupe, model, data, port, log)
    try:
        pinned = session(endpoint, "pinned", {"role": "user", "content": "My locker code is 4719.", "pinned": True},
                         "window")
        check(pinned["pinned"] == [1], f"the session shows its pinned message ({pinned['pinned']})")
        session(endpoint, "unpinned", {"role": "user", "content": "My locker code is 4719."}, "window")
        session(endpoint, "stated", {"role": "user", "content": "My cat is called Pistachio."}, "summarize")
        answer = ask(endpoint, "pinned", "What is my locker code?", "window")
        check("4719" in answer, f"a pinned message is answered from, far past the window: {answer!r}")
        answer = ask(endpoint, "unpinned", "What is my locker code?", "window")
        check("4719" not in answer, f"without the pin the window has dropped it: {answer!r}")
        summarized(endpoint, "stated")
        answer = ask(endpoint, "stated", "What is my cat called?", "summarize")
        check("Pistachio" in answer, f"under summarize the user's statement stays: {answer!r}")
        # Over HTTP: a message pinned by the "pinned" extension, and shown pinned.
        http_turn(port, "http", [{"role": "system", "content": SYSTEM},
                                 {"role": "user", "content": "My parrot is named Kiwi.", "pinned": True}])
        for q in FILLER:
            http_turn(port, "http", [{"role": "user", "content": q}])
        shown = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/troupe/sessions/http", timeout=30).read())
        check([m.get("pinned", False) for m in shown["messages"][:3]] == [False, True, False],
              "GET /v1/troupe/sessions/ID marks the pinned message")
        answer = http_turn(port, "http", [{"role": "user", "content": "What is my parrot's name?"}])
        check("Kiwi" in answer, f"HTTP: a pinned message is answered from, far past the window: {answer!r}")
        # Bad input: a pin that is not a boolean is refused, the session unchanged.
        try:
            http_turn(port, "http", [{"role": "user", "content": "x", "pinned": "yes"}])
            check(False, "a non-boolean pinned is refused")
        except urllib.error.HTTPError as e:
            check(e.code == 400 and "pinned" in e.read().decode(), "a non-boolean pinned is refused with 400")
        # The memory is the stored turns': after kill -9 it reads the same.
        server.send_signal(signal.SIGKILL)
        server.wait()
        server, endpoint = serve(troupe, model, data, port, log)
        answer = ask(endpoint, "pinned", "Tell me my locker code again.", "window")
        check("4719" in answer, f"after kill -9, the pinned message still stands: {answer!r}")
        answer = ask(endpoint, "stated", "Remind me: what is my cat's name?", "summarize")
        check("Pistachio" in answer, f"after kill -9, the statement still stands: {answer!r}")
    finally:
        server.kill()
        server.wait()
    print("PASSED")


if __name__ == "__main__":
    main()
