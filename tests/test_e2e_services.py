"""End to end: the services as real processes, started by the same launcher as
`boilerbench up`, answering real pages from ../shared/datasets."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from orchestrator.scoring import bag_f1
from services.boilerpipe.extractor import default_engine
from shared.contract import ExtractReply
from shared.decoding import decode_html
from tests.conftest import report
from tests.servers import local_stack

pytestmark = pytest.mark.e2e


def pages(dataset: Path) -> list[tuple[str, bytes, str]]:
    return [(p.stem, p.read_bytes(), (dataset / "content" / f"{p.stem}.txt").read_text("utf-8"))
            for p in sorted((dataset / "html").glob("*.html"))]


@pytest.fixture(scope="module")
def stack() -> Iterator[dict[str, str]]:
    with local_stack(["justext", "boilerpipe"]) as local:
        yield local.urls()


def test_real_pages_through_real_processes(stack: dict[str, str], scrapinghub: Path,
                                           cleaneval: Path) -> None:
    sample = pages(scrapinghub)[:5] + pages(cleaneval)[:5]
    with httpx.Client(timeout=60) as client:
        for name, url in stack.items():
            for page_id, data, _ in sample:
                reply = client.post(f"{url}/extract", content=data,
                                    headers={"content-type": "text/html"})
                assert reply.status_code == 200, (name, page_id, reply.text[:300])
                body = ExtractReply.model_validate(reply.json())
                assert body.algorithm == name
                assert body.blocks, (name, page_id)


def test_boilerpipe_info_names_the_engine(stack: dict[str, str]) -> None:
    info = httpx.get(f"{stack['boilerpipe']}/info").json()
    assert info["engine"] == default_engine()


@pytest.mark.skipif(default_engine() != "java", reason="Boilerpipe jars or a JVM are absent "
                    "(Debian libboilerpipe-java and a JRE are needed for the java engine)")
def test_java_boilerpipe_service_matches_the_library(stack: dict[str, str],
                                                     scrapinghub: Path) -> None:
    """ArticleExtractor through the service scores within 0.01 mean word F1 of the
    same Java library called directly, on every scrapinghub page."""
    import jpype

    from services.boilerpipe.extractor import _java

    _java()
    article_extractor = jpype.JClass("de.l3s.boilerpipe.extractors.ArticleExtractor").INSTANCE
    service_f1, direct_f1 = [], []
    with httpx.Client(timeout=60) as client:
        for _, data, gold in pages(scrapinghub):
            reply = client.post(f"{stack['boilerpipe']}/extract",
                                json={"html": decode_html(data), "options": {
                                    "extractor": "article", "engine": "java"}})
            assert reply.status_code == 200, reply.text[:300]
            service_f1.append(bag_f1(reply.json()["text"], gold))
            direct = str(article_extractor.getText(decode_html(data)))
            direct_f1.append(bag_f1(direct, gold))
    service_mean, direct_mean = statistics.mean(service_f1), statistics.mean(direct_f1)
    report(f"boilerpipe java ArticleExtractor on scrapinghub ({len(service_f1)} pages): "
           f"mean word F1 through the service {service_mean:.4f}, library direct {direct_mean:.4f}")
    assert abs(service_mean - direct_mean) <= 0.01
