"""StoreReplay: declared columns in a host ring, plus one sampler (uniform or prioritized).

The configuration, ring state, checks and templates are the replay core's
(``_front.ReplayFront``); this module holds where the host keeps the data: one record per
row, and the sampler that owns the population and its random streams.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from numbatraj import _jit
from numbatraj._checks import as_host_values, check_real, host_buffer
from numbatraj._jit import calibrating, note_time, parallel_call, parallel_threads
from numbatraj.data.column import ColumnSpec
from numbatraj.data.index_batch import IndexBatch
from numbatraj.errors import IntegrityError, SamplerError, SchemaError
from numbatraj.replay import _checkpoint as ck
from numbatraj.replay import _draw
from numbatraj.replay import _quantize_kernels as _qk
from numbatraj.replay import _record_kernels as _rck
from numbatraj.replay import _ring_kernels as _rk
from numbatraj.replay import _stream_kernels as _sk
from numbatraj.replay._front import ReplayFront, carve_outputs, output_plan
from numbatraj.replay._split import window_start_py
from numbatraj.replay.columns import ReplayColumns
from numbatraj.samplers import PrioritizedSampler, UniformSampler

__all__ = ["StoreReplay"]


_RECORD_GATHER_MAX = 1 << 16  # rows; larger gathers go column by column (no scratch)
#: the thread policy's kind for the record gather (``numbatraj._jit.AUTO_MIN_BYTES``)
_RECORD_KIND = "replay record gather"
#: the thread policy's kind of a kept n-step draw (``StoreReplay(n_step=)``'s records)
_KEPT_KIND = "replay kept n-step gather"
#: bytes of records a batch add assembles in a scratch first (``StoreReplay._put``): from
#: 16 KiB (below, the extra copy's call costs what it saves) to 1 MiB (an L2 cache).
#: Measured, 168-byte records, add of n rows staged / direct (interleaved, load 6): n = 64
#: 7.74 / 7.63 us, 100 8.00 / 8.18, 200 8.97 / 9.78, 1000 16.7 / 22.1, 4000 46.1 / 69.5.
_STAGE_BYTES = (16 << 10, 1 << 20)
_U8 = np.dtype(np.uint8)
#: Record rings of at least this many bytes take staged batch adds with streaming stores
#: (see ``_ring_kernels.stage_put_cpu``): beyond any L3, the next draw reads a fresh row
#: from memory either way; a smaller ring keeps its fresh rows in the caches.
_STREAM_RING_BYTES = 64 << 20


#: A column whose row is wider than this (bytes) is stored apart, as its own contiguous
#: ``(capacity, *shape)`` array; narrower columns share the row record.  Measured
#: (``bench/test_replay.py``, pixel group): a 3x84x84 uint8 row is 331 cache lines over six
#: pages, so keeping it beside a 30-byte tail saves no miss, while the record costs a second
#: copy of the row (scratch, then the column) on every gather and a strided write on every
#: add.  A 17-float row (68 bytes) is one or two lines, and there the record (all narrow
#: columns of a row in 3-4 adjacent lines of one page) is what makes the gather fast.
#: Crossover, sample_into of 4 MiB of a uint8 (w,) column plus reward/action/done at 200k
#: rows, record vs apart: w=128 213/305 us, 256 269/289, 512 359/386, 1024 577/556,
#: 4096 508/434 (one run, load ~3).
WIDE_BYTES = 512


def _wide_columns(cols: ReplayColumns) -> tuple[str, ...]:
    """Columns stored apart (row bytes above :data:`WIDE_BYTES`)."""
    return tuple(n for n in cols.names
                 if cols.row_elems(n) * cols.storage_dtype(n).itemsize > WIDE_BYTES)


#: The record fields of kept n-step targets (``StoreReplay(n_step=)``): the float32 return
#: and the code (``m``, terminal bit; ``_stream_kernels.nstep_keep_cpu``); each narrow
#: ``next_<x>`` column also gets ``_kept_next_<x>``, its value at the window's last row.
_KEPT_FIELDS = (("_kept_return", 4), ("_kept_code", 1))
_KEPT_PREFIX = "_kept_"


def _record_layout(cols: ReplayColumns, names: Iterable[str] | None = None,
                   kept: bool = False) -> tuple[int, dict[str, tuple[int, np.dtype]]]:
    """Record size (a multiple of 8 bytes) and each column's ``(byte offset, word dtype)``,
    over ``names`` (default: every column); with ``kept``, also the fields of
    :data:`_KEPT_FIELDS` (grouped with the walk's) and a ``_kept_next_<x>`` copy of each
    ``next_<x>`` column right after them: a draw of the kept targets reads the bytes up to
    there of one record, and none of the ``next_<x>`` columns behind them.

    Three groups, each widest word first (stable): the columns an n-step draw reads at the
    window's first row only, then the ones its walk reads at every row (``reward``,
    ``done``, ``truncated``: adjacent, 1-2 lines), then the ``next_<x>`` columns read at
    its last row, right after the walk's.  Every offset is a multiple of the column's word
    size (and of its item size; a group may start after padding), so the word and element
    views are aligned.  When that padding would make the record longer than all columns
    widest word first (no padding), that layout is used instead.

    The 168-byte record of ``bench/test_replay.py`` is [action 0-24 | obs 24-92 |
    reward 92-96 | done 96 | next_obs 100-168]: an n=3 draw touches 5.75 lines per row on
    average (whole records: 3.5), against 7.62 with the columns widest word first
    ([action | obs | reward | next_obs | done], reward and done 68 bytes apart).
    The layout is not persisted: checkpoints and dumps store each column apart.
    """
    items = []
    for name in (cols.names if names is None else names):
        nbytes = cols.row_elems(name) * cols.storage_dtype(name).itemsize
        items.append((name, nbytes, _rk.word_dtype(nbytes) if nbytes else np.dtype(np.uint8)))
    specs = cols.specs
    if kept:
        items.extend((name, nb, _rk.word_dtype(nb)) for name, nb in _KEPT_FIELDS)
        items.extend((_KEPT_PREFIX + name, nb, wdt) for name, nb, wdt in list(items)
                     if name.startswith("next_") and name[5:] in specs and nb)

    def group(name: str) -> float:
        if name.startswith(_KEPT_PREFIX):
            return 1.5 if name.startswith(_KEPT_PREFIX + "next_") else 1
        if name in ("reward", "done", "truncated") and specs[name].shape == ():
            return 1
        return 2 if name.startswith("next_") and name[5:] in specs else 0

    def place(order: list[int]) -> tuple[int, dict[str, tuple[int, np.dtype]]]:
        off = 0
        where = {}
        for k in order:
            name, nbytes, wdt = items[k]
            off = -(-off // wdt.itemsize) * wdt.itemsize
            where[name] = (off, wdt)
            off += nbytes
        return max(8, (off + 7) // 8 * 8), where

    packed = place(sorted(range(len(items)), key=lambda k: -items[k][2].itemsize))
    walk = place(sorted(range(len(items)),
                        key=lambda k: (group(items[k][0]), -items[k][2].itemsize)))
    return walk if kept or walk[0] <= packed[0] else packed


def _byte_view_only(dtype: np.dtype) -> bool:
    """Whether a Numba kernel cannot take an array of ``dtype`` (float16, say): the record
    gather then gets its byte view."""
    try:
        numba.from_dtype(np.dtype(dtype))
    except (NotImplementedError, numba.core.errors.NumbaError):
        return True
    return dtype == np.float16  # typed by from_dtype, but no data model for arguments


def _view(raw: np.ndarray, shape: tuple[int, ...], dtype: np.dtype, offset: int,
          row_bytes: int) -> np.ndarray:
    """``shape`` array of ``dtype`` at byte ``offset`` of every row of the uint8 ``raw``
    ``(n, row_bytes)``: rows ``row_bytes`` apart, C order inside a row."""
    dtype = np.dtype(dtype)
    inner = [dtype.itemsize] * (len(shape) - 1)
    for k in range(len(shape) - 2, 0, -1):
        inner[k - 1] = inner[k] * shape[k + 1]
    return np.ndarray(shape, dtype=dtype, buffer=raw, offset=offset,
                      strides=(row_bytes, *inner))


def _wide_gather(words: np.ndarray, idx: np.ndarray, out: np.ndarray,
                 idx_b: np.ndarray | None = None, out_b: np.ndarray | None = None,
                 words_b: np.ndarray | None = None) -> None:
    """``out[i] = words[idx[i]]`` (and ``out_b[i] = words_b[idx_b[i]]`` in the same pass,
    ``words_b`` defaulting to ``words``, of its word type and row length) for columns stored
    apart, from :data:`numbatraj._jit.PARALLEL_MIN_BYTES` up on the threads
    :func:`numbatraj._jit.parallel_threads` gives (``set_num_threads(n)``'s, or the free
    cores once threads measured faster here), else serial."""
    if idx_b is None or out_b is None:
        idx_b, out_b = idx[:0], out[:0]
    nbytes = out.nbytes + out_b.nbytes
    _jit.auto_call("replay wide gather", nbytes, idx.shape[0], _rk.gather_wide_pair_cpu,
                   _rk.gather_wide_pair_par_cpu, words, idx, out,
                   words if words_b is None else words_b, idx_b, out_b)


@dataclass(frozen=True)
class _NstepPlan:
    """Where an n-step draw reads each column (see :meth:`StoreReplay._nstep_gather`).

    ``at_last``: the ``next_<x>`` columns (``x`` declared), read at row ``t + m - 1``;
    ``words_l``: the record words ``[lo, hi)`` that hold the narrow ones (``(0, 0)``: none);
    ``words_t``: the record words ``[0, words_t)`` that hold the other narrow columns (read
    at ``t``); ``tab`` (None when a narrow column is quantised): per narrow column with
    bytes, ``tab_names``, its (byte offset, bytes, read at ``t + m - 1``) in the record;
    ``walk`` (None with ``tab``): the walked draw's records as structured arrays
    (``_record_kernels.record_dtype``) of the columns read at ``t`` and of those read at the
    last row (None: none), by rising offset, each with the index into ``tab_names`` of each
    field and an address scratch (``_record_kernels.walk_cols_cpu``);
    ``bytes_tl``: the bytes ``[0, t_hi)`` read at ``t`` and ``[l_lo, l_hi)`` at the last row;
    ``rq``, ``rlow``, ``rstep``: the reward column's quantisation; ``fused``: no ``next_of``
    and no frame stack, so one kernel pass serves the draw; ``fields``: the walk's fields
    as record byte offsets ``(reward, reward is float64, done, truncated)`` (-1: not
    stored) for ``_record_kernels.walk_cols_cpu``, or None when ``tab`` is None or the reward is
    not a float32 / float64 field of the record (a float16 reward: its float64 copy).
    """

    at_last: tuple[str, ...]
    words_l: tuple[int, int]
    words_t: int
    tab_names: tuple[str, ...]
    tab: np.ndarray | None
    walk: tuple[Any, ...] | None
    bytes_tl: tuple[int, int, int]
    rq: bool
    rlow: float
    rstep: float
    fused: bool
    fields: tuple[int, bool, int, int] | None


_NO_WORDS = np.zeros((0, 0), dtype=np.uint64)
#: reward dtypes the n-step kernels read from the records as they are
_KERNEL_REWARDS = (np.dtype(np.float32), np.dtype(np.float64))


def _nstep_plan(rep: StoreReplay) -> _NstepPlan:
    cols = rep._cols
    at_last = tuple(n for n in cols.names if n.startswith("next_") and n[5:] in cols.specs)
    spans = []
    end_t = 0
    names, tab = [], []
    for n in rep._narrow:
        nbytes = cols.row_elems(n) * cols.storage_dtype(n).itemsize
        off = rep._layout[1][n][0]
        if nbytes:
            names.append(n)
            tab.append((off, nbytes, int(n in at_last)))
        if n in at_last and nbytes:
            spans.append((off // 8, -(-(off + nbytes) // 8)))
        elif n not in at_last:
            end_t = max(end_t, off + nbytes)
    q = cols.quant.get("reward")
    unquantised = bool(names) and not any(n in cols.quant for n in rep._narrow)
    l_lo = min((a for a, _, at in tab if at), default=0)
    l_hi = max((a + nb for a, nb, at in tab if at), default=0)
    return _NstepPlan(
        at_last=at_last,
        words_l=(min(a for a, _ in spans), max(b for _, b in spans)) if spans else (0, 0),
        words_t=-(-end_t // 8),
        tab_names=tuple(names),
        tab=np.array(tab, dtype=np.int64).reshape(-1, 3) if unquantised else None,
        walk=_walk_views(rep, tab) if unquantised else None,
        bytes_tl=(end_t, l_lo, l_hi),
        rq=q is not None, rlow=0.0 if q is None else q.low,
        rstep=0.0 if q is None else q.step,
        fused=not rep._streams.next_of and not rep._streams.frame_stack,
        fields=_walk_fields(rep) if unquantised else None,
    )


def _walk_views(rep: StoreReplay, tab: list[tuple[int, int, int]]) -> tuple[Any, ...]:
    """``_NstepPlan.walk`` for the columns ``tab`` (offset, bytes, read at the last row)."""
    raw = rep._rec.reshape(-1).view(np.uint8)
    got: list[Any] = []
    for at in (0, 1):
        order = tuple(sorted([k for k, r in enumerate(tab) if r[2] == at],
                             key=lambda k: tab[k][0]))
        recs = raw.view(_rck.record_dtype([tab[k][:2] for k in order], rep._row_bytes)) \
            if order else None
        got += [recs, order, np.zeros(len(order), dtype=np.int64)]
    return tuple(got)


def _walk_fields(rep: StoreReplay) -> tuple[int, bool, int, int] | None:
    """The n-step walk's record fields (see :class:`_NstepPlan`), or None."""
    cols, where = rep._cols, rep._layout[1]
    if "reward" not in where or cols.row_elems("reward") != 1:
        return None
    rdt = cols.storage_dtype("reward")
    if rdt not in _KERNEL_REWARDS:
        return None
    flag = []
    for name in ("done", "truncated"):  # the end flags the replay keeps (_end_names)
        if name not in rep._end_names:
            flag.append(-1)
        elif name in where:  # bool, uint8 or int8 (the reserved columns' check): one byte
            flag.append(where[name][0])
        else:
            return None
    return where["reward"][0], rdt == np.float64, flag[0], flag[1]


