"""ops/bench/flood.sh's client: one identity floods, another is polite.

  flood_bench.py EP SERVER_PID N [bytes|slots]
      bytes (default): N prompts of 1 MiB sent as fast as the socket takes them from one
      connection, while a second connection pings every 20 ms and asks a short greedy
      question every 0.5 s. Prints the polite client's Ping p50/p99 and TTFT p50/p99, how
      each flood request ended, and the server's peak RSS (VmHWM).
      slots: N ordinary prompts (~200 tokens, 64 new tokens each) from one connection of a
      process of their own (without --auth a process is one identity over IPC), enough
      to take every running slot, the queue and the KV pages; the polite connection asks its
      short questions meanwhile, at random moments. Prints its TTFT p50/p99 beside the flood's own mean step time,
      measured over 20 s before the first question (the fair-share target: a first token at most
      a step behind the flood).
"""
import collections
import multiprocessing
import random
import sys
import threading
import time

from troupe_client import Client, TroupeError

from workload import percentile


def vm_hwm_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def count_endings(streams, ended):
    """Reads each stream to its end, counting how it ended (finish reason or error code)."""
    for s in streams:
        try:
            s.read()
            ended[s.finish_reason] += 1
        except TroupeError as e:
            ended[e.code] += 1


def flood_process(ep, n, sent, ended):
    """The flood, in a process of its own: another identity than the polite client's."""
    words = "the quick brown fox jumps over the lazy dog while the cat sleeps by the warm fire "
    with Client(ep, timeout=1200) as flood:
        streams = [flood.generate(f"{i} " + words * 12, max_tokens=64, temperature=0, ignore_eos=True)
                   for i in range(n)]  # distinct prompts: no prefix sharing eases the flood
        sent.set()
        for s in streams:
            try:
                s.read()
                outcome = s.finish_reason
            except TroupeError as e:
                outcome = e.code
            ended[outcome] = ended.get(outcome, 0) + 1


def slots(ep, pid, n):
    manager = multiprocessing.Manager()
    ended = manager.dict()
    sent = multiprocessing.Event()
    queued = []

    def ask(polite, count, spread=True):
        out = []
        while len(out) < count:
            s = polite.generate("Write one word.", max_tokens=2, temperature=0)
            s.read()
            out.append(s.timings["ttft_ms"])
            queued.append(s.timings["queue_ms"])
            # At random moments: a question asked a fixed time after the last answer
            # would land at the same point of the flood's step every time.
            time.sleep(random.uniform(0.5, 8.0) if spread else 0.5)
        return out

    random.seed(1)
    with Client(ep, timeout=120) as polite:
        alone = ask(polite, 10, spread=False)  # the same question without the flood
        before = polite.stats()
        flood = multiprocessing.Process(target=flood_process, args=(ep, n, sent, ended), daemon=True)
        flood.start()  # not joined: the server is killed after
        sent.wait()
        time.sleep(2)  # the flood holds slots and the queue
        held = polite.stats()
        time.sleep(20)  # the flood alone: its own step time
        quiet = polite.stats()
        ttfts = ask(polite, 20)
        after = polite.stats()
    steps = quiet["steps"] - held["steps"]
    step_ms = (quiet["engine_ms"] - held["engine_ms"]) / steps if steps else float("nan")
    asked = after["steps"] - quiet["steps"]
    print(f"flood: {n} prompts from one connection; when the polite client began: {quiet['running']} running, "
          f"{quiet['waiting']} waiting, {quiet['pages_used']} of {quiet['pages_total']} pages used; "
          f"ended so far: {dict(ended.items())}")
    print(f"the flood alone: mean step {step_ms:.1f} ms ({steps} steps in 20 s)")
    print(f"polite client: TTFT p50 {percentile(ttfts, 50):.1f} ms, p99 {percentile(ttfts, 99):.1f} ms "
          f"({len(ttfts)} questions, none refused; {asked} steps meanwhile, mean "
          f"{(after['engine_ms'] - quiet['engine_ms']) / max(asked, 1):.1f} ms)")
    queued = queued[len(alone):]
    print(f"polite client: queued before its first step p50 {percentile(queued, 50):.1f} ms, "
          f"p99 {percentile(queued, 99):.1f} ms")
    alone_ms = percentile(alone, 50)
    for q in (50, 99):
        delay = percentile(ttfts, q) - alone_ms
        print(f"the flood's delay of the first token at p{q}: {delay:.1f} ms = {delay / step_ms:.2f} of its steps "
              f"(target <= {1 if q == 50 else 2}; alone TTFT p50 {alone_ms:.1f} ms)")
    print(f"server peak RSS: {vm_hwm_mb(pid):.0f} MB; steps before the flood: {before['steps']}")


def main():
    ep, pid, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if len(sys.argv) > 4 and sys.argv[4] == "slots":
        return slots(ep, pid, n)
    huge = ("flood " * ((1 << 20) // 6))[: (1 << 20) - 64]  # text, so tokenizing it is real work
    rss_before = vm_hwm_mb(pid)
    flood = Client(ep, timeout=600)
    streams = []
    flooding = threading.Event()
    flooding.set()

    def send_all():
        for _ in range(n):
            streams.append(flood.generate(huge, max_tokens=4, temperature=0))
        flooding.clear()

    sender = threading.Thread(target=send_all)
    pings, ttfts = [], []
    began = time.monotonic()
    sender.start()
    with Client(ep, timeout=120) as polite:
        last_ask = 0.0
        while flooding.is_set() or time.monotonic() - began < 5:
            t0 = time.perf_counter()
            polite.ping()
            pings.append((time.perf_counter() - t0) * 1000)
            if time.monotonic() - last_ask > 0.5:
                last_ask = time.monotonic()
                s = polite.generate("Write one word.", max_tokens=2, temperature=0)
                s.read()
                ttfts.append(s.timings["ttft_ms"])
            time.sleep(0.02)
    sender.join()
    ended = collections.Counter()
    count_endings(streams, ended)
    flood.close()
    rss = vm_hwm_mb(pid)
    print(f"flood: {n} prompts of 1 MiB from one connection in {time.monotonic() - began:.1f} s; "
          f"ended: {dict(ended)}; answered {sum(ended.values())} of {n}")
    print(f"polite client: Ping p50 {percentile(pings, 50):.2f} ms, p99 {percentile(pings, 99):.2f} ms "
          f"({len(pings)} pings); TTFT p50 {percentile(ttfts, 50):.1f} ms, p99 {percentile(ttfts, 99):.1f} ms "
          f"({len(ttfts)} questions)")
    print(f"server peak RSS: {rss:.0f} MB (before the flood {rss_before:.0f} MB)")


if __name__ == "__main__":
    main()
