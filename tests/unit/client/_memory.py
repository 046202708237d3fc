"""An in-memory network for client tests: the httpx ``MockTransport`` idea, one level down.

The client code runs unchanged (``ClientSession`` over a real
:class:`rlmesh.transport.Connection`); only the socket under the connection is a
:class:`MemorySocket`, whose other end is a :class:`ScriptedServer`. The server answers
every request frame as it is written, in the same call, with the reply laid out by a
server-side :class:`rlmesh.wire.session.Session`: by default from a real service (an env's
``Driver`` or a served model, as the serve loop would answer), or from a script of
canned actions for the error paths (an ``Error`` reply, a malformed frame, a reply of the
wrong kind, silence, a hang-up).

Nothing waits on a clock: a read that finds nothing to read times out at once when the
socket has a timeout (as the kernel would once it expired), and fails the test when it
has none (the client would block forever).

:class:`Network` hands these sockets out from ``rlmesh.client._dial.dial``, so the
public clients (``rlmesh.numpy.RemoteEnv("tcp://env:1")``...) dial into it.
"""

from __future__ import annotations

import socket
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from rlmesh._build import PROTOCOL_GENERATION
from rlmesh.errors import CODE_NUMBERS, ProtocolException
from rlmesh.serve._driver import RequestFailed
from rlmesh.serve._options import ServeOptions
from rlmesh.serve._server import _env_service
from rlmesh.transport import Address, Connection, parse_connect_address
from rlmesh.wire import frames, handshake, messages as m
from rlmesh.wire.frames import PREFIX_SIZE
from rlmesh.wire.session import SERVER, Session

Action = Callable[["ScriptedServer", frames.Frame], None]


class WouldBlockForever(AssertionError):
    """The client read with no timeout and nothing will ever arrive: a test bug, not a hang."""


class MemorySocket:
    """The client's end of an in-memory stream (the socket methods a ``Connection`` calls)."""

    def __init__(self, server: ScriptedServer, family: int = socket.AF_UNSPEC) -> None:
        self.server = server
        # AF_UNSPEC: neither TCP nor Unix, so no socket options and never a same-host peer
        # (no shared-memory rings); AF_UNIX: a same-host peer that may offer rings
        self.family = family
        self._timeout: float | None = None
        self.closed = False

    # -- the socket surface -------------------------------------------------------------

    def gettimeout(self) -> float | None:
        return self._timeout

    def settimeout(self, value: float | None) -> None:
        self._timeout = value

    def send(self, data: Any, flags: int = 0) -> int:
        return self._take(_bytes(data))

    def sendmsg(self, buffers: Any) -> int:
        return self._take(b"".join(_bytes(b) for b in buffers))

    def setsockopt(self, *args: Any) -> None:
        pass

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        if self.closed:
            raise OSError(9, "Bad file descriptor")
        out = self.server.outbox
        if not out:
            if self.server.hung_up:
                return 0  # EOF
            if flags or self._timeout == 0.0:
                raise BlockingIOError(11, "Resource temporarily unavailable")
            if self._timeout is None:
                raise WouldBlockForever(
                    "the client waits with no timeout for a reply that will never come"
                )
            raise TimeoutError("timed out")
        view = memoryview(buffer).cast("B")
        n = min(nbytes or len(view), len(view), len(out), self.server.chunk or len(out))
        view[:n] = out[:n]
        del out[:n]
        return n

    def getpeername(self) -> Any:
        raise OSError(107, "in-memory socket has no peer address")

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        self.closed = True
        self.server.client_closed()

    def _take(self, raw: bytes) -> int:
        """What the kernel does with a send: all of it, or the first ``take`` bytes."""
        server = self.server
        if self.closed:
            raise OSError(9, "Bad file descriptor")
        if server.hung_up:
            raise BrokenPipeError(32, "Broken pipe")
        if server.send_error is not None:
            raise server.send_error
        if server.take:
            raw = raw[: server.take]
        server.feed(raw)
        return len(raw)


def _bytes(buf: Any) -> bytes:
    if type(buf) is bytes:
        return buf
    if isinstance(buf, np.ndarray):
        return buf.tobytes()
    return bytes(memoryview(buf).cast("B"))


