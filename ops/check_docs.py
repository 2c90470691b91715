#!/usr/bin/env python3
"""Checks the documentation against the tree and the binary (a CTest test).

    ops/check_docs.py BUILD/troupe REPO_ROOT

Fails (exit 1, one `file:line: problem` per line) when
  - a source folder (one holding files git tracks or would track) has no README.md, or one of
    its lines is longer than 100 characters (the top-level README.md excepted: its tables);
  - a README.md or docs/*.md names a repository path that does not exist;
  - a README or doc gives a `troupe SUB` command line a flag that `troupe SUB --help` lacks;
  - a flag some `troupe SUB --help` lists is missing from README.md's "Command line reference";
  - a header (`.h`) of a source folder is not named in that folder's README.md (by its stem,
    its file name, or a glob such as `openai_*`);
  - a Catch2 TEST_CASE name holds ';' (CTest splits test names there: the test never runs whole);
  - a doc, comment or script points at a section (`docs/FILE.md, "Section"`) that FILE.md has
    neither as a heading nor as a bold lead of a bullet (`- **Section...**`).

Paths are read where docs write them: backtick spans, markdown links, and in code blocks and
prose only words that begin with a top-level folder of the repository. A name without an
extension may be a file's stem (`actors/job_actor` for job_actor.h and .cpp), as the READMEs
name them. Flags are read only in troupe command lines and in the reference section, so
flags of other tools (cmake, ctest, pip, llama-bench) are not mistaken for troupe's.
"""
import fnmatch
import os
import re
import subprocess
import sys

MAX_LINE = 100
CODE_EXTENSIONS = {".h", ".hpp", ".cpp", ".cu", ".cuh", ".py", ".sh", ".fbs", ".cmake"}
SOURCE_EXTENSIONS = CODE_EXTENSIONS | {".md", ".txt", ".toml", ".json", ".jsonl", ".log", ".lock",
                                       ".tsv"}
# Words that stand for a name the reader fills in, never a real file.
PLACEHOLDERS = {"NAME", "FILE", "ID", "DIR", "MODEL", "OUT", "JOB", "JOB_ID", "PATH", "ADDR",
                "ENDPOINT", "SUB", "ITEM", "N", "K", "X", "F", "D", "S", "T"}
