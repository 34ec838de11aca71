"""The consistency checks between the service registry and everything derived from it:
services/Dockerfile's build arguments and docker-compose.yml (deployment_problems),
the Kubernetes base (kubernetes_problems) and the documented counts and ports
(docs_problems). Each takes a repository root and returns what disagrees, so the tests
run them on the repository and on altered or extended copies of it (a service added
by following CONTRIBUTING.md's checklist).

The registry is read from the root's own shared/registry.py, and the Kubernetes
generator is run from the root's own code, so a copy is checked against itself.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import tomllib
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ALGORITHM_DOCKERFILE = "services/Dockerfile"
ORCHESTRATOR_DOCKERFILE = "orchestrator/Dockerfile"
# The dependency layer of both images: pyproject's core and the named groups.
INSTALL_SCRIPT = "deploy/docker/install-dependencies"
ALGORITHM_LABELS = ("org.boilerbench.role", "org.boilerbench.service", "org.boilerbench.port")
# The build arguments of services/Dockerfile, all declared by the registry entry.
BUILD_ARGS = ("SERVICE", "PORT", "DEBIAN_PACKAGES", "USES", "INIT")


@dataclass(frozen=True)
class Registry:
    """The root's shared/registry.py: its entries and the orchestrator's port."""

    services: dict[str, Any]
    orchestrator_port: int


def load_registry(root: Path) -> Registry:
    """Import `root`'s registry under a name of its own (never the installed one)."""
    name = f"_registry_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(name, root / "shared" / "registry.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while decorating
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return Registry(dict(module.SERVICES), int(module.ORCHESTRATOR_PORT))


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

    def args(self) -> dict[str, str | None]:
        """The stage's ARGs: name -> default (None where it has none)."""
        declared: dict[str, str | None] = {}
        for args in self.all("ARG"):
            key, eq, value = args.partition("=")
            declared[key.strip()] = value.strip().strip('"') if eq else None
        return declared


def parse_dockerfile(text: str) -> list[Stage]:
    """The stages of a Dockerfile, each with its instructions (keyword, arguments);
    continuation lines joined and comments dropped (also inside a continued
    instruction, as Docker does)."""
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
    stages: list[Stage] = []
    for keyword, args in instructions:
        if keyword == "FROM":
            parts = args.split()
            named = len(parts) >= 3 and parts[-2].upper() == "AS"
            stages.append(Stage(base=parts[0], name=parts[-1] if named else None))
        elif stages:
            stages[-1].instructions.append((keyword, args))
    return stages


def exec_form(args: str) -> list[str] | None:
    """The JSON array of an exec-form CMD/ENTRYPOINT/HEALTHCHECK CMD, else None."""
    try:
        value = json.loads(args)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


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
    """The paths that .dockerignore sends to the build (it is a whitelist)."""
    lines = [ln.strip() for ln in (root / ".dockerignore").read_text().splitlines()]
    return {ln[1:].strip("/") for ln in lines if ln.startswith("!")}


def url_variable(name: str, port: int) -> str:
    """How the compose file names a service's URL: overridable by <NAME>_URL."""
    return f"${{{name.upper()}_URL:-http://{name}:{port}}}"


def member_urls(entry: Any, services: dict[str, Any]) -> str:
    """The ensemble-style BOILERBENCH_MEMBER_URLS value the compose file must give."""
    return json.dumps({m: url_variable(m, services[m].port) for m in entry.members})


def debian_name(package: str) -> str:
    """`libboilerpipe-java=1.2.0-2` -> `libboilerpipe-java`."""
    return package.split("=", 1)[0]


# --- the images --------------------------------------------------------------------------


