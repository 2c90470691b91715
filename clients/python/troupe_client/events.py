"""The server's event socket: a subscription to it and its JobEvent frames as dicts."""
import zmq

from troupe.wire import JobEvent

from .keys import _use_curve
from .response_tables import _job_item, _job_summary


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


def parse_job_event(frame):
    """A JobEvent frame from the event socket as a dict."""
    e = JobEvent.JobEvent.GetRootAs(frame, 0)
    kinds = {0: "item_finished", 1: "job_finished", 2: "job_cancelled", 3: "job_resumed"}
    out = {"kind": kinds.get(e.Kind(), str(e.Kind())), "job": _job_summary(e.Job()),
           "tokens_per_second": e.TokensPerSecond()}
    if e.Item() is not None:
        out["item"] = _job_item(e.Item())
    return out
