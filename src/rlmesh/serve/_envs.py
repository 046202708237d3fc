"""Moved to :mod:`rlmesh._envview` (issue 10: one env view below ``serve/`` and ``eval/``).

Re-exported here only so branches written against the old path keep importing while
they merge; import from ``rlmesh._envview``.
"""

from .._envview import (
    AUTORESET_CHOICES as AUTORESET_CHOICES,
    EnvView as EnvView,
    Lanes as Lanes,
    LanesView as LanesView,
    OneLaneView as OneLaneView,
    ScalarView as ScalarView,
    VectorView as VectorView,
    autoreset_mode_of as autoreset_mode_of,
    autoreset_name as autoreset_name,
    env_id_of as env_id_of,
    is_vector_env as is_vector_env,
    published_metadata as published_metadata,
    view_of as view_of,
)

__all__ = [
    "AUTORESET_CHOICES",
    "EnvView",
    "Lanes",
    "LanesView",
    "OneLaneView",
    "ScalarView",
    "VectorView",
    "autoreset_mode_of",
    "autoreset_name",
    "env_id_of",
    "is_vector_env",
    "published_metadata",
    "view_of",
]
