"""The session state machine: one table, used by servers and clients alike.

A connection is a session (DESIGN "Wire protocol")::

    AWAIT_HELLO --Hello/Welcome--> READY --Close/CloseReply--> CLOSED
         |  \\--Hello/Busy|Incompatible--> CLOSED
         |--Ping/Pong, Shutdown/ShutdownReply (stay)
    READY --Reset|Step|Render|Configure|Attach|Ping|Shutdown|SpaceQuery (+ model requests)--> READY
    any   --protocol error / fatal env error--> BROKEN

Every request gets exactly one reply of the kinds :data:`REPLIES` lists, or an
``Error``. An exception freezes the state (h11's rule): after a protocol error
the session is ``BROKEN`` and every later call raises at once.

:class:`Session` is the one object per connection and role that applies the
table: ``send`` checks that a message is legal now, assigns (client) or echoes
(server) its request id and encodes it; ``receive`` decodes a frame, checks it,
discards stale replies (client) and advances the state. The client session and the
serve loop hold one each; neither consults the table itself, so a server cannot
accept what a client cannot send. docs/protocol.md's state table is generated from
:data:`LEGAL`, :data:`REPLIES` and :data:`TRANSITIONS` (``tools/gen_protocol_table.py``).
"""

from __future__ import annotations

from typing import Any

from ..errors import ProtocolException
from . import messages as m
from .frames import MAGIC, PREFIX, PREFIX_SIZE, VERSION, Buffers, Frame, encode_frame
from .messages import (
    _CONTAINER_BYTES,
    _DECODERS,
    _ENCODER,
    MAX_HEADER_DEPTH,
    decode_header,
    encode_message,
)
from .space_query import SpaceQuery, SpaceReply

__all__ = [
    "AWAIT_HELLO",
    "BROKEN",
    "CLIENT",
    "CLOSED",
    "READY",
    "REPLIES",
    "SERVER",
    "FrameTooLarge",
    "LocalProtocolError",
    "Named",
    "Session",
    "State",
]


