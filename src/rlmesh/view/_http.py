"""The HTTP backend (VIEW-16..18, O-13): an aiohttp server on its own thread, frames pushed over WebSockets.

Routes (query strings never affect routing):

- ``GET /`` the page; ``GET /ws`` one WebSocket per tab (below);
- ``GET /frame`` the latest encoded frame of the selected camera (empty before the first);
- ``GET /mjpeg?source=I&lane=J`` ``multipart/x-mixed-replace`` JPEG stream at the view fps
  (for ``<img>``, curl, VLC: no JavaScript);
- ``GET /sources.json``, ``/hud.json``, ``/episodes.json``;
- ``GET /select?i=N``, ``/skip`` (the reference's routes, ``{"ok": true}``), and
  ``/control?op=pause|resume|step|skip|quit``;
- anything else: 404 ``not found``.

WebSocket protocol. Server to page: binary frames (a 20-byte little-endian header
``<BBHIdHH``: kind 1, source, lane, sequence, feed time (Unix seconds), width,
height; then the JPEG/PNG bytes) for every camera and lane, and JSON text
messages ``{"type": "hello" | "hud" | "sources" | "episodes" | "series", ...}``.
Page to server: JSON ``{"op": "select", "source": I, "lane": J}`` or
``{"op": "pause" | "resume" | "toggle" | "step" | "skip" | "quit"}``.

Each tab has its own sender holding only the newest message per camera: a tab
that reads slowly (or not at all) skips frames; it never holds up the encoder or
the run.

Security (issue 28; docs/viewer.md "Security"): every request passes
:func:`rlmesh.view._guard.refusal` (Host, cross-site, same-origin, token) in one
middleware before any handler runs, ``/ws`` included. A connection with no request in
flight is closed after :data:`IDLE_SECONDS`; a tab or stream that stops reading for that
long is dropped; at most :data:`MAX_STREAMS` tabs and MJPEG streams are served at once
(503 beyond).
"""

from __future__ import annotations

import asyncio
import json
import struct
import sys
import threading
from typing import Any

from ._core import Viewer, ViewerError
from ._encode import make_encoder
from ._guard import accepted_hosts, is_loopback, new_token, refusal, ssh_hint
from ._page import PAGE

__all__ = ["FRAME_HEADER", "IDLE_SECONDS", "MAX_STREAMS", "HttpBackend", "is_loopback", "ssh_hint"]

#: Binary frame header: kind, source, lane, sequence, feed time (Unix s), width, height.
FRAME_HEADER = struct.Struct("<BBHIdHH")

#: A connection with no request in flight is closed after this long, and so is a tab or
#: MJPEG stream whose reader has not taken a frame for this long (a browser reconnects on
#: its own; a tab's WebSocket is pinged at this period). 15 s: well past any real pause
#: between a page's requests, far short of what a connection flood needs to pile up.
IDLE_SECONDS = 15.0

#: Most tabs (WebSockets) plus MJPEG streams served at once; beyond, 503. Each one gets
#: its own copy of every frame, so this also bounds the encoder's fan-out.
MAX_STREAMS = 32


class _Client:
    """One tab: the newest unsent frame per camera and the newest JSON per type."""

    __slots__ = ("event", "frames", "texts", "ws")

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.frames: dict[tuple[int, int], bytes] = {}
        self.texts: dict[str, str] = {}
        self.event = asyncio.Event()


