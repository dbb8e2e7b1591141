"""``tokmaint registry``: run the registry server, migrate its database, and talk to a server.

The client commands use ``registry.client`` (the library the trainer and the pipeline reuse);
the server's URL comes from ``--registry`` or ``TOKMAINT_REGISTRY_URL``, the write token from
``TOKMAINT_REGISTRY_TOKEN``.
"""

from __future__ import annotations

import argparse
import os

from tokmaint.cli import print_result


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from registry.api.main import create_app
    from registry.config import RegistrySettings
    from tokenizer_service.errors import TokmaintError

    chosen = {k: v for k, v in (("db", args.db), ("artifacts", args.artifacts)) if v is not None}
    try:
        settings = RegistrySettings(insecure_dev=args.insecure_dev, **chosen)
    except ValidationError as exc:
        raise TokmaintError("; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())) from None
    if settings.token is None:
        print("tokmaint: warning: --insecure-dev: writes need no token; never expose this server", flush=True)
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level=args.log_level)
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from registry.db import migrate

    migrate(args.db)
    print_result({"migrated": args.db}, as_json=args.json)
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """``registry serve`` and ``registry migrate``."""
    registry = sub.add_parser("registry", help="the versioned tokenizer registry: server and client")
    commands = registry.add_subparsers(dest="registry_command", required=True, parser_class=type(registry))

    serve = commands.add_parser("serve", help="run the registry's HTTP API (uvicorn)")
    serve.add_argument("--db", help="SQLAlchemy URL (default: TOKMAINT_REGISTRY_DB or "
                                    "sqlite:///tokmaint-registry/registry.db)")
    serve.add_argument("--artifacts", help="artifact directory (default: TOKMAINT_REGISTRY_ARTIFACTS or "
                                           "tokmaint-registry/artifacts)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    serve.add_argument("--insecure-dev", action="store_true",
                       help="accept writes without a bearer token (development only; TOKMAINT_REGISTRY_TOKEN unset)")
    serve.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    serve.set_defaults(func=cmd_serve, parser=serve, json=False)

    migrate = commands.add_parser("migrate", help="bring a registry database to the newest schema")
    migrate.add_argument("--db", default=os.environ.get("TOKMAINT_REGISTRY_DB", "sqlite:///tokmaint-registry/"
                                                                                 "registry.db"),
                         help="SQLAlchemy URL (default: TOKMAINT_REGISTRY_DB or the embedded SQLite file)")
    migrate.add_argument("--json", action="store_true", help="print JSON")
    migrate.set_defaults(func=cmd_migrate, parser=migrate)
