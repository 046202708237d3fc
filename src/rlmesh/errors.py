"""The rlmesh exception hierarchy.

Every failure a user can cause raises one of these. Each class also subclasses
the built-in that the spec names (ERR-4/ERR-5, DESIGN "Errors are typed"), so
ordinary handlers (``except ConnectionError``, ``except TimeoutError``,
``except ValueError``) keep working::

    RLMeshException (RuntimeError)              base of everything below
    ├── ProtocolException                       malformed bytes from a peer (wire code PROTOCOL)
    ├── EnvironmentException                    env-side failure seen by a client: "[CODE] ..."
    │   ├── RemoteTimeout (TimeoutError)         [TIMEOUT] the server gave up on the env call
    │   ├── InvalidAction (ValueError)           [INVALID_ACTION] the action was rejected
    │   ├── Unsupported                          [UNSUPPORTED] the endpoint cannot do that
    │   ├── ResetNeeded                          [NOT_READY] step/render before the session's first reset
    │   └── Cancelled                            [CANCELLED]
    ├── RecoverableEnvError                      raised *by an env* to fail one request only
    ├── ModelError                               a served model failed: "model error: ..."
    ├── HandshakeError                           incompatible peer (generation or edition)
    │   └── InvalidContract (ConnectionError)    the peer published a contract this side cannot read
    ├── EndpointBusy (ConnectionError)           another client holds the env's session
    ├── AuthenticationFailed (ConnectionError)   the endpoint refused this client's token (or its lack of one)
    ├── ConnectFailed (ConnectionError)          could not reach an endpoint
    │   └── TLSError                             the TLS handshake failed (an untrusted certificate ...)
    ├── BindFailed (ConnectionError)             a server could not bind its address
    ├── InsecureEndpoint (ValueError)            a server would bind beyond loopback without a token
    ├── ConnectionLost (ConnectionError)         the peer went away; ``__cause__`` is the OSError
    │   ├── ActorLost                            a Ray fleet actor is gone for good (rlmesh.ray)
    │   └── LanesLost                            a fleet vector env's actors died; reset() reconnects
    ├── SessionClosed (ConnectionError)          used after ``close()`` or after a fatal error
    ├── RequestTimeout (TimeoutError)            a client-side deadline expired
    │   └── EndpointTimeout                      endpoints missed a fan-out round's deadline (named)
    ├── AsyncCallError                           step_async/step_wait called out of order
    │   ├── AlreadyPendingCallError              a second call while a step is in flight
    │   └── NoAsyncCallError                     step_wait() with no step_async() before it
    ├── EndpointLost (ConnectionError)           one endpoint of a many-endpoint vector env broke
    ├── WorkerLost (ConnectionError)             workers= : an episode's workers kept dying (rlmesh.eval)
    ├── CorruptJournal (ValueError)              journal= : a row does not decode or disagrees with the run
    ├── FleetStartError                          a Ray fleet's actor could not build or serve its env
    │   └── FleetStartTimeout (TimeoutError)     ... or was not serving in time
    ├── AdapterResolutionError (ValueError)      model spec and env tags do not pair
    ├── ShapeMismatch (ValueError)               a value is not the shape/dtype its key needs
    ├── UnsupportedSpace (TypeError)             an env's space is a kind rlmesh cannot carry
    ├── DependencyMissing (ImportError)          an optional extra is not installed
    └── UnknownEnvId (LookupError)               nothing installed registers a Gymnasium id
        └── InvalidEnvTarget (ValueError)        an env string is neither an address nor a Gymnasium id

"You" versus "them" (trio's Closed/Broken split): :class:`SessionClosed` means
this side closed the session (or a fatal env error ended it and this side was
told so); :class:`ConnectionLost` means the peer or the network broke it.

Wire codes (ERR-1): an :class:`EnvironmentException` carries ``code`` (the
SCREAMING_SNAKE name), ``op`` and ``recoverable``; :func:`exception_for_code`
maps a code read off the wire to its class through one table.

Errors that cross processes (a worker's, a fan-out's) keep their message and fields when
pickled: the builtin pickling rebuilds ``cls(*args)`` and restores ``__dict__``; the
classes for which ``cls(*args)`` is not the same error rebuild through :func:`_rebuild`.
"""

from __future__ import annotations

from typing import Any

