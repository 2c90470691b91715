#!/usr/bin/env python3
"""The Python client against a real `troupe serve --auth curve`: its keys get
in, job events reach only the job's owner (the event socket admits a
subscription only to one's own jobs; an admin's to any), and the owner shows
in listings. The same server's HTTP port (--http) takes the bearer tokens of
`troupe keygen --http-token` as the same clients: no token or a wrong one is
a 401, the openai package with a token works, and sessions and jobs made over
HTTP are their owner's on both ports.

    test_curve.py TROUPE_BINARY WORK_DIR
(PYTHONPATH must hold the generated classes, build/python, and clients/python.)
"""
import http.client
import json
import os
import shutil
import subprocess
import sys
import time

import openai

from serving import free_port
import zmq

from troupe_client import Client, TroupeError, parse_job_event, subscribe_events


def check(ok, what):
    if not ok:
        raise SystemExit(f"FAIL: {what}")


def events_of(sock, seconds):
    """Every JobEvent that arrives on `sock` within `seconds`."""
    out, end = [], time.time() + seconds
    while time.time() < end:
        if sock.poll(100):
            frames = sock.recv_multipart()
            out.append(parse_job_event(frames[1]))
    return out


def keyed(keys, name):
    """The Client / subscribe_events arguments that sign in as `name`."""
    return {"client_key": os.path.join(keys, f"{name}.secret"), "server_key": os.path.join(keys, "server.key")}


def make_keys(troupe, work):
    """Keys for the server and four clients; alice and bob admitted, root as admin, mallory not."""
    keys = os.path.join(work, "keys")
    for name in ("server", "alice", "bob", "root", "mallory"):
        subprocess.run([troupe, "keygen", "--http-token", os.path.join(keys, name)], check=True, capture_output=True)
    for name in ("alice", "bob"):
        shutil.copy(os.path.join(keys, f"{name}.key"), os.path.join(work, "clients"))
    with open(os.path.join(work, "clients", "root.key"), "w") as f:
        f.write(open(os.path.join(keys, "root.key")).read() + "admin = true\n")
    return keys


def start_server(troupe, work, keys, model, endpoint, port, log):
    return subprocess.Popen([troupe, "serve", "-m", model, "--listen", endpoint, "--threads", "1", "--kv-tokens", "8192",
                             "--http", f"127.0.0.1:{port}",
                             "--data-dir", os.path.join(work, "data"), "--auth", "curve",
                             "--server-key", os.path.join(keys, "server.secret"),
                             "--clients-dir", os.path.join(work, "clients")], stdout=log, stderr=subprocess.STDOUT)


def wait_listening(log):
    for _ in range(1200):  # 60 s: CI runs other servers beside this one
        if "listening on" in open(log.name).read():
            return
        time.sleep(0.05)
    raise SystemExit("server did not start: " + open(log.name).read())


def check_who_gets_in(endpoint, keys):
    for who, kw in (("no key", {}), ("an unknown key", keyed(keys, "mallory"))):
        try:
            Client(endpoint, connect_timeout=1.0, **kw).close()
            check(False, f"{who} got in")
        except ConnectionError:
            pass


def wait_jobs_done(alice, *job_ids):
    for _ in range(600):
        if all(alice.job_status(j)["state"] != "running" for j in job_ids):
            return
        time.sleep(0.1)


