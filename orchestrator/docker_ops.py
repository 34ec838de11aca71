"""What users do with a running ensemble, through the Docker Engine API (docker SDK).

The algorithm containers are found by the labels the compose file sets
(`org.boilerbench.role=algorithm`, `org.boilerbench.service=<name>`), so these
operations work on any ensemble started from docker-compose.yml, whatever its
project name.

`swap_service` replaces each container of one service by a container of another
image, blue-green: the new container joins the old one's networks under the same
aliases (the compose service name, which the orchestrator's URLs use), with the
same labels and environment; only once Docker reports it healthy is the old one
stopped and removed. If it never becomes healthy the new container is removed and
the old one keeps serving (rollback).
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import docker
import httpx
from docker.errors import DockerException, ImageNotFound, NotFound
from docker.utils import parse_repository_tag

from shared.contract import bearer_header
from shared.registry import SERVICES

ROLE_LABEL = "org.boilerbench.role"
SERVICE_LABEL = "org.boilerbench.service"
PORT_LABEL = "org.boilerbench.port"
PROJECT_LABEL = "com.docker.compose.project"
ALGORITHM_ROLE = "algorithm"


class DockerOpsError(Exception):
    """An operation on the ensemble failed; the message says what and why."""


@dataclass(frozen=True)
class ContainerRow:
    """One algorithm container as `boilerbench docker ps` shows it."""

    service: str
    name: str
    short_id: str
    image: str
    status: str
    health: str
    version: str
    url: str | None


@dataclass(frozen=True)
class SwapResult:
    """The outcome of replacing one container: which went, which came."""

    service: str
    old_name: str
    new_name: str
    new_id: str


def connect(base_url: str | None = None) -> docker.DockerClient:
    """A client for the engine at `base_url`, else the environment's (DOCKER_HOST...)."""
    try:
        if base_url:
            return docker.DockerClient(base_url=base_url)
        return docker.from_env()
    except DockerException as exc:
        raise DockerOpsError(f"cannot reach the Docker engine: {exc}") from None


def _label_filters(service: str | None, project: str | None) -> dict[str, list[str]]:
    labels = [f"{ROLE_LABEL}={ALGORITHM_ROLE}"]
    if service is not None:
        labels.append(f"{SERVICE_LABEL}={service}")
    if project is not None:
        labels.append(f"{PROJECT_LABEL}={project}")
    return {"label": labels}


def find_containers(client: docker.DockerClient, service: str | None = None,
                    project: str | None = None, running_only: bool = False
                    ) -> list[dict[str, Any]]:
    """Full inspect documents of the ensemble's algorithm containers, by service and name."""
    api = client.api
    try:
        listed = api.containers(all=not running_only, filters=_label_filters(service, project))
        found = [dict(api.inspect_container(item["Id"])) for item in listed]
    except DockerException as exc:
        raise DockerOpsError(f"cannot list containers: {exc}") from None
    return sorted(found, key=lambda c: (_labels(c).get(SERVICE_LABEL, ""), _name(c)))


def _labels(container: Mapping[str, Any]) -> dict[str, str]:
    return dict(container.get("Config", {}).get("Labels") or {})


def _name(container: Mapping[str, Any]) -> str:
    return str(container.get("Name", "")).lstrip("/")


def _health(container: Mapping[str, Any]) -> str:
    health = container.get("State", {}).get("Health")
    return str(health.get("Status", "unknown")) if health else "none"


def service_port(container: Mapping[str, Any]) -> int | None:
    """The container's service port: its port label, else the registry's default."""
    labels = _labels(container)
    if labels.get(PORT_LABEL, "").isdigit():
        return int(labels[PORT_LABEL])
    entry = SERVICES.get(labels.get(SERVICE_LABEL, ""))
    return entry.port if entry else None


def candidate_urls(container: Mapping[str, Any]) -> list[str]:
    """Where the service may answer from here: a published host port first (works from
    any host), then each network address (works on Linux hosts and inside the network)."""
    port = service_port(container)
    if port is None:
        return []
    settings = container.get("NetworkSettings") or {}
    urls: list[str] = []
    for binding in (settings.get("Ports") or {}).get(f"{port}/tcp") or []:
        host = binding.get("HostIp") or "127.0.0.1"
        host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        host = f"[{host}]" if ":" in host else host
        urls.append(f"http://{host}:{binding['HostPort']}")
    for network in (settings.get("Networks") or {}).values():
        if network.get("IPAddress"):
            urls.append(f"http://{network['IPAddress']}:{port}")
    return urls


