"""The wheel ``pip install .`` builds holds every package of the repository, with its data files
(a hand-made package list once left ``tokenizer_service.bench`` out, and ``tokmaint`` crashed)."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_every_package_and_its_data(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path)], check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("tokmaint-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = {str(p.parent.relative_to(ROOT)) for p in ROOT.glob("*/**/__init__.py")
                if not {".venv", "tests", "build"} & set(p.relative_to(ROOT).parts)}
    assert "tokenizer_service/bench" in packages
    assert {p for p in packages if f"{p}/__init__.py" not in names} == set()
    assert {"schemas/document.schema.json", "registry/api/templates/lineage.html",
            "registry/migrations/script.py.mako"} <= names
