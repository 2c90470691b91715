#!/usr/bin/env python3
"""--max-store-bytes holds at every moment, compactions included (~25 s):
`troupe serve --max-store-bytes 64M` takes ~500-token
session turns (their KV pages, 512 bytes a token in fp16, spill to the store) until about three times the
cap has been written, while a thread reads the data directory's size on disk
(allocated blocks, as du counts them) every 10 ms. The peak must stay within
10 % of the cap.

    test_store_cap.py TROUPE_BINARY WORK_DIR
"""
import os
import subprocess
import sys
import tempfile
import threading
import time

from serving import check
from troupe_client import Client

CAP = 64 << 20


def on_disk(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def main():
    troupe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "store-cap.gguf")
    subprocess.run([troupe, "make-model", "-o", model, "--embd", "128", "--ff", "256", "--seed", "17"], check=True,
                   capture_output=True)
    endpoint = f"ipc://{work}/store-cap-{os.getpid()}.sock"
    data = tempfile.mkdtemp(prefix="store-cap-", suffix=".data", dir=work)
    log_path = os.path.join(work, "store-cap-serve.log")
    server = subprocess.Popen([troupe, "serve", "-m", model, "--listen", endpoint, "--threads", "1",
                               "--kv-tokens", "16384", "--max-store-bytes", "64M", "--kv-spill-codec", "fp16",
                               "--data-dir", data], stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], on_disk(data))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    try:
        for _ in range(1200):
            if "listening on" in open(log_path).read():
                break
            time.sleep(0.05)
        sampler.start()
        written = 0
        turns = 0
        started = time.monotonic()
        with Client(endpoint, timeout=120) as c:
            # A fresh session per turn: each spills its prompt's pages (fp16: 512 bytes a token here).
            while written < 3 * CAP and time.monotonic() - started < 600:
                text = " ".join(f"w{turns}x{i}" for i in range(140))
                stream = c.chat([("user", text)], max_tokens=8, temperature=0, session_id=f"cap-{turns}")
                stream.read()
                turns += 1
                written += stream.usage["prompt_tokens"] * 512
        time.sleep(3)  # the last pass and its compaction
        done.set()
        sampler.join()
        final = on_disk(data)
        mib = 1 << 20
        print(f"{turns} turns, ~{written / mib:.0f} MiB of KV pages written; on disk: peak {peak[0] / mib:.1f} MiB, "
              f"final {final / mib:.1f} MiB; cap {CAP / mib:.0f} MiB")
        check(written >= 2 * CAP, "the workload wrote at least twice the cap")
        check(peak[0] <= 1.10 * CAP, f"the peak ({peak[0] / mib:.1f} MiB) stays within 10 % of the cap")
    finally:
        done.set()
        server.terminate()
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
