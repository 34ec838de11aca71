"""A learned service loads the model file BOILERBENCH_<SERVICE>_MODEL names in place of
its shipped one (a model trained with `boilerbench train ... --out`), and a file that
does not load stops the service at startup with one line naming the variable."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.density import model as density_model
from services.density.extractor import DensityOptions
from services.density.extractor import extract as density_extract
from services.density.lines import render_lines
from services.ensemble import cache
from services.ensemble import model as ensemble_model
from services.fusion import model as fusion_model
from services.fusion.extractor import FusionOptions
from services.fusion.extractor import extract as fusion_extract
from shared.datasets import REPO_ROOT
from tests.helpers import write_test_set

DATA = Path(__file__).parent / "data"
PAGE = ("<html><body><h1>A title</h1><p>" + "Words of the article, one after another. " * 8
        + "</p><ul><li><a href='/'>Home</a></li><li><a href='/a'>About</a></li></ul>"
        "</body></html>")


@pytest.fixture(autouse=True)
def fresh_models() -> Iterator[None]:
    """Each test loads the models its environment names, and leaves the shipped ones."""
    loaders = (density_model.default_model, fusion_model.default_model,
               ensemble_model.default_model)
    for loader in loaders:
        loader.cache_clear()
    yield
    for loader in loaders:
        loader.cache_clear()


def test_density_and_fusion_extract_with_the_model_file_the_setting_names(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The files of tests/data were trained on four pages of each dataset: their scores
    differ from the shipped models', and the services give theirs."""
    shipped_density = density_extract(PAGE, DensityOptions()).blocks
    shipped_fusion = fusion_extract(PAGE, FusionOptions()).blocks
    monkeypatch.setenv("BOILERBENCH_DENSITY_MODEL", str(DATA / "density-limit4.json"))
    monkeypatch.setenv("BOILERBENCH_FUSION_MODEL", str(DATA / "fusion-limit4.json"))
    for loader in (density_model.default_model, fusion_model.default_model):
        loader.cache_clear()
    own_density = density_model.read_model(DATA / "density-limit4.json")
    own_fusion = fusion_model.read_model(DATA / "fusion-limit4.json")
    assert density_model.default_model().metadata == own_density.metadata
    assert fusion_model.default_model().metadata == own_fusion.metadata
    density_blocks = density_extract(PAGE, DensityOptions()).blocks
    fusion_blocks = fusion_extract(PAGE, FusionOptions()).blocks
    assert [b.score for b in density_blocks] != [b.score for b in shipped_density]
    assert [b.score for b in fusion_blocks] != [b.score for b in shipped_fusion]
    lines = density_model.line_features(render_lines(PAGE))
    assert [b.score for b in density_blocks] == \
        [round(float(s), 4) for s in own_density.decide(lines)[0]]


def test_the_ensemble_loads_the_model_file_the_setting_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = json.loads(ensemble_model.DEFAULT_MODEL.read_text(encoding="utf-8"))
    own = {**shipped, "default_members": ["readability"],
           "metadata": {**shipped["metadata"], "trained_on": ["mine"]}}
    path = tmp_path / "ensemble-mine.json"
    path.write_text(json.dumps(own), encoding="utf-8")
    monkeypatch.setenv("BOILERBENCH_ENSEMBLE_MODEL", str(path))
    model = ensemble_model.default_model()
    assert model.default_members == ("readability",)
    assert model.metadata["trained_on"] == ["mine"]


def test_an_empty_setting_means_the_shipped_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """BOILERBENCH_DENSITY_MODEL= (set but empty, as compose files leave variables)."""
    monkeypatch.setenv("BOILERBENCH_DENSITY_MODEL", "")
    assert density_model.default_model().metadata == \
        density_model.read_model(density_model.DEFAULT_MODEL).metadata


