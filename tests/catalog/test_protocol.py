"""The protocol module: each name rule quotes the user's input exactly, the routes, and an
import that loads no server library."""

from __future__ import annotations

import subprocess
import sys

import pytest

from numbatraj.catalog import protocol as P
from numbatraj.errors import CatalogRequestError

NAME_RULE = "use 1-128 of a-z 0-9 . _ - starting with a letter or digit, without '..'"
VERSION_RULE = "use 1-64 of A-Z a-z 0-9 . _ + - starting with a letter or digit, without '..'"


@pytest.mark.parametrize(("check", "what", "rule", "bad"), [
    (P.check_name, "dataset name", NAME_RULE, "Walker"),
    (P.check_version, "version", VERSION_RULE, "v 1"),
    (P.check_project, "project", NAME_RULE, "dataset name..x"),
    (P.check_dataset, "dataset", VERSION_RULE, "version-..x"),
    (P.check_dataset, "dataset", VERSION_RULE, None),
])
def test_each_rule_quotes_the_input_exactly(check, what, rule, bad) -> None:
    with pytest.raises(CatalogRequestError) as ei:
        check(bad)
    assert str(ei.value) == f"{what} {bad!r} is not allowed: {rule}"


def test_rules_accept_and_return_their_input() -> None:
    assert P.check_name("walker-random.v2_x") == "walker-random.v2_x"
    assert P.check_version("V1.0+cu13") == "V1.0+cu13"
    assert P.check_project("lab") == "lab"
    assert P.check_dataset("Run_7") == "Run_7"
    assert P.check_rel_path("videos/cam/chunk-000/file-000.mp4").endswith(".mp4")
    for bad in ("../x", "/etc/passwd", "a/../b", ".hidden", "a//b", "", 7, "x" * 513):
        with pytest.raises(CatalogRequestError, match=rf"file path {bad!r} is not allowed"):
            P.check_rel_path(bad)


def test_routes() -> None:
    assert P.dataset_route("a b") == "/v1/datasets/a%20b"
    assert P.dataset_complete_route("ds", "v1+x") == "/v1/datasets/ds/v1%2Bx/complete"
    assert P.recording_route("lab", "run") == "/v1/recordings/lab/run"
    assert P.offer_route("lab", "run") == "/v1/recordings/lab/run/offer"
    assert P.commit_route("lab", "run") == "/v1/recordings/lab/run/commit"
    assert P.blob_complete_route("lab", "run", "ab") == "/v1/recordings/lab/run/blobs/ab/complete"
    assert P.project_route("lab") == "/v1/recordings/lab"


def test_protocol_and_client_load_no_server_library() -> None:
    code = (
        "import sys, numbatraj.catalog.protocol\n"
        "heavy = ('requests', 'boto3', 'botocore', 'sqlite3', 'http.server', 'psycopg')\n"
        "print([m for m in heavy if m in sys.modules])\n"
        "import numbatraj.remote\n"
        "print(sorted(m for m in sys.modules if m.startswith('numbatraj.catalog')),\n"
        "      [m for m in heavy[1:] if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == [
        "[]", "['numbatraj.catalog', 'numbatraj.catalog.protocol'] []"]
