"""``numbatraj catalog serve|keys|migrate``: run the catalog service a lab deploys."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

__all__ = ["register"]


def _cmd_serve(args: argparse.Namespace) -> int:
    from numbatraj.catalog.db import mask_password
    from numbatraj.catalog.service import CatalogService

    workers = getattr(args, "workers", 1)
    extra: dict[str, Any] = {}
    if workers != 1:
        extra["workers"] = workers
    if getattr(args, "header_timeout", None) is not None:
        extra["header_timeout"] = args.header_timeout
    svc = CatalogService(
        args.db, args.objects, host=args.host, port=args.port, public_url=args.public_url,
        get_expiry_s=args.get_expiry, put_expiry_s=args.put_expiry, verbose=args.verbose,
        **extra,
    )
    from numbatraj.catalog.guard import raise_open_file_limit

    before, after = raise_open_file_limit()
    print(f"numbatraj catalog on {svc.url}  db={mask_password(args.db)}  "
          f"objects={svc.objects.description}  workers={workers}  "
          f"open-files={before}->{after}", flush=True)
    try:
        svc.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        svc.stop()
    return 0


def _open(db_url: str) -> Any:
    from numbatraj.catalog.db import open_db

    return open_db(db_url)


def _cmd_add_key(args: argparse.Namespace) -> int:
    db = _open(args.db)
    try:
        key = db.add_key(args.role, args.label)
        key_id = db.keys()[-1].id
    finally:
        db.close()
    print(key)
    print(f"({args.role} key {key_id}; stored hashed, shown only now)", file=sys.stderr)
    return 0


def _when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def _cmd_list_keys(args: argparse.Namespace) -> int:
    db = _open(args.db)
    try:
        keys = [k.public() for k in db.keys()]
    finally:
        db.close()
    if args.json:
        print(json.dumps(keys, indent=2))
        return 0
    rows = [("id", "role", "label", "created", "last_used", "revoked")]
    rows += [(k["id"], k["role"], k["label"] or "-", _when(k["created"]),
              _when(k["last_used"]), _when(k["revoked"])) for k in keys]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0


def _cmd_revoke_key(args: argparse.Namespace) -> int:
    db = _open(args.db)
    try:
        k = db.revoke_key(args.id)
    finally:
        db.close()
    print(f"revoked {k.id} ({k.role}, {k.label or 'no label'}); refused from the next request")
    return 0


def _cmd_migrate(args: argparse.Namespace) -> int:
    db = _open(args.db)  # opening applies the missing migrations
    try:
        print(f"schema version {db.schema_version} (applied now: "
              f"{', '.join(map(str, db.migrated)) or 'none'})")
    finally:
        db.close()
    return 0


def _key_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", default="sqlite:///catalog.db")
    p.add_argument("--role", choices=("read", "write"), required=True)
    p.add_argument("--label", default=None)
    p.set_defaults(func=_cmd_add_key)


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
    serve.add_argument("--workers", type=int, default=1,
                       help="uvicorn worker processes sharing the port (default 1)")
    serve.add_argument("--header-timeout", type=float, default=None,
                       help="close a connection that sends no complete request head within "
                       "this many seconds (default 5)")
    serve.add_argument("--verbose", action="store_true", help="log every request")
    serve.set_defaults(func=_cmd_serve)

    keys = cat_sub.add_parser("keys", help="add, list and revoke API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    _key_args(keys_sub.add_parser("add", help="create an API key (printed once)"))
    lst = keys_sub.add_parser("list", help="the stored keys (never the keys themselves)")
    lst.add_argument("--db", default="sqlite:///catalog.db")
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(func=_cmd_list_keys)
    rev = keys_sub.add_parser("revoke", help="refuse a key from the next request on")
    rev.add_argument("--db", default="sqlite:///catalog.db")
    rev.add_argument("id", help="the key's id, as keys list shows it")
    rev.set_defaults(func=_cmd_revoke_key)
    _key_args(cat_sub.add_parser("add-key", help="alias of 'keys add'"))
    mig = cat_sub.add_parser("migrate", help="upgrade the database schema in place")
    mig.add_argument("--db", default="sqlite:///catalog.db")
    mig.set_defaults(func=_cmd_migrate)
