#!/usr/bin/env python3
"""The Files and Batch APIs end to end on the real default model, with the
`openai` package as a client: a JSONL file of 100 chat requests uploaded,
a batch made of it, the server killed (SIGKILL) part way and started again,
the batch then completed with exactly one response per line (custom_ids
and order kept, greedy answers equal to the same requests sent alone); a
completions batch; a cancelled batch; files listed, read back and deleted;
bad input (a line that is not JSON, a line asking to stream, a wrong
purpose, an unknown file, a file over the limit), each a 4xx with OpenAI's
error object and nothing stored.

    test_batch.py TROUPE_BINARY WORK_DIR MODEL_PATH
(PYTHONPATH must hold build/python and clients/python.)
"""
import io
import json
import os
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request

import openai

from serving import check, free_port, serve_with_store

MODEL = "qwen2.5-coder-0.5b"


def start(troupe, model, data, port, work):
    return serve_with_store(troupe, model, data, port, os.path.join(work, "batch-serve.log"))


def jsonl(lines):
    return io.BytesIO("".join(json.dumps(x) + "\n" for x in lines).encode())


def chat_line(i):
    return {"custom_id": f"task-{i:03d}", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": MODEL, "messages": [{"role": "user", "content": f"Write the number {i} in words."}],
                     "max_tokens": 12, "temperature": 0}}


def wait(client, batch_id, until, limit_s=600):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        b = client.batches.retrieve(batch_id)
        if until(b):
            return b
        time.sleep(0.5)
    raise SystemExit(f"FAILED: batch {batch_id} did not get there: {b}")


def hundred_across_kill(troupe, model, data, port, work, server, client):
    lines = [chat_line(i) for i in range(100)]
    f = client.files.create(file=("tasks.jsonl", jsonl(lines)), purpose="batch")
    check(f.id.startswith("file-") and f.purpose == "batch" and f.bytes > 0, f"the file is stored: {f.id}, {f.bytes} bytes")
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h",
                              metadata={"run": "kill-9"})
    check(b.status == "in_progress" and b.request_counts.total == 100 and b.metadata == {"run": "kill-9"},
          f"a batch of 100 requests is accepted: {b.id}")
    part = wait(client, b.id, lambda x: x.request_counts.completed >= 10)
    server.send_signal(signal.SIGKILL)
    server.wait()
    server = start(troupe, model, data, port, work)
    check(part.request_counts.completed < 100,
          f"the server was killed (SIGKILL) with {part.request_counts.completed} of 100 done, and started again")
    done = wait(client, b.id, lambda x: x.status == "completed")
    check(done.request_counts.completed == 100 and done.request_counts.failed == 0 and done.output_file_id
          and done.error_file_id is None, f"the batch completes after the restart: {done.request_counts}")
    out = [json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines()]
    check([o["custom_id"] for o in out] == [x["custom_id"] for x in lines],
          "the output file has one line per request, in the input's order, custom_ids kept")
    check(all(o["response"]["status_code"] == 200 and o["response"]["body"]["choices"][0]["message"]["content"]
              and o["error"] is None for o in out), "every line is a chat.completion with its answer")
    for i in (0, 42, 99):
        alone = client.chat.completions.create(**lines[i]["body"])
        check(out[i]["response"]["body"]["choices"][0]["message"]["content"] == alone.choices[0].message.content,
              f"line {i}'s answer equals the same request sent alone: "
              f"{alone.choices[0].message.content!r}")
    return server, f


