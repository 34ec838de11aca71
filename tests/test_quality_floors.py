"""Quality floors: each listed service keeps at least its pinned mean word F1 on a
fixed sample of scrapinghub (tests/quality_floors.json), so a change that makes an
extractor worse fails here instead of going unnoticed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.scoring import prepare_page, score_extraction
from shared.html import parse_html, visible_text
from shared.registry import SERVICES
from tests.helpers import dataset_pages

FLOORS = json.loads((Path(__file__).parent / "quality_floors.json").read_text(encoding="utf-8"))
BASELINE = "visible-text"


def test_floors_name_known_services() -> None:
    for name, entry in FLOORS["floors"].items():
        assert name == BASELINE or name in SERVICES, name
        assert 0.0 < entry["min_f1"] <= entry["measured"] <= 1.0, name


@pytest.mark.parametrize("service", sorted(FLOORS["floors"]))
def test_mean_word_f1_stays_above_floor(service: str, scrapinghub: Path) -> None:
    assert FLOORS["dataset"] == "scrapinghub"
    entry = FLOORS["floors"][service]
    f1s = []
    for html, gold in dataset_pages(scrapinghub, FLOORS["pages"]):
        ref = prepare_page(html, gold)
        if service == BASELINE:
            text, blocks = visible_text(parse_html(html)), None
        else:
            reply = SERVICES[service].algorithm().run(html, {}, None)
            text, blocks = reply.text, reply.blocks
        f1s.append(score_extraction(ref, text, blocks).word.f1)
    assert len(f1s) == FLOORS["pages"]
    mean = sum(f1s) / len(f1s)
    assert mean >= entry["min_f1"], (
        f"{service}: mean word F1 {mean:.4f} on {len(f1s)} {FLOORS['dataset']} pages is below "
        f"its floor {entry['min_f1']} (measured {entry['measured']} when set)")
