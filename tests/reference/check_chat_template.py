#!/usr/bin/env python3
"""troupe's prompts against each model's own chat template: every GGUF given
(those absent are skipped, said so) has its tokenizer.chat_template rendered
with Jinja2 as Hugging Face's apply_chat_template renders it (a sandboxed
environment, trim_blocks and lstrip_blocks, tojson as json.dumps with UTF-8
as is), for conversations with tools, an assistant's calls, tool results
and plain turns; `troupe tokenize --chat` must give the same text.

    check_chat_template.py TROUPE_BINARY GGUF [GGUF...]
"""
import json
import os
import subprocess
import sys

import jinja2
import jinja2.sandbox
from gguf import GGUFReader

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Wetter für eine Stadt → °C",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}


def call(i, name, args):
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}


CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "Hello"}]},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"}],
     "tools": [WEATHER, TIME]},
    {"messages": [{"role": "user", "content": "Weather in Oslo and the time?"},
                  {"role": "assistant", "content": "",
                   "tool_calls": [call(1, "get_weather", {"city": "Oslo", "days": [1, 2]}), call(2, "get_time", {})]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "{\"t\": 21}"},
                  {"role": "tool", "tool_call_id": "call_2", "content": "14:05"},
                  {"role": "assistant", "content": "21 °C at 14:05."},
                  {"role": "user", "content": "Thanks"}],
     "tools": [WEATHER, TIME]},
    {"messages": [{"role": "user", "content": "Zürich?"},
                  {"role": "assistant", "content": "Let me look.",
                   "tool_calls": [call(3, "get_weather", {"city": "Zürich"})]},
                  {"role": "tool", "tool_call_id": "call_3", "content": "sunny"}],
     "tools": [WEATHER]},
]


def hf_environment():
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=["jinja2.ext.loopcontrols"])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def reference(template, conv):
    """The template's prompt; OpenAI's arguments text given to it as the object HF passes."""
    msgs = json.loads(json.dumps(conv["messages"]))
    return hf_environment().from_string(template).render(messages=msgs, tools=conv.get("tools"),
                                                         add_generation_prompt=True)


def as_openai(conv):
    """The conversation as an OpenAI client sends it: arguments as JSON text."""
    c = json.loads(json.dumps(conv))
    for m in c["messages"]:
        for tc in m.get("tool_calls", []):
            tc["function"]["arguments"] = json.dumps(tc["function"]["arguments"])
    return c


def main():
    troupe, ggufs = sys.argv[1], sys.argv[2:]
    checked = 0
    for path in ggufs:
        if not os.path.exists(path):
            print(f"skipped: {path} is not here")
            continue
        field = GGUFReader(path).fields.get("tokenizer.chat_template")
        if field is None:
            print(f"skipped: {os.path.basename(path)} has no chat template")
            continue
        template = bytes(field.parts[field.data[0]]).decode()
        lines = "".join(json.dumps(as_openai(c)) + "\n" for c in CONVERSATIONS)
        out = subprocess.run([troupe, "tokenize", "--chat", "-m", path], input=lines, capture_output=True, text=True,
                             check=True).stdout.splitlines()
        for i, (conv, line) in enumerate(zip(CONVERSATIONS, out)):
            want, got = reference(template, conv), json.loads(line)["text"]
            if want != got:
                at = next((k for k in range(min(len(want), len(got))) if want[k] != got[k]), min(len(want), len(got)))
                sys.exit(f"FAILED: {os.path.basename(path)}, conversation {i}: troupe's prompt differs from the "
                         f"template's at character {at}:\n  template: {want[max(0, at - 60):at + 60]!r}\n"
                         f"  troupe:   {got[max(0, at - 60):at + 60]!r}")
            checked += 1
        print(f"ok: {os.path.basename(path)}: {len(CONVERSATIONS)} conversations render as its own template does")
    if not checked:
        sys.exit("FAILED: no model with a chat template was given")


if __name__ == "__main__":
    main()
