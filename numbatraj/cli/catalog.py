"""``numbatraj catalog serve|add-key``: run the catalog service a lab deploys."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["register"]


def _cmd_serve(args: argparse.Namespace) -> int:
    from numbatraj.catalog.db import mask_password
    from numbatraj.catalog.service import CatalogService

    svc = CatalogService(
        args.db, args.objects, host=args.host, port=args.port, public_url=args.public_url,
        get_expiry_s=args.get_expiry, put_expiry_s=args.put_expiry, verbose=args.verbose,
    )
    print(f"numbatraj catalog on {svc.url}  db={mask_password(args.db)}  "
          f"objects={svc.objects.description}", flush=True)
    try:
        svc.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        svc.stop()
    return 0


def _cmd_add_key(args: argparse.Namespace) -> int:
    from numbatraj.catalog.db import open_db

    db = open_db(args.db)
    try:
        key = db.add_key(args.role, args.label)
    finally:
        db.close()
    print(key)
    print(f"({args.role} key; stored hashed, shown only now)", file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    """Add the ``catalog`` command to the ``numbatraj`` parser."""
    cat = subparsers.add_parser("catalog", help="run a dataset catalog service")
    cat_sub = cat.add_subparsers(dest="catalog_command", required=True, metavar="ACTION")
    serve = cat_sub.add_parser("serve", help="serve the catalog (metadata + presigned URLs)")
    serve.add_argument("--db", default="sqlite:///catalog.db",
                       help="sqlite:///catalog.db (default) or postgresql://...")
    serve.add_argument("--objects", required=True,
                       help="file:///srv/objects or s3://bucket?endpoint=URL&region=auto")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8600)
    serve.add_argument("--public-url", default=None,
                       help="URL clients reach this service at (default http://HOST:PORT)")
    serve.add_argument("--get-expiry", type=int, default=3600,
                       help="seconds a download URL stays valid (max 7 days)")
    serve.add_argument("--put-expiry", type=int, default=6 * 3600,
                       help="seconds an upload URL stays valid (max 7 days)")
    serve.add_argument("--verbose", action="store_true", help="log every request")
    serve.set_defaults(func=_cmd_serve)
    key = cat_sub.add_parser("add-key", help="create an API key (printed once)")
    key.add_argument("--db", default="sqlite:///catalog.db")
    key.add_argument("--role", choices=("read", "write"), required=True)
    key.add_argument("--label", default=None)
    key.set_defaults(func=_cmd_add_key)
