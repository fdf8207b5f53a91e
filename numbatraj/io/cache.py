"""numbatraj's own cache directory: one rule for every place that keeps files between runs.

``$NUMBATRAJ_CACHE`` when set; otherwise the platform's user cache directory for
``numbatraj`` through ``platformdirs`` (``$XDG_CACHE_HOME/numbatraj``, default
``~/.cache/numbatraj`` on Linux; ``~/Library/Caches/numbatraj`` on macOS).  Without
platformdirs installed (the core install) the XDG rule is applied directly.

Downloads from the Hugging Face Hub do not go here: they go to the shared Hugging Face cache
(``HF_HUB_CACHE`` / ``HF_HOME``), so a dataset LeRobot or any other tool already fetched is
not fetched again.  numbatraj keeps here what only it makes: imported stores
(``stores/``), extracted asset packs (``assets/``).
"""

from __future__ import annotations

import os

__all__ = ["cache_dir"]


def cache_dir() -> str:
    """The cache root (not created): ``$NUMBATRAJ_CACHE``, else the user cache dir."""
    override = os.environ.get("NUMBATRAJ_CACHE")
    if override:
        return os.path.expanduser(override)
    try:
        from platformdirs import user_cache_dir
    except ImportError:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(base, "numbatraj")
    return str(user_cache_dir("numbatraj", appauthor=False))