def test_a_model_file_that_does_not_load_stops_the_service_in_one_line(
        tmp_path: Path) -> None:
    """Missing, cut short (a copy stopped midway) or another service's file: the service
    stops at startup naming the variable and why, rather than starting and failing every
    page, or answering with a model it was not given."""
    cut = tmp_path / "cut.json"
    cut.write_bytes((DATA / "fusion-limit4.json").read_bytes()[:5000])
    cases = {"density": (tmp_path / "missing.json", "No such file or directory"),
             "fusion": (cut, "is no fusion model file (JSONDecodeError"),
             "ensemble": (DATA / "density-limit4.json", "is no ensemble model file")}
    for service, (path, reason) in cases.items():
        variable = f"BOILERBENCH_{service.upper()}_MODEL"
        result = subprocess.run(
            [sys.executable, "-m", "shared.serving", f"services.{service}.app:app",
             "--port", "0"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
            env={**os.environ, variable: str(path)}, check=False)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert f"{variable}='{path}'" in lines[0], lines[0]
        assert reason in lines[0], lines[0]


def test_the_ensembles_training_asks_a_member_again_under_another_model_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The members' answers are cached by their code and shipped model files; a learned
    member loading a file of one's own answers otherwise, so its answers are asked anew."""
    monkeypatch.setattr(cache, "CACHE_DIR", tmp_path / "cache")
    dataset = write_test_set(tmp_path / "set", {"a": (PAGE, "Words of the article")})
    said: list[str] = []
    cache.member_answers([dataset], ["density"], 1, said.append)
    cache.member_answers([dataset], ["density"], 1, said.append)
    assert said == ["set: computing density on 1 pages"]
    monkeypatch.setenv("BOILERBENCH_DENSITY_MODEL", str(DATA / "density-limit4.json"))
    cache.member_answers([dataset], ["density"], 1, said.append)
    assert said == ["set: computing density on 1 pages"] * 2


@pytest.mark.parametrize("mode", ["--in-process", "--local"])
def test_a_run_refuses_a_model_file_that_does_not_load_before_it_starts(
        tmp_path: Path, mode: str) -> None:
    """In process, every page would otherwise fail on the file, each with the whole
    message; with local services, the service's start would."""
    from typer.testing import CliRunner

    from orchestrator.cli import app

    broken = tmp_path / "fusion.json"
    broken.write_text('{"format": "boilerbench-fusion-model"', encoding="utf-8")
    result = CliRunner().invoke(
        app, ["run", mode, "--services", "fusion,bte", "--store", str(tmp_path / "s.sqlite"),
              "--out", str(tmp_path / "out")],
        env={"BOILERBENCH_FUSION_MODEL": str(broken)}, terminal_width=200)
    assert result.exit_code == 2, result.output
    assert f"BOILERBENCH_FUSION_MODEL='{broken}'" in result.output
    assert "is no fusion model file" in result.output
    assert not (tmp_path / "out").exists()  # no run was made


def test_info_names_the_model_file_the_service_loaded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """/info of a learned service names the file it loaded, by name and the SHA-256 of
    its bytes, with the held-out figures its training recorded, and /openapi.json
    documents the field; a service without a model says null."""
    from fastapi.testclient import TestClient

    from shared.registry import SERVICES
    from shared.service import create_service_app

    def info(service: str) -> dict[str, object]:
        if service != "justext":  # as services/<name>/app.py does, before the app
            importlib.import_module(f"services.{service}.model").default_model()
        client = TestClient(create_service_app(SERVICES[service].algorithm()))
        reply: dict[str, object] = client.get("/info").json()
        return reply

    def named(path: Path) -> dict[str, object]:
        metadata = json.loads(path.read_text(encoding="utf-8"))["metadata"]
        return {"file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                "leave_one_dataset_out": metadata["leave_one_dataset_out"]["word_f1"]}

    for module in (density_model, fusion_model, ensemble_model):
        service = module.__name__.split(".")[1]
        assert info(service)["model"] == named(module.DEFAULT_MODEL), service
    assert info("justext")["model"] is None
    monkeypatch.setenv("BOILERBENCH_FUSION_MODEL", str(DATA / "fusion-limit4.json"))
    fusion_model.default_model.cache_clear()
    assert info("fusion")["model"] == named(DATA / "fusion-limit4.json")
    schema = TestClient(create_service_app(SERVICES["fusion"].algorithm())).get(
        "/openapi.json").json()
    assert schema["components"]["schemas"]["ServiceInfo"]["properties"]["model"][
        "anyOf"][0] == {"$ref": "#/components/schemas/ModelInfo"}
    assert set(schema["components"]["schemas"]["ModelInfo"]["properties"]) == {
        "file", "sha256", "leave_one_dataset_out"}
