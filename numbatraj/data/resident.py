"""ResidentColumn: a whole column in memory, gathered by index on the host or the device.

Sampling reads from memory, never from disk (docs/residency.md has the measurements).  A
:class:`ResidentColumn` holds one column as a single C-contiguous host array and gathers
minibatch rows from it with a Numba kernel; :meth:`ResidentColumn.gather_device` does the
same on the GPU from a lazily made device mirror.  Device code is imported on first use only.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from numbatraj import _jit
from numbatraj._checks import host_buffer
from numbatraj._cuda import is_device_array
from numbatraj._jit import calibrating, note_time, parallel_call, parallel_threads
from numbatraj.data.index_batch import IndexBatch
from numbatraj.errors import RowIndexError, SchemaError

if TYPE_CHECKING:
    from numbatraj.data.store import TrajectoryStore

__all__ = ["ResidentColumn"]

_INT64_MAX = np.iinfo(np.int64).max
_INT64 = np.dtype(np.int64)

def word_dtype(row_bytes: int) -> np.dtype:
    """The widest unsigned word (8, 4, 2 or 1 bytes) that divides ``row_bytes``.

    Rows are gathered as raw words, so one kernel per word type serves every dtype and row
    shape, and NaN payloads survive bit for bit.
    """
    for size, dt in ((8, np.uint64), (4, np.uint32), (2, np.uint16)):
        if row_bytes % size == 0:
            return np.dtype(dt)
    return np.dtype(np.uint8)


_KERNELS: Any = None


def _kernels() -> Any:
    """The host kernel module, imported on first gather so ``import numbatraj`` stays light."""
    global _KERNELS
    if _KERNELS is None:
        from numbatraj.data import _gather_kernels

        _KERNELS = _gather_kernels
    return _KERNELS


# ---------------------------------------------------------------------- shared host helpers
def host_indices(idx: Any, what: str) -> np.ndarray:
    """``idx`` (array-like or :class:`IndexBatch`) as a C-contiguous int64 ``(B,)``/``(B, T)``."""
    if type(idx) is np.ndarray and idx.dtype == np.int64 and idx.flags.c_contiguous and (
        idx.ndim == 1 or idx.ndim == 2
    ):
        return idx  # the common case, checked in a few hundred nanoseconds
    if isinstance(idx, IndexBatch):
        idx = idx.indices
    if is_device_array(idx):
        raise SchemaError(
            f"{what}: the indices are a device array; use gather_device() for device indices "
            f"or copy them to the host"
        )
    arr = np.asarray(idx)
    if arr.dtype.kind not in "iu":
        if arr.size == 0 and arr.dtype.kind == "f":
            arr = arr.astype(np.int64)  # np.asarray([]) is float64; an empty batch is fine
        else:
            raise SchemaError(f"{what}: indices must be integers, got dtype {arr.dtype}")
    if arr.ndim not in (1, 2):
        raise SchemaError(f"{what}: indices must have shape (B,) or (B, T), got {arr.shape}")
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > _INT64_MAX:
        k = int(np.argmax(arr > _INT64_MAX))
        raise RowIndexError(
            f"{what}: index {int(arr.ravel()[k])} at position {_position(arr.shape, k)} "
            f"does not fit int64; nothing was written"
        )
    return np.ascontiguousarray(arr, dtype=np.int64)


def _position(shape: tuple[int, ...], flat: int) -> object:
    if len(shape) == 1:
        return flat
    return tuple(int(i) for i in np.unravel_index(flat, shape))


def out_array(out: Any, shape: tuple[int, ...], dtype: np.dtype, what: str) -> np.ndarray:
    """``out`` checked against ``shape``/``dtype`` (C-contiguous, writeable), or a new array.

    ``out`` may be a numpy array, a writable torch CPU tensor or any host DLPack / array
    interface exporter (:func:`numbatraj._checks.host_buffer`); the result is a view of it.
    """
    if out is None:
        return np.empty(shape, dtype=dtype)
    if type(out) is np.ndarray and out.shape == shape and out.dtype == dtype and (
        out.flags.c_contiguous and out.flags.writeable
    ):
        return out
    out = host_buffer(out, f"{what}: out")
    if out.dtype != dtype or out.shape != shape:
        raise SchemaError(
            f"{what}: out is {out.dtype.name} {out.shape}, expected {dtype.name} {shape}"
        )
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise SchemaError(f"{what}: out must be a C-contiguous, writeable array")
    return out


def raise_outside(what: str, shape: tuple[int, ...], pos: int, value: int, lo: int, hi: int,
                  hint: str = "") -> None:
    """Raise :class:`RowIndexError` for index ``value`` at flat position ``pos``."""
    raise RowIndexError(
        f"{what}: index {value} at position {_position(shape, pos)} is outside the valid rows "
        f"[{lo}, {hi}); nothing was written{hint}"
    )


#: The thread policy's kind of the column gather (:func:`numbatraj._jit.parallel_threads`).
_COLUMN_GATHER = "column gather"


def gather_words(
    words: np.ndarray,
    idx: np.ndarray,
    out_words: np.ndarray,
    base: int,
    lo: int,
    hi: int,
    what: str,
    shape: tuple[int, ...],
    hint: str = "",
) -> None:
    """Check every index is in ``[lo, hi)``, then ``out_words[i] = words[idx[i] - base]``.

    ``words`` and ``out_words`` are the word views of the source and of ``out``; ``idx`` is
    flat int64.  Nothing is written when an index is out of range.
    """
    n = idx.shape[0]
    if n == 0:
        return
    k = _kernels()
    if words.shape[1] == 0:
        pos = int(k.first_outside_cpu(idx, lo, hi))
    elif _jit.below_floor(out_words.nbytes, _COLUMN_GATHER):  # serial whatever the policy
        pos = int(k.checked_gather_cpu(words, idx, base, lo, hi, out_words))
    else:
        nbytes = out_words.nbytes
        threads = parallel_threads(nbytes, auto=_COLUMN_GATHER)
        timed = calibrating(_COLUMN_GATHER, nbytes)
        t0 = time.perf_counter() if timed else 0.0
        if threads == 1:
            pos = int(k.checked_gather_cpu(words, idx, base, lo, hi, out_words))
        else:
            pos = int(k.first_outside_cpu(idx, lo, hi))
            if pos < 0:
                parallel_call(k.gather_rows_cpu, threads, words, idx, base, out_words, threads)
        if timed and pos < 0:
            note_time(_COLUMN_GATHER, threads, time.perf_counter() - t0, nbytes)
    if pos >= 0:
        raise_outside(what, shape, pos, int(idx[pos]), lo, hi, hint)


_WORDS: dict[int, np.dtype] = {}


def as_words(a: np.ndarray, n_rows: int, row_bytes: int) -> np.ndarray:
    """C-contiguous ``a`` viewed as ``(n_rows, row_bytes // word)`` unsigned words."""
    if not row_bytes:
        return np.empty((n_rows, 0), np.uint8)
    wdt = _WORDS.get(row_bytes)
    if wdt is None:
        wdt = _WORDS.setdefault(row_bytes, word_dtype(row_bytes))
    return a.reshape(n_rows, row_bytes // a.itemsize).view(wdt)


def check_column_array(data: Any, what: str) -> np.ndarray:
    arr = np.asarray(data)
    if arr.ndim < 1:
        raise SchemaError(f"{what}: a column needs a leading row axis, got a 0-d array")
    if arr.dtype.kind not in "biuf" or arr.dtype.fields is not None:
        raise SchemaError(
            f"{what}: dtype {arr.dtype} is not supported; expected bool, integer or float"
        )
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return np.ascontiguousarray(arr)


def device_gather(
    dev_words: Any,
    row_shape: tuple[int, ...],
    dtype: np.dtype,
    row_bytes: int,
    idx: Any,
    out: Any,
    base: int,
    lo: int,
    hi: int,
    what: str,
    stream: Any = 0,
    hint: str = "",
) -> Any:
    """Device gather ``out[i] = rows[idx[i] - base]`` after checking ``lo <= idx < hi``.

    ``dev_words`` is the device mirror as ``(n, row_bytes // word)`` words.  Imports the
    CUDA target on first use.
    """
    from numbatraj._cuda import get_cuda

    cuda = get_cuda()
    from numbatraj.data import _gather_cuda as _g

    if isinstance(idx, IndexBatch):
        idx = idx.indices
    if is_device_array(idx):
        if np.dtype(idx.dtype) != np.int64:
            raise SchemaError(f"{what}: device indices must be int64, got {idx.dtype}")
        if len(idx.shape) not in (1, 2):
            raise SchemaError(f"{what}: indices must have shape (B,) or (B, T), got {idx.shape}")
        if not idx.is_c_contiguous():
            raise SchemaError(f"{what}: device indices must be C-contiguous")
        d_idx = idx
    else:
        d_idx = cuda.to_device(host_indices(idx, what), stream=stream)
    shape = tuple(int(s) for s in d_idx.shape)
    n = int(np.prod(shape, dtype=np.int64))
    full = (*shape, *row_shape)
    if out is None:
        out = cuda.device_array(full, dtype=dtype, stream=stream)
    else:
        if not is_device_array(out):
            raise SchemaError(f"{what}: out must be a device array, got {type(out).__name__}")
        if np.dtype(out.dtype) != dtype or tuple(out.shape) != full:
            raise SchemaError(
                f"{what}: out is {np.dtype(out.dtype).name} {tuple(out.shape)}, "
                f"expected {dtype.name} {full}"
            )
        if not out.is_c_contiguous():
            raise SchemaError(f"{what}: out must be a C-contiguous device array")
    if n == 0:
        return out
    flat = d_idx.reshape(n)
    pos = _g.first_outside(flat, lo, hi, stream)
    if pos >= 0:
        value = int(flat[pos : pos + 1].copy_to_host()[0])
        raise_outside(what, shape, pos, value, lo, hi, hint)
    if row_bytes:
        out_w = out.reshape(n, row_bytes // dtype.itemsize).view(word_dtype(row_bytes))
        _g.gather_rows(dev_words, flat, base, out_w, stream)
    return out


# ---------------------------------------------------------------------- the column
class ResidentColumn:
    """One column held whole in host memory, gathered by row index.

    Parameters
    ----------
    data : array, shape ``(n_rows, *row_shape)``
        Bool, integer or float.  Used in place when already C-contiguous and native-endian,
        otherwise copied once.
    name : str
        Used in error messages.

    Notes
    -----
    The device mirror made by :meth:`to_device` is a snapshot: after writing into
    :attr:`data`, call :meth:`to_device` again.
    """

    def __init__(self, data: Any, name: str = "column") -> None:
        self.name = str(name)
        self._data = check_column_array(data, f"column {self.name!r}")
        self._row_bytes = int(self._data.dtype.itemsize * int(np.prod(self._data.shape[1:])))
        self._words = as_words(self._data, self._data.shape[0], self._row_bytes)
        self._dev: Any = None  # device mirror of self._words
        #: the last ``out`` gathered into, with its word view, shape and strides: a loop
        #: that passes the same ``out`` skips rebuilding the view (see :meth:`gather`)
        self._last_out: tuple[np.ndarray, np.ndarray, tuple[int, ...], tuple[int, ...]] | None
        self._last_out = None

    @classmethod
    def load(cls, store: TrajectoryStore, name: str) -> ResidentColumn:
        """Read column ``name`` of ``store`` whole, in one contiguous read."""
        return cls(store.load_column(name), name=name)

    # ------------------------------------------------------------------ metadata
    @property
    def data(self) -> np.ndarray:
        """The column, ``(n_rows, *row_shape)``, C-contiguous."""
        return self._data

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    @property
    def row_shape(self) -> tuple[int, ...]:
        return tuple(self._data.shape[1:])

    @property
    def n_rows(self) -> int:
        return int(self._data.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self._data.nbytes)

    def __len__(self) -> int:
        return self.n_rows

    def __repr__(self) -> str:
        dev = ", on device" if self._dev is not None else ""
        return (
            f"ResidentColumn({self.name!r}, {self.dtype.name} {self.row_shape}, "
            f"rows={self.n_rows}{dev})"
        )

    # ------------------------------------------------------------------ host
    def gather(self, idx: Any, out: np.ndarray | None = None) -> np.ndarray:
        """``out[i, ...] = column[idx[i], ...]``.

        Parameters
        ----------
        idx : int array ``(B,)`` or ``(B, T)``, or IndexBatch
            Row numbers in ``[0, n_rows)``; duplicates allowed, negatives are out of range.
        out : array ``(*idx.shape, *row_shape)`` of the column dtype, optional
            Filled in place and returned (no allocation); must be C-contiguous.

        Returns
        -------
        numpy.ndarray
            ``(*idx.shape, *row_shape)``, the column's dtype.

        Raises
        ------
        RowIndexError
            An index is outside ``[0, n_rows)``; names the first such position and value.
            ``out`` is left untouched.
        SchemaError
            ``idx`` is not integer, or ``out`` has the wrong dtype, shape or layout.
        """
        last = self._last_out
        if (last is not None and out is last[0] and type(idx) is np.ndarray
                and idx.dtype == _INT64 and idx.ndim == 1 and out.shape == last[2]
                and out.strides == last[3] and idx.shape[0] == last[2][0]
                and out.dtype == self._data.dtype and idx.flags.c_contiguous
                and out.flags.writeable):
            # the same out as last time, unchanged (same object, shape, strides, dtype; a
            # view of it is held, so its memory cannot move), 1-D int64 indices: the word
            # view is reused and the checks are the ones above.  Measured (32 random rows of
            # 10 M x 26 float32, Intel VM, 3,001 interleaved rounds): +2.0 us over
            # np.take(out=) before, +0.7 us after (issue 14: within 2 us under load).
            gather_words(self._words, idx, last[1], 0, 0, self._data.shape[0],
                         f"gather from column {self.name!r}", idx.shape)
            return out
        what = f"gather from column {self.name!r}"
        flat = host_indices(idx, what)
        shape = flat.shape
        res = out_array(out, (*shape, *self.row_shape), self.dtype, what)
        flat = flat.reshape(-1)
        out_w = as_words(res, flat.shape[0], self._row_bytes)
        gather_words(self._words, flat, out_w, 0, 0, self.n_rows, what, shape)
        if res is out and len(shape) == 1:
            self._last_out = (res, out_w, res.shape, res.strides)
        return res

    # ------------------------------------------------------------------ device
    @property
    def on_device(self) -> bool:
        """True once :meth:`to_device` (or a device gather) mirrored the column."""
        return self._dev is not None

    def to_device(self) -> ResidentColumn:
        """Copy the column into GPU memory (refreshing an existing mirror); returns self.

        Raises :class:`~numbatraj.DeviceUnavailableError` on a machine without a usable GPU.
        """
        from numbatraj._cuda import get_cuda

        cuda = get_cuda()
        self._dev = cuda.to_device(self._words)
        return self

    def release_device(self) -> None:
        """Drop the device mirror (its memory is freed when no kernel uses it)."""
        self._dev = None

    def gather_device(self, idx: Any, out: Any = None, *, stream: Any = 0) -> Any:
        """Device twin of :meth:`gather`: indices, mirror and output all in GPU memory.

        Parameters
        ----------
        idx : int64 device array ``(B,)``/``(B, T)``, host int array, or IndexBatch
            Host indices are copied to the device first.
        out : device array ``(*idx.shape, *row_shape)`` of the column dtype, optional
            C-contiguous; allocated when omitted.
        stream : CUDA stream, optional

        Returns
        -------
        device array
            ``(*idx.shape, *row_shape)``; bit for bit what :meth:`gather` returns.

        Raises
        ------
        RowIndexError
            An index is outside ``[0, n_rows)``; nothing is written (checked on the device,
            then one 8-byte copy back).
        DeviceUnavailableError
            No usable GPU (and the simulator is off).
        """
        if self._dev is None:
            self.to_device()
        what = f"gather_device from column {self.name!r}"
        return device_gather(
            self._dev, self.row_shape, self.dtype, self._row_bytes, idx, out, 0, 0,
            self.n_rows, what, stream,
        )
