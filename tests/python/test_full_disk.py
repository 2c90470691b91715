#!/usr/bin/env python3
"""A full disk, for real: `troupe serve --data-dir` on a small tmpfs that
another file fills. Turns are refused storage_failed and nothing acknowledged
is lost; the server keeps streaming; /readyz, /metrics and Stats say the
store is degraded; restarted on the full disk it comes up, shows the stored
session and refuses turns; once the other file is gone it takes turns again
by itself, with no restart. Mounting needs root (or CAP_SYS_ADMIN): elsewhere
it exits 77, which CTest reports as skipped.

    test_full_disk.py TROUPE_BINARY WORK_DIR
"""
import os
import subprocess
import sys
import time

from serving import check, free_port, http_get, start_http_server
from troupe_client import Client, TroupeError

SKIPPED = 77


def start(troupe, model, endpoint, port, data, log_path):
    return start_http_server([troupe, "serve", "-m", model, "--listen", endpoint, "--http", f"127.0.0.1:{port}",
                              "--threads", "1", "--kv-tokens", "8192", "--data-dir", data], port, log_path)


def fill(mount, room):
    """Another program takes all but `room` bytes of the disk."""
    filler = os.path.join(mount, "filler")
    if os.path.exists(filler):
        os.remove(filler)
    st = os.statvfs(mount)
    left = st.f_bavail * st.f_frsize - room
    with open(filler, "wb") as f:
        block = b"x" * 65536
        while left > 0:
            try:
                f.write(block[:min(left, len(block))])
                f.flush()
            except OSError:
                break
            left -= len(block)
    return filler


def turn(c, session, text):
    try:
        c.chat([("user", text)], max_tokens=4, temperature=0, session_id=session).read()
        return None
    except TroupeError as e:
        return e


def until(condition, within=10.0):
    """Whether `condition` holds within `within` seconds, asked every 50 ms."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def stored(c, session):
    """The user messages of a stored session's turns."""
    return [m[1] for m in c.show_session(session)["messages"]][::2]


def main():
    troupe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    mount = os.path.join(work, f"full-disk-{os.getpid()}")
    os.makedirs(mount, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", mount], capture_output=True).returncode != 0:
        print("skipped: cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)")
        sys.exit(SKIPPED)
    server = None
    try:
        model = os.path.join(work, "full-disk.gguf")
        subprocess.run([troupe, "make-model", "-o", model, "--embd", "128", "--ff", "256", "--seed", "11"],
                       check=True, capture_output=True)
        endpoint = f"ipc://{work}/full-disk-{os.getpid()}.sock"
        port = free_port()
        data = os.path.join(mount, "store")
        log = os.path.join(work, "full-disk-serve.log")
        server = start(troupe, model, endpoint, port, data, log)
        acked = {}  # session -> its one acknowledged turn (one turn each: none outgrows the context)
        with Client(endpoint, timeout=60) as c:
            for i in range(5):
                check(turn(c, f"s{i}", f"turn {i}") is None, f"turn {i} on a disk with room")
                acked[f"s{i}"] = f"turn {i}"
            fill(mount, 256 << 10)
            refused = None
            for i in range(5, 3000):
                text = f"turn {i} " + "y" * 1000
                e = turn(c, f"s{i}", text)
                if e is not None:
                    refused = e
                    break
                acked[f"s{i}"] = text
            check(refused is not None and refused.code == "storage_failed", f"a turn on the full disk: {refused}")
            stream = c.generate("still serving?", max_tokens=4, temperature=0)
            stream.read()
            check(stream.finish_reason in ("length", "stop"), "a stream that needs no write is served")
            check(all(stored(c, s) == [t] for s, t in acked.items()), f"all {len(acked)} acknowledged turns are there")
            # The persistence actor reports the store's state each second: wait for it, not a second.
            check(until(lambda: c.stats()["store_degraded"] != ""), "Stats says the store is degraded")
        status, body = http_get(port, "/readyz")
        check(status == 200 and "store degraded" in body, f"/readyz: {status} {body!r}")
        _, metrics = http_get(port, "/metrics")
        check("troupe_store_writable 0" in metrics, "/metrics: troupe_store_writable 0")
        server.kill()  # as a crash would: the WAL is replayed at the next start, on the full disk
        server.wait()

        server = start(troupe, model, endpoint, port, data, log)
        with Client(endpoint, timeout=60) as c:
            check(all(stored(c, s) == [t] for s, t in acked.items()), "restarted on the full disk: every turn is there")
            e = turn(c, "s0", "refused")
            check(e is not None and e.code == "storage_failed", f"restarted on the full disk: a turn is refused ({e})")
            os.remove(os.path.join(mount, "filler"))
            # The store is opened afresh each second: no write needs to ask.
            check(until(lambda: c.stats()["store_degraded"] == ""),
                  "the store takes writes again by itself once space returns")
            check(turn(c, "s0", "after") is None, "a turn once space returns")
            check(stored(c, "s0") == [acked["s0"], "after"], "that turn is stored")
        _, metrics = http_get(port, "/metrics")
        check("troupe_store_writable 1" in metrics, "/metrics: troupe_store_writable 1")
        status, body = http_get(port, "/readyz")
        check(status == 200 and "degraded" not in body, f"/readyz once writable: {body!r}")
        print("full disk: all checks passed")
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.wait()
        subprocess.run(["umount", mount], capture_output=True)
        os.rmdir(mount)


if __name__ == "__main__":
    main()
