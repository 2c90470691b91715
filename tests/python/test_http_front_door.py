#!/usr/bin/env python3
"""The HTTP front door cannot be held shut (loopback only): 1,000 connections
holding partial requests, then 200 trickling header lines, while real
requests are answered in under a second each; the partial and trickling
connections are closed at the header deadline; pipelined requests are
answered in order; a 100 GB Content-Length is refused 413 at once; the
per-address cap refuses the connection past it. The server's RSS is recorded
before and after each part.

    test_http_front_door.py TROUPE_BINARY WORK_DIR
"""
import http.client
import json
import os
import resource
import socket
import subprocess
import sys
import time

from serving import check, free_port, http_get, start_http_server

HEADER_TIMEOUT = 3.0
PER_ADDRESS = 64


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def start(troupe, work, port):
    model = os.path.join(work, "front-door.gguf")
    subprocess.run([troupe, "make-model", "-o", model, "--embd", "128", "--ff", "256", "--seed", "13"], check=True,
                   capture_output=True)
    return start_http_server([troupe, "serve", "-m", model, "--listen", f"ipc://{work}/front-door-{os.getpid()}.sock",
                              "--http", f"127.0.0.1:{port}", "--threads", "1", "--kv-tokens", "8192",
                              "--http-header-timeout", str(HEADER_TIMEOUT),
                              "--http-max-connections-per-address", str(PER_ADDRESS),
                              "--data-dir", os.path.join(work, f"front-door-{os.getpid()}.data")],
                             port, os.path.join(work, "front-door-serve.log"))


def real_requests(port):
    """A models listing and a chat completion, each timed; the slower time."""
    worst = 0.0
    t0 = time.monotonic()
    status, body = http_get(port, "/v1/models")
    worst = max(worst, time.monotonic() - t0)
    check(status == 200 and "data" in json.loads(body), f"/v1/models answered ({status})")
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "hi"}],
                                                          "max_tokens": 4, "temperature": 0}),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    answer = json.loads(r.read())
    worst = max(worst, time.monotonic() - t0)
    check(r.status == 200 and answer["choices"][0]["finish_reason"] in ("length", "stop"), "a chat completion answered")
    c.close()
    return worst


def open_partial(port, n, first_source=2):
    """n connections from 127.0.0.2, .3, ... (PER_ADDRESS - 1 each), each holding half a request line."""
    conns = []
    for i in range(n):
        source = f"127.0.0.{first_source + i // (PER_ADDRESS - 1)}"
        s = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
        s.sendall(b"POST /v1/chat/completions HT")
        conns.append(s)
    return conns


def closed_by_server(s, wait):
    """True when the server closed the connection within `wait` seconds."""
    s.settimeout(wait)
    try:
        while True:
            data = s.recv(4096)
            if not data:
                return True
    except (socket.timeout, TimeoutError):
        return False
    except OSError:
        return True


def raise_fd_limit():
    """The parts below hold over a thousand sockets at once."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192) if hard != resource.RLIM_INFINITY else 8192, hard))


def check_partial_requests(server, port):
    """1. A thousand connections holding partial requests."""
    base = rss_kib(server.pid)
    conns = open_partial(port, 1000)
    worst = real_requests(port)
    held = rss_kib(server.pid)
    check(worst < 1.0, f"with 1,000 partial requests held, real requests took at most {worst:.3f} s")
    print(f"RSS: {base} KiB before, {held} KiB holding 1,000 partial requests "
          f"({(held - base) / 1000:.1f} KiB a connection)")
    closed = sum(closed_by_server(s, HEADER_TIMEOUT + 3) for s in conns)
    check(closed == 1000, f"{closed} of 1,000 partial requests closed at the {HEADER_TIMEOUT} s header deadline")
    for s in conns:
        s.close()
    time.sleep(0.5)
    after = rss_kib(server.pid)
    print(f"RSS after they closed: {after} KiB")


def trickle_once(alive):
    """One more header line on each connection still open; returns those the server has not cut,
    and how many it has."""
    still, cut = [], 0
    for s in alive:
        try:
            s.sendall(b"X-Trickle: 1\r\n")
            s.setblocking(False)
            try:
                if s.recv(4096) == b"":
                    cut += 1
                    continue
            except BlockingIOError:
                pass
            finally:
                s.setblocking(True)
            still.append(s)
        except OSError:
            cut += 1
    return still, cut


def check_trickling_headers(server, port):
    """2. Two hundred connections trickling header lines, one every 0.5 s."""
    trickle = open_partial(port, 200, first_source=40)
    for s in trickle:
        s.sendall(b"TP/1.1\r\nHost: x\r\n")
    started = time.monotonic()
    worst = 0.0
    alive = list(trickle)
    cut = 0
    while alive and time.monotonic() - started < HEADER_TIMEOUT + 5:
        alive, newly_cut = trickle_once(alive)
        cut += newly_cut
        worst = max(worst, real_requests(port))
        time.sleep(0.5)
    elapsed = time.monotonic() - started
    check(worst < 1.0, f"with 200 connections trickling headers, real requests took at most {worst:.3f} s")
    check(not alive, f"all 200 trickling connections were cut ({cut} seen cut, within {elapsed:.1f} s)")
    print(f"RSS after the trickle: {rss_kib(server.pid)} KiB")
    for s in trickle:
        s.close()


def check_pipelining(port):
    """3. Pipelining: three requests in one write, three answers in order."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
              b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
              b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    text = data.decode()
    answers = text.count("HTTP/1.1 200")
    order = [text.find("ok\n"), text.find('"object":"list"'), text.find("ready\n")]
    check(answers == 3 and -1 not in order and order == sorted(order),
          f"three pipelined requests answered in order ({answers} answers, at {order})")


def check_huge_body(port):
    """4. A 100 GB body announced: 413 at once, the body never read."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    t0 = time.monotonic()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 100000000000\r\n\r\n{")
    reply = s.recv(65536).decode()
    took = time.monotonic() - t0
    s.close()
    check(reply.startswith("HTTP/1.1 413") and took < 1.0, f"a 100 GB Content-Length: {reply[:12]!r} in {took:.3f} s")


def check_per_address_cap(port):
    """5. The per-address cap: the connection past it is answered 503 and closed."""
    mine = [socket.create_connection(("127.0.0.1", port), timeout=10, source_address=("127.0.0.99", 0))
            for _ in range(PER_ADDRESS)]
    time.sleep(0.2)
    extra = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=("127.0.0.99", 0))
    reply = extra.recv(65536).decode()
    check(reply.startswith("HTTP/1.1 503") and "connections" in reply,
          f"connection {PER_ADDRESS + 1} from one address: {reply[:12]!r}")
    status, _ = http_get(port, "/healthz")
    check(status == 200, "another address is still served")
    for s in mine + [extra]:
        s.close()


def main():
    troupe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    raise_fd_limit()
    port = free_port()
    server = start(troupe, work, port)
    try:
        check_partial_requests(server, port)
        check_trickling_headers(server, port)
        check_pipelining(port)
        check_huge_body(port)
        check_per_address_cap(port)
        _, metrics = http_get(port, "/metrics")
        check("troupe_http_connections_refused_total" in metrics and 'reason="header_timeout"' in metrics,
              "/metrics counts the front door's refusals")
        print("http front door: all checks passed")
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
