"""Fixtures for adapter unit tests (builders live in ``_helpers``)."""

from __future__ import annotations

from ._helpers import std_obs as std_obs