class Named:
    """A module-level singleton whose repr is its name (STYLE: self-describing sentinels).

    It pickles and copies as itself: a subclass's instances must be module globals named
    ``name`` in the subclass's module (the session states here, ``rlmesh.NO_ADAPTER``).
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self) -> str:
        return self.name  # pickles as the module-level singleton

    def __copy__(self) -> Named:
        return self

    def __deepcopy__(self, memo: object) -> Named:
        return self


class State(Named):
    """A session state; its repr is its name."""

    __slots__ = ()


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

# Asking an opaque space's env (``space_query``): legal once READY, stays READY.
LEGAL[READY].add(SpaceQuery.KIND)
REPLIES[SpaceQuery.KIND] = frozenset({SpaceReply.KIND})

#: (state, request kind, reply kind) -> next state, where it changes.
TRANSITIONS: dict[tuple[State, int, int], State] = {
    (AWAIT_HELLO, m.Hello.KIND, m.Welcome.KIND): READY,
    (AWAIT_HELLO, m.Hello.KIND, m.Busy.KIND): CLOSED,
    (AWAIT_HELLO, m.Hello.KIND, m.Incompatible.KIND): CLOSED,
    (READY, m.Close.KIND, m.CloseReply.KIND): CLOSED,
}


# -- Session: the table applied to one connection ----------------------------------------

CLIENT = "client"
SERVER = "server"

_U32 = 0xFFFFFFFF
_ERROR = m.Error.KIND
_NOTHING: frozenset[int] = frozenset()
#: Replies that may move the state; every other answer leaves it where it is (so the
#: per-step path never builds a transition key).
_MOVING = frozenset(reply for (_state, _request, reply) in TRANSITIONS)


class LocalProtocolError(ProtocolException):
    """This side tried to send what the protocol forbids now; nothing was sent.

    The session's state is unchanged: the caller may send something legal instead
    (a server, an ``Error`` answering the same request).
    """


class FrameTooLarge(LocalProtocolError):
    """A reply is larger than the session's ``max_frame_bytes`` (it was not sent).

    Attributes:
        nbytes: The frame's size on the wire, prefix excluded.
    """

    def __init__(self, message: str, nbytes: int) -> None:
        super().__init__(message)
        self.nbytes = nbytes


def _kind_name(kind: int) -> str:
    return m.KINDS[kind].__name__ if kind in m.KINDS else f"kind {kind:#04x}"


class Session:
    """One connection's protocol state, for one role (h11's ``Connection``, without the bytes).

    A client sends requests and receives replies; a server receives requests and sends
    replies. One request is in flight at a time: a client that gave up waiting sends its
    next request, and the late reply to the old one is then stale (``receive`` returns
    ``None``, SES-3). ``Session(role)`` returns the role's subclass, so the per-message
    path never asks which side it is on.

    Args:
        role: :data:`CLIENT` or :data:`SERVER`.
        max_frame_bytes: Largest reply (prefix excluded) a server's ``send`` lays out; a
            larger non-``Error`` reply raises :class:`FrameTooLarge`. ``None``: no bound.

    Example:
        >>> from rlmesh.wire import make_hello
        >>> client = Session(CLIENT)
        >>> buffers = client.send(make_hello("doc", None))
        >>> client.pending_id, client.state
        (1, AWAIT_HELLO)
    """

    __slots__ = ("_answers", "_kind", "_legal", "_rid", "max_frame_bytes", "role", "state")

    def __new__(cls, role: str, *, max_frame_bytes: int | None = None) -> Session:
        if cls is Session:
            if role == CLIENT:
                cls = _ClientSession
            elif role == SERVER:
                cls = _ServerSession
            else:
                raise ValueError(f"role must be {CLIENT!r} or {SERVER!r}, got {role!r}")
        return object.__new__(cls)

    def __init__(self, role: str, *, max_frame_bytes: int | None = None) -> None:
        self.role = role
        self.state: State = AWAIT_HELLO
        self.max_frame_bytes = max_frame_bytes
        self._legal: frozenset[int] | set[int] = LEGAL[AWAIT_HELLO]
        self._rid = 0  # the id of the request awaiting its reply (0: none)
        self._kind = 0  # that request's kind
        self._answers: frozenset[int] = _NOTHING  # the reply kinds that answer it

    def __repr__(self) -> str:
        return f"<Session {self.role} {self.state!r}>"

    @property
    def pending_id(self) -> int:
        """The id of the request whose reply is awaited (0: none)."""
        return self._rid

    # -- the two calls ---------------------------------------------------------------------

    def send(self, msg: Any, segments: list[Any] | tuple[Any, ...] = ()) -> Buffers:
        """Check ``msg`` against the table and lay out its frame (buffers for ``sendmsg``).

        A client's request gets the next request id; a server's reply carries the id of
        the request it answers. An ``Error`` may answer anything (a server's answer to a
        frame it could not read carries id 0) and, unless recoverable, breaks the session.

        Raises:
            LocalProtocolError: ``msg`` is not legal now (the state is unchanged).
            FrameTooLarge: the frame is over ``max_frame_bytes`` (the state is unchanged).
        """
        raise NotImplementedError  # pragma: no cover - Session(role) is always a subclass

    def receive(self, frame: Frame) -> Any:
        """Check and decode a received frame into its message.

        Returns:
            The message; for a client, ``None`` when the frame answers an older request
            than the one in flight (a stale reply after a timeout: discard it, SES-3).

        Raises:
            ProtocolException: the frame is illegal now, or its header does not decode.
                The session is then ``BROKEN``.
        """
        raise NotImplementedError  # pragma: no cover - Session(role) is always a subclass

    # -- state changes -----------------------------------------------------------------------

    def _move(self, request: int, reply: int) -> None:
        nxt = TRANSITIONS.get((self.state, request, reply))
        if nxt is not None:
            self.state = nxt
            self._legal = LEGAL[nxt]

    def _broken(self) -> None:
        self.state = BROKEN
        self._legal = _NOTHING

    def break_(self) -> None:
        """Mark the session broken (the transport failed, or the peer sent garbage)."""
        self._broken()

    def close(self) -> None:
        """Mark the session closed (locally ended); a broken session stays broken."""
        if self.state is not BROKEN:
            self.state = CLOSED
            self._legal = _NOTHING
        self._rid = 0
        self._answers = _NOTHING


class _ClientSession(Session):
    """The client's side: sends requests, receives their replies."""

    __slots__ = ("_next_id",)

    def __init__(self, role: str, *, max_frame_bytes: int | None = None) -> None:
        super().__init__(role, max_frame_bytes=max_frame_bytes)
        self._next_id = 0  # the last request id assigned

    def send(self, msg: Any, segments: list[Any] | tuple[Any, ...] = ()) -> Buffers:
        kind = msg.KIND
        if kind not in self._legal:
            raise LocalProtocolError(
                f"{_kind_name(kind)} is not allowed in session state {self.state!r}"
            )
        rid = (self._next_id + 1) & _U32 or 1
        header = _ENCODER.encode(msg)  # encode_message, inlined
        if segments:
            buffers = encode_frame(kind, rid, header, segments)
        else:  # encode_frame's header-only case, inlined (a scalar action rides in the header)
            hlen = len(header)
            buffers = Buffers((PREFIX.pack(MAGIC, VERSION, kind, rid, hlen, 0, hlen) + header,))
            buffers.nbytes = PREFIX_SIZE + hlen
        self._next_id = self._rid = rid
        self._kind = kind
        self._answers = REPLIES[kind]
        return buffers

    def receive(self, frame: Frame) -> Any:
        rid = self._rid
        if frame.request_id != rid or not rid:
            return None
        header = frame.header
        msg = None
        decoder = _DECODERS.get(frame.kind)
        if decoder is not None and (
            len(header) <= MAX_HEADER_DEPTH  # cannot nest deeper (see messages._too_deep) ...
            or len(header) - len(bytes(header).translate(None, _CONTAINER_BYTES))
            <= MAX_HEADER_DEPTH  # ... nor this
        ):
            try:  # decode_header's common case, inlined (issue 24)
                msg = decoder.decode(header)
            except Exception:
                msg = None  # decode_header words the error
        if msg is None:
            try:
                msg = decode_header(frame)
            except ProtocolException:
                self._broken()
                raise
        kind = frame.kind
        if kind not in self._answers:
            if kind == _ERROR:
                self._rid = 0
                if not msg.recoverable:
                    self._broken()
                return msg
            self._broken()
            raise ProtocolException(
                f"peer answered {_kind_name(self._kind)} with {_kind_name(kind)}"
            )
        self._rid = 0
        if kind in _MOVING:
            self._move(self._kind, kind)
        return msg


