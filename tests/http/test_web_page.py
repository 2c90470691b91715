#!/usr/bin/env python3
"""The built-in web page (GET /, gateways/web/index.html) in a real browser:
headless Chromium, driven over the Chrome DevTools Protocol on a pipe, against
a live `troupe serve --http` on a synthetic model. It chats (streamed text
appears), chats in a new server-side session, submits a job of 3 items and
waits for its progress bar to reach the end and its results, reads the
metrics, and saves a screenshot. No Python packages beyond the standard
library; exit status 77 (CTest: skipped) when chromium is not installed.

    test_web_page.py TROUPE_BINARY WORK_DIR
"""
import base64
import http.client
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 77


def check(ok, what):
    if not ok:
        raise SystemExit("FAILED: " + what)
    print("ok:", what, flush=True)


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def start_server(troupe, work):
    model = os.path.join(work, "web.gguf")
    # Big enough that 2000 tokens take seconds (Stop must find the stream
    # running), small enough to load at once.
    subprocess.run([troupe, "make-model", "-o", model, "--embd", "512", "--layers", "4", "--ff", "1024", "--seed", "5"],
                   check=True, capture_output=True)
    http_port, zmq_port, events_port = free_ports(3)
    log = open(os.path.join(work, "web-serve.log"), "w")
    server = subprocess.Popen([troupe, "serve", "-m", model, "--http", f"127.0.0.1:{http_port}",
                               "--listen", f"tcp://127.0.0.1:{zmq_port}", "--events", f"tcp://127.0.0.1:{events_port}",
                               "--threads", "1", "--kv-tokens", "8192",
                               "--data-dir", tempfile.mkdtemp(prefix="web-", suffix=".data", dir=work)],
                              stdout=log, stderr=subprocess.STDOUT)
    for _ in range(1200):  # 60 s: CI runs other servers beside this one
        try:
            c = http.client.HTTPConnection("127.0.0.1", http_port, timeout=2)
            c.request("GET", "/readyz")
            if c.getresponse().status == 200:
                return server, http_port
        except OSError:
            pass
        if server.poll() is not None:
            break
        time.sleep(0.05)
    server.terminate()
    raise SystemExit("server did not start: " + open(log.name).read())


def stats(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/v1/troupe/stats")
    return json.loads(c.getresponse().read())


class Browser:
    """Chromium with --remote-debugging-pipe: CDP JSON messages, each ended by
    a NUL byte; chromium reads them on its fd 3 and writes on its fd 4."""

    def __init__(self, chromium, work):
        import fcntl
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        # High copies, so that moving them onto 3 and 4 in the child cannot
        # clobber one with the other.
        hi_r = fcntl.fcntl(to_r, fcntl.F_DUPFD_CLOEXEC, 10)
        hi_w = fcntl.fcntl(from_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_r)
        os.close(from_w)

        def pipes_on_3_and_4():
            os.dup2(hi_r, 3)  # dup2's copies are inherited across exec
            os.dup2(hi_w, 4)

        self.profile = tempfile.mkdtemp(prefix="chromium-", dir=work)
        self.log = open(os.path.join(work, "chromium.log"), "w")
        args = [chromium, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--disable-sync", "--mute-audio", "--window-size=1200,900",
                f"--user-data-dir={self.profile}", "about:blank"]
        # The pipes go in on 3 and 4. Not pass_fds: it keeps a parent's fd under
        # its own number, and the parent's 3 and 4 may be other files. Without
        # close_fds only 0-2 and the dup2'd 3 and 4 are inherited (Python's
        # own descriptors are not inheritable, PEP 446).
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                     preexec_fn=pipes_on_3_and_4, close_fds=False)
        os.close(hi_r)
        os.close(hi_w)
        self.out, self.inp = to_w, from_r
        self.buf = b""
        self.next_id = 0
        self.events = []
        self.session = None

    def _read_message(self, deadline):
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer from chromium")
            ready, _, _ = select.select([self.inp], [], [], left)
            if ready:
                chunk = os.read(self.inp, 1 << 20)
                if not chunk:
                    raise SystemExit("chromium closed its pipe; its log: " + open(self.log.name).read()[-3000:])
                self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method, params=None, session=True, timeout=60):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        data = json.dumps(msg).encode() + b"\0"
        while data:
            data = data[os.write(self.out, data):]
        deadline = time.monotonic() + timeout
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise SystemExit(f"CDP {method}: {m['error']}")
                return m.get("result", {})
            if "method" in m:
                self.events.append(m)

    def open(self, url):
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Network"):
            self.call(domain + ".enable")
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": 1200, "height": 900, "deviceScaleFactor": 1, "mobile": False})
        self.call("Page.navigate", {"url": url})

    def js(self, expression):
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise SystemExit(f"page script {expression!r} threw: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait(self, expression, what, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.1)
        self.screenshot(os.path.join(os.path.dirname(self.log.name), "web-page-failed.png"))
        raise SystemExit(f"FAILED: timed out waiting for {what}; errors on the page: "
                         + repr(self.js("[...document.querySelectorAll('.error')].map(e => e.id + ': ' + "
                                        "e.textContent).filter(s => !s.endsWith(': '))")))

    def screenshot(self, path):
        png = base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"})["data"])
        with open(path, "wb") as f:
            f.write(png)
        return png

    def close(self):
        try:
            self.call("Browser.close", session=False, timeout=10)
        except (SystemExit, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.out)
        os.close(self.inp)
        shutil.rmtree(self.profile, ignore_errors=True)


def text_of(selector):
    return f"(document.querySelector({json.dumps(selector)}) || {{}}).textContent || ''"


def set_value(selector, value):
    return f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.value = {json.dumps(value)}; " \
           f"e.dispatchEvent(new Event('change')); return true; }})()"