def fetch_version(urls: Iterable[str], token: str | None = None,
                  timeout: float = 2.0) -> tuple[str, str | None]:
    """The service's version from its /info and the URL that answered, or a reason."""
    headers = bearer_header(token)
    reason = "unreachable"
    for url in urls:
        try:
            reply = httpx.get(f"{url}/info", headers=headers, timeout=timeout)
        except httpx.HTTPError:
            continue
        if reply.status_code != 200:
            reason = f"/info answered {reply.status_code}"
            continue
        try:
            version = reply.json().get("version")
        except ValueError:
            reason = "/info is not JSON"
            continue
        return (str(version) if version is not None else "unknown"), url
    return reason, None


def list_algorithms(client: docker.DockerClient, project: str | None = None,
                    token: str | None = None, timeout: float = 2.0) -> list[ContainerRow]:
    """Every algorithm container with its image, health and /info version."""
    rows = []
    for container in find_containers(client, project=project):
        state = container.get("State", {})
        running = bool(state.get("Running"))
        version, url = (fetch_version(candidate_urls(container), token, timeout)
                        if running else ("-", None))
        rows.append(ContainerRow(
            service=_labels(container).get(SERVICE_LABEL, "?"),
            name=_name(container),
            short_id=str(container.get("Id", ""))[:12],
            image=str(container.get("Config", {}).get("Image", "")),
            status=str(state.get("Status", "unknown")),
            health=_health(container),
            version=version,
            url=url,
        ))
    return rows


def _ensure_image(client: docker.DockerClient, image: str) -> dict[str, Any]:
    """The image's inspect document, pulled first where it is not present."""
    api = client.api
    try:
        return dict(api.inspect_image(image))
    except ImageNotFound:
        pass
    except DockerException as exc:
        raise DockerOpsError(f"cannot inspect image {image}: {exc}") from None
    repository, tag = parse_repository_tag(image)  # knows registry ports and digests
    reference = image if tag else f"{image}:latest"
    try:
        api.pull(repository, tag=tag or "latest")
        return dict(api.inspect_image(reference))
    except DockerException as exc:
        raise DockerOpsError(f"image {image} is neither present nor pullable: {exc}") from None


def _own_environment(container: Mapping[str, Any], image_env: Iterable[str]) -> list[str]:
    """The container's environment without what its old image set (PATH and the like
    belong to the image, and the new image brings its own)."""
    inherited = set(image_env)
    return [item for item in container.get("Config", {}).get("Env") or []
            if item not in inherited]


def _aliases(container: Mapping[str, Any], network: Mapping[str, Any], service: str) -> list[str]:
    """The old container's aliases on one network minus those naming only the old
    container, plus the service name that the orchestrator's URLs use."""
    own = {str(container.get("Id", ""))[:12], str(container.get("Id", "")), _name(container)}
    aliases = [a for a in network.get("Aliases") or [] if a not in own]
    return aliases if service in aliases else [service, *aliases]


def wait_healthy(client: docker.DockerClient, container_id: str, timeout: float,
                 poll: float = 1.0, sleep: Callable[[float], None] = time.sleep) -> None:
    """Return once Docker reports the container healthy; raise DockerOpsError when it
    exits, is reported unhealthy or the timeout passes."""
    deadline = time.monotonic() + timeout
    status = "starting"
    while True:
        try:
            state = client.api.inspect_container(container_id)["State"]
        except DockerException as exc:
            raise DockerOpsError(f"lost the new container: {exc}") from None
        if not state.get("Running") and state.get("Status") in ("exited", "dead"):
            raise DockerOpsError(
                f"the new container exited (code {state.get('ExitCode')}) before it was healthy")
        health = state.get("Health")
        if health is None:
            raise DockerOpsError("the new container has no healthcheck to wait for")
        status = str(health.get("Status"))
        if status == "healthy":
            return
        if status == "unhealthy":
            log = health.get("Log") or []
            last = str(log[-1].get("Output", "")).strip()[-300:] if log else ""
            raise DockerOpsError(f"the new container is unhealthy{': ' + last if last else ''}")
        if time.monotonic() >= deadline:
            raise DockerOpsError(
                f"the new container was not healthy within {timeout:g} s (health: {status})")
        sleep(poll)


