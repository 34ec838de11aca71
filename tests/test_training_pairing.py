"""Training reads a dataset folder as the orchestrator reads a test set: the same pages
(shared.pairing: any suffix case, .htm, names in NFC or NFD), each file read by the
name the pairing chose and once, the pairing's warnings said, and a folder without a
paired page refused."""

from __future__ import annotations

import unicodedata
from collections import Counter
from pathlib import Path

import pytest

from orchestrator.testsets import open_dataset_dir
from services.density.training import page_lines
from services.density.training import train as train_density
from shared.modelfile import PAGE_DIGESTS, page_digest
from shared.tokens import tokenize
from shared.training import TrainingDataError, load_datasets, page_ids

CAFE = "café"
# (html file name, gold file name or None) of each page of the odd folder.
ODD_NAMES = [
    ("plain.html", "plain.txt"),
    ("upper.HTM", "upper.TXT"),
    (f"{unicodedata.normalize('NFC', CAFE)}.html", f"{unicodedata.normalize('NFD', CAFE)}.txt"),
    ("orphan.html", None),
]


def real_pages(dataset: Path, count: int) -> list[tuple[bytes, bytes]]:
    """The HTML and gold bytes of a dataset's first pages."""
    ids = sorted(p.stem for p in (dataset / "html").glob("*.html"))[:count]
    return [((dataset / "html" / f"{i}.html").read_bytes(),
             (dataset / "content" / f"{i}.txt").read_bytes()) for i in ids]


def odd_folder(folder: Path, pages: list[tuple[bytes, bytes]]) -> Path:
    """Real pages under the names of ODD_NAMES, and a gold text without its page."""
    (folder / "html").mkdir(parents=True)
    (folder / "content").mkdir()
    for (html_name, gold_name), (html, gold) in zip(ODD_NAMES, pages, strict=False):
        (folder / "html" / html_name).write_bytes(html)
        if gold_name is not None:
            (folder / "content" / gold_name).write_bytes(gold)
    (folder / "content" / "lonely.txt").write_bytes(pages[-1][1])
    return folder


def plain_folder(folder: Path, pages: list[tuple[bytes, bytes]]) -> Path:
    (folder / "html").mkdir(parents=True)
    (folder / "content").mkdir()
    for n, (html, gold) in enumerate(pages):
        (folder / "html" / f"p{n}.html").write_bytes(html)
        (folder / "content" / f"p{n}.txt").write_bytes(gold)
    return folder


@pytest.mark.dataset
def test_training_labels_the_pages_a_test_set_pairs(scrapinghub: Path, tmp_path: Path) -> None:
    folder = odd_folder(tmp_path / "odd", real_pages(scrapinghub, 5))
    test_set = open_dataset_dir(folder)
    assert test_set.ids == ["café", "plain", "upper"]
    pages, meta = load_datasets([folder], page_lines, "lines")
    assert [p.page_id for p in pages] == test_set.ids
    assert meta[0]["pages"] == 3
    for page in pages:
        labelled = test_set.page(page.page_id)
        assert page.gold == Counter(tokenize(labelled.gold))
        assert isinstance(labelled.html, bytes)
        assert page.html_digest == page_digest(labelled.html)
    # What the train command checks for gold: every HTML page, with its gold or not.
    assert page_ids(folder) == ["café", "orphan", "plain", "upper"]


@pytest.mark.dataset
def test_training_says_the_pairing_warnings(scrapinghub: Path, tmp_path: Path) -> None:
    """As the train command logs what it does (one line per call of `log`)."""
    pages = real_pages(scrapinghub, 8)
    odd = odd_folder(tmp_path / "odd", pages[:5])
    other = plain_folder(tmp_path / "other", pages[5:])
    said: list[str] = []
    model = train_density([odd, other], tmp_path / "model.json", workers=1, log=said.append)
    warnings = open_dataset_dir(odd).warnings
    assert warnings == ["odd: html/orphan.html has no content/orphan.txt; not used",
                        "odd: content/lonely.txt has no html/lonely.html; not used"]
    assert said[:2] == warnings
    assert [d["pages"] for d in model.metadata["datasets"]] == [3, 3]