def check_job_events(alice, bob, events, keys, ctx):
    """Job events reach the owner and the admin only; bob can neither list nor read alice's job.
    Returns alice's first job's id."""
    job = alice.submit_job(["one", "two", "three"], "Say: {item}", max_tokens=8, temperature=0)
    job_id = job["job_id"]
    check(job["owner"] == "alice", f"the job is alice's: {job}")
    mine = subscribe_events(events, job_id, context=ctx, **keyed(keys, "alice"))
    peek = subscribe_events(events, job_id, context=ctx, **keyed(keys, "bob"))
    everything = subscribe_events(events, "", context=ctx, **keyed(keys, "bob"))
    admin = subscribe_events(events, "", context=ctx, **keyed(keys, "root"))
    anonymous = subscribe_events(events, "", context=ctx)
    time.sleep(0.5)  # subscriptions are admitted every 50 ms
    # A second job, submitted with every subscriber in place, so its events are all after them.
    second = alice.submit_job(["four", "five"], "Say: {item}", max_tokens=8, temperature=0)["job_id"]
    mine.setsockopt(zmq.SUBSCRIBE, second.encode())
    peek.setsockopt(zmq.SUBSCRIBE, second.encode())
    wait_jobs_done(alice, second, job_id)
    got = {name: events_of(sock, 1.5) for name, sock in
           (("alice", mine), ("bob", peek), ("bob all", everything), ("admin", admin), ("anonymous", anonymous))}
    finished = [e for e in got["alice"] if e["kind"] == "job_finished"]
    check(any(e["job"]["job_id"] == second for e in finished), f"alice hears her job finish: {got['alice']}")
    check(not got["bob"] and not got["bob all"], f"bob hears nothing of alice's jobs: {got['bob']} {got['bob all']}")
    check(not got["anonymous"], "a subscriber without a key hears nothing")
    check(any(e["job"]["job_id"] == second for e in got["admin"]), f"the admin hears every job: {got['admin']}")
    # Listings and reads.
    check([j["job_id"] for j in bob.list_jobs()] == [], "bob lists no job")
    try:
        bob.job_status(job_id)
        check(False, "bob reads alice's job")
    except TroupeError as e:
        check(e.code == "forbidden", f"bob's read: {e}")
    for s in (mine, peek, everything, admin, anonymous):
        s.close(0)
    return job_id


