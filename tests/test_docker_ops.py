"""`boilerbench docker ps|swap` against a fake Docker Engine API on a unix socket.

The docker SDK speaks plain HTTP to the engine, so a small FastAPI app that keeps
containers, images and networks in memory stands in for it. It implements only the
endpoints the SDK calls for these commands, and logs every state change in order so
that the tests can check *when* the old container goes, not only that it went.
"""

from __future__ import annotations

import json
import secrets
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from typer.testing import CliRunner

from orchestrator.commands_docker import app as docker_app
from orchestrator.docker_ops import DockerOpsError, list_algorithms, swap_service
from orchestrator.launcher import free_port

API_VERSION = "1.43"
NETWORK = "boilerbench"
IMAGE_ENV = ["PATH=/opt/venv/bin:/usr/local/bin:/usr/bin", "PYTHONPATH=/app"]
HEALTHCHECK = {"Test": ["CMD", "python", "-c", "print('ok')"], "Interval": 10_000_000_000}


class FakeEngine:
    """In-memory engine state. Image behaviours: `healthy` (healthy on the second
    inspect after start), `never` (stays `starting`), `unhealthy`, `crash` (exits)."""

    def __init__(self) -> None:
        self.images: dict[str, dict[str, Any]] = {}
        self.registry: dict[str, dict[str, Any]] = {}  # pullable, not yet present
        self.containers: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    @staticmethod
    def image(behaviour: str, env: list[str] | None = None,
              healthcheck: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"Id": "sha256:" + secrets.token_hex(32), "behaviour": behaviour,
                "Config": {"Env": env if env is not None else list(IMAGE_ENV),
                           "Healthcheck": healthcheck}}

    def add_container(self, name: str, image: str, labels: dict[str, str],
                      env: list[str] | None = None, aliases: list[str] | None = None,
                      ports: dict[str, Any] | None = None, ip: str = "") -> str:
        cid = secrets.token_hex(32)
        self.containers[cid] = {
            "Id": cid, "Name": "/" + name, "Image": self.images[image]["Id"],
            "Config": {"Image": image, "Labels": labels,
                       "Env": env if env is not None else list(IMAGE_ENV),
                       "Healthcheck": HEALTHCHECK},
            "HostConfig": {"NetworkMode": NETWORK,
                           "RestartPolicy": {"Name": "unless-stopped", "MaximumRetryCount": 0}},
            "State": {"Status": "running", "Running": True, "ExitCode": 0,
                      "Health": {"Status": "healthy", "Log": []}},
            "NetworkSettings": {
                "Ports": ports or {},
                "Networks": {NETWORK: {"NetworkID": "net-" + NETWORK, "IPAddress": ip,
                                       "Aliases": [*(aliases or []), cid[:12]]}},
            },
            "behaviour": self.images[image]["behaviour"], "inspects": 0,
        }
        return cid

    def find(self, ref: str) -> dict[str, Any] | None:
        for container in self.containers.values():
            if ref in (container["Id"], container["Name"].lstrip("/")) or (
                    len(ref) >= 12 and container["Id"].startswith(ref)):
                return container
        return None

    def find_image(self, ref: str) -> dict[str, Any] | None:
        for name, image in self.images.items():
            if ref in (name, image["Id"]) or f"{ref}:latest" == name:
                return image
        return None

    def by_name(self, name: str) -> dict[str, Any]:
        found = self.find(name)
        assert found is not None, f"no container {name}"
        return found

    def index(self, event: str, name: str) -> int:
        return self.events.index((event, name))


def _public(container: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in container.items() if k not in ("behaviour", "inspects")}


def _not_found(what: str) -> JSONResponse:
    return JSONResponse({"message": f"No such {what}"}, status_code=404)


