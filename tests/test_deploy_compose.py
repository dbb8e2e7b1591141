"""``docker-compose.yml`` and the ``Dockerfile``, checked as files (``make image`` builds and tries
the image itself):
the compose file against the Compose Specification's JSON schema (the copy that
check-jsonschema vendors), its start order and health checks, and every tokmaint command in it
against the CLI's own parser; the Dockerfile by rules of its own (pinned bases, a non-root
user, an exec-form entrypoint, the dependency layer before the source)."""

import importlib.resources
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from tokmaint.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
_VARIABLE = re.compile(r"\$\{(\w+)(?::([-?])([^}]*))?\}")


def interpolate(value, env: dict[str, str]):
    """Compose's variable syntax, as ``compose config`` resolves it: ``${VAR}``, ``${VAR:-default}``,
    ``${VAR:?error}`` (an error when unset) and ``$$`` (a dollar sign)."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match) -> str:
        name, how, text = match.groups()
        if name in env:
            return env[name]
        if how == "?":
            raise KeyError(f"{name}: {text}")
        return text if how == "-" else ""

    return "$".join(_VARIABLE.sub(one, part) for part in value.split("$$"))


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def resolved(compose) -> dict:
    return interpolate(compose, {"POSTGRES_PASSWORD": "pw", "TOKMAINT_REGISTRY_TOKEN": "t" * 32})


def test_the_compose_file_follows_the_compose_specification(resolved):
    schema = json.loads(
        (importlib.resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json").read_text(
            encoding="utf-8"
        )
    )
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(resolved)]
    assert errors == []
    broken = dict(resolved, services={"x": {"image": "a", "depends_on": {"y": {"condition": "when_ready"}}}})
    assert list(validator.iter_errors(broken))  # the schema does check


def test_secrets_must_be_given(compose):
    for missing in ("POSTGRES_PASSWORD", "TOKMAINT_REGISTRY_TOKEN"):
        env = {"POSTGRES_PASSWORD": "pw", "TOKMAINT_REGISTRY_TOKEN": "t"}
        del env[missing]
        with pytest.raises(KeyError, match=missing):
            interpolate(compose, env)


def test_start_order_waits_on_health_checks(resolved):
    services = resolved["services"]
    for name, service in services.items():
        for needed, condition in service.get("depends_on", {}).items():
            assert needed in services, f"{name} depends on {needed}, which is no service"
            if condition["condition"] == "service_healthy":
                assert "healthcheck" in services[needed], f"{name} waits for {needed}'s health, which has no check"
            if condition["condition"] == "service_completed_successfully":
                assert services[needed]["restart"] == "no", f"{needed} is a one-off: it must not restart"
    for name in ("kafka", "redis", "postgres", "registry"):
        assert "healthcheck" in services[name]
    assert services["pipeline"]["depends_on"]["lineage"]["condition"] == "service_completed_successfully"


def test_the_parts_are_the_real_ones(resolved):
    services = resolved["services"]
    kafka = services["kafka"]
    assert kafka["image"].startswith("apache/kafka:") and "controller" in kafka["environment"]["KAFKA_PROCESS_ROLES"]
    assert "--appendonly" in services["redis"]["command"] and "yes" in services["redis"]["command"]
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["registry"]["environment"]["TOKMAINT_REGISTRY_DB"].startswith("postgresql+psycopg2://")
    for service in services.values():  # every image pinned to a version
        image = service["image"]
        assert ":" in image and not image.endswith(":latest"), image
    gpu = services["trainer-gpu"]
    assert gpu["profiles"] == ["gpu"]
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]


def _tokmaint_commands(resolved) -> dict[str, list[str]]:
    """Each tokmaint service's command line (an ``sh -c`` loop's tokmaint call included)."""
    commands = {}
    for name, service in resolved["services"].items():
        if not service["image"].startswith("tokmaint:"):
            continue
        if "entrypoint" in service:
            script = service["entrypoint"][-1]
            call = re.search(r"tokmaint ([^;]+);", script)[1]
            env = service["environment"]
            commands[name] = [re.sub(r'"?\$(\w+)"?', lambda m: env[m[1]], word) for word in call.split()]
        else:
            commands[name] = service["command"]
    return commands


def test_every_tokmaint_command_parses_and_reads_what_ships(resolved):
    commands = _tokmaint_commands(resolved)
    assert set(commands) >= {"registry", "relay", "lineage", "ingest-server", "pipeline", "revise", "trainer"}
    for name, argv in commands.items():
        build_parser().parse_args(argv)  # exits (fails the test) on an option the CLI lacks
        for word in argv:
            if word.startswith("/app/data/"):
                assert (ROOT / "data" / word.removeprefix("/app/data/")).is_file(), f"{name}: {word} does not ship"


def _stages(text: str) -> tuple[dict[str, str], list[list[tuple[str, str]]]]:
    """The Dockerfile's global build arguments (before the first FROM, with their defaults) and
    its instructions (continuations joined), a list per build stage."""
    arguments: dict[str, str] = {}
    stages: list[list[tuple[str, str]]] = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        if not stages and instruction.upper() == "ARG":
            name, _, default = rest.strip().partition("=")
            arguments[name] = default
            continue
        stages[-1].append((instruction.upper(), rest.strip()))
    return arguments, stages


def test_the_dockerfile_lints_clean():
    arguments, stages = _stages((ROOT / "Dockerfile").read_text(encoding="utf-8"))
    assert len(stages) == 3  # the wheels, a build from them, then a runtime without the build's tools
    for stage in stages:
        base = re.sub(r"\$\{(\w+)\}", lambda m: arguments[m[1]], stage[0][1].split()[0])  # FROM ${BASE}: its default
        assert re.fullmatch(r"[\w./-]+:\d[\w.-]*", base), f"base image not pinned to a version: {base}"
    _, build, runtime = stages
    kinds = [i for i, _ in build]
    lock_install = next(k for k, (i, a) in enumerate(build) if i == "RUN" and "requirements.lock" in a)
    first_source = next(k for k, (i, a) in enumerate(build) if i == "COPY" and a.split()[0] == "tokenizer_service")
    assert lock_install < first_source, "the dependency layer must come before the source"
    assert "ADD" not in kinds + [i for i, _ in runtime]
    for instruction, argument in build + runtime:
        if instruction == "COPY" and not argument.startswith("--from"):
            assert (ROOT / argument.split()[0]).exists(), f"COPY of a path not in the repository: {argument}"
    packages = {
        p.rstrip("*")
        for p in re.findall(
            r'"([\w*]+)"', re.search(r"include = \[([^\]]*)\]", (ROOT / "pyproject.toml").read_text())[1]
        )
    }
    copied = {a.split()[0] for i, a in build if i == "COPY"}
    assert packages <= copied, f"packages not copied into the image: {packages - copied}"
    users = [a for i, a in runtime if i == "USER"]
    assert users and users[-1] not in ("root", "0"), "the image must run as a non-root user"
    (entrypoint,) = [a for i, a in runtime if i == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["tokmaint"]  # exec form: signals reach tokmaint


def test_the_flink_file_adds_a_cluster_of_the_project_image_and_its_commands_parse():
    """docker-compose.flink.yml: a JobManager and a TaskManager of the project image, the job's
    submission, and the single-process pipeline out of the way (one writer per lineage)."""
    flink = interpolate(
        yaml.safe_load((ROOT / "docker-compose.flink.yml").read_text(encoding="utf-8")),
        {"TOKMAINT_REGISTRY_TOKEN": "t" * 32},
    )
    schema = json.loads(
        (importlib.resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json").read_text(
            encoding="utf-8"
        )
    )
    validator = jsonschema.validators.validator_for(schema)(schema)
    assert [e.message for e in validator.iter_errors(flink)] == []
    services = flink["services"]
    assert services["pipeline"]["profiles"] and "image" not in services["pipeline"]
    for name, role in (("flink-jobmanager", "jobmanager"), ("flink-taskmanager", "taskmanager")):
        assert services[name]["image"].startswith("tokmaint:")
        assert services[name]["entrypoint"][:4] == ["python", "-m", "pipeline.flink_cluster", role]
    submit = build_parser().parse_args(services["pipeline-flink"]["command"])
    assert submit.flink_master == "flink-jobmanager:8081" and submit.step_seconds > 0
