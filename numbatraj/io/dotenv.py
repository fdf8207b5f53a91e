"""``.env`` files: ``KEY=VALUE`` settings beside a project, read with python-dotenv.

The catalog client (``NUMBATRAJ_CATALOG_URL`` / ``_API_KEY``), recording sync
(``NUMBATRAJ_PROJECTS``) and asset packs read their settings here; the process environment
wins over the file wherever they are used.
"""

from __future__ import annotations

import os

from dotenv import dotenv_values

__all__ = ["read_dotenv"]


def read_dotenv(path: str | os.PathLike[str]) -> dict[str, str]:
    """The ``KEY=VALUE`` settings of the dotenv file ``path``; ``{}`` when it is absent.

    python-dotenv's rules: ``#`` comments (also after an unquoted value, so
    ``KEY=v # note`` is ``v``), single or double quotes, ``export KEY=...``.  Values are
    taken literally (``${VAR}`` is not expanded), and a line without ``=`` sets nothing.
    """
    if not os.path.isfile(path):
        return {}
    values = dotenv_values(path, interpolate=False, encoding="utf-8")
    return {k: v for k, v in values.items() if v is not None}