def make_engine_app(engine: FakeEngine) -> FastAPI:
    app = FastAPI()

    @app.get("/version")
    @app.get("/v{ver}/version")
    async def version() -> dict[str, str]:
        return {"ApiVersion": API_VERSION, "MinAPIVersion": "1.24", "Version": "fake",
                "Os": "linux", "Arch": "amd64"}

    @app.get("/_ping")
    @app.get("/v{ver}/_ping")
    async def ping() -> Response:
        return Response("OK", media_type="text/plain")

    @app.get("/v{ver}/containers/json")
    async def list_containers(request: Request) -> list[dict[str, Any]]:
        wanted = json.loads(request.query_params.get("filters", "{}")).get("label", [])
        show_all = request.query_params.get("all") in ("1", "true", "True")
        rows = []
        with engine.lock:
            for c in engine.containers.values():
                labels = c["Config"]["Labels"]
                if not show_all and not c["State"]["Running"]:
                    continue
                if all(labels.get(k) == v for k, _, v in (f.partition("=") for f in wanted)):
                    rows.append({"Id": c["Id"], "Names": [c["Name"]], "Labels": labels,
                                 "Image": c["Config"]["Image"], "State": c["State"]["Status"]})
        return rows

    @app.get("/v{ver}/containers/{ref}/json")
    async def inspect_container(ref: str) -> Response:
        with engine.lock:
            c = engine.find(ref)
            if c is None:
                return _not_found(f"container: {ref}")
            state = c["State"]
            if state["Running"] and state["Health"]["Status"] == "starting":
                c["inspects"] += 1
                if c["inspects"] >= 2 and c["behaviour"] == "healthy":
                    state["Health"]["Status"] = "healthy"
                    engine.events.append(("healthy", c["Name"].lstrip("/")))
                elif c["inspects"] >= 2 and c["behaviour"] == "unhealthy":
                    state["Health"]["Status"] = "unhealthy"
                    state["Health"]["Log"] = [{"ExitCode": 1, "Output": "connection refused"}]
                elif c["behaviour"] == "crash":
                    state.update(Status="exited", Running=False, ExitCode=3)
            return JSONResponse(_public(c))

    @app.get("/v{ver}/images/{ref:path}/json")
    async def inspect_image(ref: str) -> Response:
        image = engine.find_image(ref)
        return _not_found(f"image: {ref}") if image is None else JSONResponse(image)

    @app.post("/v{ver}/images/create")
    async def pull(request: Request) -> Response:
        ref = f"{request.query_params['fromImage']}:{request.query_params.get('tag', 'latest')}"
        with engine.lock:
            if ref not in engine.registry:
                return _not_found(f"image in the registry: {ref}")
            engine.images[ref] = engine.registry.pop(ref)
            engine.events.append(("pull", ref))
        return Response(json.dumps({"status": f"Downloaded newer image for {ref}"}) + "\n")

    @app.post("/v{ver}/containers/create")
    async def create(request: Request) -> Response:
        body = await request.json()
        name = request.query_params.get("name") or secrets.token_hex(6)
        with engine.lock:
            image = engine.find_image(body["Image"])
            if image is None:
                return _not_found(f"image: {body['Image']}")
            cid = secrets.token_hex(32)
            endpoints = (body.get("NetworkingConfig") or {}).get("EndpointsConfig") or {}
            engine.containers[cid] = {
                "Id": cid, "Name": "/" + name, "Image": image["Id"],
                "Config": {"Image": body["Image"], "Labels": body.get("Labels") or {},
                           "Env": [*image["Config"]["Env"], *(body.get("Env") or [])],
                           "Healthcheck": body.get("Healthcheck")},
                "HostConfig": body.get("HostConfig") or {},
                "State": {"Status": "created", "Running": False, "ExitCode": 0, "Health": None},
                "NetworkSettings": {"Ports": {}, "Networks": {
                    net: {"NetworkID": "net-" + net, "IPAddress": "",
                          "Aliases": [*(cfg.get("Aliases") or []), cid[:12]]}
                    for net, cfg in endpoints.items()}},
                "behaviour": image["behaviour"], "inspects": 0,
            }
            engine.events.append(("create", name))
        return JSONResponse({"Id": cid, "Warnings": []}, status_code=201)

    @app.post("/v{ver}/networks/{net}/connect")
    async def connect(net: str, request: Request) -> Response:
        body = await request.json()
        with engine.lock:
            c = engine.find(body["Container"])
            if c is None:
                return _not_found("container")
            name = net.removeprefix("net-")
            c["NetworkSettings"]["Networks"][name] = {
                "NetworkID": net, "IPAddress": "",
                "Aliases": (body.get("EndpointConfig") or {}).get("Aliases") or []}
            engine.events.append(("connect", c["Name"].lstrip("/")))
        return Response(status_code=200)

    @app.post("/v{ver}/containers/{ref}/start")
    async def start(ref: str) -> Response:
        with engine.lock:
            c = engine.find(ref)
            if c is None:
                return _not_found("container")
            c["State"].update(Status="running", Running=True)
            if c["Config"].get("Healthcheck"):
                c["State"]["Health"] = {"Status": "starting", "Log": []}
            engine.events.append(("start", c["Name"].lstrip("/")))
        return Response(status_code=204)

    @app.post("/v{ver}/containers/{ref}/stop")
    async def stop(ref: str) -> Response:
        with engine.lock:
            c = engine.find(ref)
            if c is None:
                return _not_found("container")
            c["State"].update(Status="exited", Running=False)
            engine.events.append(("stop", c["Name"].lstrip("/")))
        return Response(status_code=204)

    @app.delete("/v{ver}/containers/{ref}")
    async def remove(ref: str) -> Response:
        with engine.lock:
            c = engine.find(ref)
            if c is None:
                return _not_found("container")
            del engine.containers[c["Id"]]
            engine.events.append(("remove", c["Name"].lstrip("/")))
        return Response(status_code=204)

    return app


