"""A Spark standalone master with two workers on their own loopback addresses runs the project's code
from the shipped zip, and a job survives the crash (SIGKILL) of one worker.

The driver runs in a child process: this pytest process may already hold a local-mode session (the
``spark`` fixture), and a process has one SparkContext. It also runs from a folder outside the
checkout, so nothing reaches the executors through the working directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from feed_service.stack.spark_standalone import SparkStandalone

REPO_ROOT = Path(__file__).resolve().parents[2]

DRIVER = textwrap.dedent(r'''
    import json, sys, threading, time
    from pathlib import Path

    import pandas as pd

    from feed_service.core.events import tweet_payload_digest
    from feed_service.stack.spark import build_session
    from feed_service.stack.spark_standalone import SparkStandalone

    spec = json.loads(sys.argv[1])
    standalone = SparkStandalone(Path(spec.pop("home")), **spec)
    out = {}
    spark = build_session("feed-standalone-test", master=standalone.master_url, shuffle_partitions=2)
    sc = spark.sparkContext
    out["master"] = sc.master
    out["py_files"] = spark.conf.get("spark.submit.pyFiles")

    deadline = time.monotonic() + 60
    while sc._jsc.sc().getExecutorIds().size() < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    out["executors"] = sc._jsc.sc().getExecutorIds().size()

    def where(_):
        import os
        import feed_service, spark_jobs
        from feed_service import resources
        yield feed_service.__file__, spark_jobs.__file__, os.getcwd(), len(resources.read_json(resources.TOPICS))

    out["where"] = sc.parallelize(range(8), 8).mapPartitions(where).collect()

    def digests(batches):
        from feed_service.core.events import tweet_payload_digest as digest
        for pdf in batches:
            yield pd.DataFrame({"n": pdf["n"], "digest": [str(digest(int(n), f"t{n}", 1)) for n in pdf["n"]]})

    rows = spark.range(0, 200, 1, 4).withColumnRenamed("id", "n").mapInPandas(digests, "n long, digest string")
    got = {r.n: r.digest for r in rows.collect()}
    out["pandas_ok"] = got == {n: str(tweet_payload_digest(n, f"t{n}", 1)) for n in range(200)}

    # A job whose tasks run on both executors while worker 0 crashes.
    def slow(i):
        import os, time
        time.sleep(2)
        return i, os.getcwd()

    result = {}
    job = threading.Thread(target=lambda: result.update(rows=sc.parallelize(range(8), 8).map(slow).collect()))
    job.start()
    tracker = sc.statusTracker()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        active = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
        if sum(s.numActiveTasks for s in active if s) >= 2:
            break
        time.sleep(0.1)
    def described(pids):
        names = []
        for pid in pids:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            names.append(next((c.decode() for c in cmd if b"Executor" in c or b"pyspark." in c), cmd[0].decode()))
        return names

    out["executor_processes"] = described(standalone.executor_processes(0))
    killed_at = time.monotonic()
    out["killed_pid"] = standalone.kill_worker(0)
    seen = {}
    while time.monotonic() - killed_at < 60 and len(seen) < 3:
        now = time.monotonic() - killed_at
        if "executor_gone_s" not in seen and not standalone.executor_processes(0):
            seen["executor_gone_s"] = now
        if "driver_lost_s" not in seen and sc._jsc.sc().getExecutorIds().size() < 2:
            seen["driver_lost_s"] = now
        if "master_lost_s" not in seen and len(standalone.alive_workers()) < 2:
            seen["master_lost_s"] = now
        time.sleep(0.05)
    out.update(seen)
    out["leftover"] = described(standalone.executor_processes(0))
    job.join(120)
    out["slow_job_s"] = time.monotonic() - killed_at
    out["slow_rows"] = sorted(i for i, _ in result.get("rows", []))

    started = time.monotonic()
    out["after"] = sc.parallelize(range(4), 4).mapPartitions(where).collect()
    out["after_s"] = time.monotonic() - started
    spark.stop()
    print("RESULT " + json.dumps(out))
''')


def test_standalone_runs_shipped_code_and_survives_a_worker_crash(tmp_path: Path) -> None:
    standalone = SparkStandalone.with_free_ports(tmp_path / "spark")
    try:
        started = time.monotonic()
        standalone.start()
        standalone.wait_ready(90)
        ready_s = time.monotonic() - started
        assert standalone.start() == [s.pid for s in standalone.status()]  # idempotent: nothing new

        spec = {"home": str(standalone.home), "master_host": standalone.master_host,
                "master_port": standalone.master_port, "master_webui_port": standalone.master_webui_port,
                "worker_hosts": list(standalone.worker_hosts), "worker_ports": list(standalone.worker_ports),
                "worker_webui_ports": list(standalone.worker_webui_ports)}
        (tmp_path / "driver.py").write_text(DRIVER)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FEED_SPARK_MASTER")}
        proc = subprocess.run([sys.executable, "driver.py", json.dumps(spec)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=240)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, f"driver failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
        out = json.loads(lines[-1][len("RESULT "):])
        print(f"\nstandalone ready {ready_s:.1f}s; worker 0 ran {out['executor_processes']}; after its "
              f"SIGKILL: " + ", ".join(f"{k} {out.get(k, -1):.2f}" for k in
                                      ("executor_gone_s", "driver_lost_s", "master_lost_s", "slow_job_s", "after_s")))

        assert out["master"] == standalone.master_url and out["executors"] == 2
        code_zip = Path(out["py_files"].split(",")[-1])
        assert code_zip.name.startswith("feed-code-") and code_zip.is_file()
        for feed_file, jobs_file, cwd, topics in out["where"]:
            # The executor's copy of the zip, in its own folder under its worker's work dir (SparkFiles'
            # root on an executor is its working directory, so the path is relative to it).
            shipped = Path(cwd) / code_zip.name
            assert os.path.normpath(Path(cwd) / feed_file) == str(shipped / "feed_service" / "__init__.py"), feed_file
            assert os.path.normpath(Path(cwd) / jobs_file) == str(shipped / "spark_jobs" / "__init__.py"), jobs_file
            assert shipped.is_relative_to(standalone.home) and not shipped.is_relative_to(REPO_ROOT) and topics > 0
        workers_used = {Path(cwd).relative_to(standalone.home).parts[0] for _, _, cwd, _ in out["where"]}
        assert workers_used == {"worker-0", "worker-1"}  # both executors ran tasks
        assert out["pandas_ok"]

        assert out["killed_pid"] and out["executor_processes"], "worker 0 had no executor to lose"
        assert "executor_gone_s" in out, f"executor outlived its worker: {out['leftover']}"
        assert out["slow_rows"] == list(range(8))  # lost tasks were run again on worker 1
        assert {Path(cwd).relative_to(standalone.home).parts[0] for _, _, cwd, _ in out["after"]} == {"worker-1"}

        assert not standalone.workers[0].is_running()
        standalone.start_worker(0)
        standalone.wait_ready(60)
    finally:
        stopped = standalone.stop(grace=10)
    assert "spark-master" in stopped and not any(s.running for s in standalone.status())
