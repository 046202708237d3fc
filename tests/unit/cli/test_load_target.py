"""``load_target``: the one loader of ``module:attr`` / ``path/to/file.py:attr`` targets (issue 23).

Every command line and ``serve_env("module:attr")`` resolve targets through it, so these
are the forms and the errors they all share.
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlmesh._cli import load_target
from rlmesh._spawn.recipe import resolve_target as _resolve
from rlmesh._target import importable, split_target

MODULE = textwrap.dedent(
    """
    class Outer:
        class Inner:
            value = 7

    def make():
        return "made"
    """
)


@pytest.fixture
def target_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory holding ``lt_mod.py`` and ``sub/lt_file.py``; neither is importable until asked."""
    (tmp_path / "lt_mod.py").write_text(MODULE)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "lt_file.py").write_text(MODULE)
    monkeypatch.setattr(sys, "path", list(sys.path))  # load_target may prepend; undo it
    yield tmp_path
    for name in ("lt_mod", "lt_file"):
        sys.modules.pop(name, None)


def test_module_colon_attr_returns_the_attribute_and_walks_dotted_paths(target_dir: Path) -> None:
    sys.path.insert(0, str(target_dir))
    assert load_target("lt_mod:make")() == "made"
    assert load_target("lt_mod:Outer.Inner.value") == 7
    assert load_target("os.path:join") is os.path.join


def test_path_to_file_py_colon_attr_imports_the_file_from_its_own_directory(
    target_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(target_dir)
    assert load_target("sub/lt_file.py:make")() == "made"
    assert str(target_dir / "sub") in sys.path
    assert load_target(f"{target_dir / 'sub' / 'lt_file.py'}:Outer.Inner.value") == 7


def test_cwd_true_makes_the_current_directory_importable(
    target_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(target_dir)
    sys.path[:] = [p for p in sys.path if p not in ("", ".", str(target_dir))]
    with pytest.raises(ModuleNotFoundError):
        load_target("lt_mod:make")
    assert load_target("lt_mod:make", cwd=True)() == "made"


def test_a_missing_file_is_FileNotFoundError_naming_the_path(
    target_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(target_dir)
    with pytest.raises(FileNotFoundError, match=r"^no such file: sub/nope\.py$"):
        load_target("sub/nope.py:make")


def test_a_missing_module_is_Pythons_ModuleNotFoundError_naming_the_module() -> None:
    with pytest.raises(ModuleNotFoundError) as info:
        load_target("no_such_module_lt_xyz:make")
    assert info.value.name == "no_such_module_lt_xyz"
    assert str(info.value) == "No module named 'no_such_module_lt_xyz'"


def test_a_missing_attribute_is_AttributeError_naming_module_attribute_and_target(
    target_dir: Path,
) -> None:
    sys.path.insert(0, str(target_dir))
    with pytest.raises(
        AttributeError, match=r"^cannot import 'mak' from 'lt_mod' \(target 'lt_mod:mak'\)$"
    ):
        load_target("lt_mod:mak")
    with pytest.raises(
        AttributeError,
        match=r"^cannot import 'Nope' from 'lt_mod\.Outer' \(target 'lt_mod:Outer\.Nope'\)$",
    ):
        load_target("lt_mod:Outer.Nope")


@pytest.mark.parametrize(
    "spec", ["no_colon", "mod:", ":attr", "mod:a..b", "mod:.a", "", "file.py:"]
)
def test_a_bad_form_is_ValueError_showing_both_forms(spec: str) -> None:
    with pytest.raises(
        ValueError, match=r"expected a target of the form 'module:attr' or 'path/to/file\.py:attr'"
    ) as info:
        load_target(spec)
    assert repr(spec) in str(info.value)


def test_split_target_splits_a_path_at_its_last_colon_and_a_module_at_its_first() -> None:
    assert split_target("C:/envs/my_env.py:make") == ("C:/envs/my_env.py", "make")
    assert split_target("pkg.mod:Env-v0") == ("pkg.mod", "Env-v0")  # a Gymnasium "module:EnvId"


def test_importable_leaves_a_module_target_alone_and_maps_a_file_to_its_stem(
    target_dir: Path,
) -> None:
    assert importable("pkg.mod:attr") == "pkg.mod:attr"
    assert importable(f"{target_dir / 'sub' / 'lt_file.py'}:make") == "lt_file:make"


def test_serve_resolves_a_miss_to_a_gymnasium_id_and_a_file_target_to_its_object(
    target_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rlmesh serve TARGET`` reads a target that is not there as a Gymnasium id (``module:EnvId``)."""
    monkeypatch.chdir(target_dir)
    assert _resolve("CartPole-v1") is None
    assert _resolve("no_such_module_lt_xyz:Env-v0") is None
    assert _resolve("os:Env-v0") is None
    assert _resolve("sub/lt_file.py:make")() == "made"


def test_describe_loads_through_it_and_keeps_ImportError_for_a_missing_attribute(
    target_dir: Path,
) -> None:
    from rlmesh.authoring._gather import load_entrypoint

    sys.path.insert(0, str(target_dir))
    assert load_entrypoint("lt_mod:Outer.Inner.value") == 7
    with pytest.raises(
        ImportError, match=r"^cannot import 'mak' from 'lt_mod' \(target 'lt_mod:mak'\)$"
    ):
        load_entrypoint("lt_mod:mak")
    with pytest.raises(ValueError, match="expected a target of the form"):
        load_entrypoint("lt_mod")
