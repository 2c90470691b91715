#!/usr/bin/env python3
"""The Responses API end to end on the real default model, with the `openai`
package as a client: a chain of five responses by previous_response_id that
goes on across a kill -9 (its prefix restored from the spilled KV pages, and
the fact said in the first turn recalled in the last); a stream whose events
come in the Responses order and whose deltas join to the response's text; a
function-call loop (call, output, answer) with tool_choice required and named,
arguments validated against the tool; text.format json_schema; a fork from an
earlier response; store false; GET and DELETE; the OpenAI Agents SDK on its
Responses model; bad input, each a 4xx with OpenAI's error object.

    test_responses.py TROUPE_BINARY WORK_DIR MODEL_PATH
(PYTHONPATH must hold build/python and clients/python.)
"""
import json
import os
import signal
import sys
import tempfile
import urllib.error
import urllib.request

import jsonschema
import openai

from serving import check, free_port, serve_with_store
from test_tools import agents_sdk

MODEL = "qwen2.5-coder-0.5b"
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TOOLS = [{"type": "function", "name": "get_weather", "description": "Current weather in a city",
          "parameters": WEATHER},
         {"type": "function", "name": "get_time", "description": "Current time in a time zone",
          "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 40}},
                         "required": ["zone"]}}]
CITY = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 30},
                                         "population": {"type": "integer", "minimum": 0, "maximum": 50000000}},
        "required": ["name", "population"], "additionalProperties": False}


def start(troupe, model, data, port, work):
    return serve_with_store(troupe, model, data, port, os.path.join(work, "responses-serve.log"))


