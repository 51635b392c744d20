"""Every manifest of k8s/ is what a cluster would accept, checked offline, and the image the manifests
run is what they expect.

- Built-in kinds: the Kubernetes OpenAPI schemas of :data:`KUBERNETES_VERSION` shipped by
  ``kubernetes-validate``, strict: an unknown field is an error, as ``kubectl apply`` (server-side
  field validation ``Strict``) makes it.
- Custom resources (``SparkApplication``): their CRD's ``openAPIV3Schema`` (k8s/crds/, the operator's
  own), made strict the way the API server prunes unknown fields, plus the ``metadata`` and the pod
  templates they embed against the built-in schemas.
- Spark settings, which no schema knows (``sparkConf`` is a string map, and Spark ignores a key it
  does not know): every key must be one that the installed Spark's jars define.
- The Dockerfile's text: its pins against the project's, what the manifests name in it. The built
  image itself is checked by tests/image/test_image.py (scripts/image).
"""

from __future__ import annotations

import copy
import json
import re
import tomllib
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator

import jsonschema
import kubernetes_validate
import pyspark
import pytest
import yaml
from dockerfile_parse import DockerfileParser
from packaging.specifiers import SpecifierSet

from feed_service.stack.versions import SCALA_BINARY, SPARK_VERSION

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
CRDS = K8S / "crds"

#: The Kubernetes version the manifests are held to: the oldest the Spark operator 1.0.0 recommends
#: (its docs/operations.md, "Compatibility"); a field newer than this is an error.
KUBERNETES_VERSION = "1.34"

#: Spark's volume settings are built from parts (``spark.kubernetes.<role>.volumes.<type>.<name>.<key>``,
#: https://spark.apache.org/docs/latest/running-on-kubernetes.html#using-kubernetes-volumes): the
#: keys the documentation lists for a persistentVolumeClaim.
_PVC_VOLUME_KEY = re.compile(
    r"spark\.kubernetes\.(driver|executor)\.volumes\.persistentVolumeClaim\.([a-z0-9-]+)\."
    r"(mount\.path|mount\.readOnly|mount\.subPath|mount\.subPathExpr|options\.claimName|options\.storageClass"
    r"|options\.sizeLimit)")
#: ``spark.kubernetes.{driver,executor}.secrets.<Secret name>``: a Secret mounted at the value's path (Spark
#: declares the prefix with its trailing dot and appends the name).
_SECRET_MOUNT_KEY = re.compile(r"(spark\.kubernetes\.(driver|executor)\.secrets\.)[a-z0-9][a-z0-9.-]*")


Manifest = dict[str, Any]


