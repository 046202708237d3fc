"""Many sessions on one env endpoint: ``EnvServer(target, sessions=N)``.

- :mod:`.control`: what the supervisor and its workers tell each other, the
  :class:`~.control.SessionSpec` every worker builds from, the shared activity board;
- :mod:`.supervisor`: the serving process's loop: accept, answer probes, hand each
  client to a worker, watch the workers;
- :mod:`.worker`: one worker process: build an env, serve one session, exit;
- :mod:`.server`: the checks that open an endpoint (what can be built N times, and travel).

This package's ``__init__`` imports nothing: the worker module is loaded by name in the
worker processes only.
"""
