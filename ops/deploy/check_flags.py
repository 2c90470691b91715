#!/usr/bin/env python3
"""Checks ops/deploy against the binary, so the manifests cannot drift from the CLI.

    ops/deploy/check_flags.py BUILD/troupe [DEPLOY_DIR]

Reads every `troupe SUB --help` of the binary, then every troupe command line that
DEPLOY_DIR (default: this script's folder) gives: the containers of the Kubernetes manifests
(k8s/*.yaml) that run the troupe image, ExecStart= of the systemd units with the variables
of their example environment files (systemd/*.env), and the Containerfile's ENTRYPOINT/CMD
and RUN lines. Fails (exit 1, one `file:line: problem` per line) when
  - a command names a subcommand, or gives a flag, that the binary's --help lacks;
  - a container's args use $(VAR) that its env does not define (Kubernetes would pass the
    text `$(VAR)` on), or a resourceFieldRef names another container;
  - a pod's terminationGracePeriodSeconds, or a unit's TimeoutStopSec=, leaves less than
    GRACE_MARGIN seconds after the --drain-timeout of the troupe it stops: the drain would be
    cut short by SIGKILL.
"""
import glob
import json
import os
import re
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from check_docs import read_help  # noqa: E402  (ops/check_docs.py: the same --help parser)

try:
    import yaml
except ImportError:  # the venv of ops/python-env.sh has it (yamllint needs it)
    yaml = None

GRACE_MARGIN = 10  # seconds a stop must leave after the drain: writes, then the exit
DEFAULT_DRAIN = 30.0  # when a command gives no --drain-timeout and --help shows no default
K8S_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
SYSTEMD_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


class Cli:
    """The binary's subcommands, each with its flags and the defaults its --help shows."""

    def __init__(self, binary):
        self.binary = binary
        _, subs = read_help(binary, [])
        self.flags = {}
        self.defaults = {}
        for sub in subs:
            self.flags[sub], _ = read_help(binary, [sub])
        for sub in ("serve", "worker"):
            if sub in self.flags:
                self.defaults[sub] = self._drain_default(sub)

    def _drain_default(self, sub):
        out = subprocess.run([self.binary, sub, "--help"], capture_output=True, text=True,
                             timeout=60).stdout
        m = re.search(r"--drain-timeout \S*?=([0-9.]+)", out)
        return float(m.group(1)) if m else None