def completions_and_cancel(client):
    lines = [{"custom_id": f"c{i}", "method": "POST", "url": "/v1/completions",
              "body": {"model": MODEL, "prompt": f"def add_{i}(a, b):", "max_tokens": 8, "temperature": 0}}
             for i in range(4)]
    f = client.files.create(file=("c.jsonl", jsonl(lines)), purpose="batch")
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/completions", completion_window="24h")
    done = wait(client, b.id, lambda x: x.status == "completed")
    out = [json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines()]
    check(len(out) == 4 and all(o["response"]["body"]["object"] == "text_completion" and
                                o["response"]["body"]["choices"][0]["text"] for o in out),
          "a completions batch answers text_completion bodies")
    many = client.files.create(file=("m.jsonl", jsonl([chat_line(i) for i in range(60)])), purpose="batch")
    b = client.batches.create(input_file_id=many.id, endpoint="/v1/chat/completions", completion_window="24h")
    cancelled = client.batches.cancel(b.id)
    check(cancelled.status == "cancelled" and cancelled.request_counts.completed < 60,
          f"a batch is cancelled part way: {cancelled.request_counts}")
    listed = [x.id for x in client.batches.list().data]
    check(b.id in listed and done.id in listed, "the batches are listed")


def files(client, port, first):
    listed = [x.id for x in client.files.list().data]
    check(first.id in listed, "the files are listed")
    check(client.files.retrieve(first.id).filename == "tasks.jsonl", "a file reads back with its name")
    check(client.files.content(first.id).text.count("\n") == 100, "its content reads back whole")
    check(client.files.delete(first.id).deleted, "a file is deleted")
    check(raw(port, "GET", f"/v1/files/{first.id}")[0] == 404, "a deleted file is gone")


def raw(port, method, path, body=None, headers=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method, data=body,
                                 headers=headers or {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        text = e.read()
        return e.code, json.loads(text) if text.startswith(b"{") else {}


def bad_input(client, port):
    before = len(client.batches.list().data)
    cases = [
        ("a line that is not JSON", [json.dumps(chat_line(5)).encode(), b"not json"], 400, "line 2"),
        ("a line asking to stream", [json.dumps({**chat_line(0), "body": {**chat_line(0)["body"], "stream": True}}).encode()],
         400, "stream"),
        ("a line for another endpoint", [json.dumps({**chat_line(0), "url": "/v1/embeddings"}).encode()], 400, "url"),
        ("two lines of one custom_id", [json.dumps(chat_line(1)).encode()] * 2, 400, "not unique"),
        ("a line whose body chat refuses", [json.dumps({**chat_line(0), "body": {"messages": []}}).encode()], 400,
         "messages"),
    ]
    for what, lines, status, said in cases:
        f = client.files.create(file=("bad.jsonl", io.BytesIO(b"\n".join(lines) + b"\n")), purpose="batch")
        got, body = raw(port, "POST", "/v1/batches", json.dumps({"input_file_id": f.id, "endpoint":
                                                                 "/v1/chat/completions",
                                                                 "completion_window": "24h"}).encode())
        msg = body.get("error", {}).get("message", "")
        check(got == status and said in msg, f"{what}: {got} {msg[:100]}")
    got, body = raw(port, "POST", "/v1/batches", json.dumps({"input_file_id": "file-0123456789abcdef01234567",
                                                             "endpoint": "/v1/chat/completions",
                                                             "completion_window": "24h"}).encode())
    check(got == 404, f"an unknown input file: {got} {body.get('error', {}).get('message')}")
    try:
        client.files.create(file=("x.jsonl", jsonl([chat_line(0)])), purpose="fine-tune")
        check(False, "a file for another purpose is refused")
    except openai.BadRequestError as e:
        check("purpose" in str(e), f"a file for another purpose is refused: {e}")
    try:
        client.files.create(file=("big.jsonl", io.BytesIO(b"x" * (5 << 20))), purpose="batch")
        check(False, "a file over the limit is refused")
    except openai.APIStatusError as e:
        check(e.status_code == 413, f"a file over the limit is refused before it is stored: {e.status_code}")
    check(len(client.batches.list().data) == before, "no refused batch was stored")


def main():
    troupe, work, model = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    data = tempfile.mkdtemp(prefix="batch-", dir=work)
    port = free_port()
    server = start(troupe, model, data, port, work)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
        server, first = hundred_across_kill(troupe, model, data, port, work, server, client)
        completions_and_cancel(client)
        files(client, port, first)
        bad_input(client, port)
        check(server.poll() is None, "the server serves on after all of it")
    finally:
        server.kill()
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
