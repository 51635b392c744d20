"""The Kubernetes manifests only use commands the CLI has, the stream stays a single driver whose
checkpoint every pod reaches, and the ConfigMap holds settings the service accepts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from feed_service.cli.main import build_parser
from feed_service.settings import Settings

K8S = Path(__file__).resolve().parents[2] / "k8s"
STREAM_APP = "stream-sparkapplication.yaml"

Manifest = dict[str, Any]


def _subcommands() -> set[str]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return set(action.choices)


def manifests() -> list[Manifest]:
    """Every object of k8s/*.yaml (the kustomization's own file is not one)."""
    return [d for p in sorted(K8S.glob("*.yaml")) if p.name != "kustomization.yaml"
            for d in yaml.safe_load_all(p.read_text()) if d]


def one(kind: str, name: str | None = None) -> Manifest:
    (doc,) = [d for d in manifests() if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return doc


def feedctl_invocations() -> list[list[str]]:
    """feedctl's arguments wherever the manifests run it: a container's ``command`` and the stream's
    ``driverArgs`` (its launcher is feedctl, k8s/image/feedctl_submit.py)."""
    found: list[list[str]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            command = node.get("command")
            if isinstance(command, list) and command[:1] == ["feedctl"]:
                found.append([str(a) for a in command[1:]])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for doc in manifests():
        walk(doc)
        if doc["kind"] == "SparkApplication":
            found.append([str(a) for a in doc["spec"]["driverArgs"]])
    return found


def test_every_feedctl_command_in_manifests_exists() -> None:
    used = {m.group(1) for p in K8S.glob("*.yaml") for m in re.finditer(r'"feedctl", "([a-z-]+)"', p.read_text())}
    assert used, "manifests run feedctl commands"
    assert used <= _subcommands()


def test_every_feedctl_invocation_parses() -> None:
    """Subcommands and options alike: the CLI's own parser accepts every invocation."""
    invocations = feedctl_invocations()
    assert {args[0] for args in invocations} >= {"provision", "serve", "stream"}
    parser = build_parser()
    for args in invocations:
        try:
            parser.parse_args(args)
        except SystemExit:
            pytest.fail(f"feedctl {' '.join(args)}: refused by feedctl's parser")


def _conf_volumes(conf: dict[str, str], role: str) -> dict[str, dict[str, str]]:
    """``{volume name: {key: value}}`` of a role's persistentVolumeClaim volumes in Spark conf."""
    prefix = f"spark.kubernetes.{role}.volumes.persistentVolumeClaim."
    volumes: dict[str, dict[str, str]] = {}
    for key, value in conf.items():
        if key.startswith(prefix):
            name, _, setting = key.removeprefix(prefix).partition(".")
            volumes.setdefault(name, {})[setting] = value
    return volumes


def _option(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_the_stream_is_one_driver_with_a_checkpoint_every_pod_reaches() -> None:
    """One SparkApplication (one driver per attempt) and nothing else runs ``feedctl stream``; its
    checkpoint, status file and liveness probe are on a ReadWriteMany claim mounted at the same path
    in the driver and in every executor."""
    assert not (K8S / "stream-statefulset.yaml").exists()
    streams = [args for args in feedctl_invocations() if args[0] == "stream"]
    app = one("SparkApplication")
    assert streams == [app["spec"]["driverArgs"]], "exactly one stream: the SparkApplication's driver"

    conf = app["spec"]["sparkConf"]
    driver, executor = _conf_volumes(conf, "driver"), _conf_volumes(conf, "executor")
    assert driver == executor and len(driver) == 1, "the same claim, at the same path, in every pod"
    (volume,) = driver.values()
    mount = volume["mount.path"]
    assert volume.get("mount.readOnly", "false") == "false"
    claim = one("PersistentVolumeClaim", volume["options.claimName"])
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]

    args = app["spec"]["driverArgs"]
    checkpoint, status = _option(args, "--checkpoint"), _option(args, "--status-file")
    assert checkpoint.startswith(mount + "/") and status.startswith(mount + "/")
    driver_pod = app["spec"]["driverSpec"]["podTemplateSpec"]
    (container,) = driver_pod["spec"]["containers"]
    assert status in " ".join(container["livenessProbe"]["exec"]["command"])
    assert container["name"] == conf["spark.kubernetes.driver.podTemplateContainerName"]
    (executor_container,) = app["spec"]["executorSpec"]["podTemplateSpec"]["spec"]["containers"]
    assert executor_container["name"] == conf["spark.kubernetes.executor.podTemplateContainerName"]
    # Executors as pods, as many as the operator's health check expects.
    tolerations = app["spec"]["applicationTolerations"]
    assert int(conf["spark.executor.instances"]) == tolerations["instanceConfig"]["maxExecutors"] >= 1
    assert conf.get("spark.dynamicAllocation.enabled", "false") == "false"
    assert tolerations["restartConfig"]["restartPolicy"] == "Always"


def test_the_streams_driver_serves_metrics_and_provisions_first() -> None:
    app = one("SparkApplication")
    args = app["spec"]["driverArgs"]
    pod = app["spec"]["driverSpec"]["podTemplateSpec"]
    (container,) = pod["spec"]["containers"]
    port = int(_option(args, "--metrics-port"))
    assert port == 9465 == int(one("ConfigMap", "feed-config")["data"]["FEED_STREAM_METRICS_PORT"])
    assert {"name": "metrics", "containerPort": port} in container["ports"]
    assert pod["metadata"]["annotations"] == {"prometheus.io/scrape": "true", "prometheus.io/port": str(port)}
    (init,) = pod["spec"]["initContainers"]
    assert init["command"] == ["feedctl", "provision"]
    for template in (pod, app["spec"]["executorSpec"]["podTemplateSpec"]):
        for c in template["spec"]["containers"] + template["spec"].get("initContainers", []):
            assert {"configMapRef": {"name": "feed-config"}} in c["envFrom"], c["name"]
        assert template["spec"]["securityContext"]["runAsNonRoot"] is True


def test_the_driver_may_create_its_executors() -> None:
    app = one("SparkApplication")
    account = app["spec"]["sparkConf"]["spark.kubernetes.authenticate.driver.serviceAccountName"]
    one("ServiceAccount", account)
    binding = one("RoleBinding")
    assert {"kind": "ServiceAccount", "name": account} in [
        {k: s[k] for k in ("kind", "name")} for s in binding["subjects"]]
    role = one(binding["roleRef"]["kind"], binding["roleRef"]["name"])
    granted = {(res, verb) for rule in role["rules"] if "" in rule["apiGroups"]
               for res in rule["resources"] for verb in rule["verbs"]}
    for resource in ("pods", "services", "configmaps", "persistentvolumeclaims"):
        for verb in ("create", "get", "list", "watch", "delete", "patch"):
            assert (resource, verb) in granted, (resource, verb)


def test_no_manifest_sets_the_spark_master() -> None:
    """Under the operator, spark-submit's master (the Kubernetes API) must stay the session's."""
    for doc in manifests():
        assert "FEED_SPARK_MASTER" not in yaml.safe_dump(doc), doc["metadata"]["name"]


def test_the_configmap_is_a_valid_production_configuration() -> None:
    data = one("ConfigMap", "feed-config")["data"]
    settings = Settings.from_env(data)
    assert len(settings.kafka_bootstrap.split(",")) == 3 and len(settings.cassandra_hosts) == 3
    assert settings.cassandra_replication == "NetworkTopologyStrategy:datacenter1=3"
    assert settings.cassandra_local_dc == "datacenter1"
    assert settings.write_consistency == settings.read_consistency == "LOCAL_QUORUM"
    assert (settings.topic_replication, settings.topic_min_insync_replicas) == (3, 2)


def test_kustomization_lists_every_manifest() -> None:
    listed = set(re.findall(r"^\s+- (\S+\.yaml)$", (K8S / "kustomization.yaml").read_text(), re.M))
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    assert listed == present
