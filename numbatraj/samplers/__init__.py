"""Index policies: which rows a minibatch holds.

A sampler produces an :class:`~numbatraj.data.IndexBatch` and knows nothing about columns,
so policies compose (two calls to one policy give the two index sets a dual sampler needs).
Every sampler takes an integer seed, keeps its own random stream (never numpy's global
state) and has ``state_dict()`` / ``load_state_dict()`` to resume that stream exactly.
"""

from numbatraj.samplers.device import UniformDeviceSampler, philox4x32_10
from numbatraj.samplers.prioritized import PrioritizedSampler, PrioritizedTree
from numbatraj.samplers.sequence import SequenceWindowSampler
from numbatraj.samplers.sumtree import SumTree
from numbatraj.samplers.uniform import UniformSampler
from numbatraj.samplers.window import WindowSampler

__all__ = [
    "PrioritizedSampler",
    "PrioritizedTree",
    "SequenceWindowSampler",
    "SumTree",
    "UniformDeviceSampler",
    "UniformSampler",
    "WindowSampler",
    "philox4x32_10",
]
