"""Plain NumPy / Python references for every kernel.

Tests compare each Numba kernel (host and device) against the function here.  Keep these
obviously correct rather than fast.  Sections are appended per package area.
"""

from __future__ import annotations

import numpy as np

__all__: list[str] = []


# --------------------------------------------------------------------------- store
def episode_offsets_ref(lengths: np.ndarray) -> np.ndarray:
    """Start row of each episode, by a Python loop."""
    out = np.zeros(len(lengths), dtype=np.int64)
    total = 0
    for i, n in enumerate(lengths):
        out[i] = total
        total += int(n)
    return out


# --------------------------------------------------------------------------- residency (gather)
def gather_rows_ref(column: np.ndarray, idx: np.ndarray, base: int = 0) -> np.ndarray:
    """``out[i, ...] = column[idx[i] - base, ...]`` by a Python loop over ``idx`` (any shape)."""
    idx = np.asarray(idx)
    out = np.empty((*idx.shape, *column.shape[1:]), dtype=column.dtype)
    for pos in np.ndindex(*idx.shape):
        out[pos] = column[int(idx[pos]) - base]
    return out


def first_outside_ref(idx: np.ndarray, lo: int, hi: int) -> int:
    """Flat position of the first index outside ``[lo, hi)``, or -1."""
    for k, v in enumerate(np.asarray(idx).ravel().tolist()):
        if not lo <= v < hi:
            return k
    return -1


def windows_ref(n_rows: int, window_rows: int) -> list[tuple[int, int]]:
    """Every ``(start, stop)`` window that seek(0) plus repeated advance() visits."""
    return [(s, min(s + window_rows, n_rows)) for s in range(0, n_rows, window_rows)]


# --------------------------------------------------------------------------- samplers
_PHILOX_M = (0xD2511F53, 0xCD9E8D57)
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)
_MASK32 = 0xFFFFFFFF


def philox4x32_10_ref(counter: tuple[int, ...], key: tuple[int, ...]) -> tuple[int, ...]:
    """Philox4x32-10 on Python ints, as in Salmon et al. (SC'11), Random123's philox.h."""
    c = [int(x) & _MASK32 for x in counter]
    k = [int(x) & _MASK32 for x in key]
    for r in range(10):
        if r:
            k = [(k[0] + _PHILOX_W[0]) & _MASK32, (k[1] + _PHILOX_W[1]) & _MASK32]
        p0 = _PHILOX_M[0] * c[0]
        p1 = _PHILOX_M[1] * c[2]
        c = [
            (p1 >> 32) ^ c[1] ^ k[0],
            p1 & _MASK32,
            (p0 >> 32) ^ c[3] ^ k[1],
            p0 & _MASK32,
        ]
    return tuple(c)


def bounded_ref(word: int, n: int) -> int:
    """``floor(word * n / 2**64)`` with exact integer arithmetic."""
    return (int(word) * int(n)) >> 64


def philox_rows_ref(seed: int, n: int, lanes: int, draw: int) -> np.ndarray:
    """Indices of draw ``draw`` of the device sampler: lane in the counter's high words, draw
    number in the low words, key = seed; index from output words 0 (low) and 1 (high)."""
    key = (seed & _MASK32, seed >> 32)
    out = np.empty(lanes, dtype=np.int64)
    for lane in range(lanes):
        ctr = (draw & _MASK32, draw >> 32, lane & _MASK32, lane >> 32)
        x = philox4x32_10_ref(ctr, key)
        out[lane] = bounded_ref(x[0] | (x[1] << 32), n)
    return out


def sumtree_find_ref(leaves: np.ndarray, masses: np.ndarray) -> np.ndarray:
    """The leaf holding each prefix mass."""
    return np.searchsorted(np.cumsum(leaves), masses, side="right").astype(np.int64)


def sumtree_nodes_ref(leaves: np.ndarray, present: np.ndarray, p: int) -> tuple[np.ndarray, ...]:
    """Sum and min trees (``2p`` nodes, root 1) built by a Python loop from the leaves;
    absent leaves count 0 in the sum and +inf in the min."""
    sums = [0.0] * (2 * p)
    mins = [float("inf")] * (2 * p)
    for i, v in enumerate(leaves):
        sums[p + i] = float(v)
        mins[p + i] = float(v) if present[i] else float("inf")
    for n in range(p - 1, 0, -1):
        sums[n] = sums[2 * n] + sums[2 * n + 1]
        mins[n] = min(mins[2 * n], mins[2 * n + 1])
    return np.array(sums), np.array(mins)


