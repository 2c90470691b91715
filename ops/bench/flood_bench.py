"""ops/bench/flood.sh's client: one identity floods, another is polite.

  flood_bench.py EP SERVER_PID N [bytes|slots]
      bytes (default): N prompts of 1 MiB sent as fast as the socket takes them from one
      connection, while a second connection pings every 20 ms and asks a short greedy
      question every 0.5 s. Prints the polite client's Ping p50/p99 and TTFT p50/p99, how
      each flood request ended, and the server's peak RSS (VmHWM).
      slots: N ordinary prompts (~200 tokens, 64 new tokens each) from one connection, enough
      to take every running slot, the queue and the KV pages; the polite connection asks its
      short questions meanwhile. Prints its TTFT p50/p99 beside the server's mean step time
      over the flood (the fair-share target: a first token at most a step behind the flood).
"""
import collections
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


def slots(ep, pid, n):
    flood = Client(ep, timeout=1200)
    words = "the quick brown fox jumps over the lazy dog while the cat sleeps by the warm fire "
    streams = []
    def ask(polite, count):
        out = []
        while len(out) < count:
            s = polite.generate("Write one word.", max_tokens=2, temperature=0)
            s.read()
            out.append(s.timings["ttft_ms"])
            time.sleep(0.5)
        return out

    with Client(ep, timeout=120) as polite:
        alone = ask(polite, 10)  # the same question without the flood
        before = polite.stats()
        for i in range(n):  # distinct prompts: no prefix sharing eases the flood
            streams.append(flood.generate(f"{i} " + words * 12, max_tokens=64, temperature=0, ignore_eos=True))
        time.sleep(2)  # the flood holds the slots and the queue before the first question
        held = polite.stats()
        ttfts = ask(polite, 20)
        after = polite.stats()
    flood.close()  # the server ends a gone client's requests: the rest of the flood is not waited for
    steps = after["steps"] - held["steps"]
    step_ms = (after["engine_ms"] - held["engine_ms"]) / steps if steps else float("nan")
    print(f"flood: {n} prompts from one connection; while the polite client asked: {held['running']} running, "
          f"{held['waiting']} waiting, {held['pages_used']} of {held['pages_total']} pages used")
    print(f"polite client: TTFT p50 {percentile(ttfts, 50):.1f} ms, p99 {percentile(ttfts, 99):.1f} ms "
          f"({len(ttfts)} questions, none refused); mean step over the flood {step_ms:.1f} ms "
          f"({steps} steps)")
    delay = percentile(ttfts, 99) - percentile(alone, 50)
    print(f"polite client alone: TTFT p50 {percentile(alone, 50):.1f} ms; the flood's delay at p99 "
          f"{delay:.1f} ms = {delay / step_ms:.2f} steps (target <= 1)")
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
    for s in streams:
        try:
            s.read()
            ended[s.finish_reason] += 1
        except TroupeError as e:
            ended[e.code] += 1
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
