"""Message headers: one msgspec ``Struct`` per message kind (sans-IO).

Every frame's kind byte (frames.py) names exactly one Struct below, which is its
msgpack header. Structs are ``array_like`` (compact, fast) and follow msgspec's
schema-evolution rules: a later edition adds fields *last*, with defaults, and
readers ignore trailing fields they do not know (``forbid_unknown_fields`` is off).

Requests (client to server) have kinds below 0x80; replies set the high bit.
Every request gets exactly one reply (or an :class:`Error`) echoing its
``request_id`` (SES-3). Tensor leaves never travel inside msgpack: they are the
frame's raw segments, in the order the value codec (values.py) lays out.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from ..errors import ProtocolException
from .frames import Buffers, Frame, encode_frame
from .meta import enc_hook, ext_hook

__all__ = [
    "KINDS",
    "MAX_HEADER_DEPTH",
    "BeginEpisode",
    "Attach",
    "AttachReply",
    "Bind",
    "BindReply",
    "EndEpisode",
    "EpisodeAck",
    "Predict",
    "PredictReply",
    "Busy",
    "Close",
    "CloseReply",
    "Configure",
    "ConfigureReply",
    "EpisodeRecord",
    "Error",
    "Hello",
    "AuthHello",
    "AuthPing",
    "AuthPong",
    "AuthShutdown",
    "Refusal",
    "UNAUTHENTICATED",
    "Incompatible",
    "Message",
    "PeerInfo",
    "Ping",
    "Pong",
    "Render",
    "RenderReply",
    "Reset",
    "ResetReply",
    "Shutdown",
    "ShutdownReply",
    "Step",
    "StepReply",
    "SessionsPong",
    "Welcome",
    "decode_header",
    "decode_sessions_pong",
    "encode_message",
]


class _Base(msgspec.Struct, array_like=True, frozen=True, gc=False):
    KIND: ClassVar[int] = -1


class PeerInfo(_Base, frozen=True):
    """Advisory diagnostics about a peer (HS-9); never gates compatibility."""

    component: str = ""
    package_version: str = ""
    language: str = "python"
    language_version: str = ""
    os: str = ""
    os_version: str = ""
    arch: str = ""
    framework_versions: dict[str, str] = {}
    extra: dict[str, str] = {}


class EpisodeRecord(_Base, frozen=True):
    """One completed episode's bookkeeping (AR-7)."""

    episode_id: str
    seed: int | None
    env_index: int
    step_count: int
    cumulative_reward: float
    terminated: bool
    truncated: bool
    start_timestamp_ns: int
    end_timestamp_ns: int
    final_info: Any = None


# -- handshake --------------------------------------------------------------------------


class Hello(_Base, frozen=True):
    """Opens a session: generation, peer info, offered editions (HS-1..5)."""

    KIND: ClassVar[int] = 0x01
    generation: str
    peer: PeerInfo
    editions: list[str]
    preferred: str | None = None
    capabilities: dict[str, str] = {}
    service: str = "env"  # "env" or "model": which endpoint the client expects


class AuthHello(Hello, frozen=True):
    """A ``Hello`` carrying the endpoint's token (docs/security.md): the same kind, one
    trailing field. A client with no token sends a plain :class:`Hello` (the same bytes as
    ever); every received ``Hello`` decodes as this, ``token`` ``""`` when absent. An older
    server ignores the field."""

    token: str = ""


class Welcome(_Base, frozen=True):
    """The server accepts: its offer, the selected edition (DEC-2) and the contract."""

    KIND: ClassVar[int] = 0x81
    generation: str
    peer: PeerInfo
    editions: list[str]
    preferred: str | None
    selected: str
    session_id: str
    contract: dict[str, Any] = {}
    capabilities: dict[str, str] = {}
    service: str = "env"


class Busy(_Base, frozen=True):
    """Refusal: another client holds the endpoint's one session (EndpointBusy)."""

    KIND: ClassVar[int] = 0x82
    message: str


class Incompatible(_Base, frozen=True):
    """Refusal: other protocol generation, no mutual edition, or wrong service."""

    KIND: ClassVar[int] = 0x83
    message: str
    generation: str = ""
    editions: list[str] = []


class Refusal(Incompatible, frozen=True):
    """An ``Incompatible`` that says which refusal it is (the same kind, one trailing field).

    ``reason``: :data:`UNAUTHENTICATED` when the ``Hello``'s token was missing or wrong (the
    message says how to pass one); ``""`` for the protocol refusals. Every received
    ``Incompatible`` decodes as this; an older client reads it as a handshake failure.
    """

    reason: str = ""