def raw(port, method, path, body=None):
    """(status, JSON) of a request sent as any HTTP client would."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def ask(client, text, previous=None, **kw):
    return client.responses.create(model=MODEL, input=text, previous_response_id=previous, temperature=0,
                                   max_output_tokens=kw.pop("max_output_tokens", 40), **kw)


def chain_across_kill(troupe, model, data, port, work, server):
    """Five responses in one chain, the server killed (SIGKILL) after the third."""
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
    first = ask(client, "Remember this: my locker code is 7351. Reply with OK.",
                instructions="You are a helpful assistant. Keep answers short.")
    check(first.id.startswith("resp_") and first.status == "completed" and first.output_text,
          f"a chain starts: {first.id} says {first.output_text!r}")
    second = ask(client, "Name a primary colour.", first.id)
    third = ask(client, "Name a planet.", second.id)
    check(third.previous_response_id == second.id and third.usage.input_tokens_details.cached_tokens > 0,
          f"the chain goes on from the KV cache ({third.usage.input_tokens_details.cached_tokens} of "
          f"{third.usage.input_tokens} prompt tokens cached)")
    server.send_signal(signal.SIGKILL)
    server.wait()
    server = start(troupe, model, data, port, work)
    check(True, "the server was killed (SIGKILL) after the third response and started again")
    fourth = ask(client, "Name a fruit.", third.id)
    cached = fourth.usage.input_tokens_details.cached_tokens
    check(cached >= third.usage.input_tokens // 2,
          f"after the restart the chain's prefix comes from the spilled pages ({cached} of "
          f"{fourth.usage.input_tokens} prompt tokens)")
    fifth = ask(client, "What is my locker code? Answer with the number only.", fourth.id)
    check("7351" in fifth.output_text, f"the fifth response recalls the first turn's fact: {fifth.output_text!r}")
    again = client.responses.retrieve(third.id)
    check(again.output_text == third.output_text and again.usage.output_tokens == third.usage.output_tokens,
          "GET returns a stored response as it was made, after the restart")
    # A fork: from the second response, the third's question again, and not the fourth's history.
    fork = ask(client, "Name a planet.", second.id)
    check(fork.id.split("_")[1] != second.id.split("_")[1] and fork.output_text == third.output_text,
          f"a response from an earlier one forks a new chain with the same answer: {fork.id}")
    return server, [first, second, third, fourth, fifth]


def stream_events(client):
    """Events in the Responses order; deltas join to the text of the same request unstreamed."""
    whole = ask(client, "Write one sentence about rivers.", max_output_tokens=30)
    types, deltas, done = [], [], None
    with client.responses.create(model=MODEL, input="Write one sentence about rivers.", temperature=0,
                                 max_output_tokens=30, stream=True) as stream:
        for e in stream:
            types.append(e.type)
            if e.type == "response.output_text.delta":
                deltas.append(e.delta)
            if e.type in ("response.completed", "response.incomplete"):
                done = e.response
    check(types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                        "response.content_part.added"] and types[-4:] == ["response.output_text.done",
                        "response.content_part.done", "response.output_item.done", "response.incomplete"]
          or types[-1] == "response.completed", f"stream events in order: {types[:4]} ... {types[-4:]}")
    check("".join(deltas) == done.output_text == whole.output_text,
          f"the streamed deltas join to the response's text, as unstreamed: {done.output_text!r}")


def function_calls(client):
    """Call, output, answer; with tool_choice required, named, and the call streamed."""
    r = client.responses.create(model=MODEL, input="What's the weather in Oslo, in celsius?", tools=TOOLS,
                                tool_choice="required", temperature=0, max_output_tokens=120)
    calls = [o for o in r.output if o.type == "function_call"]
    check(calls and calls[0].name == "get_weather", f"tool_choice required calls: {[(c.name, c.arguments) for c in calls]}")
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER)
    answer = client.responses.create(model=MODEL, previous_response_id=r.id, tools=TOOLS, tool_choice="none",
                                     input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                                             "output": "{\"temperature\": 21, \"sky\": \"clear\"}"}],
                                     temperature=0, max_output_tokens=60)
    check(answer.output_text and not [o for o in answer.output if o.type == "function_call"],
          f"the call's output, sent by its call_id, is answered in text: {answer.output_text!r}")
    named = client.responses.create(model=MODEL, input="What time is it in Tokyo?", tools=TOOLS,
                                    tool_choice={"type": "function", "name": "get_time"}, temperature=0,
                                    max_output_tokens=80)
    check([o.name for o in named.output if o.type == "function_call"] == ["get_time"], "a named tool_choice calls it")
    args, added, final = [], None, None
    with client.responses.create(model=MODEL, input="Weather in Lima, fahrenheit?", tools=TOOLS, tool_choice="required",
                                 temperature=0, max_output_tokens=120, stream=True) as stream:
        for e in stream:
            if e.type == "response.output_item.added" and e.item.type == "function_call":
                added = e.item
            if e.type == "response.function_call_arguments.delta":
                args.append(e.delta)
            if e.type == "response.completed":
                final = e.response
    done_calls = [o for o in final.output if o.type == "function_call"]
    check(added is not None and "".join(args) == done_calls[0].arguments and added.call_id == done_calls[0].call_id,
          f"a streamed call's argument deltas join to its arguments: {done_calls[0].arguments}")
    # The whole conversation as items, no previous_response_id (as stateless agents send it).
    items = [{"role": "user", "content": "What's the weather in Oslo, in celsius?"},
             {"type": "function_call", "call_id": calls[0].call_id, "name": calls[0].name,
              "arguments": calls[0].arguments},
             {"type": "function_call_output", "call_id": calls[0].call_id, "output": "{\"temperature\": 21}"}]
    stateless = client.responses.create(model=MODEL, input=items, tools=TOOLS, tool_choice="none", store=False,
                                        temperature=0, max_output_tokens=60)
    check(stateless.output_text, f"a conversation sent whole as items is answered: {stateless.output_text!r}")


def structured(client):
    r = client.responses.create(model=MODEL, input="Describe the city of Lima as JSON.", temperature=0,
                                max_output_tokens=80,
                                text={"format": {"type": "json_schema", "name": "city", "schema": CITY, "strict": True}})
    jsonschema.validate(json.loads(r.output_text), CITY)
    check(r.status == "completed", f"text.format json_schema holds the answer to its schema: {r.output_text}")


def store_and_delete(client, port, chain):
    once = ask(client, "Say hi.", store=False)
    check(once.store is False and raw(port, "GET", f"/v1/responses/{once.id}")[0] == 404,
          "a response with store false is not kept")
    status, body = raw(port, "DELETE", f"/v1/responses/{chain[-1].id}")
    check(status == 200 and body.get("deleted") is True, f"DELETE answers {status} {body}")
    check(all(raw(port, "GET", f"/v1/responses/{r.id}")[0] == 404 for r in chain),
          "a deleted response's chain is gone: GET answers 404 for each of its five")


def bad_input(port):
    cases = [
        ({"model": MODEL, "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
         400, "input[0].content[0].type"),
        ({"model": MODEL, "input": "hi", "tools": [{"type": "web_search"}]}, 400, "tools[0].type"),
        ({"model": MODEL, "input": "hi", "tools": [{"type": "function", "parameters": {}}]}, 400, "tools[0].name"),
        ({"model": MODEL, "input": "hi", "tools": [{"type": "function", "name": "a b", "parameters": {}}]}, 400, None),
        ({"model": MODEL, "input": [{"type": "function_call_output", "call_id": "call_nope", "output": "x"}]}, 400, None),
        ({"model": MODEL, "input": "hi", "previous_response_id": "resp_0123456789abcdef01234567_3"}, 404,
         "previous_response_id"),
        ({"model": MODEL, "input": "hi", "previous_response_id": "nonsense"}, 404, "previous_response_id"),
        ({"model": MODEL, "input": "hi", "background": True}, 400, "background"),
        ({"model": MODEL, "input": "hi", "text": {"format": {"type": "json_schema", "name": "x",
                                                             "schema": {"type": "number", "multipleOf": 0.01}}}},
         400, None),
        ({"model": MODEL}, 400, "input"),
    ]
    for body, status, param in cases:
        got, answer = raw(port, "POST", "/v1/responses", body)
        err = answer.get("error") or {}
        check(got == status and err.get("message") and (param is None or err.get("param") == param)
              and ".function" not in err.get("message", "") and not err.get("message", "").startswith("messages"),
              f"{json.dumps(body)[:90]} -> {got} {err.get('param')!r}: {err.get('message', '')[:80]}")
    check(raw(port, "GET", "/v1/responses/resp_0123456789abcdef01234567_0")[0] == 404, "GET of no response: 404")


def main():
    troupe, work, model = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    data = tempfile.mkdtemp(prefix="responses-", dir=work)
    port = free_port()
    server = start(troupe, model, data, port, work)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
        server, chain = chain_across_kill(troupe, model, data, port, work, server)
        stream_events(client)
        function_calls(client)
        structured(client)
        agents_sdk(port, responses=True)
        store_and_delete(client, port, chain)
        bad_input(port)
        check(server.poll() is None, "the server serves on after all of it")
    finally:
        server.kill()
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
