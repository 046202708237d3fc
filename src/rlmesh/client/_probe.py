"""Moved to :mod:`rlmesh.transport.probe` (issue 10 item 4).

Kept only for ``sandbox/_docker.py``, which the ``leafimports`` branch repoints; the
integrator deletes this module at merge.
"""

from ..transport.probe import Health as Health, ping as ping, wait_ready as wait_ready

__all__ = ["Health", "ping", "wait_ready"]
