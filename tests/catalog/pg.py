"""The PostgreSQL server the catalog tests use: ``NUMBATRAJ_TEST_POSTGRES_URL`` (``.ci/run``
starts one).  Without it the tests skip, except when ``CI`` is set: then they fail, so a CI
machine that lost its server cannot pass silently."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

URL = os.environ.get("NUMBATRAJ_TEST_POSTGRES_URL", "")
#: A shell command that restarts that server (``.ci/run`` sets it).
RESTART = os.environ.get("NUMBATRAJ_TEST_POSTGRES_RESTART", "")


def require_pg() -> None:
    """Skip (or under CI fail) when there is no server or no psycopg."""
    why = ""
    try:
        import psycopg  # type: ignore[import-not-found]  # noqa: F401
    except ModuleNotFoundError:
        why = "psycopg is not installed"
    if not URL:
        why = "NUMBATRAJ_TEST_POSTGRES_URL is not set"
    if why:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI needs the PostgreSQL tests to run: {why} (.ci/run starts one)")
        pytest.skip(f"no PostgreSQL: {why}")


@contextmanager
def pg_schema_url() -> Iterator[str]:
    """A URL whose connections use a fresh schema, dropped afterwards."""
    require_pg()
    import psycopg

    schema = f"nt_{secrets.token_hex(6)}"
    with psycopg.connect(URL, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in URL else "?"
    try:
        yield f"{URL}{sep}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(URL, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")
