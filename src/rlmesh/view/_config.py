"""``View``: how to show a live eval (VIEW-1, VIEW-2); ``rlmesh.View`` and ``rlmesh.eval.View`` re-export it."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["View", "normalize_view"]

_BACKENDS = ("terminal", "http", "both")
_FORMATS = ("jpeg", "png")


@dataclass(frozen=True)
class View:
    """How to show a live eval. Pass to ``run`` / ``session`` as ``view=``.

    The common cases are the string shorthands ``"terminal"`` / ``"http"`` /
    ``"http:9000"`` / ``"both"``; construct a ``View`` directly only to tune.

    Attributes:
        backend: ``"terminal"``, ``"http"`` or ``"both"``.
        port: HTTP port for the ``"http"`` / ``"both"`` backends (1..65535).
        fps: Target frame rate (>= 1); frames produced faster are dropped.
        source: Which source to show first by label; ``None`` shows the first.
        format: Encoding for HTTP frames, ``"jpeg"`` or ``"png"``.
        quality: JPEG quality 1..100 (ignored for PNG).
        host: Address the HTTP backend binds (keyword, default ``"127.0.0.1"``).
            Any non-loopback host requires a token on every request.
        token: The token for a non-loopback bind; ``None`` draws a random one,
            printed once with the URL.
        allowed_hosts: Extra names the page answers to without a token (keyword;
            a name, or ``name:port``), e.g. the host name an SSH tunnel or a
            reverse proxy puts in ``Host``. Requests naming any other host are
            refused (DNS rebinding).

    Raises:
        ValueError: a field is out of its range.

    >>> View("http", port=9000)
    View(backend='http', port=9000, fps=30, source=None, format='jpeg', quality=75)
    """

    backend: str = "terminal"
    port: int = 8008
    fps: int = 30
    source: str | None = None
    format: str = "jpeg"
    quality: int = 75
    host: str = field(default="127.0.0.1", repr=False, kw_only=True)
    token: str | None = field(default=None, repr=False, kw_only=True)
    allowed_hosts: tuple[str, ...] = field(default=(), repr=False, kw_only=True)

    def __post_init__(self) -> None:
        if self.backend not in _BACKENDS:
            raise ValueError(f"View backend must be one of {_BACKENDS}, got {self.backend!r}")
        if not isinstance(self.port, int) or not 1 <= self.port <= 65535:
            raise ValueError(f"View port must be an int in 1..65535, got {self.port!r}")
        if not isinstance(self.fps, int) or self.fps < 1:
            raise ValueError(f"View fps must be an int >= 1, got {self.fps!r}")
        if self.format not in _FORMATS:
            raise ValueError(f"View format must be one of {_FORMATS}, got {self.format!r}")
        if not isinstance(self.quality, int) or not 1 <= self.quality <= 100:
            raise ValueError(f"View quality must be an int in 1..100, got {self.quality!r}")
        if not isinstance(self.host, str) or not self.host.strip():
            raise ValueError(f"View host must be a non-empty address, got {self.host!r}")
        if self.token is not None and (not isinstance(self.token, str) or not self.token):
            raise ValueError("View token must be a non-empty str or None")
        hosts = self.allowed_hosts
        if isinstance(hosts, str) or not all(isinstance(h, str) and h.strip() for h in hosts):
            raise ValueError(
                f"View allowed_hosts must be a list of non-empty host names, got {hosts!r}"
            )
        object.__setattr__(self, "allowed_hosts", tuple(h.strip() for h in hosts))


def normalize_view(view: object) -> View | None:
    """Normalize a ``view=`` argument (VIEW-2).

    ``None``/``False`` -> off; ``True`` -> ``View()``; a ``View`` -> itself;
    strings (trimmed, lowercased): ``""``/``"terminal"``/``"term"``/``"tty"``,
    ``"both"``, ``"http"`` (port 8008) and ``"http:PORT"``.

    Raises:
        ValueError: an unknown string or a bad port.
        TypeError: any other type.

    >>> normalize_view("http:9000").port, normalize_view(False)
    (9000, None)
    """
    if view is None or view is False:
        return None
    if view is True:
        return View()
    if isinstance(view, View):
        return view
    if isinstance(view, str):
        s = view.strip().lower()
        if s in ("", "terminal", "term", "tty"):
            return View("terminal")
        if s == "both":
            return View("both")
        if s == "http":
            return View("http")
        if s.startswith("http:"):
            port = s[5:].strip()
            try:
                return View("http", port=int(port))
            except ValueError:
                raise ValueError(
                    f"view={view!r}: the port after 'http:' must be an int in 1..65535"
                ) from None
        raise ValueError(
            f"unknown view {view!r}; expected 'terminal', 'http', 'http:PORT', 'both', True, "
            "a rlmesh.View, or None"
        )
    raise TypeError(f"view must be a View, str, bool or None, got {type(view).__name__}")
