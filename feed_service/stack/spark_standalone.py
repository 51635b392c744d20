"""A Spark standalone cluster on loopback: one master and N workers from the installed pyspark wheel.

Each daemon runs the JVM command that the wheel's ``bin/spark-class`` would ``exec``: we ask Spark's
launcher (``org.apache.spark.launcher.Main``, what spark-class runs) for that command and start it
ourselves as a :class:`~feed_service.stack.process.ServiceProcess`. Starting spark-class itself would
leave a pid whose command line changes from bash to java, which the pid file could not recognise.

Worker i binds its own loopback address (all of 127/8 is local on Linux), so a worker and the
executors it launches look like another machine: the driver must reach them over the network and
ship the project's code to them (:mod:`spark_jobs.runtime.code_archive`). A worker is the leader of
its own process group, and its executors are in that group: ``stop`` ends them together, while
:meth:`SparkStandalone.kill_worker` kills the worker JVM alone, as a crash would (its executors then
exit on their own: the executor's WorkerWatcher ends it when the worker's connection drops).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Sequence

from feed_service.errors import StackError
from feed_service.stack.process import ServiceProcess

if TYPE_CHECKING:
    from feed_service.stack.config import StackConfig

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"

#: Seconds ``stop`` gives a daemon after SIGTERM (a worker kills its executors in a shutdown hook).
STOP_GRACE = 15.0

#: Master settings: no REST submission server (it would take port 6066 on every master).
MASTER_OPTS = ("-Dspark.master.rest.enabled=false",)

#: Worker settings: remove the work folders of finished applications (each holds a copy of the jars
#: and of the code archive) a day after they end, checking hourly.
WORKER_OPTS = (
    "-Dspark.worker.cleanup.enabled=true",
    "-Dspark.worker.cleanup.interval=3600",
    "-Dspark.worker.cleanup.appDataTtl=86400",
)


class DaemonStatus(NamedTuple):
    """One daemon, in the field order of ``feed_service.stack.local_stack.ServiceStatus``."""

    name: str
    running: bool
    pid: int | None
    endpoint: str
    log_file: str


def spark_home() -> Path:
    """The pyspark package folder: a Spark distribution (``jars/``, ``bin/``) without ``conf/``."""
    import pyspark

    return Path(pyspark.__file__).parent


def scala_version(home: Path) -> str:
    """Scala binary version of the wheel's jars, as ``bin/load-spark-env.sh`` exports it (the launcher
    and the workers' executor command builder need it outside a source checkout)."""
    for jar in (home / "jars").glob("spark-core_*.jar"):
        match = re.match(r"spark-core_(\d+\.\d+)-", jar.name)
        if match:
            return match.group(1)
    raise StackError(f"no spark-core jar in {home / 'jars'}: is pyspark installed completely?")


