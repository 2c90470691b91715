"""Valid instances for check_llguidance_masks.py: strings sampled from a regex, a format or a
word list, and whole JSON values of a schema as value trees (each node with its subschema)."""
import datetime
import uuid

try:
    import re._parser as sre_parse  # Python 3.11+
    from re._constants import (ANY, AT, BRANCH, CATEGORY, CATEGORY_DIGIT, CATEGORY_NOT_DIGIT, CATEGORY_NOT_SPACE,
                               CATEGORY_NOT_WORD, CATEGORY_SPACE, CATEGORY_WORD, IN, LITERAL, MAX_REPEAT, MAXREPEAT,
                               MIN_REPEAT, NEGATE, NOT_LITERAL, RANGE, SUBPATTERN)
except ImportError:  # pragma: no cover
    import sre_parse
    from sre_constants import (ANY, AT, BRANCH, CATEGORY, CATEGORY_DIGIT, CATEGORY_NOT_DIGIT, CATEGORY_NOT_SPACE,
                               CATEGORY_NOT_WORD, CATEGORY_SPACE, CATEGORY_WORD, IN, LITERAL, MAX_REPEAT, MAXREPEAT,
                               MIN_REPEAT, NEGATE, NOT_LITERAL, RANGE, SUBPATTERN)

POOL = [chr(c) for c in range(0x20, 0x7F)] + list("éüñßø中文字😀")


def sample_regex(pattern, rng):
    out = []

    def gen(seq):
        for op, av in seq:
            if op == LITERAL:
                out.append(chr(av))
            elif op == NOT_LITERAL:
                out.append(rng.choice([c for c in POOL if ord(c) != av]))
            elif op == ANY:
                out.append(rng.choice(POOL[:95]))
            elif op == IN:
                out.append(sample_in(av, rng))
            elif op == CATEGORY:
                out.append(rng.choice(category_chars(av)))
            elif op in (MAX_REPEAT, MIN_REPEAT):
                lo, hi, sub = av
                hi = lo + 3 if hi == MAXREPEAT else hi
                for _ in range(rng.randint(lo, hi)):
                    gen(sub)
            elif op == SUBPATTERN:
                gen(av[-1])
            elif op == BRANCH:
                gen(rng.choice(av[1]))
            elif op == AT:
                pass
            else:
                raise ValueError(f"pattern {pattern!r}: no sampler for {op}")

    gen(sre_parse.parse(pattern))
    return "".join(out)


def in_set(items, c):
    """Whether the character `c` is in a character class's items (negation aside)."""
    for op, av in items:
        if op == LITERAL and ord(c) == av:
            return True
        if op == RANGE and av[0] <= ord(c) <= av[1]:
            return True
        if op == CATEGORY and category_has(av, c):
            return True
    return False


def category_has(av, c):
    if av == CATEGORY_DIGIT and c.isdigit() and c.isascii():
        return True
    if av == CATEGORY_WORD and (c.isalnum() or c == "_") and c.isascii():
        return True
    return av == CATEGORY_SPACE and c in " \t\n\r\f\v"


def sample_in(av, rng):
    """One character of a character class ([...]): drawn straight from its literals and ranges,
    or else from the pool's characters it admits."""
    negate = av and av[0][0] == NEGATE
    items = av[1:] if negate else av
    if not negate and all(o in (LITERAL, RANGE) for o, _ in items):
        o, v = rng.choice(items)
        return chr(v) if o == LITERAL else chr(rng.randint(v[0], v[1]))
    cands = [c for c in POOL if in_set(items, c) != negate]
    return rng.choice(cands)


def category_chars(av):
    """The ASCII characters of the pool in a category (\\d, \\w, \\s and their negations)."""
    return [c for c in POOL if {CATEGORY_DIGIT: c.isdigit(), CATEGORY_WORD: c.isalnum() or c == "_",
                                CATEGORY_SPACE: c == " ", CATEGORY_NOT_DIGIT: not c.isdigit(),
                                CATEGORY_NOT_WORD: not (c.isalnum() or c == "_"),
                                CATEGORY_NOT_SPACE: c != " "}[av] and c.isascii()]


WORDS = ("alpha bravo delta echo river stone cloud maple quartz orbit harbor velvet Ada Lovelace Grace Hopper Paris "
         "Berlin Zürich São Paulo naïve café 東京 北京 résumé data-driven 42 v2.1 O'Brien C++ x86_64 "
         "new\nline tab\there \"quoted\" back\\slash path/to/file emoji😀 smile☺ 100% a&b <tag> {braces} [brackets]").split(" ")


def sample_text(rng, lo=0, hi=None):
    hi = hi if hi is not None else max(lo, 24)
    target = rng.randint(lo, min(hi, lo + 30))
    s = ""
    while len(s) < target:
        s += (" " if s else "") + rng.choice(WORDS)
    s = s[:target]
    if len(s) < lo:
        s += "x" * (lo - len(s))
    return s


