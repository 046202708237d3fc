"""The session state machine: one table, used by servers and clients alike.

A connection is a session (DESIGN "Wire protocol")::

    AWAIT_HELLO --Hello/Welcome--> READY --Close/CloseReply--> CLOSED
         |  \\--Hello/Busy|Incompatible--> CLOSED
         |--Ping/Pong, Shutdown/ShutdownReply (stay)
    READY --Reset|Step|Render|Configure|Ping|Shutdown (+ model requests)--> READY
    any   --protocol error / fatal env error--> BROKEN

Every request gets exactly one reply of the kinds :data:`REPLIES` lists, or an
``Error``. An exception freezes the state (h11's rule): after a protocol error
the session is ``BROKEN`` and every later call raises at once.
"""

from __future__ import annotations

from ..errors import ProtocolException
from . import messages as m

__all__ = ["AWAIT_HELLO", "BROKEN", "CLOSED", "READY", "REPLIES", "SessionState", "State"]


class State:
    """A session state; its repr is its name."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


AWAIT_HELLO = State("AWAIT_HELLO")
READY = State("READY")
CLOSED = State("CLOSED")
BROKEN = State("BROKEN")

#: Requests legal in each state (the server may receive / the client may send them).
LEGAL: dict[State, set[int]] = {
    AWAIT_HELLO: {m.Hello.KIND, m.Ping.KIND, m.Shutdown.KIND},
    READY: {
        m.Reset.KIND,
        m.Step.KIND,
        m.Render.KIND,
        m.Close.KIND,
        m.Shutdown.KIND,
        m.Ping.KIND,
        m.Configure.KIND,
        m.Attach.KIND,
    },
    CLOSED: set(),
    BROKEN: set(),
}

#: request kind -> reply kinds that answer it (``Error`` answers anything).
REPLIES: dict[int, frozenset[int]] = {
    m.Hello.KIND: frozenset({m.Welcome.KIND, m.Busy.KIND, m.Incompatible.KIND}),
    m.Reset.KIND: frozenset({m.ResetReply.KIND}),
    m.Step.KIND: frozenset({m.StepReply.KIND}),
    m.Render.KIND: frozenset({m.RenderReply.KIND}),
    m.Close.KIND: frozenset({m.CloseReply.KIND}),
    m.Shutdown.KIND: frozenset({m.ShutdownReply.KIND}),
    m.Ping.KIND: frozenset({m.Pong.KIND}),
    m.Configure.KIND: frozenset({m.ConfigureReply.KIND}),
    m.Attach.KIND: frozenset({m.AttachReply.KIND}),
}

# The model service's requests (served models); legal once READY.
LEGAL[READY] |= {m.Bind.KIND, m.BeginEpisode.KIND, m.EndEpisode.KIND, m.Predict.KIND}
REPLIES.update(
    {
        m.Bind.KIND: frozenset({m.BindReply.KIND}),
        m.BeginEpisode.KIND: frozenset({m.EpisodeAck.KIND}),
        m.EndEpisode.KIND: frozenset({m.EpisodeAck.KIND}),
        m.Predict.KIND: frozenset({m.PredictReply.KIND}),
    }
)

#: (state, request kind, reply kind) -> next state, where it changes.
TRANSITIONS: dict[tuple[State, int, int], State] = {
    (AWAIT_HELLO, m.Hello.KIND, m.Welcome.KIND): READY,
    (AWAIT_HELLO, m.Hello.KIND, m.Busy.KIND): CLOSED,
    (AWAIT_HELLO, m.Hello.KIND, m.Incompatible.KIND): CLOSED,
    (READY, m.Close.KIND, m.CloseReply.KIND): CLOSED,
}


class SessionState:
    """Tracks one connection's state through the table above."""

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state: State = AWAIT_HELLO

    def check_request(self, kind: int) -> None:
        """Raise ProtocolException unless a request of ``kind`` is legal now."""
        if kind not in LEGAL[self.state]:
            name = m.KINDS[kind].__name__ if kind in m.KINDS else f"kind {kind:#04x}"
            raise ProtocolException(f"{name} is not allowed in session state {self.state!r}")

    def on_reply(self, request_kind: int, reply_kind: int) -> None:
        """Check that ``reply_kind`` answers ``request_kind`` and advance the state."""
        if reply_kind != m.Error.KIND and reply_kind not in REPLIES.get(request_kind, ()):
            self.state = BROKEN
            raise ProtocolException(
                f"peer answered {m.KINDS[request_kind].__name__} with "
                f"{m.KINDS[reply_kind].__name__ if reply_kind in m.KINDS else hex(reply_kind)}"
            )
        nxt = TRANSITIONS.get((self.state, request_kind, reply_kind))
        if nxt is not None:
            self.state = nxt

    def break_(self) -> None:
        self.state = BROKEN

    def close(self) -> None:
        if self.state is not BROKEN:
            self.state = CLOSED
