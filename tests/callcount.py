"""Count the Python function calls one env step costs, client and server apart (issue 24).

Counted with ``sys.setprofile`` ('call' events: Python functions, comprehensions and
generators; C functions are not counted), busy polling off (``RLMESH_BUSY_POLL_US=0``,
read when a connection is made) so spinning is not counted. The server runs in a thread
of this process with the profiler installed in that thread only, the client on the
calling thread with its own profiler; both are deterministic for a seeded env and a fixed
action sequence.

- **Server**: the serve thread's calls are cut into segments at each entry into the
  poller's wait (``Poller.poll``), so one segment is one wake-up of the loop; the
  segments that handled a ``Step`` are the step's cost. Calls made at or under the env's
  own ``step`` (the outermost object the server was given) are the env's, counted apart.
- **Client**: the calls made on the calling thread between entering and leaving
  ``env.step(action)``.

The figure per step is the median over the measured steps (episode ends are rare and
cost more; the median is the common step).
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any

__all__ = ["StepCounts", "count_steps"]


@dataclass
class StepCounts:
    """Per-step Python calls (medians over the measured steps) and the raw per-step lists."""

    client: int
    server: int
    env: int
    client_steps: list[int] = field(default_factory=list, repr=False)
    client_trace: list[str] = field(default_factory=list, repr=False)
    server_trace: list[str] = field(default_factory=list, repr=False)
    server_steps: list[int] = field(default_factory=list, repr=False)
    env_steps: list[int] = field(default_factory=list, repr=False)

    @property
    def total(self) -> int:
        """Client + server calls per step, beyond the env's own."""
        return self.client + self.server


class _ServerProfile:
    """The serve thread's profiler: segments between loop wake-ups, env calls apart."""

    def __init__(
        self, poll_code: CodeType, step_codes: set[CodeType], env_codes: set[CodeType]
    ) -> None:
        self.poll_code = poll_code
        self.step_codes = step_codes  # the server's step entry (marks a segment as a step)
        self.env_codes = env_codes  # the env's own step: calls under it are the env's
        self.segments: list[tuple[int, int, bool]] = []  # (server calls, env calls, handled a step)
        self.calls = 0
        self.env_calls = 0
        self.stepped = False
        self.env_frame: FrameType | None = None
        self.recording = False
        self.names: list[str] = []  # the current segment's calls (for a trace)
        self.step_names: list[str] = []  # the last recorded step segment's calls

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            if self.env_frame is not None:
                self.env_calls += 1
                return
            code = frame.f_code
            if code is self.poll_code:
                if self.recording:
                    self.segments.append((self.calls, self.env_calls, self.stepped))
                    if self.stepped:
                        self.step_names = self.names
                self.calls = self.env_calls = 0
                self.stepped = False
                self.names = []
            elif code in self.env_codes:
                self.env_frame = frame
                self.env_calls += 1
                return
            elif code in self.step_codes:
                self.stepped = True
            self.calls += 1
            self.names.append(_where(code))
        elif event == "return" and frame is self.env_frame:
            self.env_frame = None


class _ClientProfile:
    def __init__(self) -> None:
        self.calls = 0
        self.names: list[str] = []

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            self.calls += 1
            self.names.append(_where(frame.f_code))


def _where(code: CodeType) -> str:
    path = code.co_filename.replace(os.sep, "/")
    cut = path.rfind("/rlmesh/")
    short = path[cut + 1 :] if cut >= 0 else path.rsplit("/", 2)[-1]
    return f"{short}:{code.co_firstlineno} {code.co_name}"


@contextmanager
def _busy_poll_off() -> Iterator[None]:
    old = os.environ.get("RLMESH_BUSY_POLL_US")
    os.environ["RLMESH_BUSY_POLL_US"] = "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("RLMESH_BUSY_POLL_US", None)
        else:
            os.environ["RLMESH_BUSY_POLL_US"] = old


def _step_code(obj: Any) -> CodeType:
    fn = type(obj).step
    return fn.__code__  # type: ignore[no-any-return]


