"""numbatraj: the storage layer underneath RL and robot-learning training.

The public API is re-exported here; implementation modules are private.
"""

from numbatraj._jit import set_num_threads
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
    CatalogAuthError,
    CatalogError,
    CatalogRequestError,
    DatasetExistsError,
    DatasetNotFoundError,
    DeclarationError,
    DeviceUnavailableError,
    DiskSpaceError,
    DownloadError,
    EpisodeError,
    HubPushError,
    IntegrityError,
    LeRobotFormatError,
    NotAStoreError,
    NumbatrajError,
    ResumeError,
    RowIndexError,
    SamplerError,
    SchemaError,
    SourceFormatError,
    UnsafeArchiveError,
    UnsupportedCodecError,
)
from numbatraj.replay import DemoFile, DemoWriter, Quantization, StoreReplay
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
    "set_num_threads",
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
    "StoreReplay",
    "StoreReplayGpu",
    "DemoFile",
    "DemoWriter",
    "Quantization",
    "NumbatrajError",
    "SchemaError",
    "EpisodeError",
    "IntegrityError",
    "NotAStoreError",
    "RowIndexError",
    "DeviceUnavailableError",
    "DownloadError",
    "CatalogError",
    "CatalogAuthError",
    "CatalogRequestError",
    "DiskSpaceError",
    "SamplerError",
    "UnsafeArchiveError",
    "DeclarationError",
    "SourceFormatError",
    "LeRobotFormatError",
    "ResumeError",
    "DatasetExistsError",
    "DatasetNotFoundError",
    "HubPushError",
    "UnsupportedCodecError",
]


def __getattr__(name: str) -> object:
    # Device classes load on first use, so `import numbatraj` never imports numba.cuda.
    if name == "StoreReplayGpu":
        from numbatraj.replay.gpu import StoreReplayGpu

        return StoreReplayGpu
    raise AttributeError(f"module 'numbatraj' has no attribute {name!r}")