def free_port(host: str) -> int:
    """A TCP port free on ``host`` right now (a worker binds its own loopback address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class SparkStandalone:
    """A standalone master and ``len(worker_hosts)`` workers, each a pid-file-tracked process under ``home``."""

    def __init__(
        self,
        home: Path,
        *,
        master_host: str = "127.0.0.1",
        master_port: int,
        master_webui_port: int,
        worker_hosts: tuple[str, ...] = ("127.0.0.2", "127.0.0.3"),
        worker_ports: Sequence[int] | None = None,
        worker_webui_ports: Sequence[int] | None = None,
        worker_cores: int = 1,
        worker_memory: str = "1g",
        daemon_memory: str = "256m",
        auth_secret_file: Path | None = None,
    ) -> None:
        """``worker_ports``/``worker_webui_ports``: one per worker; None (or 0) lets the kernel choose.
        ``auth_secret_file``: the shared secret that authenticates and encrypts Spark's RPC (every
        daemon, driver and executor must hold it: docs/security.md); None runs the cluster open."""
        self.home = Path(home).absolute()
        self.master_host = master_host
        self.master_port = master_port
        self.master_webui_port = master_webui_port
        self.worker_hosts = tuple(worker_hosts)
        n = len(self.worker_hosts)
        self.worker_ports = tuple(worker_ports) if worker_ports is not None else (0,) * n
        self.worker_webui_ports = tuple(worker_webui_ports) if worker_webui_ports is not None else (0,) * n
        if len(self.worker_ports) != n or len(self.worker_webui_ports) != n:
            raise ValueError("worker_ports and worker_webui_ports need one port per worker host")
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.daemon_memory = daemon_memory
        self.auth_secret_file = auth_secret_file
        self.master = ServiceProcess("spark-master", self.home / "master" / "master.pid",
                                     self.home / "master" / "master.log")
        self.workers = [
            ServiceProcess(f"spark-worker-{i}", self.home / f"worker-{i}" / "worker.pid",
                           self.home / f"worker-{i}" / "worker.log")
            for i in range(n)
        ]
        self._commands: dict[str, list[str]] = {}

    @classmethod
    def with_free_ports(cls, home: Path, **kwargs: object) -> "SparkStandalone":
        """A cluster beside any other: every port is one the kernel reports free on its address now."""
        master_host = str(kwargs.pop("master_host", "127.0.0.1"))
        hosts = tuple(kwargs.pop("worker_hosts", ("127.0.0.2", "127.0.0.3")))  # type: ignore[arg-type]
        return cls(home, master_host=master_host, master_port=free_port(master_host),
                   master_webui_port=free_port(master_host), worker_hosts=hosts,
                   worker_ports=[free_port(h) for h in hosts], worker_webui_ports=[free_port(h) for h in hosts],
                   **kwargs)  # type: ignore[arg-type]

    @classmethod
    def for_stack(cls, config: "StackConfig") -> "SparkStandalone":
        """The Spark part of a cluster stack: master on the stack's host, worker i on the next cluster
        address with the master's port numbers (the stack picks ports free on every cluster address)."""
        from feed_service.stack.config import CLUSTER_HOSTS

        hosts = tuple(h for h in CLUSTER_HOSTS if h != config.host)[:2]
        secret = None
        if config.secure:
            from feed_service.stack.stack_secrets import StackSecrets

            secret = StackSecrets(config).spark_secret_file
        return cls(config.data_dir / "spark", master_host=config.host, master_port=config.spark_master_port,
                   master_webui_port=config.spark_webui_port, worker_hosts=hosts,
                   worker_ports=(config.spark_master_port,) * len(hosts),
                   worker_webui_ports=(config.spark_webui_port,) * len(hosts), auth_secret_file=secret)

    @property
    def master_url(self) -> str:
        return f"spark://{self.master_host}:{self.master_port}"

    @property
    def master_webui(self) -> str:
        return f"http://{self.master_host}:{self.master_webui_port}"

    # -- commands -------------------------------------------------------------------------------

    def _env(self, local_ip: str) -> dict[str, str]:
        """The environment ``bin/spark-class`` would give a daemon, bound to ``local_ip``."""
        home = spark_home()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_GATEWAY", "SPARK_"))}
        env.update(
            SPARK_HOME=str(home),
            SPARK_ENV_LOADED="1",  # what load-spark-env.sh marks; there is no conf/spark-env.sh to load
            SPARK_CONF_DIR=str(self.home / "conf"),
            SPARK_SCALA_VERSION=scala_version(home),
            SPARK_LOG_DIR=str(self.home / "logs"),
            SPARK_DAEMON_MEMORY=self.daemon_memory,
            SPARK_MASTER_OPTS=" ".join(MASTER_OPTS),
            SPARK_WORKER_OPTS=" ".join(WORKER_OPTS),
            # The RPC endpoint and the web UI bind this address only, not 0.0.0.0.
            SPARK_LOCAL_IP=local_ip,
        )
        return env

    def _command(self, main_class: str, args: Sequence[str], env: dict[str, str]) -> list[str]:
        """The java command line spark-class would exec for ``main_class args`` (the launcher's part
        before the arguments depends on the class and the environment only, so it is asked once)."""
        if main_class not in self._commands:
            self._commands[main_class] = self._launcher_command(main_class, env)
        return [*self._commands[main_class], *args]

    @staticmethod
    def _launcher_command(main_class: str, env: dict[str, str]) -> list[str]:
        home = Path(env["SPARK_HOME"])
        launcher = ["java", "-Xmx128m", "-cp", f"{home / 'jars'}/*", "org.apache.spark.launcher.Main", main_class]
        proc = subprocess.run(launcher, env=env, capture_output=True, check=False)
        if proc.returncode != 0:
            raise StackError(f"spark launcher failed for {main_class}: {proc.stderr.decode(errors='replace')}")
        # Main prints "\0\n" and then the command's arguments, each followed by "\0" (read by spark-class).
        _, _, tail = proc.stdout.partition(b"\0\n")
        cmd = [part.decode() for part in tail.split(b"\0") if part]
        if not cmd or not cmd[0].endswith("java") or cmd[-1] != main_class:
            raise StackError(f"unexpected spark launcher output for {main_class}: {proc.stdout[:200]!r}")
        return cmd

    def _worker_dir(self, i: int) -> Path:
        return self.home / f"worker-{i}" / "work"

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> list[int]:
        """Start the master and every worker that is not running; running ones are reused. Returns pids."""
        (self.home / "conf").mkdir(parents=True, exist_ok=True)
        if self.auth_secret_file is not None:
            # Read by every daemon from SPARK_CONF_DIR (never a -D flag: the process list is public).
            from feed_service.security.spark_conf import write_defaults

            write_defaults(self.home / "conf", self.auth_secret_file)
        pids = [self._start_master()]
        pids += [self.start_worker(i) for i in range(len(self.workers))]
        return pids

    def _start_master(self) -> int:
        running = self.master.pid()
        if running is not None:
            return running
        _refuse_taken(self.master.name, self.master_host, self.master_port, self.master_webui_port)
        env = self._env(self.master_host)
        cmd = self._command(MASTER_CLASS, ["--host", self.master_host, "--port", str(self.master_port),
                                           "--webui-port", str(self.master_webui_port)], env)
        return self.master.start(cmd, env=env, cwd=self.master.log_file.parent)

    def start_worker(self, i: int) -> int:
        """Start worker ``i`` (again, after :meth:`kill_worker`); a running worker is reused."""
        worker = self.workers[i]
        running = worker.pid()
        if running is not None:
            return running
        host = self.worker_hosts[i]
        _refuse_taken(worker.name, host, self.worker_ports[i], self.worker_webui_ports[i])
        work_dir = self._worker_dir(i)
        work_dir.mkdir(parents=True, exist_ok=True)
        env = self._env(host)
        env["SPARK_WORKER_DIR"] = str(work_dir)
        cmd = self._command(WORKER_CLASS, [
            "--host", host, "--port", str(self.worker_ports[i]), "--webui-port", str(self.worker_webui_ports[i]),
            "--cores", str(self.worker_cores), "--memory", self.worker_memory, "--work-dir", str(work_dir),
            self.master_url,
        ], env)
        return worker.start(cmd, env=env, cwd=work_dir)

    def kill_worker(self, i: int) -> int | None:
        """SIGKILL worker ``i``'s JVM alone, as a crash: its executors are left to notice (WorkerWatcher).
        Returns the killed pid, or None if it was not running."""
        pid = self.workers[i].pid()
        if pid is None:
            return None
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        deadline = time.monotonic() + 10
        while self.workers[i].pid() is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        return pid

    def executor_processes(self, i: int) -> list[int]:
        """Pids of worker ``i``'s executors and of their Python workers, also after the worker itself was
        killed: the processes (other than the worker) that run in its work dir. The executor is in the
        worker's process group, but PySpark's daemon makes a process group of its own."""
        work_dir = self._worker_dir(i)
        worker = self.workers[i].pid()
        return [pid for pid in _processes_in(work_dir) if pid != worker]

    def stop(self, *, grace: float = STOP_GRACE) -> list[str]:
        """Stop the workers, then the master; then end whatever still runs in a worker's work dir (what a
        killed worker left, should it not have exited). Returns the names of the daemons that were running."""
        stopped = []
        for i, worker in enumerate(self.workers):
            if worker.stop(grace=grace):  # TERM to its group: its shutdown hook ends its executors
                stopped.append(worker.name)
            deadline = time.monotonic() + 5
            while self.executor_processes(i) and time.monotonic() < deadline:
                time.sleep(0.1)
            for pid in self.executor_processes(i):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self.master.stop(grace=grace):
            stopped.append(self.master.name)
        return stopped

    # -- health ---------------------------------------------------------------------------------

    def master_state(self, timeout: float = 2.0) -> dict:
        """The master web UI's JSON summary (``status``, ``workers[].state``, ``activeapps``...)."""
        with urllib.request.urlopen(f"{self.master_webui}/json/", timeout=timeout) as response:
            return json.loads(response.read())

    def alive_workers(self, state: dict | None = None) -> list[str]:
        """``host:port`` of this cluster's workers that the master lists as ALIVE."""
        state = self.master_state() if state is None else state
        ours = set(self.worker_hosts)
        return sorted(f"{w['host']}:{w['port']}" for w in state.get("workers", ())
                      if w.get("state") == "ALIVE" and w.get("host") in ours)

    def wait_ready(self, timeout: float = 60.0, *, workers: int | None = None) -> float:
        """Wait until the master answers and ``workers`` (default: all) of ours are ALIVE in it; returns
        the seconds waited. Fails at once, with the log's tail, if a daemon exited."""
        want = len(self.workers) if workers is None else workers
        started = time.monotonic()
        last: Exception | str = "not polled"
        while True:
            running = [w for w in self.workers if w.is_running()]
            down = [p for p in (self.master, *self.workers) if not p.is_running()]
            if down and (not self.master.is_running() or len(running) < want):
                process = down[0]
                raise StackError(f"{process.name} is not running\nlog file: {process.log_file}\n"
                                 f"--- last lines ---\n{process.log_tail()}")
            try:
                state = self.master_state()
                alive = self.alive_workers(state)
                if state.get("status") == "ALIVE" and len(alive) >= want:
                    return time.monotonic() - started
                last = f"master {state.get('status')}, alive workers {alive}"
            except OSError as exc:
                last = exc
            if time.monotonic() - started > timeout:
                raise StackError(f"spark standalone not ready after {timeout:.0f}s ({last}); logs under "
                                 f"{self.home}\n--- {self.master.name} ---\n{self.master.log_tail(10)}")
            time.sleep(0.25)

    def status(self) -> list[DaemonStatus]:
        """One :class:`DaemonStatus` per daemon (``ServiceStatus(*status)`` in the stack's listing)."""
        rows = [DaemonStatus(self.master.name, self.master.is_running(), self.master.pid(),
                             f"{self.master_url} ({self.master_webui})", str(self.master.log_file))]
        for i, worker in enumerate(self.workers):
            port = self.worker_ports[i] or "?"
            rows.append(DaemonStatus(worker.name, worker.is_running(), worker.pid(),
                                     f"{self.worker_hosts[i]}:{port}", str(worker.log_file)))
        return rows


def _refuse_taken(name: str, host: str, *ports: int) -> None:
    """A clear error instead of a daemon that starts and then fails to bind (its log says why)."""
    from feed_service.stack.config import port_open

    for port in ports:
        if port and port_open(host, port):
            raise StackError(f"{name}: port {host}:{port} is taken by another process; set another port "
                             "or stop that process")


def _processes_in(folder: Path) -> list[int]:
    """Live (not zombie) processes whose working directory is ``folder`` or below it."""
    folder = folder.resolve()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = Path(os.readlink(entry / "cwd"))
            zombie = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if not zombie and cwd.is_relative_to(folder):
            found.append(int(entry.name))
    return sorted(found)
