"""safe_extract: good archives land whole, hostile ones are refused and leave dest untouched."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard

from numbatraj.errors import IntegrityError, UnsafeArchiveError
from numbatraj.io.archive import (
    COMPLETE_MARKER,
    archive_kind,
    check_member_name,
    is_complete,
    read_marker,
    safe_extract,
)

Member = tuple[str, Callable[[tarfile.TarInfo], None] | None, bytes]


def make_tar(members: list[Member]) -> bytes:
    """An uncompressed tar with each member's TarInfo adjusted by its callable."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, adjust, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = 0o644
            if adjust is not None:
                adjust(ti)
            if not ti.isreg():
                ti.size = 0
            tar.addfile(ti, io.BytesIO(data) if ti.isreg() else None)
    return buf.getvalue()


def write_archive(path: Path, members: list[Member]) -> Path:
    raw = make_tar(members)
    if path.name.endswith((".zst", ".tzst")):
        path.write_bytes(zstandard.ZstdCompressor(level=3).compress(raw))
    else:
        import gzip

        path.write_bytes(gzip.compress(raw))
    return path


def _dir(ti: tarfile.TarInfo) -> None:
    ti.type = tarfile.DIRTYPE
    ti.mode = 0o755


GOOD: list[Member] = [
    ("meshes", _dir, b""),
    ("meshes/table.obj", None, b"v 0 0 0\n" * 100),
    ("./textures/wood.png", None, bytes(range(256)) * 40),
    ("bin/tool", lambda ti: setattr(ti, "mode", 0o4755), b"#!/bin/sh\n"),
]


