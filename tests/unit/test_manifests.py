"""The Kubernetes manifests only use commands the CLI has, and the stream stays a single driver."""

from __future__ import annotations

import re
from pathlib import Path

from feed_service.cli.main import build_parser

K8S = Path(__file__).resolve().parents[2] / "k8s"


def _subcommands() -> set[str]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return set(action.choices)


def test_every_feedctl_command_in_manifests_exists() -> None:
    used = {m.group(1) for p in K8S.glob("*.yaml") for m in re.finditer(r'"feedctl", "([a-z-]+)"', p.read_text())}
    assert used, "manifests run feedctl commands"
    assert used <= _subcommands()


def test_stream_is_one_replica_with_a_persistent_checkpoint() -> None:
    text = (K8S / "stream-statefulset.yaml").read_text()
    assert re.search(r"^\s*replicas: 1$", text, re.M)
    assert "volumeClaimTemplates" in text and "--checkpoint" in text


def test_kustomization_lists_every_manifest() -> None:
    listed = set(re.findall(r"^\s+- (\S+\.yaml)$", (K8S / "kustomization.yaml").read_text(), re.M))
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    assert listed == present