#: ``Refusal.reason`` of a missing or wrong token.
UNAUTHENTICATED = "unauthenticated"


# -- env requests and replies -------------------------------------------------------------


class Reset(_Base, frozen=True):
    """Reset all lanes, or the lanes in ``env_indices`` (partial reset, AR-10)."""

    KIND: ClassVar[int] = 0x02
    seeds: list[int | None] = []  # one per lane (or per env_indices entry); [] = no seeds
    options: Any = None
    episode_ids: list[str] = []  # minted by the client, one per lane started (AR-3)
    env_indices: list[int] = []
    timeout_ms: int = 0
    # The caller gave one int seed (lane i gets ``seeds[0] + i``): a vector env is called
    # with that int, otherwise with the list as given (ENVCALL-1, CNF2-A3). Trailing field:
    # an older peer leaves it False.
    seed_int: bool = False


class ResetReply(_Base, frozen=True):
    KIND: ClassVar[int] = 0x84
    obs: list[Any]  # non-segment leaves (Discrete ints, Text strings) in codec order
    info: Any = None
    endpoint_ns: int = 0


class Step(_Base, frozen=True):
    """Step every lane; ``episode_ids`` carries ids for lanes that start a new episode (AR-9)."""

    KIND: ClassVar[int] = 0x03
    action: list[Any]
    episode_ids: dict[int, str] = {}
    timeout_ms: int = 0
    has_action: bool = True


class StepReply(_Base, frozen=True):
    """Scalar endpoints fill reward/terminated/truncated; vector endpoints send them as
    three trailing segments (float64 rewards, uint8 terminated, uint8 truncated)."""

    KIND: ClassVar[int] = 0x85
    obs: list[Any]
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: Any = None
    completed: list[EpisodeRecord] = []
    endpoint_ns: int = 0


class Render(_Base, frozen=True):
    KIND: ClassVar[int] = 0x04
    env_index: int = 0
    timeout_ms: int = 0


class RenderReply(_Base, frozen=True):
    """``format`` ``"raw"``: one uint8 segment of ``shape`` (HxW, HxWx3, HxWx4); ``None``: no frame."""

    KIND: ClassVar[int] = 0x86
    format: str | None = None
    shape: list[int] = []


class Close(_Base, frozen=True):
    """End this session; the env keeps running for the next client (SES-5)."""

    KIND: ClassVar[int] = 0x05
    reason: str = ""


class CloseReply(_Base, frozen=True):
    KIND: ClassVar[int] = 0x87
    final_episodes: list[EpisodeRecord] = []


class Shutdown(_Base, frozen=True):
    """Ask the endpoint owner to stop serving (CFG-2); legal before Hello too."""

    KIND: ClassVar[int] = 0x06
    reason: str = "owner shutdown"


class AuthShutdown(Shutdown, frozen=True):
    """A ``Shutdown`` before ``Hello`` that carries the endpoint's token (an endpoint that
    needs one refuses a stranger's ``Shutdown`` without it). Decoded for every ``Shutdown``."""

    token: str = ""


class ShutdownReply(_Base, frozen=True):
    KIND: ClassVar[int] = 0x88
    accepted: bool
    message: str


class Ping(_Base, frozen=True):
    """Readiness probe; answered before Hello as well (DESIGN)."""

    KIND: ClassVar[int] = 0x07


class AuthPing(Ping, frozen=True):
    """A ``Ping`` carrying the endpoint's token: an endpoint that needs one answers a probe
    without it with its health state only (:class:`AuthPong`). Decoded for every ``Ping``."""

    token: str = ""


class Pong(_Base, frozen=True):
    KIND: ClassVar[int] = 0x89
    state: str  # "ready" (a session is free) or "busy"
    generation: str = ""
    service: str = "env"


class SessionsPong(Pong, frozen=True):
    """A multi-session endpoint's ``Pong`` (``sessions=N``): also the sessions in use and the limit.

    The same kind with two trailing fields: a reader that knows only :class:`Pong` ignores
    them, and a single-session endpoint keeps sending the three-field ``Pong``. Read the
    counts with :func:`decode_sessions_pong` (``limit`` 0: not reported).
    """

    sessions: int = 0
    limit: int = 0


class AuthPong(SessionsPong, frozen=True):
    """The ``Pong`` of an endpoint that needs a token: ``auth`` says what the probe got.

    ``"required"``: the probe carried no token, so it learns the state only (the counts are
    0, withheld); ``"ok"``: its token was accepted (the counts are real, ``limit`` 0 on a
    single-session endpoint); ``"refused"``: its token is not the endpoint's (``state``
    ``""``). Read it with :func:`decode_sessions_pong`; ``auth`` ``""`` from any other endpoint.
    """

    auth: str = ""


