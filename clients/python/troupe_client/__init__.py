"""Python client of `troupe serve` (docs/PROTOCOL.md): a DEALER socket, the
FlatBuffers classes Debian's flatc generates from messages/client.fbs (the
build writes them to build/python), and a streaming iterator API.

    from troupe_client import Client
    with Client("tcp://127.0.0.1:7700") as c:
        for text in c.generate("def fib(n):", max_tokens=64, temperature=0):
            print(text, end="", flush=True)
"""
from .client import Client
from .errors import TroupeError
from .events import parse_job_event, subscribe_events
from .keys import read_key_file
from .stream import Stream

__all__ = ["Client", "Stream", "TroupeError", "parse_job_event", "read_key_file", "subscribe_events"]
