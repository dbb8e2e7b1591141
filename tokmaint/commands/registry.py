"""``tokmaint registry``: run the registry server, migrate its database, and talk to a server.

The client commands use ``registry.client`` (the library the trainer and the pipeline reuse);
the server's URL comes from ``--registry`` or ``TOKMAINT_REGISTRY_URL``, the write token from
``TOKMAINT_REGISTRY_TOKEN``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokmaint.commands import add_server_options, add_wait_option
from tokmaint.options import add_bench_options, add_settings, chosen_settings, finish_command, settings_errors
from tokmaint.output import claim_file, print_result, print_rows, replace_file, show_progress
from tokenizer_service.settings import Number, whole
from tokenizer_service.tokenizer_json import MAX_ID_SPACE

if TYPE_CHECKING:
    from pydantic import BaseModel


def cmd_serve(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from registry.api.lingering_close import serve
    from registry.api.main import create_app
    from registry.config import RegistrySettings
    from tokenizer_service.errors import TokmaintError
    from tokenizer_service.heap import tune_collector_for_parses

    chosen = {k: v for k, v in (("db", args.db), ("artifacts", args.artifacts)) if v is not None}
    try:
        settings = RegistrySettings(insecure_dev=args.insecure_dev, **chosen)
    except ValidationError as exc:
        raise TokmaintError(settings_errors(exc, RegistrySettings, chosen)) from None
    if settings.token is None:
        print("tokmaint: warning: --insecure-dev: writes need no token; never expose this server", flush=True)
    app = create_app(settings)
    tune_collector_for_parses()
    serve(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


def _store(args: argparse.Namespace):
    """Where the registry keeps its versions: the options over ``TOKMAINT_REGISTRY_DB`` and ``_ARTIFACTS``."""
    from registry.config import RegistryStoreSettings

    return chosen_settings(args.parser, args, RegistryStoreSettings)


def cmd_migrate(args: argparse.Namespace) -> int:
    from registry.db import migrate

    store = _store(args)
    migrate(store.db)
    print_result({"migrated": store.db}, as_json=args.json)
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    from registry.artifacts import LocalArtifactStore
    from registry.db import check_schema, make_engine
    from registry.store import Registry
    from tokenizer_service.errors import TokmaintError

    store = _store(args)
    engine = make_engine(store.db)
    try:
        # A database of an older schema has no pins: a server that old does not pin what it
        # publishes, and this gc would find no table for them.
        check_schema(engine, store.db)
    except LookupError as exc:
        engine.dispose()
        raise TokmaintError(str(exc)) from None
    registry = Registry(engine, LocalArtifactStore(store.artifacts))
    try:
        # Past 3e306 minutes the seconds would overflow to inf: any such age keeps everything.
        older_than = min(args.older_than_minutes * 60, sys.float_info.max)
        result = registry.collect_garbage(older_than=older_than, dry_run=args.dry_run)
    finally:
        registry.close()
        engine.dispose()
    print_result(result, as_json=args.json)
    return 0


def _add_store_options(parser: argparse.ArgumentParser, *, artifacts: bool = True) -> None:
    """``--db`` (and ``--artifacts``) of a command that opens the registry's store."""
    from registry.config import RegistryStoreSettings

    add_settings(parser, RegistryStoreSettings, skip=() if artifacts else ("artifacts",))


def add_registry(registry: argparse.ArgumentParser) -> None:
    """``registry serve``, ``registry migrate``, ``registry gc``, the client commands and ``registry relay``."""
    commands = registry.add_subparsers(dest="registry_command", required=True, parser_class=type(registry))

    serve = commands.add_parser("serve", help="run the registry's HTTP API (uvicorn)")
    _add_store_options(serve)
    add_server_options(serve, port=8000)
    serve.set_defaults(func=cmd_serve, parser=serve, json=False)

    migrate = commands.add_parser("migrate", help="bring a registry database to the newest schema")
    _add_store_options(migrate, artifacts=False)
    finish_command(migrate, cmd_migrate)
    gc_command = commands.add_parser(
        "gc", help="remove the artifacts no version names (left by refused or killed publishes)"
    )
    _add_store_options(gc_command)
    gc_command.add_argument(
        "--older-than-minutes",
        type=Number(float, low=0),
        default=60.0,
        help="only artifacts put longer ago than this, a finite number ≥ 0 (whatever it is, "
        "nothing a version, a model or a publish under way names is removed; default: 60)",
    )
    gc_command.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    finish_command(gc_command, cmd_gc)
    add_client_commands(commands)
    add_relay(commands)


