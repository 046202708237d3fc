"""Every option of rlmesh serve / serve-model / health / eval says its default (issue 12 surprises)."""

from __future__ import annotations

import argparse

import pytest

from rlmesh import cli


@pytest.mark.parametrize("command", ["serve", "serve-model", "health", "eval"])
def test_every_option_has_help_text_with_its_default(
    command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[argparse.ArgumentParser] = []

    def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        seen.append(self)
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    try:
        cli.main([command, "x", "y"])
    except SystemExit:
        pass
    assert seen, f"rlmesh {command} built no parser"
    parser = seen[0]
    options = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    assert options
    missing = [a.option_strings[0] for a in options if not a.help or "default" not in a.help]
    assert not missing, f"rlmesh {command}: options without a stated default: {missing}"
    positionals = [a for a in parser._actions if not a.option_strings]
    assert all(a.help for a in positionals)


def test_serve_help_documents_autoreset_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    out = capsys.readouterr().out
    assert "--autoreset" in out and "next-step" in out and "disabled" in out
