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