def per_weights_ref(leaves: np.ndarray, present: np.ndarray, idx: np.ndarray, beta: float) -> np.ndarray:
    """PER importance weights ``(N P(i))**-beta / max_j (N P(j))**-beta`` over present rows."""
    live = np.asarray(leaves, dtype=np.float64)[present]
    n = live.shape[0]
    prob = np.asarray(leaves, dtype=np.float64) / live.sum()
    w_all = (n * live / live.sum()) ** -beta
    return (n * prob[idx]) ** -beta / w_all.max()


class PrioritizedModel:
    """A trivially correct model of PrioritizedSampler's bookkeeping (dicts, Python loops)."""

    def __init__(self, capacity: int, alpha: float, eps: float) -> None:
        self.capacity, self.alpha, self.eps = capacity, alpha, eps
        self.leaf: dict[int, float] = {}
        self.gen: dict[int, int] = {}
        self.max_p = 1.0

    def note_added(self, rows: list[int]) -> None:
        for r in rows:
            self.gen[r] = self.gen.get(r, 0) + 1
            self.leaf[r] = self.max_p**self.alpha

    def update(self, rows: list[int], prios: list[float], stamps: list[int] | None) -> int:
        skipped = 0
        for j, (r, pr) in enumerate(zip(rows, prios)):
            if stamps is not None and self.gen[r] != stamps[j]:
                skipped += 1
                continue
            self.leaf[r] = (pr + self.eps) ** self.alpha
            self.max_p = max(self.max_p, pr + self.eps)
        return skipped

    def leaves(self) -> tuple[np.ndarray, np.ndarray]:
        vals = np.zeros(self.capacity)
        present = np.zeros(self.capacity, dtype=bool)
        for r, v in self.leaf.items():
            vals[r] = v
            present[r] = True
        return vals, present


