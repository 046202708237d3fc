"""Headless OpenGL for MuJoCo cameras: pick a backend that works on this machine, or say why not.

MuJoCo picks its OpenGL backend from ``$MUJOCO_GL`` once, when ``mujoco`` is first imported:
``glfw`` needs a display, ``egl`` a libEGL (a GPU driver, or Mesa's software device),
``osmesa`` Mesa's off-screen software renderer (Debian: ``libosmesa6``).
:func:`setup_headless_gl` runs before that import wherever a suite env is built (in this
process, a worker, a sandbox): with ``$MUJOCO_GL`` already set, or a display, it changes
nothing; otherwise it sets ``MUJOCO_GL`` (and ``PYOPENGL_PLATFORM``) to the first backend
whose library loads: ``egl`` first when a GPU device node exists, else ``osmesa`` then ``egl``.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys

from ..errors import DependencyMissing

__all__ = ["GL_HINT", "gl_error", "setup_headless_gl"]

#: What to install when no backend works (the Debian package names).
GL_HINT = (
    "install Debian's libosmesa6 (apt-get install -y libosmesa6; software rendering, "
    "then MUJOCO_GL=osmesa) or libegl1 with a GPU driver (MUJOCO_GL=egl)"
)

_LIBRARIES = {
    "osmesa": ("libOSMesa.so.8", "libOSMesa.so.6", "libOSMesa.so"),
    "egl": ("libEGL.so.1", "libEGL.so"),
}


def _loads(backend: str) -> bool:
    for name in _LIBRARIES[backend]:
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


def _gpu() -> bool:
    return bool(glob.glob("/dev/nvidia[0-9]*") or glob.glob("/dev/dri/renderD*"))


def setup_headless_gl() -> str | None:
    """Choose MuJoCo's OpenGL backend for a machine without a display; returns it (or ``None``).

    Returns the backend in force: ``$MUJOCO_GL`` when set (left alone), ``None`` when a
    display is there (MuJoCo's default, ``glfw``), or the one chosen here. Once ``mujoco``
    is imported its backend is fixed, so this changes nothing then.

    Raises:
        DependencyMissing: no display, no ``$MUJOCO_GL`` and no loadable backend library;
            the message names the Debian packages to install.
    """
    chosen = os.environ.get("MUJOCO_GL")
    if chosen:
        return chosen
    if "mujoco" in sys.modules or os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return None
    order = ("egl", "osmesa") if _gpu() else ("osmesa", "egl")
    for backend in order:
        if _loads(backend):
            os.environ["MUJOCO_GL"] = backend
            os.environ.setdefault("PYOPENGL_PLATFORM", backend)
            return backend
    raise gl_error("no OpenGL library loads (tried libOSMesa and libEGL)")


def gl_error(why: str) -> DependencyMissing:
    """The error for a camera that cannot render here (``why`` says what failed)."""
    backend = os.environ.get("MUJOCO_GL") or "glfw (the default, needs a display)"
    return DependencyMissing(
        f"MuJoCo cannot render a camera on this machine: {why} (MUJOCO_GL={backend}); "
        f"{GL_HINT}, or run state-only (camera=None)",
        name="libosmesa6",
    )
