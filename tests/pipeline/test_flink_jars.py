"""The connector's jars are checked by their manifests before Flink is handed them."""

import shutil
import zipfile

import pytest

from pipeline.flink_jars import JARS, JARS_DIR, connector_jars, problems
from tokenizer_service.errors import TokmaintError


def test_the_installed_jars_pass_their_check():
    assert problems() == []
    assert [p.name for p in connector_jars()] == list(JARS)


def test_a_jar_of_another_version_or_a_missing_one_is_refused_with_the_reason(tmp_path):
    for name in JARS:
        shutil.copy(JARS_DIR / name, tmp_path / name)
    with zipfile.ZipFile(tmp_path / "flink-connector-kafka.jar", "w") as jar:  # a stand-in of another release
        jar.writestr(
            "META-INF/MANIFEST.MF",
            "Implementation-Vendor: The Apache Software Foundation\nImplementation-Version: 3.2.0-1.19\n",
        )
    (tmp_path / "kafka-clients.jar").unlink()
    found = problems(tmp_path)
    assert any("Implementation-Version is '3.2.0-1.19', not '4.0.1-2.0'" in p for p in found), found
    assert any("kafka-clients.jar is missing" in p for p in found), found
    with pytest.raises(TokmaintError, match="make setup"):
        connector_jars(tmp_path)
