"""``k8s/``: the kustomize overlays rendered (kubectl's built-in kustomize) and every object
validated offline against Kubernetes' schemas (kubernetes-validate, strict: no unknown field),
the FlinkDeployment by its own rules; references resolve, pods run non-root with probes and
resources, and every tokmaint command line parses with the CLI's own parser."""

import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tokmaint.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
KUBERNETES = "1.32.0"  # the cluster version the manifests are checked against
EXTERNAL_SECRETS = {"prod": {"tokmaint-registry"}, "dev": set()}  # created outside git in prod


def render(overlay: str) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl here (its built-in kustomize renders the overlays)")
    result = subprocess.run(
        [kubectl, "kustomize", str(ROOT / "k8s" / "overlays" / overlay)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module", params=["dev", "prod"])
def overlay(request) -> tuple[str, list[dict]]:
    return request.param, render(request.param)


def pod_specs(objects: list[dict]):
    """(object, pod spec) of every workload: Deployments, Jobs, CronJobs, the Flink pod template."""
    for obj in objects:
        spec = obj.get("spec", {})
        if obj["kind"] in ("Deployment", "Job"):
            yield obj, spec["template"]["spec"]
        elif obj["kind"] == "CronJob":
            yield obj, spec["jobTemplate"]["spec"]["template"]["spec"]
        elif obj["kind"] == "FlinkDeployment":
            yield obj, spec["taskManager"]["podTemplate"]["spec"]


def test_every_object_is_valid_kubernetes(overlay):
    name, objects = overlay
    validated = 0
    for obj in objects:
        if obj["kind"] == "FlinkDeployment":
            continue  # a custom resource: checked below
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)
        validated += 1
    assert validated >= 10
    broken = next(o for o in objects if o["kind"] == "Deployment")
    broken = {**broken, "spec": {**broken["spec"], "replica": 1}}
    with pytest.raises(kubernetes_validate.ValidationError):  # the validator does refuse
        kubernetes_validate.validate(broken, KUBERNETES, strict=True)


def test_references_resolve(overlay):
    name, objects = overlay
    have = {(o["kind"], o["metadata"]["name"]) for o in objects}
    secrets = {n for k, n in have if k == "Secret"} | EXTERNAL_SECRETS[name]
    for obj, spec in pod_specs(objects):
        for container in spec["containers"]:
            for source in container.get("envFrom", []):
                assert ("ConfigMap", source["configMapRef"]["name"]) in have, obj["metadata"]["name"]
            for variable in container.get("env", []):
                ref = variable.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["name"] in secrets, (obj["metadata"]["name"], ref)
        for volume in spec.get("volumes", []):
            if "persistentVolumeClaim" in volume:
                assert ("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]) in have
    for service in (o for o in objects if o["kind"] == "Service"):
        selector = service["spec"]["selector"]
        assert any(
            o["kind"] == "Deployment" and selector.items() <= o["spec"]["template"]["metadata"]["labels"].items()
            for o in objects
        ), f"service {service['metadata']['name']} selects no pods"


def test_pods_are_locked_down_and_sized(overlay):
    name, objects = overlay
    for obj, spec in pod_specs(objects):
        if obj["kind"] != "FlinkDeployment":  # (Flink's own pod settings are the operator's)
            assert spec["securityContext"]["runAsNonRoot"] is True, obj["metadata"]["name"]
        for container in spec["containers"]:
            where = f"{obj['metadata']['name']}/{container['name']}"
            assert {"requests", "limits"} <= set(container["resources"]), where
            if obj["kind"] != "FlinkDeployment":
                assert container["securityContext"]["readOnlyRootFilesystem"] is True, where
                assert container["securityContext"]["capabilities"]["drop"] == ["ALL"], where
            if obj["kind"] == "Deployment" and container.get("ports"):
                assert "readinessProbe" in container and "livenessProbe" in container, where
            assert re.fullmatch(r"[\w./-]+:\d[\w.-]*", container["image"]), f"{where}: unpinned {container['image']}"


def test_the_overlays_differ_where_they_should(overlay):
    name, objects = overlay
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    trainer = next(o for o in objects if o["kind"] == "Job" and o["metadata"]["name"] == "tokmaint-trainer")
    limits = trainer["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert {"CronJob"} == {k for k, n in kinds if n in ("tokmaint-revise", "tokmaint-stats-snapshot")}
    if name == "prod":
        assert limits["nvidia.com/gpu"] == 1
        assert ("FlinkDeployment", "tokmaint-flink") in kinds and ("Deployment", "tokmaint-pipeline") not in kinds
        flink = next(o for o in objects if o["kind"] == "FlinkDeployment")
        assert flink["apiVersion"] == "flink.apache.org/v1beta1" and flink["spec"]["flinkVersion"] == "v2_0"
        # The project image, whose venv holds Flink: the pods start it from there.
        assert flink["spec"]["image"].startswith("ghcr.io/tokmaint/tokmaint:")
        assert flink["spec"]["flinkConfiguration"]["kubernetes.entry.path"] == "/usr/bin/env"
        assert {"jobManager", "taskManager", "image", "serviceAccount"} <= set(flink["spec"])
        # An application the operator upgrades through a savepoint; its program's spec from the ConfigMap.
        job = flink["spec"]["job"]
        assert job["upgradeMode"] == "savepoint" and job["args"][-3:] == ["-pym", "pipeline.flink_job", "--from-env"]
        assert job["entryClass"] == "org.apache.flink.client.python.PythonDriver"
        assert Path(job["jarURI"].removeprefix("local://")).name.startswith("flink-python-")
        env_from = [c["envFrom"] for c in flink["spec"]["jobManager"]["podTemplate"]["spec"]["containers"]]
        assert env_from and all(e[0]["configMapRef"]["name"].startswith("tokmaint-config") for e in env_from)
        assert all(o["metadata"]["namespace"] == "tokmaint" for o in objects)
    else:
        assert "nvidia.com/gpu" not in limits
        assert ("Deployment", "tokmaint-pipeline") in kinds and ("CronJob", "tokmaint-residues") in kinds
        assert all(o["metadata"]["namespace"] == "tokmaint-dev" for o in objects)


def test_every_tokmaint_command_parses(overlay):
    name, objects = overlay
    config = next(o for o in objects if o["kind"] == "ConfigMap")["data"]
    checked = 0
    for obj, spec in pod_specs(objects):
        for container in spec["containers"]:
            if not container["image"].startswith("ghcr.io/tokmaint/"):
                continue
            argv = [re.sub(r"\$\((\w+)\)", lambda m: config[m[1]], word) for word in container.get("args", [])]
            if argv:
                build_parser().parse_args(argv)  # exits (fails the test) on an option the CLI lacks
            checked += 1
    assert checked >= 8