REFERENCE_HEADING = "## Command line reference"
UNIVERSAL_FLAGS = {"--help", "-h"}
LONG_FLAG = re.compile(r"(?<![\w-])--[a-z0-9][a-z0-9-]*")
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)")
FENCED_BLOCK = re.compile(r"^\s*(```|~~~).*?^\s*\1", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
SECTION_REF = re.compile(r'((?:docs/)?[A-Z][A-Z_]+\.md|[\w/]*README\.md)\)?,\s*"([^"]{3,80})"')
POINTING_FILES = (".md", ".h", ".hpp", ".cpp", ".cu", ".cuh", ".py", ".sh", ".fbs", ".txt")


class Repo:
    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.files = self._list_files()
        self.dirs = {""}
        self.stems = set()
        for f in self.files:
            d = os.path.dirname(f)
            while d and d not in self.dirs:
                self.dirs.add(d)
                d = os.path.dirname(d)
            head, name = os.path.split(f)
            while "." in name.lstrip("."):  # a.test.cpp: stems a.test and a
                name = name[:name.rindex(".")]
                self.stems.add(os.path.join(head, name))
        self.top = {p.split("/")[0] for p in self.files if "/" in p}
        self.dir_names = {os.path.basename(d) for d in self.dirs if d}
        self.paths = self.files | self.dirs | self.stems

    def exists_as_suffix(self, rel):
        rel = rel.rstrip("/")
        return any(p.endswith("/" + rel) for p in self.paths)

    def exists_below(self, folder, name):
        prefix = folder + "/"
        return any(p.startswith(prefix) and p.endswith("/" + name) for p in self.paths)

    def _list_files(self):
        try:
            out = subprocess.run(["git", "-C", self.root, "ls-files", "-z", "--cached", "--others",
                                  "--exclude-standard"], capture_output=True, check=True).stdout
            names = [n for n in out.decode("utf-8", "replace").split("\0") if n]
        except (OSError, subprocess.CalledProcessError):  # not a checkout: walk the tree
            names = []
            for dirpath, dirnames, filenames in os.walk(self.root):
                rel = os.path.relpath(dirpath, self.root)
                dirnames[:] = [d for d in dirnames if d != ".git" and not (rel == "." and
                                                                             d.startswith("build"))]
                names += [os.path.normpath(os.path.join(rel, f)) for f in filenames]
        return {n for n in names if not n.split("/")[0].startswith("build")
                and os.path.isfile(os.path.join(self.root, n))}

    def source_folders(self):
        return sorted({os.path.dirname(f) for f in self.files})

    def exists(self, rel):
        rel = rel.rstrip("/")
        return rel in self.files or rel in self.dirs or rel in self.stems


def is_placeholder(part):
    stem = part.split(".")[0]
    if stem in PLACEHOLDERS or part in ("", "..."):
        return True
    # NAME.summary.txt, item-NNNN.txt, JOB_ID: a capitalised word the reader fills in.
    return any(run in PLACEHOLDERS and len(run) > 1 or re.fullmatch(r"N{2,}|X{2,}", run)
               for run in re.findall(r"[A-Z]+", stem))


def clean_word(word):
    word = word.strip("`'\"")
    while len(word) > 2 and word[0] == "*" and word[-1] == "*":  # **emphasis**
        word = word[1:-1]
    word = word.lstrip("([")
    word = word.rstrip(".,;:!?)]'\"")
    return word


def path_word(token, kind):
    """The word of `token` that may name a repository path; None for a URL, an anchor, a glob,
    a placeholder, code or a build output."""
    word = clean_word(token)
    if kind == "link":
        word = word.split("#")[0]
    if not word or "://" in word or word.startswith(("mailto:", "#", "/", "~", "-", "$")):
        return None
    if any(c in word for c in "*?{}<>$|=@…\\,()[]\"'` ") or "..." in word:
        return None  # globs, placeholders, variables, code
    if not re.fullmatch(r"[\w.+/-]+", word) or re.fullmatch(r"[\d./]+", word):
        return None
    parts = word.rstrip("/").split("/")
    if any(is_placeholder(p) for p in parts) or parts[0].startswith("build"):
        return None
    return word


class Checker:
    def __init__(self, repo, cli):
        self.repo = repo
        self.cli = cli  # {"": top-level flags, "serve": flags, "batch submit": flags, ...}
        self.subs = {k for k in cli if k and " " not in k}
        self.all_flags = set().union(*cli.values())
        self.problems = []

    def problem(self, path, line, text):
        self.problems.append(f"{path}:{line}: {text}")

    # --- paths -------------------------------------------------------------------------------

    def check_path(self, token, md, line, kind):
        """kind: link, code (a backtick span's word), loose (code block or prose word)."""
        word = path_word(token, kind)
        if word is None:
            return
        md_dir = os.path.dirname(md)
        whole_repo = not md_dir or md.startswith("docs/")  # README.md and docs/ name any folder
        if not self._meant_as_path(word, kind, md_dir, whole_repo):
            return
        here = os.path.normpath(os.path.join(md_dir, word))
        if here.startswith(".."):  # outside the repository (../shared/DESIGN.md): not ours
            return
        if self._path_exists(word, here, md_dir, whole_repo):
            return
        if whole_repo:
            where = "in the repository"
        else:
            where = f"from the repository root or in {md_dir}/"
        self.problem(md, line, f"`{word}` names no file or folder ({where})")

    def _meant_as_path(self, word, kind, md_dir, whole_repo):
        """Whether a path-shaped word is meant as a path of ours where it stands."""
        parts = word.rstrip("/").split("/")
        ext = re.search(r"[\w-](\.[A-Za-z0-9]+)$", parts[-1])
        ext = ext.group(1) if ext else ""
        if "/" in word:
            # A path's first folder names a folder of the repository (tok/s, ffn_gate/up and
            # troupe/llama.cpp are not paths).
            if parts[0] not in self.repo.dir_names and parts[0] not in (".", ".."):
                return False
            if kind == "loose" and parts[0] not in self.repo.top:
                return False
            return kind != "code" or (word.endswith("/") or ext in SOURCE_EXTENSIONS
                                      or self._first_exists(parts[0], md_dir))
        if kind == "loose":
            return False
        # A bare name with a code extension is always a file of ours; one with a document
        # extension (NOTICE.md, config.json) only in a folder's README, which names its own.
        return ext in CODE_EXTENSIONS or (ext in SOURCE_EXTENSIONS and not whole_repo)

    def _path_exists(self, word, here, md_dir, whole_repo):
        for c in (here, os.path.normpath(word)):
            if not c.startswith("..") and self.repo.exists("" if c == "." else c):
                return True
        if not whole_repo and "/" not in word and self.repo.exists_below(md_dir, word):
            return True  # tests/README.md: `check_forward.py` in tests/reference/
        # docs name files by their folder in context: `cpu/repack.h`, `jobs.h`
        return whole_repo and self.repo.exists_as_suffix(word)

    def _first_exists(self, first, md_dir):
        return self.repo.exists(first) or self.repo.exists(os.path.normpath(os.path.join(md_dir,
                                                                                         first)))

    # --- flags -------------------------------------------------------------------------------

    def flags_of(self, sub, nested, alternatives):
        if nested and not alternatives:
            return self.cli[f"{sub} {nested}"] | self.cli[sub]
        flags = set(self.cli[sub])
        for key, value in self.cli.items():  # `troupe batch status | results [--out DIR]`
            if key.startswith(sub + " "):
                flags |= value
        return flags

    def check_command(self, text, md, line, split_pipes):
        """Checks every troupe command line in `text`; returns the flags it checked."""
        checked = set()
        seps = r"\s(?:\|\||&&|;|&|\|)\s|;\s*$|&\s*$|\$\(" if split_pipes else r"\s(?:\|\||&&|;)\s"
        for segment in re.split(seps, text):
            words = [clean_word(w) for w in segment.split()]
            words = [w for w in words if w]
            found = self._troupe_start(words, split_pipes)
            if found is None:
                continue
            start, leading = found
            sub, nested, flags, rest = self._subcommand_at(words, start)
            if flags is None:
                if leading and re.fullmatch(r"[a-z][a-z-]+", sub):  # not prose: "troupe binary"
                    self.problem(md, line, f"`troupe {sub}`: troupe has no such subcommand")
                continue
            checked |= self._check_flags(rest, flags, sub, nested, md, line)
        return checked

    def _troupe_start(self, words, split_pipes):
        """(index of the word after troupe, whether the line begins with troupe), or None."""
        for i, w in enumerate(words):
            if w == "troupe" or w.endswith("/troupe"):
                # the command line begins with troupe (a `$ ` prompt aside)
                return i + 1, i == 0 or (i == 1 and words[0] == "$")
        if words and words[0] in self.subs and not split_pipes:
            return 0, False  # `serve --worker`, `chat --session`: shorthand for a troupe command
        return None

    def _subcommand_at(self, words, start):
        """(sub, nested, its flags, the words after it); flags None when troupe has no `sub`."""
        sub = words[start] if start < len(words) else ""
        if sub.startswith("-") or not sub:
            return "", "", self.cli[""], words[start:]
        if sub not in self.subs:
            return sub, "", None, []
        after = words[start + 1] if start + 1 < len(words) else ""
        nested = after if f"{sub} {after}" in self.cli else ""
        return sub, nested, self.flags_of(sub, nested, "|" in words), words[start + 1:]

    def _check_flags(self, rest, flags, sub, nested, md, line):
        checked = set()
        for w in rest:
            w = w.split("=")[0].strip("[]()")
            if re.fullmatch(r"--[a-z0-9][a-z0-9-]*|-[A-Za-z]", w):
                checked.add(w)
                if w not in flags and w not in UNIVERSAL_FLAGS:
                    cmd = " ".join(x for x in ("troupe", sub, nested) if x)
                    self.problem(md, line, f"`{cmd}` has no flag {w} (not in `{cmd} --help`)")
        return checked

    # --- one markdown file -------------------------------------------------------------------

    def check_markdown(self, md):
        with open(os.path.join(self.repo.root, md), encoding="utf-8") as f:
            lines = f.read().split("\n")
        is_folder_readme = os.path.basename(md) == "README.md" and md != "README.md"
        fence = None
        pending = ""  # a code line continued with a backslash
        pending_line = 0
        section = ""
        for n, raw in enumerate(lines, 1):
            if is_folder_readme and len(raw) > MAX_LINE:
                self.problem(md, n, f"line of {len(raw)} characters (at most {MAX_LINE})")
            m = FENCE.match(raw)
            if m:
                fence = None if fence == m.group(1) else (fence or m.group(1))
                pending = ""
                continue
            if fence:
                code = raw.split(" # ")[0] if not raw.lstrip().startswith("#") else ""
                for word in raw.split():
                    self.check_path(word, md, n, "loose")
                if code.rstrip().endswith("\\"):
                    pending_line = pending_line if pending else n
                    pending += code.rstrip()[:-1] + " "
                    continue
                self.check_command(pending + code, md, pending_line if pending else n,
                                   split_pipes=True)
                pending = ""
                continue
            if raw.startswith("## "):
                section = raw.strip()
            in_reference = md == "README.md" and section == REFERENCE_HEADING
            prose = raw
            command_flags = set()
            for span in CODE_SPAN.finditer(raw):
                text = span.group(2).replace("\\|", "|")
                for word in text.split():
                    self.check_path(word, md, n, "code")
                command_flags |= self.check_command(text, md, n, split_pipes=False)
                prose = prose.replace(span.group(0), " ")
            for link in LINK.finditer(prose):
                self.check_path(link.group(1), md, n, "link")
            prose = LINK.sub(" ", prose)
            for word in prose.split():
                self.check_path(word, md, n, "loose")
            if in_reference:  # any other flag in the reference must be some command's
                for flag in LONG_FLAG.findall(raw):
                    if flag not in command_flags and flag not in self.all_flags:
                        self.problem(md, n, f"{flag}: no troupe command has this flag")

    # --- the reference lists every flag ------------------------------------------------------

    def check_reference(self):
        with open(os.path.join(self.repo.root, "README.md"), encoding="utf-8") as f:
            lines = f.read().split("\n")
        start = next((i for i, l in enumerate(lines) if l.strip() == REFERENCE_HEADING), None)
        if start is None:
            self.problem("README.md", 1, f"no '{REFERENCE_HEADING}' section")
            return
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")),
                   len(lines))
        section = "\n".join(lines[start:end])
        missing = {}
        for cmd, flags in self.cli.items():
            for flag in flags:
                if flag.startswith("--") and flag not in UNIVERSAL_FLAGS and not re.search(
                        r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", section):
                    missing.setdefault(flag, []).append(f"troupe {cmd}".strip())
        for flag in sorted(missing):
            cmds = ", ".join(f"`{c}`" for c in sorted(missing[flag]))
            self.problem("README.md", start + 1,
                         f"{flag} ({cmds}) is missing from the Command line reference")

    # --- headers named by their folder's README -----------------------------------------------

    def check_headers_listed(self, folder, readme):
        with open(os.path.join(self.repo.root, readme), encoding="utf-8") as f:
            text = FENCED_BLOCK.sub("", f.read())
        names = set()
        for line in text.split("\n"):
            for span in CODE_SPAN.finditer(line):
                for word in re.split(r"[\s,]+", span.group(2)):
                    base = os.path.basename(word.strip("`()"))
                    names |= {base, base.rsplit(".", 1)[0]} - {""}
        for f in sorted(self.repo.files):
            if os.path.dirname(f) != folder or not f.endswith(".h"):
                continue
            name = os.path.basename(f)
            if not any(fnmatch.fnmatch(name, n) or fnmatch.fnmatch(name[:-2], n) for n in names):
                self.problem(readme, 0, f"{name} is not named in {readme} (its stem, file name or a glob)")

    # --- pointers to sections ----------------------------------------------------------------

    def sections_of(self, md):
        if md not in self.sections:
            try:
                with open(os.path.join(self.repo.root, md), encoding="utf-8") as f:
                    lines = f.read().split("\n")
            except OSError:
                self.sections[md] = None
                return None
            found = [l.lstrip("#").strip() for l in lines if l.startswith("#")]
            found += [m.group(1) for l in lines for m in [re.match(r"^\s*[-*] \*\*(.+?)\*\*", l)] if m]
            self.sections[md] = [re.sub(r"[`*]", "", x).lower() for x in found]
        return self.sections[md]

    def check_section_refs(self):
        self.sections = {}
        for path in sorted(self.repo.files):
            if not path.endswith(POINTING_FILES):
                continue
            try:
                with open(os.path.join(self.repo.root, path), encoding="utf-8") as f:
                    lines = f.read().split("\n")
            except (OSError, UnicodeDecodeError):
                continue
            for n, line in enumerate(lines, 1):
                for m in SECTION_REF.finditer(line):
                    md, section = m.group(1), m.group(2)
                    if is_placeholder(os.path.basename(md)[:-3]) or section.strip(". …") == "":
                        continue  # docs/FILE.md: a form, not a pointer
                    if "/" not in md and f"docs/{md}" in self.repo.files:
                        md = f"docs/{md}"
                    found = self.sections_of(md)
                    wanted = re.sub(r"[`*]", "", section).lower()
                    if found is None:
                        self.problem(path, n, f"{md} (named with \"{section}\") does not exist")
                    elif not any(x.startswith(wanted) or wanted in x for x in found):
                        self.problem(path, n, f"{md} has no section \"{section}\" (no heading or bold lead)")

    def check_test_names(self):
        for path in sorted(self.repo.files):
            if not path.startswith("tests/") or not path.endswith(".cpp"):
                continue
            with open(os.path.join(self.repo.root, path), encoding="utf-8", errors="replace") as f:
                text = f.read()
            for m in re.finditer(r'TEST_CASE\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)', text):
                if ";" in m.group(1):
                    line = text.count("\n", 0, m.start()) + 1
                    self.problem(path, line, "a TEST_CASE name holds ';', where CTest splits test names")

    def run(self):
        for folder in self.repo.source_folders():
            if folder in DATA_FOLDERS:
                continue
            readme = os.path.join(folder, "README.md")
            if readme not in self.repo.files:
                self.problem(readme, 0, f"source folder {folder or '.'}/ has no README.md")
            else:
                self.check_headers_listed(folder, readme)
        self.check_section_refs()
        self.check_test_names()
        docs = sorted(f for f in self.repo.files if os.path.basename(f) == "README.md"
                      or (f.startswith("docs/") and f.endswith(".md")))
        for md in docs:
            self.check_markdown(md)
        self.check_reference()
        return self.problems


# Folders whose every file is input to a program, where a README would be
# read as one more input: documented by their parent's README instead.
DATA_FOLDERS = {
    "examples/summarize-papers/papers",  # every file is a batch job item (summarize.py, batch --dir)
    "examples/summarize-papers/documents",  # the same, whole documents (the README one up says whence)
}


def read_help(binary, args):
    out = subprocess.run([binary, *args, "--help"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"{binary} {' '.join(args)} --help: exit {out.returncode}: "
                           f"{out.stderr.strip()}")
    flags, subs, section = set(), [], ""
    for line in out.stdout.split("\n"):
        if line and not line.startswith(" "):
            section = line.strip().rstrip(":")
            continue
        m = re.match(r"^ {2,6}(\S+)", line)
        if not m:
            continue
        if section == "Subcommands":
            subs.append(m.group(1))
        elif m.group(1).startswith("-"):
            for name in m.group(1).split(","):
                name = re.sub(r"\{.*$", "", name)
                if re.fullmatch(r"--?[A-Za-z0-9][A-Za-z0-9-]*", name):
                    flags.add(name)
    return flags, subs


def read_cli(binary):
    cli = {}
    flags, subs = read_help(binary, [])
    cli[""] = flags
    todo = [[s] for s in subs]
    while todo:
        path = todo.pop(0)
        flags, nested = read_help(binary, path)
        cli[" ".join(path)] = flags
        todo += [path + [s] for s in nested]
    return cli


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    binary, root = argv[1], argv[2]
    try:
        cli = read_cli(os.path.abspath(binary))
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        print(f"check_docs: cannot read the command line from {binary}: {e}", file=sys.stderr)
        return 2
    problems = Checker(Repo(root), cli).run()
    for p in problems:
        print(p)
    if problems:
        print(f"check_docs: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check_docs: ok ({len(cli) - 1} commands)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