class ThreadedServer:
    """uvicorn in a background thread, on a unix socket or a bound TCP socket."""

    def __init__(self, app: Any, uds: str | None = None,
                 sock: socket.socket | None = None) -> None:
        self.server = uvicorn.Server(uvicorn.Config(app, uds=uds, log_level="warning",
                                                    lifespan="on"))
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock] if sock else None}, daemon=True)

    def __enter__(self) -> ThreadedServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive(), "the server thread died"
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture
def engine() -> Iterator[tuple[FakeEngine, str]]:
    """A fake engine on a unix socket (a short path: AF_UNIX paths are limited to ~100
    bytes, which pytest's tmp_path can pass)."""
    folder = tempfile.mkdtemp(prefix="bbdk")
    socket_path = str(Path(folder) / "engine.sock")
    state = FakeEngine()
    try:
        with ThreadedServer(make_engine_app(state), uds=socket_path):
            yield state, f"unix://{socket_path}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def algorithm_labels(service: str, port: int) -> dict[str, str]:
    return {"org.boilerbench.role": "algorithm", "org.boilerbench.service": service,
            "org.boilerbench.port": str(port), "com.docker.compose.project": "boilerbench",
            "com.docker.compose.service": service}


def seed_justext(state: FakeEngine, replicas: int = 1) -> list[str]:
    """The ensemble's justext container(s) as compose creates them."""
    state.images["boilerbench/justext:latest"] = FakeEngine.image("healthy",
                                                                  healthcheck=HEALTHCHECK)
    names = []
    for number in range(1, replicas + 1):
        name = f"boilerbench-justext-{number}"
        state.add_container(name, "boilerbench/justext:latest", algorithm_labels("justext", 8001),
                            env=[*IMAGE_ENV, "BOILERBENCH_HOST=0.0.0.0", "BOILERBENCH_WORKERS=2"],
                            aliases=["justext", name])
        names.append(name)
    return names


def one_line(text: str) -> str:
    """CLI output with rich's line wrapping undone."""
    return " ".join(text.split())


def new_container(state: FakeEngine, old_name: str) -> dict[str, Any]:
    found = [c for c in state.containers.values()
             if c["Name"].lstrip("/").startswith(old_name + "-")]
    assert len(found) == 1, state.containers
    return found[0]


