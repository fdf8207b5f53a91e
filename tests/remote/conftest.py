"""The client tests run against the catalog service's fixtures (tests/catalog/conftest.py)."""

from tests.catalog.conftest import catalog, store

__all__ = ["catalog", "store"]
