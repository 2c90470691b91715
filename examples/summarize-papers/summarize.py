#!/usr/bin/env python3
"""Summarize every .txt file in a folder as one durable batch job on a
running `troupe serve`: one summary per file, written as NAME.summary.txt.

    build/troupe serve -m qwen2.5-coder-0.5b &
    PYTHONPATH=build/python:clients/python \\
        python3 examples/summarize-papers/summarize.py examples/summarize-papers/papers --out /tmp/summaries

The job is on disk before the server answers; if the server restarts, it
resumes with the papers not yet summarized. Run this again with --job ID to
pick up a job after this script (or the server) was interrupted. Progress
arrives as events on the server's event socket (the --connect port + 1).
"""
import argparse
import os
import sys
import time

import zmq

from troupe_client import Client, parse_job_event

TEMPLATE = ("Summarize the following paper in two or three sentences for a busy reader. "
            "Say what problem it addresses and what it found.\n\n{item}")


def events_endpoint(connect):
    if connect.startswith("ipc://"):
        return connect + ".events"
    host, port = connect.rsplit(":", 1)
    return f"{host}:{int(port) + 1}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--out", default="summaries")
    ap.add_argument("--connect", default="tcp://127.0.0.1:7700")
    ap.add_argument("--max-tokens", type=int, default=120)
    ap.add_argument("--job", help="follow an already submitted job instead of submitting")
    args = ap.parse_args()

    names = sorted(f for f in os.listdir(args.folder)
                   if f.endswith(".txt") and os.path.isfile(os.path.join(args.folder, f)))
    if not names:
        sys.exit(f"no .txt files in {args.folder}")
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(events_endpoint(args.connect))
    with Client(args.connect, timeout=60) as c:
        if args.job:
            job = c.job_status(args.job)
        else:
            items = [open(os.path.join(args.folder, n), encoding="utf-8", errors="replace").read() for n in names]
            job = c.submit_job(items, TEMPLATE, max_tokens=args.max_tokens, temperature=0)
        job_id = job["job_id"]
        sub.setsockopt_string(zmq.SUBSCRIBE, job_id)
        print(f"job {job_id}: {job['items']} papers", file=sys.stderr)
        start = time.time()
        while job["state"] == "running":
            if sub.poll(2000):
                _, frame = sub.recv_multipart()
                event = parse_job_event(frame)
                job = event["job"]
                if "item" in event:
                    print(f"  [{job['finished_items']}/{job['items']}] {names[event['item']['index']]} "
                          f"({event['tokens_per_second']:.1f} tok/s)", file=sys.stderr)
            else:
                job = c.job_status(job_id)  # events can be missed; the status cannot
        os.makedirs(args.out, exist_ok=True)
        for r in c.job_results(job_id):
            path = os.path.join(args.out, os.path.splitext(names[r["index"]])[0] + ".summary.txt")
            with open(path, "w", encoding="utf-8") as f:
                f.write(r["text"].strip() + "\n" if not r["error"] else f"ERROR: {r['error']}\n")
        print(f"job {job_id} {job['state']}: {job['finished_items']} summaries in {args.out} "
              f"after {time.time() - start:.1f} s", file=sys.stderr)
    return 0 if job["state"] == "finished" else 2


if __name__ == "__main__":
    sys.exit(main())