def read_image(root: Path, where: str, problems: list[str]) -> list[Stage] | None:
    """The stages of a Dockerfile, after checking what both Dockerfiles must do:
    pinned multi-stage build, dependencies from a pyproject extra with a cached layer,
    whitelisted COPY sources, a numeric non-root user, exec-form CMD and HEALTHCHECK.
    None where it is missing or has a single stage."""
    path = root / where
    if not path.is_file():
        problems.append(f"{where} is missing")
        return None
    stages = parse_dockerfile(path.read_text())
    if len(stages) < 2:
        problems.append(f"{where}: not multi-stage")
        return None
    builder, final = stages[0], stages[-1]
    for stage in stages:
        if not re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?", stage.base):
            problems.append(f"{where}: base {stage.base} is not a pinned python:3.11.x-slim tag")
    install = " ".join(builder.all("RUN"))
    script = root / INSTALL_SCRIPT
    if "sh install-dependencies " not in install or not script.is_file():
        problems.append(f"{where}: dependencies are not installed by {INSTALL_SCRIPT}")
    elif "pip install --no-cache-dir --no-deps ." not in script.read_text():
        problems.append(f"{INSTALL_SCRIPT}: the project's own metadata is not installed "
                        "(services read version('boilerbench'))")
    before_install: list[str] = []
    for keyword, args in builder.instructions:
        if keyword == "RUN" and "install-dependencies" in args:
            break
        if keyword == "COPY":
            before_install.append(args)
    if before_install != [f"pyproject.toml {INSTALL_SCRIPT} ./"]:
        # Anything else copied before the install would void the dependency layer cache.
        problems.append(f"{where}: the builder must copy only pyproject.toml and "
                        f"{INSTALL_SCRIPT} before installing")
    if not any(c.startswith(f"--from={builder.name}") for c in final.all("COPY")):
        problems.append(f"{where}: the runtime stage does not take the builder's venv")
    included = dockerignore_includes(root)
    for stage in stages:
        for args in stage.all("COPY"):
            if args.startswith("--"):
                continue
            *sources, _ = args.split()
            for source in sources:
                if not (root / source).exists():
                    problems.append(f"{where}: COPY source {source} does not exist")
                if not any((source.rstrip("/") + "/").startswith(name + "/")
                           for name in included):
                    problems.append(f"{where}: COPY source {source} is left out by .dockerignore")
    user = final.last("USER")
    uid = (user or "").split(":")[0]
    if not (user and re.fullmatch(r"\d+(:\d+)?", user) and int(uid) != 0):
        problems.append(f"{where}: final USER is {user!r}, not a numeric non-root user")
    if exec_form(final.last("CMD") or "") is None:
        problems.append(f"{where}: CMD is missing or not in exec form")
    health = final.last("HEALTHCHECK")
    if not (health and " CMD " in health and exec_form(health.split(" CMD ", 1)[1])):
        problems.append(f"{where}: no exec-form HEALTHCHECK")
    return stages


def algorithm_image_problems(root: Path, registry: Registry) -> list[str]:
    """services/Dockerfile: every service's differences come in as its build arguments
    (SERVICE is both the folder and the pyproject extra; the only Debian packages it
    installs are DEBIAN_PACKAGES and INIT), and it serves the service's app on PORT."""
    where = ALGORITHM_DOCKERFILE
    problems: list[str] = []
    stages = read_image(root, where, problems)
    if stages is None:
        return problems
    builder, final = stages[0], stages[-1]
    declared = {name for stage in stages for name in stage.args()}
    if declared != set(BUILD_ARGS):
        problems.append(f"{where}: build arguments {sorted(declared)}, not {sorted(BUILD_ARGS)}")
    install = " ".join(builder.all("RUN"))
    if 'install-dependencies "$SERVICE"' not in install:
        problems.append(f"{where}: the builder does not install the extra named SERVICE")
    apt = [run for stage in stages for run in stage.all("RUN") if "apt-get install" in run]
    if apt and not all(re.search(r"apt-get install(?: -[-\w]+)* \$DEBIAN_PACKAGES \$INIT"
                                 r"\s*(?:&&|;|$)", run) for run in apt):
        problems.append(f"{where}: apt-get installs more than $DEBIAN_PACKAGES $INIT")
    if not apt and any(e.debian_packages or e.init for e in registry.services.values()):
        problems.append(f"{where}: DEBIAN_PACKAGES and INIT are never installed")
    copied = " ".join(c for stage in stages for c in stage.all("COPY"))
    code = " ".join(stage.all("RUN")[-1] for stage in stages[1:-1] if stage.all("RUN"))
    if "services/" not in copied or '"$SERVICE,$USES"' not in code:
        problems.append(f"{where}: the image does not take the folders SERVICE and USES")
    env = " ".join(final.all("ENV"))
    if "BOILERBENCH_PORT=${PORT}" not in env or \
            "SERVICE_APP=services.${SERVICE}.app:app" not in env:
        problems.append(f"{where}: BOILERBENCH_PORT and SERVICE_APP do not come from "
                        "PORT and SERVICE")
    cmd = " ".join(exec_form(final.last("CMD") or "") or [])
    if not re.search(r'exec \$\{SERVICE_INIT:\+.*\} python -m shared\.serving "\$SERVICE_APP" '
                     r'--host "\$BOILERBENCH_HOST" --port "\$BOILERBENCH_PORT"', cmd):
        problems.append(f"{where}: CMD does not exec INIT and shared.serving with "
                        "SERVICE_APP on BOILERBENCH_PORT")
    if final.all("EXPOSE") != ["${PORT}"]:
        problems.append(f"{where}: EXPOSE {final.all('EXPOSE')} is not [${{PORT}}]")
    health = final.last("HEALTHCHECK") or ""
    if "os.environ['BOILERBENCH_PORT']" not in health:
        problems.append(f"{where}: the HEALTHCHECK does not ask BOILERBENCH_PORT")
    labels = " ".join(final.all("LABEL"))
    for label, value in zip(ALGORITHM_LABELS, ("algorithm", "${SERVICE}", "${PORT}"),
                            strict=True):
        if f'{label}="{value}"' not in labels:
            problems.append(f"{where}: label {label} is not {value}")
    return problems


