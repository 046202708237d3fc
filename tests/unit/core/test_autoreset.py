"""The autoreset modes are one ``str`` enum whose members are their wire names (issue 23 item 5)."""

from __future__ import annotations

import json

from conftest import require
from rlmesh._autoreset import Autoreset
from rlmesh._contract import AUTORESET_MODES
from rlmesh._envkit.classify import autoreset_name


def test_members_are_the_wire_names() -> None:
    assert (
        [m.value for m in Autoreset]
        == ["NextStep", "SameStep", "Disabled"]
        == list(AUTORESET_MODES)
    )
    for mode in Autoreset:
        assert mode == mode.value and hash(mode) == hash(mode.value)
        assert str(mode) == f"{mode}" == mode.value
        assert json.dumps(mode) == json.dumps(mode.value)
        assert {mode.value: 1}[mode] == 1  # dict lookups keyed by the wire string still find it
        assert autoreset_name(mode) == mode.value


def test_gymnasium_agrees() -> None:
    vector = require(
        "gymnasium.vector",
        "the Gymnasium facade maps the modes onto gymnasium.vector.AutoresetMode",
    )
    assert {m.value for m in vector.AutoresetMode} == {m.value for m in Autoreset}
    for mode in Autoreset:
        assert vector.AutoresetMode(mode.value).value == mode


def test_every_spelling_is_read_through_one_table() -> None:
    from rlmesh._autoreset import SPELLINGS

    for spelling, mode in SPELLINGS.items():
        assert Autoreset.parse(spelling) is mode
        assert Autoreset.parse(spelling.upper().replace("-", "_")) is mode
    for mode in Autoreset:
        assert Autoreset.parse(mode) is mode and Autoreset.parse(mode.value) is mode
    import pytest

    with pytest.raises(ValueError, match=r"autoreset_mode must be next-step, .* got 'sometimes'"):
        Autoreset.parse("sometimes", what="autoreset_mode")
    with pytest.raises(ValueError, match="got 3"):
        Autoreset.parse(3)
