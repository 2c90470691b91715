"""One request's answer as it arrives: text deltas, then what its Done says."""
from troupe.wire import Accepted, Done, Error, ResponseBody, Tokens

from .errors import TroupeError
from .response_tables import _CACHE_OUTCOMES, _ERROR_NAMES, _FINISH_NAMES


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
                self.prompt_tokens = _body(r, Accepted.Accepted()).PromptTokens()
            elif kind == ResponseBody.ResponseBody.Tokens:
                text = self._take_tokens(_body(r, Tokens.Tokens()), arrived)
                if text:
                    yield text
            elif kind == ResponseBody.ResponseBody.Done:
                self._take_done(_body(r, Done.Done()))
            elif kind == ResponseBody.ResponseBody.Error:
                e = _body(r, Error.Error())
                self.finish_reason = "error"
                raise TroupeError(_ERROR_NAMES.get(e.Code(), str(e.Code())), (e.Message() or b"").decode())

    def _take_tokens(self, t, arrived):
        """Records one Tokens message; returns sample 0's new text (None for
        another sample, whose text is not decoded: only its ids are kept)."""
        ids = [t.TokenIds(i) for i in range(t.TokenIdsLength())]
        if 0 <= t.Sample() < self.n:
            self.samples[t.Sample()].extend(ids)
        if t.Sample() != 0:
            return None
        text = (t.Text() or b"").decode("utf-8")
        self.tokens.extend(t.TokenIds(i) for i in range(t.TokenIdsLength()))
        self.token_times.extend([arrived] * t.TokenIdsLength())
        self.logprobs.extend(t.Logprobs(i) for i in range(t.LogprobsLength()))
        self.top_logprobs.extend(_top_logprobs(t))
        self.text += text
        return text

    def _take_done(self, d):
        """Counts one sample as finished; sample 0's Done fills the summary."""
        self._done += 1
        if d.Sample() != 0:
            return
        self.finish_reason = _FINISH_NAMES.get(d.FinishReason(), str(d.FinishReason()))
        self.response_cache = _CACHE_OUTCOMES.get(d.ResponseCache(), str(d.ResponseCache()))
        self.usage = _usage(d.Usage())
        self.timings = _timings(d.Timings())
        self.tiers = [{"tier": (d.Tiers(i).Tier() or b"").decode(), "tokens": d.Tiers(i).Tokens()}
                      for i in range(d.TiersLength())]
        self.tool_calls = _tool_calls(d)
        self.speculation = _speculation(d.Speculation())

    def read(self):
        """The whole answer (consumes the stream)."""
        for _ in self:
            pass
        return self.text

    def cancel(self):
        self._client.cancel(self.request_id)


def _body(r, table):
    """The response's body read as `table` (the flatbuffers union is untyped)."""
    table.Init(r.Body().Bytes, r.Body().Pos)
    return table


def _top_logprobs(t):
    """Per token, its alternatives [(id, logprob), ...] (none without top_logprobs)."""
    if not (t.TopIdsLength() and t.TokenIdsLength()):
        return []
    n = t.TopIdsLength() // t.TokenIdsLength()
    return [[(t.TopIds(k * n + j), t.TopLogprobs(k * n + j)) for j in range(n)]
            for k in range(t.TokenIdsLength())]


def _usage(u):
    if not u:
        return {}
    return {"prompt_tokens": u.PromptTokens(), "cached_prompt_tokens": u.CachedPromptTokens(),
            "completion_tokens": u.CompletionTokens()}


def _timings(t):
    if not t:
        return {}
    return {"queue_ms": t.QueueMs(), "ttft_ms": t.TtftMs(), "per_token_ms": t.PerTokenMs(),
            "total_ms": t.TotalMs()}


def _tool_calls(d):
    return [{"id": (d.ToolCalls(i).Id() or b"").decode(),
             "name": (d.ToolCalls(i).Name() or b"").decode(),
             "arguments": (d.ToolCalls(i).Arguments() or b"").decode()}
            for i in range(d.ToolCallsLength())]


def _speculation(sp):
    if not sp:
        return None
    return {"source": (sp.Source() or b"").decode(), "drafted": sp.Drafted(),
            "accepted": sp.Accepted(), "windows": sp.Windows(),
            "mean_accepted": sp.MeanAccepted()}
