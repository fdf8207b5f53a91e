"""One batch, gathered: the window kernel, then one gather kernel per field.

:class:`WindowGather` holds the resident sources of a loader's fields (each column loaded
once, whole, from the store) and fills a batch for a given array of current rows with no
Python loop over rows: one window-kernel call per distinct ``deltas`` list and one gather
call per field.  The device variant mirrors the sources into GPU memory once and runs the
device twins of the same kernels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from numbatraj._jit import parallel_region, parallel_threads
from numbatraj.data.resident import word_dtype
from numbatraj.data.store import TrajectoryStore
from numbatraj.errors import RowIndexError
from numbatraj.training import _batch_kernels as K
from numbatraj.training.fields import Field

__all__ = ["WindowGather"]

_ZERO = np.zeros(1, np.int64)


def _words2d(a: np.ndarray, n: int, row_shape: tuple[int, ...]) -> np.ndarray:
    """C-contiguous ``a`` of ``n`` rows of ``row_shape`` viewed as ``(n, row_bytes // word)``
    unsigned words (the widest word dividing the row: one kernel serves every dtype)."""
    elems = int(np.prod(row_shape, dtype=np.int64))
    row_bytes = elems * a.dtype.itemsize
    return a.reshape(n, elems).view(np.uint8).view(word_dtype(row_bytes))


def _run(serial: Any, parallel: Any, nbytes: int, *args: Any) -> None:
    # when to go parallel is numbatraj's one policy (numbatraj.set_num_threads): serial by
    # default, parallel only for large batches once the user says the cores are free
    if parallel_threads(nbytes) == 1:
        serial(*args)
    else:
        with parallel_region():
            parallel(*args)


class WindowGather:
    """The resident sources of ``fields`` and the kernels that fill a batch from them.

    Parameters
    ----------
    store : TrajectoryStore
    fields : list of Field
    device : {"cpu", "cuda"}
    """

    def __init__(self, store: TrajectoryStore, fields: list[Field], device: str = "cpu") -> None:
        self.fields = list(fields)
        self.device = device
        self.n_rows = store.n_rows
        self.offsets = np.ascontiguousarray(store.episode_offsets, np.int64)
        self.lengths = np.ascontiguousarray(store.episode_lengths, np.int64)
        columns = {f.column: store.load_column(f.column) for f in self.fields}
        self._src: list[np.ndarray] = []
        for f in self.fields:
            data = columns[f.column]
            n = data.shape[0]
            if f.mode == "raw":
                if f.camera is None:
                    self._src.append(_words2d(data, n, f.row_shape))
                else:  # the camera slot as a strided view: rows of one camera's words
                    words = _words2d(data, n * data.shape[1], f.row_shape)
                    self._src.append(words.reshape(n, data.shape[1], -1)[:, f.camera])
            else:
                flat = data.reshape(n, -1)
                if f.camera is not None:
                    d = flat.shape[1] // data.shape[1]
                    flat = flat[:, f.camera * d : (f.camera + 1) * d]
                self._src.append(flat)
        self._windows = sorted({tuple(f.deltas.tolist()) for f in self.fields
                                if f.deltas is not None})
        self._dev: Any = None
        if device == "cuda":
            self._to_device()

    # ------------------------------------------------------------------ shapes
    def shapes(self, batch: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Every key of a batch of ``batch`` items -> ``(shape, dtype)``."""
        out: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        for f in self.fields:
            out[f.key] = ((batch, *f.shape_tail), f.dtype)
        for f in self.fields:
            if f.deltas is not None:
                out[f"{f.key}_is_pad"] = ((batch, int(f.deltas.shape[0])), np.dtype(np.bool_))
        out["index"] = ((batch,), np.dtype(np.int64))
        out["episode_index"] = ((batch,), np.dtype(np.int64))
        return out

    def check_rows(self, cur: np.ndarray, what: str) -> None:
        if cur.size:
            bad = np.flatnonzero((cur < 0) | (cur >= self.n_rows))
            if bad.size:
                k = int(bad[0])
                raise RowIndexError(f"{what}: row {int(cur[k])} at position {k} is outside the "
                                    f"store's rows [0, {self.n_rows})")

    # ------------------------------------------------------------------ host
    def gather(self, cur: np.ndarray, out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Fill ``out`` (numpy arrays of :meth:`shapes`) for current rows ``cur`` (int64 (B,))."""
        b = cur.shape[0]
        ep = out["episode_index"]
        out["index"][...] = cur
        rows_of: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}
        for key in self._windows:
            d = np.asarray(key, np.int64)
            win = np.empty((b, d.shape[0]), np.int64)
            pad = np.empty((b, d.shape[0]), np.bool_)
            K.window_rows_cpu(cur, self.offsets, self.lengths, d, win, pad, ep)
            rows_of[key] = (win, pad)
        if not self._windows:
            K.window_rows_cpu(cur, self.offsets, self.lengths, _ZERO,
                              np.empty((b, 1), np.int64), np.empty((b, 1), np.bool_), ep)
        for f, src in zip(self.fields, self._src, strict=True):
            dst = out[f.key]
            rows: np.ndarray = cur
            if f.deltas is not None:
                rows2, pad = rows_of[tuple(f.deltas.tolist())]
                out[f"{f.key}_is_pad"][...] = pad
                rows = rows2.reshape(-1)
            m = rows.shape[0]
            if f.mode == "raw":
                dst2 = _words2d(dst, m, f.row_shape)
                if m and dst2.shape[1]:
                    _run(K.gather_rows_serial_cpu, K.gather_rows_cpu, dst.nbytes,
                         src, rows, dst2)
            elif f.mode == "unit":
                _run(K.gather_unit_serial_cpu, K.gather_unit_cpu, dst.nbytes,
                     src, rows, np.float32(255), dst.reshape(m, -1))
            else:
                assert f.params is not None
                a, s, c, d = f.params
                _run(K.gather_affine_serial_cpu, K.gather_affine_cpu, dst.nbytes,
                     src, rows, a, s, c, d, dst.reshape(m, -1))
        return out

    # ------------------------------------------------------------------ device
    def _to_device(self) -> None:
        from numbatraj._cuda import get_cuda

        cuda = get_cuda()
        self._dev = {
            "src": [cuda.to_device(np.ascontiguousarray(s)) for s in self._src],
            "offsets": cuda.to_device(self.offsets),
            "lengths": cuda.to_device(self.lengths),
            "params": [None if f.params is None else [cuda.to_device(p) for p in f.params]
                       for f in self.fields],
        }

    def gather_device(self, cur: np.ndarray, out: dict[str, Any],
                      stream: Any = 0) -> dict[str, Any]:
        """Device twin of :meth:`gather`: ``out`` holds device arrays; ``cur`` is host int64."""
        from numbatraj._cuda import get_cuda
        from numbatraj.training import _batch_cuda as G

        cuda = get_cuda()
        dev = self._dev
        b = cur.shape[0]
        d_cur = cuda.to_device(cur, stream=stream)
        out["index"].copy_to_device(d_cur, stream=stream)
        ep = out["episode_index"]
        rows_of: dict[tuple[int, ...], tuple[Any, Any]] = {}
        for key in self._windows or [(0,)]:
            d = cuda.to_device(np.asarray(key, np.int64), stream=stream)
            rows = cuda.device_array((b, len(key)), np.int64, stream=stream)
            pad = cuda.device_array((b, len(key)), np.bool_, stream=stream)
            G.window_rows(d_cur, dev["offsets"], dev["lengths"], d, rows, pad, ep, stream)
            rows_of[key] = (rows, pad)
        for i, f in enumerate(self.fields):
            dst = out[f.key]
            if f.deltas is None:
                rows = d_cur
            else:
                rows2, pad = rows_of[tuple(f.deltas.tolist())]
                out[f"{f.key}_is_pad"].copy_to_device(pad, stream=stream)
                rows = rows2.reshape(rows2.shape[0] * rows2.shape[1])
            m = int(rows.shape[0])
            src = dev["src"][i]
            if f.mode == "raw":
                word = np.dtype(src.dtype)
                dst2 = dst.reshape(m, src.shape[1] * word.itemsize // f.dtype.itemsize)
                G.gather_rows(src, rows, dst2.view(word), stream)
            elif f.mode == "unit":
                G.gather_unit(src, rows, 255.0, dst.reshape(m, src.shape[1]), stream)
            else:
                a, s, c, d = dev["params"][i]
                G.gather_affine(src, rows, a, s, c, d, dst.reshape(m, src.shape[1]), stream)
        return out
