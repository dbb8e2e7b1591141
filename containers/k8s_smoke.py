"""``make k8s-smoke``: every container of the ``dev`` overlay of ``k8s/`` run in the image with its
own command, arguments and environment (the rendered ConfigMap and Secret), as a cluster would
run it. No cluster can be had here: the services the manifests name are containers on one
network, with the stand-ins for Kafka and Redis (``containers/compose.standins.yml``), the
registry's pod under its Service's name (``tokmaint-registry``), each pod's ``emptyDir`` a volume
its containers share. Each workload must do its job:

* the registry (``registry serve`` and its ``relay``) answers ``/healthz``; the ingest server too;
* the ``lineage`` Job creates the lineage; the sample posted to the ingest server, the
  ``pipeline`` Deployment counts it and publishes versions;
* the ``revise`` CronJob publishes a revision or says none is due, and exits 0; the
  ``residues`` CronJob writes the residues it finds; ``stats-snapshot`` writes its snapshot;
* the ``trainer`` Job takes a version (its log says so).

The last line printed is one JSON object: each workload's outcome, ``all_ok`` and ``seconds``.

    DOCKER_HOST=... .venv/bin/python containers/k8s_smoke.py
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compose_smoke import LINEAGE, Project  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOCKER = "/usr/bin/docker"
IMAGE = "tokmaint:0.1.0"
PROJECT = "tokmaint-k8s"
NETWORK = f"{PROJECT}_default"


def docker(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode:
        raise RuntimeError(f"docker {' '.join(args[:3])}: {done.stderr.strip()[-1500:]}")
    return done


def workloads() -> tuple[list[dict], dict[str, str], dict[str, str]]:
    """The dev overlay rendered: its workloads (kind, name, pod spec), ConfigMap and Secret."""
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(ROOT / "k8s" / "overlays" / "dev")], capture_output=True, text=True, check=True
    ).stdout
    objects = [o for o in yaml.safe_load_all(rendered) if o]
    config = next(o["data"] for o in objects if o["kind"] == "ConfigMap")
    data = next(o["data"] for o in objects if o["kind"] == "Secret")
    secret = {k: base64.b64decode(v).decode() for k, v in data.items()}
    pods = []
    for o in objects:
        spec = o.get("spec", {})
        if o["kind"] in ("Deployment", "Job"):
            pods.append({"kind": o["kind"], "name": o["metadata"]["name"], "pod": spec["template"]["spec"]})
        elif o["kind"] == "CronJob":
            pods.append(
                {
                    "kind": o["kind"],
                    "name": o["metadata"]["name"],
                    "pod": spec["jobTemplate"]["spec"]["template"]["spec"],
                }
            )
    return pods, config, secret


def container_env(container: dict, config: dict[str, str], secret: dict[str, str]) -> dict[str, str]:
    env = dict(config) if any("configMapRef" in e for e in container.get("envFrom", [])) else {}
    for item in container.get("env", []):
        source = item.get("valueFrom", {})
        if "secretKeyRef" in source:
            env[item["name"]] = secret[source["secretKeyRef"]["key"]]
        elif "configMapKeyRef" in source:
            env[item["name"]] = config[source["configMapKeyRef"]["key"]]
        else:
            env[item["name"]] = item.get("value", "")
    return env


def empty_dir(name: str) -> str:
    """A named volume as a pod's emptyDir is: shared by its containers, writable by any user."""
    volume = f"{PROJECT}-{name}"
    if docker("volume", "inspect", volume, check=False).returncode:
        docker("volume", "create", volume)
        docker("run", "--rm", "--user", "0", "--entrypoint", "chmod", "-v", f"{volume}:/v", IMAGE, "1777", "/v")
    return volume


def run_container(
    pod: dict, container: dict, config: dict, secret: dict, *, detach: bool, alias: str | None = None
) -> subprocess.CompletedProcess:
    """``docker run`` of one of the pod's containers: its args ($(VAR) expanded as the kubelet
    does), its environment, its user and read-only root, the pod's volumes as named volumes of
    the pod's (its containers share them, as an emptyDir)."""
    env = container_env(container, config, secret)
    args = [re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), a) for a in container.get("args", [])]
    options = ["--network", NETWORK, "--name", f"{PROJECT}-{pod['name']}-{container['name']}"]
    if alias:
        options += ["--network-alias", alias]
    for mount in container.get("volumeMounts", []):
        options += ["-v", f"{empty_dir(pod['name'] + '-' + mount['name'])}:{mount['mountPath']}"]
    security = {**pod["pod"].get("securityContext", {}), **container.get("securityContext", {})}
    if security.get("readOnlyRootFilesystem"):
        options.append("--read-only")
    if security.get("runAsUser") is not None:
        options += ["--user", str(security["runAsUser"])]
    for name, value in env.items():
        options += ["-e", f"{name}={value}"]
    if container.get("command"):
        options += ["--entrypoint", container["command"][0]]
        args = container["command"][1:] + args
    return docker("run", *(["-d"] if detach else ["--rm"]), *options, IMAGE, *args, check=False, timeout=900)