def orchestrator_image_problems(root: Path, registry: Registry) -> list[str]:
    where = ORCHESTRATOR_DOCKERFILE
    problems: list[str] = []
    stages = read_image(root, where, problems)
    if stages is None:
        return problems
    extras = stages[0].args().get("EXTRAS") or ""
    if "orchestrator" not in extras.split(","):
        problems.append(f"{where}: installs extras {extras!r}, not 'orchestrator'")
    port = registry.orchestrator_port
    cmd = exec_form(stages[-1].last("CMD") or "") or []
    if "orchestrator.api:app_factory" not in cmd or "--factory" not in cmd or \
            cmd[cmd.index("--port") + 1:][:1] != [str(port)]:
        problems.append(f"{where}: CMD {cmd} does not serve the API factory on port {port}")
    if stages[-1].all("EXPOSE") != [str(port)]:
        problems.append(f"{where}: EXPOSE {stages[-1].all('EXPOSE')} is not [{port}]")
    if any("apt-get install" in run for stage in stages for run in stage.all("RUN")):
        problems.append(f"{where}: installs Debian packages (the algorithms' images do)")
    return problems


# --- the compose files -------------------------------------------------------------------


def compose_service_problems(name: str, entry: Any, spec: dict[str, Any] | None,
                             services: dict[str, Any]) -> list[str]:
    """One algorithm's compose entry against its registry entry: built from
    services/Dockerfile with the entry's build arguments, on its port, healthchecked
    with its start period, labelled, with its members' URLs, image overridable, and
    scalable (no fixed name or host port)."""
    if spec is None:
        return [f"docker-compose.yml: no service {name}"]
    problems: list[str] = []
    port = entry.port
    build = {"context": ".", "dockerfile": ALGORITHM_DOCKERFILE, "args": entry.build_args()}
    given = spec.get("build") or {}
    if {**given, "args": {k: str(v) for k, v in (given.get("args") or {}).items()}} != build:
        problems.append(f"compose {name}: build is {given}, the registry says {build}")
    if not re.fullmatch(rf"\$\{{{name.upper()}_IMAGE:-[^}}]+\}}", str(spec.get("image", ""))):
        problems.append(f"compose {name}: image is not overridable by {name.upper()}_IMAGE")
    health = spec.get("healthcheck") or {}
    if health.get("disable") or healthcheck_port(list(health.get("test") or [])) != port:
        problems.append(f"compose {name}: no healthcheck on http://127.0.0.1:{port}/health")
    if health.get("start_period") != f"{entry.start_period_s}s":
        problems.append(f"compose {name}: healthcheck start_period "
                        f"{health.get('start_period')}, the registry says "
                        f"{entry.start_period_s}s")
    env = environment(spec)
    if env.get("BOILERBENCH_PORT") != str(port) or env.get("BOILERBENCH_HOST") != "0.0.0.0":
        problems.append(f"compose {name}: BOILERBENCH_PORT/HOST are not {port}/0.0.0.0")
    members = member_urls(entry, services) if entry.members else None
    if env.get("BOILERBENCH_MEMBER_URLS") != members:
        problems.append(f"compose {name}: BOILERBENCH_MEMBER_URLS is "
                        f"{env.get('BOILERBENCH_MEMBER_URLS')!r}, the registry says {members!r}")
    user = str(spec.get("user", "10001"))
    if not re.fullmatch(r"\d+(:\d+)?", user) or int(user.split(":")[0]) == 0:
        problems.append(f"compose {name}: user {user!r} is not numeric non-root")
    labels = spec.get("labels") or {}
    if [str(labels.get(k)) for k in ALGORITHM_LABELS] != ["algorithm", name, str(port)]:
        problems.append(f"compose {name}: lacks the labels {ALGORITHM_LABELS}")
    if [str(p) for p in spec.get("expose") or []] != [str(port)]:
        problems.append(f"compose {name}: expose is not [{port}]")
    if "container_name" in spec or spec.get("ports"):
        problems.append(f"compose {name}: a container_name or host port would stop --scale")
    return problems