def sample_format(fmt, rng):
    if fmt == "date":
        d = datetime.date(1950, 1, 1) + datetime.timedelta(days=rng.randint(0, 40000))
        return d.isoformat()
    if fmt == "date-time":
        d = datetime.datetime(1990, 1, 1) + datetime.timedelta(seconds=rng.randint(0, 1_500_000_000))
        s = d.strftime("%Y-%m-%dT%H:%M:%S")
        if rng.random() < 0.3:
            s += "." + str(rng.randint(0, 999)).zfill(3)
        return s + rng.choice(["Z", "Z", "+02:00", "-05:30", "+00:00"])
    if fmt == "time":
        return f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"
    if fmt == "uuid":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    if fmt == "email":
        user = rng.choice(["ada", "grace.hopper", "j_smith", "ops+alerts", "x"])
        return f"{user}@{rng.choice(['example.com', 'mail.example.org', 'uni.edu', 'a.io'])}"
    if fmt == "ipv4":
        return ".".join(str(rng.choice([0, 1, 10, 127, 192, 255, rng.randint(0, 255)])) for _ in range(4))
    raise ValueError(f"no sampler for format {fmt}")


class Node:
    """A generated JSON value with the subschema it was generated for."""

    def __init__(self, kind, schema, value, children=None):
        self.kind, self.schema, self.value, self.children = kind, schema, value, children

    def py(self):
        if self.kind == "object":
            return {k: v.py() for k, v in self.children}
        if self.kind == "array":
            return [v.py() for v in self.children]
        return self.value


class InstanceGenerator:
    def __init__(self, root, rng):
        self.root, self.rng = root, rng

    def resolve(self, s):
        while "$ref" in s:
            ref = s["$ref"]
            assert ref.startswith("#/"), ref
            t = self.root
            for part in ref[2:].split("/"):
                t = t[part]
            s = {**t, **{k: v for k, v in s.items() if k != "$ref"}} if len(s) > 1 else t
        return s

    def gen(self, s, depth=0):
        rng = self.rng
        s = self.resolve(s)
        if "const" in s:
            return Node("scalar", s, s["const"])
        if "enum" in s:
            return Node("scalar", s, rng.choice(s["enum"]))
        for key in ("anyOf", "oneOf"):
            if key in s:
                return self.gen_branch(s, key, depth)
        t = s.get("type")
        if isinstance(t, list):
            t = rng.choice(t)
        if t == "null":
            return Node("scalar", s, None)
        if t == "boolean":
            return Node("scalar", s, rng.random() < 0.5)
        if t == "integer":
            return Node("number", s, self.gen_integer(s))
        if t == "number":
            return Node("number", s, self.gen_number(s))
        if t == "string":
            return Node("string", s, self.gen_string(s))
        if t == "array":
            return self.gen_array(s, depth)
        if t == "object" or "properties" in s:
            return self.gen_object(s, depth)
        raise ValueError(f"no generator for {s}")

    def gen_branch(self, s, key, depth):
        """One branch of anyOf/oneOf, merged with the keywords beside it."""
        branches = s[key]
        if depth > 3:  # recursion: prefer a branch without a $ref
            leaves = [b for b in branches if "$ref" not in b] or branches
            branches = leaves
        return self.gen({**{k: v for k, v in s.items() if k != key}, **self.rng.choice(branches)}, depth)

    def gen_integer(self, s):
        rng = self.rng
        lo, hi = s.get("minimum"), s.get("maximum")
        if lo is None and hi is None:
            v = rng.choice([0, 1, 7, 42, -3, 1234, -987654, 2 ** 31, rng.randint(-10 ** 6, 10 ** 6)])
        else:
            lo = lo if lo is not None else hi - 10 ** rng.randint(1, 6)
            hi = hi if hi is not None else lo + 10 ** rng.randint(1, 6)
            v = rng.choice([lo, hi, rng.randint(lo, hi), rng.randint(lo, hi)])
        return int(v)

    def gen_number(self, s):
        rng = self.rng
        lo = s.get("minimum", -1e6 if rng.random() < 0.3 else 0)
        hi = s.get("maximum", 1e6)
        r = rng.random()
        if r < 0.2:
            v = float(rng.randint(int(max(lo, -1000)), int(min(hi, 1000))))
        elif r < 0.25:
            v = rng.choice([1.5e-7, 6.02e23, 3e20]) if lo <= 1.5e-7 else lo
        else:
            v = round(rng.uniform(lo, min(hi, lo + 10 ** rng.randint(1, 5))), rng.randint(1, 4))
        v = min(max(v, lo), hi)
        if rng.random() < 0.25 and v == int(v) and abs(v) < 1e15:
            v = int(v)
        return v

    def gen_string(self, s):
        if "format" in s:
            return sample_format(s["format"], self.rng)
        if "pattern" in s:
            return sample_regex(s["pattern"], self.rng)
        return sample_text(self.rng, s.get("minLength", 0), s.get("maxLength"))

    def gen_array(self, s, depth):
        lo = s.get("minItems", 0)
        hi = s.get("maxItems", lo + 3)
        n = self.rng.randint(lo, min(hi, lo + (3 if depth < 2 else 1 if depth < 4 else 0)))
        return Node("array", s, None, [self.gen(s["items"], depth + 1) for _ in range(n)])

    def gen_object(self, s, depth):
        req = set(s.get("required", []))
        kids = []
        for k, sub in s.get("properties", {}).items():
            if k in req or self.rng.random() < (0.7 if depth < 3 else 0.2):
                kids.append((k, self.gen(sub, depth + 1)))
        return Node("object", s, None, kids)