from ._error_codes import (  # the wire's codes (ERR-1), read through this module
    CODE_NAMES as CODE_NAMES,
    CODE_NUMBERS as CODE_NUMBERS,
    DEFAULT_RECOVERABLE as DEFAULT_RECOVERABLE,
)

__all__ = [
    "CODE_NUMBERS",
    "AdapterResolutionError",
    "AlreadyPendingCallError",
    "ActorLost",
    "AsyncCallError",
    "AuthenticationFailed",
    "EndpointLost",
    "EndpointTimeout",
    "FleetStartError",
    "FleetStartTimeout",
    "LanesLost",
    "WorkerLost",
    "NoAsyncCallError",
    "BindFailed",
    "CorruptJournal",
    "Cancelled",
    "ConnectFailed",
    "ConnectionLost",
    "DependencyMissing",
    "EndpointBusy",
    "EnvironmentException",
    "HandshakeError",
    "InsecureEndpoint",
    "InvalidContract",
    "ModelError",
    "InvalidAction",
    "InvalidEnvTarget",
    "ProtocolException",
    "RLMeshException",
    "RecoverableEnvError",
    "RemoteTimeout",
    "RequestTimeout",
    "ResetNeeded",
    "SessionClosed",
    "TLSError",
    "ShapeMismatch",
    "Unsupported",
    "UnknownEnvId",
    "UnsupportedSpace",
    "WorkflowEditionWarning",
    "exception_for_code",
    "is_recoverable_exception",
]


class RLMeshException(RuntimeError):
    """Base of every rlmesh runtime exception (ERR-5)."""


class ProtocolException(RLMeshException):
    """A peer sent bytes that are not a valid rlmesh frame or message.

    This is the only exception malformed peer input produces; anything else
    coming out of the wire layer is a bug. A server answers it with a typed
    error frame and closes that one connection.
    """

    code = "PROTOCOL"


class EnvironmentException(RLMeshException):
    """An env-side failure as a client sees it: ``"[CODE] message"``.

    Attributes:
        code: The SCREAMING_SNAKE error code (``"INTERNAL"``, ``"TIMEOUT"`` ...).
        op: The env operation that failed (``"reset"``, ``"step"`` ...), or ``""``.
        recoverable: ``True`` when the session survives this error.
        message: The message without the ``[CODE]`` prefix.
    """

    code = "INTERNAL"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        op: str = "",
        recoverable: bool | None = None,
    ) -> None:
        code = code or type(self).code
        self.code = code
        self.op = op
        self.recoverable = code in DEFAULT_RECOVERABLE if recoverable is None else recoverable
        self.message = message
        super().__init__(f"[{code}] {message}")

    def __reduce__(self) -> Any:
        # ``args`` holds the message with its ``[CODE]`` prefix: rebuild from the bare one.
        fields = {"code": self.code, "op": self.op, "recoverable": self.recoverable}
        return (_rebuild, (type(self), self.message, fields), self.__dict__)


class RemoteTimeout(EnvironmentException, TimeoutError):
    """``[TIMEOUT]``: the server's deadline for the env call expired (SES-4)."""

    code = "TIMEOUT"


class InvalidAction(EnvironmentException, ValueError):
    """``[INVALID_ACTION]``: the server refused a request's arguments (SRV-60)."""

    code = "INVALID_ACTION"


class Unsupported(EnvironmentException):
    """``[UNSUPPORTED]``: the endpoint does not implement the request (ERR-7)."""

    code = "UNSUPPORTED"


class ResetNeeded(EnvironmentException):
    """``[NOT_READY]``: a step or render came before the session's first reset.

    Recoverable: the env was not called and the session stays usable; call
    ``reset()`` first. A new session never inherits the previous client's episode.
    """

    code = "NOT_READY"


class Cancelled(EnvironmentException):
    """``[CANCELLED]``: the env call was cancelled."""

    code = "CANCELLED"


class RecoverableEnvError(RLMeshException):
    """Raise this from an env's ``reset``/``step``/``render`` to fail one request only.

    The client receives an :class:`EnvironmentException` with
    ``recoverable=True`` and its session stays usable (DESIGN decision, DEC-8).
    Any exception carrying ``rlmesh_recoverable = True`` is treated the same.
    Any other exception is fatal: the server ends that client's session.

    Args:
        message: What went wrong.
        code: The wire code the client sees (default ``"INTERNAL"``).
    """

    rlmesh_recoverable = True

    def __init__(self, message: str = "", *, code: str = "INTERNAL") -> None:
        if code not in CODE_NUMBERS:
            raise ValueError(f"unknown error code {code!r}; expected one of {sorted(CODE_NUMBERS)}")
        self.code = code
        super().__init__(message)


