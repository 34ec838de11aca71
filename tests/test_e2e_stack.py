"""End to end: every registry service started by the launcher behind `boilerbench up`,
on its registry port where that port is free, answering the contract over HTTP."""

from __future__ import annotations

import random
from collections.abc import Iterator

import httpx
import pytest

from orchestrator.launcher import LocalStack, port_is_free
from shared.contract import ErrorReply, ExtractReply, ServiceInfo
from shared.registry import SERVICES
from tests.servers import free_port
from tests.test_contract import ARTICLE, example_options, page_url

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack() -> Iterator[dict[str, str]]:
    """The whole ensemble as local processes; registry ports unless one is taken."""
    ports = {name: entry.port if port_is_free("127.0.0.1", entry.port) else free_port()
             for name, entry in SERVICES.items()}
    local = LocalStack(list(SERVICES), ports=ports)
    urls = local.start(timeout=240)
    try:
        yield urls
    finally:
        local.stop()


def test_every_service_answers_on_its_port(stack: dict[str, str]) -> None:
    moved = [name for name, url in stack.items()
             if not url.endswith(f":{SERVICES[name].port}")]
    with httpx.Client(timeout=60) as client:
        for name, url in stack.items():
            assert client.get(f"{url}/health").json() == {"status": "ok"}
            info = ServiceInfo.model_validate(client.get(f"{url}/info").json())
            assert info.name == name
            reply = client.post(f"{url}/extract", json={
                "html": ARTICLE, "url": page_url(name), "options": example_options(name)})
            assert reply.status_code == 200, (name, reply.text[:300])
            body = ExtractReply.model_validate(reply.json())
            assert body.algorithm == name
            assert body.blocks
            assert "corroded" in body.text
            junk = client.post(f"{url}/extract", content=random.Random(3).randbytes(2000),
                               headers={"content-type": "text/html"})
            assert junk.status_code == 400
            ErrorReply.model_validate(junk.json())
            bad_option = client.post(f"{url}/extract",
                                     json={"html": ARTICLE, "options": {"no_such_option": 1}})
            assert bad_option.status_code == 422
    # Ports taken by another program on this machine move; CI machines have them free.
    assert len(moved) < len(stack), f"no registry port was free: {moved}"


def test_the_ensemble_asks_the_members_of_its_stack_over_http(stack: dict[str, str]) -> None:
    """As docker-compose.yml wires it: every member that runs in the stack is named to the
    ensemble by its URL; the default members answer a page from there."""
    members = SERVICES["ensemble"].members
    with httpx.Client(timeout=60) as client:
        info = ServiceInfo.model_validate(client.get(f"{stack['ensemble']}/info").json())
        assert info.details is not None
        assert {name: m["url"] for name, m in info.details["members"].items()
                if name in members} == {name: stack[name] for name in members}
        reply = client.post(f"{stack['ensemble']}/extract", json={"html": ARTICLE})
        assert reply.status_code == 200, reply.text[:300]
        details = ExtractReply.model_validate(reply.json()).details
        assert details is not None
        assert details["members_answered"] == details["members_asked"] != []
