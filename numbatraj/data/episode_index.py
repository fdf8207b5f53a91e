"""The episode index (``ep_len``, ``ep_offset``) and its consistency rules."""

from __future__ import annotations

import numpy as np

__all__ = ["offsets_from_lengths", "index_problems", "exact_total"]


def exact_total(lengths: np.ndarray) -> int:
    """Sum of integer ``lengths`` without int64 wrap-around (a Python int)."""
    lengths = np.asarray(lengths)
    if lengths.size == 0:
        return 0
    if lengths.dtype.kind == "u" or int(np.abs(lengths).max()) > (2**62) // lengths.size:
        return sum(int(v) for v in lengths.ravel())  # rare: values large enough to overflow
    return int(lengths.astype(np.int64).sum())


def offsets_from_lengths(lengths: np.ndarray) -> np.ndarray:
    """Start row of each episode: ``[0, cumsum(lengths)[:-1]]`` as int64."""
    lengths = np.asarray(lengths, dtype=np.int64)
    out = np.zeros(lengths.shape[0], dtype=np.int64)
    if lengths.shape[0] > 1:
        np.cumsum(lengths[:-1], out=out[1:])
    return out


def index_problems(lengths: np.ndarray, offsets: np.ndarray, n_rows: int | None) -> list[str]:
    """Every way ``lengths`` and ``offsets`` disagree with each other and with ``n_rows``.

    Returns a list of human-readable problems (empty when consistent); each says which
    numbers disagree.
    """
    problems: list[str] = []
    if lengths.ndim != 1 or offsets.ndim != 1:
        problems.append(
            f"ep_len and ep_offset must be 1-D, got shapes {lengths.shape} and {offsets.shape}"
        )
        return problems
    if lengths.shape[0] != offsets.shape[0]:
        problems.append(
            f"ep_len has {lengths.shape[0]} episodes but ep_offset has {offsets.shape[0]}"
        )
        return problems
    if lengths.dtype.kind not in "iu" or offsets.dtype.kind not in "iu":
        problems.append(
            f"ep_len/ep_offset must be integers, got {lengths.dtype} and {offsets.dtype}"
        )
        return problems
    total = exact_total(lengths)
    if n_rows is not None:
        huge = np.flatnonzero(lengths > n_rows)
        if huge.size:
            problems.append(
                f"ep_len[{huge[0]}] = {lengths[huge[0]]} exceeds the store's {n_rows} rows"
            )
    too_big = lengths.dtype.kind == "u" and lengths.size and int(lengths.max()) >= 2**63
    if total >= 2**63 or too_big:
        problems.append(f"ep_len sums to {total} rows, beyond the int64 row index")
        return problems
    lengths = lengths.astype(np.int64)
    offsets = offsets.astype(np.int64)
    bad = np.flatnonzero(lengths <= 0)
    if bad.size:
        problems.append(
            f"ep_len[{bad[0]}] = {lengths[bad[0]]}: episode lengths must be >= 1 "
            f"({bad.size} episode(s) affected)"
        )
    if offsets.shape[0] and offsets[0] != 0:
        problems.append(f"ep_offset[0] = {offsets[0]}, expected 0")
    expected = offsets_from_lengths(lengths)
    wrong = np.flatnonzero(offsets != expected)
    wrong = wrong[wrong > 0] if offsets.shape[0] and offsets[0] != 0 else wrong
    if wrong.size:
        i = int(wrong[0])
        problems.append(
            f"ep_offset[{i}] = {offsets[i]}, expected {expected[i]} "
            f"(the running sum of ep_len; {wrong.size} offset(s) disagree)"
        )
    if n_rows is not None and total != n_rows:
        problems.append(f"ep_len sums to {total} rows but the store has {n_rows} rows")
    return problems