def orchestrator_compose_problems(compose: dict[str, Any], registry: Registry) -> list[str]:
    services = registry.services
    orchestrator = (compose.get("services") or {}).get("orchestrator")
    if orchestrator is None:
        return ["docker-compose.yml: no service orchestrator"]
    problems: list[str] = []
    if orchestrator.get("build") != {"context": ".", "dockerfile": ORCHESTRATOR_DOCKERFILE}:
        problems.append("compose orchestrator: build is not "
                        f"{{context: ., dockerfile: {ORCHESTRATOR_DOCKERFILE}}}")
    env = environment(orchestrator)
    port = registry.orchestrator_port
    if env.get("BOILERBENCH_PORT") != str(port) or env.get("BOILERBENCH_HOST") != "0.0.0.0":
        problems.append(f"compose orchestrator: BOILERBENCH_PORT/HOST are not {port}/0.0.0.0")
    health = orchestrator.get("healthcheck") or {}
    if health.get("disable") or healthcheck_port(list(health.get("test") or [])) != port:
        problems.append(f"compose orchestrator: no healthcheck on http://127.0.0.1:{port}/health")
    depends = orchestrator.get("depends_on") or {}
    for name in services:
        if not isinstance(depends, dict) or (depends.get(name) or {}).get(
                "condition") != "service_healthy":
            problems.append(f"compose orchestrator: does not depend on {name} as service_healthy")
    if env.get("BOILERBENCH_SERVICES") != ",".join(services):
        problems.append(f"compose orchestrator: BOILERBENCH_SERVICES is "
                        f"{env.get('BOILERBENCH_SERVICES')!r}, not the registry's "
                        f"{','.join(services)!r}")
    urls = json.dumps({name: url_variable(name, e.port) for name, e in services.items()})
    if env.get("BOILERBENCH_URLS") != urls:
        problems.append(f"compose orchestrator: BOILERBENCH_URLS is "
                        f"{env.get('BOILERBENCH_URLS')!r}, the registry says {urls!r}")
    volumes = [str(v) for v in orchestrator.get("volumes") or []]
    named = set(compose.get("volumes") or {})
    if not any(v.split(":")[0] in named and v.split(":")[1] == "/data" for v in volumes):
        problems.append("compose orchestrator: no named volume on /data")
    if not any(v.endswith(":/datasets:ro") for v in volumes):
        problems.append("compose orchestrator: no read-only /datasets mount")
    return problems


