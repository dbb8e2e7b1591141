"""A standalone Flink cluster from the ``apache-flink`` wheel: a JobManager and TaskManagers on
loopback ports, each a JVM of its own, with a conf, logs, checkpoints and temporary files under
one work folder; stopped by PID. What ``make flink``, the tests and ``tokmaint bench flink`` run
the scale-out job on (``pipeline.flink_job``).

    with FlinkCluster(Path("/tmp/flink"), taskmanagers=2) as cluster:
        cluster.rest_url              # "http://127.0.0.1:PORT", Flink's web UI and REST API
        cluster.kill_taskmanager(0)   # SIGKILL: the job restores from its last checkpoint

The connector's jars (Flink's Kafka connector and the Kafka client) are the ones ``make setup``
took out of a pinned registry package (:mod:`pipeline.flink_jars`); nothing is downloaded here.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pyflink

from registry.local_server import free_port
from tokenizer_service.errors import TokmaintError

FLINK_HOME = Path(pyflink.__file__).parent
# Each JVM's whole memory: the JobManager's and a TaskManager's (its Python workers come on top).
JOBMANAGER_MB, TASKMANAGER_MB = 1024, 1536


def flink_conf(
    work: Path,
    *,
    rest_port: int,
    rpc_port: int,
    slots: int,
    python: str,
    jobmanager: str = "127.0.0.1",
    host: str = "127.0.0.1",
    bind: str = "127.0.0.1",
) -> dict[str, Any]:
    """The cluster's ``config.yaml``: small JVMs, checkpoints under ``work`` (shared by every
    process of the cluster); loopback only, unless ``jobmanager`` (its address), ``host`` (this
    process's) and ``bind`` say otherwise (containers on one network).

    >>> conf = flink_conf(Path("/w"), rest_port=8081, rpc_port=6123, slots=2, python="/v/bin/python")
    >>> conf["rest.port"], conf["taskmanager.numberOfTaskSlots"], conf["python.executable"]
    (8081, 2, '/v/bin/python')
    """
    return {
        "jobmanager.rpc.address": jobmanager,
        "jobmanager.rpc.port": rpc_port,
        "jobmanager.bind-host": bind,
        "taskmanager.bind-host": bind,
        "taskmanager.host": host,
        "rest.address": jobmanager,
        "rest.bind-address": bind,
        "rest.port": rest_port,
        # Every other port any free one (0 or a range): several clusters may run side by side.
        "blob.server.port": "0",
        "taskmanager.rpc.port": "0",
        "taskmanager.data.port": 0,
        "jobmanager.memory.process.size": f"{JOBMANAGER_MB}m",
        "taskmanager.memory.process.size": f"{TASKMANAGER_MB}m",
        "taskmanager.numberOfTaskSlots": slots,
        "parallelism.default": slots,
        "python.executable": python,
        "python.client.executable": python,
        "state.backend.type": "hashmap",
        # PEMJA from the TaskManager's classpath (write_lib), not from a job's jars: libpython once a JVM.
        "classloader.parent-first-patterns.additional": "pemja.",
        "execution.checkpointing.dir": (work / "checkpoints").as_uri(),
        "execution.checkpointing.savepoint-dir": (work / "savepoints").as_uri(),
        "io.tmp.dirs": str(work / "tmp"),
        "web.tmpdir": str(work / "tmp"),
        # A job whose TaskManager died restarts as soon as slots are back, for as long as it takes.
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 1000,
        "restart-strategy.fixed-delay.delay": "1 s",
        # A TaskManager killed is noticed in seconds, not the default 50.
        "heartbeat.interval": 1000,
        "heartbeat.timeout": 5000,
        "pekko.ask.timeout": "30 s",
        # The module openings Flink needs on Java 17, as the wheel's own conf has them.
        "env.java.opts.all": java_opts(),
    }


def java_opts() -> str:
    """The JVM options of the wheel's ``conf/config.yaml`` (``env.java.opts.all``)."""
    import yaml

    default = yaml.safe_load((FLINK_HOME / "conf" / "config.yaml").read_text()) or {}
    return default.get("env", {}).get("java", {}).get("opts", {}).get("all", "")


def _yaml(conf: dict[str, Any]) -> str:
    """Flat ``key: value`` lines (Flink's config.yaml takes dotted keys as they are).

    >>> print(_yaml({"a.b": 1, "c": "x y"}), end="")
    a.b: 1
    c: 'x y'
    """
    return "".join(f"{key}: {value if isinstance(value, int) else repr(str(value))}\n" for key, value in conf.items())


def write_conf(work: Path, conf_dir: Path, conf: dict[str, Any]) -> None:
    """The folders under ``work`` a cluster's processes use, ``conf`` as ``conf_dir/config.yaml``
    with the wheel's log4j and logback settings beside it, and the JVMs' ``lib`` (:func:`write_lib`)."""
    for folder in (conf_dir, work / "log", work / "tmp", work / "checkpoints"):
        folder.mkdir(parents=True, exist_ok=True)
    (conf_dir / "config.yaml").write_text(_yaml(conf))
    for logging in (FLINK_HOME / "conf").glob("log*"):
        shutil.copy(logging, conf_dir)
    write_lib(conf_dir / "lib")


def write_lib(lib: Path) -> None:
    """The JVMs' classpath folder (``FLINK_LIB_DIR``): the wheel's ``lib`` jars and its Python
    runner's jar (``opt/flink-python``), linked. With the runner on the TaskManager's own
    classpath, PEMJA (thread mode) loads libpython once per JVM: loaded by each job's class loader,
    the second job on a TaskManager (one started from a savepoint, say) fails, as PEMJA's way
    round the JVM's one-loader rule for a native library reads a field Java 17 no longer has."""
    lib.mkdir(parents=True, exist_ok=True)
    for jar in [*(FLINK_HOME / "lib").glob("*.jar"), *runner_jars()]:
        link = lib / jar.name
        if not link.exists():
            link.symlink_to(jar)


def runner_jars() -> list[Path]:
    """The wheel's Python runner jar (``opt/flink-python-*.jar``): what a PyFlink job needs on the
    classpath beside Flink's own.

    >>> [jar.name.startswith("flink-python-") for jar in runner_jars()]
    [True]
    """
    return sorted((FLINK_HOME / "opt").glob("flink-python-*.jar"))


def scripts_env(conf_dir: Path, log_dir: Path) -> dict[str, str]:
    """The environment Flink's scripts run with: this process's, where the conf, the logs and the
    classpath folder are (:func:`write_conf`), and the ``PYTHONPATH`` of the interpreter a
    TaskManager embeds (:func:`embedded_python_path`). That interpreter writes the bytecode it
    compiles whatever ``PYTHONDONTWRITEBYTECODE`` says: with none cached (pip's ``--no-compile``),
    every start and every restore compiled each module it imports from source again, 4-7 s of a
    TaskManager's start."""
    return {
        **{name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"},
        "FLINK_CONF_DIR": str(conf_dir),
        "FLINK_LOG_DIR": str(log_dir),
        "FLINK_LIB_DIR": str(conf_dir / "lib"),
        "FLINK_HOME": str(FLINK_HOME),
        "PYTHONPATH": embedded_python_path(),
    }


def embedded_python_path() -> str:
    """Where the Python a TaskManager embeds in thread mode (PEMJA) finds this environment's
    packages and tokmaint's. PEMJA starts the shared libpython with its own base prefix, so a
    virtual environment's site-packages is not on its path (no ``pemja`` to import), nor are the
    packages an editable install finds through a ``.pth`` hook: both are given here, before any
    ``PYTHONPATH`` there was.

    >>> embedded_python_path().split(os.pathsep)[0].endswith("site-packages")
    True
    """
    import site

    import pipeline

    here = [*site.getsitepackages(), str(Path(pipeline.__file__).resolve().parents[1])]
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys([*here, *kept]))


# A slot per TaskManager: in thread mode a TaskManager's slots share one Python interpreter and its
# GIL, so two subtasks of one operator scheduled there would take turns, not run side by side.
SLOTS = 1


class FlinkCluster:
    """A JobManager and ``taskmanagers`` TaskManagers of ``slots`` slots each, on free loopback ports."""

    def __init__(
        self,
        work: Path,
        *,
        taskmanagers: int = 2,
        slots: int = SLOTS,
        timeout: float = 120.0,
        env: dict[str, str] | None = None,
        cores: list[int] | None = None,
    ) -> None:
        """``env``: more environment for the JVMs and their Python workers (a registry token);
        ``cores``: the CPUs the TaskManagers are pinned to (``taskset``), the i-th on ``cores[i]``
        (round the list), or None: not pinned."""
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            raise TokmaintError(
                "Flink needs Java 17 (no java on PATH and no JAVA_HOME); on Debian: "
                "apt-get install openjdk-17-jre-headless"
            )
        self.work, self.slots, self.timeout, self.extra_env = Path(work), slots, timeout, env or {}
        self.cores = cores
        self.conf_dir, self.log_dir = self.work / "conf", self.work / "log"
        self.rest_port = free_port()
        self.rest_url = f"http://127.0.0.1:{self.rest_port}"
        write_conf(
            self.work,
            self.conf_dir,
            flink_conf(self.work, rest_port=self.rest_port, rpc_port=free_port(), slots=slots, python=sys.executable),
        )
        self.jobmanager: subprocess.Popen | None = None
        self.taskmanagers: list[subprocess.Popen] = []
        try:
            self.jobmanager = self._start("jobmanager.sh", "jobmanager")
            for _ in range(taskmanagers):
                self.start_taskmanager(wait=False)
            self.wait_for_taskmanagers(taskmanagers)
        except BaseException:
            self.stop()
            raise

    def env(self) -> dict[str, str]:
        """The environment of Flink's scripts and its command-line client: this cluster's conf."""
        return {
            **scripts_env(self.conf_dir, self.log_dir),
            **self.extra_env,
            "PYFLINK_CLIENT_EXECUTABLE": sys.executable,
        }

    def _start(self, script: str, name: str, *, core: int | None = None) -> subprocess.Popen:
        # start-foreground execs the JVM: the process is the JVM, stopped by its PID.
        log = open(self.log_dir / f"{name}-{len(self.taskmanagers)}.out", "ab")
        pinned = [] if core is None else ["taskset", "-c", str(core)]  # the JVM and its threads inherit it
        with log:
            return subprocess.Popen(
                [*pinned, "bash", str(FLINK_HOME / "bin" / script), "start-foreground"],
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def start_taskmanager(self, *, wait: bool = True) -> subprocess.Popen:
        """One more TaskManager (after a kill, the replacement a Kubernetes Deployment would start)."""
        core = None if not self.cores else self.cores[len(self.taskmanagers) % len(self.cores)]
        process = self._start("taskmanager.sh", "taskmanager", core=core)
        self.taskmanagers.append(process)
        if wait:
            self.wait_for_taskmanagers(sum(p.poll() is None for p in self.taskmanagers))
        return process

    def overview(self) -> dict[str, Any]:
        return httpx.get(f"{self.rest_url}/overview", timeout=5).json()

    def failure(self, job_id: str) -> str:
        """A failed job's root exception, as the JobManager keeps it (the Python error within it first)."""
        found = httpx.get(f"{self.rest_url}/jobs/{job_id}/exceptions", timeout=10).json()
        entries = found.get("exceptionHistory", {}).get("entries", [])
        trace = "\n".join(e.get("stacktrace", "") for e in entries[-1:]) or str(found)
        return trace[trace.find("Traceback") :][:4000] if "Traceback" in trace else trace[:4000]

    def wait_for_taskmanagers(self, count: int) -> None:
        """Until ``count`` TaskManagers are registered with the JobManager."""
        deadline = time.monotonic() + self.timeout
        while True:
            if self.jobmanager is not None and self.jobmanager.poll() is not None:
                raise TokmaintError(f"the Flink JobManager exited ({self.jobmanager.returncode}); see {self.log_dir}")
            try:
                if self.overview().get("taskmanagers", 0) >= count:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TokmaintError(
                    f"{count} Flink TaskManagers did not register within {self.timeout:g} s; see {self.log_dir}"
                )
            time.sleep(0.5)

    def kill_taskmanager(self, index: int = 0) -> None:
        """SIGKILL one TaskManager's JVM (its Python workers go with its process group)."""
        process = self.taskmanagers[index]
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    def stop(self) -> None:
        """Every JVM of the cluster, TaskManagers first; their Python workers with them."""
        for process in [*self.taskmanagers, self.jobmanager]:
            if process is None or process.poll() is not None:
                continue
            os.killpg(process.pid, signal.SIGTERM)
        for process in [*self.taskmanagers, self.jobmanager]:
            if process is None:
                continue
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)

    def __enter__(self) -> "FlinkCluster":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def run_role(
    role: str, work: Path, *, jobmanager: str, slots: int = SLOTS, rest_port: int = 8081, rpc_port: int = 6123
) -> None:
    """Become one process of a cluster spread over containers (``docker-compose.flink.yml``): write
    the conf under ``work`` (a volume every process of the cluster shares, for checkpoints) and exec
    the JobManager's or a TaskManager's JVM in place of this process."""
    import socket

    conf_dir = work / "conf" / f"{role}-{socket.gethostname()}"
    write_conf(
        work,
        conf_dir,
        flink_conf(
            work,
            rest_port=rest_port,
            rpc_port=rpc_port,
            slots=slots,
            python=sys.executable,
            jobmanager=jobmanager,
            host=socket.gethostname(),
            bind="0.0.0.0",
        ),
    )
    script = {"jobmanager": "jobmanager.sh", "taskmanager": "taskmanager.sh"}[role]
    os.execvpe(
        "bash", ["bash", str(FLINK_HOME / "bin" / script), "start-foreground"], scripts_env(conf_dir, work / "log")
    )


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m pipeline.flink_cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "role",
        nargs="?",
        default="local",
        choices=["local", "jobmanager", "taskmanager"],
        help="local: a whole cluster here, on loopback ports (make flink); jobmanager, taskmanager: "
        "one process of a cluster over containers",
    )
    parser.add_argument("--work", type=Path, default=Path(".flink"), help="conf, logs, checkpoints (default: .flink)")
    parser.add_argument("--jobmanager", default="127.0.0.1", help="the JobManager's host name (containers)")
    parser.add_argument(
        "--slots",
        type=int,
        default=SLOTS,
        help=f"slots of each TaskManager (default: {SLOTS}; in thread mode a TaskManager's slots share one GIL)",
    )
    args = parser.parse_args()
    if args.role != "local":
        run_role(args.role, args.work.resolve(), jobmanager=args.jobmanager, slots=args.slots)
    # A kill or a closed terminal stops it as Ctrl-C does: its JVMs (in sessions of their own) with it.
    for stop in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, signal.default_int_handler)
    try:
        with FlinkCluster(args.work.resolve(), slots=args.slots) as cluster:
            print(
                f"Flink {cluster.overview()['flink-version']} at {cluster.rest_url} (submit with --flink-master "
                f"127.0.0.1:{cluster.rest_port}); logs in {cluster.log_dir}; Ctrl-C stops it",
                flush=True,
            )
            signal.pause()
    except KeyboardInterrupt:
        pass
