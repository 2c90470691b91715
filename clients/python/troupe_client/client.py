"""The client proper: request building, response parsing, streams."""
import itertools
import json
import time

import flatbuffers
import zmq

from troupe.wire import (Accepted, Ack, Cancel, CancelJob, ChatMessage, ChatTurn, Constraint, DeleteSession, Done, Error,
                         ErrorCode, FinishReason, Generate, JobAccepted, JobEvent, JobList, JobReply, JobResults,
                         JobState, JobStatus, ListJobs, ListSessions, Ping, Pong, Priority, Request, RequestBody,
                         Response, ResponseBody, ResponseCacheOutcome, Sampling, Session, SessionList, ShowSession,
                         Stats, StatsReply, SubmitJob, Tokens, ToolCall, ToolChoice)

_PRIORITIES = {"interactive": Priority.Priority.interactive, "chat": Priority.Priority.chat,
               "batch": Priority.Priority.batch}
_SPECULATION = {"default": 0, "off": 1, "ngram": 2, "draft": 3, "auto": 4}
# What a request does when it outgrows the context (messages/client.fbs ContextPolicy).
_CONTEXT_POLICIES = {"default": 0, "refuse": 1, "window": 2, "summarize": 3}
_TOOL_CHOICES = {"auto": ToolChoice.ToolChoice.auto_, "none": ToolChoice.ToolChoice.none,
                 "required": ToolChoice.ToolChoice.required}
_TURN_STATES = {0: "window", 1: "summarized", 2: "archived"}
_ERROR_NAMES = {v: k for k, v in vars(ErrorCode.ErrorCode).items() if not k.startswith("_")}
_FINISH_NAMES = {v: k for k, v in vars(FinishReason.FinishReason).items() if not k.startswith("_")}
_JOB_STATES = {v: k for k, v in vars(JobState.JobState).items() if not k.startswith("_")}
_CACHE_OUTCOMES = {v: k for k, v in vars(ResponseCacheOutcome.ResponseCacheOutcome).items() if not k.startswith("_")}


def _table(body, cls):
    t = cls()
    t.Init(body.Bytes, body.Pos)
    return t


def read_key_file(path):
    """The fields of a `troupe keygen` file (NAME.key or NAME.secret) as a dict."""
    fields = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                name, value = line.split("=", 1)
                fields[name.strip()] = value.strip()
    if "public-key" not in fields:
        raise ValueError(f"{path}: no public-key line")
    return fields


def _use_curve(sock, client_key, server_key):
    """CURVE on a client socket: client_key is its .secret file, server_key the server's .key."""
    if client_key is None and server_key is None:
        return
    if client_key is None or server_key is None:
        raise ValueError("a server under CURVE needs both client_key (your .secret) and server_key (its .key)")
    mine = read_key_file(client_key)
    if "secret-key" not in mine:
        raise ValueError(f"{client_key}: no secret-key line (give the .secret file)")
    sock.setsockopt(zmq.CURVE_SERVERKEY, read_key_file(server_key)["public-key"].encode())
    sock.setsockopt(zmq.CURVE_PUBLICKEY, mine["public-key"].encode())
    sock.setsockopt(zmq.CURVE_SECRETKEY, mine["secret-key"].encode())


def subscribe_events(endpoint, topic="", *, client_key=None, server_key=None, context=None):
    """A SUB socket on the server's event socket for topics starting with `topic`
    (a job id). Frames: [topic, JobEvent] (parse_job_event reads the second).
    Under CURVE only one's own jobs' topics are admitted (every topic for an admin)."""
    sock = (context or zmq.Context.instance()).socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    _use_curve(sock, client_key, server_key)
    sock.setsockopt(zmq.SUBSCRIBE, topic.encode())
    sock.connect(endpoint)
    return sock


def _session_summary(s):
    return {"session_id": (s.SessionId() or b"").decode(), "turns": s.Turns(), "tokens": s.Tokens(),
            "created_ms": s.CreatedMs(), "updated_ms": s.UpdatedMs(), "model": (s.Model() or b"").decode(),
            "owner": (s.Owner() or b"").decode(), "escalations": s.Escalations()}


