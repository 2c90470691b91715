#!/usr/bin/env python3
"""Recall of what the user said across a long session (label slow; minutes):
20 facts stated in the first 30 turns of a 200-turn session, plus 2 pinned
ones, asked about at the end. The same greedy conversation runs on two
servers of the same model: one at `--context 1024` under `summarize`, one
with room for the whole chat (`--context 32768`). The summarized session must
recall at least 90 % of what the whole chat recalls, and the pinned facts
always. Prints each fact's outcome on both and the totals (docs/TESTING.md
keeps the last).

    test_session_recall.py TROUPE WORK_DIR MODEL.gguf
"""
import os
import sys
import tempfile
import time

from serving import check, start_server
from troupe_client import Client

SYSTEM = "You are a helpful assistant. Answer briefly."
# (statement, question, what the answer must contain)
FACTS = [
    ("My cat is called Pistachio.", "What is my cat called?", "Pistachio"),
    ("I live in Lisbon.", "Which city do I live in?", "Lisbon"),
    ("My sister's name is Marta.", "What is my sister's name?", "Marta"),
    ("My favourite programming language is Haskell.", "What is my favourite programming language?", "Haskell"),
    ("My locker number is 4719.", "What is my locker number?", "4719"),
    ("I work as a marine biologist.", "What is my job?", "biologist"),
    ("My car is a green Volvo.", "What colour is my car?", "green"),
    ("I was born in 1987.", "In which year was I born?", "1987"),
    ("Our project is named Falcon.", "What is our project named?", "Falcon"),
    ("My dentist appointment is on Thursday.", "On which day is my dentist appointment?", "Thursday"),
    ("My wifi password is tangerine42.", "What is my wifi password?", "tangerine42"),
    ("I am allergic to peanuts.", "What am I allergic to?", "peanut"),
    ("My daughter plays the cello.", "Which instrument does my daughter play?", "cello"),
    ("My manager is called Oliver.", "What is my manager's name?", "Oliver"),
    ("We decided to use PostgreSQL for the database.", "Which database did we decide to use?", "Postgre"),
    ("My favourite football team is Benfica.", "Which football team do I support?", "Benfica"),
    ("My drive to work takes 25 minutes.", "How many minutes does my drive to work take?", "25"),
    ("My grandmother lives in Porto.", "Where does my grandmother live?", "Porto"),
    ("I have a parrot named Kiwi.", "What is my parrot's name?", "Kiwi"),
    ("My budget for the trip is 3000 euros.", "What is my budget for the trip?", "3000"),
]
PINNED = [("My passport number is K7730112.", "What is my passport number?", "K7730112"),
          ("My employee ID is EMP-5521.", "What is my employee ID?", "5521")]
TOPICS = ["a mutex", "a B-tree", "a hash map", "a compiler", "TCP", "a linked list", "recursion", "a database index",
          "an API", "a race condition", "garbage collection", "a virtual machine", "DNS", "a binary search",
          "a deadlock", "an HTTP cookie", "a closure", "a thread pool", "a bloom filter", "a load balancer"]
FILLER = [f"Explain {t} in two sentences." for t in TOPICS] + [f"Give one common mistake people make with {t}."
                                                               for t in TOPICS]
TURNS = 200
ANSWER_TOKENS = 32


def conversation():
    """The session's user turns: the facts (each with a question after it) and the pins in the first
    30 turns, fillers around them."""
    turns = []
    planted = {}
    slots = [t for t in range(30) if t % 3 != 2]  # 20 of the first 30 turns; the pins at 2 and 17
    for t, fact in zip(slots, FACTS):
        planted[t] = ("fact", fact)
    planted[2] = ("pin", PINNED[0])
    planted[17] = ("pin", PINNED[1])
    for t in range(TURNS):
        kind = planted.get(t)
        filler = FILLER[t % len(FILLER)]
        if kind and kind[0] == "fact":
            turns.append({"role": "user", "content": f"{kind[1][0]} {filler}"})
        elif kind and kind[0] == "pin":
            turns.append({"role": "user", "content": kind[1][0], "pinned": True})
        else:
            turns.append({"role": "user", "content": filler})
    return turns


def serve(troupe, model, data, context):
    endpoint = f"ipc://{data}/serve.sock"
    return start_server([troupe, "serve", "-m", model, "--listen", endpoint, "--threads", "2", "--kv-tokens",
                         str(max(8192, context + 1024)), "--context", str(context), "--data-dir", f"{data}/store"],
                        f"{data}/serve.log"), endpoint


def run(troupe, model, work, context, policy):
    """Plays the conversation and asks every question; returns {question: answer}."""
    data = tempfile.mkdtemp(prefix=f"recall-{context}-", dir=work)
    server, endpoint = serve(troupe, model, data, context)
    answers = {}
    started = time.monotonic()
    try:
        with Client(endpoint, timeout=600) as c:
            for i, m in enumerate(conversation()):
                first = [("system", SYSTEM)] if i == 0 else []
                s = c.chat(first + [m], session_id="long", max_tokens=ANSWER_TOKENS, temperature=0,
                           context_policy=policy)
                s.read()  # an Error raises
            for _, question, _ in FACTS + PINNED:
                s = c.chat([("user", question)], session_id="long", max_tokens=24, temperature=0,
                           context_policy=policy)
                answers[question] = s.read()
            shown = c.show_session("long")
    finally:
        server.kill()
        server.wait()
    states = shown["turn_states"]
    print(f"context {context} ({policy}): {time.monotonic() - started:.0f} s; turns summarized "
          f"{states.count('summarized')}, archived {states.count('archived')}, in the window {states.count('window')}")
    return answers


def main():
    troupe, work, model = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    small = run(troupe, model, work, 1024, "summarize")
    whole = run(troupe, model, work, 32768, "window")
    hits_small = hits_whole = pins = 0
    for statement, question, want in FACTS + PINNED:
        a, b = want.lower() in small[question].lower(), want.lower() in whole[question].lower()
        pinned = (statement, question, want) in PINNED
        print(f"{'pin ' if pinned else 'fact'} {want:12} summarize {'yes' if a else 'NO '} whole {'yes' if b else 'NO '}"
              f"  | {small[question].strip()[:60]!r}")
        if pinned:
            pins += a
        else:
            hits_small += a
            hits_whole += b
    print(f"recall: summarize at 1024 {hits_small}/{len(FACTS)}, whole chat {hits_whole}/{len(FACTS)}; "
          f"pinned {pins}/{len(PINNED)}")
    check(hits_small >= 0.9 * hits_whole, f"summarize recalls {hits_small}, at least 90 % of the whole chat's {hits_whole}")
    check(pins == len(PINNED), "every pinned fact is recalled")
    print("PASSED")


if __name__ == "__main__":
    main()