class ModelError(RLMeshException):
    """A served model's handler failed (MOD-38): ``"model error: <what>"``.

    Attributes:
        code: The wire code the server reported.
        recoverable: Whether the model session survives.
    """

    def __init__(self, message: str, *, code: str = "INTERNAL", recoverable: bool = False) -> None:
        self.code = code
        self.recoverable = recoverable
        super().__init__(message)


class HandshakeError(RLMeshException):
    """The peer is incompatible: another protocol generation or no mutual edition."""


class InvalidContract(HandshakeError, ConnectionError):
    """The endpoint's handshake carried a contract this client cannot read (an incompatible peer)."""


class EndpointBusy(RLMeshException, ConnectionError):
    """Another client holds the endpoint's one session; it refused this one at handshake."""


class AuthenticationFailed(RLMeshException, ConnectionError):
    """The endpoint refused this client at the handshake: it needs a token and got none, or
    another one. Nothing reached the env or the model.

    The message says which side refused and how to pass a token (``token=``,
    ``RLMESH_TOKEN``, ``--token-file``); it never contains a token.
    """


class ConnectFailed(RLMeshException, ConnectionError):
    """Could not connect to, or complete the handshake with, an endpoint."""


class TLSError(ConnectFailed):
    """The TLS handshake with a ``tls://`` endpoint failed.

    The message names the host and what failed (an untrusted or expired certificate, a
    name that does not match, a client certificate the server wanted) and what to pass
    (``tls_ca=``, ``RLMESH_TLS_CA``).
    """


class BindFailed(RLMeshException, ConnectionError):
    """A server could not bind its listening address (SRV-5, DEC-10)."""


class InsecureEndpoint(RLMeshException, ValueError):
    """A server was asked to bind an address reachable from other hosts without a token.

    Raised before anything is bound. Pass a token (``ServeOptions(token=...)``,
    ``--token-file PATH``, ``RLMESH_TOKEN``), or opt out explicitly
    (``ServeOptions(insecure_no_auth=True)``, ``--insecure-no-auth``).
    """


class ConnectionLost(RLMeshException, ConnectionError):
    """The peer closed the connection or the network failed mid-session.

    The underlying ``OSError`` (if any) is attached as ``__cause__``.
    """


class SessionClosed(RLMeshException, ConnectionError):
    """The session is closed: this side called ``close()``, or a fatal error ended it."""


class RequestTimeout(RLMeshException, TimeoutError):
    """A client-side deadline expired.

    Attributes:
        timeout_seconds: The deadline that expired.
    """

    def __init__(self, message: str, *, timeout_seconds: float | None = None) -> None:
        self.timeout_seconds = timeout_seconds
        super().__init__(message)


class EndpointTimeout(RequestTimeout):
    """Endpoints of a many-endpoint vector env did not answer within the round's deadline.

    A fan-out round (``step_wait()``, ``reset()``) has one deadline,
    ``request_timeout_seconds`` from its start, however many endpoints hang. This is
    raised once every other endpoint's reply was read, and names every endpoint that
    missed the deadline. Their sessions stay usable: each late reply is discarded by that
    endpoint's next request (``reset()`` before relying on episode bookkeeping).

    Attributes:
        index: The first endpoint that timed out (its position in the address list).
        address: Its address.
        indices: Every endpoint that timed out, in address order.
        addresses: Their addresses.
        lanes: The global lanes of every endpoint that timed out, in order.
        timeout_seconds: The round's deadline, in seconds.
    """

    def __init__(
        self,
        message: str,
        *,
        timeout_seconds: float | None = None,
        indices: tuple[int, ...] = (),
        addresses: tuple[str, ...] = (),
        lanes: tuple[int, ...] = (),
    ) -> None:
        super().__init__(message, timeout_seconds=timeout_seconds)
        self.indices = tuple(indices)
        self.addresses = tuple(addresses)
        self.lanes = tuple(lanes)
        self.index = self.indices[0] if self.indices else -1
        self.address = self.addresses[0] if self.addresses else ""


class AsyncCallError(RLMeshException):
    """``step_async`` / ``step_wait`` used out of order (a ``RuntimeError``).

    The names and the rule are Gymnasium's ``AsyncVectorEnv`` (and SB3's ``VecEnv``):
    every ``step_async(action)`` is followed by exactly one ``step_wait()``.
    """


