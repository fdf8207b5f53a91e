"""Bit flips in a replay checkpoint and a ``.demo`` file: a load either raises a numbatraj
error or returns exactly what was saved; never a silent wrong value (the issue counted 13
of 69 checkpoint mutations loading wrong before the digests)."""

from __future__ import annotations

import os

import pytest

from tests.integrity.ckptsweep import KINDS, REGIONS, summary, sweep

#: A quarter of the store sweep's count per file kind: 80 in the suite, 800 under
#: ``make soak`` (NUMBATRAJ_FLIPS=3200).
N_FLIPS = max(1, int(os.environ.get("NUMBATRAJ_FLIPS", "320")) // 4)


@pytest.mark.parametrize("kind", KINDS)
def test_no_silent_wrong_load_after_a_flipped_byte(tmp_path, kind):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.dirname(__file__))), env.get("PYTHONPATH", "")]
    )
    results = sweep(kind, N_FLIPS, 0, str(tmp_path / "flips.jsonl"), env=env)
    counts = summary(results)
    print(f"{kind} bit flips:", counts)  # the figures quoted in docs/store.md
    assert counts["tried"] == N_FLIPS
    if N_FLIPS >= 60:
        assert {r["region"] for r in results} == set(REGIONS[kind])
        assert counts["caught"] >= N_FLIPS // 2  # the sweep does reach the data it guards
    bad = [r for r in results if r["result"].split(":")[0] in ("silent", "wrong_error", "crash")]
    assert not bad, bad[:10]


@pytest.mark.parametrize("checksums", [True, False])
def test_edited_checkpoint_json_is_a_numbatraj_error(tmp_path, checksums):
    """Every key of the config and state JSON deleted, or set to a string or a list (the
    root digests removed, as an edit would): the load raises a numbatraj error naming the
    file, or loads (keys with a default); never a KeyError/TypeError/ValueError/IndexError."""
    import json

    import h5py

    from numbatraj.errors import IntegrityError, NumbatrajError
    from numbatraj.replay import StoreReplay
    from tests.integrity.ckptsweep import _replay

    path = tmp_path / "r.ckpt"
    _replay().save(path, checksums=checksums)
    good = path.read_bytes()
    with h5py.File(path, "r") as f:
        docs = {w: json.loads(f.attrs[w]) for w in ("config", "state")}
    edits = [(w, k, how) for w, doc in docs.items() for k in doc
             for how in ("del", "str", "list")] + [("config", None, "list"),
                                                   ("state", None, "str")]
    leaked = []
    for where, key, how in edits:
        path.write_bytes(good)
        with h5py.File(path, "a") as f:
            doc = json.loads(f.attrs[where])
            if key is None:
                doc = [1] if how == "list" else "x"
            elif how == "del":
                del doc[key]
            else:
                doc[key] = "zz" if how == "str" else [1, "x", None]
            f.attrs[where] = json.dumps(doc)
            if "digests" in f.attrs:
                del f.attrs["digests"]
        try:
            StoreReplay.load(path)
        except IntegrityError as exc:
            assert "r.ckpt" in str(exc), str(exc)
        except NumbatrajError as exc:  # the constructor's own check, naming the setting
            assert key is None or key in str(exc) or "r.ckpt" in str(exc), str(exc)
        except Exception as exc:  # noqa: BLE001 - what is being counted
            leaked.append((where, key, how, type(exc).__name__, str(exc)))
    assert not leaked, leaked
