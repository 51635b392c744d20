"""The driver program of the cluster module's standalone check (test_cluster.py): it runs in a child process
(the pytest process may already hold a local-mode session, the ``spark`` fixture, and a process has one
SparkContext), from a folder outside the checkout, so nothing reaches the executors through the working
directory. It prints one ``RESULT <json>`` line of what it saw.
"""

import textwrap

DRIVER = textwrap.dedent(r'''
    import json, sys, threading, time
    from pathlib import Path

    import pandas as pd

    from feed_service.core.events import tweet_payload_digest
    from spark_jobs.runtime.session import build_session
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
