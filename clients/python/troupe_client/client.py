"""The connection: one DEALER socket, a method per request kind, responses of other
requests kept until their own stream reads them."""
import itertools
import json
import time

import flatbuffers
import zmq

from troupe.wire import (Ack, Cancel, CancelJob, ChatMessage, ChatTurn, DeleteSession, Generate, JobAccepted, JobList,
                         JobReply, JobResults, JobStatus, ListJobs, ListSessions, Ping, Pong, RequestBody, Response,
                         ResponseBody, Session, SessionList, ShowSession, Stats, StatsReply, SubmitJob, ToolChoice)

from .errors import TroupeError
from .events import parse_job_event, subscribe_events
from .keys import _use_curve, read_key_file
from .request_tables import (_CONTEXT_POLICIES, _PRIORITIES, _SPECULATION, _TOOL_CHOICES, _job_check, _request,
                             _sampling, _tool_calls)
from .response_tables import _TURN_STATES, _expect, _job_item, _job_summary, _session_summary, _table, _tier_stats, \
    _worker_stats
from .stream import Stream

# Before the split every public name lived here; code that imports them from
# troupe_client.client keeps working.
__all__ = ["Client", "Stream", "TroupeError", "parse_job_event", "read_key_file", "subscribe_events"]


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
                 escalate_threshold=0.0, constraint=None, top_logprobs=0, kv_budget=0, escalate_class=""):
        """kv_budget: the KV positions this request keeps once its prompt is read, the rest
        evicted by attention (at least 128; 0: the server's --kv-budget).
        top_logprobs: with logprobs, the N (0..20) most likely tokens at each position; the stream's
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
        tokens); 0: the server's.
        escalate_class: on a server with --escalate-budget, the workload class whose recent
        confidences set this request's threshold ("": the request's priority and length)."""
        b = flatbuffers.Builder(256 + len(prompt))
        text = b.CreateString(prompt)
        draft = b.CreateString(draft_model) if draft_model else None
        sampling = _sampling(b, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, stop,
                             accept_ratio, tier, escalate_threshold, constraint, kv_budget, escalate_class)
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
             logprobs=False, top_logprobs=0, kv_budget=0, escalate_class=""):
        """constraint, kv_budget, escalate_class: as generate's (this turn's only: a session's next turn is free unless it asks).
        messages: [(role, content), ...] or [{"role": ..., "content": ...}, ...]; a dict may also carry
        "tool_calls" (an assistant's, as the stream's tool_calls or OpenAI's) or "tool_call_id" (role
        "tool": the result of that call) or "pinned": True (a session keeps that message verbatim in
        every later prompt, after its turn leaves the context window).
        tools: OpenAI tool objects ({"type": "function", "function": {"name", "description",
        "parameters"}}); tool_choice: "auto", "none", "required" or a function's name. The stream's
        tool_calls then lists the calls the answer makes (finish_reason "tool_calls"), each one's
        arguments valid under its parameters schema.
        context_policy: what a session does past the context: "window" (the
        server's default for sessions: drop the oldest turns), "summarize"
        (and stand for them by the user's own statements, kept verbatim, and a
        summary), "refuse"."""
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
            if isinstance(m, dict) and m.get("pinned"):
                ChatMessage.AddPinned(b, True)
            offsets.append(ChatMessage.End(b))
        ChatTurn.StartMessagesVector(b, len(offsets))
        for o in reversed(offsets):
            b.PrependUOffsetTRelative(o)
        msgs = b.EndVector()
        sid = b.CreateString(session_id)
        draft = b.CreateString(draft_model) if draft_model else None
        sampling = _sampling(b, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, stop,
                             accept_ratio, tier, escalate_threshold, constraint, kv_budget, escalate_class)
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
                "workers": [_worker_stats(s.Workers(i)) for i in range(s.WorkersLength())],
                "speculation": {(x.Source() or b"").decode(): {"drafted": x.Drafted(), "accepted": x.Accepted(),
                                                               "windows": x.Windows()}
                                for x in (s.Speculation(i) for i in range(s.SpeculationLength()))},
                "suffix_tree_bytes": s.SuffixTreeBytes(), "suffix_tree_tokens": s.SuffixTreeTokens(),
                "suffix_trees": s.SuffixTrees(),
                "escalation_classes": [{"class": (c.Name() or b"").decode(), "judged": c.Judged(), "share": c.Share(),
                                        "threshold": c.Threshold()}
                                       for c in (s.EscalationClasses(i) for i in range(s.EscalationClassesLength()))]}

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
        out["pinned"] = [i for i in range(s.MessagesLength()) if s.Messages(i).Pinned()]
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
                   constraint=None, escalate_class="", check=None):
        """constraint: every item's output follows it (as generate's). escalate_class: the budget
        rule's class for every item ("": the job's own). check: ("regex", PATTERN), ("contains",
        TEXT) or ("json_schema", SCHEMA as a dict or JSON text): each answer is checked, and one that
        fails from a smaller tier is answered again by the next; results then say "check" (passed,
        failed) and "retried"."""
        b = flatbuffers.Builder(1024 + sum(len(i) for i in items))
        offs = [b.CreateString(i) for i in items]
        SubmitJob.StartItemsVector(b, len(offs))
        for o in reversed(offs):
            b.PrependUOffsetTRelative(o)
        vec = b.EndVector()
        t = b.CreateString(template)
        sampling = _sampling(b, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, stop, 1.0, tier,
                             escalate_threshold, constraint, escalate_class=escalate_class)
        check_off = _job_check(b, check)
        SubmitJob.Start(b)
        SubmitJob.AddItems(b, vec)
        if check_off is not None:
            SubmitJob.AddCheck(b, check_off)
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