def count_steps(
    make_env: Callable[[], Any],
    actions: Callable[[int], Any],
    *,
    steps: int = 40,
    warmup: int = 10,
    vector: bool = False,
    seed: int = 0,
    options: Any = None,
    token: str | None = None,
) -> StepCounts:
    """Serve ``make_env()`` in a thread, step it remotely, and count calls per step.

    ``actions(i)`` is the action of step ``i``; a scalar episode that ends is reset
    (outside the measured step). Returns medians over the ``steps`` measured steps.
    ``options``: the server's ``ServeOptions`` (metrics on, a token ...); ``token``: the
    client's.
    """
    from rlmesh import EnvServer
    from rlmesh.numpy import RemoteEnv, RemoteVectorEnv
    from rlmesh.serve import _driver
    from rlmesh.transport import reactor

    env = make_env()
    env_codes = {_step_code(env)}
    prof = _ServerProfile(reactor.Poller.poll.__code__, {_driver.Driver.step.__code__}, env_codes)
    client_prof = _ClientProfile()
    with _busy_poll_off():
        server = EnvServer(env, "127.0.0.1:0", options=options)
        started = threading.Event()

        def serve() -> None:
            sys.setprofile(prof)
            started.set()
            try:
                server.serve()
            finally:
                sys.setprofile(None)

        thread = threading.Thread(target=serve, name="callcount-serve", daemon=True)
        thread.start()
        started.wait(30)
        client_steps: list[int] = []
        try:
            cls = RemoteVectorEnv if vector else RemoteEnv
            with cls(server.address, token=token) as remote:
                remote.reset(seed=seed)
                for i in range(warmup + steps):
                    measured = i >= warmup
                    if measured and not prof.recording:
                        prof.recording = True
                    action = actions(i)
                    client_prof.names = []
                    sys.setprofile(client_prof)
                    try:
                        before = client_prof.calls
                        out = remote.step(action)
                        after = client_prof.calls
                    finally:
                        sys.setprofile(None)
                    if measured:
                        client_steps.append(after - before)
                    if not vector and (out[2] or out[3]):
                        remote.reset()
                # the serve thread closes a step's segment when it next waits for a request:
                # one more (unmeasured) step makes sure the last measured one was closed
                remote.step(actions(warmup + steps))
                prof.recording = False
        finally:
            server.shutdown()
            thread.join(30)
    step_segments = [(calls, env_calls) for calls, env_calls, stepped in prof.segments if stepped]
    server_steps = [c for c, _ in step_segments]
    env_steps = [e for _, e in step_segments]
    if not server_steps:
        raise RuntimeError("no step was counted on the server")
    return StepCounts(
        client=int(statistics.median(client_steps)),
        server=int(statistics.median(server_steps)),
        env=int(statistics.median(env_steps)),
        client_steps=client_steps,
        client_trace=client_prof.names,
        server_trace=prof.step_names,
        server_steps=server_steps,
        env_steps=env_steps,
    )


def scalar_cartpole() -> Any:
    import gymnasium as gym

    return gym.make("CartPole-v1")


def vector_cartpole(lanes: int = 16) -> Any:
    import gymnasium as gym

    return gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(lanes)])


def scalar_actions(i: int) -> int:
    return i & 1


def vector_actions(lanes: int = 16) -> Callable[[int], Any]:
    import numpy as np

    table = [((np.arange(lanes) + k) % 2).astype(np.int64) for k in range(2)]
    return lambda i: table[i & 1]


def measure_scalar(steps: int = 40, options: Any = None, token: str | None = None) -> StepCounts:
    return count_steps(scalar_cartpole, scalar_actions, steps=steps, options=options, token=token)


def measure_vector(steps: int = 40, lanes: int = 16, options: Any = None) -> StepCounts:
    return count_steps(
        lambda: vector_cartpole(lanes),
        vector_actions(lanes),
        steps=steps,
        vector=True,
        options=options,
    )


class OutOfBounds:
    """Meta-World's shape without MuJoCo: a 39-D float64 observation that leaves its declared
    bounds on every step, a Box(4) float32 action, a 7-key float info dict."""

    def __init__(self) -> None:
        import gymnasium as gym
        import numpy as np

        low, high = np.full(39, -np.inf), np.full(39, np.inf)
        low[:4], high[:4] = -1.0, 1.0
        low[36:], high[36:] = 0.0, 0.0  # a hidden goal, reported all the same
        self.observation_space = gym.spaces.Box(low, high, (39,), np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.metadata: dict[str, Any] = {}
        self._obs = np.zeros(39)
        self._obs[36:] = 0.5

    def reset(self, seed: int | None = None, options: Any = None) -> Any:
        return self._obs.copy(), {}

    def step(self, action: Any) -> Any:
        obs = self._obs.copy()
        obs[0] = float(action[0])
        info = {k: 0.25 for k in ("success", "near", "grasp", "reward", "place", "dist", "raw")}
        return obs, 1.0, False, False, info

    def close(self) -> None:
        pass


def box_actions(i: int) -> Any:
    import numpy as np

    return np.full(4, 0.1 * ((i % 5) - 2), dtype=np.float32)


def measure_out_of_bounds(steps: int = 40) -> StepCounts:
    return count_steps(OutOfBounds, box_actions, steps=steps)
