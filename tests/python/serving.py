"""What the service tests share: a `troupe serve` process started with --http
and waited for until /readyz answers 200, a free loopback port, a GET, and
check()."""
import http.client
import os
import socket
import subprocess
import time


def check(ok, what):
    """Ends the test with FAILED: `what` unless `ok`; prints ok: `what` otherwise."""
    if not ok:
        raise SystemExit("FAILED: " + what)
    print("ok:", what)


def http_get(port, path, source="127.0.0.1", timeout=10):
    """(status, body text) of GET path on the loopback port, sent from `source`."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read().decode()
    finally:
        c.close()


def start_http_server(argv, port, log_path, wait_s=60):
    """Starts argv (a `troupe serve ... --http 127.0.0.1:PORT` line), its output
    appended to log_path; returns the process once /readyz answers 200."""
    server = subprocess.Popen(argv, stdout=open(log_path, "a"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            if http_get(port, "/readyz", timeout=2)[0] == 200:
                return server
        except OSError:
            pass
        if server.poll() is not None:
            break
        time.sleep(0.05)
    server.kill()
    raise SystemExit("server did not start: " + open(log_path).read())


def start_server(argv, log_path, wait_s=180):
    """Starts argv (a `troupe serve ...` line), its output appended to log_path; returns the process
    once it logs "listening on" (counted past the log's earlier starts, so a restart on the same log
    waits for its own)."""
    before = open(log_path).read().count("listening on") if os.path.exists(log_path) else 0
    server = subprocess.Popen(argv, stdout=open(log_path, "a"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if open(log_path).read().count("listening on") > before:
            return server
        if server.poll() is not None:
            break
        time.sleep(0.1)
    server.kill()
    raise SystemExit("server did not start: " + open(log_path).read())


def free_port():
    """A TCP port on the loopback address that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_with_store(troupe, model, data, port, log_path):
    """`troupe serve` of the model with --http on `port`, its store and socket in `data`
    (so a restart on the same `data` resumes what it stored)."""
    return start_http_server([troupe, "serve", "-m", model, "--listen", f"ipc://{data}/serve.sock", "--http",
                              f"127.0.0.1:{port}", "--threads", "2", "--kv-tokens", "16384", "--data-dir",
                              f"{data}/store"], port, log_path, wait_s=180)