def main(troupe, work):
    work = os.path.join(work, f"curve-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "clients"))
    keys = make_keys(troupe, work)
    model = os.path.join(work, "m.gguf")
    subprocess.run([troupe, "make-model", "-o", model, "--embd", "128", "--ff", "256", "--seed", "5"], check=True,
                   capture_output=True)
    endpoint, events = f"ipc://{work}/s.sock", f"ipc://{work}/s.sock.events"
    port = free_port()
    log = open(os.path.join(work, "serve.log"), "w")
    server = start_server(troupe, work, keys, model, endpoint, port, log)
    try:
        wait_listening(log)
        check_who_gets_in(endpoint, keys)
        ctx = zmq.Context()
        with Client(endpoint, **keyed(keys, "alice")) as alice, Client(endpoint, **keyed(keys, "bob")) as bob:
            check(alice.ping() is not None, "alice pings")
            job_id = check_job_events(alice, bob, events, keys, ctx)
            check_http(port, keys, alice, bob, job_id)
        ctx.term()
        print("curve: ok")
    finally:
        server.terminate()
        server.wait(30)


def http_token(keys, name):
    for line in open(os.path.join(keys, f"{name}.secret")):
        if line.startswith("http-token ="):
            return line.split("=", 1)[1].strip()
    raise SystemExit(f"FAIL: no http-token in {name}.secret")


def call(port, method, path, token=None, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = "Bearer " + token
    c.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
    r = c.getresponse()
    text = r.read().decode()
    return r.status, json.loads(text) if text.startswith("{") else text


def check_http(port, keys, alice_zmq, bob_zmq, alice_job):
    """Bearer tokens on the HTTP port act as the same clients as their CURVE keys."""
    for who, token in (("no token", None), ("a wrong token", "0" * 64), ("a token of a client not admitted",
                                                                          http_token(keys, "mallory"))):
        status, body = call(port, "GET", "/v1/models", token)
        check(status == 401 and body["error"]["code"] == "invalid_api_key", f"{who} on /v1/models: {status} {body}")
        status, _ = call(port, "POST", "/v1/chat/completions", token,
                         {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        check(status == 401, f"{who} on chat completions: {status}")
    check(call(port, "GET", "/healthz")[0] == 200, "/healthz is open")
    check(call(port, "GET", "/metrics")[0] == 200, "/metrics is open (aggregate figures only)")
    check(call(port, "GET", "/")[0] == 200, "the web page is open (it asks for the key)")
    alice = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=http_token(keys, "alice"), max_retries=0)
    reply = alice.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello"}], max_tokens=4,
                                          temperature=0, extra_body={"session": "alice-http"})
    check(reply.choices[0].message.content is not None and reply.usage.completion_tokens > 0,
          f"alice chats over HTTP with her token: {reply}")
    try:
        openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="not-a-token", max_retries=0).models.list()
        check(False, "the openai package got in with a wrong api_key")
    except openai.AuthenticationError:
        pass
    # Ownership is the identity's, whichever port made the thing.
    check(any(s["session_id"] == "alice-http" for s in alice_zmq.list_sessions()),
          "alice's HTTP session is hers over ZeroMQ")
    check(not any(s["session_id"] == "alice-http" for s in bob_zmq.list_sessions()), "bob does not see it over ZeroMQ")
    bob = http_token(keys, "bob")
    status, body = call(port, "GET", "/v1/troupe/sessions", http_token(keys, "root"))
    check(status == 200 and any(s["id"] == "alice-http" and s["owner"] == "alice" for s in body["data"]),
          f"the admin's HTTP listing shows alice's session as hers: {body}")
    status, body = call(port, "GET", "/v1/troupe/sessions", bob)
    check(status == 200 and not any(s["id"] == "alice-http" for s in body["data"]),
          f"bob's HTTP listing leaves alice's session out: {body}")
    status, body = call(port, "GET", "/v1/troupe/sessions/alice-http", bob)
    check(status in (403, 404), f"bob cannot read alice's session over HTTP: {status} {body}")
    status, body = call(port, "GET", f"/v1/troupe/jobs/{alice_job}", bob)
    check(status == 403, f"bob cannot read alice's job over HTTP: {status} {body}")
    status, body = call(port, "GET", f"/v1/troupe/jobs/{alice_job}", http_token(keys, "alice"))
    check(status == 200, f"alice reads her job over HTTP: {status}")
    status, body = call(port, "GET", f"/v1/troupe/jobs/{alice_job}", http_token(keys, "root"))
    check(status == 200, f"the admin reads alice's job over HTTP: {status}")
    status, body = call(port, "POST", "/v1/troupe/jobs", bob, {"items": ["x"], "template": "Say {item}", "max_tokens": 2})
    check(status == 200 and body.get("owner") == "bob", f"bob's HTTP job is his: {status} {body}")
    # Responses: a chain is a session, its owner's alone.
    status, mine = call(port, "POST", "/v1/responses", http_token(keys, "alice"),
                        {"input": "Hello", "max_output_tokens": 4, "temperature": 0})
    check(status == 200 and mine["id"].startswith("resp_"), f"alice makes a response over HTTP: {status}")
    check(call(port, "POST", "/v1/responses", None, {"input": "Hello"})[0] == 401, "no token on /v1/responses: 401")
    for method, path, body in (("GET", f"/v1/responses/{mine['id']}", None),
                               ("POST", "/v1/responses", {"input": "more", "previous_response_id": mine["id"]}),
                               ("DELETE", f"/v1/responses/{mine['id']}", None)):
        status, answer = call(port, method, path, bob, body)
        check(status in (403, 404), f"bob cannot {method} alice's response: {status} {answer}")
    status, body = call(port, "GET", f"/v1/responses/{mine['id']}", http_token(keys, "alice"))
    check(status == 200 and body["id"] == mine["id"], f"alice reads her response back: {status}")
    # Files and batches: their uploader's.
    alice_files = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=http_token(keys, "alice"), max_retries=0)
    line = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
            "body": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}}
    f = alice_files.files.create(file=("a.jsonl", (json.dumps(line) + "\n").encode()), purpose="batch")
    batch = alice_files.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    for method, path, body in (("GET", f"/v1/files/{f.id}", None), ("GET", f"/v1/files/{f.id}/content", None),
                               ("DELETE", f"/v1/files/{f.id}", None), ("GET", f"/v1/batches/{batch.id}", None),
                               ("POST", f"/v1/batches/{batch.id}/cancel", None),
                               ("POST", "/v1/batches", {"input_file_id": f.id, "endpoint": "/v1/chat/completions",
                                                        "completion_window": "24h"})):
        status, answer = call(port, method, path, bob, body)
        check(status in (403, 404), f"bob cannot {method} {path.split('/')[2]} of alice's: {status}")
    status, body = call(port, "GET", "/v1/files", bob)
    check(status == 200 and not any(x["id"] == f.id for x in body["data"]), "bob's file listing leaves alice's out")
    check(call(port, "GET", "/v1/batches", None)[0] == 401, "no token on /v1/batches: 401")
    check(alice_files.batches.retrieve(batch.id).id == batch.id, "alice reads her batch")
    status, body = call(port, "GET", "/v1/troupe/stats", bob)
    check(status == 200 and "running" in body, f"an authenticated client reads stats: {status} {body}")
    print("curve over HTTP: ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