def manifest_files() -> list[Path]:
    """Every YAML file under k8s/ but kustomization.yaml (kustomize's input, not an object)."""
    return sorted(p for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml")


#: libyaml's loader when PyYAML has it: the CRD is a megabyte of YAML.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@lru_cache(maxsize=None)
def _documents(path: Path) -> tuple[Manifest, ...]:
    return tuple(d for d in yaml.load_all(path.read_text(), Loader=_LOADER) if d)


def documents(path: Path) -> list[Manifest]:
    """The non-empty documents of a YAML file (copies: a test may change them)."""
    return copy.deepcopy(list(_documents(path)))


def all_documents() -> list[tuple[str, Manifest]]:
    return [(f"{p.relative_to(K8S)}#{i}", d) for p in manifest_files() for i, d in enumerate(documents(p))]


def load_doc(name: str, kind: str) -> Manifest:
    """The one document of ``kind`` in k8s/``name``."""
    (doc,) = [d for d in documents(K8S / name) if d["kind"] == kind]
    return doc


@lru_cache(maxsize=None)
def crd_validators() -> dict[tuple[str, str, str], jsonschema.protocols.Validator]:
    """(group, version, kind) -> validator of the strict schema, for every served version of every CRD
    in k8s/crds/ (built once: checking a schema this size against the metaschema takes seconds)."""
    out: dict[tuple[str, str, str], jsonschema.protocols.Validator] = {}
    for path in sorted(CRDS.glob("*.yaml")):
        for crd in _documents(path):
            assert crd["kind"] == "CustomResourceDefinition", path
            spec = crd["spec"]
            for version in spec["versions"]:
                if version.get("served"):
                    schema = strict_crd_schema(version["schema"]["openAPIV3Schema"])
                    jsonschema.Draft202012Validator.check_schema(schema)
                    key = (spec["group"], version["name"], spec["names"]["kind"])
                    out[key] = jsonschema.Draft202012Validator(schema)
    return out


def strict_crd_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A CRD's structural schema as a JSON schema that rejects what the API server would prune.

    The API server drops a field its structural schema does not declare (and with strict field
    validation refuses the object): an object without ``additionalProperties`` or
    ``x-kubernetes-preserve-unknown-fields`` gets ``additionalProperties: false``. OpenAPI's
    ``nullable`` becomes a null type, and ``x-kubernetes-int-or-string`` an integer or string
    (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#specifying-a-structural-schema).
    At the root, Kubernetes adds apiVersion, kind and metadata (metadata: validated apart, as ObjectMeta).

    >>> strict_crd_schema({"type": "object", "properties": {"a": {"type": "object"}}})["properties"]["a"]
    {'type': 'object', 'additionalProperties': False}
    """
    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {k: walk(v) for k, v in node.items()}
        if out.get("x-kubernetes-int-or-string") and "anyOf" not in out:
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        if out.pop("nullable", False) and "type" in out:
            out["type"] = [out["type"], "null"]
        if (out.get("type") == "object" and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out

    root = walk(schema)
    if root.get("type") == "object":
        root["properties"] = {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                              "metadata": {"type": "object"}, **root.get("properties", {})}
    return root


def custom_validator(doc: Manifest) -> jsonschema.protocols.Validator | None:
    """The validator of a custom resource; None for a built-in kind."""
    group, _, version = doc["apiVersion"].rpartition("/")
    return crd_validators().get((group, version, doc["kind"]))


def is_custom_group(api_version: str) -> bool:
    """Whether the API group is one of the CRDs'."""
    group = api_version.rpartition("/")[0]
    return any(group == g for g, _, _ in crd_validators())


def embedded_pod_templates(doc: Manifest) -> Iterator[tuple[str, Manifest]]:
    """The pod templates a SparkApplication carries (driver, executor)."""
    for role in ("driverSpec", "executorSpec"):
        template = doc.get("spec", {}).get(role, {}).get("podTemplateSpec")
        if template is not None:
            yield role, template


def validate(doc: Manifest) -> None:
    """Raise if the cluster of :data:`KUBERNETES_VERSION` (with the CRDs of k8s/crds/) would refuse ``doc``."""
    validator = custom_validator(doc)
    if validator is None:
        assert not is_custom_group(doc["apiVersion"]), f"{doc['apiVersion']} {doc['kind']}: no such kind in k8s/crds/"
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        return
    error = jsonschema.exceptions.best_match(validator.iter_errors(doc))
    if error is not None:
        raise error
    # What the CRD leaves open, against the built-in schemas: the object's metadata ...
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc["metadata"]},
                                 KUBERNETES_VERSION, strict=True)
    # ... and the pods Spark builds from its templates, as pods of this Kubernetes version.
    for role, template in embedded_pod_templates(doc):
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": role.lower()},
                                      "template": template}, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("name, doc", all_documents(), ids=[n for n, _ in all_documents()])
def test_every_manifest_validates(name: str, doc: Manifest) -> None:
    try:
        validate(doc)
    except (kubernetes_validate.ValidationError, jsonschema.ValidationError) as exc:
        path = ".".join(str(p) for p in exc.absolute_path)
        pytest.fail(f"{name} ({doc['kind']} {doc['metadata'].get('name')}): {path}: {exc.message}")
    except kubernetes_validate.SchemaNotFoundError as exc:
        pytest.fail(f"{name}: {exc.message}")


def test_the_crd_is_the_operators_sparkapplication_v1() -> None:
    assert ("spark.apache.org", "v1", "SparkApplication") in crd_validators()
    apps = [d for _, d in all_documents() if d["kind"] == "SparkApplication"]
    assert apps and all(d["apiVersion"] == "spark.apache.org/v1" for d in apps)


