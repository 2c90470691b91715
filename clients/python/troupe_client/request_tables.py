"""Building a Request: its FlatBuffers tables (Sampling, Constraint, ToolCall) and the
names the client's arguments take for the schema's enums (messages/client.fbs)."""
import json

from troupe.wire import ChatMessage, Constraint, JobCheck, Priority, Request, Sampling, ToolCall, ToolChoice

_PRIORITIES = {"interactive": Priority.Priority.interactive, "chat": Priority.Priority.chat,
               "batch": Priority.Priority.batch}
_SPECULATION = {"default": 0, "off": 1, "ngram": 2, "draft": 3, "auto": 4, "suffix": 5}
# What a request does when it outgrows the context (messages/client.fbs ContextPolicy).
_CONTEXT_POLICIES = {"default": 0, "refuse": 1, "window": 2, "summarize": 3}
_TOOL_CHOICES = {"auto": ToolChoice.ToolChoice.auto_, "none": ToolChoice.ToolChoice.none,
                 "required": ToolChoice.ToolChoice.required}
_CONSTRAINT_KINDS = {"grammar": 1, "json_schema": 2, "regex": 3, "choice": 4, "json_object": 5}


def _constraint(b, constraint):
    """constraint: None, or a dict with one key: {"json_schema": a schema
    (dict, JSON text, or a Pydantic model class)}, {"grammar": GBNF text},
    {"regex": pattern}, {"choice": [strings]} or {"json_object": True}."""
    if not constraint:
        return None
    if not isinstance(constraint, dict) or len(constraint) != 1:
        raise ValueError("constraint must be a dict with one of: " + ", ".join(_CONSTRAINT_KINDS))
    (kind, value), = constraint.items()
    if kind not in _CONSTRAINT_KINDS:
        raise ValueError(f"unknown constraint {kind!r}; one of: " + ", ".join(_CONSTRAINT_KINDS))
    text, choices = None, None
    if kind == "json_schema":
        if hasattr(value, "model_json_schema"):
            value = value.model_json_schema()
        text = b.CreateString(value if isinstance(value, str) else json.dumps(value))
    elif kind in ("grammar", "regex"):
        text = b.CreateString(value)
    elif kind == "choice":
        offs = [b.CreateString(c) for c in value]
        Constraint.StartChoicesVector(b, len(offs))
        for o in reversed(offs):
            b.PrependUOffsetTRelative(o)
        choices = b.EndVector()
    Constraint.Start(b)
    Constraint.AddKind(b, _CONSTRAINT_KINDS[kind])
    if text is not None:
        Constraint.AddText(b, text)
    if choices is not None:
        Constraint.AddChoices(b, choices)
    return Constraint.End(b)


_CHECK_KINDS = {"regex": 1, "contains": 2, "json_schema": 3}


def _job_check(b, check):
    """A batch job's check: ("regex" | "contains" | "json_schema", text or schema dict), or None."""
    if check is None:
        return None
    kind, value = check
    if kind not in _CHECK_KINDS:
        raise ValueError(f"check kind {kind!r}: one of {', '.join(_CHECK_KINDS)}")
    text = b.CreateString(value if isinstance(value, str) else json.dumps(value))
    JobCheck.Start(b)
    JobCheck.AddKind(b, _CHECK_KINDS[kind])
    JobCheck.AddText(b, text)
    return JobCheck.End(b)


def _sampling(b, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, stop, accept_ratio=1.0,
              tier="", escalate_threshold=0.0, constraint=None, kv_budget=0, escalate_class=""):
    constraint_off = _constraint(b, constraint)
    stops = [b.CreateString(s) for s in stop]
    tier_s = b.CreateString(tier) if tier else None
    class_s = b.CreateString(escalate_class) if escalate_class else None
    stop_vec = None
    if stops:
        Sampling.StartStopVector(b, len(stops))
        for s in reversed(stops):
            b.PrependUOffsetTRelative(s)
        stop_vec = b.EndVector()
    Sampling.Start(b)
    Sampling.AddTemperature(b, temperature)
    Sampling.AddTopK(b, top_k)
    Sampling.AddTopP(b, top_p)
    Sampling.AddMinP(b, min_p)
    Sampling.AddRepeatPenalty(b, repeat_penalty)
    Sampling.AddSeed(b, seed)
    Sampling.AddMaxTokens(b, max_tokens)
    Sampling.AddAcceptRatio(b, accept_ratio)
    Sampling.AddEscalateThreshold(b, escalate_threshold)
    if kv_budget:
        Sampling.AddKvBudget(b, kv_budget)
    if tier_s is not None:
        Sampling.AddTier(b, tier_s)
    if class_s is not None:
        Sampling.AddEscalateClass(b, class_s)
    if stop_vec is not None:
        Sampling.AddStop(b, stop_vec)
    if constraint_off is not None:
        Sampling.AddConstraint(b, constraint_off)
    return Sampling.End(b)


def _tool_calls(b, calls):
    """An assistant message's calls, OpenAI's shape ({"id", "function": {"name", "arguments"}}) or
    this client's ({"id", "name", "arguments"}); arguments a JSON text or an object."""
    offsets = []
    for c in calls:
        fn = c.get("function", c)
        args = fn.get("arguments", "{}")
        args = args if isinstance(args, str) else json.dumps(args)
        i, n, a = b.CreateString(c.get("id", "")), b.CreateString(fn["name"]), b.CreateString(args)
        ToolCall.Start(b)
        ToolCall.AddId(b, i)
        ToolCall.AddName(b, n)
        ToolCall.AddArguments(b, a)
        offsets.append(ToolCall.End(b))
    ChatMessage.StartToolCallsVector(b, len(offsets))
    for o in reversed(offsets):
        b.PrependUOffsetTRelative(o)
    return b.EndVector()


def _request(b, request_id, body_type, body):
    Request.Start(b)
    Request.AddClientRequestId(b, request_id)
    Request.AddBodyType(b, body_type)
    Request.AddBody(b, body)
    b.Finish(Request.End(b))
    return bytes(b.Output())