def main() -> int:
    started = time.perf_counter()
    pods, config, secret = workloads()
    by_name = {p["name"]: p for p in pods}
    stack = Project(PROJECT, 9)
    outcome: dict[str, str] = {}
    stack.compose("up", "-d", "--wait", "kafka", "redis")
    try:
        registry = by_name["tokmaint-registry"]
        # A registry's pod: both its containers on one volume (its emptyDir: the SQLite database
        # and the artifacts), reachable as its Service.
        for container in registry["pod"]["containers"]:
            run_container(registry, container, config, secret, detach=True, alias="tokmaint-registry")
        ingest = by_name["tokmaint-ingest"]
        run_container(ingest, ingest["pod"]["containers"][0], config, secret, detach=True, alias="tokmaint-ingest")
        url = f"http://{ip('tokmaint-registry', 'registry')}:8000"
        ingest_url = f"http://{ip('tokmaint-ingest', 'ingest')}:8100"
        outcome["registry"] = "ok" if healthy(url) else "no /healthz"
        outcome["ingest"] = "ok" if healthy(ingest_url) else "no /healthz"
        lineage = by_name["tokmaint-lineage"]
        done = run_container(lineage, lineage["pod"]["containers"][0], config, secret, detach=False)
        outcome["lineage"] = "ok" if done.returncode == 0 and versions(url) >= 1 else f"exit {done.returncode}"
        # The trainer from version 1, as a cluster starts it beside the lineage: it must take the
        # versions the pipeline publishes from the stream posted next.
        trainer = by_name["tokmaint-trainer"]
        run_container(trainer, trainer["pod"]["containers"][0], config, secret, detach=True)
        deadline = time.monotonic() + 180  # following the lineage before the stream comes
        while "trainer: training" not in logs("tokmaint-trainer", "trainer") and time.monotonic() < deadline:
            time.sleep(1)
        post(ingest_url, secret["token"])
        pipeline = by_name["tokmaint-pipeline"]
        run_container(pipeline, pipeline["pod"]["containers"][0], config, secret, detach=True)
        deadline = time.monotonic() + 180
        while versions(url) < 3 and time.monotonic() < deadline:
            time.sleep(1)
        outcome["pipeline"] = "ok" if versions(url) >= 3 else f"{versions(url)} versions"
        for name, check in (
            ("tokmaint-revise", "revise"),
            ("tokmaint-residues", "residues"),
            ("tokmaint-stats-snapshot", "stats-snapshot"),
        ):
            cron = by_name[name]
            done = run_container(cron, cron["pod"]["containers"][0], config, secret, detach=False)
            outcome[check] = "ok" if done.returncode == 0 else f"exit {done.returncode}: {done.stderr.strip()[-300:]}"
        deadline = time.monotonic() + 180
        while "took version" not in logs("tokmaint-trainer", "trainer") and time.monotonic() < deadline:
            time.sleep(2)
        said = logs("tokmaint-trainer", "trainer")
        outcome["trainer"] = "ok" if "took version" in said else f"took no version; its log ends: {said[-300:]}"
    finally:
        names = docker("ps", "-aq", "--filter", f"name={PROJECT}-tokmaint", check=False).stdout.split()
        if names:
            docker("rm", "-f", *names, check=False)
        stack.compose("down", "-v", "--remove-orphans")
        volumes = docker("volume", "ls", "-q", "--filter", f"name={PROJECT}-", check=False).stdout.split()
        if volumes:
            docker("volume", "rm", *volumes, check=False)
    result = {
        **outcome,
        "all_ok": all(v == "ok" for v in outcome.values()),
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(result))
    return 0 if result["all_ok"] else 1


def ip(pod: str, container: str) -> str:
    """A container's address on the network (this process is outside it)."""
    return docker(
        "inspect",
        "-f",
        f'{{{{(index .NetworkSettings.Networks "{NETWORK}").IPAddress}}}}',
        f"{PROJECT}-{pod}-{container}",
    ).stdout.strip()


def healthy(url: str, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    return False


def versions(url: str) -> int:
    try:
        return httpx.get(f"{url}/v1/tokenizers/{LINEAGE}/versions", timeout=5).json().get("count", 0)
    except (httpx.HTTPError, ValueError):
        return 0


def post(ingest_url: str, token: str) -> None:
    import gzip

    lines = gzip.open(ROOT / "data" / "git-commits-sample.jsonl.gz", "rb").read().splitlines()
    with httpx.Client(timeout=120) as client:
        for k in range(0, len(lines), 500):
            client.post(
                f"{ingest_url}/v1/streams/docs/documents",
                content=b"\n".join(lines[k : k + 500]),
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"},
            ).raise_for_status()


def logs(pod: str, container: str) -> str:
    done = docker("logs", f"{PROJECT}-{pod}-{container}", check=False)
    return done.stdout + done.stderr


if __name__ == "__main__":
    sys.exit(main())
