#!/usr/bin/env python3
"""Tool calls end to end on the real default model, as agent code reaches
them: the `openai` package's tool loop (call, result, call, result, answer)
with tool_choice in all four forms, parallel calls, streamed calls that
reassemble to the same calls; LangChain's bind_tools in an agent loop; the
OpenAI Agents SDK running a function tool; a session over HTTP whose next
turn answers the call the server stored; the ZeroMQ client's tools; and bad
input, each a 400 with OpenAI's error object.
Every call's arguments are checked with jsonschema against its tool.

    test_tools.py TROUPE_BINARY WORK_DIR MODEL_PATH
(PYTHONPATH must hold build/python and clients/python.)
"""
import json
import os
import sys
import tempfile
import urllib.request
import urllib.error

import jsonschema
import openai

from serving import check, free_port, start_http_server
from troupe_client import Client, TroupeError

MODEL = "qwen2.5-coder-0.5b"
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 40}}, "required": ["zone"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "Current time in a time zone",
                                           "parameters": TIME}}]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
RESULTS = {"get_weather": "{\"temperature\": 21, \"sky\": \"clear\"}", "get_time": "{\"time\": \"14:05\"}"}


def valid(name, arguments):
    """The arguments text parses and validates against the tool's schema."""
    try:
        jsonschema.validate(json.loads(arguments), SCHEMAS[name])
        return True
    except (KeyError, ValueError, jsonschema.ValidationError):
        return False


def check_calls(calls, what):
    check(calls and all(valid(c.function.name, c.function.arguments) for c in calls),
          f"{what}: {[(c.function.name, c.function.arguments) for c in calls or []]}")


def tool_loop(client):
    """call, result, call, result, answer: required, then named, then none."""
    msgs = [{"role": "user", "content": "What's the weather in Oslo, and what time is it there?"}]
    ids = []
    for choice in ("required", {"type": "function", "function": {"name": "get_time"}}):
        r = client.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS, tool_choice=choice,
                                           temperature=0, max_tokens=160)
        m = r.choices[0].message
        check(r.choices[0].finish_reason == "tool_calls", f"tool_choice {choice}: finish_reason tool_calls")
        check_calls(m.tool_calls, f"tool_choice {json.dumps(choice)}: calls that validate")
        if isinstance(choice, dict):
            check([c.function.name for c in m.tool_calls] == ["get_time"], "a named tool_choice calls that tool, once")
        msgs.append(m.model_dump(exclude_none=True))
        for c in m.tool_calls:
            ids.append(c.id)
            msgs.append({"role": "tool", "tool_call_id": c.id, "content": RESULTS[c.function.name]})
    check(len(set(ids)) == len(ids), f"every call of the conversation has its own id: {ids}")
    r = client.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS, tool_choice="none",
                                       temperature=0, max_tokens=80)
    m = r.choices[0].message
    check(r.choices[0].finish_reason in ("stop", "length") and not m.tool_calls and m.content,
          f"tool_choice none after two rounds: an answer in words: {m.content!r}")
    auto = client.chat.completions.create(model=MODEL, messages=msgs[:1], tools=TOOLS, temperature=0, max_tokens=160)
    am = auto.choices[0].message
    check((am.tool_calls and all(valid(c.function.name, c.function.arguments) for c in am.tool_calls))
          or (not am.tool_calls and am.content and "<tool_call>" not in am.content),
          f"tool_choice auto: calls that validate or words without a call's markup: {am.content!r} {am.tool_calls}")