class AlreadyPendingCallError(AsyncCallError):
    """A step is in flight: call ``step_wait()`` before ``step_async``, ``step`` or ``reset`` again."""


class NoAsyncCallError(AsyncCallError):
    """``step_wait()`` with no step in flight: call ``step_async(action)`` first."""


class EndpointLost(RLMeshException, ConnectionError):
    """One endpoint of a many-endpoint vector env went away (or its session ended).

    The other endpoints stay connected. ``reconnect(index)`` dials the lost one again
    (then ``reset()``); ``close()`` closes them all.

    Attributes:
        address: The lost endpoint's address.
        index: Its position in the address list.
        lanes: The lanes it served (a ``range`` of global lane indices).
    """

    def __init__(
        self, message: str, *, address: str = "", index: int = -1, lanes: range = range(0)
    ) -> None:
        super().__init__(message)
        self.address = address
        self.index = index
        self.lanes = lanes


class WorkerLost(RLMeshException, ConnectionError):
    """Workers died and an episode could not be finished within ``max_retries`` re-runs.

    Raised by ``rlmesh.run(..., workers=...)``; also ``rlmesh.eval.WorkerLost``.

    Attributes:
        index: The episode index that ran out of retries (``None``: every worker was lost).
        reasons: Why each attempt was lost (one line per attempt).
    """

    def __init__(
        self, message: str, *, index: int | None = None, reasons: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message)
        self.index = index
        self.reasons = reasons


class CorruptJournal(RLMeshException, ValueError):
    """A distributed run's journal holds a row this run cannot trust (``journal=``).

    Raised when a run resumes from its journal and a row does not decode, or disagrees with
    the run's plan (its episode index, seed or trial index). Nothing has run yet.

    Attributes:
        path: The journal file.
        row: The row's SQLite ``rowid``, its episode index column (``None``: the file as a
            whole cannot be read).
        index: The episode index the row claims (``None`` when unknown).
    """

    def __init__(
        self, message: str, *, path: str = "", row: int | None = None, index: Any = None
    ) -> None:
        super().__init__(message)
        self.path = path
        self.row = row
        self.index = index


class FleetStartError(RLMeshException):
    """An actor of a new ``rlmesh.ray.EnvFleet`` could not build or serve its env; no actor is left running."""


class FleetStartTimeout(FleetStartError, TimeoutError):
    """The fleet's actors were not all serving in time (often: the cluster lacks the resources asked)."""


class ActorLost(ConnectionLost):
    """A fleet actor is gone for good (Ray will not restart it), or its restart could not serve.

    Attributes:
        index: The actor's position in the fleet.
    """

    def __init__(self, message: str, *, index: int) -> None:
        self.index = index
        super().__init__(message)

    def __reduce__(self) -> Any:  # ``index`` is required
        return (_rebuild, (type(self), str(self), {"index": self.index}), self.__dict__)


class LanesLost(ConnectionLost):
    """Fleet actors died: their lanes are lost until the next ``reset()`` reconnects.

    Attributes:
        actors: Indices of the lost actors in the fleet.
        addresses: The endpoints they served at (a restarted actor serves elsewhere).
        lanes: The lost lanes of the vector env, in order.
    """

    def __init__(
        self, message: str, *, actors: list[int], addresses: list[str], lanes: list[int]
    ) -> None:
        self.actors = actors
        self.addresses = addresses
        self.lanes = lanes
        super().__init__(message)

    def __reduce__(self) -> Any:  # its fields are required
        fields = {"actors": self.actors, "addresses": self.addresses, "lanes": self.lanes}
        return (_rebuild, (type(self), str(self), fields), self.__dict__)


class AdapterResolutionError(RLMeshException, ValueError):
    """A model spec cannot be paired with an env's tags and spaces (ADP-2).

    Attributes:
        code: A stable category (ADP-2): ``invalid_tag``, ``duplicate``,
            ``missing_role``, ``dim_mismatch``, ``encoding_mismatch``,
            ``slice_out_of_range``, ``missing_width``, ``unsupported``,
            ``untrusted_entrypoint`` or ``unsupported_kind``. Match on it rather
            than on the message text.
    """

    CODES = frozenset(
        {
            "invalid_tag",
            "duplicate",
            "missing_role",
            "dim_mismatch",
            "encoding_mismatch",
            "slice_out_of_range",
            "missing_width",
            "unsupported",
            "untrusted_entrypoint",
            "unsupported_kind",
        }
    )

    def __init__(self, message: str = "", *, code: str = "unsupported") -> None:
        self.code = code
        super().__init__(message)