class HttpBackend:
    """Serve the page, the JSON routes, the WebSocket push and the MJPEG stream."""

    name = "http"

    def __init__(
        self,
        viewer: Viewer,
        *,
        host: str = "127.0.0.1",
        port: int = 8008,
        fmt: str = "jpeg",
        quality: int = 75,
        token: str | None = None,
        allowed_hosts: tuple[str, ...] | list[str] = (),
    ) -> None:
        self.viewer = viewer
        self.host = host
        self.allowed_hosts = tuple(allowed_hosts)
        self._hosts: frozenset[str] = frozenset()  # accepted Host headers, once the port is bound
        self.port = port
        self.fmt = fmt
        self.encode, self.content_type = make_encoder(fmt, quality)
        self.token = token if token is not None or is_loopback(host) else new_token()
        self.latest: dict[tuple[int, int], bytes] = {}
        self.latest_seq: dict[tuple[int, int], int] = {}
        self._raw: dict[tuple[int, int], tuple[Any, int]] = {}
        self.clients: set[_Client] = set()
        self.streams = 0
        self._pending_ws = 0  # tabs between the upgrade and joining ``clients``
        self._mjpeg_events: set[asyncio.Event] = set()
        self._episodes_version = -1
        self._series_t = 0.0
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="rlmesh-view-http", daemon=True)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._runner: Any = None
        self._closing = False
        self.bound_port = 0

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "localhost"
        if ":" in host:
            host = f"[{host}]"
        url = f"http://{host}:{self.bound_port}/"
        return url + (f"?token={self.token}" if self.token else "")

    def start(self) -> None:
        """Bind and serve; raises :class:`ViewerError` when the port cannot be bound."""
        self._thread.start()
        self._ready.wait(15.0)
        if self._error is not None or not self._ready.is_set():
            err = self._error
            self.close()
            raise ViewerError(f"HTTP backend failed to bind port {self.port}: {err}")

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve())
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            self.loop.run_forever()
        finally:
            try:
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            except Exception:
                pass
            self.loop.close()

    async def _serve(self) -> None:
        from aiohttp import web

        app = web.Application(middlewares=[self._middleware()])
        r = app.router
        r.add_get("/", self._index)
        r.add_get("/ws", self._ws)
        r.add_get("/frame", self._frame)
        r.add_get("/mjpeg", self._mjpeg)
        r.add_get("/sources.json", self._sources)
        r.add_get("/hud.json", self._hud)
        r.add_get("/episodes.json", self._episodes)
        r.add_get("/select", self._select)
        r.add_get("/skip", self._skip)
        r.add_get("/control", self._control)
        r.add_route("*", "/{tail:.*}", self._not_found)
        runner = web.AppRunner(
            app,
            handle_signals=False,
            access_log=None,
            shutdown_timeout=1.0,
            keepalive_timeout=IDLE_SECONDS,
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        self.bound_port = int(sockets[0].getsockname()[1]) if sockets else self.port
        self._hosts = accepted_hosts(self.host, self.bound_port, self.allowed_hosts)

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if self._thread.is_alive():
            try:
                fut = asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop)
                fut.result(timeout=5.0)
            except Exception:
                pass
            try:
                self.loop.call_soon_threadsafe(self.loop.stop)
            except RuntimeError:
                pass
            self._thread.join(timeout=5.0)

    async def _shutdown(self) -> None:
        for ev in list(self._mjpeg_events):
            ev.set()
        for client in list(self.clients):
            try:
                await asyncio.wait_for(client.ws.close(), 1.0)
            except Exception:
                pass
        if self._runner is not None:
            try:
                await asyncio.wait_for(self._runner.cleanup(), 3.0)
            except Exception:
                pass

    def announce(self) -> None:
        """Print the URL once (with the token), and the ``ssh -L`` line over SSH."""
        lines = [f"rlmesh view: open {self.url}"]
        hint = ssh_hint(self.bound_port)
        if hint is not None:
            lines.append(f"rlmesh view: over SSH, forward the port first: {hint}")
        try:
            print("\n".join(lines), file=sys.stderr, flush=True)
        except Exception:
            pass

    # -- the pump thread ---------------------------------------------------------------------

    def frame(self, key: tuple[int, int], frame: Any, stamp: float, seq: int) -> None:
        """Encode one frame once and hand it to every tab (called on the pump thread)."""
        if not self.clients and not self.streams:
            # nobody is watching: keep the picture, encode it only if /frame asks (no idle encoding)
            self._raw[key] = (frame, seq)
            return
        data = self.encode(frame)
        h, w = int(frame.shape[0]), int(frame.shape[1])
        msg = (
            FRAME_HEADER.pack(
                1, key[0] & 0xFF, key[1] & 0xFFFF, seq & 0xFFFFFFFF, stamp, w & 0xFFFF, h & 0xFFFF
            )
            + data
        )
        try:
            self.loop.call_soon_threadsafe(self._deliver, key, data, msg, seq)
        except RuntimeError:  # loop closed
            pass

    def meta(self, now: float) -> None:
        """Push the HUD, sources, series and (when changed) the episode table to every tab."""
        if not self.clients:
            return
        v = self.viewer
        texts = {
            "hud": json.dumps({"type": "hud", **v.hud_doc()}),
            "sources": json.dumps({"type": "sources", **v.sources_doc()}),
        }
        if now - self._series_t >= 0.25:  # the plots refresh at 4 Hz
            self._series_t = now
            texts["series"] = json.dumps({"type": "series", **v.series_doc()})
        if v.stats.version != self._episodes_version:
            self._episodes_version = v.stats.version
            texts["episodes"] = json.dumps({"type": "episodes", **v.episodes_doc()}, default=str)
        try:
            self.loop.call_soon_threadsafe(self._deliver_texts, texts)
        except RuntimeError:
            pass

    # -- the event loop ------------------------------------------------------------------------

    def _deliver(self, key: tuple[int, int], data: bytes, msg: bytes, seq: int) -> None:
        self.latest[key] = data
        self.latest_seq[key] = seq
        for client in self.clients:
            client.frames[key] = msg  # an unsent older frame of this camera is dropped
            client.event.set()
        for ev in self._mjpeg_events:
            ev.set()

    def _deliver_texts(self, texts: dict[str, str]) -> None:
        for client in self.clients:
            client.texts.update(texts)
            client.event.set()

    async def _sender(self, client: _Client) -> None:
        ws = client.ws
        while not ws.closed:
            await client.event.wait()
            client.event.clear()
            texts, client.texts = client.texts, {}
            frames, client.frames = client.frames, {}
            try:  # a tab that stops reading is dropped after IDLE_SECONDS, never waited on forever
                await asyncio.wait_for(
                    _send_batch(ws, list(texts.values()), list(frames.values())), IDLE_SECONDS
                )
            except asyncio.TimeoutError:
                _abort(ws)
                return

    # -- handlers ------------------------------------------------------------------------------

    def _middleware(self) -> Any:
        """Every request passes the guard first (:func:`rlmesh.view._guard.refusal`)."""
        from aiohttp import web

        @web.middleware
        async def guard(request: Any, handler: Any) -> Any:
            text = refusal(request, token=self.token, hosts=self._hosts, port=self.bound_port)
            if text is not None:
                return web.Response(status=403, text=text)
            return await handler(request)

        return guard

    async def _index(self, request: Any) -> Any:
        from aiohttp import web

        return web.Response(text=PAGE, content_type="text/html", charset="utf-8")

    async def _frame(self, request: Any) -> Any:
        from aiohttp import web

        v = self.viewer
        key = (v.selected, v.selected_lane)
        raw = self._raw.get(key)
        if raw is not None and raw[1] > self.latest_seq.get(key, -1):
            data = await asyncio.get_running_loop().run_in_executor(None, self.encode, raw[0])
            if raw[1] > self.latest_seq.get(key, -1):
                self.latest[key], self.latest_seq[key] = data, raw[1]
        data = self.latest.get(key, b"")
        return web.Response(
            body=data, content_type=self.content_type, headers={"Cache-Control": "no-store"}
        )

    async def _sources(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response(self.viewer.sources_doc())

    async def _hud(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response(self.viewer.hud_doc())

    async def _episodes(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response(json.loads(json.dumps(self.viewer.episodes_doc(), default=str)))

    async def _select(self, request: Any) -> Any:
        from aiohttp import web

        try:
            i = int(request.query.get("i", ""))
        except ValueError:
            i = -1
        kw: dict[str, Any] = {"source": i}
        lane = request.query.get("lane")
        if lane is not None and lane.isdigit():
            kw["lane"] = int(lane)
        self.viewer.request("select", **kw)
        return web.json_response({"ok": True})

    async def _skip(self, request: Any) -> Any:
        from aiohttp import web

        self.viewer.request("skip")
        return web.json_response({"ok": True})

    async def _control(self, request: Any) -> Any:
        from aiohttp import web

        op = request.query.get("op", "")
        ok = op in ("pause", "resume", "toggle", "step", "skip", "quit") and self.viewer.request(op)
        return web.json_response({"ok": bool(ok)}, status=200 if ok else 400)

    async def _not_found(self, request: Any) -> Any:
        from aiohttp import web

        return web.Response(status=404, text="not found")

    def _open_streams(self) -> int:
        return len(self.clients) + self.streams + self._pending_ws

    def _watchers_changed(self) -> None:
        self.viewer.set_all_frames(bool(self.clients) or self.streams > 0)

    async def _ws(self, request: Any) -> Any:
        from aiohttp import WSMsgType, web

        if self._open_streams() >= MAX_STREAMS:
            return web.Response(
                status=503, text=f"busy: {MAX_STREAMS} tabs and streams are open already"
            )
        # a tab that stops answering pings is dropped after ~1.5 x IDLE_SECONDS
        ws = web.WebSocketResponse(
            heartbeat=IDLE_SECONDS, max_msg_size=1 << 16, compress=False
        )  # JPEG does not deflate
        client = _Client(ws)
        v = self.viewer
        self._pending_ws += 1
        try:
            await asyncio.wait_for(ws.prepare(request), IDLE_SECONDS)
            await asyncio.wait_for(
                ws.send_str(
                    json.dumps(
                        {
                            "type": "hello",
                            "format": self.fmt,
                            "fps": v.fps_target,
                            **v.sources_doc(),
                        }
                    )
                ),
                IDLE_SECONDS,
            )
        except asyncio.TimeoutError:
            _abort(ws)
            return ws
        finally:
            self._pending_ws -= 1
        for key, data in self.latest.items():  # the newest picture of every camera at once
            client.frames[key] = (
                FRAME_HEADER.pack(
                    1, key[0] & 0xFF, key[1] & 0xFFFF, self.latest_seq.get(key, 0), 0.0, 0, 0
                )
                + data
            )
        client.texts["hud"] = json.dumps({"type": "hud", **v.hud_doc()})
        client.texts["episodes"] = json.dumps({"type": "episodes", **v.episodes_doc()}, default=str)
        client.event.set()
        self.clients.add(client)
        self._watchers_changed()
        sender = asyncio.ensure_future(self._sender(client))
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                try:
                    doc = json.loads(msg.data)
                    op = str(doc.get("op", ""))
                except Exception:
                    continue
                kw = {k: doc[k] for k in ("source", "lane") if isinstance(doc.get(k), int)}
                v.request(op, **kw)
        finally:
            self.clients.discard(client)
            self._watchers_changed()
            sender.cancel()
            try:
                await sender
            except BaseException:
                pass
        return ws

    async def _mjpeg(self, request: Any) -> Any:
        from aiohttp import web

        v = self.viewer

        def key() -> tuple[int, int]:
            try:
                return int(request.query["source"]), int(request.query.get("lane", "0"))
            except (KeyError, ValueError):
                return v.selected, v.selected_lane

        if self._open_streams() >= MAX_STREAMS:
            return web.Response(
                status=503, text=f"busy: {MAX_STREAMS} tabs and streams are open already"
            )
        resp = web.StreamResponse(
            headers={
                "Content-Type": "multipart/x-mixed-replace; boundary=rlmeshframe",
                "Cache-Control": "no-store",
            }
        )
        await resp.prepare(request)
        ev = asyncio.Event()
        ev.set()
        self._mjpeg_events.add(ev)
        self.streams += 1
        self._watchers_changed()
        sent = -1
        try:
            while not self._closing:
                await ev.wait()
                ev.clear()
                k = key()
                data = self.latest.get(k)
                seq = self.latest_seq.get(k, -1)
                if data is None or seq == sent:
                    continue
                sent = seq
                head = f"--rlmeshframe\r\nContent-Type: {self.content_type}\r\nContent-Length: {len(data)}\r\n\r\n"
                await asyncio.wait_for(resp.write(head.encode() + data + b"\r\n"), IDLE_SECONDS)
        except asyncio.TimeoutError:  # the reader stopped reading: drop it
            if request.transport is not None:
                request.transport.abort()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._mjpeg_events.discard(ev)
            self.streams -= 1
            self._watchers_changed()
        return resp


async def _send_batch(ws: Any, texts: list[str], frames: list[bytes]) -> None:
    for text in texts:
        await ws.send_str(text)
    for msg in frames:
        await ws.send_bytes(msg)


def _abort(ws: Any) -> None:
    """Drop a WebSocket's connection at once (its reader stopped reading)."""
    try:
        req = getattr(ws, "_req", None)
        transport = req.transport if req is not None else None
        if transport is not None:
            transport.abort()
    except Exception:
        pass