class Configure(_Base, frozen=True):
    """Pin the session's workflow edition (HS-6)."""

    KIND: ClassVar[int] = 0x08
    edition: str


class ConfigureReply(_Base, frozen=True):
    KIND: ClassVar[int] = 0x8A
    edition: str


class Attach(_Base, frozen=True):
    """Move the rest of the session into shared-memory rings at ``path`` (same host only)."""

    KIND: ClassVar[int] = 0x09
    path: str


class AttachReply(_Base, frozen=True):
    """``attached``: from the next frame on, both sides use the rings; else the socket stays."""

    KIND: ClassVar[int] = 0x8B
    attached: bool


class Error(_Base, frozen=True):
    """A failed request: wire code (ERR-1), message, and whether the session survives."""

    KIND: ClassVar[int] = 0xFF
    code: int
    message: str
    recoverable: bool
    op: str = ""


# -- model service (served models: Model.serve / RemoteModel) ----------------------------


class Bind(_Base, frozen=True):
    """Bind the served model to an env: its contract, the agreed edition, the horizon, lanes."""

    KIND: ClassVar[int] = 0x10
    contract: dict[str, Any]
    edition: str = ""
    execution_horizon: int = 1
    trust_entrypoints: bool | None = None
    lanes: int = 1


class BindReply(_Base, frozen=True):
    """The model resolved its adapter: the effective horizon and ``describe()`` of the adapter."""

    KIND: ClassVar[int] = 0x90
    horizon: int
    adapter: str | None = None
    spec_less: bool = True


class BeginEpisode(_Base, frozen=True):
    KIND: ClassVar[int] = 0x11
    episode_id: str
    seed: int | None = None
    lane: int = 0


class EndEpisode(_Base, frozen=True):
    """An episode ended: the served model's ``on_episode_end(episode_id)`` fires."""

    KIND: ClassVar[int] = 0x12
    episode_id: str
    lane: int = 0


class EpisodeAck(_Base, frozen=True):
    KIND: ClassVar[int] = 0x91
    episode_id: str


class Predict(_Base, frozen=True):
    """One raw env observation (scalars here, tensor leaves as segments) for one lane."""

    KIND: ClassVar[int] = 0x13
    obs: list[Any]
    lane: int = 0


class PredictReply(_Base, frozen=True):
    """One env-ready action (scalars here, tensor leaves as segments)."""

    KIND: ClassVar[int] = 0x93
    action: list[Any]


Message = Any  # any of the Structs above

_ENV_MESSAGES: tuple[type[_Base], ...] = (
    Hello,
    Welcome,
    Busy,
    Incompatible,
    Reset,
    ResetReply,
    Step,
    StepReply,
    Render,
    RenderReply,
    Close,
    CloseReply,
    Shutdown,
    ShutdownReply,
    Ping,
    Pong,
    Configure,
    ConfigureReply,
    Attach,
    AttachReply,
    Error,
    Bind,
    BindReply,
    BeginEpisode,
    EndEpisode,
    EpisodeAck,
    Predict,
    PredictReply,
)

#: kind byte -> Struct type (the env and the model service messages above, one table).
KINDS: dict[int, type[Any]] = {}
_DECODERS: dict[int, msgspec.msgpack.Decoder[Any]] = {}
_ENCODER = msgspec.msgpack.Encoder(enc_hook=enc_hook)


def register(cls: type[Any]) -> type[Any]:
    """Register a message Struct under its ``KIND`` and build its decoder once."""
    kind = cls.KIND
    if not 0 <= kind <= 0xFF or (kind in KINDS and KINDS[kind] is not cls):
        raise ValueError(f"message kind {kind:#x} of {cls.__name__} is invalid or taken")
    KINDS[kind] = cls
    _DECODERS[kind] = msgspec.msgpack.Decoder(cls, ext_hook=ext_hook)
    return cls


for _cls in _ENV_MESSAGES:
    register(_cls)

# Every received Hello, Incompatible, Shutdown and Ping decodes as its subclass with the
# trailing token/reason field (default when absent): a sender without one sends the plain
# message, byte for byte what it always was.
for _cls in (AuthHello, Refusal, AuthShutdown, AuthPing):
    _DECODERS[_cls.KIND] = msgspec.msgpack.Decoder(_cls, ext_hook=ext_hook)


def encode_message(
    msg: Any, request_id: int = 0, segments: list[Any] | tuple[Any, ...] = ()
) -> Buffers:
    """Encode a message header and lay out its frame: a list of buffers for ``sendmsg``."""
    return encode_frame(msg.KIND, request_id, _ENCODER.encode(msg), segments)


