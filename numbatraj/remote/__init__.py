"""Remote datasets: the catalog client and the catalog service a lab runs itself.

See docs/remote.md.  The transfer itself is :func:`numbatraj.io.download.fetch`.
"""

from numbatraj.remote.assets import pull_packs
from numbatraj.remote.client import ENV_KEY, ENV_URL, PullResult, RemoteCatalog, read_dotenv
from numbatraj.remote.db import CatalogDB, DatasetRecord, open_db
from numbatraj.remote.objects import FileObjects, Presigned, S3Objects, open_objects
from numbatraj.remote.recording import RecordingSync
from numbatraj.remote.service import CatalogService

__all__ = [
    "RecordingSync",
    "pull_packs",
    "ENV_KEY",
    "ENV_URL",
    "CatalogDB",
    "CatalogService",
    "DatasetRecord",
    "FileObjects",
    "Presigned",
    "PullResult",
    "RemoteCatalog",
    "S3Objects",
    "open_db",
    "open_objects",
    "read_dotenv",
]
