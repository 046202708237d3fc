"""``rlmesh.recorder``: result bundles with a video per camera per episode (REC-1..9, DELTA-52).

``Recorder`` collects runs (``add`` for a finished ``RunResult``, ``capture`` for hooks
that record a run live, video included) and exports an ``rlmesh.result.v1`` bundle: a
folder or zip with ``result.json``, ``media/`` and a static ``index.html``.
``merge`` joins bundles from several runs or workers; ``recover`` rebuilds the bundle
of a run that was killed before it exported, ``orphans`` lists such runs' staging dirs.
See docs/recording.md.

>>> from rlmesh.recorder import SCHEMA, Recorder
>>> SCHEMA
'rlmesh.result.v1'
"""

from __future__ import annotations

from . import _workers as _workers  # a capture under workers= records in the workers (rlmesh.eval)
from ._bundle import merge as merge
from ._journal import orphans as orphans, recover as recover
from ._reader import UnsafeBundle as UnsafeBundle
from ._recorder import Recorder as Recorder
from ._records import (
    SCHEMA as SCHEMA,
    EpisodeRecord as EpisodeRecord,
    MediaRef as MediaRef,
    ResultSet as ResultSet,
    WorkloadRecord as WorkloadRecord,
)

__all__ = [
    "SCHEMA",
    "EpisodeRecord",
    "MediaRef",
    "Recorder",
    "ResultSet",
    "UnsafeBundle",
    "WorkloadRecord",
    "merge",
    "orphans",
    "recover",
]