class Checker:
    def __init__(self, cli, root):
        self.cli = cli
        self.root = root
        self.problems = []
        self.commands = 0

    def problem(self, path, line, text):
        rel = os.path.relpath(path, self.root)
        self.problems.append(f"{rel}:{line}: {text}")

    @staticmethod
    def line_of(path, needle, start=1):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if n >= start and needle in line:
                    return n
        return start

    def check_argv(self, path, line, argv, quiet=()):
        """argv: the words after `troupe`; those at the indexes in `quiet` are read but not
        reported (a unit's $TROUPE_SERVE_ARGS, which the environment file's own check reports).
        Returns (sub, the value of --drain-timeout or None)."""
        if not argv:
            return None, None
        sub = argv[0]
        if sub.startswith("-"):
            return None, None  # `troupe --help`
        self.commands += 1
        if sub not in self.cli.flags:
            self.problem(path, line, f"`troupe {sub}`: the binary has no such subcommand")
            return None, None
        drain = None
        for i, word in enumerate(argv[1:], 1):
            if not re.fullmatch(r"--?[A-Za-z0-9][A-Za-z0-9-]*(=.*)?", word):
                continue
            flag = word.split("=")[0]
            if flag not in self.cli.flags[sub] and flag not in ("-h", "--help") and i not in quiet:
                self.problem(path, self.line_of(path, flag, line),
                             f"`troupe {sub}` has no flag {flag} (not in `troupe {sub} --help`)")
            if flag == "--drain-timeout":
                value = word.split("=", 1)[1] if "=" in word else (
                    argv[i + 1] if i + 1 < len(argv) else "")
                try:
                    drain = float(value)
                except ValueError:
                    self.problem(path, line, f"--drain-timeout {value!r} is not a number")
        return sub, drain

    def drain_of(self, sub, given):
        if given is not None:
            return given
        default = self.cli.defaults.get(sub)
        return default if default is not None else DEFAULT_DRAIN

    def check_grace(self, path, line, sub, drain, grace, what):
        if sub not in ("serve", "worker"):
            return
        drain = self.drain_of(sub, drain)
        if grace < drain + GRACE_MARGIN:
            self.problem(path, line, f"{what} {grace:g} s leaves under {GRACE_MARGIN} s after "
                                     f"`troupe {sub}`'s --drain-timeout {drain:g} s")

    # --- Kubernetes ------------------------------------------------------------------------

    def check_k8s(self, path):
        with open(path, encoding="utf-8") as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        for doc in docs:
            spec = doc.get("spec") or {}
            pod = (spec.get("template") or {}).get("spec") if doc.get("kind") != "Pod" else spec
            if not pod:
                continue
            grace = pod.get("terminationGracePeriodSeconds", 30)
            names = {c.get("name") for c in pod.get("containers", []) + pod.get(
                "initContainers", [])}
            for kind in ("initContainers", "containers"):
                for c in pod.get(kind) or []:
                    self.check_container(path, doc, c, names, grace)

    def check_container(self, path, doc, c, names, grace):
        line = self.line_of(path, f"name: {c.get('name')}")
        image = str(c.get("image", ""))
        runs_troupe_image = re.sub(r"[:@].*$", "", image.rsplit("/", 1)[-1]) == "troupe"
        command = [str(w) for w in c.get("command") or []]
        args = [str(w) for w in c.get("args") or []]
        if command:
            argv = command + args
        elif runs_troupe_image:
            argv = ["troupe"] + args  # the image's ENTRYPOINT
        else:
            return
        env = {e.get("name"): e for e in c.get("env") or []}
        for word in argv:
            for var in K8S_VAR.findall(word):
                if var not in env:
                    self.problem(path, self.line_of(path, f"$({var})", line),
                                 f"container {c.get('name')}: $({var}) is not in its env "
                                 "(Kubernetes would pass the text on)")
        for e in env.values():
            ref = (e.get("valueFrom") or {}).get("resourceFieldRef") or {}
            if ref.get("containerName") and ref["containerName"] not in names:
                self.problem(path, self.line_of(path, "containerName", line),
                             f"env {e.get('name')}: resourceFieldRef names no container of "
                             f"this pod ({ref['containerName']})")
        start = next((i for i, w in enumerate(argv) if os.path.basename(w) == "troupe"), None)
        if start is None:
            return
        sub, drain = self.check_argv(path, line, argv[start + 1:])
        what = f"{doc.get('kind')} {doc.get('metadata', {}).get('name')}: " \
               "terminationGracePeriodSeconds"
        self.check_grace(path, self.line_of(path, "terminationGracePeriodSeconds"), sub, drain,
                         float(grace), what)

    # --- systemd -----------------------------------------------------------------------------

    @staticmethod
    def logical_lines(path, comment="#;"):
        """(line number, text) with backslash continuations joined, comments left out."""
        out, pending, first = [], "", 0
        with open(path, encoding="utf-8") as f:
            for n, raw in enumerate(f, 1):
                raw = raw.rstrip("\n")
                if not pending and (not raw.strip() or raw.lstrip()[0] in comment):
                    continue
                if not pending:
                    first = n
                if raw.endswith("\\"):
                    pending += raw[:-1] + " "
                    continue
                out.append((first, pending + raw))
                pending = ""
        if pending:
            out.append((first, pending))
        return out

    def read_env_file(self, path):
        env = {}
        for n, text in self.logical_lines(path):
            if "=" not in text:
                continue
            key, value = text.split("=", 1)
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            env[key.strip()] = (n, value)
        return env

    def check_env_file(self, path):
        """TROUPE_SERVE_ARGS=... holds flags of `troupe serve`, and so on."""
        for key, (n, value) in self.read_env_file(path).items():
            m = re.fullmatch(r"TROUPE_([A-Z0-9_]+)_ARGS", key)
            if m:
                sub = m.group(1).lower().replace("_", "-")
                self.check_argv(path, n, [sub] + shlex.split(value))

    def check_unit(self, path):
        here = os.path.dirname(path)
        env, execs, stop = {}, [], None
        for n, text in self.logical_lines(path):
            if "=" not in text or text.startswith("["):
                continue
            key, value = (s.strip() for s in text.split("=", 1))
            if key == "Environment":
                for assignment in shlex.split(value):
                    k, _, v = assignment.partition("=")
                    env[k] = v
            elif key == "EnvironmentFile":
                example = os.path.join(here, os.path.basename(value.lstrip("-")))
                example = re.sub(r"-%i(\.env)$", r"\1", example)  # worker-%i.env: worker.env
                if os.path.exists(example):
                    env.update({k: v for k, (_, v) in self.read_env_file(example).items()})
            elif key == "ExecStart":
                execs.append((n, value))
            elif key == "TimeoutStopSec":
                stop = (n, value)
        for n, value in execs:
            words, expanded = [], set()
            for word in shlex.split(value.lstrip("@-:+!")):
                whole = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
                if whole:  # $VAR: split at whitespace, as systemd does
                    more = shlex.split(env.get(whole.group(1), ""))
                    expanded |= set(range(len(words), len(words) + len(more)))
                    words += more
                else:
                    words.append(SYSTEMD_VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""),
                                                 word))
            start = next((i for i, w in enumerate(words) if os.path.basename(w) == "troupe"),
                         None)
            if start is None:
                continue
            quiet = {i - start - 1 for i in expanded}
            sub, drain = self.check_argv(path, n, words[start + 1:], quiet)
            seconds = parse_timespan(stop[1]) if stop else 90.0  # systemd's default stop time
            if seconds is None:
                self.problem(path, stop[0], f"TimeoutStopSec={stop[1]}: not a time span")
                continue
            self.check_grace(path, stop[0] if stop else n, sub, drain, seconds, "TimeoutStopSec")

    # --- Containerfile -----------------------------------------------------------------------

    def check_containerfile(self, path):
        entrypoint, cmd = None, None
        for n, text in self.logical_lines(path, comment="#"):
            instruction, _, rest = text.strip().partition(" ")
            instruction = instruction.upper()
            if instruction == "FROM":
                entrypoint, cmd = None, None  # each stage starts over
            elif instruction in ("ENTRYPOINT", "CMD"):
                try:
                    words = json.loads(rest)
                except ValueError:
                    words = shlex.split(rest)
                if instruction == "ENTRYPOINT":
                    entrypoint = (n, words)
                else:
                    cmd = (n, words)
            elif instruction == "RUN":
                for segment in re.split(r"&&|\|\||;|\|", rest):
                    try:
                        words = shlex.split(segment)
                    except ValueError:
                        continue
                    start = next((i for i, w in enumerate(words)
                                  if os.path.basename(w) == "troupe"), None)
                    if start is not None:
                        self.check_argv(path, n, words[start + 1:])
        if entrypoint and entrypoint[1] and os.path.basename(entrypoint[1][-1]) == "troupe":
            self.check_argv(path, cmd[0] if cmd else entrypoint[0], cmd[1] if cmd else [])

    def run(self):
        for path in sorted(glob.glob(os.path.join(self.root, "k8s", "*.yaml"))):
            if os.path.basename(path) != "kustomization.yaml":
                self.check_k8s(path)
        for path in sorted(glob.glob(os.path.join(self.root, "systemd", "*.service"))):
            self.check_unit(path)
        for path in sorted(glob.glob(os.path.join(self.root, "systemd", "*.env"))):
            self.check_env_file(path)
        containerfile = os.path.join(self.root, "Containerfile")
        if os.path.exists(containerfile):
            self.check_containerfile(containerfile)
        return self.problems


def parse_timespan(text):
    """systemd's time span: `90`, `90s`, `1min 30s`, `2m`; None if it is none of those."""
    units = {"us": 1e-6, "ms": 1e-3, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600}
    total, text = 0.0, text.strip()
    if re.fullmatch(r"[0-9.]+", text):
        return float(text)
    parts = re.findall(r"([0-9.]+)\s*([a-z]+)", text)
    if not parts or re.sub(r"[0-9.]+\s*[a-z]+|\s", "", text):
        return None
    for number, unit in parts:
        if unit not in units:
            return None
        total += float(number) * units[unit]
    return total


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    if yaml is None:
        print("check_flags: needs PyYAML (the venv of ops/python-env.sh has it)", file=sys.stderr)
        return 2
    binary = os.path.abspath(argv[1])
    root = os.path.abspath(argv[2] if len(argv) == 3 else os.path.dirname(__file__))
    try:
        cli = Cli(binary)
    except (OSError, RuntimeError) as e:
        print(f"check_flags: cannot read the command line from {binary}: {e}", file=sys.stderr)
        return 2
    checker = Checker(cli, root)
    problems = checker.run()
    for p in problems:
        print(p)
    if problems:
        print(f"check_flags: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check_flags: ok ({checker.commands} troupe command lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
