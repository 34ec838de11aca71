"""The ensemble: members' answers mapped onto blocks, missing members, members over HTTP
going down one by one (real processes), and the model file replaying its training."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from statistics import fmean
from typing import ClassVar

import httpx
import numpy as np
import pytest
from pydantic import ValidationError

from orchestrator.launcher import stack_with_members
from orchestrator.scoring import bag_f1
from services.ensemble import cache
from services.ensemble.extractor import ALGORITHM, EnsembleOptions
from services.ensemble.features import (
    MEMBER_FIGURES,
    MISSING,
    SUMMARY,
    feature_names,
    figures_matrix,
    member_figures,
)
from services.ensemble.members import TRAINING_MEMBERS, HttpMembers, MemberAnswer
from services.ensemble.model import default_model
from services.fusion.features import FEATURES as FUSION_FEATURES
from services.fusion.features import page_features
from shared.contract import Block, ExtractReply, ServiceInfo
from shared.datasets import REPO_ROOT, dataset_dir
from shared.registry import SERVICES
from shared.training import load_page
from tests.helpers import dataset_pages, write_test_set

PAGE = ("<html><body><div><p>alpha beta gamma</p><p>delta epsilon</p>"
        "<p>home menu</p></div></body></html>")


def test_a_members_answer_is_mapped_onto_the_pages_blocks() -> None:
    page = page_features(PAGE)
    assert [b.text for b in page.blocks] == ["alpha beta gamma", "delta epsilon", "home menu"]
    answer = MemberAnswer("x", "alpha beta gamma\ndelta", [
        Block("alpha beta gamma", True, 0.9), Block("delta epsilon", False, 0.2),
        Block("home menu", False, None)])
    figures = member_figures(page, answer)
    assert figures is not None
    assert figures.support.tolist() == [1.0, 0.5, 0.0]
    assert figures.own_label.tolist() == [1.0, 0.0, 0.0]
    assert figures.own_score.tolist() == [0.9, 0.2, MISSING]


@pytest.mark.dataset
def test_a_text_peers_label_and_score_are_the_ones_its_blocks_would_give(
        scrapinghub: Path) -> None:
    """A text peer is asked for its text alone; the figures made from it equal those made
    from the blocks the peer returns when asked for them, on real pages."""
    for html, _ in dataset_pages(scrapinghub, step=30):
        page = page_features(html)
        for peer in ("readability", "resiliparse"):
            reply = SERVICES[peer].algorithm().run(html)
            alone = member_figures(page, MemberAnswer(peer, reply.text, None))
            matched = member_figures(page, MemberAnswer(f"{peer} blocks", reply.text,
                                                        reply.blocks))
            assert alone is not None
            assert matched is not None
            assert (matched.own_label != MISSING).all()  # every block matched one for one
            np.testing.assert_array_equal(alone.own_label, matched.own_label)
            np.testing.assert_array_equal(alone.own_score, matched.own_score)


def test_a_missing_member_is_a_missing_feature_not_an_error() -> None:
    page = page_features(PAGE)
    answered = MemberAnswer("a", "alpha beta gamma", None)
    failed = MemberAnswer("b", None, None, error="down")
    matrix = figures_matrix(page, {a.member: member_figures(page, a) for a in (answered, failed)},
                            ("a", "b"))
    names = feature_names(("a", "b"))
    assert matrix.shape == (3, len(FUSION_FEATURES) + 2 * len(MEMBER_FIGURES) + len(SUMMARY))
    row = dict(zip(names, matrix[0], strict=True))
    assert row["a_answered"] == 1.0
    assert row["a_support"] == 1.0
    assert row["a_own_label"] == MISSING  # a text-only answer has no blocks of its own
    assert row["b_answered"] == 0.0
    assert row["b_support"] == MISSING
    assert row["members_answered"] == 1.0


def test_members_option_refuses_unknown_names() -> None:
    with pytest.raises(ValidationError):
        EnsembleOptions(members=["no-such-member"])
    assert EnsembleOptions(members=[]).members == []


def test_in_process_reply_names_its_members_and_falls_back_without_them(
        scrapinghub: Path) -> None:
    html, gold = dataset_pages(scrapinghub, stop=1)[0]
    model = default_model()
    reply = ALGORITHM.run(html)
    assert reply.details is not None
    assert reply.details["members_asked"] == list(model.default_members)
    assert reply.details["members_answered"] == list(model.default_members)
    assert reply.details["fallback"] is False
    assert bag_f1(reply.text, gold) > 0.8
    alone = ALGORITHM.run(html, {"members": []})
    assert alone.details == {"members_asked": [], "members_answered": [],
                             "members_missing": {}, "fallback": True}
    assert alone.text.strip()


def test_model_file_replays_its_recorded_checks() -> None:
    """The committed model, the feature code and the members in-process give the word F1
    and probabilities recorded when the model was trained."""
    model = default_model()
    recorded = model.metadata["checks"]
    probabilities = model.probabilities(np.array(recorded["rows"]))
    assert probabilities.tolist() == pytest.approx(recorded["probabilities"], abs=1e-12)
    for name, scores in recorded["page_word_f1"].items():
        folder = dataset_dir(name)
        if folder is None:
            continue
        for page_id, score in scores.items():
            html, gold = load_page(folder, page_id)
            text = ALGORITHM.run(html).text
            assert bag_f1(text, gold) == pytest.approx(score, abs=1e-6), (name, page_id)


def test_over_http_members_going_down_are_missing_features(scrapinghub: Path) -> None:
    """Real processes: three members and the ensemble told their URLs, asked for those
    three. Two members stopped: every page still 200, the two named missing, the score
    barely moves; every member stopped: 200 and `fallback`."""
    members = ["cetd", "trafilatura", "readability"]  # in the model's member order
    assert [m for m in default_model().members if m in members] == members
    stack = stack_with_members("ensemble", members,
                               {"BOILERBENCH_MEMBER_TIME_LIMIT_S": "5"})  # a loaded machine
    urls = stack.start(timeout=240.0)
    pages = dataset_pages(scrapinghub, stop=40, step=8)
    try:
        base = urls["ensemble"]
        with httpx.Client(timeout=60.0) as client:
            info = ServiceInfo.model_validate(client.get(f"{base}/info").json())
            assert info.details is not None
            assert set(info.details["members"]) == set(default_model().members)
            assert info.details["members"]["cetd"]["url"] == urls["cetd"]

            def run() -> tuple[float, list[ExtractReply]]:
                replies = []
                for html, _ in pages:
                    reply = client.post(f"{base}/extract",
                                        json={"html": html, "options": {"members": members}})
                    assert reply.status_code == 200, reply.text
                    replies.append(ExtractReply.model_validate(reply.json()))
                f1 = fmean(bag_f1(r.text, gold) for r, (_, gold) in zip(replies, pages,
                                                                         strict=True))
                return f1, replies

            full, replies = run()
            assert all(r.details and r.details["members_answered"] == members
                       for r in replies)
            stopped = ["cetd", "trafilatura"]
            for name in stopped:
                stack.kill(name)
            degraded, replies = run()
            for r in replies:
                assert r.details is not None
                assert sorted(r.details["members_missing"]) == sorted(stopped)
                assert r.details["members_answered"] == ["readability"]
                assert r.details["fallback"] is False
            assert degraded > full - 0.05
            stack.kill("readability")
            _, replies = run()
            assert all(r.details and r.details["fallback"] is True
                       and r.details["members_answered"] == [] for r in replies)
    finally:
        stack.stop()


class _Member(BaseHTTPRequestHandler):
    """A member service stand-in: answers /extract after `delay` seconds, and with
    `hang_up` closes its keep-alive connection after each reply without saying so (as a
    server does when an idle connection times out)."""

    protocol_version = "HTTP/1.1"
    delay = 0.0
    hang_up = False
    algorithm: str | None = None  # the name its replies give, if any
    known_options: tuple[str, ...] = ("blocks",)  # others are refused with 422
    options_seen: ClassVar[list[dict[str, object]]] = []

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.options_seen.append(request["options"])
        if set(request["options"]) - set(self.known_options):
            self._send(422, {"error": "invalid_options", "detail": "unknown option"})
            return
        time.sleep(self.delay)
        reply = {"text": request["html"], "blocks": [
            {"text": request["html"], "is_content": True, "score": 0.75}]}
        if self.algorithm is not None:
            reply["algorithm"] = self.algorithm
        self._send(200, reply)

    def _send(self, status: int, reply: dict[str, object]) -> None:
        body = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = self.hang_up

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def _members(*handlers: type[_Member]) -> Iterator[list[str]]:
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), handler) for handler in handlers]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield [f"http://127.0.0.1:{server.server_address[1]}" for server in servers]
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def test_members_over_http_work_at_the_same_time_within_one_time_limit() -> None:
    """Two members each taking 0.6 s answer within a 1 s limit only when both were asked
    before either answered; a member past the limit is missing, and its next answer in
    time counts again (its broken connection replaced)."""
    class Slow(_Member):
        delay = 0.6

    slow = Slow
    with _members(slow, slow) as urls:
        members = HttpMembers({"a": urls[0], "b": urls[1]}, time_limit_s=1.0)
        answers = members.send(["a", "b"], "alpha beta", None).collect()
        assert [answers[m].text for m in "ab"] == ["alpha beta", "alpha beta"]
        assert answers["a"].blocks == [Block("alpha beta", True, 0.75)]
        slow.delay = 1.5
        late = members.send(["a"], "gamma", None).collect()["a"]
        assert late.text is None
        assert "timed out" in str(late.error)
        slow.delay = 0.0
        assert members.send(["a"], "delta", None).collect()["a"].text == "delta"


def test_members_over_http_are_taken_in_the_order_their_replies_arrive() -> None:
    """A fast member's answer is handed over while a slow one, asked first, still works:
    the ensemble maps it meanwhile, off the page's critical path."""
    class Slow(_Member):
        delay = 0.5

    class Fast(_Member):
        delay = 0.0

    with _members(Slow, Fast) as urls:
        members = HttpMembers({"slow": urls[0], "fast": urls[1]}, time_limit_s=5.0)
        handed: list[tuple[str, float]] = []
        started = time.perf_counter()
        answers = members.send(["slow", "fast"], "alpha", None).collect(
            lambda answer: handed.append((answer.member, time.perf_counter() - started)))
    assert [name for name, _ in handed] == ["fast", "slow"]
    assert handed[0][1] < 0.4 <= handed[1][1]
    assert answers["fast"].text == answers["slow"].text == "alpha"