def expand_window_ref(lengths: np.ndarray, starts: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Window rows and ``is_first`` (row is some episode's first row), by Python loops."""
    firsts = set()
    row = 0
    for n in lengths:
        firsts.add(row)
        row += int(n)
    idx = np.array([[int(s) + t for t in range(window)] for s in starts], dtype=np.int64)
    first = np.array([[int(s) + t in firsts for t in range(window)] for s in starts], dtype=bool)
    return idx.reshape(len(starts), window), first.reshape(len(starts), window)


def in_episode_starts_ref(lengths: np.ndarray, window: int) -> list[int]:
    """Every start whose window of ``window`` rows stays inside one episode, in order."""
    out: list[int] = []
    row = 0
    for n in lengths:
        out.extend(range(row, row + int(n) - window + 1))
        row += int(n)
    return out


# --------------------------------------------------------------------------- replay
def ring_put_ref(dst: np.ndarray, src: np.ndarray, ring_base: int, ring_cap: int, cursor: int) -> None:
    """Row-by-row ring write: row ``i`` of ``src`` to ``ring_base + (cursor + i) % ring_cap``
    (later rows overwrite earlier ones landing in the same slot)."""
    for i in range(src.shape[0]):
        dst[ring_base + (cursor + i) % ring_cap] = src[i]


def time_order_ref(n_demo: int, ring_base: int, ring_cap: int, size: int, cursor: int) -> list[int]:
    """Physical rows in time order: demo rows, then the ring oldest first."""
    oldest = (cursor - size) % ring_cap
    return list(range(n_demo)) + [ring_base + (oldest + t) % ring_cap for t in range(size)]


def quantize_ref(x: np.ndarray, low: float, high: float) -> np.ndarray:
    """uint8 codes: clip to [low, high], scale to 0..255, round half up; NaN -> 0."""
    x = np.asarray(x, dtype=np.float64)
    y = np.clip(np.nan_to_num(x, nan=low), low, high)
    return np.floor((y - low) * (255.0 / (high - low)) + 0.5).astype(np.uint8)


def dequantize_ref(q: np.ndarray, low: float, high: float) -> np.ndarray:
    """float32 ``low + q * (high - low) / 255``."""
    return (low + q.astype(np.float64) * ((high - low) / 255.0)).astype(np.float32)


def ere_window_ref(n: int, k: int, big_k: int, eta: float, c_min: int) -> int:
    """ERE's ``c_k = max(N eta^(k 1000 / K), c_min)``, at most N (and at least 1 when N > 0)."""
    c = int(np.floor(n * eta ** (k * 1000.0 / big_k)))
    return min(n, max(c, c_min)) if n else 0


def sample_ranges_ref(leaves: np.ndarray, ranges: list[tuple[int, int]], u: np.ndarray,
                      beta: float) -> tuple[np.ndarray, np.ndarray]:
    """Stratified prioritized draws restricted to leaf ranges, via cumsum + searchsorted.

    Leaves outside the ranges get mass 0; draw ``i`` takes mass ``(i + u_i) W / B``; the
    weight is ``(leaf / min leaf in ranges) ** -beta``.
    """
    mask = np.zeros(leaves.shape[0], dtype=bool)
    for lo, hi in ranges:
        mask[lo:hi] = True
    # the ranges in the order given: concatenate their leaves
    order = np.concatenate([np.arange(lo, hi) for lo, hi in ranges if hi > lo])
    vals = leaves[order]
    cum = np.cumsum(vals)
    b = u.shape[0]
    masses = (np.arange(b) + u) * cum[-1] / b
    pos = np.minimum(np.searchsorted(cum, masses, side="right"), len(order) - 1)
    rows = order[pos]
    w = (leaves[rows] / vals.min()) ** (-beta)
    return rows.astype(np.int64), w.astype(np.float32)


def window_batch_ref(column: np.ndarray, lengths: np.ndarray, cur: np.ndarray,
                     deltas: list[int] | None) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """LeRobot's window rule, one item and one offset at a time.

    For current row ``c`` in episode ``[s, e)``: each offset ``d`` reads row
    ``max(s, min(e - 1, c + d))`` and is padded when ``c + d < s or c + d >= e``.  Returns
    ``(values, pad, episode)``; ``values`` is ``column[cur]`` and ``pad`` None without deltas.
    """
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    episode = np.array([int(np.searchsorted(starts, c, side="right")) - 1 for c in cur],
                       dtype=np.int64)
    if deltas is None:
        return column[np.asarray(cur, dtype=np.int64)], None, episode
    vals = []
    pads = []
    for c, k in zip(cur, episode, strict=True):
        s, e = int(starts[k]), int(starts[k] + lengths[k])
        vals.append([column[max(s, min(e - 1, int(c) + d))] for d in deltas])
        pads.append([(int(c) + d < s) or (int(c) + d >= e) for d in deltas])
    return np.asarray(vals, dtype=column.dtype), np.asarray(pads, dtype=bool), episode

# --------------------------------------------------------------------------- replay streams
# A stream is a list of rows (dicts with "reward", "done", "truncated"), oldest first, as a
# plain Python model holds it (one deque per env); index t is the row's position in it.
def nstep_ref(stream: list[dict], t: int, n: int, gamma: float) -> tuple[float, float, int]:
    """Brute-force n-step target of row ``t``: (return, discount, index of row t+m-1).

    Stops after a done row (discount 0), after a truncated row and at the stream's newest
    row (discount gamma**m: bootstrap from what exists)."""
    ret = 0.0
    for k in range(n):
        row = stream[t + k]
        ret += gamma**k * float(row["reward"])
        if row["done"]:
            return ret, 0.0, t + k
        if row["truncated"] or t + k + 1 >= len(stream):
            return ret, gamma ** (k + 1), t + k
    return ret, gamma**n, t + n - 1


def frame_stack_ref(stream: list[dict], t: int, depth: int) -> list[int]:
    """Indices of the frames stacked at row ``t``, oldest first: earlier rows of the same
    episode, the episode's first held row repeated before its start."""
    out = [t]
    q = t
    for _ in range(depth - 1):
        if q > 0 and not (stream[q - 1]["done"] or stream[q - 1]["truncated"]):
            q -= 1
        out.insert(0, q)
    return out


def window_ref(stream: list[dict], s: int, t_len: int, within: bool) -> tuple[list[int], list[bool]]:
    """Rows of a window of ``t_len`` steps from ``s`` and its padding flags (``within``:
    stop after an episode end or the newest row, repeat the last row)."""
    rows, pad = [], []
    q, padded = s, False
    for _ in range(t_len):
        rows.append(q)
        pad.append(padded)
        if padded:
            continue
        end = stream[q]["done"] or stream[q]["truncated"]
        if within and (end or q + 1 >= len(stream)):
            padded = True
        elif q + 1 < len(stream):
            q += 1
    return rows, pad