def _rename_key(path: list[str | int], old: str, new: str) -> Callable[[Manifest], None]:
    def mutate(doc: Manifest) -> None:
        node: Any = doc
        for part in path:
            node = node[part]
        node[new] = node.pop(old)
    return mutate


#: Typos the validation must catch: (manifest, kind, mutation). Each is a misspelled field at a
#: different depth of a built-in kind, of the custom resource, and of its embedded pod templates.
TYPOS: list[tuple[str, str, Callable[[Manifest], None]]] = [
    ("server-deployment.yaml", "Deployment", _rename_key(["spec"], "replicas", "replica")),
    ("server-deployment.yaml", "Deployment",
     _rename_key(["spec", "template", "spec", "containers", 0], "readinessProbe", "readynessProbe")),
    ("stream-rbac.yaml", "RoleBinding", _rename_key(["roleRef"], "apiGroup", "apigroup")),
    ("checkpoint-pvc.yaml", "PersistentVolumeClaim", _rename_key(["spec"], "accessModes", "accessMode")),
    ("stream-sparkapplication.yaml", "SparkApplication", _rename_key(["spec"], "driverArgs", "driverArg")),
    ("stream-sparkapplication.yaml", "SparkApplication",
     _rename_key(["spec", "applicationTolerations", "restartConfig"], "restartPolicy", "restartpolicy")),
    ("stream-sparkapplication.yaml", "SparkApplication", _rename_key(["metadata"], "labels", "label")),
    ("stream-sparkapplication.yaml", "SparkApplication",
     _rename_key(["spec", "driverSpec", "podTemplateSpec", "spec", "containers", 0], "livenessProbe", "livenesProbe")),
    ("stream-sparkapplication.yaml", "SparkApplication",
     _rename_key(["spec", "executorSpec", "podTemplateSpec", "spec", "containers", 0], "envFrom", "envfrom")),
]


@pytest.mark.parametrize("name, kind, mutate", TYPOS, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(TYPOS)])
def test_a_misspelled_field_is_refused(name: str, kind: str, mutate: Callable[[Manifest], None]) -> None:
    doc = copy.deepcopy(load_doc(name, kind))
    validate(doc)
    mutate(doc)
    with pytest.raises((kubernetes_validate.ValidationError, jsonschema.ValidationError)):
        validate(doc)


def test_a_wrong_type_or_value_in_the_custom_resource_is_refused() -> None:
    doc = load_doc("stream-sparkapplication.yaml", "SparkApplication")
    for mutate in (lambda d: d["spec"]["sparkConf"].update({"spark.executor.instances": 2}),  # not a string
                   lambda d: d["spec"]["applicationTolerations"]["restartConfig"].update(restartPolicy="Sometimes"),
                   lambda d: d["spec"].pop("runtimeVersions")):  # required
        broken = copy.deepcopy(doc)
        mutate(broken)
        with pytest.raises(jsonschema.ValidationError):
            validate(broken)


# ---- Spark settings


@lru_cache(maxsize=1)
def spark_strings() -> frozenset[str]:
    """Every dotted ``spark.*`` string and every identifier-like string in the class files of the
    installed Spark's core and Kubernetes jars: where Spark declares its settings (``ConfigBuilder``)."""
    jars = Path(pyspark.__file__).parent / "jars"
    found: set[str] = set()
    for pattern in (f"spark-core_{SCALA_BINARY}-*.jar", f"spark-kubernetes_{SCALA_BINARY}-*.jar"):
        (jar,) = jars.glob(pattern)
        with zipfile.ZipFile(jar) as z:
            for member in z.namelist():
                if member.endswith(".class"):
                    found.update(m.decode() for m in re.findall(rb"[A-Za-z][A-Za-z0-9_.\-]{2,}", z.read(member)))
    return frozenset(found)