def _job_summary(j):
    return {"job_id": (j.JobId() or b"").decode(), "state": _JOB_STATES.get(j.State(), str(j.State())),
            "items": j.Items(), "finished_items": j.FinishedItems(), "completion_tokens": j.CompletionTokens(),
            "created_ms": j.CreatedMs(), "updated_ms": j.UpdatedMs(), "owner": (j.Owner() or b"").decode()}


def _job_item(r):
    return {"index": r.Index(), "text": (r.Text() or b"").decode(errors="replace"),
            "finish_reason": _FINISH_NAMES.get(r.FinishReason(), str(r.FinishReason())),
            "prompt_tokens": r.PromptTokens(), "completion_tokens": r.CompletionTokens(),
            "error": (r.Error() or b"").decode(), "validated": r.Validated()}


def parse_job_event(frame):
    """A JobEvent frame from the event socket as a dict."""
    e = JobEvent.JobEvent.GetRootAs(frame, 0)
    kinds = {0: "item_finished", 1: "job_finished", 2: "job_cancelled", 3: "job_resumed"}
    out = {"kind": kinds.get(e.Kind(), str(e.Kind())), "job": _job_summary(e.Job()),
           "tokens_per_second": e.TokensPerSecond()}
    if e.Item() is not None:
        out["item"] = _job_item(e.Item())
    return out


class TroupeError(Exception):
    """An Error response: `code` is the ErrorCode name, `message` names the field at fault."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


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


def _sampling(b, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, stop, accept_ratio=1.0,
              tier="", escalate_threshold=0.0, constraint=None):
    constraint_off = _constraint(b, constraint)
    stops = [b.CreateString(s) for s in stop]
    tier_s = b.CreateString(tier) if tier else None
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
    if tier_s is not None:
        Sampling.AddTier(b, tier_s)
    if stop_vec is not None:
        Sampling.AddStop(b, stop_vec)
    if constraint_off is not None:
        Sampling.AddConstraint(b, constraint_off)
    return Sampling.End(b)


def _tier_stats(t):
    return {"name": (t.Name() or b"").decode(), "requests": t.Requests(), "escalated_in": t.EscalatedIn(),
            "escalations": t.Escalations(), "tokens": t.Tokens(), "forward_tokens": t.ForwardTokens(),
            "steps": t.Steps(), "drafted": t.Drafted(), "accepted": t.Accepted(), "running": t.Running(),
            "waiting": t.Waiting(), "pages_used": t.PagesUsed(), "pages_total": t.PagesTotal()}


def _worker_stats(w):
    return {"endpoint": (w.Endpoint() or b"").decode(), "tier": (w.Tier() or b"").decode(), "up": w.Up(),
            "requests": w.Requests(), "moved_in": w.MovedIn(), "moved_out": w.MovedOut(), "lost": w.Lost(),
            "tokens": w.Tokens(), "forward_tokens": w.ForwardTokens(), "steps": w.Steps(), "running": w.Running(),
            "waiting": w.Waiting(), "pages_used": w.PagesUsed(), "pages_total": w.PagesTotal(), "step_ms": w.StepMs()}


def _expect(r, kind):
    """The response's body of `kind`, or TroupeError for an Error (or any other body)."""
    if r.BodyType() == ResponseBody.ResponseBody.Error:
        e = Error.Error()
        e.Init(r.Body().Bytes, r.Body().Pos)
        raise TroupeError(_ERROR_NAMES.get(e.Code(), str(e.Code())), (e.Message() or b"").decode())
    if r.BodyType() != kind or r.Body() is None:
        raise TroupeError("unexpected", f"response body type {r.BodyType()}, expected {kind}")
    return r.Body()


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


