"""Laying an instance out as text the ways troupe's grammar takes it (json.dumps' default,
compact, indented), with where every key and value lies: the context of each test point."""
import json


class Layout:
    def __init__(self, name, item_sep, key_sep, indent=None):
        self.name, self.item_sep, self.key_sep, self.indent = name, item_sep, key_sep, indent


LAYOUTS = [Layout("json.dumps default", ", ", ": "), Layout("compact", ",", ":"), Layout("indent 2", ",", ": ", 2),
           Layout("indent 4", ",", ": ", 4)]


class Escaped(str):
    """A string written with every character \\u-escaped (UTF-16 units, as JSON has it)."""


def json_string(s, ascii_only):
    if isinstance(s, Escaped):
        units = s.encode("utf-16-be")
        return '"' + "".join(f"\\u{units[i]:02x}{units[i + 1]:02x}" for i in range(0, len(units), 2)) + '"'
    return json.dumps(s, ensure_ascii=ascii_only)


def json_number(v):
    return json.dumps(v)


def serialize(node, layout, ascii_only):
    """Text as bytes and spans (start, end, kind, schema, array depth) of keys and scalar values."""
    out = bytearray()
    spans = []

    def emit(s):
        out.extend(s.encode("utf-8"))

    def nl(depth):
        if layout.indent is not None:
            emit("\n" + " " * (layout.indent * depth))

    def walk(n, depth, arrays):
        if n.kind == "object" or n.kind == "array":
            opening, closing = ("{", "}") if n.kind == "object" else ("[", "]")
            start = len(out)
            emit(opening)
            inner = arrays + (1 if n.kind == "array" else 0)
            items = n.children
            for i, item in enumerate(items):
                if i:
                    emit(layout.item_sep)
                nl(depth + 1)
                if n.kind == "object":
                    k, v = item
                    ks = len(out)
                    emit(json_string(k, ascii_only))
                    spans.append((ks, len(out), "key", n.schema, inner))
                    emit(layout.key_sep)
                    walk(v, depth + 1, inner)
                else:
                    walk(item, depth + 1, inner)
            if items:
                nl(depth)
            emit(closing)
            spans.append((start, len(out), n.kind, n.schema, inner))
        else:
            start = len(out)
            if n.kind == "string":
                emit(json_string(n.value, ascii_only))
            elif n.kind == "number":
                emit(json_number(n.value))
            else:
                emit(json.dumps(n.value, ensure_ascii=ascii_only))
            kind = n.kind if n.kind != "scalar" else ("string" if isinstance(n.value, str) else "literal")
            spans.append((start, len(out), kind, n.schema, arrays))

    walk(node, 0, 0)
    return bytes(out), spans


def context_at(spans, p, total):
    """Where a prefix of p bytes ends: ('mid-<kind>' | 'before-<kind>' | 'end', schema, array depth)."""
    if p >= total:
        return "full text", None, 0
    inside = [s for s in spans if s[0] < p < s[1] and s[2] not in ("object", "array")]
    depth = max([s[4] for s in spans if s[0] < p < s[1] and s[2] == "array"] + [0])
    if inside:
        s = inside[0]
        return "mid-" + s[2], s[3], depth
    upcoming = sorted((s for s in spans if s[0] >= p), key=lambda s: (s[0], -(s[1] - s[0])))
    if upcoming:
        return "before-" + upcoming[0][2], upcoming[0][3], depth
    return "before-close", None, depth