def parallel_and_stream(client):
    msgs = [{"role": "user", "content": "What's the weather in Oslo and in Paris?"}]
    whole = client.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS, tool_choice="required",
                                           temperature=0, max_tokens=200)
    calls = whole.choices[0].message.tool_calls
    check_calls(calls, "parallel calls")
    check(len(calls) == 2 and "Oslo" in calls[0].function.arguments and "Paris" in calls[1].function.arguments,
          "two cities, two calls in one answer")
    one = client.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS, tool_choice="required",
                                         parallel_tool_calls=False, temperature=0, max_tokens=200)
    check(len(one.choices[0].message.tool_calls) == 1, "parallel_tool_calls false: one call")

    stream = client.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS, tool_choice="required",
                                            temperature=0, max_tokens=200, stream=True)
    got, content, finish, chunks = {}, "", None, 0
    for ch in stream:
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            chunks += 1
            e = got.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            if tc.id:
                check(e["id"] is None, "a call's id comes once, in its first chunk")
                e["id"] = tc.id
            if tc.function and tc.function.name:
                e["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                e["arguments"] += tc.function.arguments
        finish = ch.choices[0].finish_reason or finish
    streamed = [got[i] for i in sorted(got)]
    expect = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments} for c in calls]
    check(streamed == expect and finish == "tool_calls" and not content,
          f"streamed calls reassemble to the same calls, ids included ({chunks} chunks): {streamed}")
    check(chunks > 2 * len(calls), "arguments stream in pieces, not in one chunk at the end")


def langchain_agent(port):
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str, unit: str) -> str:
        """Current weather in a city; unit is celsius or fahrenheit."""
        return RESULTS["get_weather"]

    llm = ChatOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", model=MODEL, temperature=0,
                     max_tokens=160, max_retries=0)
    agent = llm.bind_tools([get_weather], tool_choice="get_weather")
    msgs = [HumanMessage("Is it warm in Lisbon right now?")]
    ai = agent.invoke(msgs)
    check(len(ai.tool_calls) >= 1 and ai.tool_calls[0]["name"] == "get_weather"
          and isinstance(ai.tool_calls[0]["args"].get("city"), str),
          f"LangChain bind_tools: the call arrives parsed: {ai.tool_calls}")
    msgs.append(ai)
    for call in ai.tool_calls:
        msgs.append(ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"]))
    final = llm.bind_tools([get_weather], tool_choice="none").invoke(msgs)
    check(not final.tool_calls and final.content, f"the agent loop ends in words: {final.content!r}")


def agents_sdk(port, responses=False):
    """The OpenAI Agents SDK on chat completions (or its default, the Responses API): a
    function tool, called, then an answer."""
    from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner,
                        function_tool, set_tracing_disabled)
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    asked = []

    @function_tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        asked.append(city)
        return "sunny, 21 C"

    client = AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
    model = (OpenAIResponsesModel if responses else OpenAIChatCompletionsModel)(model=MODEL, openai_client=client)
    # required for the first call (the SDK then resets it to auto, so the agent can answer).
    agent = Agent(name="weather", instructions="You answer questions about the weather with the tool.",
                  tools=[get_weather], model=model,
                  model_settings=ModelSettings(tool_choice="required", parallel_tool_calls=False, temperature=0,
                                               max_tokens=120))
    result = Runner.run_sync(agent, "What's the weather in Oslo?", max_turns=4)
    check(asked == ["Oslo"] and isinstance(result.final_output, str) and result.final_output,
          f"the OpenAI Agents SDK ({'Responses' if responses else 'chat'}) runs its tool ({asked}) and answers: "
          f"{result.final_output!r}")


def session_over_http(port):
    """A session keeps the call; the next turn sends only the result, naming the call's id."""
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0,
                           default_headers={"X-Troupe-Session": "agent-1"})
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Weather in Rome?"}],
                                       tools=TOOLS, tool_choice="required", temperature=0, max_tokens=120)
    calls = r.choices[0].message.tool_calls
    check_calls(calls, "a session turn's calls")
    nxt = client.chat.completions.create(
        model=MODEL, tools=TOOLS, tool_choice="none", temperature=0, max_tokens=60,
        messages=[{"role": "tool", "tool_call_id": calls[0].id, "content": RESULTS["get_weather"]}])
    check(nxt.choices[0].message.content, "the session's next turn answers the stored call by its id")
    try:
        client.chat.completions.create(model=MODEL, tools=TOOLS, temperature=0, max_tokens=20,
                                       messages=[{"role": "tool", "tool_call_id": "call_nope", "content": "x"}])
        check(False, "a result for a call the session never made is refused")
    except openai.BadRequestError as e:
        check("call_nope" in str(e), f"a result for a call the session never made: 400 naming it ({e.message})")