#: (structured view of the records or None, the values' indices of its fields in order or
#: None for all of them, (value index, storage) of each column stored apart)
_OnePlan = tuple[Any, "tuple[int, ...] | None", "tuple[tuple[int, np.ndarray], ...]"]


def _one_plan(rep: StoreReplay) -> _OnePlan:
    """How a one-row add writes each column (see :meth:`StoreReplay.add`)."""
    names = rep._cols.names
    fields = [k for k, n in enumerate(names) if n not in rep._wide]
    wide = tuple((k, rep._data[n]) for k, n in enumerate(names) if n in rep._wide)
    if not fields:
        return None, None, wide
    specs, where = rep._cols.specs, rep._layout[1]
    dt = np.dtype({
        "names": [names[k] for k in fields],
        "formats": [(specs[names[k]].dtype, specs[names[k]].shape) if specs[names[k]].shape
                    else specs[names[k]].dtype for k in fields],
        "offsets": [where[names[k]][0] for k in fields],
        "itemsize": rep._row_bytes,
    })
    rec = rep._rec.view(np.uint8).reshape(-1).view(dt)
    return rec, None if len(fields) == len(names) else tuple(fields), wide


class StoreReplay(ReplayFront):
    """An online replay buffer: any declared column set, a ring, and one sampler.

    Parameters
    ----------
    columns : iterable of ColumnSpec
        The row layout, e.g. ``obs`` float32 (17,), ``action`` float32 (6,), ``reward``
        float32 (), ``next_obs`` float32 (17,), ``done`` bool ().
    capacity : int
        Rows held in total, the demonstration prefix included.
    prioritized : bool
        Draw rows in proportion to ``priority**alpha`` (a :class:`PrioritizedSampler`) with IS
        weights; otherwise uniformly (a :class:`UniformSampler`).
    seed : int
        Seed of the sampler's streams (a prioritized sampler draws restricted ranges, the
        ERE window and the demo split, from a second stream of the same seed).
    alpha, beta, eps : float
        Prioritization exponent, IS-weight exponent, priority offset (prioritized only).
    quantize : mapping of str to (low, high), optional
        Float columns stored as uint8 codes of ``[low, high]`` and sampled as float32.
    demo_capacity : int
        Rows ``[0, demo_capacity)`` are a pinned demonstration prefix, filled by
        :meth:`add_demos` and never overwritten; the ring wraps over the other rows.
    demo_fraction : float, optional
        Fixed share of every minibatch drawn from the demonstrations (rounded); ``None``
        draws demos and online rows as one population.
    n_envs, next_of, frame_stack
        Streams, derived ``next_*`` columns and frame stacks (docs/replay.md).
    n_step, gamma : int, float, optional
        The n-step targets this replay is built for (``n_step`` 1-127, ``gamma >= 0``).
        Each row keeps its window's ``return``, ``discount`` and the narrow ``next_*``
        columns at the window's last row in its record, refreshed by every add (the
        written rows and the ``n_step - 1`` steps before them in each stream); a draw with
        these values reads one record per row instead of walking the window, and returns
        exactly what the walk would.  They become the defaults of :meth:`sample` and
        :meth:`sample_into` (``sample(B)`` returns n-step targets; other ``n_step`` /
        ``gamma`` walk as on any replay).  Costs per row: one more copy of each narrow
        ``next_*`` column and 5 bytes; adds do the refresh.  Draws with ``next_of`` or
        frame stacks read the kept targets and gather the columns after them; with a
        quantised record column the draw walks.

    Notes
    -----
    ``add`` validates every column before writing any, so a failed add changes nothing.
    The arrays ``sample`` and ``sample_indices`` return are new; ``sample_into`` fills
    caller-owned ones and returns the replay's own :class:`IndexBatch` for that batch size,
    refilled by the next ``sample_into`` of the same size (the contract of both replays).
    """

    _KIND = "StoreReplay"
    _OPTIONS = frozenset({"n_envs", "next_of", "frame_stack", "n_step", "sequences",
                          "prioritized_sequences"})

    def __init__(
        self,
        columns: Iterable[ColumnSpec],
        capacity: int,
        *,
        prioritized: bool = False,
        seed: int = 0,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
        quantize: Mapping[str, tuple[float, float]] | None = None,
        demo_capacity: int = 0,
        demo_fraction: float | None = None,
        n_envs: int = 1,
        next_of: Mapping[str, str] | None = None,
        frame_stack: Mapping[str, int] | None = None,
        n_step: int | None = None,
        gamma: float = 0.99,
    ) -> None:
        super().__init__(
            columns, capacity, prioritized=prioritized, seed=seed, alpha=alpha, beta=beta,
            eps=eps, quantize=quantize, demo_capacity=demo_capacity,
            demo_fraction=demo_fraction, n_envs=n_envs, next_of=next_of,
            frame_stack=frame_stack,
        )
        cap = self._capacity
        self._sampler: PrioritizedSampler | UniformSampler
        if self._prioritized:
            self._per: PrioritizedSampler | None = PrioritizedSampler(
                cap, self._alpha, self._beta, self._eps, self._seed
            )
            self._uni: UniformSampler | None = None
            self._sampler = self._per
        else:
            self._per = None
            self._uni = self._sampler = UniformSampler(0, self._seed)
        self._data: dict[str, np.ndarray] = {}
        self._rows2d: dict[str, np.ndarray] = {}  # (capacity, elements per row), storage dtype
        self._words: dict[str, np.ndarray] = {}  # (capacity, words per row), for gathers
        self._plan: dict[str, tuple[Any, ...]] = {}
        self._items: dict[str, np.ndarray] = {}  # (capacity,) rows as opaque V<bytes> items
        # Narrow columns of a physical row share one record (grouped for the n-step walk,
        # each column on its word size, the record padded to 8 bytes: _record_layout): a
        # sampled row is then 3-4 cache lines in one page instead of one or two lines per
        # column.  Wide columns (images) are stored apart, contiguous (see WIDE_BYTES).
        self._wide = _wide_columns(self._cols)
        narrow = [n for n in self._cols.names if n not in self._wide]
        if n_step is not None:  # 'reward' is a scalar (narrow): there is a record
            self._kept = self._check_draw_nstep(n_step, gamma)
            taken = [n for n in self._cols.names if n.startswith(_KEPT_PREFIX)]
            if taken:
                raise SchemaError(f"n_step=: the column name {taken[0]!r} is reserved for "
                                  f"the kept targets' record fields ({_KEPT_PREFIX}*)")
        self._layout = _record_layout(self._cols, narrow, self._kept is not None)
        self._row_bytes = rb = self._layout[0]
        #: uint64 (capacity, row_bytes / 8): the row records of the narrow columns
        self._rec = np.zeros((cap if narrow else 0, rb // 8), dtype=np.uint64)
        self._narrow = tuple(narrow)
        raw = self._rec.view(np.uint8)
        for name, spec in self._cols.specs.items():
            sdt = self._cols.storage_dtype(name)
            q = self._cols.quant.get(name)
            e = self._cols.row_elems(name)
            nbytes = e * sdt.itemsize
            if name in self._wide:
                # numpy asks for transparent huge pages itself (madvise) on allocations of
                # 4 MiB and more: a 3x84x84 column's rows sit on 2 MiB pages already
                arr = np.zeros((cap, *spec.shape), dtype=sdt)
                wdt = _rk.word_dtype(nbytes)
                flat = arr.reshape(cap, e)
                self._rows2d[name] = flat
                if q is None:
                    self._plan[name] = (None, e, wdt)
                    self._words[name] = flat.view(wdt)
                    self._items[name] = flat.view(np.dtype(f"V{nbytes}")).reshape(cap)
                else:
                    self._plan[name] = (q, e, None)
                self._data[name] = arr
                continue
            off, wdt = self._layout[1][name]
            arr = _view(raw, (cap, *spec.shape), sdt, off, rb)
            self._rows2d[name] = _view(raw, (cap, e), sdt, off, rb)
            if q is None:
                self._plan[name] = (None, e, wdt)
                n_w = nbytes // wdt.itemsize
                self._words[name] = _view(raw, (cap, n_w), wdt, off, rb)
                self._items[name] = _view(raw, (cap,), np.dtype(f"V{nbytes}"), off, rb)
            else:
                self._plan[name] = (q, e, None)
            self._data[name] = arr
        self._gather_work: dict[int, tuple[Any, ...]] = {}
        #: the record gather straight into the outputs (``_rck.gather_cols_cpu``, compiled
        #: for this layout): the narrow columns with bytes by rising record offset, the
        #: records as a structured array of those columns (``_rck.record_dtype``), the
        #: outputs' address scratch, which outputs go as byte views (None: none); None
        #: when a narrow column is quantised (those go through the scratch)
        self._cols_gather: tuple[tuple[str, ...], np.ndarray, np.ndarray,
                                 tuple[bool, ...] | None] | None
        self._cols_gather = None
        with_bytes = sorted([n for n in narrow if self._cols.row_elems(n)],
                            key=lambda n: self._layout[1][n][0])
        if with_bytes and not any(n in self._cols.quant for n in narrow):
            fields = [(self._layout[1][n][0],
                       self._cols.row_elems(n) * self._cols.storage_dtype(n).itemsize)
                      for n in with_bytes]
            self._cols_gather = (
                tuple(with_bytes),
                raw.reshape(-1).view(_rck.record_dtype(fields, rb)),
                np.zeros(len(with_bytes), dtype=np.int64),
                # the outputs a kernel cannot take as they are (float16): their byte views
                None if not any(_byte_view_only(self._cols.sample_dtype(n)) for n in with_bytes)
                else tuple([_byte_view_only(self._cols.sample_dtype(n)) for n in with_bytes]),
            )
        #: weak references to the outputs whose addresses the record gather last wrote to
        #: ``_cols_gather[2]`` (None: none yet)
        self._cols_last: tuple[weakref.ref[np.ndarray], ...] | None = None
        #: batch adds assemble the narrow columns' records in a scratch first (``_put``),
        #: unless one of them is quantised (written by its kernel straight into the ring)
        staged = [n for n in narrow if self._cols.row_elems(n)]
        #: (names, byte offsets, bytes per row) of the staged columns, or None
        self._stage_plan: tuple[tuple[str, ...], np.ndarray, np.ndarray] | None = None
        if staged and not any(n in self._cols.quant for n in narrow):
            self._stage_plan = (
                tuple(staged),
                np.array([self._layout[1][n][0] for n in staged], dtype=np.int64),
                np.array([self._cols.row_elems(n) * self._cols.storage_dtype(n).itemsize
                          for n in staged], dtype=np.int64),
            )
        self._scratch = np.zeros(0, dtype=np.uint8)
        self._rec_bytes = self._rec.reshape(-1).view(np.uint8)
        #: batch adds stream their records past the caches (a ring far larger than them)
        self._stream_adds = self._rec.nbytes >= _STREAM_RING_BYTES
        #: (name, destination, quantisation) of every column with elements: the (capacity,)
        #: ``V<row bytes>`` item view, or for a quantised column its (capacity, e) codes
        self._put_plan = tuple(
            (n, self._items[n] if n in self._items else self._rows2d[n],
             self._cols.quant.get(n))
            for n in self._cols.names
            if self._cols.row_elems(n)
        )
        #: the columns a staged batch add writes apart (wide ones)
        self._put_wide = tuple(p for p in self._put_plan if p[0] in self._wide)
        #: one-row adds (None when a column is quantised: those go through the kernels)
        self._one_plan = None if self._cols.quant or not self._streams.plain else _one_plan(self)
        #: (name, dtype, row shape, scalar type or None) per column: :meth:`add`'s one-row checks
        self._one_checks = self._cols.one_row_checks
        #: (capacity,) bool views of done / truncated (a zero-stride False view if absent)
        false = np.broadcast_to(np.zeros(1, dtype=np.bool_), (cap,))
        self._done_v = self._data["done"] if "done" in self._end_names else false
        self._trunc_v = self._data["truncated"] if "truncated" in self._end_names else false
        self._end_views = tuple(self._data[c] for c in self._end_names)
        self._into: dict[int, IndexBatch] = {}  # batch size -> the batch sample_into refills
        #: batch size -> where sample()'s new outputs go (``_front.output_plan``)
        self._out_plans: dict[int, tuple[int, tuple[Any, ...]]] = {}
        #: batch adds may take the staged short path (:meth:`_add_staged`): staged records,
        #: no quantised column, no priorities, no kept n-step targets
        self._lean_add = (self._stage_plan is not None and self._per is None
                          and self._kept is None and not self._cols.quant)
        #: sample() may take its short path (uniform, plain streams, no kept n-step targets;
        #: the ERE window and the demo split are checked at each draw)
        self._lean = self._uni is not None and self._streams.plain and self._kept is None
        #: n-step draw plan (built at the first n-step draw) and its scratch per batch size
        self._ns_plan: _NstepPlan | None = None
        self._ns_work: dict[int, tuple[Any, ...]] = {}
        #: float64 copy of a reward the kernels cannot read (float16, longdouble): None
        #: until the first n-step draw, then kept in step by every write (dropped on load)
        self._rshadow: np.ndarray | None = None
        #: kept n-step targets (n_step=): the (capacity,) float32 return and uint8 code
        #: views of the records, the powers gamma**k (k <= n) as the walk multiplies them,
        #: and (rows added, demo rows) when they were last refreshed
        self._kept_views: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._kept_at = (0, 0)
        self._keep_args: tuple[tuple[Any, ...], tuple[Any, ...]] | None = None
        #: (source, destination, bytes) of each next_<x> copy the refresh makes, and the
        #: kept draw's records view, field order, address scratch and t_hi (_kept_tab)
        self._kept_copy = np.zeros((0, 3), dtype=np.int64)
        self._kept_draw: tuple[np.ndarray, tuple[int, ...], np.ndarray, int] | None = None
        if self._kept is not None:
            n, g = self._kept
            powers = np.ones(n + 1, dtype=np.float64)
            for k in range(1, n + 1):
                powers[k] = powers[k - 1] * g
            where = self._layout[1]
            self._kept_views = (
                _view(raw, (cap,), np.dtype(np.float32), where["_kept_return"][0], rb),
                _view(raw, (cap,), np.dtype(np.uint8), where["_kept_code"][0], rb),
                powers,
            )
            copies = [(where[k[len(_KEPT_PREFIX):]][0], where[k][0],
                       self._cols.row_elems(k[len(_KEPT_PREFIX):])
                       * self._cols.storage_dtype(k[len(_KEPT_PREFIX):]).itemsize)
                      for k in where if k.startswith(_KEPT_PREFIX + "next_")]
            self._kept_copy = np.array(copies, dtype=np.int64).reshape(-1, 3)

    # ------------------------------------------------------------------ kept n-step targets
    def _keep_refresh(self) -> None:
        """Kept targets of the rows the adds since the last refresh wrote, and of the
        ``n - 1`` steps before them in each stream (whose windows may have grown)."""
        assert self._kept is not None and self._kept_views is not None
        n, g = self._kept
        added, demos = self._kept_at
        d_lo = d_hi = r_lo = r_hi = 0
        if self._n_demo != demos:
            d_lo, d_hi = max(0, demos - (n - 1)), self._n_demo
        new = self._n_added - added
        if new > 0:
            r_hi = self._size
            r_lo = max(0, r_hi - new - (n - 1) * self._streams.n_envs)
        self._keep_rows(d_lo, d_hi, r_lo, r_hi)

    def _keep_all(self) -> None:
        """Kept targets of every held row (after a load)."""
        if self._kept is not None:
            self._keep_rows(0, self._n_demo, 0, self._size)

    def _keep_rows(self, d_lo: int, d_hi: int, r_lo: int, r_hi: int) -> None:
        args = self._keep_args
        if args is None:  # built once; a load drops it (the float16 reward copy)
            assert self._kept is not None and self._kept_views is not None
            plan = self._nstep_plan()
            ret, code, _ = self._kept_views
            args = self._keep_args = (
                (*self._kept, self._nstep_reward(), plan.rq, plan.rlow, plan.rstep,
                 self._done_v, self._trunc_v, self._d),
                (ret, code, self._rec, self._kept_copy))
        o = self._cursor - self._size  # the oldest slot (_oldest_slot, inlined)
        keep: Any = _sk.nstep_keep_cpu
        keep(d_lo, d_hi, r_lo, r_hi, *args[0], self._n_demo, self._r, self._streams.n_envs,
             o + self._r if o < 0 else o, self._size, *args[1])
        self._kept_at = (self._n_added, self._n_demo)

    def _ring_changed(self) -> None:
        if self._kept is not None:
            self._keep_refresh()

    def _kept_tab(self, plan: _NstepPlan) -> tuple[np.ndarray, tuple[int, ...], np.ndarray, int]:
        """The kept draw's records as a structured array of the fields it copies out
        (``_rck.record_dtype``: each narrow column, the ``next_*`` ones from their kept
        copies), by rising offset; the index into ``plan.tab_names`` of each field; the
        outputs' address scratch; the record bytes the draw reads, ``[0, t_hi)``."""
        kd = self._kept_draw
        if kd is None:
            assert plan.tab is not None
            where = self._layout[1]
            rows = []
            for name, (off, nb, at) in zip(plan.tab_names, plan.tab.tolist()):
                rows.append((where[_KEPT_PREFIX + name][0] if at else off, nb))
            order = tuple(sorted(range(len(rows)), key=lambda k: rows[k][0]))
            recs = self._rec.reshape(-1).view(np.uint8).view(
                _rck.record_dtype([rows[k] for k in order], self._row_bytes))
            t_hi = max([o + nb for o, nb in rows]
                       + [where["_kept_code"][0] + 1, where["_kept_return"][0] + 4])
            kd = self._kept_draw = (recs, order, np.zeros(len(rows), dtype=np.int64), t_hi)
        return kd

    # ------------------------------------------------------------------ properties
    @property
    def sampler(self) -> PrioritizedSampler | UniformSampler:
        """The index policy (:class:`UniformSampler` or :class:`PrioritizedSampler`); it owns
        the population (every held row) and the random streams."""
        return self._sampler

    def _get_beta(self) -> float:
        return self._per.beta if self._per is not None else self._beta

    def _beta_changed(self) -> None:
        if self._per is not None:
            self._per.beta = self._beta

    def storage(self, name: str) -> np.ndarray:
        """Read-only view of column ``name``'s physical rows ``(capacity, *shape)`` (uint8
        codes for a quantised column)."""
        if name not in self._data:
            raise SchemaError(f"no column {name!r}; columns: {', '.join(self._cols.names)}")
        v = self._data[name].view()
        v.flags.writeable = False
        return v

    # ------------------------------------------------------------------ writes
    def _put(self, arrays: dict[str, np.ndarray], n: int, base: int, cap: int,
             cur: int) -> None:
        """``n`` rows of every column into ring slots ``cur``, ``cur + 1``, ... (mod ``cap``)
        after physical row ``base``: the slots of ``_ring_kernels.ring_put_cpu`` (the newest
        ``cap`` rows of a larger batch), as at most two runs per column.

        A column's rows are strided in the row records; each row goes as one opaque item
        (numpy ``V<row bytes>``), a byte copy per row, measured faster than a kernel loop
        or numpy's element-wise strided copy.  A batch of one run (no wrap) with
        :data:`_STAGE_BYTES` of records is assembled in a scratch of records instead and
        streamed into the ring in one copy (``_ring_kernels.stage_put_cpu``).  Quantised
        columns go through ``ring_put_quantize_cpu``.
        """
        skip = _rk.ring_skip_py(n, cap)
        pos = _rk.ring_slot_py(cur, skip, cap)
        first = min(n - skip, cap - pos)
        a = base + pos
        plan = self._put_plan
        sp = self._stage_plan
        if (sp is not None and skip == 0 and first == n
                and _STAGE_BYTES[0] <= n * self._row_bytes <= _STAGE_BYTES[1]):
            rb = self._row_bytes
            if self._scratch.shape[0] < n * rb:  # zeroed once: the padding stays zero
                self._scratch = np.zeros(n * rb, dtype=np.uint8)
            _rk.stage_put_cpu(self._rec_bytes, a * rb, rb, tuple([arrays[k] for k in sp[0]]),
                              sp[1], sp[2], n, self._scratch, self._stream_adds)
            plan = self._put_wide
        for name, dst, q in plan:
            src = arrays[name]
            if q is not None:
                _qk.ring_put_quantize_cpu(self._rows2d[name], src.ravel(), base, cap, cur,
                                          q.low, q.high, q.scale)
                continue
            items = src.reshape(-1).view(dst.dtype)  # a copy only if src was strided
            if skip == 0 and first == n:
                dst[a : a + n] = items
            else:
                dst[a : a + first] = items[skip : skip + first]
                if skip + first < n:
                    dst[base : base + n - skip - first] = items[skip + first :]

    def add(self, **rows: Any) -> int:
        """Insert one row or a batch of rows (see :meth:`ReplayFront.add`).

        One row given exactly as stored (every declared column, each a numpy array of the
        declared dtype and row shape, or for a scalar column a numpy scalar of its type)
        takes a fast path of numpy item copies: a row is a few dozen bytes, and numpy's
        same-dtype item assignment copies them bit for bit in a fraction of a microsecond,
        less than one kernel dispatch per column costs.  The record's columns go in as one
        tuple into a structured view of the record (:func:`_one_plan`; 474 ns against 598
        ns for five item assignments, the issue's 168-byte record).  The checks and the
        write are inlined here: 2.28 -> 2.10 us an add of the bench's five columns, against
        a call for the checks and one for the write.  Anything else, and every error, goes
        through :meth:`ReplayColumns.check_rows`.
        """
        plan = self._one_plan
        if plan is not None and len(rows) == len(self._one_checks):
            vals = []
            try:  # as many keys as columns and every column found: the same keys
                for name, dt, shape, st in self._one_checks:
                    v = rows[name]
                    t = type(v)
                    if t is np.ndarray:
                        if v.shape != shape or (v.dtype is not dt and v.dtype != dt):
                            break
                    elif t is not st:
                        break
                    vals.append(v)
                else:  # the row into ring slot cursor
                    cur = self._cursor
                    pos = self._d + cur
                    r = self._r
                    size = self._size
                    if size == r:  # the overwritten row's end flag (one column: 0.15 us
                        # against 0.8 us for the generator, on a full ring every add pays it)
                        ends = self._end_views
                        if ends:
                            self._cut_first[1] = (ends[0][pos] if len(ends) == 1
                                                  else any(a[pos] for a in ends))
                    rec, pick, wide = plan
                    if rec is not None:  # the record's fields in one assignment
                        rec[pos] = tuple(vals) if pick is None else tuple([vals[k] for k in pick])
                    for k, dst in wide:
                        dst[pos] = vals[k]
                    if self._rshadow is not None:
                        self._rshadow[pos] = self._data["reward"][pos]
                    if self._per is not None:
                        self._per.note_added(np.array([pos], dtype=np.int64))
                    self._cursor = cur + 1 if cur + 1 < r else 0
                    if size < r:
                        self._size = size = size + 1
                    self._n_added += 1
                    if self._kept is not None:  # one stream: this row and the n - 1 before it
                        self._keep_rows(0, 0, max(0, size - self._kept[0]), size)
                    return 1
            except KeyError:
                pass
        if not self._streams.plain:
            return super().add(**rows)
        arrays, n = self._cols.check_rows(rows)
        if self._lean_add and self._add_staged(arrays, n):
            return n
        return self._add_rows(arrays, n)

    def _add_staged(self, arrays: dict[str, Any], n: int) -> bool:
        """A checked batch of ``n`` rows that fits before the ring's end, with
        :data:`_STAGE_BYTES` of records, written in one staged kernel pass
        (``_ring_kernels.stage_put_cpu``) without :meth:`_add_rows`' layers (its end-flag
        cut, :meth:`_write_ring`, :meth:`_put`), the same bytes and ring state: 1,000 rows of
        the bench's five columns 24.3 us against 26.3 us (Intel Xeon VM, interleaved with
        cpprb's add, 83.7-84.0 us).  False, having written nothing, for any other
        batch (it wraps, it is small or large, a float64 reward copy is kept)."""
        r = self._r
        cur = self._cursor
        rb = self._row_bytes
        if (cur + n > r or not _STAGE_BYTES[0] <= n * rb <= _STAGE_BYTES[1]
                or self._rshadow is not None):
            return False
        size = self._size
        d = self._d
        if size + n > r and self._end_views:  # rows overwritten: the new oldest row begins
            # an episode if the last one overwritten, at slot cur + n - 1, ended one
            self._cut_first[1] = self._end_flag_at(d + cur + n - 1)
        if self._scratch.shape[0] < n * rb:  # zeroed once: the padding stays zero
            self._scratch = np.zeros(n * rb, dtype=np.uint8)
        sp = self._stage_plan
        assert sp is not None
        a = d + cur
        _rk.stage_put_cpu(self._rec_bytes, a * rb, rb, tuple([arrays[k] for k in sp[0]]),
                          sp[1], sp[2], n, self._scratch, self._stream_adds)
        for name, dst, _ in self._put_wide:  # unquantised: _lean_add
            dst[a : a + n] = arrays[name].reshape(-1).view(dst.dtype)
        cur += n
        self._cursor = cur if cur < r else 0
        self._size = size + n if size + n < r else r
        self._n_added += n
        return True

    def _write_ring(self, arrays: dict[str, Any], n: int, cursor: int) -> None:
        r = self._r
        self._put(arrays, n, self._d, r, cursor)
        if self._rshadow is not None:
            self._shadow_written(self._d, r, cursor, n)
        if self._per is not None:
            slots = np.empty(min(n, r), dtype=np.int64)
            _rk.ring_slots_cpu(self._d, r, cursor, n, slots)
            self._per.note_added(slots)

    def _write_demos(self, arrays: dict[str, Any], n: int) -> None:
        self._put(arrays, n, self._n_demo, n, 0)
        if self._rshadow is not None:
            self._shadow_written(self._n_demo, n, 0, n)
        if self._per is not None:
            self._per.note_added(np.arange(self._n_demo, self._n_demo + n, dtype=np.int64))

    # ------------------------------------------------------------------ sampling
    def _new_batch(self, b: int) -> IndexBatch:
        if self._prioritized:
            return IndexBatch(
                np.empty(b, dtype=np.int64),
                weights=np.empty(b, dtype=np.float32),
                stamps=np.empty(b, dtype=np.int64),
            )
        return IndexBatch(np.empty(b, dtype=np.int64))

    def _index_batch(self, b: int) -> IndexBatch:
        return self._new_batch(b)

    def _reused_batch(self, b: int) -> IndexBatch:
        """The IndexBatch :meth:`sample_into` refills for batch size ``b``."""
        batch = self._into.get(b)
        if batch is None:
            if len(self._into) >= 8:
                self._into.clear()
            batch = self._new_batch(b)
            self._into[b] = batch
        return batch

    def _draw(self, batch: IndexBatch, k: int | None, K: int | None) -> None:  # noqa: N803
        """Fill ``batch``'s arrays (indices; weights and stamps when prioritized) through the
        sampler: the whole population, or restricted ranges (the demo split, the ERE
        window), mapped from the ring's logical rows to physical rows."""
        idx = batch.indices
        b = idx.shape[0]
        ere = self._ere
        c = self._size if ere is None else _draw.ere_window(ere, self._size, k, K)
        m = _draw.split_batch(b, self._n_demo, self._size, self._fraction, ere is not None)
        per, uni = self._per, self._uni
        if per is not None:
            if m < 0:
                per.sample_into(idx, batch.weights, batch.stamps)
                return
            w, st = batch.weights, batch.stamps
            if m:
                per.sample_ranges_into(idx[:m], w[:m], st[:m], 0, self._n_demo)
            if b - m:
                lo0, hi0, lo1, hi1 = _draw.window_ranges(self._d, self._r, self._cursor, c)
                per.sample_ranges_into(idx[m:], w[m:], st[m:], lo0, hi0, lo1, hi1)
            return
        assert uni is not None
        if m < 0:
            self._draw_joint(uni, idx)
            return
        n = self._n_demo + self._size
        if uni.n_rows != n:  # the population (every held row) grew since the last draw
            uni.n_rows = n
        d, r = self._d, self._r
        if m:
            uni.sample_range_into(idx[:m], 0, self._n_demo)
        if b - m:
            uni._fill_ring(idx[m:], c, 0, d + window_start_py(self._cursor, c, r), d + r, r)

    def _draw_joint(self, uni: UniformSampler, idx: np.ndarray) -> None:
        """Uniform rows over every held row (demo and ring rows one population) into this
        replay's int64 ``idx``: the sampler's kernel draws them and maps each logical row
        to its physical one (``_ring_kernels.physical_row``) in the same pass, no checks."""
        nd = self._n_demo
        size = self._size
        n = nd + size
        if uni.n_rows != n:  # the population (every held row) grew since the last draw
            uni.n_rows = n
        d, r = self._d, self._r
        start = window_start_py(self._cursor, size, r)  # the oldest ring slot
        uni._fill_ring(idx, n, nd, d + start - nd, d + r, r)

    def _short_draw(self, batch_size: Any, n_step: Any, gamma: Any) -> bool:
        """Whether sample() / sample_into() may take their short path: the common draw,
        uniform over every held row (a positive int batch size, no n-step targets, no ERE
        window, no streams or kept targets, no demo split) from a non-empty replay."""
        return (self._lean and type(batch_size) is int and batch_size > 0
                and n_step is None and gamma is None and self._ere is None
                and self._size > 0 and (self._fraction is None or not self._n_demo))

    def sample(self, batch_size: int, *, k: int | None = None, K: int | None = None,  # noqa: N803
               n_step: int | None = None, gamma: float | None = None,
               ) -> tuple[dict[str, Any], IndexBatch]:
        # The common draw (uniform over every held row: no ERE window, no demo split, no
        # n-step targets, no streams) without the general path's layers (ReplayFront's),
        # the same rows and outputs: a sample(32) of the bench's five columns 12.0-12.3 us
        # against 15.4-15.8 us, sample(4096) of 10^4 rows 96-118 against 103-125 us
        # (Intel Xeon VM, interleaved).
        uni = self._uni
        if uni is not None and self._short_draw(batch_size, n_step, gamma):
            idx = np.empty(batch_size, dtype=np.int64)
            self._draw_joint(uni, idx)
            out = self._new_outputs(batch_size)
            self._gather(idx, out, batch_size, fresh=True)
            return out, IndexBatch(idx)
        return super().sample(batch_size, k=k, K=K, n_step=n_step, gamma=gamma)

    sample.__doc__ = ReplayFront.sample.__doc__

    def sample_into(self, outputs: Mapping[str, Any], batch_size: int, *, k: int | None = None,
                    K: int | None = None, n_step: int | None = None,  # noqa: N803
                    gamma: float | None = None) -> IndexBatch:
        uni = self._uni  # the short path of sample(), after the same checks of the outputs
        if uni is not None and self._short_draw(batch_size, n_step, gamma):
            outputs = self._check_outputs(outputs, batch_size)
            batch = self._reused_batch(batch_size)
            self._draw_joint(uni, batch.indices)
            self._gather(batch.indices, outputs, batch_size)
            return batch
        return super().sample_into(outputs, batch_size, k=k, K=K, n_step=n_step, gamma=gamma)

    sample_into.__doc__ = ReplayFront.sample_into.__doc__

    def _gather_buffers(self, b: int) -> tuple[Any, ...]:
        """Records scratch (b, row words) and each narrow column's view of it, reused per
        size."""
        w = self._gather_work.get(b)
        if w is None:
            if len(self._gather_work) >= 4:
                self._gather_work.clear()
            recs = np.empty((b, self._row_bytes // 8), dtype=np.uint64)
            raw = recs.view(np.uint8)
            cols = {}
            for name in self._narrow:
                q, e, wdt = self._plan[name]
                off = self._layout[1][name][0]
                if q is None:
                    n_w = e * self._cols.storage_dtype(name).itemsize // wdt.itemsize
                    cols[name] = _view(raw, (b, n_w), wdt, off, self._row_bytes)
                else:
                    cols[name] = _view(raw, (b, e), np.dtype(np.uint8), off, self._row_bytes)
            w = self._gather_work[b] = (recs, cols, np.arange(b, dtype=np.int64))
        return w

    def _gather(self, idx: np.ndarray, outputs: Mapping[str, np.ndarray],
                b: int | None = None, *, fresh: bool = False) -> None:
        """``outputs[name][i] = column name's row idx[i]`` for every output given.
        ``fresh``: the outputs are new arrays (sample()'s), never passed again, so the
        record gather keeps no weak references to them."""
        b = idx.shape[0]
        if b == 0:
            return
        held: tuple[np.ndarray, np.ndarray] | None = None
        for name in self._wide:  # stored apart: straight from the column into the output
            out = outputs.get(name)
            if out is None:
                continue
            q, e, wdt = self._plan[name]
            if q is not None:
                _qk.gather_dequantize_cpu(self._rows2d[name], idx, q.low, q.step,
                                          out.reshape(b, e))
                continue
            words, view = self._words[name], out.reshape(b, e).view(wdt)
            if held is None:
                held = (words, view)
            elif held[0].dtype == words.dtype and held[0].shape[1] == words.shape[1]:
                # two columns of one row type (obs, next_obs) in one pass, lane by lane:
                # one thread decision and one parallel region a draw, not one a column.
                # Serial it measured the same as a call per column; on two threads
                # 1,012-1,144 against 1,060-1,176 us (256 3x84x84 rows a column, Intel
                # Xeon VM, interleaved).  And the policy's calibration, whose sides take
                # turns call by call, had timed each draw's first column serial and its
                # second threaded: the threads always woke from sleep right after a
                # serial call, and lost the verdict they win draw by draw
                _wide_gather(held[0], idx, held[1], idx, view, words)
                held = None
            else:
                _wide_gather(held[0], idx, held[1])
                held = (words, view)
        if held is not None:
            _wide_gather(held[0], idx, held[1])
        if not self._narrow:
            return
        if b > _RECORD_GATHER_MAX:  # e.g. rows() of the whole buffer: column by column
            for name in self._narrow:
                out = outputs.get(name)
                q, e, wdt = self._plan[name]
                if out is None or not e:
                    continue
                if q is None:
                    _rk.gather_rows_cpu(self._words[name], idx, out.reshape(b, e).view(wdt))
                else:
                    _qk.gather_dequantize_cpu(self._rows2d[name], idx, q.low, q.step,
                                              out.reshape(b, e))
            return
        cg = self._cols_gather
        if cg is not None:
            last = self._cols_last
            if last is not None and _jit.below_floor(b * self._row_bytes, _RECORD_KIND):
                # the outputs of the call before, passed again (sample_into's, checked by
                # the caller): their addresses are in cg[2] already
                try:
                    again = all([outputs[n] is r() for n, r in zip(cg[0], last)])
                except KeyError:
                    again = False
                if again:
                    _rck.gather_cols_at_cpu(cg[1], idx, cg[2])
                    return
            try:
                outs = tuple([outputs[n] for n in cg[0]])
            except KeyError:  # not every narrow column wanted: through the records scratch
                outs = None
            if outs is not None and (fresh or all([o.flags.c_contiguous for o in outs])):
                # each lane's columns straight from its record into the outputs
                self._cols_last = None  # cg[2] is rewritten: until it is, no outputs match
                self._record_cols(idx, cg, outs if cg[3] is None else tuple(
                    [o.view(_U8) if v else o for o, v in zip(outs, cg[3])]))
                if not fresh:  # weak: a batch handed out must stay free to go (its block
                    # reused); new outputs are never passed again (1.2 us of 4 weakrefs)
                    self._cols_last = tuple([weakref.ref(o) for o in outs])
                return
        recs, cols, ident = self._gather_buffers(b)
        _rk.gather_rows_cpu(self._rec, idx, recs)  # whole records: the scattered reads
        self._copy_out(cols, self._narrow, outputs, b, ident)  # then the columns, from cache

    def _record_cols(self, idx: np.ndarray, cg: tuple[Any, ...], outs: tuple[Any, ...]) -> None:
        """The record gather into the narrow columns' outputs (``_rck.gather_cols_cpu``),
        on the threads :func:`numbatraj._jit.parallel_threads` gives its kind (256 KiB of
        records and more, cores free, threads measured faster here), else serial."""
        if _jit.below_floor(idx.shape[0] * self._row_bytes, _RECORD_KIND):  # small: no clock
            _rck.gather_cols_cpu(cg[1], idx, outs, cg[2])
            return
        self._on_policy(
            _RECORD_KIND, idx.shape[0],
            lambda: _rck.gather_cols_cpu(cg[1], idx, outs, cg[2]),
            lambda t: parallel_call(_rck.gather_cols_par_cpu, t, cg[1], idx, outs, cg[2], t))

    def _on_policy(self, kind: str, lanes: int, serial: Callable[[], Any],
                   parallel: Callable[[int], Any]) -> None:
        """``serial()`` or ``parallel(threads)`` for a record draw of ``lanes`` records of
        thread-policy kind ``kind``, as :func:`numbatraj._jit.parallel_threads` says (at
        least two lane blocks a thread), timed for the kind's calibration while it is open."""
        nbytes = lanes * self._row_bytes
        threads = parallel_threads(nbytes, auto=kind)
        if threads > 1 and lanes < 2 * threads * _sk.NSTEP_BLOCK:
            threads = 1
        timed = calibrating(kind, nbytes)
        t0 = time.perf_counter() if timed else 0.0
        if threads > 1:
            parallel(threads)
        else:
            serial()
        if timed:
            note_time(kind, threads, time.perf_counter() - t0, nbytes)

    def _new_outputs(self, b: int) -> dict[str, np.ndarray]:
        plan = self._out_plans.get(b)
        if plan is None:
            if len(self._out_plans) >= 8:
                self._out_plans.clear()
            plan = self._out_plans[b] = output_plan(
                {n: (dt, shape) for n, dt, shape in self._outputs_of(b)})
        return carve_outputs(plan)

    def _check_output(self, name: str, out: Any, dtype: np.dtype,
                      shape: tuple[int, ...]) -> np.ndarray:
        if type(out) is not np.ndarray:  # a torch CPU tensor or DLPack exporter: its view
            out = host_buffer(out, f"sample_into: outputs[{name!r}]")
        if out.shape != shape or out.dtype != dtype:
            got = f"{out.dtype} {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__
            raise SchemaError(
                f"sample_into: outputs[{name!r}] is {got}, expected {dtype.name} {shape}"
            )
        f = out.flags
        if not (f.c_contiguous and f.writeable):
            raise SchemaError(f"sample_into: outputs[{name!r}] must be C-contiguous, writeable")
        return out

    def update_priorities(self, batch: IndexBatch | Any, priorities: Any, *,
                          eta: float = 0.9) -> int:
        """Feed new priorities back for a sampled batch (e.g. ``|TD error|``).

        Rows overwritten since they were sampled (stale generation stamp) are skipped.
        Returns how many were skipped.  Only for ``prioritized=True``.  For a window batch
        of :meth:`sample_sequences`, ``priorities`` is the ``(B, T)`` TD error and each
        window's start gets ``eta * max|td| + (1 - eta) * mean|td|`` (R2D2, ``eta`` 0.9).
        """
        self._need_prioritized()
        assert self._per is not None
        priorities = as_host_values(priorities)  # a torch tensor: detached, on the host
        if isinstance(batch, IndexBatch) and np.ndim(batch.indices) == 2:
            return self._update_windows(batch, priorities, eta)
        return int(self._per.update_priorities(batch, priorities))

    def _update_windows(self, batch: IndexBatch, td: Any, eta: float) -> int:
        """R2D2: each window's start gets ``eta * max|td| + (1 - eta) * mean|td|``."""
        assert self._per is not None
        eta = check_real("eta", eta, 0.0, False)
        if eta > 1:
            raise SamplerError(f"eta must be in [0, 1], got {eta!r}")
        a = np.asarray(td)
        shape = tuple(batch.indices.shape)
        if a.shape != shape or a.dtype.kind not in "fiu":
            raise SamplerError(
                f"update_priorities: a window batch of shape {shape} needs td of shape "
                f"{shape} (one TD error per step), got {a.dtype} {a.shape}; nothing was updated"
            )
        a = np.abs(a.astype(np.float64))
        p = eta * a.max(axis=1) + (1.0 - eta) * a.mean(axis=1)
        return int(self._per.update_priorities(np.ascontiguousarray(batch.indices[:, 0]), p,
                                               batch.stamps))

    # ------------------------------------------------------------------ n-step draws
    def _nstep_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``reward`` (:meth:`_nstep_reward`), ``done``, ``truncated`` (their ``(capacity,)``
        views of the row records, a zero-stride False view when not declared): the arrays
        the n-step kernels walk."""
        return self._nstep_reward(), self._done_v, self._trunc_v

    def _nstep_reward(self) -> np.ndarray:
        """The reward array the n-step kernels read: the record view (uint8 codes when
        quantised), or for a dtype Numba cannot read (float16, longdouble) its float64
        copy (exact for float16; longdouble rounded as numpy casts it)."""
        src = self._data["reward"]
        if src.dtype in _KERNEL_REWARDS or "reward" in self._cols.quant:
            return src
        sh = self._rshadow
        if sh is None:
            sh = self._rshadow = src.astype(np.float64)
        return sh

    def _shadow_written(self, base: int, cap: int, cur: int, n: int) -> None:
        """The reward copy after ``_put(arrays, base, cap, cur)`` of ``n`` rows."""
        assert self._rshadow is not None
        src, sh = self._data["reward"], self._rshadow
        skip = _rk.ring_skip_py(n, cap)
        pos = _rk.ring_slot_py(cur, skip, cap)
        first = min(n - skip, cap - pos)
        a = base + pos
        sh[a : a + first] = src[a : a + first]
        if skip + first < n:
            sh[base : base + n - skip - first] = src[base : base + n - skip - first]

    def _nstep_plan(self) -> _NstepPlan:
        """What an n-step draw reads where (built once: the layout never changes)."""
        plan = self._ns_plan
        if plan is None:
            plan = self._ns_plan = _nstep_plan(self)
        return plan

    def _nstep_work(self, b: int) -> tuple[Any, ...]:
        """Scratch of a fused n-step draw of ``b`` rows, reused per size: the records words
        at ``t`` (``(b, words_t)`` uint64: the columns read there) and at ``t + m - 1``
        (``(b, W)``), each column's view of the
        one it is read from, the identity rows (for dequantisation) and ``last``."""
        w = self._ns_work.get(b)
        if w is None:
            if len(self._ns_work) >= 4:
                self._ns_work.clear()
            rb = self._row_bytes
            plan = self._nstep_plan()
            recs_t = np.empty((b, plan.words_t), dtype=np.uint64)  # the words read at t
            recs_l = np.empty((b, rb // 8), dtype=np.uint64)
            at_last = plan.at_last
            cols = {}
            for name in self._narrow:
                q, e, wdt = self._plan[name]
                off = self._layout[1][name][0]
                last_col = name in at_last
                raw = (recs_l if last_col else recs_t).view(np.uint8)
                rs = rb if last_col else plan.words_t * 8
                if q is None:
                    n_w = e * self._cols.storage_dtype(name).itemsize // wdt.itemsize
                    cols[name] = _view(raw, (b, n_w), wdt, off, rs)
                else:
                    cols[name] = _view(raw, (b, e), np.dtype(np.uint8), off, rs)
            w = self._ns_work[b] = (recs_t, recs_l, cols, np.arange(b, dtype=np.int64),
                                    np.empty(b, dtype=np.int64))
        return w

    def _nstep_gather(self, idx: np.ndarray, outputs: Mapping[str, np.ndarray], b: int,
                      ns: tuple[int, float], plan: _NstepPlan) -> None:
        """A transition draw with n-step targets and no ``next_of`` / frame stack: one kernel
        pass (:func:`_stream_kernels.nstep_gather_cpu`) walks each window over the records
        and copies the record words at ``t`` and at ``t + m - 1``; then each column comes
        off the scratch it was read into, and wide columns from their own arrays.

        Measured (the layout of ``bench/test_replay.py``: 168-byte records at 10^6 rows,
        4096 rows, one run, load 4-7): this kernel 148 us (n=3, one env) to 175 us (n=5,
        eight envs), against 178 us for the plain draw's record gather alone; a prototype
        of the same pass over the former 8-byte n-step table 196-215 us (the table is a
        second random place per lane, while the next rows of a stream are in the lane's own
        pages); the former three passes (table walk, record gather, next_* gather) 480 us.
        Without the prefetch, touching the lines per block of 64 lanes: 430 us.  Since then
        (one process, interleaved, load 2.5-2.6): with no quantised record column the pass
        writes each column straight into its output (``nstep_gather_cols_cpu``), the draw
        174-181 us (n=3) against 110-112 us for the plain draw, whose record gather now
        prefetches (see docs/replay.md, fourth n-step round).  Fifth round (one process,
        interleaved, load 0.4-0.5): the record grouped for the walk (:func:`_record_layout`),
        the columns moved out of a block scratch every 32 lanes and no ``truncated`` load
        when none is stored, the draw 148 us (n=3) against 176 us before and 109 us for the
        plain draw (unchanged); the grouping or the block alone measured no gain (see
        docs/replay.md, fifth n-step round).  Sixth round (one process, interleaved, load
        0.3-1): the walk reads its fields by record address instead of through three strided
        array views, the prefetch takes the last window row's fields and next_* columns as
        one span, and one block row holds both spans; the kernel alone 124 -> 113 us (n=3),
        179 -> 131 us (n=5), the draw 142 -> 135 us (n=3) against 85 us plain.  Stop 47:
        the pass is compiled for the record layout (``_record_kernels.walk_cols_cpu``),
        each lane's columns straight from its two records into the outputs, no block: the
        kernel 168.8 -> 128.0 us (n=3, one env, 2^20 rows, one thread).  A float16 reward
        (its float64 copy, no record field) takes ``nstep_gather_cpu``.
        """
        recs_t, recs_l, cols, ident, last = self._nstep_work(b)
        kv = self._kept_views
        if kv is not None and plan.tab is not None and ns == self._kept:  # no walk
            recs, order, addrs, t_hi = self._kept_tab(plan)
            names = plan.tab_names
            outs = tuple([outputs[names[k]].ravel().view(_U8) for k in order])
            where = self._layout[1]
            args = (recs, idx, t_hi, where["_kept_code"][0], where["_kept_return"][0], kv[2],
                    self._d, self._r, self._streams.n_envs, outs, addrs,
                    outputs["return"], outputs["discount"], last)
            if _jit.below_floor(idx.shape[0] * self._row_bytes, _KEPT_KIND):
                _rck.kept_cols_cpu(*args)
            else:  # one record span per lane: the plain draw's thread policy, its own kind
                self._on_policy(_KEPT_KIND, idx.shape[0], lambda: _rck.kept_cols_cpu(*args),
                                lambda t: parallel_call(_rck.kept_cols_par_cpu, t, *args, t))
        elif plan.fields is not None:  # no quantised record column: straight into the outputs
            assert plan.walk is not None
            recs_t, order_t, addrs_t, recs_l, order_l, addrs_l = plan.walk
            names = plan.tab_names
            outs_t = tuple([outputs[names[k]].ravel().view(_U8) for k in order_t])
            if recs_l is None:  # no next_* column: stand-ins, never written
                recs_l, outs_l, addrs_l = recs_t, outs_t, addrs_t
            else:
                outs_l = tuple([outputs[names[k]].ravel().view(_U8) for k in order_l])
            _rck.walk_cols_cpu(recs_t, recs_l, bool(order_l), idx, ns[0], ns[1], *plan.fields,
                               *self._geom(), *plan.bytes_tl, outs_t, addrs_t, outs_l, addrs_l,
                               outputs["return"], outputs["discount"], last)
        else:
            _sk.nstep_gather_cpu(idx, ns[0], ns[1], self._nstep_reward(), plan.rq, plan.rlow,
                                 plan.rstep, self._done_v, self._trunc_v, *self._geom(),
                                 self._rec, recs_t, *plan.words_l, recs_l,
                                 outputs["return"], outputs["discount"], last)
            self._copy_out(cols, self._narrow, outputs, b, ident)
        for name in self._wide:
            out = outputs[name]
            rows = last if name in plan.at_last else idx
            q, e, wdt = self._plan[name]
            if q is None:
                _wide_gather(self._words[name], rows, out.reshape(b, e).view(wdt))
            else:
                _qk.gather_dequantize_cpu(self._rows2d[name], rows, q.low, q.step,
                                          out.reshape(b, e))

    def _nstep_walk(self, idx: np.ndarray, outputs: Mapping[str, np.ndarray], b: int,
                    ns: tuple[int, float], plan: _NstepPlan) -> np.ndarray:
        """The n-step targets alone (``return``, ``discount`` into ``outputs``); returns the
        last row of every window (read off the records when they keep these targets)."""
        last = np.empty(b, dtype=np.int64)
        kv = self._kept_views
        if kv is not None and ns == self._kept:
            where = self._layout[1]
            _sk.nstep_kept_targets_cpu(idx, where["_kept_code"][0], where["_kept_return"][0],
                                       kv[2], self._d, self._r, self._streams.n_envs,
                                       self._rec, outputs["return"], outputs["discount"],
                                       last)
            return last
        _sk.nstep_gather_cpu(idx, ns[0], ns[1], self._nstep_reward(), plan.rq, plan.rlow,
                             plan.rstep, self._done_v, self._trunc_v, *self._geom(),
                             self._rec, _NO_WORDS, 0, 0, _NO_WORDS,
                             outputs["return"], outputs["discount"], last)
        return last

    # ------------------------------------------------------------------ streams
    def _end_flags(self, phys: np.ndarray) -> np.ndarray:
        f = np.zeros(phys.shape[0], dtype=np.bool_)
        for a in self._end_views:
            f |= a[phys].astype(np.bool_)
        return f

    def _end_flag_at(self, p: int) -> bool:
        ends = self._end_views
        if len(ends) == 1:  # one end column: no generator (every add on a full ring asks)
            return bool(ends[0][p])
        return any(bool(a[p]) for a in ends)

    def _geom(self) -> tuple[int, int, int, int, int, int]:
        """(ring base, n_demo, ring capacity, n_envs, oldest slot, size) for the kernels."""
        return (self._d, self._n_demo, self._r, self._streams.n_envs, self._oldest_slot(),
                self._size)

    def _paired_next(self) -> dict[str, str]:
        """``next_of`` targets whose source is gathered in the same pass (source -> target):
        a wide, unquantised, unstacked source (the first target of each), see
        :meth:`_gather_next`."""
        pairs: dict[str, str] = {}
        for t, src in self._streams.next_of.items():
            if (src in self._wide and src not in self._streams.frame_stack
                    and self._plan[src][0] is None and src not in pairs):
                pairs[src] = t
        return pairs

    def _gather_next(self, target: str, rows: np.ndarray, out: np.ndarray,
                     src_rows: np.ndarray | None = None, src_out: np.ndarray | None = None,
                     ) -> None:
        """``next_of`` target at physical ``rows`` (B,) into ``out`` ``(B, [depth,] *shape)``:
        the source's next row of the same stream, or the side table's entry.

        With ``src_rows`` / ``src_out`` (a source of :meth:`_paired_next`), the source at
        ``src_rows`` is gathered in the same pass (``_ring_kernels.gather_wide_pair_cpu``):
        a lane's row and its next one are adjacent in memory, one contiguous read of both.
        Measured (``bench/test_replay.py``, next_of pixel group): see docs/replay.md.
        """
        src = self._streams.next_of[target]
        depth = self._streams.frame_stack.get(src)
        b = rows.shape[0]
        g = self._geom()
        nxt = np.empty(b, dtype=np.int64)
        _sk.next_rows_cpu(rows, *g, nxt)
        side = self._side
        slots = side.slot[rows] if side is not None else np.full(b, -1, np.int64)
        kept = slots >= 0
        if src_out is not None and src_rows is not None:
            e = self._plan[src][1]
            wdt = self._plan[src][2]
            words = self._words[src]
            _wide_gather(words, src_rows, src_out.reshape(b, e).view(wdt), nxt,
                         out.reshape(b, e).view(wdt))
        if depth is None:
            if src_out is None:
                self._gather(nxt, {src: out}, b)
            if kept.any():
                out[kept] = side.pool[target][slots[kept]]  # type: ignore[union-attr]
            return
        st = np.empty((b, depth), dtype=np.int64)
        _sk.stack_rows_cpu(rows, depth, self._done_v, self._trunc_v, *g, st)
        st[:, :-1] = st[:, 1:]
        st[:, -1] = nxt
        flat = out.reshape(b * depth, *out.shape[2:])
        self._gather(st.reshape(-1), {src: flat}, b * depth)
        if kept.any():
            out[kept, depth - 1] = side.pool[target][slots[kept]]  # type: ignore[union-attr]

    def _gather_cols(self, rows: np.ndarray, outputs: Mapping[str, np.ndarray],
                     names: Iterable[str]) -> None:
        """Declared columns ``names`` at physical ``rows`` (B,), frame stacks built."""
        fs = self._streams.frame_stack
        b = rows.shape[0]
        flat = {n: outputs[n] for n in names if n not in fs}
        if flat:
            self._gather(rows, flat, b)
        g = self._geom()
        for n in names:
            depth = fs.get(n)
            if depth is None:
                continue
            st = np.empty((b, depth), dtype=np.int64)
            _sk.stack_rows_cpu(rows, depth, self._done_v, self._trunc_v, *g, st)
            out = outputs[n]
            self._gather(st.reshape(-1), {n: out.reshape(b * depth, *out.shape[2:])},
                         b * depth)

    def _gather_ext(self, idx: np.ndarray, outputs: Mapping[str, np.ndarray], b: int,
                    ns: tuple[int, float] | None) -> None:
        names = self._cols.names
        at_last: tuple[str, ...] = ()
        last = idx
        if ns is not None:
            plan = self._nstep_plan()
            if plan.fused and b <= _RECORD_GATHER_MAX:
                self._nstep_gather(idx, outputs, b, ns, plan)
                return
            # next_of or frame stacks: the walk first, then the columns at t and the
            # next_* columns at t + m - 1
            at_last = plan.at_last
            last = self._nstep_walk(idx, outputs, b, ns, plan)
        pairs = {s: t for s, t in self._paired_next().items() if s not in at_last}
        self._gather_cols(idx, outputs, [n for n in names if n not in at_last and n not in pairs])
        fs = self._streams.frame_stack
        for n in at_last:
            q, e, wdt = self._plan[n]
            if n in self._narrow and n not in fs and q is None and e:
                # one column of the records at t + m - 1: its own lines, not the record's
                _rk.gather_rows_cpu(self._words[n], last, outputs[n].reshape(b, e).view(wdt))
            else:
                self._gather_cols(last, outputs, [n])
        for t, src in self._streams.next_of.items():
            if pairs.get(src) == t:
                self._gather_next(t, last, outputs[t], idx, outputs[src])
            else:
                self._gather_next(t, last, outputs[t])

    def _copy_out(self, cols: Mapping[str, np.ndarray], names: Iterable[str],
                  outputs: Mapping[str, np.ndarray], b: int, ident: np.ndarray) -> None:
        """Columns ``names`` from their views ``cols`` of a gathered scratch to ``outputs``."""
        for name in names:
            out = outputs.get(name)
            q, e, wdt = self._plan[name]
            if out is None or not e:
                continue
            if q is None:
                _rk.copy_rows_cpu(cols[name], out.reshape(b, e).view(wdt))
            else:
                _qk.gather_dequantize_cpu(cols[name], ident, q.low, q.step, out.reshape(b, e))

    def _sequence_starts(self, b: int, t: int, within: bool, batch: IndexBatch) -> None:
        """Window starts (physical) into ``batch.indices[:, 0]`` (weights, stamps)."""
        e = self._streams.n_envs
        nd, size, o = self._n_demo, self._size, self._oldest_slot()
        starts = np.empty(b, dtype=np.int64)
        if self._per is not None:
            if within:
                self._per.sample_into(starts, batch.weights, batch.stamps)
            else:
                c = size - (t - 1) * e
                if c <= 0:
                    raise SamplerError(
                        f"sample_sequences: no online window of T={t} (prioritized spanning "
                        f"windows are drawn from online rows only, {size // e} per env)"
                    )
                lo0, hi0 = self._d + o, self._d + min(o + c, self._r)
                lo1, hi1 = self._d, self._d + max(0, o + c - self._r)
                self._per.sample_ranges_into(starts, batch.weights, batch.stamps,
                                             lo0, hi0, lo1, hi1)
        else:
            uni = self._uni
            assert uni is not None
            if uni.n_rows != nd + size:
                uni.n_rows = nd + size
            if within:
                cd, c = nd, size
            else:
                cd, c = max(0, nd - t + 1), max(0, size - (t - 1) * e)
            uni.sample_range_into(starts, 0, cd + c)
            _sk.logical_to_physical_cpu(starts, cd, self._d, self._r, o, starts)
        batch.indices[:, 0] = starts

    def _sample_sequences(self, b: int, t: int,
                          within: bool) -> tuple[dict[str, Any], IndexBatch]:
        rows = np.empty((b, t), dtype=np.int64)
        first = np.empty((b, t), dtype=np.bool_)
        pad = np.empty((b, t), dtype=np.bool_)
        if self._per is not None:
            batch = IndexBatch(rows, weights=np.empty(b, np.float32),
                               stamps=np.empty(b, np.int64), is_first=first)
        else:
            batch = IndexBatch(rows, is_first=first)
        self._sequence_starts(b, t, within, batch)
        starts = rows[:, 0].copy()
        self._cut_first[0] = True
        _sk.window_rows_cpu(starts, t, within, self._done_v, self._trunc_v, *self._geom(),
                            self._cut_first, rows, first, pad)
        flat = rows.reshape(-1)
        n = b * t
        out: dict[str, Any] = {}
        for name, spec in self._cols.specs.items():
            out[name] = np.empty((b, t, *spec.shape), dtype=self._cols.sample_dtype(name))
        self._gather(flat, {k: v.reshape(n, *v.shape[2:]) for k, v in out.items()}, n)
        for tgt, src in self._streams.next_of.items():
            spec = self._cols.specs[src]
            a = np.empty((b, t, *spec.shape), dtype=spec.dtype)
            self._gather_next_flat(tgt, flat, a.reshape(n, *spec.shape))
            out[tgt] = a
        out["is_first"] = first
        if within:
            for name in list(out):
                if name != "is_first":
                    out[f"{name}_is_pad"] = pad.copy()
        return out, batch

    def _gather_next_flat(self, target: str, rows: np.ndarray, out: np.ndarray) -> None:
        """``next_of`` target (unstacked) at physical ``rows`` (n,) into ``out`` (n, *shape)."""
        src = self._streams.next_of[target]
        n = rows.shape[0]
        nxt = np.empty(n, dtype=np.int64)
        _sk.next_rows_cpu(rows, *self._geom(), nxt)
        self._gather(nxt, {src: out}, n)
        side = self._side
        if side is not None:
            slots = side.slot[rows]
            kept = slots >= 0
            if kept.any():
                out[kept] = side.pool[target][slots[kept]]

    # ------------------------------------------------------------------ reading back
    def time_order(self) -> np.ndarray:
        """Physical rows of every held row in time order: demos, then online oldest first
        (int64, ``(n_rows,)``)."""
        out = np.empty(self.n_rows, dtype=np.int64)
        _rk.time_order_cpu(self._n_demo, self._d, self._r, self._size, self._cursor, out)
        return out

    def rows(self, indices: Any = None) -> dict[str, np.ndarray]:
        """Rows at physical ``indices`` (default: all in time order), dequantised."""
        idx = self.time_order() if indices is None else np.asarray(indices, dtype=np.int64)
        if idx.ndim != 1 or (idx.size and (idx.min() < 0 or idx.max() >= self._capacity)):
            raise SchemaError(f"rows: indices must be 1-D in [0, {self._capacity})")
        out = {
            n: np.empty((idx.shape[0], *s.shape), dtype=self._cols.sample_dtype(n))
            for n, s in self._cols.specs.items()
        }
        idx = np.ascontiguousarray(idx)
        self._gather(idx, out, idx.shape[0])
        for t, src in self._streams.next_of.items():
            spec = self._cols.specs[src]
            out[t] = np.empty((idx.shape[0], *spec.shape), dtype=spec.dtype)
            self._gather_next_flat(t, idx, out[t])
        return out

    # ------------------------------------------------------------------ checkpoints
    def _saved_rows(self) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
        d, nd, size = self._d, self._n_demo, self._size
        for name in self._cols.names:
            data = self._data[name]
            yield name, data[:nd], data[d : d + size]

    def _stream_state(self) -> dict[str, Any]:
        st = self._sampler.state_dict()
        for key in ("leaves", "stamps", "present"):
            st.pop(key, None)
        return {"sampler": st}

    def _tree_arrays(self) -> ck.TreeArrays | None:
        if self._per is None:
            return None
        st = self._per.state_dict()
        return ck.TreeArrays(st["leaves"], st["stamps"], st["present"])

    def _row_buffer(self, name: str, lo: int, n: int, shape: tuple[int, ...],
                    dtype: np.dtype) -> np.ndarray:
        return self._data[name][lo : lo + n]  # straight into the row records

    def _load_rows(self, name: str, demo: np.ndarray, ring_rows: np.ndarray,
                   ring: ck.RingState) -> None:
        self._rshadow = None  # rebuilt from the loaded rows at the next n-step draw
        self._keep_args = None  # they hold the reward array the kernels read
        for lo, rows in ((0, demo), (self._d, ring_rows)):
            dest = self._data[name][lo : lo + rows.shape[0]]
            if not np.may_share_memory(dest, rows):
                dest[...] = rows

    def _restore(self, state: dict[str, Any], ring: ck.RingState, tree: ck.TreeArrays | None,
                 path: str) -> None:
        try:
            sampler_state = dict(state["sampler"])
        except (KeyError, TypeError, ValueError) as exc:
            raise IntegrityError(f"checkpoint {path!r}: unreadable sampler state: {exc!r}") from exc
        if tree is not None:
            sampler_state.update(leaves=tree.leaves, stamps=tree.stamps, present=tree.present)
            if "range_generator" not in sampler_state and "generator" in state:
                # files written before the restricted draws moved into the sampler kept
                # their stream as the replay's own generator
                sampler_state["range_generator"] = state["generator"]
        self._sampler.load_state_dict(sampler_state)
        self._set_ring_state(ring)
        if self._per is not None:
            self._beta = self._per.beta
        self._keep_all()

    def _host_rows(self) -> StoreReplay:
        return self

    @classmethod
    def from_spaces(cls, observation_space: Any, action_space: Any, capacity: int, *,
                    next_obs: bool = True, **kwargs: Any) -> StoreReplay:
        """A replay for a Gymnasium env: columns from its spaces
        (:func:`numbatraj.data.spaces.columns_from_spaces`: obs, action, reward, done,
        truncated) plus ``next_obs`` (``next_obs.<key>`` for Dict / Tuple) unless
        ``next_obs=False``; ``kwargs`` go to the constructor."""
        from numbatraj.data.spaces import columns_from_spaces, space_columns

        extra = {c.name: (c.dtype, c.shape)
                 for c in (space_columns(observation_space, "next_obs") if next_obs else [])}
        return cls(columns_from_spaces(observation_space, action_space, extra=extra),
                   capacity, **kwargs)
