#!/usr/bin/env python3
"""Stream a chat answer from a running `troupe serve` with the Python client.

    build/troupe serve -m qwen2.5-coder-0.5b &
    PYTHONPATH=build/python:clients/python python3 examples/python_client.py "Write a haiku about compilers"
"""
import sys

from troupe_client import Client

question = sys.argv[1] if len(sys.argv) > 1 else "Write a haiku about compilers."
with Client("tcp://127.0.0.1:7700") as client:
    stream = client.chat([("user", question)], max_tokens=200, temperature=0.3)
    for text in stream:
        print(text, end="", flush=True)
    print(f"\n[{stream.usage['completion_tokens']} tokens, first after {stream.timings['ttft_ms']:.0f} ms, "
          f"finish: {stream.finish_reason}]", file=sys.stderr)
