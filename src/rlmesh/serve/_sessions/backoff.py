"""Prewarming's backoff: session workers that fail to become ready in a row earn longer pauses."""

from __future__ import annotations

import logging

__all__ = ["FIRST_BACKOFF_SECONDS", "MAX_BUILD_BACKOFF_SECONDS", "Backoff"]

log = logging.getLogger("rlmesh.serve")

#: The first pause after a worker failed to become ready; it doubles per failure in a row.
FIRST_BACKOFF_SECONDS = 0.5
#: The longest pause between prewarm attempts after workers failed to become ready in a row.
MAX_BUILD_BACKOFF_SECONDS = 30.0


class Backoff:
    """The streak of session workers that did not become ready, and the pause it earns.

    One log line per streak: the first failure is an error, the next ones are debug lines,
    and the first worker ready again says how many failed before it.

    Attributes:
        failures: Workers in a row that did not become ready (the streak).
        pauses: The pauses taken (for tests).
        until: ``time.monotonic()`` before which no worker is prewarmed.
    """

    def __init__(self) -> None:
        self.failures = 0
        self.pauses: list[float] = []
        self.until = 0.0

    def failed(self, text: str, now: float) -> None:
        """One more worker will not become ready (``text`` says why) at ``time.monotonic()``
        ``now``: pause, log once per streak."""
        failures = self.failures + 1
        pause = min(FIRST_BACKOFF_SECONDS * 2 ** (failures - 1), MAX_BUILD_BACKOFF_SECONDS)
        self.until = now + pause
        if failures == 1:
            head, _, tail = text.partition("\n")
            log.error(
                "%s; retrying with a backoff (%.1fs doubling to %.0fs), with no further log "
                "line until a session worker is ready again%s",
                head,
                FIRST_BACKOFF_SECONDS,
                MAX_BUILD_BACKOFF_SECONDS,
                f"\n{tail}" if tail else "",
            )
        else:
            log.debug("%s (failure %d in a row)", text, failures)
        self.pauses.append(pause)
        self.failures = failures  # after the log line: a test that waits for it sees both

    def ready(self) -> None:
        """A worker became ready: the streak ends."""
        if self.failures:
            log.warning("a session worker is ready again after %d failed starts", self.failures)
        self.failures = 0