def click(selector):
    return f"(document.querySelector({json.dumps(selector)}).click(), true)"


def check_chat(b, port):
    b.wait("document.readyState === 'complete' && !!document.getElementById('chat-send')", "the page to load")
    b.wait(f"{text_of('#model')} === 'web'", "the model name from /v1/models")
    check(True, "the page shows the model from GET /v1/models")
    b.js(set_value("#chat-max-tokens", "24"))
    b.js(set_value("#chat-temperature", "0"))
    b.js(set_value("#chat-input", "Hello there, who are you?"))
    # Count the answer's updates in the page: streamed, it grows chunk by chunk.
    b.js("""(() => {
      window.answerUpdates = 0;
      new MutationObserver(() => { window.answerUpdates++; })
        .observe(document.getElementById('chat-log'), { childList: true, subtree: true, characterData: true });
      document.getElementById('chat-send').click();
      return true; })()""")
    b.wait(f"{text_of('#chat-log .msg.assistant .content')}.length > 0", "streamed text in the chat log")
    check(True, "streamed text appears in the chat log")
    b.wait("!document.getElementById('chat-send').disabled", "the stream to end")
    updates = b.js("window.answerUpdates")
    check(updates > 3, f"it arrived in pieces ({updates} updates of the chat log)")
    check(b.js(text_of("#chat-error")) == "", "no error: " + b.js(text_of("#chat-error")))
    check(b.js(text_of("#chat-status")).startswith("finished"), "the stream finished: " + b.js(text_of("#chat-status")))
    # A second turn without a session sends the whole conversation.
    b.js(set_value("#chat-input", "And again?"))
    b.js(click("#chat-send"))
    b.wait("document.querySelectorAll('#chat-log .msg.assistant').length === 2 && "
           "!document.getElementById('chat-send').disabled", "the second answer")
    check(b.js(text_of("#chat-error")) == "", "a second turn without a session: " + b.js(text_of("#chat-error")))

    # Stop, at the first text of a long answer (a MutationObserver clicks it
    # in the page, before the next chunk): the page aborts the fetch, and the
    # server cancels the stream on the disconnect, long before its 2000 tokens.
    before = stats(port)["tokens_generated"]
    b.js(set_value("#chat-max-tokens", "2000"))
    b.js(set_value("#chat-temperature", "0.9"))
    b.js(set_value("#chat-input", "Tell me a long story."))
    b.js("""(() => {
      const log = document.getElementById('chat-log'), stop = document.getElementById('chat-stop');
      const seen = new MutationObserver(() => {
        const m = [...log.querySelectorAll('.msg.assistant .content')].pop();
        if (m && m.textContent.length && !stop.disabled) { seen.disconnect(); stop.click(); }
      });
      seen.observe(log, { childList: true, subtree: true, characterData: true });
      document.getElementById('chat-send').click();
      return true; })()""")
    b.wait("!document.getElementById('chat-send').disabled", "the stopped stream to end")
    status, error = b.js(text_of("#chat-status")), b.js(text_of("#chat-error"))
    check(status == "stopped" and not error, f"Stop stops the stream (status {status!r}, error {error!r})")
    for _ in range(200):
        if stats(port)["running"] == 0:
            break
        time.sleep(0.05)
    generated = stats(port)["tokens_generated"] - before
    check(stats(port)["running"] == 0 and generated < 1000,
          f"and the server cancelled it: nothing is running, {generated} of 2000 tokens generated")
    b.js(set_value("#chat-max-tokens", "24"))
    b.js(set_value("#chat-temperature", "0"))

    # A new server-side session: two turns, then it is listed with 2 turns.
    b.js(set_value("#chat-session", "__new__"))
    b.js(set_value("#chat-session-name", "web-test"))
    for i, text in enumerate(["My name is Ada.", "What is my name?"]):
        b.js(set_value("#chat-input", text))
        b.js(click("#chat-send"))
        b.wait(f"document.querySelectorAll('#chat-log .msg.assistant').length === {i + 1} && "
               "!document.getElementById('chat-send').disabled", f"session turn {i + 1}")
        check(b.js(text_of("#chat-error")) == "", f"session turn {i + 1}: " + b.js(text_of("#chat-error")))
    check(b.js("document.getElementById('chat-session').value") == "web-test", "the new session is picked")
    b.js(click("#tab-sessions"))
    b.wait("!!document.querySelector('.session-row[data-id=\"web-test\"]')", "the session in the list")
    turns = b.js("document.querySelector('.session-row[data-id=\"web-test\"]').children[1].textContent")
    check(turns == "2", f"the Sessions tab lists web-test with 2 turns (got {turns!r})")
    b.js("document.querySelector('.session-row[data-id=\"web-test\"] button').click(), true")
    b.wait("document.querySelectorAll('#session-messages .msg').length >= 4", "the session's messages")
    check(b.js(text_of("#session-messages")).count("My name is Ada.") == 1, "its messages show the first turn")