#: Deepest container nesting a received header may have (arrays and maps, the header's own
#: array included). Metadata values (info, reset options, env metadata) are limited to
#: :data:`rlmesh.wire.meta.MAX_METADATA_DEPTH` (64) when sent, and spaces to
#: ``MAX_SPACE_DEPTH`` (32) levels (three containers each in a contract), so every honest
#: header stays below this; a deeper one is a protocol error, never a ``RecursionError``.
MAX_HEADER_DEPTH = 128

# Every msgpack container starts with one of these bytes (fixmap, fixarray, map16/32,
# array16/32): a header with at most MAX_HEADER_DEPTH of them cannot nest deeper.
_CONTAINER_BYTES = bytes(range(0x80, 0xA0)) + b"\xdc\xdd\xde\xdf"
_SCAN_DECODER = msgspec.msgpack.Decoder(ext_hook=lambda code, data: None)
_NESTED = frozenset({list, dict, tuple})


def _too_deep(header: memoryview | bytes | bytearray, limit: int = MAX_HEADER_DEPTH) -> bool:
    """Whether a msgpack document nests containers deeper than ``limit``.

    The hot path pays one length comparison: a header of at most ``limit`` bytes cannot
    nest deeper (each level costs a byte). Longer ones are first filtered at C speed by
    counting bytes that could start a container; only headers with more such bytes than
    ``limit`` (large contracts or info dicts) are decoded untyped and measured level by
    level, without recursion. msgspec itself raises ``RecursionError`` (caught here) long
    before a hostile nesting could exhaust the stack.
    """
    if len(header) <= limit:
        return False
    raw = bytes(header)
    if len(raw) - len(raw.translate(None, _CONTAINER_BYTES)) <= limit:
        return False
    try:
        level: list[Any] = [_SCAN_DECODER.decode(raw)]
    except RecursionError:
        return True
    except (msgspec.DecodeError, ValueError, TypeError, OverflowError):
        return False  # malformed: the typed decode reports it with a better message
    depth = 0
    nested = _NESTED
    while level:
        depth += 1
        if depth > limit:
            return True
        nxt: list[Any] = []
        for c in level:
            if type(c) is dict:
                for part in (c, c.values()):
                    if not nested.isdisjoint(map(type, part)):
                        nxt.extend(v for v in part if type(v) in nested)
            elif c and not nested.isdisjoint(map(type, c)):
                nxt.extend(v for v in c if type(v) in nested)
        level = nxt
    return False


_SESSIONS_PONG = msgspec.msgpack.Decoder(AuthPong, ext_hook=ext_hook)


def decode_sessions_pong(frame: Frame) -> AuthPong:
    """The session counts (and the ``auth`` word) of a ``Pong`` frame (zeros and ``""`` from
    an endpoint that does not report them).

    Call it after :func:`decode_header` accepted the frame (that bounds its nesting).

    Raises:
        ProtocolException: the header is not a ``Pong``.
    """
    try:
        return _SESSIONS_PONG.decode(frame.header)
    except (msgspec.DecodeError, ValueError, TypeError) as exc:
        raise ProtocolException(f"Pong header does not decode: {exc}") from None


def decode_header(frame: Frame) -> Any:
    """Decode a frame's header into its message Struct.

    Every received header passes here (socket, shared-memory ring, server and client), so
    this is where nesting is bounded: deeper than :data:`MAX_HEADER_DEPTH` is refused.

    Raises:
        ProtocolException: unknown kind, a header nested too deep, or a header that does
            not match its Struct. Nothing else escapes, whatever the bytes.
    """
    decoder = _DECODERS.get(frame.kind)
    if decoder is None:
        raise ProtocolException(f"unknown message kind {frame.kind:#04x}")
    header = frame.header
    try:
        if len(header) > MAX_HEADER_DEPTH and _too_deep(header):
            raise ProtocolException(
                f"{KINDS[frame.kind].__name__} header nests deeper than {MAX_HEADER_DEPTH} levels"
            )
        return decoder.decode(header)
    except ProtocolException:
        raise
    except RecursionError:
        raise ProtocolException(
            f"{KINDS[frame.kind].__name__} header nests deeper than {MAX_HEADER_DEPTH} levels"
        ) from None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ProtocolException(f"malformed {KINDS[frame.kind].__name__} header: {exc}") from None
    except (
        Exception
    ) as exc:  # ValueError, TypeError, OverflowError, MemoryError, a hook's error ...
        raise ProtocolException(
            f"malformed {KINDS[frame.kind].__name__} header: {type(exc).__name__}: {exc}"
        ) from None