class Stream:
    """Iterates over text deltas of one request as they arrive. After the
    iteration: `tokens` (ids), `text`, `finish_reason`, `usage`, `timings`."""

    def __init__(self, client, request_id, n=1):
        self._client = client
        self.request_id = request_id
        self.n = n
        self.samples = [[] for _ in range(n)]  # token ids per sample (n > 1)
        self._done = 0
        self.tokens = []
        self.text = ""
        self.prompt_tokens = None
        self.finish_reason = None
        self.usage = None
        self.timings = None
        self.speculation = None  # from Done: source, drafted, accepted, windows, mean_accepted
        self.response_cache = None  # from Done: "not_asked", "hit", "miss" or "bypassed"
        self.tiers = []  # from Done (a server with tiers): [{"tier": name, "tokens": n}, ...] in order
        self.tool_calls = []  # from Done (a turn with tools): [{"id", "name", "arguments"}, ...]
        self.logprobs = []
        self.top_logprobs = []  # with top_logprobs N: per token, [(id, logprob), ...] most likely first
        self.token_times = []  # time.perf_counter() at which each token of sample 0 arrived

    def __iter__(self):
        """Text of sample 0; with n > 1 the others' ids land in `samples`."""
        while self._done < self.n and self.finish_reason != "error":
            r, arrived = self._client._next_for(self.request_id, with_time=True)
            kind = r.BodyType()
            if kind == ResponseBody.ResponseBody.Accepted:
                a = Accepted.Accepted()
                a.Init(r.Body().Bytes, r.Body().Pos)
                self.prompt_tokens = a.PromptTokens()
            elif kind == ResponseBody.ResponseBody.Tokens:
                t = Tokens.Tokens()
                t.Init(r.Body().Bytes, r.Body().Pos)
                ids = [t.TokenIds(i) for i in range(t.TokenIdsLength())]
                if 0 <= t.Sample() < self.n:
                    self.samples[t.Sample()].extend(ids)
                if t.Sample() != 0:
                    continue
                text = (t.Text() or b"").decode("utf-8")
                self.tokens.extend(t.TokenIds(i) for i in range(t.TokenIdsLength()))
                self.token_times.extend([arrived] * t.TokenIdsLength())
                self.logprobs.extend(t.Logprobs(i) for i in range(t.LogprobsLength()))
                if t.TopIdsLength() and t.TokenIdsLength():
                    n = t.TopIdsLength() // t.TokenIdsLength()
                    for k in range(t.TokenIdsLength()):
                        self.top_logprobs.append([(t.TopIds(k * n + j), t.TopLogprobs(k * n + j)) for j in range(n)])
                self.text += text
                if text:
                    yield text
            elif kind == ResponseBody.ResponseBody.Done:
                d = Done.Done()
                d.Init(r.Body().Bytes, r.Body().Pos)
                self._done += 1
                if d.Sample() != 0:
                    continue
                self.finish_reason = _FINISH_NAMES.get(d.FinishReason(), str(d.FinishReason()))
                self.response_cache = _CACHE_OUTCOMES.get(d.ResponseCache(), str(d.ResponseCache()))
                u, t = d.Usage(), d.Timings()
                self.usage = {"prompt_tokens": u.PromptTokens(), "cached_prompt_tokens": u.CachedPromptTokens(),
                              "completion_tokens": u.CompletionTokens()} if u else {}
                self.timings = {"queue_ms": t.QueueMs(), "ttft_ms": t.TtftMs(), "per_token_ms": t.PerTokenMs(),
                                "total_ms": t.TotalMs()} if t else {}
                self.tiers = [{"tier": (d.Tiers(i).Tier() or b"").decode(), "tokens": d.Tiers(i).Tokens()}
                              for i in range(d.TiersLength())]
                self.tool_calls = [{"id": (d.ToolCalls(i).Id() or b"").decode(),
                                    "name": (d.ToolCalls(i).Name() or b"").decode(),
                                    "arguments": (d.ToolCalls(i).Arguments() or b"").decode()}
                                   for i in range(d.ToolCallsLength())]
                sp = d.Speculation()
                self.speculation = {"source": (sp.Source() or b"").decode(), "drafted": sp.Drafted(),
                                    "accepted": sp.Accepted(), "windows": sp.Windows(),
                                    "mean_accepted": sp.MeanAccepted()} if sp else None
            elif kind == ResponseBody.ResponseBody.Error:
                e = Error.Error()
                e.Init(r.Body().Bytes, r.Body().Pos)
                self.finish_reason = "error"
                raise TroupeError(_ERROR_NAMES.get(e.Code(), str(e.Code())), (e.Message() or b"").decode())

    def read(self):
        """The whole answer (consumes the stream)."""
        for _ in self:
            pass
        return self.text

    def cancel(self):
        self._client.cancel(self.request_id)


