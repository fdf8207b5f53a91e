"""Print the README's Python examples (every ```python block) as one script, for
``make lint`` to type-check with ``mypy --strict``."""

from __future__ import annotations

import re
import sys
from pathlib import Path


def main() -> int:
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    if not blocks:
        print("README.md has no ```python block", file=sys.stderr)
        return 1
    sys.stdout.write("\n\n".join(blocks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