@pytest.mark.parametrize("suffix", [".tar.zst", ".tar.gz", ".tgz", ".tzst"])
def test_good_archive_extracts_whole(tmp_path: Path, suffix: str) -> None:
    arc = write_archive(tmp_path / f"pack{suffix}", GOOD)
    res = safe_extract(arc, tmp_path / "out", marker={"sha256": "ab" * 32})
    out = tmp_path / "out"
    assert res.files == ("meshes/table.obj", "textures/wood.png", "bin/tool")
    assert res.bytes == 800 + 10240 + 10
    assert (out / "meshes/table.obj").read_bytes() == b"v 0 0 0\n" * 100
    assert (out / "textures/wood.png").read_bytes() == bytes(range(256)) * 40
    mode = (out / "bin/tool").stat().st_mode
    assert mode & 0o7777 == 0o755  # setuid dropped, exec kept
    marker = read_marker(out)
    assert marker is not None and marker["sha256"] == "ab" * 32
    assert marker["files"] == list(res.files)
    assert is_complete(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", f"pack{suffix}"]


def test_replaces_an_existing_tree_only_when_complete(tmp_path: Path) -> None:
    out = tmp_path / "out"
    safe_extract(write_archive(tmp_path / "a.tar.gz", [("old.txt", None, b"old")]), out)
    bad = write_archive(tmp_path / "b.tar.gz", [("new.txt", None, b"n"), ("/etc/x", None, b"")])
    with pytest.raises(UnsafeArchiveError):
        safe_extract(bad, out)
    assert sorted(os.listdir(out)) == [COMPLETE_MARKER, "old.txt"]
    safe_extract(write_archive(tmp_path / "c.tar.gz", [("new.txt", None, b"n")]), out)
    assert sorted(os.listdir(out)) == [COMPLETE_MARKER, "new.txt"]
    assert sorted(os.listdir(tmp_path)) == ["a.tar.gz", "b.tar.gz", "c.tar.gz", "out"]


def _sym(ti: tarfile.TarInfo) -> None:
    ti.type, ti.linkname = tarfile.SYMTYPE, "/etc/passwd"


def _hard(ti: tarfile.TarInfo) -> None:
    ti.type, ti.linkname = tarfile.LNKTYPE, "meshes/table.obj"


def _chr(ti: tarfile.TarInfo) -> None:
    ti.type, ti.devmajor, ti.devminor = tarfile.CHRTYPE, 1, 3


def _blk(ti: tarfile.TarInfo) -> None:
    ti.type = tarfile.BLKTYPE


def _fifo(ti: tarfile.TarInfo) -> None:
    ti.type = tarfile.FIFOTYPE


HOSTILE = {
    "absolute": (("/tmp/evil.txt", None, b"x"), "absolute path"),
    "dotdot": (("meshes/../../evil.txt", None, b"x"), "climbs out"),
    "symlink": (("meshes/link", _sym, b""), "symbolic link"),
    "hardlink": (("meshes/hard", _hard, b""), "hard link"),
    "chardev": (("dev/null", _chr, b""), "a device"),
    "blockdev": (("dev/sda", _blk, b""), "a device"),
    "fifo": (("pipe", _fifo, b""), "FIFO"),
    "duplicate": (("meshes/table.obj", None, b"second copy"), "appears twice"),
    "marker": ((COMPLETE_MARKER, None, b"{}"), "forge the completion marker"),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
@pytest.mark.parametrize("suffix", [".tar.zst", ".tar.gz"])
def test_hostile_member_is_refused_and_nothing_lands(
    tmp_path: Path, kind: str, suffix: str
) -> None:
    member, why = HOSTILE[kind]
    arc = write_archive(tmp_path / f"evil{suffix}", [*GOOD, member, ("late.txt", None, b"l")])
    dest = tmp_path / "site" / "assets"
    with pytest.raises(UnsafeArchiveError, match=why) as err:
        safe_extract(arc, dest)
    assert repr(member[0]) in str(err.value)  # the member is named
    assert f"evil{suffix}" in str(err.value)  # and so is the archive
    assert isinstance(err.value, IntegrityError) and isinstance(err.value, OSError)
    assert not dest.exists()
    assert os.listdir(tmp_path / "site") == []  # the temporary directory is gone too
    assert not (tmp_path / "evil.txt").exists() and not Path("/tmp/evil.txt").exists()


def test_oversize_member_and_total(tmp_path: Path) -> None:
    arc = write_archive(tmp_path / "big.tar.zst", GOOD)
    with pytest.raises(UnsafeArchiveError, match="'./textures/wood.png' has 10240 bytes, over"):
        safe_extract(arc, tmp_path / "a", max_member_bytes=5000)
    with pytest.raises(UnsafeArchiveError, match="brings the archive to 11040 bytes"):
        safe_extract(arc, tmp_path / "b", max_total_bytes=11000)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    assert safe_extract(arc, tmp_path / "c", max_member_bytes=10240).bytes == 11050


def test_file_then_path_under_it_is_refused(tmp_path: Path) -> None:
    arc = write_archive(tmp_path / "x.tar.gz", [("a", None, b"f"), ("a/b", None, b"g")])
    with pytest.raises(UnsafeArchiveError, match="'a/b' lies under a path that is a file"):
        safe_extract(arc, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("suffix", [".tar.zst", ".tar.gz"])
def test_truncated_and_corrupt_archives(tmp_path: Path, suffix: str) -> None:
    full = write_archive(tmp_path / f"full{suffix}", GOOD).read_bytes()
    cut = tmp_path / f"cut{suffix}"
    cut.write_bytes(full[: len(full) // 2])
    with pytest.raises(UnsafeArchiveError, match=f"cut{suffix}"):
        safe_extract(cut, tmp_path / "out")
    junk = tmp_path / f"junk{suffix}"
    junk.write_bytes(b"this is not an archive at all" * 10)
    with pytest.raises(UnsafeArchiveError, match=f"junk{suffix}"):
        safe_extract(junk, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert sorted(os.listdir(tmp_path)) == sorted([f"full{suffix}", f"cut{suffix}",
                                                   f"junk{suffix}"])


def test_names_and_suffixes() -> None:
    assert check_member_name("./a//b/./c") == "a/b/c"
    for bad in ("", "/x", "\\x", "C:/x", "a/../b", "..", ".", "a\x00b"):
        with pytest.raises(UnsafeArchiveError):
            check_member_name(bad, "pack.tar.gz")
    assert archive_kind("X.TAR.ZST") == "zst" and archive_kind("a.tgz") == "gz"
    with pytest.raises(UnsafeArchiveError, match="a.zip: not a supported archive.*tar.zst"):
        archive_kind("a.zip")


# ------------------------------------------------------------------ issue 15: archives


def _tar_dir(tmp_path: Path, src: Path, name: str) -> Path:
    """``tar -C src -czf name .`` (a ./-rooted archive, the usual way to make one)."""
    out = tmp_path / name
    with tarfile.open(out, "w:gz") as tar:
        tar.add(src, arcname=".")
    return out


def test_dot_rooted_archive_is_accepted(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "meshes").mkdir(parents=True)
    (src / "meshes" / "a.obj").write_bytes(b"v 0 0 0\n")
    arc = _tar_dir(tmp_path, src, "x.tar.gz")
    with tarfile.open(arc) as t:
        assert t.getnames()[0] == "."
    res = safe_extract(arc, tmp_path / "out")
    assert res.files == ("meshes/a.obj",)
    assert (tmp_path / "out" / "meshes" / "a.obj").read_bytes() == b"v 0 0 0\n"


@pytest.mark.parametrize("name", [f"{COMPLETE_MARKER}.tmp", f"{COMPLETE_MARKER}/x",
                                  f"./{COMPLETE_MARKER}.abcdef0123456789.tmp"])
def test_marker_named_members_are_refused_as_unsafe(tmp_path: Path, name: str) -> None:
    arc = write_archive(tmp_path / "m.tar.gz", [*GOOD, (name, None, b"{}")])
    with pytest.raises(UnsafeArchiveError, match="completion marker.*unsafe"):
        safe_extract(arc, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.tar.gz"]


def test_a_flipped_bit_in_a_gzip_stream_is_an_error_naming_the_archive(tmp_path: Path) -> None:
    payload = bytes(range(256)) * 4000
    arc = write_archive(tmp_path / "p.tar.gz", [("data.bin", None, payload)])
    raw = bytearray(arc.read_bytes())
    caught = 0
    for pos in range(20, len(raw) - 8, max(1, (len(raw) - 28) // 30)):
        bad = bytearray(raw)
        bad[pos] ^= 0x10
        p = tmp_path / "bad.tar.gz"
        p.write_bytes(bad)
        try:
            res = safe_extract(p, tmp_path / "o")
        except UnsafeArchiveError as exc:
            assert "bad.tar.gz" in str(exc)
            caught += 1
        else:  # a flip that decodes to the same bytes (never seen, but not wrong)
            assert (tmp_path / "o" / "data.bin").read_bytes() == payload, res
    assert caught >= 25


def test_compression_ratio_and_total_limits(tmp_path: Path) -> None:
    arc = write_archive(tmp_path / "bomb.tar.gz", [("zeros.bin", None, b"\0" * (8 << 20))])
    assert arc.stat().st_size < 64 << 10
    with pytest.raises(UnsafeArchiveError, match="decompression bomb"):
        safe_extract(arc, tmp_path / "o", max_ratio=10)
    with pytest.raises(UnsafeArchiveError, match="over the limit of 1000"):
        safe_extract(arc, tmp_path / "o", max_total_bytes=1000)
    res = safe_extract(arc, tmp_path / "o", max_ratio=None)  # settable
    assert res.bytes == 8 << 20


def test_extraction_progress_bar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tqdm")
    arc = write_archive(tmp_path / "pack.tar.gz", GOOD)
    safe_extract(arc, tmp_path / "quiet")  # stderr is not a terminal here: no bar
    assert "extract pack.tar.gz" not in capsys.readouterr().err
    safe_extract(arc, tmp_path / "shown", show_progress=True)
    assert "extract pack.tar.gz" in capsys.readouterr().err
    for rel in ("meshes/table.obj", "textures/wood.png", "bin/tool"):  # the same tree
        assert (tmp_path / "shown" / rel).read_bytes() == (tmp_path / "quiet" / rel).read_bytes()
