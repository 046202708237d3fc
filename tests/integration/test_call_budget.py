"""The interpreter work per step stays within a budget, each end and both (issues 24, 40).

Counted, not timed, so it cannot drift with the machine: Python function calls per
``Step`` beyond the env's own (``tests/callcount.py`` says how: ``sys.setprofile`` in the
serve thread and on the client's calling thread, busy polling off, numpy flavour, the
median over the measured steps). ``python benchmarks/count_calls.py --trace`` lists them.

Reached (CPython 3.11, numpy 2.4): scalar CartPole 10 server calls per step (48 before
issue 24, 16 before issue 40), 16-lane SyncVectorEnv CartPole 11 to 12 (59, then 16; up
to 37 where lanes ended, before issue 40 kept their books in one pass); the client
7 and 8 (29 and 31 with split stepping, then 9). A Meta-World-shaped observation that
leaves its declared bounds every step, with a 7-key info dict, costs the server 13 (47
before issue 40: every step re-ran the range check, worded its deviation and copied the
info). The budgets sit just above (DESIGN's: 30 scalar, 40 vector).
"""

from __future__ import annotations

import callcount

SERVER_BUDGET_SCALAR = 11
SERVER_BUDGET_VECTOR = 12
SERVER_BUDGET_OUT_OF_BOUNDS = 14
CLIENT_BUDGET_SCALAR = 8
CLIENT_BUDGET_VECTOR = 9
TOTAL_BUDGET_SCALAR = 19  # client + server, beyond the env's own calls
TOTAL_BUDGET_VECTOR = 21


def test_scalar_step_server_calls_within_budget() -> None:
    counts = callcount.measure_scalar(steps=30)
    assert counts.env > 0  # the env's own calls were seen, and kept apart
    assert len(counts.server_steps) >= 30
    assert counts.server <= SERVER_BUDGET_SCALAR, (
        f"a scalar CartPole step costs the server {counts.server} Python calls, over the budget of "
        f"{SERVER_BUDGET_SCALAR}; see `python benchmarks/count_calls.py --trace`:\n"
        + "\n".join(counts.server_trace)
    )


def test_vector_step_server_calls_within_budget() -> None:
    counts = callcount.measure_vector(steps=30)
    assert counts.env >= 16  # a 16-lane SyncVectorEnv's own step, kept apart
    assert len(counts.server_steps) >= 30
    assert counts.server <= SERVER_BUDGET_VECTOR, (
        f"a 16-lane vector CartPole step costs the server {counts.server} Python calls, over the budget of "
        f"{SERVER_BUDGET_VECTOR}; see `python benchmarks/count_calls.py --trace`:\n"
        + "\n".join(counts.server_trace)
    )


def test_a_vector_step_where_lanes_end_costs_the_server_one_call_more_at_most() -> None:
    # CartPole lanes end every few dozen steps, several at once: the episode books of
    # every lane that ends or restarts are kept in one pass, with no Python call per lane
    # (issue 40: 37 calls on a step where lanes ended, against 12 on the others)
    counts = callcount.measure_vector(steps=60)
    assert max(counts.server_steps) <= SERVER_BUDGET_VECTOR, (
        f"a 16-lane vector CartPole step costs the server up to {max(counts.server_steps)} "
        f"Python calls (median {counts.server}), over {SERVER_BUDGET_VECTOR}; "
        "see `python benchmarks/count_calls.py --trace`:\n" + "\n".join(counts.server_trace)
    )


def test_scalar_step_client_and_total_calls_within_budget() -> None:
    counts = callcount.measure_scalar(steps=30)
    assert len(counts.client_steps) == 30
    assert counts.client <= CLIENT_BUDGET_SCALAR, (
        f"a scalar CartPole step costs the client {counts.client} Python calls, over the budget of "
        f"{CLIENT_BUDGET_SCALAR}; see `python benchmarks/count_calls.py --trace`:\n"
        + "\n".join(counts.client_trace)
    )
    assert counts.total <= TOTAL_BUDGET_SCALAR, (
        f"a scalar CartPole step costs {counts.total} Python calls (client {counts.client} + server "
        f"{counts.server}), over the budget of {TOTAL_BUDGET_SCALAR}"
    )


def test_vector_step_client_and_total_calls_within_budget() -> None:
    counts = callcount.measure_vector(steps=30)
    assert len(counts.client_steps) == 30
    assert counts.client <= CLIENT_BUDGET_VECTOR, (
        f"a 16-lane vector CartPole step costs the client {counts.client} Python calls, over the budget of "
        f"{CLIENT_BUDGET_VECTOR}; see `python benchmarks/count_calls.py --trace`:\n"
        + "\n".join(counts.client_trace)
    )
    assert counts.total <= TOTAL_BUDGET_VECTOR, (
        f"a 16-lane vector CartPole step costs {counts.total} Python calls (client {counts.client} + server "
        f"{counts.server}), over the budget of {TOTAL_BUDGET_VECTOR}"
    )


def test_out_of_bounds_observation_costs_no_more_than_a_conforming_one() -> None:
    # under the default "warn" policy an observation out of its declared bounds is warned
    # about once per session (INFO-4): the steps after that must not pay for it again
    counts = callcount.measure_out_of_bounds(steps=30)
    assert len(counts.server_steps) >= 30
    assert counts.server <= SERVER_BUDGET_OUT_OF_BOUNDS, (
        f"a step whose observation leaves its bounds costs the server {counts.server} Python "
        f"calls, over the budget of {SERVER_BUDGET_OUT_OF_BOUNDS}:\n"
        + "\n".join(counts.server_trace)
    )


def test_counts_are_deterministic() -> None:
    first = callcount.measure_scalar(steps=20)
    second = callcount.measure_scalar(steps=20)
    assert (first.client, first.server, first.env) == (second.client, second.server, second.env)


def test_a_token_and_metrics_add_no_python_call_per_step() -> None:
    """Issue 36: authentication is checked once, at the handshake; metrics on are counters
    in the loop's own frame (no call per step): the same budgets hold with both on."""
    from conftest import require
    from rlmesh.serve import ServeOptions

    require("prometheus_client", "the metrics extra")
    plain = callcount.measure_scalar(steps=30)
    options = ServeOptions(token="t", metrics_address="127.0.0.1:0")
    counted = callcount.measure_scalar(steps=30, options=options, token="t")
    assert counted.server == plain.server, (
        f"metrics on and a token cost the server {counted.server - plain.server} Python calls "
        "per scalar step:\n" + "\n".join(counted.server_trace)
    )
    assert counted.client == plain.client
    vector = callcount.measure_vector(steps=30, options=ServeOptions(metrics_address="127.0.0.1:0"))
    assert vector.server <= SERVER_BUDGET_VECTOR
