"""The server's interpreter work per step stays within a budget (issue 24).

Counted, not timed, so it cannot drift with the machine: Python function calls the
serve thread makes per ``Step`` beyond the env's own (``tests/callcount.py`` says how:
``sys.setprofile`` in the serve thread, busy polling off, numpy flavour, the median over
the measured steps). ``python benchmarks/count_calls.py --trace`` lists them.

Reached (CPython 3.11, numpy 2.4): scalar CartPole 16 server calls per step (was 48
before issue 24), 16-lane SyncVectorEnv CartPole 16 (was 59). The budgets sit just above.
The client's figure is in docs/performance.md (its budget follows the client work).
"""

from __future__ import annotations

import callcount

SERVER_BUDGET_SCALAR = 18
SERVER_BUDGET_VECTOR = 18


def test_scalar_step_server_calls_within_budget() -> None:
    counts = callcount.measure_scalar(steps=30)
    assert counts.env > 0  # the env's own calls were seen, and kept apart
    assert len(counts.server_steps) >= 30
    assert counts.server <= SERVER_BUDGET_SCALAR, (
        f"a scalar CartPole step costs the server {counts.server} Python calls, over the budget of "
        f"{SERVER_BUDGET_SCALAR}; see `python benchmarks/count_calls.py --trace`:\n" + "\n".join(counts.server_trace)
    )


def test_vector_step_server_calls_within_budget() -> None:
    counts = callcount.measure_vector(steps=30)
    assert counts.env >= 16  # a 16-lane SyncVectorEnv's own step, kept apart
    assert len(counts.server_steps) >= 30
    assert counts.server <= SERVER_BUDGET_VECTOR, (
        f"a 16-lane vector CartPole step costs the server {counts.server} Python calls, over the budget of "
        f"{SERVER_BUDGET_VECTOR}; see `python benchmarks/count_calls.py --trace`:\n" + "\n".join(counts.server_trace)
    )


def test_counts_are_deterministic() -> None:
    first = callcount.measure_scalar(steps=20)
    second = callcount.measure_scalar(steps=20)
    assert (first.client, first.server, first.env) == (second.client, second.server, second.env)