def _client(args: argparse.Namespace):
    from registry.client import RegistryClient

    return RegistryClient(args.registry)


def _read(path: str) -> bytes:
    from tokenizer_service.errors import TokmaintError

    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TokmaintError(f"{path}: {exc.strerror or exc}") from None


def cmd_create(args: argparse.Namespace) -> int:
    if (args.tokenizer is None) == (args.train is None):
        args.parser.error("create from one of a tokenizer.json or --train CORPUS")
    if args.train is not None:
        from tokenizer_service.bpe import BPETokenizer
        from tokenizer_service.corpus import read_corpus
        from tokenizer_service.validation import validate

        texts = read_corpus(args.train).texts[: args.train_docs]  # the oldest: a corpus is in time order
        tokenizer = BPETokenizer.train(texts, vocab_size=args.vocab_size, progress=show_progress(args))
        validate(tokenizer).raise_for_reasons(source="the trained tokenizer")
        data = tokenizer.to_json_bytes()
    else:
        data = _read(args.tokenizer)
    from registry.client import RegistryRefused

    with _client(args) as client:
        try:
            info = client.create(args.name, data, kind=args.kind)
        except RegistryRefused as exc:
            if not (args.exist_ok and exc.code == "lineage_exists"):
                raise
            info = client.version(args.name, 1)
    print_result(info.model_dump(mode="json"), as_json=args.json)
    return 0


def _answer(args: argparse.Namespace, ask: Callable[[Any], BaseModel]) -> int:
    """Print what ``ask(client)`` answers (as the registry sent it), a client of ``--registry``
    open meanwhile."""
    with _client(args) as client:
        print_result(ask(client).model_dump(mode="json"), as_json=args.json)
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    return _answer(
        args,
        lambda client: client.publish(
            args.name,
            _read(args.tokenizer),
            diff_json=_read(args.diff) if args.diff else None,
            kind=args.kind,
            parent=args.parent,
        ),
    )


def cmd_list(args: argparse.Namespace) -> int:
    from schemas.registry_api import LineagesPublic

    with _client(args) as client:
        page = client.versions(args.name, offset=args.offset, limit=args.limit) if args.name else None
        lineages = client.lineages() if page is None else None
    if args.json:
        print_result((page or LineagesPublic(data=lineages, count=len(lineages))).model_dump(mode="json"), as_json=True)
        return 0
    if page is None:
        print_rows([{"lineage": r.name, "latest": r.latest} for r in lineages]) if lineages else print("no lineages")
        return 0
    shown = ("number", "parent", "kind", "vocab_size", "changed_ids", "sha256", "created_at")
    rows = [{k: v[k] for k in shown} for v in page.model_dump(mode="json")["data"]]
    if rows:
        print_rows(rows)
    print(f"{page.count} versions")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    return _answer(args, lambda client: client.version(args.name, args.version))


def cmd_diff(args: argparse.Namespace) -> int:
    with _client(args) as client:
        diff = (
            client.composed_diff(args.name, args.start, args.end)
            if args.start is not None
            else client.diff(args.name, args.version)
        )
    data = diff.to_dict()
    data["entries"] = data.pop("entries")  # last, as the registry serves a diff
    print(json.dumps(data, indent=1, ensure_ascii=False))
    return 0


def cmd_alias(args: argparse.Namespace) -> int:
    if args.delete:
        with _client(args) as client:
            client.delete_alias(args.name, args.alias)
        print_result({"deleted": args.alias}, as_json=args.json)
        return 0
    return _answer(args, lambda client: client.set_alias(args.name, args.alias, args.version))


def cmd_rollback(args: argparse.Namespace) -> int:
    return _answer(args, lambda client: client.rollback(args.name, args.to))


