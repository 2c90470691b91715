"""Invalid instances for check_llguidance_masks.py: a valid instance broken in one place (a
wrong type, a bound crossed, a required property dropped, ...), which troupe must refuse whole."""
import copy

from llguidance_instances import Node
from llguidance_layout import Escaped

BAD_FORMATS = {"date": ["2023-02-30", "2023-13-01", "23-01-01"], "date-time": ["2023-01-01T25:00:00Z",
               "2023-01-01T10:00:00", "2023-02-30T10:00:00Z"], "uuid": ["123e4567-e89b-12d3-a456-42661417400",
               "123e4567-e89b-12d3-a456-42661417400g", "123e4567e89b12d3a456426614174000"],
               "email": ["no-at-sign", "a b@example.com", "@example.com"], "ipv4": ["256.1.1.1", "1.2.3", "1.2.3.4.5"]}
NOT_OF_TYPE = [("integer", 0), ("string", "x"), ("boolean", True), ("null", None), ("array", []), ("object", {})]


def json_types(s):
    t = s.get("type")
    if t is None:
        if "enum" in s or "const" in s:
            vals = s.get("enum", [s.get("const")])
            return {{bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}[type(v)]
                    for v in vals}
        return None
    t = set(t) if isinstance(t, list) else {t}
    return t | ({"integer"} if "number" in t else set())


def leaf(v, schema):
    if isinstance(v, list):
        return Node("array", schema, None, [])
    if isinstance(v, dict):
        return Node("object", schema, None, [])
    return Node("scalar", schema, v)


def mutations(node, gen, rng):
    """(description, mutated copy) for ways to break the instance `node` in one place."""
    out = []
    for n, parent, idx in spots(node):
        s = gen.resolve(n.schema) if n.schema is not None else {}
        if any(k in s for k in ("anyOf", "oneOf")):
            continue
        for desc, repl in breakages(n, s, gen):
            if parent is None:
                out.append((desc, repl))
                continue
            out.append((desc, replace_child(node, parent, idx, repl)))
    return out


def spots(node):
    """(node, parent, index in the parent) for every node of the instance, depth first."""
    out = []

    def walk(n, parent, idx):
        out.append((n, parent, idx))
        for i, c in enumerate(n.children or []):
            walk(c[1] if n.kind == "object" else c, n, i)

    walk(node, None, None)
    return out


def breakages(n, s, gen):
    """(description, replacement) for each way to break the node `n` (its schema resolved: `s`)."""
    bad = type_breakages(s)
    if n.kind == "number":
        bad += number_breakages(s)
    if n.kind == "string":
        bad += string_breakages(n, s)
    if n.kind == "array":
        bad += array_breakages(n, s)
    if n.kind == "object":
        bad += object_breakages(n, s, gen)
    return bad


def type_breakages(s):
    bad = []
    types = json_types(s)
    if types:
        bad += [(f"type {t} where {'/'.join(sorted(types))}", leaf(v, s)) for t, v in NOT_OF_TYPE
                if t not in types and not (t == "integer" and "number" in types)]
    if "enum" in s or "const" in s:
        bad.append(("value outside enum/const", leaf("zzz-not-allowed", s)))
    return bad


def number_breakages(s):
    bad = []
    if "minimum" in s:
        bad.append(("below minimum", Node("number", s, s["minimum"] - (1 if s.get("type") == "integer" else 0.5))))
    if "maximum" in s:
        bad.append(("above maximum", Node("number", s, s["maximum"] + 1)))
    if s.get("type") == "integer":
        bad.append(("fraction for an integer", Node("number", s, 1.5)))
    return bad


def string_breakages(n, s):
    bad = []
    if "maxLength" in s:
        bad.append(("longer than maxLength", Node("string", s, "x" * (s["maxLength"] + 1))))
        bad.append(("longer than maxLength (escapes)", Node("string", s, "\n\"" * (s["maxLength"] // 2 + 1))))
    if s.get("minLength", 0) > 0:
        bad.append(("shorter than minLength", Node("string", s, "x" * (s["minLength"] - 1))))
        # one code point each, four UTF-8 bytes, two UTF-16 units (\\ud83d\\ude00 when escaped)
        bad.append(("shorter than minLength (astral characters)", Node("string", s, "😀" * (s["minLength"] - 1))))
        bad.append(("shorter than minLength (astral, escaped)", Node("string", s, Escaped("😀" * (s["minLength"] - 1)))))
    if "pattern" in s:
        bad.append(("not matching pattern", Node("string", s, n.value + "!")))
    for v in BAD_FORMATS.get(s.get("format"), []):
        bad.append((f"bad {s['format']}", Node("string", s, v)))
    return bad


def array_breakages(n, s):
    bad = []
    if "maxItems" in s and n.children:
        bad.append(("more than maxItems", Node("array", s, None, n.children + [n.children[0]] * (s["maxItems"] + 1 - len(n.children)))))
    if s.get("minItems", 0) > 0:
        bad.append(("fewer than minItems", Node("array", s, None, n.children[:s["minItems"] - 1])))
    return bad


def object_breakages(n, s, gen):
    bad = []
    for k in s.get("required", []):
        bad.append((f"required {k} missing", Node("object", s, None, [c for c in n.children if c[0] != k])))
    if s.get("additionalProperties") is False:
        bad.append(("additional property", Node("object", s, None, n.children + [("extra_key", Node("scalar", None, 1))])))
    else:  # a declared property, of a wrong type, where an additional property may stand
        have = {c[0] for c in n.children}
        for k, sub in s.get("properties", {}).items():
            t = json_types(gen.resolve(sub)) or set()
            if k not in have and "integer" not in t and "number" not in t:
                bad.append((f"declared {k} of a wrong type first", Node("object", s, None, [(k, leaf(7, None))] + n.children)))
                bad.append((f"declared {k} of a wrong type first, its name escaped",
                            Node("object", s, None, [(Escaped(k), leaf(7, None))] + n.children)))
                break
    return bad


def replace_child(root, parent, idx, repl):
    """A copy of the instance `root` with the child `idx` of `parent` replaced by `repl`."""
    p2 = copy.copy(parent)
    p2.children = list(parent.children)
    p2.children[idx] = (parent.children[idx][0], repl) if parent.kind == "object" else repl
    return replace_node(root, parent, p2)


def replace_node(root, old, new):
    if root is old:
        return new
    if not root.children:
        return root
    kids = [(k, replace_node(v, old, new)) for k, v in root.children] if root.kind == "object" else \
        [replace_node(v, old, new) for v in root.children]
    return Node(root.kind, root.schema, root.value, kids)