class ShapeMismatch(RLMeshException, ValueError):
    """A value does not have the shape or dtype its key needs, where one wire meets another.

    Raised by the openpi bridge (:mod:`rlmesh.openpi`) when an observation entry or the
    server's ``actions`` do not fit what the other side expects; the message names the key.

    Attributes:
        key: The key the value travels under (``"observation/image"``, ``"actions"``).
        expected: What the key needs (``"float32[4]"``).
        actual: What arrived (``"float32[50, 7]"``).
    """

    def __init__(
        self, message: str, *, key: str = "", expected: str = "", actual: str = ""
    ) -> None:
        self.key = key
        self.expected = expected
        self.actual = actual
        super().__init__(message)


class UnsupportedSpace(RLMeshException, TypeError):
    """A space rlmesh cannot carry (Graph, Sequence, OneOf, a custom ``gymnasium.Space``; GYM-6).

    Raised when an env is served or driven in-process, before anything is bound or
    stepped. The message starts ``"Unsupported space type: <Name>"`` and says where the
    space sits and how to convert it.

    Attributes:
        space_type: The space's class name (``"MissionSpace"``).
        path: Where it sits (``"observation_space['mission']"``).
    """

    def __init__(self, message: str, *, space_type: str = "", path: str = "") -> None:
        self.space_type = space_type
        self.path = path
        super().__init__(message)


class DependencyMissing(RLMeshException, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(self, message: str, *, name: str | None = None) -> None:
        RLMeshException.__init__(self, message)
        self.msg = message
        self.name = name


class UnknownEnvId(RLMeshException, LookupError):
    """No installed package registers a Gymnasium id (``"Meta-World/MT1"`` before ``metaworld``
    is imported). The message names the two remedies: ``--import MODULE`` (``imports=``) and
    Gymnasium's ``"module:EnvId"`` spelling. ``env_id`` is the id as given."""

    def __init__(self, message: str, *, env_id: str = "") -> None:
        super().__init__(message)
        self.env_id = env_id


class InvalidEnvTarget(UnknownEnvId, ValueError):
    """An env given as a string (``rlmesh.run(model, "...")``) is neither an address nor a
    Gymnasium id this process can make. The message, one line, names both choices: an
    address (``host:port``, ``tcp://host:port``, ``unix:///path``) or a registered
    Gymnasium id. Also a ``ValueError`` (a bad argument) and an :class:`UnknownEnvId`."""


def _rebuild(cls: type[BaseException], message: str, fields: dict[str, Any]) -> BaseException:
    """Unpickle an error whose ``cls(*args)`` is not the same error (a required keyword,
    a message ``__init__`` rewrites)."""
    return cls(message, **fields)


class WorkflowEditionWarning(UserWarning):
    """Once per process: a served or authored participant declared no workflow edition.

    A workflow edition (``"2026.06"``) is the dated set of behaviours (resets, autoreset,
    info) an env or model is written against. Without a declaration it follows the newest
    edition this rlmesh implements: nothing changes today, but a later release may move
    it. Pin one (``ServeOptions(workflow_edition=...)``, a ``workflow_edition`` class
    attribute, ``--workflow-edition``, ``[tool.rlmesh]`` in pyproject.toml) to keep the
    behaviour, or set ``RLMESH_WORKFLOW_EDITION=""`` to silence the warning.
    """


_CODE_CLASSES: dict[str, type[EnvironmentException]] = {
    "TIMEOUT": RemoteTimeout,
    "INVALID_ACTION": InvalidAction,
    "UNSUPPORTED": Unsupported,
    "NOT_READY": ResetNeeded,
    "CANCELLED": Cancelled,
}


def exception_for_code(
    code: str, message: str, *, op: str = "", recoverable: bool | None = None
) -> EnvironmentException:
    """Build the client-side exception for an error frame (ERR-4), most specific class first."""
    cls = _CODE_CLASSES.get(code, EnvironmentException)
    return cls(message, code=code, op=op, recoverable=recoverable)


def is_recoverable_exception(exc: BaseException) -> bool:
    """Whether an exception raised by an env marks itself recoverable (DEC-8)."""
    return bool(getattr(exc, "rlmesh_recoverable", False))
