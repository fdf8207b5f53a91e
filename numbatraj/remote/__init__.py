"""Remote datasets, the client side: the catalog client, recording sync and asset packs.

See docs/remote.md.  The transfer itself is :func:`numbatraj.io.download.fetch`; the
service a lab runs is :mod:`numbatraj.catalog`, of which this package imports only the
protocol (names and routes).
"""

from numbatraj.io.dotenv import read_dotenv
from numbatraj.remote.assets import pull_packs
from numbatraj.remote.client import ENV_KEY, ENV_URL, PullResult, RemoteCatalog
from numbatraj.remote.recording import RecordingSync

__all__ = [
    "ENV_KEY",
    "ENV_URL",
    "PullResult",
    "RecordingSync",
    "RemoteCatalog",
    "pull_packs",
    "read_dotenv",
]
