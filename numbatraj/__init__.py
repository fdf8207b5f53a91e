"""numbatraj: the storage layer underneath RL and robot-learning training.

The public API is re-exported here; implementation modules are private.
"""

from numbatraj._version import __version__
from numbatraj.data import (
    RESERVED_COLUMNS,
    ColumnSpec,
    IndexBatch,
    ResidentColumn,
    TrajectoryStore,
    TrajectoryStoreWriter,
    ValidationReport,
    WindowedColumn,
    validate_store,
)
from numbatraj.errors import (
    DeviceUnavailableError,
    EpisodeError,
    IntegrityError,
    NotAStoreError,
    NumbatrajError,
    RowIndexError,
    SamplerError,
    SchemaError,
)
from numbatraj.samplers import (
    PrioritizedSampler,
    SequenceWindowSampler,
    SumTree,
    UniformDeviceSampler,
    UniformSampler,
    WindowSampler,
    philox4x32_10,
)

__all__ = [
    "__version__",
    "ColumnSpec",
    "IndexBatch",
    "ResidentColumn",
    "WindowedColumn",
    "RESERVED_COLUMNS",
    "TrajectoryStore",
    "TrajectoryStoreWriter",
    "ValidationReport",
    "validate_store",
    "PrioritizedSampler",
    "SequenceWindowSampler",
    "SumTree",
    "UniformDeviceSampler",
    "UniformSampler",
    "WindowSampler",
    "philox4x32_10",
    "NumbatrajError",
    "SchemaError",
    "EpisodeError",
    "IntegrityError",
    "NotAStoreError",
    "RowIndexError",
    "SamplerError",
    "DeviceUnavailableError",
]