def check_jobs(b):
    b.js(click("#tab-jobs"))
    b.js(set_value("#job-items", "the fox\n---\nthe dog\n---\nthe cat"))
    b.js(set_value("#job-template", "Describe {item}:"))
    b.js(set_value("#job-max-tokens", "8"))
    b.js(click("#job-submit"))
    b.wait("!!document.querySelector('.job-progress')", "a job with a progress bar")
    check(b.js("document.querySelector('.job-progress').max") == 3, "the progress bar counts 3 items")
    b.wait("(() => { const p = document.querySelector('.job-progress'); return p.value === p.max; })()",
           "the progress bar to reach the end")
    check(True, "the progress bar reaches 3/3")
    b.wait("document.querySelectorAll('.job .job-result').length === 3", "the job's 3 results")
    b.wait(f"{text_of('.job .job-state')} === 'finished'", "the job to show finished")
    check(b.js(text_of("#job-error")) == "", "no job error: " + b.js(text_of("#job-error")))
    # Open the results for the screenshot.
    b.js("document.querySelector('.job details').open = true")


def check_metrics(b, port):
    b.js(click("#tab-metrics"))
    want = stats(port)["tokens_generated"]  # the server is idle now: it stays
    b.wait(f"parseInt({text_of('#stat-tokens_generated .v')}) === {want}", f"the stats to show {want} tokens generated",
           timeout=20)
    check(want > 0, f"the Metrics tab shows the tokens generated ({want})")
    check(b.js(text_of("#stat-pages_total .v")).isdigit(), "and the KV pages")


def main():
    troupe, work = sys.argv[1], sys.argv[2]
    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium")
    if not chromium:
        print("chromium is not installed (apt-get install chromium): skipping the web page test")
        return SKIP
    os.makedirs(work, exist_ok=True)
    server, port = start_server(troupe, work)
    browser = None
    try:
        raw = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        raw.request("GET", "/")
        r = raw.getresponse()
        page = r.read().decode()
        check(r.status == 200 and r.getheader("Content-Type", "").startswith("text/html"),
              f"GET / is HTML ({r.status} {r.getheader('Content-Type')})")
        check("<script" in page and "src=" not in page.split("<script", 1)[1].split(">", 1)[0],
              "its script is inline")

        browser = Browser(chromium, work)
        browser.open(f"http://127.0.0.1:{port}/")
        check_chat(browser, port)
        check_jobs(browser)
        path = os.path.join(work, "web-page.png")
        png = browser.screenshot(path)
        check(png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000, f"a PNG screenshot, {len(png)} bytes: {path}")
        check_metrics(browser, port)

        origin = f"http://127.0.0.1:{port}/"
        urls = [e["params"]["request"]["url"] for e in browser.events if e["method"] == "Network.requestWillBeSent"]
        outside = [u for u in urls if not u.startswith(origin) and not u.startswith("data:")]
        check(urls and not outside, f"{len(urls)} requests, none outside the server: {outside}")
        thrown = [e["params"]["exceptionDetails"] for e in browser.events if e["method"] == "Runtime.exceptionThrown"]
        check(not thrown, f"no script errors: {thrown}")
    finally:
        if browser:
            browser.close()
        server.terminate()
        server.wait(timeout=30)
    print("web page: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