def test_members_over_http_survive_closed_keep_alive_connections() -> None:
    class HangsUp(_Member):
        hang_up = True

    with _members(HangsUp) as urls:
        members = HttpMembers({"a": urls[0]}, time_limit_s=5.0)
        for text in ("one", "two", "three"):
            assert members.send(["a"], text, None).collect()["a"].text == text
    down = HttpMembers({"a": urls[0]}, time_limit_s=5.0)  # the server is gone now
    answer = down.send(["a"], "four", None).collect()["a"]
    assert answer.text is None
    assert answer.error


def test_text_peers_over_http_are_asked_for_text_alone_and_older_ones_again() -> None:
    """readability (a text peer) gets `blocks: false`, cetd its defaults; a text peer
    that refuses the option (an image older than it) is asked again with its defaults."""
    class Current(_Member):
        options_seen: ClassVar[list[dict[str, object]]] = []

    class Older(_Member):
        known_options = ()
        options_seen: ClassVar[list[dict[str, object]]] = []

    with _members(Current, Current, Older) as urls:
        members = HttpMembers({"readability": urls[0], "cetd": urls[1],
                               "trafilatura": urls[2]}, time_limit_s=5.0)
        answers = members.send(["cetd", "trafilatura", "readability"], "one", None).collect()
    assert [answers[m].text for m in ("cetd", "trafilatura", "readability")] == ["one"] * 3
    assert sorted(Current.options_seen, key=len) == [{}, {"blocks": False}]
    assert Older.options_seen == [{"blocks": False}, {}]


