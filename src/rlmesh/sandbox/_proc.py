"""One bounded ``subprocess.run`` for the sandbox backends' host commands (docker, uv, pip)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._errors import SandboxError


def run_bounded(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None,
    error: type[SandboxError],
    timed_out: Callable[[], str],
    not_started: Callable[[OSError], str],
    **streams: Any,
) -> subprocess.CompletedProcess[Any]:
    """Run ``argv`` with stdin closed, ``env`` over ``os.environ``, at most ``timeout`` seconds.

    A timeout raises ``error(timed_out())`` and a command that cannot start (``OSError``)
    ``error(not_started(exc))``; the wordings are called only then, so they may read a log the
    command wrote. ``streams`` go to ``subprocess.run`` (``capture_output``, ``stdout``, ...).
    """
    try:
        return subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            env=None if env is None else {**os.environ, **env},
            **streams,
        )
    except subprocess.TimeoutExpired:
        raise error(timed_out()) from None
    except OSError as exc:
        raise error(not_started(exc)) from None