def spark_knows(key: str) -> bool:
    """Whether the installed Spark defines ``key``: a declared name, a documented volume setting, or a
    declared prefix of four or more parts plus a name Spark appends to it
    (``spark.kubernetes.authenticate.driver`` + ``serviceAccountName``)."""
    strings = spark_strings()
    if key in strings or _PVC_VOLUME_KEY.fullmatch(key):
        return True
    if (secret := _SECRET_MOUNT_KEY.fullmatch(key)) and secret.group(1) in strings:
        return True
    prefix, _, name = key.rpartition(".")
    return prefix.count(".") >= 3 and prefix in strings and name in strings


def test_spark_knows_every_setting_of_the_sparkapplication() -> None:
    assert spark_knows("spark.kubernetes.authenticate.driver.serviceAccountName")
    assert not spark_knows("spark.kubernetes.authenticate.driver.serviceAcountName")
    for typo in ("spark.executor.instance", "spark.kubernetes.executor.request.core",
                 "spark.kubernetes.driver.podTemplateContainerNam",
                 "spark.kubernetes.driver.volumes.persistentVolumeClaim.checkpoint.mount.pth"):
        assert not spark_knows(typo), typo
    conf = load_doc("stream-sparkapplication.yaml", "SparkApplication")["spec"]["sparkConf"]
    unknown = sorted(k for k in conf if not spark_knows(k))
    assert not unknown, f"not settings of Spark {SPARK_VERSION}: {unknown}"


# ---- the image


def kustomization_image() -> str:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    (image,) = [i for i in kustomization["images"] if i["name"] == "feed-service"]
    return f"{image['newName']}:{image['newTag']}"


def test_the_sparkapplication_runs_the_kustomization_image() -> None:
    """kustomize rewrites ``image: feed-service`` in built-in kinds only: the custom resource names the
    full reference itself, in its Spark conf and in any container of its pod templates."""
    app = load_doc("stream-sparkapplication.yaml", "SparkApplication")
    assert app["spec"]["sparkConf"]["spark.kubernetes.container.image"] == kustomization_image()
    for _, template in embedded_pod_templates(app):
        for container in template["spec"].get("initContainers", []) + template["spec"]["containers"]:
            assert container.get("image", kustomization_image()) == kustomization_image(), container["name"]


def test_the_sparkapplication_pins_the_projects_spark() -> None:
    versions = load_doc("stream-sparkapplication.yaml", "SparkApplication")["spec"]["runtimeVersions"]
    assert versions["sparkVersion"] == SPARK_VERSION and versions["scalaVersion"] == SCALA_BINARY


class Stage:
    """One stage of the Dockerfile: its base image and instructions (``(instruction, value)``)."""

    def __init__(self, base: str, alias: str | None) -> None:
        self.base, self.alias = base, alias
        self.instructions: list[tuple[str, str]] = []

    def values(self, instruction: str) -> list[str]:
        return [v for i, v in self.instructions if i == instruction]


def dockerfile() -> tuple[dict[str, str], list[Stage]]:
    """The global ARG defaults and the stages of the Dockerfile, ARGs substituted in FROM lines."""
    parser = DockerfileParser(path=str(ROOT / "Dockerfile"))
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for item in parser.structure:
        instruction, value = item["instruction"], item["value"]
        if instruction == "ARG" and not stages:
            name, _, default = value.partition("=")
            args[name] = default
        elif instruction == "FROM":
            image, _, alias = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], value).partition(" AS ")
            stages.append(Stage(image.strip(), alias.strip() or None))
        elif instruction != "COMMENT" and stages:
            stages[-1].instructions.append((instruction, value))
    return args, stages


def test_the_image_pins_the_projects_spark_python_and_java() -> None:
    """The base images are build arguments (scripts/image passes local stand-ins) whose defaults are
    the registry's images a real build uses: those defaults are held to the project's pins."""
    args, stages = dockerfile()
    assert args["SPARK_VERSION"] == SPARK_VERSION
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    python = re.fullmatch(r"python:(\d+\.\d+)-slim-bookworm", args["PYTHON_IMAGE"])
    assert python and python.group(1) in SpecifierSet(requires), args["PYTHON_IMAGE"]
    runtime, build = stages[-1], next(s for s in stages if s.alias == "build")
    assert runtime.base == build.base == args["PYTHON_IMAGE"]
    jre = next(s for s in stages if s.alias == "jre")
    assert re.fullmatch(r"eclipse-temurin:17-jre(-\w+)?", jre.base)
    maven = next(s for s in stages if s.alias == "maven")
    assert re.fullmatch(r"maven:3\.\d+(\.\d+)?-eclipse-temurin-17(-\w+)?", maven.base)
    assert "--from=jre /opt/java/openjdk /opt/java/openjdk" in runtime.values("COPY")
    # The build checks the wheel it installed against SPARK_VERSION.
    assert any("pip install ." in run and "pyspark.__version__ == '${SPARK_VERSION}'" in run for run in build.values("RUN"))


