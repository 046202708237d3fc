"""The autoreset modes of a vector env, one enum (issue 23).

:class:`Autoreset` is a ``str`` enum whose values are the wire names (the contract's
``autoreset_mode`` and Gymnasium's ``AutoresetMode`` values), so a member compares,
hashes, prints and encodes as its wire string: ``Autoreset.NEXT_STEP == "NextStep"``.
Code compares against the members instead of spelling the strings.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Autoreset"]


class Autoreset(str, Enum):
    """How a vector env resets a lane whose episode ended (Gymnasium's ``AutoresetMode``)."""

    #: The step after a lane ends resets it (reward 0, not done); Gymnasium's default.
    NEXT_STEP = "NextStep"
    #: A lane that ends is reset in the same step (terminal obs/info in ``final_obs``/``final_info``).
    SAME_STEP = "SameStep"
    #: Lanes are never reset automatically: the caller resets them (a partial reset).
    DISABLED = "Disabled"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return self.value.__format__(spec)