class Client:
    """One connection to `troupe serve`. Not thread-safe: one Client per thread."""

    def __init__(self, endpoint="tcp://127.0.0.1:7700", timeout=600.0, connect_timeout=5.0, *, client_key=None,
                 server_key=None):
        """timeout: seconds to wait for any one answer. connect_timeout: seconds for
        the server to answer a Ping at all (ZeroMQ connects lazily, so without it a
        dead endpoint costs the whole timeout); None skips the check. For a server
        under `--auth curve`: client_key, this client's .secret file, and
        server_key, the server's .key file (`troupe keygen` writes both kinds)."""
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        _use_curve(self._sock, client_key, server_key)
        # ZeroMQ's heartbeats off and the receive queue unbounded: with heartbeats, a reader slower
        # than the stream fills the queue, libzmq stops reading the connection, misses the server's
        # heartbeats, and then aborts this process (an assertion in libzmq 4.3.5). A dead server
        # shows as an answer's timeout instead, and ping() asks at any time.
        self._sock.setsockopt(zmq.RCVHWM, 0)
        self._sock.connect(endpoint)
        self._ids = itertools.count(1)
        self._timeout = timeout
        self._pending = {}  # request id -> (response, arrival time) that came while reading another stream
        if connect_timeout is not None:
            self._timeout = connect_timeout
            try:
                self.ping()
            except TimeoutError:
                self.close()
                hint = "is your key in its --clients-dir?" if client_key else "is `troupe serve` running there?"
                raise ConnectionError(f"no troupe server answers at {endpoint} (waited {connect_timeout} s; "
                                      f"{hint})") from None
            finally:
                self._timeout = timeout

    def close(self):
        self._sock.close(0)
        self._ctx.term()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send_raw(self, frame):
        """Sends bytes as they are (tests use this for bad input)."""
        self._sock.send(frame)

    def receive_raw(self, timeout=None):
        """The next response frame's Response table, or None on timeout."""
        if not self._sock.poll(int(1000 * (timeout if timeout is not None else self._timeout))):
            return None
        buf = self._sock.recv()
        return Response.Response.GetRootAs(buf, 0)

    def _next_for(self, request_id, with_time=False):
        """The next response for request_id; frames for other requests are kept,
        with the time they arrived, for their own readers."""
        queue = self._pending.get(request_id)
        if queue:
            r, arrived = queue.pop(0)
            return (r, arrived) if with_time else r
        deadline = time.monotonic() + self._timeout
        while True:
            left = deadline - time.monotonic()
            r = self.receive_raw(max(left, 0)) if left > 0 else None
            if r is None:
                raise TimeoutError(f"no answer for request {request_id} within {self._timeout} s")
            arrived = time.perf_counter()
            if r.ClientRequestId() == request_id:
                return (r, arrived) if with_time else r
            self._pending.setdefault(r.ClientRequestId(), []).append((r, arrived))

    def generate(self, prompt, *, max_tokens=256, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05,
                 repeat_penalty=1.0, seed=0, stop=(), priority="interactive", special=False, logprobs=False,
                 ignore_eos=False, n=1, speculation="default", max_draft=0, draft_model="",
                 context_policy="default", response_cache=False, accept_ratio=1.0, tier="",
                 escalate_threshold=0.0, constraint=None, top_logprobs=0):
        """top_logprobs: with logprobs, the N (0..20) most likely tokens at each position; the stream's
        top_logprobs then holds, per token, [(token id, log-probability), ...] most likely first.
        constraint: the output must follow it (see _constraint: a JSON
        Schema, a GBNF grammar, a regex, a choice of strings, or any JSON
        object); one the server cannot enforce exactly is refused.
        response_cache: answer from the server's stored answer to this very
        request when it has one (greedy, or seeded), else store it; the
        stream's response_cache then says hit, miss or bypassed.
        accept_ratio: with speculation on a greedy request, keep a drafted token
        at least this likely relative to the model's own (1: exactly greedy).
        tier: on a server with model tiers, "small", "large", a tier's name,
        "escalate", "verify" or "auto" ("": the server's default); the stream's
        `tiers` then says which tier wrote which tokens (a first segment of 0
        tokens: the small tier held its answer back and the next wrote it all).
        escalate_threshold: for "escalate", the small tier's confidence to stay
        above: the geometric mean probability of the answer's held first
        tokens (or, on a server with --escalate-hold 0, the mean of its last
        tokens); 0: the server's."""
        b = flatbuffers.Builder(256 + len(prompt))
        text = b.CreateString(prompt)
        draft = b.CreateString(draft_model) if draft_model else None
        sampling = _sampling(b, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, stop,
                             accept_ratio, tier, escalate_threshold, constraint)
        Generate.Start(b)
        Generate.AddPrompt(b, text)
        Generate.AddSampling(b, sampling)
        Generate.AddPriority(b, _PRIORITIES[priority])
        Generate.AddSpecial(b, special)
        Generate.AddLogprobs(b, logprobs)
        Generate.AddIgnoreEos(b, ignore_eos)
        Generate.AddN(b, n)
        Generate.AddSpeculation(b, _SPECULATION[speculation])
        Generate.AddMaxDraft(b, max_draft)
        Generate.AddContextPolicy(b, _CONTEXT_POLICIES[context_policy])
        Generate.AddResponseCache(b, response_cache)
        Generate.AddTopLogprobs(b, top_logprobs)
        if draft is not None:
            Generate.AddDraftModel(b, draft)
        body = Generate.End(b)
        rid = next(self._ids)
        self._sock.send(_request(b, rid, RequestBody.RequestBody.Generate, body))
        return Stream(self, rid, n)

    def chat(self, messages, *, max_tokens=256, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05,
             repeat_penalty=1.0, seed=0, stop=(), priority="chat", session_id="", speculation="default", max_draft=0,
             draft_model="", context_policy="default", response_cache=False, accept_ratio=1.0, tier="",
             escalate_threshold=0.0, constraint=None, tools=None, tool_choice="auto", parallel_tool_calls=True,
             logprobs=False, top_logprobs=0):
        """constraint: as generate's (this turn's only: a session's next turn is free unless it asks).
        messages: [(role, content), ...] or [{"role": ..., "content": ...}, ...]; a dict may also carry
        "tool_calls" (an assistant's, as the stream's tool_calls or OpenAI's) or "tool_call_id" (role
        "tool": the result of that call).
        tools: OpenAI tool objects ({"type": "function", "function": {"name", "description",
        "parameters"}}); tool_choice: "auto", "none", "required" or a function's name. The stream's
        tool_calls then lists the calls the answer makes (finish_reason "tool_calls"), each one's
        arguments valid under its parameters schema.
        context_policy: what a session does past the context: "window" (the
        server's default for sessions: drop the oldest turns), "summarize"
        (and stand for them by a summary), "refuse"."""
        b = flatbuffers.Builder(1024)
        offsets = []
        for m in messages:
            role, content = (m["role"], m.get("content") or "") if isinstance(m, dict) else m
            calls = _tool_calls(b, m["tool_calls"]) if isinstance(m, dict) and m.get("tool_calls") else None
            call_id = b.CreateString(m["tool_call_id"]) if isinstance(m, dict) and m.get("tool_call_id") else None
            r, c = b.CreateString(role), b.CreateString(content)
            ChatMessage.Start(b)
            ChatMessage.AddRole(b, r)
            ChatMessage.AddContent(b, c)
            if calls is not None:
                ChatMessage.AddToolCalls(b, calls)
            if call_id is not None:
                ChatMessage.AddToolCallId(b, call_id)
            offsets.append(ChatMessage.End(b))
        ChatTurn.StartMessagesVector(b, len(offsets))
        for o in reversed(offsets):
            b.PrependUOffsetTRelative(o)
        msgs = b.EndVector()
        sid = b.CreateString(session_id)
        draft = b.CreateString(draft_model) if draft_model else None
        sampling = _sampling(b, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, stop,
                             accept_ratio, tier, escalate_threshold, constraint)
        tool_list = tool_name = None
        if tools:
            texts = [b.CreateString(json.dumps(t)) for t in tools]
            ChatTurn.StartToolsVector(b, len(texts))
            for o in reversed(texts):
                b.PrependUOffsetTRelative(o)
            tool_list = b.EndVector()
        if tool_choice not in _TOOL_CHOICES:
            tool_name = b.CreateString(tool_choice)
        ChatTurn.Start(b)
        ChatTurn.AddSessionId(b, sid)
        ChatTurn.AddMessages(b, msgs)
        ChatTurn.AddSampling(b, sampling)
        ChatTurn.AddPriority(b, _PRIORITIES[priority])
        ChatTurn.AddSpeculation(b, _SPECULATION[speculation])
        ChatTurn.AddMaxDraft(b, max_draft)
        ChatTurn.AddContextPolicy(b, _CONTEXT_POLICIES[context_policy])
        ChatTurn.AddResponseCache(b, response_cache)
        if draft is not None:
            ChatTurn.AddDraftModel(b, draft)
        if tool_list is not None:
            ChatTurn.AddTools(b, tool_list)
        ChatTurn.AddToolChoice(b, ToolChoice.ToolChoice.named if tool_name is not None else _TOOL_CHOICES[tool_choice])
        if tool_name is not None:
            ChatTurn.AddToolName(b, tool_name)
        ChatTurn.AddParallelToolCalls(b, parallel_tool_calls)
        ChatTurn.AddLogprobs(b, logprobs)
        ChatTurn.AddTopLogprobs(b, top_logprobs)
        body = ChatTurn.End(b)
        rid = next(self._ids)
        self._sock.send(_request(b, rid, RequestBody.RequestBody.ChatTurn, body))
        return Stream(self, rid)

    def cancel(self, request_id):
        b = flatbuffers.Builder(64)
        Cancel.Start(b)
        Cancel.AddTargetRequestId(b, request_id)
        self._sock.send(_request(b, next(self._ids), RequestBody.RequestBody.Cancel, Cancel.End(b)))

    def ping(self, nonce=1):
        b = flatbuffers.Builder(64)
        Ping.Start(b)
        Ping.AddNonce(b, nonce)
        rid = next(self._ids)
        self._sock.send(_request(b, rid, RequestBody.RequestBody.Ping, Ping.End(b)))
        body = _expect(self._next_for(rid), ResponseBody.ResponseBody.Pong)
        p = Pong.Pong()
        p.Init(body.Bytes, body.Pos)
        return p.Nonce() == nonce

    def stats(self):
        b = flatbuffers.Builder(64)
        Stats.Start(b)
        rid = next(self._ids)
        self._sock.send(_request(b, rid, RequestBody.RequestBody.Stats, Stats.End(b)))
        body = _expect(self._next_for(rid), ResponseBody.ResponseBody.StatsReply)
        s = StatsReply.StatsReply()
        s.Init(body.Bytes, body.Pos)
        return {"running": s.Running(), "waiting": s.Waiting(), "pages_total": s.PagesTotal(),
                "pages_used": s.PagesUsed(), "pages_cached": s.PagesCached(), "pages_free": s.PagesFree(),
                "live_token_fraction": s.LiveTokenFraction(), "steps": s.Steps(),
                "tokens_generated": s.TokensGenerated(), "model": (s.Model() or b"").decode(),
                "engine_ms": s.EngineMs(), "busy_ms": s.BusyMs(), "pages_spilled": s.PagesSpilled(),
                "pages_restored": s.PagesRestored(), "pages_swapped_out": s.PagesSwappedOut(),
                "pages_swapped_in": s.PagesSwappedIn(), "tokens_shifted": s.TokensShifted(),
                "local_pages_total": s.LocalPagesTotal(), "local_pages_used": s.LocalPagesUsed(),
                "store_degraded": (s.StoreDegraded() or b"").decode(),
                "tiers": [_tier_stats(s.Tiers(i)) for i in range(s.TiersLength())],
                "workers": [_worker_stats(s.Workers(i)) for i in range(s.WorkersLength())]}

    def _ask(self, b, body_type, body, reply_kind):
        rid = next(self._ids)
        self._sock.send(_request(b, rid, body_type, body))
        return _expect(self._next_for(rid), reply_kind)

    def _id_request(self, cls, body_type, field_adder, value, reply_kind):
        b = flatbuffers.Builder(128)
        v = b.CreateString(value)
        cls.Start(b)
        field_adder(b, v)
        return self._ask(b, body_type, cls.End(b), reply_kind)

    # Stored chat sessions (chat(..., session_id=NAME) makes and resumes them).
    def list_sessions(self):
        b = flatbuffers.Builder(64)
        ListSessions.Start(b)
        body = self._ask(b, RequestBody.RequestBody.ListSessions, ListSessions.End(b), ResponseBody.ResponseBody.SessionList)
        lst = _table(body, SessionList.SessionList)
        return [_session_summary(lst.Sessions(i)) for i in range(lst.SessionsLength())]

    def show_session(self, session_id):
        body = self._id_request(ShowSession, RequestBody.RequestBody.ShowSession, ShowSession.AddSessionId, session_id,
                                ResponseBody.ResponseBody.Session)
        s = _table(body, Session.Session)
        out = _session_summary(s.Summary())
        out["messages"] = [((s.Messages(i).Role() or b"").decode(), (s.Messages(i).Content() or b"").decode())
                           for i in range(s.MessagesLength())]
        out["turn_states"] = [_TURN_STATES.get(s.TurnStates(i), str(s.TurnStates(i))) for i in range(s.TurnStatesLength())]
        out["context_summary"] = (s.ContextSummary() or b"").decode()
        return out

    def delete_session(self, session_id):
        body = self._id_request(DeleteSession, RequestBody.RequestBody.DeleteSession, DeleteSession.AddSessionId,
                                session_id, ResponseBody.ResponseBody.Ack)
        return (_table(body, Ack.Ack).Message() or b"").decode()

    # Durable batch jobs; progress events come on the server's event socket (see parse_job_event).
    def submit_job(self, items, template="", *, max_tokens=256, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05,
                   repeat_penalty=1.0, seed=0, stop=(), priority="batch", tier="", escalate_threshold=0.0,
                   constraint=None):
        """constraint: every item's output follows it (as generate's)."""
        b = flatbuffers.Builder(1024 + sum(len(i) for i in items))
        offs = [b.CreateString(i) for i in items]
        SubmitJob.StartItemsVector(b, len(offs))
        for o in reversed(offs):
            b.PrependUOffsetTRelative(o)
        vec = b.EndVector()
        t = b.CreateString(template)
        sampling = _sampling(b, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, stop, 1.0, tier,
                             escalate_threshold, constraint)
        SubmitJob.Start(b)
        SubmitJob.AddItems(b, vec)
        SubmitJob.AddTemplate(b, t)
        SubmitJob.AddSampling(b, sampling)
        SubmitJob.AddPriority(b, _PRIORITIES[priority])
        body = self._ask(b, RequestBody.RequestBody.SubmitJob, SubmitJob.End(b), ResponseBody.ResponseBody.JobAccepted)
        return _job_summary(_table(body, JobAccepted.JobAccepted).Job())

    def job_status(self, job_id):
        body = self._id_request(JobStatus, RequestBody.RequestBody.JobStatus, JobStatus.AddJobId, job_id,
                                ResponseBody.ResponseBody.JobReply)
        return _job_summary(_table(body, JobReply.JobReply).Job())

    def job_results(self, job_id):
        body = self._id_request(JobResults, RequestBody.RequestBody.JobResults, JobResults.AddJobId, job_id,
                                ResponseBody.ResponseBody.JobReply)
        r = _table(body, JobReply.JobReply)
        return [_job_item(r.Results(i)) for i in range(r.ResultsLength())]

    def cancel_job(self, job_id):
        body = self._id_request(CancelJob, RequestBody.RequestBody.CancelJob, CancelJob.AddJobId, job_id,
                                ResponseBody.ResponseBody.JobReply)
        return _job_summary(_table(body, JobReply.JobReply).Job())

    def list_jobs(self):
        b = flatbuffers.Builder(64)
        ListJobs.Start(b)
        body = self._ask(b, RequestBody.RequestBody.ListJobs, ListJobs.End(b), ResponseBody.ResponseBody.JobList)
        lst = _table(body, JobList.JobList)
        return [_job_summary(lst.Jobs(i)) for i in range(lst.JobsLength())]
