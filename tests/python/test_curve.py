#!/usr/bin/env python3
"""The Python client against a real `troupe serve --auth curve`: its keys get
in, job events reach only the job's owner (the event socket admits a
subscription only to one's own jobs; an admin's to any), and the owner shows
in listings.

    test_curve.py TROUPE_BINARY WORK_DIR
(PYTHONPATH must hold the generated classes, build/python, and clients/python.)
"""
import os
import shutil
import subprocess
import sys
import time

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


def main(troupe, work):
    work = os.path.join(work, f"curve-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "clients"))
    keys = os.path.join(work, "keys")
    for name in ("server", "alice", "bob", "root", "mallory"):
        subprocess.run([troupe, "keygen", os.path.join(keys, name)], check=True, capture_output=True)
    for name in ("alice", "bob"):
        shutil.copy(os.path.join(keys, f"{name}.key"), os.path.join(work, "clients"))
    with open(os.path.join(work, "clients", "root.key"), "w") as f:
        f.write(open(os.path.join(keys, "root.key")).read() + "admin = true\n")
    model = os.path.join(work, "m.gguf")
    subprocess.run([troupe, "make-model", "-o", model, "--embd", "128", "--ff", "256", "--seed", "5"], check=True,
                   capture_output=True)
    endpoint, events = f"ipc://{work}/s.sock", f"ipc://{work}/s.sock.events"
    log = open(os.path.join(work, "serve.log"), "w")
    server = subprocess.Popen([troupe, "serve", "-m", model, "--listen", endpoint, "--threads", "1", "--kv-tokens", "8192",
                               "--data-dir", os.path.join(work, "data"), "--auth", "curve",
                               "--server-key", os.path.join(keys, "server.secret"),
                               "--clients-dir", os.path.join(work, "clients")], stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(1200):  # 60 s: CI runs other servers beside this one
            if "listening on" in open(log.name).read():
                break
            time.sleep(0.05)
        else:
            raise SystemExit("server did not start: " + open(log.name).read())
        server_key = os.path.join(keys, "server.key")

        def keyed(name):
            return {"client_key": os.path.join(keys, f"{name}.secret"), "server_key": server_key}

        # Who gets in.
        for who, kw in (("no key", {}), ("an unknown key", keyed("mallory"))):
            try:
                Client(endpoint, connect_timeout=1.0, **kw).close()
                check(False, f"{who} got in")
            except ConnectionError:
                pass
        ctx = zmq.Context()
        with Client(endpoint, **keyed("alice")) as alice, Client(endpoint, **keyed("bob")) as bob:
            check(alice.ping() is not None, "alice pings")
            job = alice.submit_job(["one", "two", "three"], "Say: {item}", max_tokens=8, temperature=0)
            job_id = job["job_id"]
            check(job["owner"] == "alice", f"the job is alice's: {job}")
            mine = subscribe_events(events, job_id, context=ctx, **keyed("alice"))
            peek = subscribe_events(events, job_id, context=ctx, **keyed("bob"))
            everything = subscribe_events(events, "", context=ctx, **keyed("bob"))
            admin = subscribe_events(events, "", context=ctx, **keyed("root"))
            anonymous = subscribe_events(events, "", context=ctx)
            time.sleep(0.5)  # subscriptions are admitted every 50 ms
            # A second job, submitted with every subscriber in place, so its events are all after them.
            second = alice.submit_job(["four", "five"], "Say: {item}", max_tokens=8, temperature=0)["job_id"]
            mine.setsockopt(zmq.SUBSCRIBE, second.encode())
            peek.setsockopt(zmq.SUBSCRIBE, second.encode())
            for _ in range(600):
                if alice.job_status(second)["state"] != "running" and alice.job_status(job_id)["state"] != "running":
                    break
                time.sleep(0.1)
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
        ctx.term()
        print("curve: ok")
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
