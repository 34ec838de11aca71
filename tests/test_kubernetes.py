"""Static gates on the Kubernetes manifests (deploy/kubernetes/base), since no cluster
runs in CI: they are what `boilerbench kubernetes` writes from the registry now; every
document passes kubernetes-validate's schemas of a pinned Kubernetes release (strict:
unknown fields fail); and `manifest_problems` checks them against shared.registry and
docker-compose.yml. The structural gate is also run on altered copies, to show that it
fails when it should."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.kubernetes import BASE, SECRET, WORKERS, measured_memory, render
from shared.layout import MAX_BROWSER_BYTES
from shared.registry import ORCHESTRATOR_PORT, SERVICES

ROOT = Path(__file__).resolve().parent.parent
KUBERNETES_VERSION = "1.34.0"


def load_documents(base: Path) -> dict[str, list[dict[str, Any]]]:
    return {p.name: [d for d in yaml.safe_load_all(p.read_text()) if d]
            for p in sorted(base.glob("*.yaml"))}


def by_kind(documents: dict[str, list[dict[str, Any]]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d
            for docs in documents.values() for d in docs if d["kind"] != "Kustomization"}


def compose_ports() -> dict[str, int]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    ports: dict[str, int] = {}
    for name, service in compose["services"].items():
        exposed = service.get("expose") or [p.rsplit(":", 1)[-1]
                                            for p in service.get("ports", [])]
        ports[name] = int(str(exposed[0]))
    return ports


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def _pod_problems(where: str, deployment: dict[str, Any], port: int) -> list[str]:
    problems: list[str] = []
    pod = deployment["spec"]["template"]["spec"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    if any(labels.get(k) != v for k, v in deployment["spec"]["selector"]["matchLabels"].items()):
        problems.append(f"{where}: the selector does not match the pod's labels")
    if not pod.get("securityContext", {}).get("runAsNonRoot"):
        problems.append(f"{where}: the pod may run as root")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for container in pod["containers"]:
        context = container.get("securityContext", {})
        if not context.get("readOnlyRootFilesystem"):
            problems.append(f"{where}: the root file system is writable")
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}: privilege escalation is allowed")
        ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
        if ports.get("http") != port:
            problems.append(f"{where}: container port {ports.get('http')}, expected {port}")
        for probe in ("readinessProbe", "livenessProbe"):
            get = container.get(probe, {}).get("httpGet", {})
            if get.get("path") != "/health" or get.get("port") not in ("http", port):
                problems.append(f"{where}: no {probe} on /health")
        resources = container.get("resources", {})
        for kind in ("requests", "limits"):
            if not {"cpu", "memory"} <= set(resources.get(kind, {})):
                problems.append(f"{where}: no cpu and memory {kind}")
        mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
        if "emptyDir" not in volumes.get(mounts.get("/tmp", ""), {}):
            problems.append(f"{where}: no writable /tmp (an emptyDir)")
        tokens = [e for e in container.get("env", []) if e["name"].endswith("TOKEN")]
        if not tokens or any(e.get("valueFrom", {}).get("secretKeyRef", {}).get("name")
                             != SECRET for e in tokens):
            problems.append(f"{where}: the bearer token does not come from the Secret {SECRET}")
    return problems


def manifest_problems(base: Path, compose: dict[str, int]) -> list[str]:
    """Everything on which the manifests, the registry and docker-compose.yml disagree,
    and every missing safeguard."""
    documents = load_documents(base)
    kinds = by_kind(documents)
    problems: list[str] = []
    kustomization = documents.get("kustomization.yaml", [{}])[0]
    if sorted(kustomization.get("resources", [])) != sorted(set(documents) -
                                                            {"kustomization.yaml"}):
        problems.append("kustomization.yaml does not list exactly the other files")
    for name in sorted({n for _, n in kinds} - {*SERVICES, "orchestrator",
                                                "orchestrator-data"}):
        problems.append(f"{name} is not in shared.registry")
    for name, entry in [*SERVICES.items(), ("orchestrator", None)]:
        port = entry.port if entry else ORCHESTRATOR_PORT
        if compose.get(name) != port:
            problems.append(f"{name}: docker-compose.yml port {compose.get(name)}, "
                            f"registry {port}")
        deployment = kinds.get(("Deployment", name))
        service = kinds.get(("Service", name))
        if deployment is None or service is None:
            problems.append(f"{name}: no Deployment and Service")
            continue
        problems += _pod_problems(name, deployment, port)
        if [p["port"] for p in service["spec"]["ports"]] != [port]:
            problems.append(f"{name}: Service port {service['spec']['ports']}, expected {port}")
        if service["spec"]["selector"] != deployment["spec"]["selector"]["matchLabels"]:
            problems.append(f"{name}: the Service selects other pods than the Deployment's")
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        env = _env(container)
        if entry is None:
            continue
        if env.get("BOILERBENCH_PORT", {}).get("value") != str(port):
            problems.append(f"{name}: BOILERBENCH_PORT is not {port}")
        scaler = kinds.get(("HorizontalPodAutoscaler", name))
        if scaler is None or scaler["spec"]["scaleTargetRef"]["name"] != name or \
                scaler["spec"]["metrics"][0]["resource"]["name"] != "cpu":
            problems.append(f"{name}: no HorizontalPodAutoscaler on CPU")
    orchestrator = kinds.get(("Deployment", "orchestrator"))
    if orchestrator is not None:
        pod = orchestrator["spec"]["template"]["spec"]
        env = _env(pod["containers"][0])
        urls = json.loads(env.get("BOILERBENCH_URLS", {}).get("value", "{}"))
        expected = {n: f"http://{n}:{e.port}" for n, e in SERVICES.items()}
        if urls != expected:
            problems.append(f"orchestrator: BOILERBENCH_URLS {urls}, expected {expected}")
        claims = [v["persistentVolumeClaim"]["claimName"] for v in pod.get("volumes", [])
                  if "persistentVolumeClaim" in v]
        store = env.get("BOILERBENCH_STORE", {}).get("value", "")
        mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        claimed = [v["name"] for v in pod.get("volumes", []) if "persistentVolumeClaim" in v]
        if not claims or ("PersistentVolumeClaim", claims[0]) not in kinds or \
                not any(store.startswith(mounts.get(c, "?") + "/") for c in claimed):
            problems.append("orchestrator: its store is not on a PersistentVolumeClaim")
    return problems


def test_committed_manifests_are_what_the_generator_writes(tmp_path: Path) -> None:
    written = CliRunner().invoke(app, ["kubernetes", "--out", str(tmp_path)])
    assert written.exit_code == 0, written.output
    assert {p.name: p.read_text() for p in tmp_path.glob("*.yaml")} == \
        {p.name: p.read_text() for p in BASE.glob("*.yaml")}, \
        "deploy/kubernetes/base is stale: run `boilerbench kubernetes`"
    assert CliRunner().invoke(app, ["kubernetes", "--check"]).exit_code == 0
    (tmp_path / "bte.yaml").write_text("stale")
    stale = CliRunner().invoke(app, ["kubernetes", "--check", "--out", str(tmp_path)])
    assert stale.exit_code == 1
    assert "bte.yaml" in stale.output


def test_a_folder_that_cannot_be_written_fails_in_one_line(tmp_path: Path) -> None:
    a_file = tmp_path / "manifests.yaml"
    a_file.write_text("")
    runner = CliRunner()
    is_file = runner.invoke(app, ["kubernetes", "--out", str(a_file)], terminal_width=200)
    below_file = runner.invoke(app, ["kubernetes", "--out", str(a_file / "base")])
    assert is_file.exit_code == 2, is_file.output
    assert "is a file: name a folder" in is_file.output
    assert below_file.exit_code == 1, below_file.output
    assert below_file.output == f"cannot write the manifests to {a_file / 'base'}: " \
                                "Not a directory\n"
    assert a_file.read_text() == ""


def test_every_document_is_valid_for_the_pinned_kubernetes() -> None:
    documents = [d for docs in load_documents(BASE).values() for d in docs
                 if d["kind"] != "Kustomization"]
    assert len(documents) == 3 * len(SERVICES) + 3
    for document in documents:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_invalid_documents_are_refused() -> None:
    deployment = by_kind(load_documents(BASE))[("Deployment", "bte")]
    broken = json.loads(json.dumps(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"][
        "pth"] = "/health"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_manifests_agree_with_the_registry_and_compose() -> None:
    assert manifest_problems(BASE, compose_ports()) == []


def test_memory_comes_from_the_measured_figures() -> None:
    memory = measured_memory()
    kinds = by_kind(load_documents(BASE))
    for name in SERVICES:
        resources = kinds[("Deployment", name)]["spec"]["template"]["spec"]["containers"][0][
            "resources"]
        request = int(resources["requests"]["memory"].removesuffix("Mi"))
        limit = int(resources["limits"]["memory"].removesuffix("Mi"))
        peak = memory.get(name, max(memory.values()))
        assert peak <= request < peak + 16
        assert limit >= 2 * peak
        # A browser (cetd's measure htd) may hold up to MAX_BROWSER_BYTES per worker,
        # beyond the peak measured with default options.
        browsers = WORKERS * MAX_BROWSER_BYTES / 2**20
        if "chromium" in SERVICES[name].debian_packages:
            assert limit >= peak + browsers, name
        else:
            assert limit < peak + browsers, name


def _edit(name: str, change: Callable[[list[dict[str, Any]]], object]
          ) -> Callable[[Path], None]:
    def apply(base: Path) -> None:
        path = base / name
        documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
        change(documents)
        path.write_text(yaml.safe_dump_all(documents))
    return apply


def _container_of(documents: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = next(
        d for d in documents if d["kind"] == "Deployment")["spec"]["template"]["spec"][
        "containers"][0]
    return container


ALTERATIONS: dict[str, tuple[Callable[[Path], None], str]] = {
    "service missing": (lambda base: (base / "cetd.yaml").unlink(), "cetd: no Deployment"),
    "wrong port": (_edit("bte.yaml", lambda docs: next(
        d for d in docs if d["kind"] == "Service")["spec"]["ports"][0].update(port=9999)),
        "bte: Service port"),
    "writable root": (_edit("justext.yaml", lambda docs: _container_of(docs)[
        "securityContext"].update(readOnlyRootFilesystem=False)),
        "justext: the root file system is writable"),
    "token in plain text": (_edit("rss.yaml", lambda docs: _container_of(docs)["env"].append(
        {"name": "BOILERBENCH_TOKEN", "value": "secret"})), "rss: the bearer token"),
    "no autoscaler": (_edit("fusion.yaml", lambda docs: docs.pop()),
                      "fusion: no HorizontalPodAutoscaler"),
    "liveness elsewhere": (_edit("density.yaml", lambda docs: _container_of(docs)[
        "livenessProbe"]["httpGet"].update(path="/info")), "density: no livenessProbe"),
    "store off the claim": (_edit("orchestrator.yaml", lambda docs: _container_of(docs)[
        "env"].append({"name": "BOILERBENCH_STORE", "value": "/tmp/store.sqlite"})
        or _container_of(docs).update(env=[e for e in _container_of(docs)["env"]
                                           if e.get("value") != "/data/boilerbench.sqlite"])),
        "orchestrator: its store is not on a PersistentVolumeClaim"),
}


@pytest.mark.parametrize("alteration", sorted(ALTERATIONS))
def test_structural_checks_catch_alterations(alteration: str, tmp_path: Path) -> None:
    base = tmp_path / "base"
    shutil.copytree(BASE, base)
    change, expected = ALTERATIONS[alteration]
    change(base)
    problems = manifest_problems(base, compose_ports())
    assert any(expected in p for p in problems), problems


def test_compose_port_mismatch_is_caught() -> None:
    ports = {**compose_ports(), "readability": 1234}
    assert any("readability: docker-compose.yml port 1234" in p
               for p in manifest_problems(BASE, ports))


def test_a_new_registry_service_gets_manifests(monkeypatch: pytest.MonkeyPatch) -> None:
    from shared.registry import ServiceEntry

    monkeypatch.setitem(SERVICES, "newcomer", ServiceEntry("newcomer", 8099))
    files = render(measured_memory())
    assert "newcomer.yaml" in files
    assert "newcomer.yaml" in yaml.safe_load(files["kustomization.yaml"].split("\n", 1)[1])[
        "resources"]
    docs = list(yaml.safe_load_all(files["newcomer.yaml"]))
    assert "not measured" in docs[0]["metadata"]["annotations"]["boilerbench.org/memory"]
    assert '"newcomer": "http://newcomer:8099"' in files["orchestrator.yaml"]
