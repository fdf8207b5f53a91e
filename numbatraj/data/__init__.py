"""The store: named columns, the episode index, the manifest, validation."""

from numbatraj.data.column import RESERVED_COLUMNS, ColumnSpec
from numbatraj.data.index_batch import IndexBatch
from numbatraj.data.store import TrajectoryStore
from numbatraj.data.validate import ValidationReport, validate_store
from numbatraj.data.writer import TrajectoryStoreWriter

__all__ = [
    "ColumnSpec",
    "IndexBatch",
    "RESERVED_COLUMNS",
    "TrajectoryStore",
    "TrajectoryStoreWriter",
    "ValidationReport",
    "validate_store",
]
