"""What an env object *is* and how its results read, the same for every driver (issue 10).

Both the server's driver (``serve/_driver.py``, over the wrappers in
``serve/_driven.py``) and in-process sessions (``eval/``) classify and read envs
through this package, so the same env object behaves the same whether it is driven
locally or served:

- :mod:`.classify`: what an env is -- vector detection (SRV-3), the lane count, the
  declared autoreset mode (AR-1: unknown modes are refused with ``ValueError`` on
  both paths) and its spellings, :class:`~.classify.Lanes`, the env id (SRV-11), the
  published metadata, whether ``reset`` takes options or resets chosen lanes (AR-10);
- :mod:`.results`: how results read -- reset/step normalisation (ENVCALL-2/3: ``info``
  may be any ``Mapping``, legacy 4-tuples), one lane of a batched info dict, one
  lane's final info (AR-7), the NEXT_STEP autoreset contract message (AR-6);
- :mod:`.checks`: what is checked -- the validation policy knob (CNF-4), the checks
  it governs (SRV-60, CNF-2/3, INFO-4, :class:`~.checks.Checks`), the words for a
  result that cannot be read (ERR-2) and an in-process scalar step read and checked
  as served.

This package sits below ``serve/`` and ``eval/`` and imports neither.
"""