def _imported_services(folder: Path) -> set[str]:
    """The service folders whose modules the code in `folder` imports at run time
    (training code, which no image runs, left out)."""
    found: set[str] = set()
    for path in folder.glob("*.py"):
        if path.name == "training.py":
            continue
        found |= set(re.findall(r"^\s*(?:from|import) services\.(\w+)", path.read_text(),
                                re.MULTILINE))
    return found


def deployment_problems(root: Path) -> list[str]:
    """Everything on which the deployment files (services/Dockerfile, the orchestrator's,
    the compose files, .dockerignore, pyproject.toml, scripts/setup) and the root's
    registry disagree."""
    registry = load_registry(root)
    services = registry.services
    problems = algorithm_image_problems(root, registry)
    problems += orchestrator_image_problems(root, registry)
    groups: dict[str, list[str]] = tomllib.loads((root / "pyproject.toml").read_text())[
        "project"]["optional-dependencies"]
    all_group = " ".join(groups.get("all", []))
    folders = {p.parent.name for p in (root / "services").glob("*/extractor.py")}
    for name in sorted(folders - set(services)):
        problems.append(f"services/{name} is not in shared.registry")
    setup = root / "scripts" / "setup"
    setup_text = setup.read_text() if setup.is_file() else None
    compose = yaml.safe_load((root / "docker-compose.yml").read_text())
    specs: dict[str, Any] = compose.get("services") or {}
    for name in sorted(set(specs) - set(services) - {"orchestrator"}):
        problems.append(f"docker-compose.yml: service {name} is not in shared.registry")
    ports_file = yaml.safe_load((root / "docker-compose.ports.yml").read_text())
    for name, entry in services.items():
        if name not in groups:
            problems.append(f"pyproject.toml: no optional-dependency group {name}")
        elif not re.search(rf"[\[,]{name}[\],]", all_group):
            problems.append(f"pyproject.toml: the `all` group lacks {name}")
        for folder in (name, *entry.uses):
            if not (root / "services" / folder / "__init__.py").is_file():
                problems.append(f"services/{folder} (of {name}) is not a package")
        unlisted = _imported_services(root / "services" / name) - {name, *entry.uses}
        if unlisted:
            problems.append(f"services/{name} imports {sorted(unlisted)}, which its registry "
                            "entry does not list in `uses` (its image would lack them)")
        for package in map(debian_name, entry.debian_packages):
            if setup_text is not None and not re.search(rf"\b{re.escape(package)}\b",
                                                        setup_text):
                problems.append(f"scripts/setup does not install {package} (for {name})")
        for member in entry.members:
            if member not in services:
                problems.append(f"{name}: member {member} is not in shared.registry")
        problems += compose_service_problems(name, entry, specs.get(name), services)
        published = ((ports_file.get("services") or {}).get(name) or {}).get("ports") or []
        if not [p for p in published if env_default(str(p)).endswith(f":{entry.port}:"
                                                                      f"{entry.port}")]:
            problems.append(f"docker-compose.ports.yml: {name} is not published on "
                            f"{entry.port}")
    problems += orchestrator_compose_problems(compose, registry)
    networks = {json.dumps(s.get("networks"), sort_keys=True) for s in specs.values()}
    if len(networks) != 1 or len(compose.get("networks") or {}) != 1:
        problems.append("docker-compose.yml: the services are not on one shared network")
    return problems


# --- Kubernetes ----------------------------------------------------------------------------

