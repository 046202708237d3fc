"""Spaces: immutable specs plus sampling/containment wrappers (being built)."""

from ._spec import SpaceSpec as SpaceSpec
