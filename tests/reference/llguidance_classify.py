"""Why the engines differ (check_llguidance_masks.py, part 2): a JSON prefix's lexical state and
path, the byte where one engine refuses a token, and the class that difference falls in."""
from llguidance_instances import InstanceGenerator

WS = b" \t\n\r"
MAX_CLASSIFIED = 400  # tokens per mask; past that a fixed sample is classified


class JsonScan:
    """The lexical state of a JSON text prefix and the path to where it ends."""

    def __init__(self, data):
        self.stack = []          # [kind, key or index, keys seen]
        self.mode = "value"      # value | value_or_close | key_or_close | key | colon | after | string | number | literal | done
        self.is_key = False
        self.escape = b""        # the escape being read inside a string
        self.buf = bytearray()   # the current string or number
        for b in data:
            self.feed(b)

    def feed(self, b):
        c = bytes([b])
        if self.mode == "string":
            self.feed_string(c)
            return
        if self.mode in ("number", "literal") and self.feed_scalar(c):
            return
        if c in WS:
            return
        m = self.mode
        if m in ("value", "value_or_close"):
            self.feed_value(c, m)
        elif m in ("key", "key_or_close"):
            if c == b"}" and m == "key_or_close":
                self.stack.pop()
                self.end_value()
            elif c == b'"':
                self.mode, self.is_key, self.buf = "string", True, bytearray()
        elif m == "colon" and c == b":":
            self.mode = "value"
        elif m == "after":
            self.feed_after(c)

    def feed_string(self, c):
        if self.escape:
            self.feed_escape(c)
        elif c == b"\\":
            self.escape = c
        elif c == b'"':
            if self.is_key:
                self.stack[-1][1] = self.buf.decode("utf-8", "replace")
                self.stack[-1][2].add(self.stack[-1][1])
                self.mode = "colon"
            else:
                self.end_value()
        else:
            self.buf += c

    def feed_escape(self, c):
        self.escape += c
        if self.escape[1:2] != b"u":
            self.buf += {b"n": b"\n", b"t": b"\t", b"r": b"\r", b"b": b"\b", b"f": b"\f"}.get(c, c)
            self.escape = b""
        elif len(self.escape) == 6:
            self.buf += chr(int(self.escape[2:], 16)).encode("utf-8", "surrogatepass")
            self.escape = b""

    def feed_scalar(self, c):
        """Whether `c` goes on the number or literal being read; if not, that value has ended
        (and `c` is read after it)."""
        m = self.mode
        if (m == "number" and c in b"0123456789.eE+-") or (m == "literal" and c.isalpha()):
            self.buf += c
            return True
        self.end_value()
        return False

    def feed_value(self, c, m):
        if c == b"]" and m == "value_or_close":
            self.stack.pop()
            self.end_value()
        elif c == b"{":
            self.stack.append(["obj", None, set()])
            self.mode = "key_or_close"
        elif c == b"[":
            self.stack.append(["arr", 0, None])
            self.mode = "value_or_close"
        elif c == b'"':
            self.mode, self.is_key, self.buf = "string", False, bytearray()
        elif c in b"-0123456789":
            self.mode, self.buf = "number", bytearray(c)
        else:
            self.mode, self.buf = "literal", bytearray(c)

    def feed_after(self, c):
        if c == b",":
            if self.stack[-1][0] == "obj":
                self.stack[-1][1] = None
                self.mode = "key"
            else:
                self.stack[-1][1] += 1
                self.mode = "value"
        elif c in b"}]":
            self.stack.pop()
            self.end_value()

    def end_value(self):
        self.mode = "after" if self.stack else "done"

    def path(self):
        return [f[1] for f in self.stack if f[1] is not None]


def schemas_at(root, path):
    """The subschemas (anyOf/oneOf branches spread, $refs resolved) a path can lead to."""
    gen = InstanceGenerator(root, None)

    def spread(s):
        s = gen.resolve(s)
        for key in ("anyOf", "oneOf"):
            if key in s:
                rest = {k: v for k, v in s.items() if k != key}
                return [x for b in s[key] for x in spread({**rest, **b})]
        return [s]

    cur = spread(root)
    for p in path:
        nxt = []
        for s in cur:
            if isinstance(p, int) and "items" in s:
                nxt += spread(s["items"])
            elif isinstance(p, str) and p in s.get("properties", {}):
                nxt += spread(s["properties"][p])
        cur = nxt
    return cur


