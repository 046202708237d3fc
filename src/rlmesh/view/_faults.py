"""When a camera's frames fail: skip, give up, and what to tell the user (the viewer and the recorder).

One rule for every camera the viewer shows or the recorder records, local env or served:

- a read that fails skips that frame; the camera stays (a simulator hiccup costs a frame);
- a camera whose reads fail :data:`FAILURES_IN_A_ROW` times in a row, or whose failure can
  never heal (a missing dependency such as pygame, a role the env does not declare), is
  given up for the rest of the run with one warning that names the cause and the fix.

A served env's ``render()`` failure arrives as ``EnvironmentException("[INTERNAL] render
failed: DependencyNotInstalled: ...")``: the cause is read from that text, since the
exception's class stayed on the server.
"""

from __future__ import annotations

import re

from ..errors import AdapterResolutionError

__all__ = ["FAILURES_IN_A_ROW", "RENDER_FIX", "camera_fault", "is_lasting", "missing_dependency"]

#: Consecutive failed reads after which a camera is given up (one skipped frame is not enough).
FAILURES_IN_A_ROW = 3

_MISSING = re.compile(
    r"\b(DependencyNotInstalled|DependencyMissing|ModuleNotFoundError|ImportError)\b"
)

#: What to do when rendering lacks a package.
RENDER_FIX = (
    "install it where the env runs (Gymnasium's classic-control envs such as CartPole render "
    'with pygame: pip install "rlmesh-py[render]", or "gymnasium[classic-control]")'
)


def missing_dependency(exc: BaseException) -> bool:
    """Whether ``exc`` says a package is missing (here, or on the server that raised it).

    >>> missing_dependency(ImportError("No module named 'pygame'"))
    True
    >>> missing_dependency(RuntimeError("[INTERNAL] render failed: DependencyNotInstalled: pygame"))
    True
    >>> missing_dependency(ValueError("bad frame"))
    False
    """
    if isinstance(exc, ImportError):
        return True
    return any(_MISSING.search(text) is not None for text in (type(exc).__name__, str(exc)))


def is_lasting(exc: BaseException) -> bool:
    """A failure that the next frame cannot heal: a missing package, an undeclared role."""
    return missing_dependency(exc) or isinstance(exc, AdapterResolutionError)


def camera_fault(who: str, label: str, exc: BaseException, *, leave_out: str) -> str:
    """The one warning for a camera given up: the cause, then the fix.

    Args:
        who: The prefix (``"recorder"``, ``"rlmesh view"``).
        label: The camera (``"render"``, ``"image/wrist"``).
        exc: The last failure.
        leave_out: How to run without this camera (``"cameras=[]"`` ...).

    >>> print(camera_fault("recorder", "render", ImportError("No module named 'pygame'"),
    ...                    leave_out="pass cameras=[] to record metrics only"))
    recorder: camera 'render' disabled for the rest of the run: ImportError: No module named 'pygame'. To fix: install it where the env runs (Gymnasium's classic-control envs such as CartPole render with pygame: pip install "rlmesh-py[render]", or "gymnasium[classic-control]"); or pass cameras=[] to record metrics only
    """
    cause = f"{type(exc).__name__}: {exc}".strip()
    if missing_dependency(exc):
        fix = RENDER_FIX if label in ("render", "render()") else "install the missing package"
    elif isinstance(exc, AdapterResolutionError):
        fix = "name a role the env declares (Session.observation_roles() lists them)"
    elif label in ("render", "render()"):
        fix = "make the env's render() return RGB frames (render_mode='rgb_array')"
    else:
        fix = "check the camera's observation values"
    return f"{who}: camera {label!r} disabled for the rest of the run: {cause}. To fix: {fix}; or {leave_out}"
