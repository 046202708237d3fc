"""A fake ``docker`` CLI for unit tests: logs its argv, answers from a scenario file.

``$FAKE_DOCKER_DIR/scenario.json`` maps a command key (``"run"``, ``"image inspect"``,
``"port"`` ...) to a list of replies ``{"rc": 0, "stdout": "", "stderr": "", "sleep": 0}``
consumed in order (the last one repeats). Unknown commands succeed silently. Every
call is appended to ``$FAKE_DOCKER_DIR/calls.jsonl``.
"""

import json
import os
import sys
import time
from pathlib import Path

TWO_WORD = ("image", "container", "network", "volume")


def main() -> int:
    root = Path(os.environ["FAKE_DOCKER_DIR"])
    args = sys.argv[1:]
    key = " ".join(args[:2]) if args and args[0] in TWO_WORD else (args[0] if args else "")
    with open(root / "calls.jsonl", "a") as f:
        f.write(json.dumps(args) + "\n")
    scenario = (
        json.loads((root / "scenario.json").read_text())
        if (root / "scenario.json").exists()
        else {}
    )
    replies = scenario.get(key)
    if not replies:
        return 0
    counter = root / f"count-{key.replace(' ', '_')}"
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    reply = replies[min(n, len(replies) - 1)]
    if reply.get("sleep"):
        time.sleep(reply["sleep"])
    sys.stdout.write(reply.get("stdout", ""))
    sys.stderr.write(reply.get("stderr", ""))
    return int(reply.get("rc", 0))


if __name__ == "__main__":
    sys.exit(main())
