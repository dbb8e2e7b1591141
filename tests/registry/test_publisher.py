"""registry/publisher.py: ``evolve --registry`` publishes every version to a real server."""

import json
import os

from registry.client import RegistryClient
from tests.support.cli import EVOLVE_OPTIONS
from tests.support.registry_server import TOKEN


def test_evolve_publishes_every_version_and_continues(server, drifting_corpus, tmp_path, capsys):
    from tokmaint.cli import main

    os.environ["TOKMAINT_REGISTRY_TOKEN"] = TOKEN
    try:
        argv = [
            "evolve",
            "--corpus",
            str(drifting_corpus),
            "--out",
            str(tmp_path / "out"),
            "--registry",
            server,
            "--lineage",
            "stream",
            *EVOLVE_OPTIONS,
            "--json",
        ]
        assert main(argv) == 0
        versions = json.loads(capsys.readouterr().out)["versions"]
        client = RegistryClient(server)
        assert client.version("stream").number == versions > 1
        for n in range(1, versions + 1):
            assert client.download("stream", n) == (tmp_path / "out" / f"v{n:04d}" / "tokenizer.json").read_bytes()
        assert (
            client.diff("stream", 2).to_dict()["entries"]
            == json.loads((tmp_path / "out" / "v0002" / "diff.json").read_text())["entries"]
        )
        assert main(argv) == 0  # the same run again: nothing new
        assert client.version("stream").number == versions
        # Only a registry, and a lineage another run started: refused in one line.
        assert main([*argv[:2], argv[2], "--registry", server, "--lineage", "stream", "--vocab-size", "280"]) == 2
        assert "registry lineage 'stream' version 1 is not this run's" in capsys.readouterr().err
    finally:
        os.environ.pop("TOKMAINT_REGISTRY_TOKEN", None)