_RENDER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from orchestrator.kubernetes import measured_memory, render
print(json.dumps(render(measured_memory())))
"""


def kubernetes_problems(root: Path) -> list[str]:
    """deploy/kubernetes/base is what the root's own generator (`boilerbench
    kubernetes`) writes from the root's registry now."""
    done = subprocess.run([sys.executable, "-c", _RENDER, str(root)], capture_output=True,
                          text=True, check=False, timeout=120, cwd=root)
    if done.returncode != 0:
        return [f"the Kubernetes generator failed: {done.stderr.strip()[-500:]}"]
    expected: dict[str, str] = json.loads(done.stdout)
    base = root / "deploy" / "kubernetes" / "base"
    present = {p.name: p.read_text() for p in base.glob("*.yaml")}
    stale = sorted(n for n, text in expected.items() if present.get(n) != text)
    stale += sorted(set(present) - set(expected))
    return [f"deploy/kubernetes/base/{n} is not what `boilerbench kubernetes` writes "
            "(run it)" for n in stale]


# --- documentation -------------------------------------------------------------------------

NUMBER_WORDS = {word: n for n, word in enumerate((
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
    "eighteen", "nineteen", "twenty"))}
_COUNT = re.compile(r"\b(\d+|" + "|".join(NUMBER_WORDS) + r") (algorithm services|images)\b",
                    re.IGNORECASE)
_TABLE_ROW = re.compile(r"^\|\s*`?([a-z][a-z0-9_-]*)`?\s*\|\s*(\d{4,5})\s*\|(.*)$")
_RANGE = re.compile(r"\b(8\d{3})-(8\d{3})\b")


def port_table_lines(text: str) -> list[str]:
    """The lines of the Markdown tables whose header has a `port` column."""
    lines: list[str] = []
    table: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table and "port" in [c.strip().lower() for c in table[0].split("|")]:
            lines += table[2:]
        table = []
    return lines


def _table_problems(where: str, text: str, registry: Registry,
                    with_args: bool) -> list[str]:
    """A `| service | port | ... |` table lists every service (and the orchestrator)
    with its registry port; in docs/docker.md its third column gives the build
    arguments beyond SERVICE and PORT."""
    wanted = {name: e.port for name, e in registry.services.items()}
    wanted["orchestrator"] = registry.orchestrator_port
    rows = {m.group(1): (int(m.group(2)), m.group(3))
            for line in port_table_lines(text) if (m := _TABLE_ROW.match(line))}
    problems = []
    for name in sorted(set(wanted) | set(rows)):
        if name not in rows:
            if name != "orchestrator":
                problems.append(f"{where}: the services table lacks {name}")
            continue
        port, rest = rows[name]
        if name not in wanted:
            problems.append(f"{where}: the services table lists {name}, which is not in "
                            "shared.registry")
        elif port != wanted[name]:
            problems.append(f"{where}: {name} is on port {port}, the registry says "
                            f"{wanted[name]}")
        elif with_args and name != "orchestrator":
            args = {k: v for k, v in registry.services[name].build_args().items()
                    if k not in ("SERVICE", "PORT")}
            given = dict(re.findall(r'`([A-Z_]+)=\\?"?([^`"]*)"?`', rest))
            if given != args:
                problems.append(f"{where}: the build arguments of {name} are {given}, "
                                f"the registry says {args}")
    return problems


def docs_problems(root: Path) -> list[str]:
    """docs/docker.md says Compose v2 is required, and its counts, port ranges and
    services table (ports, build arguments) match the registry; so does README's
    services table where the root has a README."""
    registry = load_registry(root)
    where = "docs/docker.md"
    text = (root / where).read_text(encoding="utf-8")
    problems = []
    if not re.search(r"Compose v2", text):
        problems.append(f"{where}: does not say that Docker Compose v2 is required")
    count = len(registry.services)
    for found in _COUNT.finditer(text):
        number = found.group(1).lower()
        value = NUMBER_WORDS.get(number) if not number.isdigit() else int(number)
        expected = count if found.group(2).lower() == "algorithm services" else count + 1
        if value != expected:
            problems.append(f"{where}: says {found.group(0)!r}, the registry makes it "
                            f"{expected}")
    ports = sorted(e.port for e in registry.services.values())
    for found in _RANGE.finditer(text):
        if (int(found.group(1)), int(found.group(2))) != (ports[0], ports[-1]):
            problems.append(f"{where}: the port range {found.group(0)} is not the "
                            f"registry's {ports[0]}-{ports[-1]}")
    problems += _table_problems(where, text, registry, with_args=True)
    readme = root / "README.md"
    if readme.is_file():
        problems += _table_problems("README.md", readme.read_text(encoding="utf-8"),
                                    registry, with_args=False)
    return problems


def consistency_problems(root: Path) -> list[str]:
    """Every check of this module on one repository root."""
    return deployment_problems(root) + kubernetes_problems(root) + docs_problems(root)
