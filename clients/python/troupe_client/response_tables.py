"""Reading a Response: its tables as dicts, the schema's enums as names, an Error as
TroupeError."""
from troupe.wire import Error, ErrorCode, FinishReason, JobState, ResponseBody, ResponseCacheOutcome

from .errors import TroupeError

_TURN_STATES = {0: "window", 1: "summarized", 2: "archived"}
_ERROR_NAMES = {v: k for k, v in vars(ErrorCode.ErrorCode).items() if not k.startswith("_")}
_FINISH_NAMES = {v: k for k, v in vars(FinishReason.FinishReason).items() if not k.startswith("_")}
_JOB_STATES = {v: k for k, v in vars(JobState.JobState).items() if not k.startswith("_")}
_CACHE_OUTCOMES = {v: k for k, v in vars(ResponseCacheOutcome.ResponseCacheOutcome).items() if not k.startswith("_")}


def _table(body, cls):
    t = cls()
    t.Init(body.Bytes, body.Pos)
    return t


def _session_summary(s):
    return {"session_id": (s.SessionId() or b"").decode(), "turns": s.Turns(), "tokens": s.Tokens(),
            "created_ms": s.CreatedMs(), "updated_ms": s.UpdatedMs(), "model": (s.Model() or b"").decode(),
            "owner": (s.Owner() or b"").decode(), "escalations": s.Escalations()}


def _job_summary(j):
    return {"job_id": (j.JobId() or b"").decode(), "state": _JOB_STATES.get(j.State(), str(j.State())),
            "items": j.Items(), "finished_items": j.FinishedItems(), "completion_tokens": j.CompletionTokens(),
            "created_ms": j.CreatedMs(), "updated_ms": j.UpdatedMs(), "owner": (j.Owner() or b"").decode()}


_CHECK_OUTCOMES = {0: "not_checked", 1: "passed", 2: "failed"}


def _job_item(r):
    return {"index": r.Index(), "text": (r.Text() or b"").decode(errors="replace"),
            "finish_reason": _FINISH_NAMES.get(r.FinishReason(), str(r.FinishReason())),
            "prompt_tokens": r.PromptTokens(), "completion_tokens": r.CompletionTokens(),
            "error": (r.Error() or b"").decode(), "validated": r.Validated(),
            "check": _CHECK_OUTCOMES.get(r.Check(), str(r.Check())), "retried": r.Retried()}


def _tier_stats(t):
    return {"name": (t.Name() or b"").decode(), "requests": t.Requests(), "escalated_in": t.EscalatedIn(),
            "escalations": t.Escalations(), "tokens": t.Tokens(), "forward_tokens": t.ForwardTokens(),
            "steps": t.Steps(), "drafted": t.Drafted(), "accepted": t.Accepted(), "running": t.Running(),
            "waiting": t.Waiting(), "pages_used": t.PagesUsed(), "pages_total": t.PagesTotal(),
            "check_failures": t.CheckFailures()}


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
