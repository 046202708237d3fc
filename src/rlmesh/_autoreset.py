"""The autoreset modes of a vector env, one enum (issue 23), and the one table of their spellings.

:class:`Autoreset` is a ``str`` enum whose values are the wire names (the contract's
``autoreset_mode`` and Gymnasium's ``AutoresetMode`` values), so a member compares,
hashes, prints and encodes as its wire string: ``Autoreset.NEXT_STEP == "NextStep"``.
Code compares against the members instead of spelling the strings.

:meth:`Autoreset.parse` reads every spelling a user may give (the wire name, the
command line's ``next-step``, ``SAME_STEP``, a ``gymnasium.vector.AutoresetMode``)
through one table, :data:`SPELLINGS`; nothing else parses them.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

__all__ = ["SPELLINGS", "Autoreset"]


class Autoreset(str, Enum):
    """How a vector env resets a lane whose episode ended (Gymnasium's ``AutoresetMode``).

    Example:
        >>> Autoreset.parse("same-step") is Autoreset.SAME_STEP
        True
        >>> Autoreset.parse("NextStep").value
        'NextStep'
    """

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

    @classmethod
    def parse(cls, mode: Any, *, what: str = "autoreset mode") -> Autoreset:
        """The member a spelling names: a member, a wire name, a CLI name or a Gymnasium mode.

        Spellings are compared without case, with ``_`` read as ``-`` (:data:`SPELLINGS`).

        Raises:
            ValueError: an unknown spelling (``what`` names the argument in the message).
        """
        value = getattr(mode, "value", mode)  # an enum member (ours or Gymnasium's)
        if isinstance(value, str):
            found = SPELLINGS.get(value.strip().lower().replace("_", "-"))
            if found is not None:
                return found
        raise ValueError(
            f"{what} must be next-step, same-step or disabled (the wire names NextStep, SameStep, "
            f"Disabled, or a gymnasium AutoresetMode), got {mode!r}"
        )


#: Every accepted spelling, lower case with ``-`` for ``_``, and the mode it names.
SPELLINGS: dict[str, Autoreset] = {
    "next-step": Autoreset.NEXT_STEP,
    "nextstep": Autoreset.NEXT_STEP,
    "same-step": Autoreset.SAME_STEP,
    "samestep": Autoreset.SAME_STEP,
    "disabled": Autoreset.DISABLED,
}
