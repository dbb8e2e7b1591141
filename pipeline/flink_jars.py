"""Flink's Kafka connector, the Kafka client and its codecs, as jars the job hands Flink (``pipeline.jars``).

They come from a registry package, pinned by its hash (:data:`PACKAGE`, :data:`SHA256`): ``make
setup`` downloads it once with pip's hash check, takes the jars out of it into the
environment (:data:`JARS_DIR`) and checks each jar's manifest (vendor and version) before it is
used. Nothing is downloaded at run time: a job without them says to run ``make setup``.

    python -m pipeline.flink_jars install                          # make setup does this
    python -m pipeline.flink_jars download --into wheelhouse       # make image: then, in the build,
    python -m pipeline.flink_jars install --find-links /wheels     # offline
    connector_jars()                        # [Path(.../flink-connector-kafka.jar), Path(.../kafka-clients.jar)]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from tokenizer_service.errors import TokmaintError

# The Apache jars, as released, redistributed on PyPI (the package holds a whole Flink 2.0 lib/;
# only these are taken: the rest would clash with the 2.3 distribution the apache-flink wheel has).
PACKAGE = "shigawire-apache-flink-libraries==2.0.0.post1"
SHA256 = "aaa65537d3f0c0ff279185d8243024f0efd95788ba044bf249ba0f40b69289cd"
# Each jar's path in the package, and the manifest (or properties file) entries that name its vendor and version.
JARS = {
    "flink-connector-kafka.jar": (
        "pyflink/lib/flink-connector-kafka.jar",
        "META-INF/MANIFEST.MF",
        {"Implementation-Vendor": "The Apache Software Foundation", "Implementation-Version": "4.0.1-2.0"},
    ),
    "kafka-clients.jar": ("pyflink/lib/kafka-clients.jar", "kafka/kafka-version.properties", {"version": "3.9.1"}),
    # The codecs the Kafka client reads compressed batches with (tokmaint's producers compress).
    "zstd-jni.jar": (
        "pyflink/lib/zstd-jni.jar",
        "META-INF/MANIFEST.MF",
        {"Implementation-Title": "zstd-jni", "Implementation-Version": "1.5.6-4"},
    ),
    "lz4-java.jar": (
        "pyflink/lib/lz4-java.jar",
        "META-INF/MANIFEST.MF",
        {"Bundle-Name": "LZ4 Java Compression", "Bundle-Version": "1.8.0"},
    ),
    "snappy-java.jar": (
        "pyflink/lib/snappy-java.jar",
        "META-INF/MANIFEST.MF",
        {"Bundle-Vendor": "xerial.org", "Bundle-Version": "1.1.10.7"},
    ),
}
JARS_DIR = Path(sys.prefix) / "share" / "tokmaint" / "flink-jars"


def entries(text: str) -> dict[str, str]:
    """A manifest's or a properties file's ``name: value`` / ``name=value`` lines.

    >>> entries("Manifest-Version: 1.0\\nImplementation-Version: 4.0.1-2.0\\n")["Implementation-Version"]
    '4.0.1-2.0'
    >>> entries("commitId=f745\\nversion=3.9.1\\n")["version"]
    '3.9.1'
    """
    found = {}
    for line in text.splitlines():
        name, sep, value = line.partition(": ") if ": " in line else line.partition("=")
        if sep:
            found[name.strip()] = value.strip()
    return found


def problems(folder: Path = JARS_DIR) -> list[str]:
    """What is wrong with the jars in ``folder``: missing, unreadable, another vendor or version."""
    found = []
    for name, (_, entry, expected) in JARS.items():
        path = folder / name
        if not path.is_file():
            found.append(f"{path} is missing")
            continue
        try:
            with zipfile.ZipFile(path) as jar:
                have = entries(jar.read(entry).decode("utf-8", "replace"))
        except (zipfile.BadZipFile, KeyError) as exc:
            found.append(f"{path}: no {entry} ({exc})")
            continue
        found += [
            f"{path}: {key} is {have.get(key)!r}, not {value!r}"
            for key, value in expected.items()
            if have.get(key) != value
        ]
    return found


def download(into: Path, *, find_links: Path | None = None) -> Path:
    """:data:`PACKAGE`'s wheel in ``into``, fetched with pip's hash check (from ``find_links``
    alone, without an index, when given: an offline image build)."""
    with tempfile.TemporaryDirectory() as scratch:
        requirement = Path(scratch) / "requirements.txt"
        requirement.write_text(f"{PACKAGE} --hash=sha256:{SHA256}\n")
        source = ["--no-index", "--find-links", str(find_links)] if find_links else []
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--require-hashes",
                *source,
                "-r",
                str(requirement),
                "-d",
                str(into),
            ],
            check=True,
        )
    name = PACKAGE.split("==")[0].replace("-", "_")
    return next(Path(into).glob(f"{name}-*.whl"))


def install(folder: Path = JARS_DIR, *, find_links: Path | None = None) -> list[Path]:
    """Download :data:`PACKAGE` with pip's hash check and take its jars into ``folder``
    (checked); nothing when they are there and right already."""
    if not problems(folder):
        return [folder / name for name in JARS]
    with tempfile.TemporaryDirectory() as scratch:
        wheel = download(Path(scratch), find_links=find_links)
        folder.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as package:
            for name, (inside, _, _) in JARS.items():
                (folder / f"{name}.part").write_bytes(package.read(inside))
                (folder / f"{name}.part").replace(folder / name)
    if found := problems(folder):
        raise TokmaintError("the Flink connector jars fail their check: " + "; ".join(found))
    return [folder / name for name in JARS]


def connector_jars(folder: Path = JARS_DIR) -> list[Path]:
    """The jars, checked; a clear error when ``make setup`` has not put them there."""
    if found := problems(folder):
        raise TokmaintError(
            "the Flink Kafka connector is not installed right ("
            + "; ".join(found)
            + "): run `make setup` (or `python -m pipeline.flink_jars install`)"
        )
    return [folder / name for name in JARS]


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m pipeline.flink_jars", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "action",
        choices=["install", "download"],
        help="install: the jars into this environment; download: the package's wheel into --into",
    )
    parser.add_argument("--find-links", type=Path, help="a folder holding the wheel (no index is asked)")
    parser.add_argument("--into", type=Path, default=Path("."), help="where download puts the wheel")
    args = parser.parse_args()
    if args.action == "install":
        print("\n".join(map(str, install(find_links=args.find_links))))
    else:
        print(download(args.into, find_links=args.find_links))
