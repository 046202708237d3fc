"""``rlmesh describe`` (:func:`main`) and ``python -m rlmesh._describe`` (:func:`module_main`) (AUTH-22, DELTA-54/55).

Both import nothing beyond the target's own module (no Gymnasium unless the
target imports it), print the canonical envelope, and send whatever the
described code prints to stderr at the file-descriptor level so stdout
carries exactly the envelope.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .._target import importable
from .._termtext import term_safe
from ..authoring._check import CheckReport, check_labels, check_target
from ..authoring._describe import describe_json

__all__ = ["main", "module_main"]

_LABEL = "dev.rlmesh.describe"


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Route fd 1 (and ``sys.stdout``) to stderr while the described code runs (DELTA-54)."""
    sys.stdout.flush()
    try:
        saved: int | None = os.dup(1)
        os.dup2(2, 1)
    except OSError:
        saved = None
    old = sys.stdout
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = old
        if saved is not None:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 1)
            os.close(saved)


def _envelope(target: str, *, kind: str | None, generated_at: str | None, build_env: bool) -> str:
    with _stdout_to_stderr():
        return describe_json(
            importable(target, cwd=True), kind=kind, generated_at=generated_at, build_env=build_env
        )


def _space_line(d: Any) -> str:
    if not isinstance(d, dict):
        return repr(d)
    kind, shape, dtype = d.get("kind"), d.get("shape"), d.get("dtype")
    det = d.get("details") or {}
    if kind == "dict":
        return (
            "Dict("
            + ", ".join(f"{k}: {_space_line(v)}" for k, v in det.get("spaces", {}).items())
            + ")"
        )
    if kind == "tuple":
        return "Tuple(" + ", ".join(_space_line(v) for v in det.get("spaces", [])) + ")"
    if kind == "discrete":
        return f"Discrete({det.get('n')}, start={det.get('start')})"
    return f"{kind}{tuple(shape or ())} {dtype}"


def _summary(doc: dict[str, Any]) -> str:
    """A human-readable rendering of an envelope (the default ``rlmesh describe`` output)."""
    lines = [f"{doc['kind']}  {doc['target']['qualname']}"]
    if doc["kind"] == "env":
        spec = doc.get("env_spec")
        if isinstance(spec, dict) and "error" not in spec:
            lines.append(f"  observation_space: {_space_line(spec['observation_space'])}")
            lines.append(f"  action_space:      {_space_line(spec['action_space'])}")
            if "num_envs" in spec:
                lines.append(f"  num_envs:          {spec['num_envs']}")
        elif isinstance(spec, dict):
            lines.append(f"  env_spec: error ({spec.get('error_type', 'Error')}): {spec['error']}")
        tags = doc.get("env_tags")
        lines.append(
            f"  env_tags: {'none' if tags is None else ('error: ' + tags['error'] if 'error' in tags else 'yes')}"
        )
    else:
        spec = doc.get("model_spec")
        lines.append(
            f"  model_spec: {'none' if spec is None else ('error: ' + spec['error'] if 'error' in spec else 'yes')}"
        )
        if doc.get("corners"):
            lines.append(f"  corners: {', '.join(doc['corners'])}")
    params = doc.get("params") or {}
    ps = params.get("param_spec")
    rows = []
    if isinstance(ps, dict) and "params" in ps:
        for p in ps["params"]:
            extra = f" choices={p['choices']}" if "choices" in p else ""
            default = f" default={p['default']!r}" if "default" in p else ""
            rows.append(
                f"    {p['name']}: {p['type']}{' (required)' if p['required'] else ''}{default}{extra}"
            )
        rows.append(f"    (extra={ps['extra']!r})")
    for p in params.get("signature_tier", []):
        rows.append(
            f"    {p['name']}: {p['type']}{' (required)' if p['required'] else ''} default={p['default']!r}"
        )
    if rows:
        lines.append("  params:")
        lines.extend(rows)
    variants = doc.get("variants")
    if variants:
        for key in ("variations_error", "catalog_error"):
            if key in variants:
                lines.append(f"  {key}: {variants[key]}")
        if "variations" in variants:
            lines.append(
                "  variations: " + ", ".join(f"{k}={v}" for k, v in variants["variations"].items())
            )
        for v in variants.get("catalog", []):
            name = v["metadata"].get("name")
            err = f"  ERROR: {v['error']}" if "error" in v else ""
            lines.append(f"  variant {v['id']}{f' ({name})' if name else ''}: {v['params']}{err}")
    return "\n".join(lines)


def _write(text: str, out: str | None) -> None:
    if out is None:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    else:
        Path(out).write_text(text + "\n", encoding="utf-8")