def test_the_image_installs_the_package_and_the_kafka_connector() -> None:
    _, stages = dockerfile()
    build = next(s for s in stages if s.alias == "build")
    runs = build.values("RUN")
    assert any(re.search(r"\bpip install \.(\s|$)", r) for r in runs) and not any("pip install -e" in r for r in runs)
    assert any("kafka_connector_jars()" in r for r in runs)
    cache = dict(v.split("=", 1) for v in build.values("ENV") if v.startswith("FEED_CACHE_DIR="))["FEED_CACHE_DIR"]
    runtime = stages[-1]
    assert any(v.endswith(f"{cache} {cache}") for v in runtime.values("COPY"))
    assert f"FEED_CACHE_DIR={cache}" in " ".join(runtime.values("ENV"))


def test_the_image_runs_spark_and_feedctl_as_a_user() -> None:
    _, stages = dockerfile()
    runtime = stages[-1]
    (user,) = runtime.values("USER")
    assert user.split(":")[0] not in {"root", "0"}
    # Every pod that runs the image declares the image's user (the server's and the provisioning's too:
    # their Secrets, mounted 0400, are readable by it through fsGroup).
    app = load_doc("stream-sparkapplication.yaml", "SparkApplication")
    pods = [load_doc("server-deployment.yaml", "Deployment")["spec"]["template"]["spec"],
            load_doc("provision-job.yaml", "Job")["spec"]["template"]["spec"],
            *(template["spec"] for _, template in embedded_pod_templates(app))]
    run_as = {(p["securityContext"]["runAsUser"], p["securityContext"]["runAsGroup"], p["securityContext"]["fsGroup"])
              for p in pods}
    uid, gid = (int(part) for part in user.split(":"))
    assert run_as == {(uid, gid, gid)}
    # Spark's Kubernetes scheduler passes "driver ..."/"executor ..." as arguments to the entrypoint.
    (entrypoint,) = runtime.values("ENTRYPOINT")
    (script,) = json.loads(entrypoint)
    assert f"k8s/image/entrypoint.sh {script}" in runtime.values("COPY")
    text = (K8S / "image" / "entrypoint.sh").read_text()
    assert "  driver)" in text and "  executor)" in text and 'exec "$@"' in text
    (cmd,) = runtime.values("CMD")
    assert json.loads(cmd)[0] == "feedctl"


def test_the_launcher_the_sparkapplication_names_is_the_one_the_image_copies() -> None:
    app = load_doc("stream-sparkapplication.yaml", "SparkApplication")
    launcher = app["spec"]["pyFiles"]
    assert launcher.startswith("local://") and "," not in launcher
    _, stages = dockerfile()
    assert f"k8s/image/feedctl_submit.py {launcher.removeprefix('local://')}" in stages[-1].values("COPY")
    source = (K8S / "image" / "feedctl_submit.py").read_text()
    assert "from feed_service.cli.main import main" in source and "sys.exit(main())" in source


def test_the_dockerignore_keeps_the_build_inputs() -> None:
    """The context holds every path the Dockerfile copies from it (the ignore file re-includes them)."""
    _, stages = dockerfile()
    sources = {part.rstrip("/") for stage in stages for value in stage.values("COPY")
               if not value.startswith("--from") for part in value.split()[:-1]}
    included = {line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.startswith("!")}
    for source in sources:
        assert any(source == inc or source.startswith(inc + "/") for inc in included), source
        assert (ROOT / source).exists(), source
