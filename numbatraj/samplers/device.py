"""Philox4x32-10 and the uniform sampler whose stream lives on the device.

:func:`philox4x32_10` is the counter-based generator of Salmon et al. (SC'11), written once
in ``_philox.py`` and compiled for the host and, in ``_uniform_cuda.py``, as a CUDA device
function.  :class:`UniformDeviceSampler` draws one index per lane per call: lane ``i`` of draw
``d`` is ``philox4x32_10(counter=(d_lo, d_hi, i_lo, i_hi), key=(seed_lo, seed_hi))``, its
first two output words taken as one 64-bit word ``w`` and mapped to ``floor(w * n / 2**64)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from numbatraj._checks import check_count, check_seed
from numbatraj.data.index_batch import IndexBatch
from numbatraj.errors import SamplerError
from numbatraj.samplers import _philox

__all__ = ["philox4x32_10", "UniformDeviceSampler"]

_U32 = 0xFFFFFFFF


def _words(name: str, value: Any, width: int) -> np.ndarray:
    a = np.asarray(value)
    if a.dtype.kind not in "iu":
        raise SamplerError(f"{name} must hold unsigned 32-bit integers, got dtype {a.dtype}")
    if a.shape[-1:] != (width,) or a.ndim not in (1, 2):
        raise SamplerError(f"{name} must have shape ({width},) or (N, {width}), got {a.shape}")
    if a.size and (int(a.min()) < 0 or int(a.max()) > _U32):
        bad = np.flatnonzero(((a < 0) | (a > _U32)).reshape(-1))[0]
        raise SamplerError(
            f"{name} word {bad} is {a.reshape(-1)[bad]}, expected a 32-bit word in [0, 2**32)"
        )
    return np.ascontiguousarray(a.reshape(-1, width).astype(np.uint64))


def philox4x32_10(counter: Any, key: Any) -> np.ndarray:
    """Philox4x32-10 on the host (the same body the device sampler runs).

    Parameters
    ----------
    counter : integer array-like, shape ``(4,)`` or ``(N, 4)``
        Counter words ``(c0, c1, c2, c3)``, each in ``[0, 2**32)``.
    key : integer array-like, shape ``(2,)`` or ``(N, 2)``
        Key words ``(k0, k1)``; broadcast against ``counter`` when one of them is a single block.

    Returns
    -------
    uint32 array, shape ``(4,)`` or ``(N, 4)`` (the shape of ``counter``).
    """
    c = _words("counter", counter, 4)
    k = _words("key", key, 2)
    if k.shape[0] == 1 and c.shape[0] != 1:
        k = np.ascontiguousarray(np.broadcast_to(k, (c.shape[0], 2)))
    elif c.shape[0] == 1 and k.shape[0] != 1:
        c = np.ascontiguousarray(np.broadcast_to(c, (k.shape[0], 4)))
    elif c.shape[0] != k.shape[0]:
        raise SamplerError(f"counter has {c.shape[0]} blocks but key has {k.shape[0]}")
    out = np.empty_like(c)
    _philox._philox_blocks_cpu(c, k, out)
    out32 = out.astype(np.uint32)
    return out32[0] if np.ndim(counter) == 1 and np.ndim(key) == 1 else out32


class UniformDeviceSampler:
    """Uniform rows in ``[0, n_rows)``, one Philox stream per lane, counter in device memory.

    Parameters
    ----------
    n_rows : int
        Population size (>= 1); change it with :meth:`set_n_rows` as a buffer fills.
    batch_size : int
        Lanes per call: every :meth:`sample` returns this many indices.
    seed : int
        Philox key, in ``[0, 2**64)``.
    device : bool
        True (default): run on the GPU (or the CUDA simulator).  False: the host twin, which
        produces the identical index sequence on machines without a GPU.

    Notes
    -----
    ``sample()`` takes no arguments, allocates nothing and does not synchronise: the draw
    counter and ``n_rows`` live in a 3-word uint64 state array ``[draw, blocks_done, n_rows]``
    and the kernel advances ``draw`` itself, so a captured launch sequence (CUDA graph) draws
    fresh indices on each replay.  The returned :class:`IndexBatch` wraps the sampler's own
    output buffer, overwritten by the next call: copy it to keep it.
    """

    def __init__(self, n_rows: int, batch_size: int, seed: int = 0, *, device: bool = True) -> None:
        self._n = check_count("n_rows", n_rows)
        self._batch_size = check_count("batch_size", batch_size)
        self._seed = check_seed(seed)
        self._k0 = np.uint64(self._seed & _U32)
        self._k1 = np.uint64(self._seed >> 32)
        self._device = bool(device)
        host_state = np.array([0, 0, self._n], dtype=np.uint64)
        if self._device:
            from numbatraj._cuda import get_cuda

            cuda = get_cuda()
            from numbatraj.samplers import _uniform_cuda

            tpb = _uniform_cuda.THREADS_PER_BLOCK
            blocks = (self._batch_size + tpb - 1) // tpb
            self._cuda = cuda
            self._state = cuda.to_device(host_state)
            self._out = cuda.device_array(self._batch_size, dtype=np.int64)
            self._launch = _uniform_cuda._philox_rows_cuda[blocks, tpb]
        else:
            self._state = host_state
            self._out = np.zeros(self._batch_size, dtype=np.int64)
        self._batch = IndexBatch(self._out)

    # ------------------------------------------------------------------ properties
    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def n_rows(self) -> int:
        return self._n

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def device(self) -> bool:
        return self._device

    @property
    def state_array(self) -> Any:
        """The uint64 ``[draw, blocks_done, n_rows]`` array (device array when ``device``)."""
        return self._state

    # ------------------------------------------------------------------ sampling
    def sample(self) -> IndexBatch:
        """Draw ``batch_size`` rows and advance the stream; int64 indices, shape ``(B,)``."""
        if self._device:
            self._launch(self._state, self._out, self._k0, self._k1)
        else:
            _philox._philox_rows_cpu(self._state, self._out, self._k0, self._k1)
        return self._batch

    def set_n_rows(self, n_rows: int) -> None:
        """Change the population size (a growing buffer); takes effect from the next draw."""
        n = check_count("n_rows", n_rows)
        if self._device:
            self._state[2:3].copy_to_device(np.array([n], dtype=np.uint64))
        else:
            self._state[2] = n
        self._n = n

    @property
    def draw(self) -> int:
        """How many draws the stream has made (reads device memory: synchronises)."""
        return int(self._host_state()[0])

    def _host_state(self) -> np.ndarray:
        if self._device:
            return np.asarray(self._state.copy_to_host())
        return self._state.copy()

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Seed, population and draw counter: enough to resume the stream exactly."""
        return {
            "kind": "UniformDeviceSampler",
            "seed": self._seed,
            "n_rows": self._n,
            "batch_size": self._batch_size,
            "draw": self.draw,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`; the batch size must match (it sizes the buffers)."""
        if state.get("kind") != "UniformDeviceSampler":
            raise SamplerError(
                f"state is for {state.get('kind')!r}, expected 'UniformDeviceSampler'"
            )
        if int(state["batch_size"]) != self._batch_size:
            raise SamplerError(
                f"state has batch_size {state['batch_size']}, this sampler has {self._batch_size}"
            )
        seed = check_seed(state["seed"])
        n = check_count("n_rows", state["n_rows"])
        draw = check_count("draw", state["draw"], minimum=0)
        self._seed, self._k0, self._k1 = seed, np.uint64(seed & _U32), np.uint64(seed >> 32)
        self._n = n
        host = np.array([draw, 0, n], dtype=np.uint64)
        if self._device:
            self._state.copy_to_device(host)
        else:
            self._state[:] = host

    def __repr__(self) -> str:
        where = "device" if self._device else "host twin"
        return (
            f"UniformDeviceSampler(n_rows={self._n}, batch_size={self._batch_size}, "
            f"seed={self._seed}, {where})"
        )