def rejection_point(vocab, base, data, memo):
    """How many bytes of `data` the matcher `base` takes one at a time (len(data): all of them)."""
    memo.setdefault(b"", base)
    for i in range(len(data)):
        key = data[:i + 1]
        if key not in memo:
            parent = memo[data[:i]]
            m = parent.deep_copy()
            memo[key] = m if m.consume_token(vocab.byte_token[data[i]]) else False
        if memo[key] is False:
            return i
    return len(data)


def classify(vocab, token, prefix, schema, other, memo):
    """Why one engine allows `token` after `prefix` and the other (matcher `other`) does not."""
    if token in vocab.eog_set:
        return "end of generation where the text is whole"
    b = vocab.bytes[token]
    if not b:
        return "special token"
    i = rejection_point(vocab, other, b, memo)
    if i == len(b):
        return "token refused whole, its bytes taken one by one"
    scan = JsonScan(prefix + b[:i])
    c = b[i:i + 1]
    subs = schemas_at(schema, scan.path())
    m = scan.mode
    if m == "string" and scan.is_key:
        return "escapes in property names" if scan.escape or c == b"\\" else "property names (additional, order)"
    if m == "string":
        return classify_string(scan, c, subs)
    if c in (b" ", b"\t", b"\n", b"\r"):
        return "whitespace"
    if m == "number" or (m in ("value", "value_or_close") and c in b"-0123456789"):
        return classify_number(scan, c, subs)
    return classify_structure(m, c)


def has(subs, k):
    """Whether any of the subschemas has the keyword `k`."""
    return any(k in s for s in subs)


def classify_string(scan, c, subs):
    """The byte `c` refused inside a string value."""
    if scan.escape or c == b"\\":
        return classify_escape(scan, c, subs)
    if c == b"\x7f":
        return "raw DEL (0x7F) in strings"
    if c < b"\x20":
        return "raw control characters in strings"
    for k in ("format", "pattern"):
        if has(subs, k):
            return f"string {k} " + ", ".join(sorted({str(s[k]) for s in subs if k in s}))
    if has(subs, "enum") or has(subs, "const"):
        return "enum / const strings"
    if has(subs, "minLength") or has(subs, "maxLength"):
        return "string length"
    return "non-ASCII string content" if c >= b"\x80" else "string content"


def classify_escape(scan, c, subs):
    """The byte `c` refused in or as the start of an escape inside a string value."""
    esc = (scan.escape + c).decode("latin-1")
    what = [k for k in ("format", "pattern", "enum", "const") if has(subs, k)]
    if what:
        return f"string escapes in {'/'.join(what)} strings"
    if esc == "\\":
        return "string escapes (a backslash at all)"
    if esc.startswith("\\u"):
        h = esc[2:]
        surrogate = h[:1] in ("d", "D") and len(h) > 1 and h[1] in "89abcdefABCDEF"
        return "string escapes (\\u surrogates)" if surrogate else "string escapes (\\u)"
    return f"string escapes ({esc[:2]})"


def classify_number(scan, c, subs):
    """The byte `c` refused in or as the start of a number."""
    ints = [s for s in subs if s.get("type") == "integer" or "integer" in (s.get("type") or [])]
    mins = [s["minimum"] for s in subs if "minimum" in s]
    kind = "integer" if ints else "number"
    if mins and min(mins) >= 0 and (c == b"-" or scan.buf == b"-"):
        return f"-0 where minimum >= 0 ({kind})"
    if ints and any("minimum" in s or "maximum" in s for s in ints):
        return "integer bounds"
    if c in b"eE+" or (c == b"-" and scan.buf[-1:] in (b"e", b"E")):
        return "number exponent" + (" (number with minimum)" if mins else "")
    if c == b".":
        return "number fraction"
    if scan.buf in (b"-0", b"0") and c in b"0123456789":
        return "number leading zero"
    return "number format"


def classify_structure(m, c):
    """The byte `c` refused between values (scanner mode `m`): keys, separators, ends, literals."""
    if m in ("key", "key_or_close"):
        return "object end (required properties)" if c == b"}" else "property names (additional, order)"
    if m == "after":
        if c == b",":
            return "another property or item (additionalProperties, maxItems)"
        return "object/array end (required properties, minItems)"
    if m in ("value", "value_or_close"):
        if c == b'"':
            return "string where the schema has another type"
        if c == b"]":
            return "array end (minItems)"
        return "value type (const, enum, literal, object, array)"
    if m == "literal":
        return "literal"
    return f"after the value ({m})"