class Endpoint:
    """One served thing (an env or a model) reachable at an address; one session at a time.

    Attributes:
        script: Actions the next request frames get instead of the service's answer, in
            order (one per request, any connection). See the ``reply``/``raw``... helpers.
        requests: Every request message the endpoint decoded, in order.
    """

    def __init__(
        self,
        service: Any,
        address: str,
        *,
        capabilities: dict[str, str] | None = None,
        family: int = socket.AF_UNSPEC,
    ) -> None:
        self.service = service
        self.address = address
        self.capabilities = capabilities or {}
        self.family = family
        self.script: deque[Any] = deque()
        self.requests: list[Any] = []
        self.active: ScriptedServer | None = None
        self.connections: list[ScriptedServer] = []
        self.shutdown_allowed = True
        self.shut_down = False

    def accept(self) -> MemorySocket:
        server = ScriptedServer(self)
        self.connections.append(server)
        return MemorySocket(server, self.family)

    def then(self, *actions: Action) -> Endpoint:
        """Queue ``actions`` for the next request frames."""
        self.script.extend(actions)
        return self

    def on(self, request: type, action: Action) -> Endpoint:
        """Queue ``action`` for the next request of this class; others before it get answers."""
        self.script.append((request, action))
        return self


class ScriptedServer:
    """The server end of one in-memory connection: a server ``wire.Session`` and a service."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.session = Session(SERVER)
        self.inbox = bytearray()
        self.outbox = bytearray()
        self.hung_up = False
        self.chunk = 0  # >0: hand the client at most this many bytes per read
        self.take = 0  # >0: take at most this many bytes per send (a partial write)
        self.send_error: BaseException | None = None  # what the next sends raise
        self.held: list[
            bytes
        ] = []  # replies kept back (silence): sent late, before the next answer

    # -- bytes in ------------------------------------------------------------------------

    def feed(self, raw: bytes) -> None:
        self.inbox += raw
        while len(self.inbox) >= PREFIX_SIZE:
            plan = frames.decode_prefix(bytes(self.inbox[:PREFIX_SIZE]))
            end = PREFIX_SIZE + plan.body_len
            if len(self.inbox) < end:
                return
            body = frames.new_body(plan)
            body[:] = np.frombuffer(bytes(self.inbox[PREFIX_SIZE:end]), np.uint8)
            del self.inbox[:end]
            frame = frames.split_body(plan, body)
            if frame.kind == 0x7F:  # a shared-memory doorbell (never here: no rings)
                continue
            script = self.endpoint.script
            head = script[0] if script else None
            if isinstance(head, tuple):  # (request class, action): for that kind of request only
                kind, act = head
                if frame.kind == kind.KIND:
                    script.popleft()
                    act(self, frame)
                else:
                    self.answer(frame)
            elif head is not None:
                script.popleft()(self, frame)
            else:
                self.answer(frame)

    # -- bytes out -----------------------------------------------------------------------

    def write(self, buffers: Any) -> None:
        data = b"".join(_bytes(b) for b in buffers)
        if self.held:
            self.outbox += b"".join(self.held)
            self.held.clear()
        self.outbox += data

    def reply(self, msg: Any, segments: Any = ()) -> None:
        """Send ``msg`` as the answer to the request just received (checked by the server session)."""
        self.write(self.session.send(msg, list(segments)))

    def hang_up(self) -> None:
        self.hung_up = True
        if self.endpoint.active is self:
            self.endpoint.active = None

    def client_closed(self) -> None:
        if self.endpoint.active is self:
            self.endpoint.active = None
            self.endpoint.service.end_session()

    # -- the service's answers (what the serve loop does) ---------------------------------

    def answer(self, frame: frames.Frame) -> None:
        ep = self.endpoint
        try:
            msg = self.session.receive(frame)
        except ProtocolException as exc:
            self.reply(m.Error(code=CODE_NUMBERS["PROTOCOL"], message=str(exc), recoverable=False))
            self.hang_up()
            return
        ep.requests.append(msg)
        svc = ep.service
        if isinstance(msg, m.Hello):
            if ep.active is not None and ep.active is not self:
                self.reply(m.Busy(message="environment already has an active session"))
                return
            welcome = handshake.answer_hello(
                msg,
                declared=svc.declared_edition,
                service=svc.service,
                component=svc.component,
                session_id=str(uuid.uuid4()),
                contract=svc.contract(),
                capabilities=ep.capabilities,
            )
            if isinstance(welcome, m.Welcome):
                svc.begin_session()
                ep.active = self
            self.reply(welcome)
        elif isinstance(msg, m.Ping):
            busy = ep.active is not None and ep.active is not self
            self.reply(
                m.Pong(
                    state="busy" if busy else "ready",
                    generation=PROTOCOL_GENERATION,
                    service=svc.service,
                )
            )
        elif isinstance(msg, m.Close):
            records = svc.end_session()
            ep.active = None
            self.reply(m.CloseReply(final_episodes=records))
        elif isinstance(msg, m.Shutdown):
            if ep.shutdown_allowed:
                ep.shut_down = True
                self.reply(m.ShutdownReply(accepted=True, message="shutdown accepted"))
            else:
                self.reply(m.ShutdownReply(accepted=False, message="remote shutdown is disabled"))
        elif isinstance(msg, m.Configure):
            self.reply(m.ConfigureReply(edition=msg.edition.strip()))
        elif isinstance(msg, m.Attach):
            self.reply(m.AttachReply(attached=False))
        else:
            try:
                reply, segments = svc.handle(msg, frame)
            except RequestFailed as exc:
                self.reply(exc.to_message())
                if not exc.recoverable:
                    svc.end_session()
                    ep.active = None
                return
            self.reply(reply, segments)


# -- script actions: what a request frame gets instead of the service's answer ---------------


def answer() -> Action:
    """The service's own answer (a placeholder in a script)."""
    return ScriptedServer.answer