def test_a_member_url_that_reaches_another_service_is_a_missing_member() -> None:
    class Other(_Member):
        algorithm = "trafilatura"

    with _members(Other) as urls:
        answer = HttpMembers({"readability": urls[0]}, time_limit_s=5.0).send(
            ["readability"], "one", None).collect()["readability"]
        named = HttpMembers({"trafilatura": urls[0]}, time_limit_s=5.0).send(
            ["trafilatura"], "two", None).collect()["trafilatura"]
    assert answer.text is None
    assert answer.error == f"{urls[0]} is the 'trafilatura' service, not 'readability'"
    assert named.text == "two"


def one_page_set(folder: Path, more: str = "") -> Path:
    """A test set of one page `a`: a paragraph of plain words, then `more`."""
    (folder / "html").mkdir(parents=True)
    (folder / "content").mkdir()
    (folder / "html" / "a.html").write_text(
        "<html><body><p>" + "A paragraph of plain words for the member. " * 5
        + f"</p>{more}</body></html>", encoding="utf-8")
    (folder / "content" / "a.txt").write_text("A paragraph", encoding="utf-8")
    return folder


def test_training_cache_asks_a_member_again_when_its_folder_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A retrained model or an edited extractor or shared module keeps the version
    string, so the cached answers are keyed on those files too; compiled files do not
    count."""
    root = tmp_path / "repository"
    for folder in ("services/bte", "shared"):
        shutil.copytree(REPO_ROOT / folder, root / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(cache, "REPO_ROOT", root)
    monkeypatch.setattr(cache, "CACHE_DIR", tmp_path / "cache")
    dataset = one_page_set(tmp_path / "set", "<p><a href='/'>Home</a></p>")

    def ask() -> tuple[list[str], MemberAnswer]:
        said: list[str] = []
        answers = cache.member_answers([dataset], ["bte"], 1, said.append)
        return said, answers[("set", "a")]["bte"]

    said, first = ask()
    assert said == ["set: computing bte on 1 pages"]
    assert first.text is not None
    assert "plain words" in first.text
    said, again = ask()
    assert said == []
    assert again.text == first.text
    (root / "services" / "bte" / "__pycache__").mkdir()
    (root / "services" / "bte" / "__pycache__" / "x.pyc").write_bytes(b"compiled")
    assert ask()[0] == []
    for edited in ("services/bte/extractor.py", "shared/flatpage.py"):
        with (root / edited).open("a", encoding="utf-8") as file:
            file.write("\n# edited\n")
        assert ask()[0] == ["set: computing bte on 1 pages"], edited
    # A page edited under its old id is asked again, and its new text comes back.
    (dataset / "html" / "a.html").write_text(
        "<html><body><p>" + "Other words now stand in the paragraph here. " * 5
        + "</p></body></html>", encoding="utf-8")
    said, edited_page = ask()
    assert said == ["set: computing bte on 1 pages"]
    assert "Other words" in (edited_page.text or "")
    assert ask()[0] == []


def test_info_gives_the_models_held_out_figures() -> None:
    """/info's leave-one-dataset-out figures are the model file's, the mean included (the
    mean of the default members' per-dataset figures), none of them missing."""
    figures = ALGORITHM.info().details["leave_one_dataset_out"]  # type: ignore[index]
    assert all(value is not None for value in figures.values()), figures
    assert figures["mean"] == pytest.approx(fmean(figures["default_members"].values()),
                                            abs=1e-4)


def test_members_are_not_run_here_on_pages_parsers_take_long_on() -> None:
    """A member started in this process cannot be stopped: on a page lexbor would take
    quadratic time on (here 20,000 nested <div>s) every in-process member is missing
    with the reason, and the page is answered from its own features."""
    page = "<html><body>" + "<div>" * 20_000 + "<p>The deep text.</p>" + "</div>" * 20_000
    reply = ALGORITHM.run(page, EnsembleOptions(), None)
    details = reply.details or {}
    assert details["fallback"] is True
    assert set(details["members_missing"]) == set(default_model().default_members)
    assert all("nested too deeply" in why for why in details["members_missing"].values())
    assert "The deep text." in reply.text


class _Trickle(_Member):
    """Sends its head at once, then its body a byte every 0.2 s (20 s in all)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", "100")
        self.end_headers()
        try:
            for _ in range(100):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:  # the ensemble hung up: what it should do
            pass


class _Flood(_Member):
    """Announces a 3 GiB reply, or (chunked) streams one without announcing it."""

    chunked = False

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        if self.chunked:
            self.send_header("transfer-encoding", "chunked")
        else:
            self.send_header("content-length", str(3 * 1024 ** 3))
        self.end_headers()
        try:
            for _ in range(200):
                chunk = b"x" * 1024
                self.wfile.write(b"400\r\n" + chunk + b"\r\n" if self.chunked else chunk)
        except OSError:
            pass


def test_a_member_that_sends_slowly_or_too_much_is_missing_by_its_time_limit() -> None:
    """The time limit bounds the whole reply, not each wait for a byte; a reply larger
    than the limit is not read into memory; a URL with a port that is not a number is a
    missing member, not a failed page."""
    class Chunked(_Flood):
        chunked = True

    with _members(_Trickle, _Flood, Chunked) as urls:
        started = time.perf_counter()
        slow = HttpMembers({"a": urls[0]}, time_limit_s=1.0).send(["a"], "x", None).collect()
        waited = time.perf_counter() - started
        assert slow["a"].text is None
        assert waited < 5.0, waited  # the trickle would take 20 s
        members = HttpMembers({"b": urls[1], "c": urls[2]}, time_limit_s=5.0,
                              max_reply_bytes=64 * 1024)
        large = members.send(["b", "c"], "x", None).collect()
    assert all(large[m].error == "the reply passes 65536 bytes" for m in "bc"), large
    bad = HttpMembers({"a": "http://127.0.0.1:notaport"}, time_limit_s=1.0)
    answer = bad.send(["a"], "x", None).collect()["a"]
    assert answer.text is None
    assert "ValueError" in str(answer.error)


def test_the_held_out_figures_record_the_choices_made_without_each_dataset() -> None:
    """Each dataset's figure comes with the rule and the default members chosen on the
    other datasets (training.held_out_figures); /info and the quality table read the
    same figures."""
    metadata = default_model().metadata
    held_out = metadata["leave_one_dataset_out"]
    datasets = set(held_out["word_f1"])
    assert datasets == {d["name"] for d in metadata["datasets"]}
    assert set(held_out["rule"]) == set(held_out["members"]) == datasets
    assert all(set(kept) <= set(default_model().members) for kept in held_out["members"].values())
    assert metadata["evaluation"]["default_members"] == held_out["word_f1"]
    for name in datasets:
        assert held_out["trained_on"][name] == sorted(datasets - {name})


def test_training_cache_computes_again_a_file_cut_short(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stored file cut short (a run stopped while writing it) or of another shape is
    asked anew rather than failing the training."""
    monkeypatch.setattr(cache, "CACHE_DIR", tmp_path / "cache")
    dataset = one_page_set(tmp_path / "set")
    stored = tmp_path / "cache" / "set" / "bte.json.gz"
    said: list[str] = []
    cache.member_answers([dataset], ["bte"], 1, said.append)
    whole = stored.read_bytes()
    for broken in (whole[: len(whole) // 2], gzip.compress(b"[1, 2]")):
        stored.write_bytes(broken)
        said.clear()
        answers = cache.member_answers([dataset], ["bte"], 1, said.append)
        assert said == ["set: computing bte on 1 pages"]
        assert "plain words" in (answers[("set", "a")]["bte"].text or "")
    assert sorted(p.name for p in stored.parent.iterdir()) == ["bte.json.gz"]


def test_training_cache_lives_in_the_users_cache_folder(tmp_path: Path) -> None:
    """BOILERBENCH_CACHE_DIR, else $XDG_CACHE_HOME/boilerbench, else
    ~/.cache/boilerbench: never the repository, which an installed package may not be
    able to write. Each case in a fresh process, as the setting is read at import."""
    home, xdg, own = tmp_path / "home", tmp_path / "xdg", tmp_path / "own"
    dataset = one_page_set(tmp_path / "set")
    ask = ("import sys; from pathlib import Path; from services.ensemble import cache; "
           "cache.member_answers([Path(sys.argv[1])], ['bte'], 1); print(cache.CACHE_DIR)")
    cases = {(own, None): own / "ensemble-members",
             (None, xdg): xdg / "boilerbench" / "ensemble-members",
             ("", "relative/ignored"): home / ".cache" / "boilerbench" / "ensemble-members"}
    for (cache_dir, xdg_home), expected in cases.items():
        env = {key: value for key, value in os.environ.items()
               if key not in ("BOILERBENCH_CACHE_DIR", "XDG_CACHE_HOME")}
        env["HOME"] = str(home)
        if cache_dir is not None:
            env["BOILERBENCH_CACHE_DIR"] = str(cache_dir)
        if xdg_home is not None:
            env["XDG_CACHE_HOME"] = str(xdg_home)
        done = subprocess.run([sys.executable, "-c", ask, str(dataset)], cwd=REPO_ROOT,
                              env=env, capture_output=True, text=True, timeout=120,
                              check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == str(expected)
        assert (expected / "set" / "bte.json.gz").is_file(), expected


def test_two_datasets_leave_no_choice_to_make_without_the_one_scored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With two datasets, leaving one out leaves one to fit on and none to choose on:
    each held-out figure takes the plainest rule and every member, while the shipped
    model still chooses on both."""
    from services.ensemble.training import CUTS, KERNELS, Hyperparameters, train
    from shared.training import rules

    monkeypatch.setattr(cache, "CACHE_DIR", tmp_path / "cache")
    words = "Some words of a page about its subject, long enough to be kept."
    page = f"<html><body><p>{words}</p><ul><li>Menu</li><li>Home</li></ul></body></html>"
    sets = [write_test_set(tmp_path / "one", {"a": (page, words),
                                              "b": (page.replace("Menu", "Nav"), words)}),
            write_test_set(tmp_path / "two", {"c": (page.replace("Home", "Start"), words)})]
    model = train(sets, tmp_path / "model.json", workers=1)
    held_out = model.metadata["leave_one_dataset_out"]
    plainest = rules(CUTS, KERNELS, Hyperparameters().relative_cut)[0].to_json()
    assert held_out["rule"] == {"one": plainest, "two": plainest}
    every = list(TRAINING_MEMBERS)
    assert list(model.members) == every
    assert held_out["members"] == {"one": every, "two": every}
    assert held_out["trained_on"] == {"one": ["two"], "two": ["one"]}
    assert (tmp_path / "model.json").is_file()