def _run(fn: Any, verbose: bool) -> int:
    try:
        fn()
    except Exception as exc:
        if verbose:
            traceback.print_exc()
        print(f"Error: {type(exc).__name__}: {term_safe(exc, newlines=True)}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``rlmesh describe TARGET [--json] [--label] [--kind env|model] [--generated-at TS]``.

    Prints a readable summary by default, the canonical envelope with
    ``--json``, or the OCI label line with ``--label``. Returns the exit code.
    """
    parser = argparse.ArgumentParser(
        prog="rlmesh describe",
        description="Describe an EnvFactory/Model (or a bare callable with --kind) without serving it.",
    )
    parser.add_argument("target", help="module:Attr, or path/to/file.py:Attr")
    parser.add_argument("--json", action="store_true", help="print the canonical describe.v1 JSON")
    parser.add_argument(
        "--label", action="store_true", help=f"print '{_LABEL}=<envelope>' for an image label"
    )
    parser.add_argument(
        "--kind", choices=("env", "model"), help="required for a bare make/predict callable"
    )
    parser.add_argument("--generated-at", metavar="TS", help="RFC-3339 timestamp to embed")
    parser.add_argument("--out", metavar="FILE", help="write the output to FILE instead of stdout")
    parser.add_argument("--no-build", action="store_true", help="do not build a representative env")
    parser.add_argument("--verbose", action="store_true", help="print tracebacks on error")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))

    def go() -> None:
        text = _envelope(
            args.target, kind=args.kind, generated_at=args.generated_at, build_env=not args.no_build
        )
        if args.label:
            _label_note()
            _write(f"{_LABEL}={text}", args.out)
        elif args.json:
            _write(text, args.out)
        else:
            import json

            _write(_summary(json.loads(text)), args.out)

    return _run(go, args.verbose)


def _label_note() -> None:
    if not sys.platform.startswith("linux"):
        print(
            "note: this label was produced on a non-linux host; its runtime section describes "
            "this machine, not the image",
            file=sys.stderr,
        )


def module_main(argv: Sequence[str] | None = None) -> int:
    """``python -m rlmesh._describe`` (AUTH-22, DELTA-54).

    Exactly one mode: ``TARGET`` (kind detected), ``--env T``, ``--model T``
    print the canonical JSON plus a newline (or write exactly those bytes to
    ``--out``; ``--label`` prints ``dev.rlmesh.describe=<envelope>``);
    ``--check IMAGE``, ``--check-labels FILE|-`` and ``--check-entrypoint
    MODULE:CLASS`` print a check report (``--json`` for a JSON one) and exit 1
    when anything failed.
    """
    parser = argparse.ArgumentParser(prog="python -m rlmesh._describe")
    parser.add_argument("target", nargs="?", help="module:Attr (kind detected)")
    parser.add_argument("--env", metavar="T", help="describe T as an env")
    parser.add_argument("--model", metavar="T", help="describe T as a model")
    parser.add_argument("--check", metavar="IMAGE", help="check an image's labels (docker inspect)")
    parser.add_argument(
        "--check-labels", metavar="FILE", help="check a JSON object of labels ('-' = stdin)"
    )
    parser.add_argument(
        "--check-entrypoint", metavar="MODULE:CLASS", help="describe and check a class"
    )
    parser.add_argument("--out", metavar="FILE")
    parser.add_argument("--generated-at", metavar="TS")
    parser.add_argument("--label", action="store_true")
    parser.add_argument("--json", action="store_true", help="print check reports as JSON")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    modes = [
        (m, v)
        for m, v in (
            ("auto", args.target), ("env", args.env), ("model", args.model), ("check", args.check),
            ("check-labels", args.check_labels), ("check-entrypoint", args.check_entrypoint),
        )
        if v
    ]  # fmt: skip
    if len(modes) != 1:
        parser.error(
            "give exactly one of TARGET, --env T, --model T, --check IMAGE, --check-labels FILE "
            "or --check-entrypoint MODULE:CLASS"
        )
    mode, target = modes[0]
    if mode.startswith("check"):
        return _run_check(mode, target, as_json=args.json, verbose=args.verbose)
    kind = None if mode == "auto" else mode

    def go() -> None:
        text = _envelope(target, kind=kind, generated_at=args.generated_at, build_env=True)
        if args.label:
            _label_note()
            text = f"{_LABEL}={text}"
        _write(text, args.out)

    return _run(go, args.verbose)


def _docker_labels(image: str) -> dict[str, Any]:
    import json
    import subprocess

    try:
        proc = subprocess.run(
            ["docker", "inspect", "--format", "{{json .Config.Labels}}", image],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuntimeError(f"docker inspect {image} failed: {exc}") from exc
    if proc.returncode != 0:
        raise RuntimeError(
            f"docker inspect {image} failed: {proc.stderr.strip() or proc.returncode}"
        )
    labels = json.loads(proc.stdout or "null")
    return dict(labels or {})


def _run_check(mode: str, target: str, *, as_json: bool, verbose: bool) -> int:
    import json

    report = CheckReport()
    try:
        if mode == "check":
            report = check_labels(_docker_labels(target))
        elif mode == "check-labels":
            text = sys.stdin.read() if target == "-" else Path(target).read_text(encoding="utf-8")
            labels = json.loads(text)
            if not isinstance(labels, dict):
                raise ValueError("the labels file must hold a JSON object of label -> value")
            report = check_labels(labels)
        else:
            with _stdout_to_stderr():
                report = check_target(importable(target, cwd=True))
    except Exception as exc:
        if verbose:
            traceback.print_exc()
        report.failed.append(str(exc))
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.render(target))
    return 0 if report.ok else 1