def reply(msg: Any, segments: Any = ()) -> Action:
    """Answer with ``msg`` (the server session checks it answers the request; ``Error`` always does)."""

    def act(server: ScriptedServer, frame: frames.Frame) -> None:
        server.endpoint.requests.append(server.session.receive(frame))
        server.reply(msg, segments)

    return act


def error(code: str, message: str, *, recoverable: bool = True, op: str = "") -> Action:
    """Answer with an ``Error`` frame of ``code`` (``"ENV_FAILURE"``, ``"PROTOCOL"``...)."""
    return reply(m.Error(code=CODE_NUMBERS[code], message=message, recoverable=recoverable, op=op))


def wrong(msg: Any, segments: Any = ()) -> Action:
    """Answer with ``msg`` whatever it is (bypassing the server's state table): a confused server."""

    def act(server: ScriptedServer, frame: frames.Frame) -> None:
        server.session.receive(frame)
        server.write(m.encode_message(msg, frame.request_id, list(segments)))

    return act


def raw(data: bytes) -> Action:
    """Answer with these bytes, whatever they are."""

    def act(server: ScriptedServer, frame: frames.Frame) -> None:
        server.write([data])

    return act


def silence(*, late: bool = False) -> Action:
    """Never answer (the client times out); ``late``: the answer comes before the next one."""

    def act(server: ScriptedServer, frame: frames.Frame) -> None:
        before = len(server.outbox)
        server.answer(frame)
        answered = bytes(server.outbox[before:])
        del server.outbox[before:]
        if late:
            server.held.append(answered)

    return act


def hang_up(*, after_answer: bool = False) -> Action:
    """Close the connection instead of answering (or right after answering)."""

    def act(server: ScriptedServer, frame: frames.Frame) -> None:
        if after_answer:
            server.answer(frame)
        server.hang_up()

    return act


# -- the network -----------------------------------------------------------------------------


class Network:
    """Addresses -> endpoints, dialled through ``rlmesh.client._dial.dial`` (patched in)."""

    def __init__(self) -> None:
        self.endpoints: dict[str, Endpoint] = {}
        self.unreachable: dict[str, BaseException] = {}
        self.dialled: list[str] = []

    def serve_env(self, env: Any, address: str = "tcp://env.test:1", **kwargs: Any) -> Endpoint:
        """Serve ``env`` (an env, a vector env or a list of lanes) as ``EnvServer`` would."""
        service, _view = _env_service(env, ServeOptions(), None, None, None)
        return self.serve(service, address, **kwargs)

    def serve_model(
        self, model: Any, address: str = "tcp://model.test:1", **kwargs: Any
    ) -> Endpoint:
        """Serve ``model`` as ``ModelServer`` would."""
        from rlmesh.serve._model import _ModelService

        return self.serve(_ModelService(model, None), address, **kwargs)

    def serve(self, service: Any, address: str, **kwargs: Any) -> Endpoint:
        url = parse_connect_address(address).url
        endpoint = Endpoint(service, url, **kwargs)
        self.endpoints[url] = endpoint
        return endpoint

    def refuse(self, address: str, exc: BaseException) -> str:
        """Dialling ``address`` raises ``exc`` (``ConnectionRefusedError``, ``TimeoutError``...)."""
        url = parse_connect_address(address).url
        self.unreachable[url] = exc
        return url

    def dial(self, address: Address, timeout: float | None) -> Any:
        url = address.url
        self.dialled.append(url)
        if url in self.unreachable:
            raise self.unreachable[url]
        endpoint = self.endpoints.get(url)
        if endpoint is None:
            raise ConnectionRefusedError(111, "Connection refused")
        return endpoint.accept()

    def connect(self, address: str) -> Connection:
        """An open connection to ``address``, as ``ClientSession.connect`` makes before Hello."""
        return Connection(
            self.dial(parse_connect_address(address), None), frames.PRE_HANDSHAKE_LIMITS
        )
