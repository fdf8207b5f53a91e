"""Write pip constraints pinning every lower bound in setup.cfg: ``name>=X`` becomes
``name==X``, for the core and the extras named on the command line.

    python tools/min_constraints.py lerobot,hub > build/min-constraints.txt

``make test-min`` installs the package under these constraints, so the bounds setup.cfg
declares are the versions the marked subset of the suite runs against.
"""

from __future__ import annotations

import configparser
import re
import sys
from pathlib import Path

_REQ = re.compile(r"^\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*([^;]*?)\s*(;.*)?$")


def pins(requirements: list[str]) -> dict[str, str]:
    """``{name: "name==X[; marker]"}`` for each requirement with a ``>=X`` bound."""
    out: dict[str, str] = {}
    for line in requirements:
        m = _REQ.match(line)
        if not m or not line.strip():
            continue
        name, spec, marker = m.group(1), m.group(3), m.group(4) or ""
        low = re.search(r">=\s*([0-9][^,\s]*)", spec)
        if low:
            key = name.lower().replace("_", "-")
            out[key] = f"{name}=={low.group(1)}{marker}"
    return out


def main(argv: list[str]) -> int:
    cfg = configparser.ConfigParser()
    cfg.read(Path(__file__).resolve().parents[1] / "setup.cfg")
    reqs = cfg["options"]["install_requires"].strip().splitlines()
    extras = cfg["options.extras_require"]
    for name in (argv[0].split(",") if argv and argv[0] else []):
        reqs += extras[name].strip().splitlines()
    for line in sorted(pins(reqs).values(), key=str.lower):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