def cmd_publish_model(args: argparse.Namespace) -> int:
    folder = Path(args.model)
    if not (folder / "config.json").is_file():
        args.parser.error(f"{folder} is not a model folder (no config.json): tokmaint trainer export writes one")
    version = args.version if args.version is not None else _stamped_version(folder)
    return _answer(args, lambda client: client.publish_model(args.name, folder, version=version))


def _stamped_version(folder: Path) -> int:
    """The version a model folder's ``tokmaint.json`` says it was trained with."""
    from tokenizer_service.errors import TokmaintError

    stamp = folder / "tokmaint.json"
    if not stamp.is_file():
        raise TokmaintError(
            f"{folder} does not say which version it was trained with (no tokmaint.json): give --version"
        )
    try:
        written = json.loads(stamp.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise TokmaintError(f"{stamp} is not JSON ({str(exc).splitlines()[0]}): give --version") from None
    if not isinstance(written, dict):
        raise TokmaintError(
            f"{stamp} is not a JSON object (tokmaint trainer export writes lineage and version there): give --version"
        )
    version = written.get("version")
    if type(version) is not int or version < 1:
        raise TokmaintError(f"{stamp} names no version number (version: {version!r}): give --version")
    return version


def cmd_download(args: argparse.Namespace) -> int:
    out = claim_file(args.out, option="--out", force=args.force)  # before the download
    with _client(args) as client:
        data = client.download(args.name, args.version)
    replace_file(out, data)
    print_result({"written": args.out, "bytes": len(data)}, as_json=args.json)
    return 0


def add_client_commands(commands: argparse._SubParsersAction) -> None:
    """The commands that talk HTTP to a registry server."""

    def client_parser(name: str, help_text: str, func) -> argparse.ArgumentParser:
        p = commands.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--registry", help="the registry's URL (default: TOKMAINT_REGISTRY_URL)")
        finish_command(p, func)
        return p

    p = client_parser(
        "create", "create a lineage from a tokenizer.json, or one trained on a corpus (its version 1)", cmd_create
    )
    p.add_argument("name")
    p.add_argument("tokenizer", nargs="?", help="tokenizer.json")
    p.add_argument("--train", metavar="CORPUS", help="or train a byte-level BPE on the corpus's oldest documents")
    p.add_argument(
        "--train-docs", type=whole(1), default=10_000, help="documents --train trains on, ≥ 1 (default: 10000)"
    )
    p.add_argument(
        "--vocab-size",
        type=whole(257, MAX_ID_SPACE),
        default=4096,
        help="vocabulary --train trains: more than the 256 bytes of the byte alphabet, at most "
        f"{MAX_ID_SPACE:,} ids (default: 4096)",
    )
    p.add_argument(
        "--exist-ok", action="store_true", help="an existing lineage is not an error (its version 1 is printed)"
    )
    p.add_argument("--kind", choices=["initial", "import"], default="initial")
    p = client_parser("publish", "publish a new version of a lineage", cmd_publish)
    p.add_argument("name")
    p.add_argument("tokenizer", help="tokenizer.json")
    p.add_argument("--diff", help="its revision diff (default: the registry computes it)")
    p.add_argument("--kind", choices=["tedtok", "litetoken", "import"], default="import")
    p.add_argument("--parent", type=whole(1), help="the version it was made from (refused if no longer the latest)")
    p = client_parser("list", "list lineages, or a lineage's versions", cmd_list)
    p.add_argument("name", nargs="?")
    p.add_argument("--offset", type=whole(0), default=0)
    p.add_argument("--limit", type=whole(1), default=100)
    p = client_parser("show", "one version's record", cmd_show)
    p.add_argument("name")
    p.add_argument("version", nargs="?", default="latest", help="a number, latest or an alias (default: latest)")
    p = client_parser("diff", "a version's diff, or one composed diff --from M [--to N]", cmd_diff)
    p.add_argument("name")
    p.add_argument("version", nargs="?", default="latest")
    p.add_argument("--from", dest="start", type=int, help="compose from this version")
    p.add_argument("--to", dest="end", type=int, help="to this version (default: the latest)")
    p = client_parser("alias", "point an alias at a version, or --delete it", cmd_alias)
    p.add_argument("name")
    p.add_argument(
        "alias",
        help="a name the Hub reads as no other revision: not main, latest or HEAD (in any case), digits, v and "
        "digits, or 40 hex characters",
    )
    p.add_argument("version", nargs="?", default="latest")
    p.add_argument("--delete", action="store_true")
    p = client_parser("rollback", "publish a new version equal to an older one", cmd_rollback)
    p.add_argument("name")
    p.add_argument("to", type=int)
    p = client_parser(
        "publish-model",
        "publish a model folder (tokmaint trainer export's) beside the version it "
        "was trained with; from_pretrained reads it as the repository NAME-models",
        cmd_publish_model,
    )
    p.add_argument("name")
    p.add_argument(
        "--model", required=True, help="the model folder (config.json, the weights, the version's tokenizer.json)"
    )
    p.add_argument("--version", help="the version it was trained with (default: the folder's tokmaint.json says)")
    p = client_parser("download", "download a version's tokenizer.json (verified against its sha256)", cmd_download)
    p.add_argument("name")
    p.add_argument("version", nargs="?", default="latest")
    p.add_argument("--out", required=True, metavar="FILE", help="the file to write: a new one, unless --force")
    p.add_argument("--force", action="store_true", help="replace the file --out names")


def cmd_bench_registry(args: argparse.Namespace) -> int:
    from registry.bench import RegistryBenchSettings, run_registry_bench

    settings = chosen_settings(args.parser, args, RegistryBenchSettings)
    print_result(run_registry_bench(args.corpus, settings, progress=show_progress(args)), as_json=args.json)
    return 0


def add_bench_registry(p: argparse.ArgumentParser) -> None:
    from registry.bench import RegistryBenchSettings

    add_bench_options(
        p,
        RegistryBenchSettings,
        cmd_bench_registry,
        corpus="JSONL(.gz) or .txt(.gz) to train the published tokenizer on",
    )


def cmd_relay(args: argparse.Namespace) -> int:
    from pipeline.kafka import Producer
    from pipeline.parts import wait_for
    from pipeline.config import PipelineSettings
    from registry.artifacts import LocalArtifactStore
    from registry.db import check_schema, make_engine
    from registry.relay import relay_forever, relay_once
    from registry.store import Registry

    store = _store(args)
    kafka = chosen_settings(args.parser, args, PipelineSettings)
    engine = make_engine(store.db)
    # Started beside the server on a fresh database, it waits for the server to create the schema.
    wait_for(
        f"the registry's database at {store.db}",
        lambda: check_schema(engine, store.db),
        wait=args.wait,
        errors=(LookupError,),
    )
    registry = Registry(engine, LocalArtifactStore(store.artifacts))
    producer = Producer(kafka.bootstrap)
    try:
        if args.once:
            print_result({"sent": relay_once(registry, producer, topic=kafka.revisions_topic)}, as_json=args.json)
        else:
            relay_forever(registry, producer, topic=kafka.revisions_topic, interval=args.interval)
    finally:
        producer.close()
    return 0


def add_relay(commands: argparse._SubParsersAction) -> None:
    from pipeline.config import PipelineSettings

    relay = commands.add_parser("relay", help="send the registry's revision events to Kafka (at least once)")
    _add_store_options(relay)
    add_settings(relay, PipelineSettings, only=("bootstrap",))
    relay.add_argument(
        "--topic",
        dest="revisions_topic",
        metavar="TOPIC",
        help="the revision events' topic (default: TOKMAINT_PIPELINE_REVISIONS_TOPIC or tokenizer.revisions)",
    )
    relay.add_argument("--once", action="store_true", help="send what is pending, then stop")
    relay.add_argument(
        "--interval",
        type=Number(float, low=0, low_open=True),
        default=1.0,
        help="seconds between polls of the outbox (default: 1)",
    )
    add_wait_option(relay, waits_for="the registry server to create its database's schema")
    finish_command(relay, cmd_relay)
