"""What a distributed run says when its workers outnumber the endpoint's sessions.

Every worker of ``run(..., workers=N)`` dials the env for a session of its own. Against an
endpoint served with ``--sessions K`` (K < N), the extra workers are refused with the
server's ``EndpointBusy``, whose advice (close a client, serve more sessions, or connect with
``wait_for_slot=True``) is written for a single client: a run cannot take
``wait_for_slot``, and its own workers hold the sessions. :func:`for_workers` rewrites it
into the one change that fits the run: at most K workers, or more sessions.
"""

from __future__ import annotations

import re

from ..errors import EndpointBusy

__all__ = ["for_workers"]

_SESSIONS = re.compile(r"\(sessions=(\d+)\)")
_ONE_SESSION = "only one client may be connected"
_WHERE = re.compile(r"at '([^']+)' is busy")


def for_workers(error: BaseException, workers: int) -> BaseException:
    """``error`` as the run should report it: an ``EndpointBusy`` names the worker limit.

    >>> busy = EndpointBusy("an env at 'tcp://127.0.0.1:5555' is busy: all 4 sessions of this "
    ...     "endpoint are in use (sessions=4); close another client, serve more sessions "
    ...     "(--sessions), or connect with wait_for_slot=True to wait for a free one")
    >>> print(for_workers(busy, 5))
    the endpoint at 'tcp://127.0.0.1:5555' serves 4 sessions and this run's 5 workers each need one: run at most 4 workers (workers=4, --workers 4), or serve it with --sessions 5 (EnvServer(..., sessions=5))
    """
    if not isinstance(error, EndpointBusy):
        return error
    text = str(error)
    found = _SESSIONS.search(text)
    where = _WHERE.search(text)
    env = f"the endpoint at '{where.group(1)}'" if where else "the endpoint"
    k = int(found.group(1)) if found is not None else (1 if _ONE_SESSION in text else None)
    if k is None:  # not our server's wording: keep what it said, drop the single-client advice
        limit = "run no more workers than the endpoint serves sessions"
        served = "is busy"
    else:
        limit = f"run at most {k} worker{'s' if k != 1 else ''} (workers={k}, --workers {k})"
        served = f"serves {k} session{'s' if k != 1 else ''}"
    out = EndpointBusy(
        f"{env} {served} and this run's {workers} workers each need one: {limit}, "
        f"or serve it with --sessions {workers} (EnvServer(..., sessions={workers}))"
    )
    out.__cause__ = error
    return out
