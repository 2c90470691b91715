#!/usr/bin/env python3
"""Constrained decoding end to end on the real default model, as users reach
it: the `openai` package's parse() with a Pydantic model, json_object and a
streamed json_schema; LangChain's with_structured_output; llama-server's
`grammar` and vLLM's `guided_choice` fields; the ZeroMQ client with a regex,
a choice and a schema; greedy constrained output identical with speculation
off, ngram, draft and auto; refusals that name the keyword and its place; and
a batch job of 50 items under a schema, killed with SIGKILL part way and
resumed, whose every result validates.

    test_structured_output.py TROUPE_BINARY WORK_DIR MODEL_PATH
(PYTHONPATH must hold build/python and clients/python.)
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import jsonschema
import openai
from pydantic import BaseModel

from serving import check, free_port, start_http_server
from troupe_client import Client, TroupeError


class Person(BaseModel):
    name: str
    age: int
    languages: list[str]


CITY = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 40},
        "country": {"type": "string", "maxLength": 40},
        "population": {"type": "integer", "minimum": 0},
        "coastal": {"type": "boolean"},
    },
    "required": ["city", "country", "population", "coastal"],
    "additionalProperties": False,
}


def is_city(text):
    try:
        jsonschema.validate(json.loads(text), CITY)
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


def start(troupe, model, work, data, port, endpoint):
    log = os.path.join(work, "structured-serve.log")
    return start_http_server([troupe, "serve", "-m", model, "--listen", endpoint, "--http", f"127.0.0.1:{port}",
                              "--threads", "2", "--kv-tokens", "16384", "--draft-model", model,
                              "--data-dir", data], port, log, wait_s=180)


def check_openai(port):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
    extract = [{"role": "user", "content": "Extract the person: Ada Lovelace, 36, wrote in English and French."}]
    parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse
    done = parse(model="qwen2.5-coder-0.5b", messages=extract, response_format=Person, temperature=0,
                 max_tokens=120)
    person = done.choices[0].message.parsed
    check(isinstance(person, Person), f"openai parse() with a Pydantic model gives the model: {person!r}")
    jsonschema.validate(json.loads(done.choices[0].message.content), Person.model_json_schema())
    check(done.choices[0].finish_reason == "stop", "the schema's answer ends where its grammar does")

    r = client.chat.completions.create(
        model="qwen2.5-coder-0.5b", temperature=0, max_tokens=400, response_format={"type": "json_object"},
        messages=[{"role": "user", "content": "Describe Paris as a JSON object with three short fields."}])
    check(r.choices[0].finish_reason == "stop" and isinstance(json.loads(r.choices[0].message.content), dict),
          f"json_object gives a JSON object: {r.choices[0].message.content}")

    chunks = client.chat.completions.create(
        model="qwen2.5-coder-0.5b", temperature=0.7, seed=3, max_tokens=120, stream=True,
        messages=[{"role": "user", "content": "A city record for Lisbon."}],
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": CITY, "strict": True}})
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    jsonschema.validate(json.loads(text), CITY)
    check(True, f"a streamed, sampled json_schema answer validates: {text}")

    yes_no = client.chat.completions.create(
        model="qwen2.5-coder-0.5b", max_tokens=8, messages=[{"role": "user", "content": "Is water wet?"}],
        extra_body={"grammar": 'root ::= "yes" | "no"'})
    check(yes_no.choices[0].message.content in ("yes", "no"), "llama-server's grammar field is enforced")
    pick = client.chat.completions.create(
        model="qwen2.5-coder-0.5b", max_tokens=8, messages=[{"role": "user", "content": "Pick a colour."}],
        extra_body={"guided_choice": ["red", "green", "blue"]})
    check(pick.choices[0].message.content in ("red", "green", "blue"), "vLLM's guided_choice is enforced")

    def refused(body, *needles):
        try:
            client.chat.completions.create(model="qwen2.5-coder-0.5b", max_tokens=8,
                                           messages=[{"role": "user", "content": "x"}], **body)
        except openai.BadRequestError as e:
            return all(n in str(e) for n in needles)
        return False

    tags = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"},
                                                       "uniqueItems": True}}}
    check(refused({"response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": tags}}},
                  "uniqueItems", "/properties/tags"),
          "a keyword the engine cannot enforce is refused with its name and JSON pointer (400)")
    check(refused({"extra_body": {"grammar": 'root ::= "a'}}, "line 1"), "a malformed grammar is refused (400)")
    check(refused({"extra_body": {"guided_regex": "(a)\\1"}}, "pattern"), "a regex with a backreference is refused")
    endless = {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}
    check(refused({"response_format": {"type": "json_schema", "json_schema": {"name": "e", "schema": endless}}}),
          "a recursive schema with no way to end is refused")
    t0 = time.monotonic()
    huge = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 100}
                                             for i in range(12000)}}
    check(refused({"response_format": {"type": "json_schema", "json_schema": {"name": "h", "schema": huge}}}),
          "a schema over 1 MiB is refused")
    check(time.monotonic() - t0 < 20, f"... within bounded time ({time.monotonic() - t0:.1f} s)")
    ok = client.chat.completions.create(model="qwen2.5-coder-0.5b", max_tokens=4,
                                        messages=[{"role": "user", "content": "Hi"}])
    check(bool(ok.choices), "the server serves everyone else after the refusals")
    return client


def check_langchain(port):
    from langchain_openai import ChatOpenAI
    llm = ChatOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", model="qwen2.5-coder-0.5b",
                     temperature=0, max_tokens=120)
    person = llm.with_structured_output(Person, method="json_schema").invoke(
        "Extract the person: Grace Hopper, 85, programmed in COBOL and FORTRAN.")
    check(isinstance(person, Person), f"LangChain's with_structured_output gives the model: {person!r}")


def check_zeromq(endpoint):
    with Client(endpoint, timeout=300) as c:
        s = c.generate("The date today, as YYYY-MM-DD:", max_tokens=20, temperature=0,
                       constraint={"regex": "[0-9]{4}-[0-9]{2}-[0-9]{2}"})
        text = s.read()
        check(re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text) is not None and s.finish_reason == "stop",
              f"a regex constraint over ZeroMQ: {text!r}")
        s = c.generate("Best fruit:", max_tokens=8, temperature=1.0, seed=9,
                       constraint={"choice": ["apple", "banana", "cherry"]})
        check(s.read() in ("apple", "banana", "cherry"), "a sampled choice constraint")
        try:
            c.generate("x", max_tokens=4, constraint={"grammar": "root ::= undefined-rule"}).read()
            check(False, "an undefined rule is refused")
        except TroupeError as e:
            check(e.code == "invalid_field" and "undefined-rule" in e.message, f"an undefined rule is refused: {e}")
        # A constrained turn in a stored session, then a free one: the
        # constraint is the turn's own.
        s = c.chat([("user", "Give a JSON record for the city of Rome.")], session_id="cities", max_tokens=96,
                   temperature=0, constraint={"json_schema": CITY})
        jsonschema.validate(json.loads(s.read()), CITY)
        c.chat([("user", "Thanks. In one plain sentence, what is Rome famous for?")], session_id="cities",
               max_tokens=24, temperature=0).read()
        stored = c.show_session("cities")
        jsonschema.validate(json.loads(stored["messages"][1][1]), CITY)
        check(stored["turns"] == 2 and not is_city(stored["messages"][3][1]),
              f"a session keeps its constrained turn, and its next turn is free: {stored['messages'][3][1]!r}")
        # Greedy constrained output does not depend on speculation.
        messages = [("user", "Give a JSON record for the city of Osaka.")]
        outputs = {}
        for mode in ("off", "ngram", "draft", "auto"):
            s = c.chat(messages, max_tokens=96, temperature=0, speculation=mode, constraint={"json_schema": CITY})
            text = s.read()
            outputs[mode] = (list(s.tokens), text)
            jsonschema.validate(json.loads(text), CITY)
        same = all(outputs[m] == outputs["off"] for m in outputs)
        check(same, f"greedy constrained output is identical with speculation off, ngram, draft, auto: "
                    f"{outputs['off'][1]}")


def check_job(troupe, model, work, data, port, endpoint, server):
    cities = ["Tokyo", "Lagos", "Lima", "Oslo", "Cairo", "Quito", "Perth", "Dakar", "Hanoi", "Turin"] * 5
    with Client(endpoint, timeout=300) as c:
        job = c.submit_job(cities, "Write a JSON record for the city of {item}.", max_tokens=80, temperature=0,
                           constraint={"json_schema": CITY})
        while c.job_status(job["job_id"])["finished_items"] < 5:
            time.sleep(0.2)
    server.send_signal(signal.SIGKILL)
    server.wait()
    check(True, "the server was killed (SIGKILL) with the job part way")
    server = start(troupe, model, work, data, port, endpoint)
    with Client(endpoint, timeout=300) as c:
        deadline = time.monotonic() + 400
        while c.job_status(job["job_id"])["state"] == "running" and time.monotonic() < deadline:
            time.sleep(0.5)
        results = c.job_results(job["job_id"])
    check(len(results) == 50, f"every item has a result after the restart ({len(results)})")
    for r in results:
        jsonschema.validate(json.loads(r["text"]), CITY)
    check(all(r["validated"] and r["finish_reason"] == "stop" for r in results),
          "all 50 results validate against the job's schema, and each says so")
    return server


def main():
    troupe, work, model = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(work, exist_ok=True)
    data = tempfile.mkdtemp(prefix="structured-", suffix=".data", dir=work)
    port = free_port()
    endpoint = f"ipc://{work}/structured-{os.getpid()}.sock"
    server = start(troupe, model, work, data, port, endpoint)
    try:
        check_openai(port)
        check_langchain(port)
        check_zeromq(endpoint)
        server = check_job(troupe, model, work, data, port, endpoint, server)
    finally:
        server.kill()
        server.wait()
    print("PASSED")


if __name__ == "__main__":
    main()