def _remove(client: docker.DockerClient, container_id: str, stop_timeout: int = 10) -> None:
    api = client.api
    try:
        api.stop(container_id, timeout=stop_timeout)
    except NotFound:
        return
    api.remove_container(container_id, force=True)


def replace_container(client: docker.DockerClient, old: Mapping[str, Any], image: str,
                      timeout: float = 120.0, poll: float = 1.0) -> SwapResult:
    """Start `image` in place of the container `old`, wait until healthy, then remove
    `old`; on failure remove the new container and leave `old` running."""
    api = client.api
    service = _labels(old).get(SERVICE_LABEL, "")
    new_image = _ensure_image(client, image)
    try:
        old_image_env = api.inspect_image(old["Image"]).get("Config", {}).get("Env") or []
    except DockerException:
        old_image_env = []  # the old image may be gone: keep every variable then
    networks: dict[str, Any] = dict(old.get("NetworkSettings", {}).get("Networks") or {})
    if not networks:
        raise DockerOpsError(f"{_name(old)} is on no network; nothing to take its place on")
    healthcheck = (new_image.get("Config") or {}).get("Healthcheck") \
        or (old.get("Config") or {}).get("Healthcheck")
    if not healthcheck or healthcheck.get("Test") in (None, [], ["NONE"]):
        raise DockerOpsError(f"neither {image} nor {_name(old)} has a healthcheck to wait for")
    labels = _labels(old)
    first, *others = networks
    host_config = api.create_host_config(
        network_mode=first,
        restart_policy=(old.get("HostConfig") or {}).get("RestartPolicy") or None,
    )
    networking = api.create_networking_config({
        first: api.create_endpoint_config(aliases=_aliases(old, networks[first], service)),
    })
    new_name = f"{_name(old)}-{secrets.token_hex(3)}"
    try:
        created = api.create_container(
            image, name=new_name, labels=labels,
            environment=_own_environment(old, old_image_env),
            host_config=host_config, networking_config=networking, healthcheck=healthcheck,
        )
    except DockerException as exc:
        raise DockerOpsError(f"cannot create a container of {image}: {exc}") from None
    new_id = str(created["Id"])
    try:
        for network in others:
            api.connect_container_to_network(
                new_id, networks[network].get("NetworkID") or network,
                aliases=_aliases(old, networks[network], service))
        api.start(new_id)
        wait_healthy(client, new_id, timeout, poll)
    except (DockerException, DockerOpsError) as exc:
        with contextlib.suppress(DockerException):
            api.remove_container(new_id, force=True)
        raise DockerOpsError(
            f"{service}: {image} did not take over from {_name(old)} ({exc}); "
            f"rolled back: {_name(old)} keeps running") from None
    try:
        _remove(client, str(old["Id"]))
    except DockerException as exc:
        raise DockerOpsError(
            f"{service}: {new_name} is healthy, but removing {_name(old)} failed: {exc}"
        ) from None
    return SwapResult(service=service, old_name=_name(old), new_name=new_name, new_id=new_id)


def swap_service(client: docker.DockerClient, service: str, image: str, timeout: float = 120.0,
                 project: str | None = None, poll: float = 1.0,
                 on_swapped: Callable[[SwapResult], None] | None = None) -> list[SwapResult]:
    """Replace every running container of `service` by `image`, one at a time (a scaled
    service keeps serving throughout); stops at the first failure, which rolls back."""
    old_containers = find_containers(client, service=service, project=project,
                                     running_only=True)
    if not old_containers:
        raise DockerOpsError(
            f"no running container labelled {SERVICE_LABEL}={service}"
            + (f" in project {project}" if project else "")
            + "; is the ensemble up (docker compose up -d)?")
    results = []
    for old in old_containers:
        result = replace_container(client, old, image, timeout=timeout, poll=poll)
        results.append(result)
        if on_swapped is not None:
            on_swapped(result)
    return results