def test_swap_takes_over_alias_then_removes_old(engine: tuple[FakeEngine, str]) -> None:
    state, url = engine
    (old_name,) = seed_justext(state)
    old = state.by_name(old_name)
    state.images["me/justext:dev"] = FakeEngine.image(
        "healthy", env=["PATH=/usr/local/bin:/usr/bin", "LANG=C.UTF-8"])

    result = CliRunner().invoke(docker_app, ["swap", "justext", "me/justext:dev",
                                             "--engine", url, "--poll", "0.01"])

    assert result.exit_code == 0, result.output
    assert "is healthy" in one_line(result.output)
    assert state.find(old_name) is None
    new = new_container(state, old_name)
    new_name = new["Name"].lstrip("/")
    assert new["Config"]["Image"] == "me/justext:dev"
    assert new["State"]["Running"]
    aliases = new["NetworkSettings"]["Networks"][NETWORK]["Aliases"]
    assert "justext" in aliases
    assert old_name not in aliases
    assert old["Id"][:12] not in aliases
    assert new["Config"]["Labels"] == old["Config"]["Labels"]
    # The compose-set variables move over; the old image's own PATH does not.
    assert "BOILERBENCH_WORKERS=2" in new["Config"]["Env"]
    assert "PYTHONPATH=/app" not in new["Config"]["Env"]
    assert new["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    # The new image has no healthcheck of its own, so it inherits the old container's.
    assert new["Config"]["Healthcheck"]["Test"] == HEALTHCHECK["Test"]
    assert state.index("start", new_name) < state.index("healthy", new_name) \
        < state.index("stop", old_name) < state.index("remove", old_name)


@pytest.mark.parametrize("behaviour", ["never", "unhealthy", "crash"])
def test_swap_rolls_back_when_new_image_never_healthy(
        engine: tuple[FakeEngine, str], behaviour: str) -> None:
    state, url = engine
    (old_name,) = seed_justext(state)
    state.images["me/justext:broken"] = FakeEngine.image(behaviour)

    result = CliRunner().invoke(docker_app, ["swap", "justext", "me/justext:broken",
                                             "--engine", url, "--timeout", "0.3",
                                             "--poll", "0.01"])

    assert result.exit_code == 1
    output = one_line(result.output)
    assert "rolled back" in output
    assert f"{old_name} keeps running" in output
    old = state.by_name(old_name)
    assert old["State"]["Running"]
    assert ("stop", old_name) not in state.events
    assert [c["Name"] for c in state.containers.values()] == [f"/{old_name}"]
    created = [name for event, name in state.events if event == "create"]
    assert len(created) == 1
    assert ("remove", created[0]) in state.events


def test_swap_replaces_replicas_one_at_a_time(engine: tuple[FakeEngine, str]) -> None:
    state, url = engine
    first, second = seed_justext(state, replicas=2)
    state.images["me/justext:dev"] = FakeEngine.image("healthy")

    results = swap_service(docker.DockerClient(base_url=url), "justext", "me/justext:dev",
                           timeout=5, poll=0.01)

    assert [r.old_name for r in results] == [first, second]
    assert state.find(first) is None
    assert state.find(second) is None
    new_first = results[0].new_name
    # The second replica is touched only after the first one's successor serves.
    assert state.index("remove", first) < state.index("create", results[1].new_name)
    assert state.index("healthy", new_first) < state.index("remove", first)
    for c in state.containers.values():
        assert "justext" in c["NetworkSettings"]["Networks"][NETWORK]["Aliases"]


def test_swap_pulls_an_absent_image(engine: tuple[FakeEngine, str]) -> None:
    state, url = engine
    (old_name,) = seed_justext(state)
    state.registry["me/justext:2"] = FakeEngine.image("healthy")

    swap_service(docker.DockerClient(base_url=url), "justext", "me/justext:2",
                 timeout=5, poll=0.01)

    assert state.index("pull", "me/justext:2") < state.index("remove", old_name)
    assert state.find(old_name) is None


def test_swap_refuses_missing_image_and_absent_service(engine: tuple[FakeEngine, str]) -> None:
    state, url = engine
    (old_name,) = seed_justext(state)
    client = docker.DockerClient(base_url=url)
    with pytest.raises(DockerOpsError, match="neither present nor pullable"):
        swap_service(client, "justext", "nobody/nothing:1", timeout=1, poll=0.01)
    with pytest.raises(DockerOpsError, match="no running container"):
        swap_service(client, "bte", "me/bte:1", timeout=1, poll=0.01)
    assert state.by_name(old_name)["State"]["Running"]
    assert not [e for e in state.events if e[0] in ("create", "stop", "remove")]

    result = CliRunner().invoke(docker_app, ["swap", "nosuch", "x:1", "--engine", url])
    assert result.exit_code != 0
    assert "unknown service" in one_line(result.output)


def _closed_port() -> int:
    """A port nothing listens on (free_port's socket is closed again)."""
    return free_port()


def test_ps_lists_algorithms_with_health_and_version(engine: tuple[FakeEngine, str]) -> None:
    """justext answers /info from a real service app on a published port; bte's port
    is closed (unreachable); the orchestrator and foreign containers are not listed."""
    from services.justext.app import app as justext_app
    from services.justext.extractor import ALGORITHM

    state, url = engine
    (justext_name,) = seed_justext(state)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    state.by_name(justext_name)["NetworkSettings"]["Ports"] = {
        "8001/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(port)}]}
    state.images["boilerbench/bte:latest"] = FakeEngine.image("healthy")
    state.add_container("boilerbench-bte-1", "boilerbench/bte:latest",
                        algorithm_labels("bte", 8003), aliases=["bte"],
                        ports={"8003/tcp": [{"HostIp": "127.0.0.1",
                                             "HostPort": str(_closed_port())}]})
    state.by_name("boilerbench-bte-1")["State"]["Health"]["Status"] = "unhealthy"
    state.images["boilerbench/orchestrator:latest"] = FakeEngine.image("healthy")
    state.add_container("boilerbench-orchestrator-1", "boilerbench/orchestrator:latest",
                        {"org.boilerbench.role": "orchestrator"})
    state.add_container("someone-else", "boilerbench/bte:latest", {})

    with ThreadedServer(justext_app, sock=sock):
        rows = list_algorithms(docker.DockerClient(base_url=url), timeout=1.0)
        result = CliRunner().invoke(docker_app, ["ps", "--engine", url, "--timeout", "1"])

    by_service = {row.service: row for row in rows}
    assert sorted(by_service) == ["bte", "justext"]
    assert by_service["justext"].version == ALGORITHM.version
    assert by_service["justext"].url == f"http://127.0.0.1:{port}"
    assert by_service["justext"].health == "healthy"
    assert by_service["justext"].image == "boilerbench/justext:latest"
    assert by_service["bte"].version == "unreachable"
    assert by_service["bte"].health == "unhealthy"
    assert result.exit_code == 0, result.output
    assert justext_name in result.output
    assert "orchestrator" not in result.output
    assert "someone-else" not in result.output


def test_cli_reports_unreachable_engine(tmp_path: Path) -> None:
    result = CliRunner().invoke(docker_app, ["ps", "--engine", f"unix://{tmp_path}/none.sock"])
    assert result.exit_code == 1
    assert "cannot" in one_line(result.output)


def test_swap_on_a_real_engine() -> None:
    """Where a Docker engine answers: swap a labelled busybox container for another tag
    of busybox on a fresh network and check the alias and the removal of the old one."""
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        pytest.skip(f"no Docker engine answers here ({type(exc).__name__}: {exc})")
    suffix = secrets.token_hex(3)
    network = client.networks.create(f"bbtest-{suffix}")
    labels = algorithm_labels("justext", 8001) | {"com.docker.compose.project": f"bb{suffix}"}
    healthcheck = {"test": ["CMD", "true"], "interval": 1_000_000_000,
                   "start_period": 1_000_000_000}
    old = None
    try:
        client.images.pull("busybox", tag="1.36")
        client.images.pull("busybox", tag="1.37")
        old = client.containers.run(
            "busybox:1.36", ["sleep", "600"], name=f"bb{suffix}-justext-1", detach=True,
            labels=labels, healthcheck=healthcheck, network=network.name,
            networking_config={network.name: client.api.create_endpoint_config(
                aliases=["justext"])})
        results = swap_service(client, "justext", "busybox:1.37", timeout=60,
                               project=f"bb{suffix}", poll=0.5)
        new = client.containers.get(results[0].new_id)
        aliases = new.attrs["NetworkSettings"]["Networks"][network.name]["Aliases"]
        assert "justext" in aliases
        assert new.attrs["State"]["Health"]["Status"] == "healthy"
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(old.id)
        new.remove(force=True)
    finally:
        for container in client.containers.list(
                all=True, filters={"label": f"com.docker.compose.project=bb{suffix}"}):
            container.remove(force=True)
        network.remove()
