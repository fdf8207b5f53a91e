"""The store: named columns, the episode index, the manifest, validation."""

from numbatraj.data.column import RESERVED_COLUMNS, ColumnSpec
from numbatraj.data.index_batch import IndexBatch
from numbatraj.data.resident import ResidentColumn
from numbatraj.data.store import TrajectoryStore
from numbatraj.data.validate import ValidationReport, validate_store
from numbatraj.data.windowed import WindowedColumn
from numbatraj.data.writer import TrajectoryStoreWriter

__all__ = [
    "RESERVED_COLUMNS",
    "ColumnSpec",
    "IndexBatch",
    "ResidentColumn",
    "TrajectoryStore",
    "TrajectoryStoreWriter",
    "ValidationReport",
    "WindowedColumn",
    "validate_store",
]