def bad_input(port):
    def post(body):
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    user = [{"role": "user", "content": "hi"}]
    cases = [
        ("a tool without a name", {"messages": user, "tools": [{"type": "function", "function": {"parameters": {}}}]},
         "function.name"),
        ("parameters the grammar engine refuses",
         {"messages": user, "tool_choice": "required", "tools": [{"type": "function", "function": {
             "name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "string",
                                                                               "pattern": "(?<=a)b"}}}}}]},
         "/tools/f/parameters"),
        ("a tool message whose id matches no call",
         {"messages": user + [{"role": "tool", "tool_call_id": "call_x", "content": "1"}], "tools": TOOLS}, "call_x"),
        ("a tool message without an id", {"messages": user + [{"role": "tool", "content": "1"}]}, "tool_call_id"),
        ("tool_choice naming a tool not given",
         {"messages": user, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
         "nope"),
        ("tool_choice required without tools", {"messages": user, "tool_choice": "required"}, "tool_choice"),
    ]
    for what, body, says in cases:
        status, reply = post(dict(body, model=MODEL, max_tokens=8))
        err = reply.get("error", {})
        check(status == 400 and says in err.get("message", "") and err.get("type") == "invalid_request_error",
              f"{what}: 400 with OpenAI's error object naming it ({err.get('message')})")


def zmq_tools(endpoint):
    with Client(endpoint) as c:
        s = c.chat([{"role": "user", "content": "Weather in Oslo?"}], tools=TOOLS, tool_choice="get_weather",
                   temperature=0, max_tokens=120)
        s.read()
        check(s.finish_reason == "tool_calls" and len(s.tool_calls) == 1 and valid("get_weather", s.tool_calls[0]["arguments"]),
              f"ZeroMQ: a named call that validates: {s.tool_calls}")
        follow = c.chat([{"role": "user", "content": "Weather in Oslo?"},
                         {"role": "assistant", "content": "", "tool_calls": s.tool_calls},
                         {"role": "tool", "tool_call_id": s.tool_calls[0]["id"], "content": RESULTS["get_weather"]}],
                        tools=TOOLS, tool_choice="none", temperature=0, max_tokens=40)
        follow.read()
        check(follow.finish_reason in ("stop", "length") and follow.text, "ZeroMQ: the result goes back, words come out")
        try:
            c.chat([{"role": "user", "content": "hi"}], tools=[{"type": "function", "function": {"name": "a b"}}],
                   max_tokens=4).read()
            check(False, "ZeroMQ: a bad tool name is refused")
        except TroupeError as e:
            check(e.code == "invalid_field", f"ZeroMQ: a bad tool name is refused: {e}")


def main():
    troupe, work, model = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    data = tempfile.mkdtemp(prefix="tools-", dir=work)
    port = free_port()
    endpoint = f"ipc://{data}/serve.sock"
    server = start_http_server([troupe, "serve", "-m", model, "--listen", endpoint, "--http", f"127.0.0.1:{port}",
                                "--threads", "2", "--kv-tokens", "16384", "--data-dir", f"{data}/store"],
                               port, os.path.join(work, "tools-serve.log"), wait_s=180)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
        tool_loop(client)
        parallel_and_stream(client)
        langchain_agent(port)
        agents_sdk(port)
        session_over_http(port)
        bad_input(port)
        zmq_tools(endpoint)
        check(server.poll() is None, "the server serves on after all of it")
    finally:
        server.terminate()
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