class _ServerSession(Session):
    """The server's side: receives requests, sends one reply to each."""

    __slots__ = ()

    def send(self, msg: Any, segments: list[Any] | tuple[Any, ...] = ()) -> Buffers:
        kind = msg.KIND
        if kind not in self._answers:
            if kind == _ERROR:
                buffers = encode_message(msg, self._rid, segments)
                self._rid = 0
                self._answers = _NOTHING
                if not msg.recoverable:
                    self._broken()
                return buffers
            asked = (
                f"answers {_kind_name(self._kind)}" if self._rid else "answers no request in flight"
            )
            raise LocalProtocolError(f"{_kind_name(kind)} {asked}: not a legal reply")
        buffers = encode_frame(
            kind, self._rid, _ENCODER.encode(msg), segments
        )  # encode_message, inlined
        limit = self.max_frame_bytes
        if limit is not None and buffers.nbytes - PREFIX_SIZE > limit:
            nbytes = buffers.nbytes - PREFIX_SIZE
            raise FrameTooLarge(
                f"{_kind_name(kind)} is {nbytes} bytes, over max_frame_bytes={limit}", nbytes
            )
        self._rid = 0
        self._answers = _NOTHING
        if kind in _MOVING:
            self._move(self._kind, kind)
        return buffers

    def receive(self, frame: Frame) -> Any:
        kind = frame.kind
        self._rid = frame.request_id
        self._kind = kind
        if kind not in self._legal:
            exc = ProtocolException(
                f"{_kind_name(kind)} is not allowed in session state {self.state!r}"
            )
            self._broken()
            raise exc
        self._answers = REPLIES.get(kind, _NOTHING)
        header = frame.header
        decoder = _DECODERS.get(kind)
        if decoder is not None and (
            len(header) <= MAX_HEADER_DEPTH  # cannot nest deeper (see messages._too_deep) ...
            or len(header) - len(bytes(header).translate(None, _CONTAINER_BYTES))
            <= MAX_HEADER_DEPTH  # ... nor this
        ):
            try:  # decode_header's common case, inlined (issue 24)
                return decoder.decode(header)
            except Exception:
                pass  # decode_header words the error
        try:
            return decode_header(frame)
        except ProtocolException:
            self._broken()
            raise