@pytest.mark.dataset
def test_training_reads_each_html_file_once(scrapinghub: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The digests recorded in the model file are of the bytes the features came from."""
    pages = real_pages(scrapinghub, 6)
    folders = [plain_folder(tmp_path / "one", pages[:3]),
               plain_folder(tmp_path / "two", pages[3:])]
    reads: Counter[Path] = Counter()
    read_bytes = Path.read_bytes

    def counted(path: Path) -> bytes:
        reads[path] += 1
        return read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", counted)
    model = train_density(folders, tmp_path / "model.json", workers=1)
    html_files = sorted(f.resolve() for d in folders for f in (d / "html").iterdir())
    assert {f: reads[f] for f in html_files} == dict.fromkeys(html_files, 1)
    assert model.metadata[PAGE_DIGESTS] == sorted({page_digest(html) for html, _ in pages})


def test_training_refuses_a_dataset_without_a_paired_page(tmp_path: Path) -> None:
    page = b"<html><body><p>Some words of a page.</p></body></html>"
    cases = {"unpaired": [("a.html", page), ("b.txt", b"Some words")],
             "htm-only": [("c.htm", page)]}
    for name, files in cases.items():
        folder = tmp_path / name
        (folder / "html").mkdir(parents=True)
        (folder / "content").mkdir()
        for file_name, data in files:
            sub = "content" if file_name.endswith(".txt") else "html"
            (folder / sub / file_name).write_bytes(data)
        with pytest.raises(TrainingDataError, match=f"{name}: no page has both"):
            load_datasets([folder], page_lines, "lines")


@pytest.mark.dataset
def test_ensemble_training_pairs_as_a_test_set(scrapinghub: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The members' answers are computed, cached and keyed on the paired pages."""
    from services.ensemble import cache
    from services.ensemble.training import load_pages

    monkeypatch.setattr(cache, "CACHE_DIR", tmp_path / "cache")
    folder = odd_folder(tmp_path / "odd", real_pages(scrapinghub, 5))
    test_set = open_dataset_dir(folder)
    said: list[str] = []
    pages = load_pages([folder], ["bte"], 1, said.append)
    assert said == [*test_set.warnings, "odd: computing bte on 3 pages"]
    assert [p.page_id for p in pages] == test_set.ids
    for page in pages:
        labelled = test_set.page(page.page_id)
        assert isinstance(labelled.html, bytes)
        assert page.html_digest == page_digest(labelled.html)
        assert page.gold == Counter(tokenize(labelled.gold))
    said.clear()
    assert [p.page_id for p in load_pages([folder], ["bte"], 1, said.append)] == test_set.ids
    assert said == test_set.warnings  # answered from the cache


def test_training_says_which_gold_texts_a_run_would_warn_of(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gold file in latin-1 is decoded as a run decodes it, and an empty one trains a
    page without content; both are said, as a run says them, rather than taken in
    silence."""
    from services.ensemble import cache
    from services.ensemble.training import load_pages

    monkeypatch.setattr(cache, "CACHE_DIR", tmp_path / "cache")
    folder = tmp_path / "mine"
    (folder / "html").mkdir(parents=True)
    (folder / "content").mkdir()
    page = "<html><body><p>Un café crème, s'il vous plaît.</p><p>Menu</p></body></html>"
    for page_id, gold in (("latin", "Un café crème".encode("latin-1")), ("empty", b""),
                          ("plain", b"Un caf")):
        (folder / "html" / f"{page_id}.html").write_text(page, encoding="utf-8")
        (folder / "content" / f"{page_id}.txt").write_bytes(gold)
    run_notes = open_dataset_dir(folder).page("latin").notes
    assert run_notes == ("content/latin.txt is not valid UTF-8 (byte 6); decoded by charset "
                         "detection",)
    expected = ["mine/empty: the gold text is empty: trained on as a page without content",
                f"mine/latin: {run_notes[0]}"]
    said: list[str] = []
    load_datasets([folder], page_lines, "lines", log=said.append)
    assert said == expected
    said.clear()
    load_pages([folder], ["bte"], 1, said.append)
    assert said == ["mine: computing bte on 3 pages", *expected]
