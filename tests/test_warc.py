"""`boilerbench extract --warc`: a crawl's HTML pages give the text that
`boilerbench extract PAGE --in-process` gives for each; odd records are counted, never
fatal; a job killed with SIGKILL resumes without losing or repeating a record; the same
rows come out of a local Ray, which goes with a job killed with SIGKILL."""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.warc import OddRecord, OtherRecord, WarcPage, read_warc, sniff_html
from shared.decoding import decode_html
from tests.helpers import REPO
from tests.processes import as_a_terminal_starts_it, processes_using
from tests.warc_files import Response, dataset_responses, warc_record, write_warc

SERVICE = "bte"
# The `boilerbench` command, run by this interpreter (-P: as the installed command, the
# working directory is not on sys.path).
CLI = [sys.executable, "-P", "-c", "from orchestrator.cli import app; app()"]
PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\n%%EOF\n"


def run_cli(*args: str, timeout: float = 120, cwd: Path = REPO,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def read_rows(out: Path) -> list[dict[str, object]]:
    files = sorted(out.glob("part-*.jsonl")) if out.is_dir() else [out]
    return [orjson.loads(line) for f in files for line in f.read_bytes().splitlines()]


@pytest.fixture(scope="module")
def crawl(tmp_path_factory: pytest.TempPathFactory, scrapinghub: Path
          ) -> tuple[Path, list[Response]]:
    """Five HTML responses from the dataset (one without a Content-Type, found by
    sniffing), then a PDF, a record cut short, a binary response without a
    Content-Type and a garbled gzip member."""
    pages = dataset_responses(scrapinghub / "html", 5, step=37)
    pages[2] = Response(pages[2].uri, pages[2].body, None, 0, pages[2].record_id)
    path = tmp_path_factory.mktemp("crawl") / "crawl.warc.gz"
    odd: list[Response | bytes] = [
        Response("https://pages.example/report.pdf", PDF, "application/pdf"),
        Response("https://pages.example/cut", pages[0].body, declared_extra=4000),
        Response("https://pages.example/blob", bytes(range(256)) * 8, None),
        gzip.compress(b"this is no WARC record\r\n\r\n"),
    ]
    written = write_warc(path, [*pages[:3], *odd[:2], *pages[3:], *odd[2:]])
    return path, [r for r in written if r in pages]


def test_reader_classifies_every_record(crawl: tuple[Path, list[Response]]) -> None:
    path, pages = crawl
    items = list(read_warc(path))
    assert [i.record_id for i in items if isinstance(i, WarcPage)] == \
        [p.record_id for p in pages]
    odd = [i for i in items if isinstance(i, OddRecord)]
    assert sorted(i.kind for i in odd) == ["malformed", "not_html", "not_html", "truncated"]
    assert sum(isinstance(i, OtherRecord) for i in items) == 1  # the warcinfo record


def test_sniffing_tells_html_from_other_bodies() -> None:
    assert sniff_html(b"\n <!DOCTYPE html><html>")
    assert sniff_html(b"\xef\xbb\xbf<html lang=en>")
    assert sniff_html(b"<p>text")
    assert not sniff_html(PDF)
    assert not sniff_html(b"<pre>")  # a signature must end at a space or `>`
    assert not sniff_html(b'{"json": "<html>"}')


@pytest.fixture(scope="module")
def warc_rows(crawl: tuple[Path, list[Response]], tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[list[dict[str, object]], str]:
    path, _ = crawl
    out = tmp_path_factory.mktemp("out") / "rows.jsonl"
    done = run_cli("extract", "--warc", str(path), "--service", SERVICE, "--out", str(out),
                   "--workers", "2")
    assert done.returncode == 0, done.stderr
    return read_rows(out), done.stderr


def test_one_row_per_html_record_with_the_single_page_text(
        crawl: tuple[Path, list[Response]], warc_rows: tuple[list[dict[str, object]], str],
        tmp_path: Path) -> None:
    _, pages = crawl
    rows, report = warc_rows
    by_id = {row["record_id"]: row for row in rows}
    assert len(rows) == len(by_id) == len(pages)
    runner = CliRunner()
    for page in pages:
        row = by_id[page.record_id]
        assert row["uri"] == page.uri
        assert row["error"] is None
        html = tmp_path / "page.html"
        html.write_bytes(page.body)
        single = runner.invoke(app, ["extract", str(html), "--service", SERVICE,
                                     "--in-process", "--page-url", page.uri, "--json"])
        assert single.exit_code == 0, single.output
        expected = orjson.loads(single.stdout)["text"]
        assert len(expected) > 200
        assert row["text"] == expected
    counts = {line.split("│")[1].strip(): line.split("│")[2].strip()
              for line in report.splitlines() if line.count("│") >= 3}
    assert counts["HTML pages"] == counts["written"] == "5"
    assert counts["not html"] == "2"
    assert counts["truncated"] == "1"
    assert counts["malformed"] == "1"


def test_parquet_output_holds_the_same_rows(
        crawl: tuple[Path, list[Response]], warc_rows: tuple[list[dict[str, object]], str],
        tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    out = tmp_path / "rows.parquet"
    done = run_cli("extract", "--warc", str(crawl[0]), "--service", SERVICE, "--out", str(out),
                   "--workers", "1", "--blocks")
    assert done.returncode == 0, done.stderr
    table = pq.read_table(out).to_pylist()
    assert {r["record_id"]: r["text"] for r in table} == \
        {r["record_id"]: r["text"] for r in warc_rows[0]}
    assert all(any(b["is_content"] for b in r["blocks"]) for r in table)
    assert not out.with_name(out.name + ".partial.jsonl").exists()


def stopped_halfway(scrapinghub: Path, tmp_path: Path, service: str, workers: int,
                    stop: signal.Signals) -> tuple[Path, Path, list[Response], int]:
    """A job over 160 pages in its own process group (as a terminal runs it), sent
    `stop` once 20 rows are out: the WARC, OUT, the pages and the exit code (its
    standard error in tmp_path/stderr.txt)."""
    pages = dataset_responses(scrapinghub / "html", 160)
    path = tmp_path / "big.warc.gz"
    write_warc(path, pages)
    out = tmp_path / "rows.jsonl"
    args = [*CLI, "extract", "--warc", str(path), "--service", service, "--out", str(out),
            "--workers", str(workers)]
    with (tmp_path / "stderr.txt").open("wb") as stderr:
        job = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr,
                               start_new_session=True, preexec_fn=as_a_terminal_starts_it())
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and job.poll() is None:
        if out.exists() and out.read_bytes().count(b"\n") >= 20:
            break
        time.sleep(0.02)
    os.killpg(job.pid, stop)
    code = job.wait(timeout=60)
    assert 20 <= out.read_bytes().count(b"\n") < len(pages), "the job was not stopped halfway"
    return path, out, pages, code


def test_a_killed_job_resumes_without_losing_or_repeating_records(
        scrapinghub: Path, tmp_path: Path) -> None:
    path, out, pages, _ = stopped_halfway(scrapinghub, tmp_path, SERVICE, 1, signal.SIGKILL)
    with out.open("ab") as stream:  # a row torn by the kill, as a write cut short leaves it
        stream.write(b'{"record_id":"<urn:uuid:torn')
    done = run_cli("extract", "--warc", str(path), "--service", SERVICE, "--out", str(out),
                   "--workers", "2")
    assert done.returncode == 0, done.stderr
    rows = read_rows(out)
    assert sorted(str(r["record_id"]) for r in rows) == sorted(p.record_id for p in pages)
    assert all(r["error"] is None for r in rows)
    again = CliRunner().invoke(app, ["extract", "--warc", str(path), "--service", SERVICE,
                                     "--out", str(out)])
    assert again.exit_code == 0, again.output
    assert len(read_rows(out)) == len(pages)


def test_ray_gives_the_same_rows_and_resumes(crawl: tuple[Path, list[Response]],
                                             warc_rows: tuple[list[dict[str, object]], str],
                                             tmp_path: Path) -> None:
    """A killed Ray job's shard (two rows and a torn third) is resumed on a local Ray:
    the folder ends with every row of the in-process job, once. The job starts in a
    folder holding folders named like the packages, which Ray's workers must not take
    for them. The local Ray leaves nothing behind: no session folder (its logs), no
    token in HOME, and no warning that token authentication is on."""
    pytest.importorskip("ray", reason="Ray is not installed (the `ray` extra)")
    # Ray's folder for the test alone, short: its sockets' paths may have 107 bytes.
    ray_temp = Path(tempfile.mkdtemp(prefix="ray-"))
    home = tmp_path / "home"
    home.mkdir()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH_")},
           "RAY_TMPDIR": str(ray_temp), "HOME": str(home)}
    work = tmp_path / "work"
    for decoy in ("shared/datasets", "services/bte", "orchestrator"):
        (work / decoy).mkdir(parents=True)
    out = tmp_path / "shards"
    out.mkdir()
    rows = warc_rows[0]
    (out / "part-00000.jsonl").write_bytes(
        b"".join(orjson.dumps(r) + b"\n" for r in rows[:2]) + orjson.dumps(rows[2])[:30])
    try:
        done = run_cli("extract", "--warc", str(crawl[0]), "--service", SERVICE, "--out",
                       str(out), "--ray", "auto", "--workers", "2", "--shard-rows", "2",
                       timeout=240, cwd=work, env=env)
        left = sorted(path.name for path in (ray_temp / "ray").iterdir())
    finally:
        shutil.rmtree(ray_temp)
    assert done.returncode == 0, done.stderr
    assert left == []
    assert not (home / ".ray").exists()
    assert "Token authentication" not in done.stderr
    assert sorted(p.name for p in out.glob("part-*.jsonl")) == [
        "part-00000.jsonl", "part-00001.jsonl", "part-00002.jsonl"]

    def comparable(found: list[dict[str, object]]) -> list[str]:
        return sorted(str(sorted((k, v) for k, v in r.items() if k != "elapsed_ms"))
                      for r in found)

    assert comparable(read_rows(out)) == comparable(rows)


def ray_processes(ray_temp: Path) -> list[int]:
    """The processes of the local Rays that use `ray_temp` (every such process writes
    its logs there)."""
    return processes_using(ray_temp, "RAY_TMPDIR")


# Where a Ray worker process of the test below hangs (a sitecustomize.py on PYTHONPATH):
# as it starts, while the driver still waits in ray.init, or in its first task, as it
# imports the service's extractor.
HANG_AS_WORKER_STARTS = """
import pathlib, sys, time
if sys.argv[0].endswith("default_worker.py"):
    (pathlib.Path(__file__).parent / "hanging").touch()
    time.sleep(600)
"""
HANG_IN_TASK = """
import importlib, pathlib, sys, time
def import_module(name, package=None, load=importlib.import_module):
    if name == "services.bte.extractor":
        (pathlib.Path(__file__).parent / "hanging").touch()
        time.sleep(600)
    return load(name, package)
if sys.argv[0].endswith("default_worker.py"):
    importlib.import_module = import_module
"""


@pytest.mark.parametrize("hang_code", [HANG_AS_WORKER_STARTS, HANG_IN_TASK],
                         ids=["as_worker_starts", "in_task"])
def test_a_killed_ray_job_takes_its_local_ray_with_it(
        crawl: tuple[Path, list[Response]], tmp_path: Path, hang_code: str) -> None:
    """A Ray job whose driver is SIGKILLed once its local Ray is up leaves nothing of
    that Ray: no process (its agents outlive the raylet by a minute on their own, and a
    worker still starting for good) and no file. A worker hangs, so the job cannot end
    before the kill: as it starts (the driver is still in ray.init) or in its task."""
    pytest.importorskip("ray", reason="Ray is not installed (the `ray` extra)")
    if not Path("/proc/self/environ").exists():
        pytest.skip("needs /proc to find the cluster's processes")
    ray_temp = Path(tempfile.mkdtemp(prefix="ray-"))
    home = tmp_path / "home"
    home.mkdir()
    hang = tmp_path / "hang"
    hang.mkdir()
    (hang / "sitecustomize.py").write_text(hang_code)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH_")},
           "RAY_TMPDIR": str(ray_temp), "HOME": str(home), "PYTHONPATH": str(hang)}
    driver_log = (tmp_path / "driver.log").open("wb")
    driver = subprocess.Popen([*CLI, "extract", "--warc", str(crawl[0]), "--service", SERVICE,
                               "--out", str(tmp_path / "shards"), "--ray", "auto",
                               "--workers", "1"],
                              cwd=REPO, env=env, stdout=driver_log, stderr=driver_log)
    try:
        deadline = time.monotonic() + 120
        while not (hang / "hanging").exists():
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()
            assert time.monotonic() < deadline, "no Ray worker started"
            time.sleep(0.1)
        driver.kill()
        driver.wait()
        deadline = time.monotonic() + 30
        while (ray_processes(ray_temp) or any((ray_temp / "ray").iterdir())) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        left = ray_processes(ray_temp)
        files = [path.name for path in (ray_temp / "ray").iterdir()]
    finally:
        driver.kill()
        driver.wait()
        driver_log.close()
        for pid in ray_processes(ray_temp):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(ray_temp)
    assert left == []
    assert files == []


def test_bad_input_is_refused_clearly(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(app, ["extract", "--warc", str(tmp_path / "none-*.warc.gz"),
                                  "--service", SERVICE, "--out", str(tmp_path / "o.jsonl")])
    assert missing.exit_code == 2
    assert "no WARC file matches" in missing.output
    path = tmp_path / "x.warc"
    path.write_bytes(warc_record(Response("https://a.example/", b"<p>x</p>").with_id()))
    no_out = runner.invoke(app, ["extract", "--warc", str(path), "--service", SERVICE])
    assert no_out.exit_code == 2
    assert "--out" in no_out.output
    ray_file = runner.invoke(app, ["extract", "--warc", str(path), "--service", SERVICE,
                                   "--out", str(tmp_path / "o.jsonl"), "--ray", "auto"])
    assert ray_file.exit_code == 2
    assert "shards" in ray_file.output
    # An output holds one job's rows: another service's text is not added to them.
    out = tmp_path / "rows.jsonl"
    first = runner.invoke(app, ["extract", "--warc", str(path), "--service", SERVICE,
                                "--out", str(out), "--workers", "1"])
    assert first.exit_code == 0, first.output
    other = runner.invoke(app, ["extract", "--warc", str(path), "--service", "cetd",
                                "--out", str(out)], terminal_width=200)
    assert other.exit_code == 2
    assert "holds the rows of another job" in other.output
    assert len(read_rows(out)) == 1


def test_uncompressed_warc_is_read_too(tmp_path: Path) -> None:
    path = tmp_path / "plain.warc"
    page = Response("https://a.example/", b"<html><body><p>plain words</p></body></html>")
    path.write_bytes(warc_record(page.with_id()) + warc_record(page.with_id()))
    assert [i.body for i in read_warc(path) if isinstance(i, WarcPage)] == [page.body] * 2


def test_a_running_service_gives_the_same_rows(
        crawl: tuple[Path, list[Response]], warc_rows: tuple[list[dict[str, object]], str],
        tmp_path: Path) -> None:
    from shared.registry import SERVICES
    from shared.service import create_service_app
    from shared.settings import ServiceSettings
    from tests.servers import serve_app

    out = tmp_path / "rows.jsonl"
    app_ = create_service_app(SERVICES[SERVICE].algorithm(), ServiceSettings(workers=1))
    with serve_app(app_) as url:
        done = CliRunner().invoke(app, ["extract", "--warc", str(crawl[0]), "--service",
                                        SERVICE, "--url", url, "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert {r["record_id"]: r["text"] for r in read_rows(out)} == \
        {r["record_id"]: r["text"] for r in warc_rows[0]}


def test_a_service_out_of_reach_stops_the_job_without_writing_rows(
        crawl: tuple[Path, list[Response]], tmp_path: Path) -> None:
    from orchestrator.launcher import free_port

    out = tmp_path / "rows.jsonl"
    done = CliRunner().invoke(app, ["extract", "--warc", str(crawl[0]), "--service", SERVICE,
                                    "--url", f"http://127.0.0.1:{free_port()}",
                                    "--out", str(out), "--workers", "1"])
    assert done.exit_code == 1
    assert "nothing answers" in done.output
    assert not out.exists()
    assert not out.with_name(f"{out.name}.job.json").exists()


def test_a_server_that_is_not_the_service_named_gets_no_rows_written(
        crawl: tuple[Path, list[Response]], tmp_path: Path) -> None:
    from shared.registry import SERVICES
    from shared.service import create_service_app
    from shared.settings import ServiceSettings
    from tests.servers import serve_app

    out = tmp_path / "rows.jsonl"
    other = create_service_app(SERVICES["cetd"].algorithm(), ServiceSettings(workers=1))
    with serve_app(other) as url:
        done = CliRunner().invoke(app, ["extract", "--warc", str(crawl[0]), "--service",
                                        SERVICE, "--url", url, "--out", str(out)])
    assert done.exit_code == 1
    assert "the 'cetd' service answers there" in done.output
    assert not out.exists()


def test_a_ray_address_where_nothing_listens_fails_at_once(
        crawl: tuple[Path, list[Response]], tmp_path: Path) -> None:
    from orchestrator.launcher import free_port

    started = time.monotonic()
    done = CliRunner().invoke(app, ["extract", "--warc", str(crawl[0]), "--service", SERVICE,
                                    "--out", str(tmp_path / "shards"),
                                    "--ray", f"127.0.0.1:{free_port()}"])
    assert done.exit_code == 1
    assert "nothing answers there" in done.output
    assert time.monotonic() - started < 30
    assert not (tmp_path / "shards").exists()


def test_a_folder_of_shards_resumes_after_a_torn_shard(
        crawl: tuple[Path, list[Response]], tmp_path: Path) -> None:
    out = tmp_path / "shards"
    args = ["extract", "--warc", str(crawl[0]), "--service", SERVICE, "--out", str(out),
            "--workers", "1", "--shard-rows", "2"]
    assert CliRunner().invoke(app, args).exit_code == 0
    shards = sorted(out.glob("part-*.jsonl"))
    assert [len(s.read_bytes().splitlines()) for s in shards] == [2, 2, 1]
    last = shards[-1]
    last.write_bytes(last.read_bytes()[:-40])  # the last row torn in the middle
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert sorted(p.name for p in out.glob("part-*.jsonl"))[-1] == "part-00003.jsonl"
    assert sorted(str(r["record_id"]) for r in read_rows(out)) == \
        sorted(p.record_id for p in crawl[1])


def test_transfer_and_content_codings_are_undone(tmp_path: Path) -> None:
    import zlib

    html = b"<html><body><p>" + b"words of the page " * 200 + b"</p></body></html>"
    gzipped = gzip.compress(html)
    chunked = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(gzipped[i:i + 700]), gzipped[i:i + 700])
                       for i in range(0, len(gzipped), 700)) + b"0\r\nX-Trailer: 1\r\n\r\n"
    raw_deflate = zlib.compressobj(wbits=-15)
    deflated = raw_deflate.compress(html) + raw_deflate.flush()
    path = tmp_path / "codings.warc.gz"
    write_warc(path, [
        Response("https://a.example/1", chunked, headers=(
            ("Transfer-Encoding", "chunked"), ("Content-Encoding", "gzip"))),
        Response("https://a.example/2", zlib.compress(html),
                 headers=(("Content-Encoding", "deflate"),)),
        Response("https://a.example/3", deflated, headers=(("Content-Encoding", "deflate"),)),
        Response("https://a.example/4", b"not gzip at all",
                 headers=(("Content-Encoding", "gzip"),)),
        Response("https://a.example/5", b"zz\r\nabc\r\n0\r\n\r\n",
                 headers=(("Transfer-Encoding", "chunked"),)),
        Response("https://a.example/6", gzipped[:len(gzipped) // 2],
                 headers=(("Content-Encoding", "gzip"),)),
    ])
    items = list(read_warc(path))
    found = [i for i in items if isinstance(i, WarcPage)]
    assert [i.body for i in found[:3]] == [html] * 3
    # A body cut short is the part of the page it holds (tests/test_warc_records.py).
    assert (found[3].uri, found[3].truncated) == ("https://a.example/6",
                                                  "the gzip body ends early")
    assert html.startswith(found[3].body)
    odd = [i for i in items if isinstance(i, OddRecord)]
    assert [(i.kind, i.detail.split(":")[0]) for i in odd] == [
        ("malformed", "the gzip body does not decompress"),
        ("malformed", "a chunk size is not hexadecimal")]


def test_the_benchmark_builds_its_warc_and_times_the_middle_of_a_job(
        scrapinghub: Path, cleaneval: Path, tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    import warc as benchmark

    path = tmp_path / "bench.warc.gz"
    benchmark.build_warc(path, ["scrapinghub", "cleaneval"], 30)
    pages = [i for i in read_warc(path) if isinstance(i, WarcPage)]
    assert len(pages) == len({p.record_id for p in pages}) == 30
    assert {(p.uri or "").split("/")[-1] for p in pages[:2]} == {
        sorted(f.stem for f in (scrapinghub / "html").glob("*.html"))[0],
        sorted(f.stem for f in (cleaneval / "html").glob("*.html"))[0]}
    # 100 rows: a slow start (Ray's first batch), then one row every 10 ms.
    times = [5.0] * 8 + [5.0 + 0.01 * i for i in range(1, 93)]
    assert benchmark.steady_rate(times) == pytest.approx(100.0)
    assert benchmark.steady_rate(times[:5]) == 0.0


def test_ctrl_c_abandons_the_pages_in_flight_instead_of_writing_them_as_errors(
        scrapinghub: Path, tmp_path: Path) -> None:
    _, out, _, code = stopped_halfway(scrapinghub, tmp_path, "readability", 2, signal.SIGINT)
    assert code == 130
    assert [r["error"] for r in read_rows(out) if r["error"] is not None] == []
    # Says what happened, and what to do, rather than leaving the progress line alone.
    said = (tmp_path / "stderr.txt").read_text(encoding="utf-8")
    assert "stopped: the rows written so far stay; the same command resumes" in said
    assert "Traceback" not in said


def test_a_whole_last_row_without_its_newline_is_kept_and_a_whole_line_that_is_no_row_refused(
        crawl: tuple[Path, list[Response]], warc_rows: tuple[list[dict[str, object]], str],
        tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    whole = b"".join(orjson.dumps(r) + b"\n" for r in warc_rows[0][:2])
    out.write_bytes(whole[:-1])  # e.g. written back by a script that joined rows with "\n"
    args = ["extract", "--warc", str(crawl[0]), "--service", SERVICE, "--out", str(out)]
    assert CliRunner().invoke(app, args).exit_code == 0
    assert sorted(str(r["record_id"]) for r in read_rows(out)) == \
        sorted(p.record_id for p in crawl[1])
    other = tmp_path / "other.jsonl"
    other.write_bytes(b'{"id": 5, "note": "not an output row"}\n')
    refused = CliRunner().invoke(app, [*args[:-1], str(other)])
    assert refused.exit_code == 2
    assert "line 1" in refused.output
    assert other.read_bytes() == b'{"id": 5, "note": "not an output row"}\n'


def test_an_output_that_is_some_other_file_is_refused_before_anything_is_written(
        crawl: tuple[Path, list[Response]], tmp_path: Path) -> None:
    taken = tmp_path / "notes.py"
    taken.write_text("x = 1\n")
    done = CliRunner().invoke(app, ["extract", "--warc", str(crawl[0]), "--service", SERVICE,
                                    "--out", str(taken)])
    assert done.exit_code == 2
    assert "not .jsonl or .parquet" in done.output
    assert taken.read_text() == "x = 1\n"


def test_a_kill_between_the_parquet_merge_and_its_journal_going_repeats_no_row(
        crawl: tuple[Path, list[Response]], warc_rows: tuple[list[dict[str, object]], str],
        tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    out = tmp_path / "rows.parquet"
    args = ["extract", "--warc", str(crawl[0]), "--service", SERVICE, "--out", str(out)]
    assert CliRunner().invoke(app, args).exit_code == 0
    journal = out.with_name(out.name + ".partial.jsonl")  # as a kill right after the merge
    journal.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in warc_rows[0]))
    assert CliRunner().invoke(app, args).exit_code == 0
    ids = pq.read_table(out, columns=["record_id"]).column("record_id").to_pylist()
    assert sorted(ids) == sorted(p.record_id for p in crawl[1])
    assert not journal.exists()


def test_a_bad_line_inside_the_output_is_refused_not_cut(
        crawl: tuple[Path, list[Response]], tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    out.write_bytes(b'{"record_id": "<urn:a>", "text": "x"}\nnot a row\n'
                    b'{"record_id": "<urn:b>", "text": "y"}\n')
    before = out.read_bytes()
    done = CliRunner().invoke(app, ["extract", "--warc", str(crawl[0]), "--service", SERVICE,
                                    "--out", str(out)])
    assert done.exit_code == 2
    assert "line 2" in done.output
    assert out.read_bytes() == before


def test_answer_page_turns_every_page_failure_into_an_error_reply() -> None:
    from shared.answer import answer_page
    from tests.misbehaving_extractor import ALGORITHM

    assert answer_page(ALGORITHM, b"<p>fine</p>", {"url": "https://a.example/",
                                                   "label": "x"})["blocks"] == [
        {"text": "<p>fine</p>", "is_content": True, "score": None, "path": "https://a.example/",
         "label": "x"}]
    assert answer_page(ALGORITHM, b"<p>refuse</p>", {})["error"].startswith(
        "unprocessable_page")
    assert answer_page(ALGORITHM, b"<p>raise</p>", {})["error"] == \
        "extraction_failed: RuntimeError: a bug in the extractor"
    assert answer_page(ALGORITHM, b"%PDF-1.4", {})["error"].startswith("not_html")
    assert answer_page(ALGORITHM, b"<p>x</p>", {"bogus": "1"})["error"].startswith(
        "invalid_options")


def test_the_response_charset_decodes_the_page(tmp_path: Path) -> None:
    # Undeclared in the page, Polish in ISO-8859-2 reads as windows-1252 (a Latin
    # script with a few accents): only the response's charset tells.
    text = "Zażółć gęślą jaźń: pchnąć w tę łódź jeża lub ośm skrzyń fig."
    body = f"<html><body><p>{text}</p></body></html>".encode("iso8859_2")
    assert text not in decode_html(body)
    path = tmp_path / "latin2.warc"
    path.write_bytes(warc_record(Response("https://a.example/", body,
                                          "text/html; charset=ISO-8859-2").with_id()))
    out = tmp_path / "rows.jsonl"
    done = CliRunner().invoke(app, ["extract", "--warc", str(path), "--service", SERVICE,
                                    "--out", str(out), "--workers", "1"])
    assert done.exit_code == 0, done.output
    (row,) = read_rows(out)
    assert text in str(row["text"])


def test_a_gzip_member_that_inflates_past_the_limit_is_skipped_and_reading_goes_on() -> None:
    """A small file may hold a gzip bomb: its member is inflated to its end without being
    kept, counted as too large, and the next record is read as usual."""
    import io

    from orchestrator.warc import _gzip_members

    page = Response("https://a.example/", b"<html><body><p>kept</p></body></html>").with_id()
    bomb = gzip.compress(b"WARC/1.1\r\n" + b"\0" * 5_000_000)
    stream = io.BytesIO(bomb + gzip.compress(warc_record(page)))
    items = list(_gzip_members(stream, limit=100_000))
    assert len(items) == 2
    assert isinstance(items[0], OddRecord)
    assert items[0].kind == "too_large"
    assert items[1] == warc_record(page)


def test_an_uncompressed_record_past_the_limit_is_skipped_and_reading_goes_on(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An uncompressed WARC has no gzip member to bound a record: its Content-Length
    does, before the block is read."""
    monkeypatch.setattr("orchestrator.warc.MAX_RECORD_BYTES", 100_000)
    small = [Response(f"https://a.example/{i}", b"<html><body><p>kept</p></body></html>")
             .with_id() for i in range(2)]
    big = Response("https://a.example/big", b"<p>" + b"x" * 200_000 + b"</p>").with_id()
    path = tmp_path / "plain.warc"
    path.write_bytes(b"".join(warc_record(r) for r in (small[0], big, small[1])))
    items = list(read_warc(path))
    assert [i.uri for i in items if isinstance(i, WarcPage)] == [r.uri for r in small]
    (odd,) = [i for i in items if isinstance(i, OddRecord)]
    assert (odd.kind, odd.record_id) == ("too_large", big.record_id)


def test_a_body_whose_content_coding_inflates_past_the_limit_is_skipped(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A small record can hold a gzip bomb in its HTTP body: it is inflated up to the
    limit only."""
    monkeypatch.setattr("orchestrator.warc.MAX_RECORD_BYTES", 100_000)
    bomb = Response("https://a.example/bomb", gzip.compress(b"<p>" + b"\0" * 5_000_000),
                    headers=(("Content-Encoding", "gzip"),)).with_id()
    page = Response("https://a.example/", b"<html><body><p>kept</p></body></html>").with_id()
    path = tmp_path / "bomb.warc"
    path.write_bytes(warc_record(bomb) + warc_record(page))
    items = list(read_warc(path))
    assert isinstance(items[0], OddRecord)
    assert (items[0].kind, items[0].record_id) == ("too_large", bomb.record_id)
    assert isinstance(items[1], WarcPage)
    assert items[1].body == page.body


def test_an_id_twice_in_the_input_is_a_duplicate_and_one_from_an_earlier_run_already_written(
        tmp_path: Path) -> None:
    from rich.console import Console

    from orchestrator.warc_job import Tally, WarcJob, pending_pages, summary_table

    page = Response("https://a.example/", b"<html><body><p>twice</p></body></html>").with_id()
    other = Response("https://a.example/other", b"<html><body><p>once</p></body></html>"
                     ).with_id()
    path = tmp_path / "twice.warc"
    path.write_bytes(warc_record(page) + warc_record(other) + warc_record(page))
    job = WarcJob([path], SERVICE, tmp_path / "rows.jsonl")
    fresh = Tally()
    assert [p.record_id for p in pending_pages(job, set(), fresh)] == \
        [page.record_id, other.record_id]
    assert fresh.counts["duplicate_id"] == 1
    assert fresh.counts["already written"] == 0
    assert page.record_id in fresh.examples["duplicate_id"][0]
    console = Console(width=200, record=True)
    console.print(summary_table(job, fresh, 1.0))
    counts = {line.split("│")[1].strip(): line.split("│")[2].strip()
              for line in console.export_text().splitlines() if line.count("│") >= 3}
    assert (counts["duplicate id"], counts["already written"]) == ("1", "0")
    resumed = Tally()
    assert [p.record_id for p in pending_pages(job, {page.record_id}, resumed)] == \
        [other.record_id]
    assert resumed.counts["already written"] == 1
    assert resumed.counts["duplicate_id"] == 1


@pytest.mark.parametrize("content", ["garbage", "other table"])
def test_a_parquet_output_that_holds_no_rows_is_refused_in_one_line(
        crawl: tuple[Path, list[Response]], tmp_path: Path, content: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "rows.parquet"
    if content == "garbage":
        out.write_bytes(b"not a parquet file\n")
    else:
        pq.write_table(pa.table({"a": [1]}), out)
    before = out.read_bytes()
    done = CliRunner().invoke(app, ["extract", "--warc", str(crawl[0]), "--service", SERVICE,
                                    "--out", str(out)])
    assert done.exit_code == 2
    message = " ".join(done.output.replace("\u2502", " ").split())  # the box's borders out
    assert "is not a Parquet file of output rows" in message
    assert "__fragment_index" not in message
    assert out.read_bytes() == before


def test_an_output_under_a_file_is_refused_saying_so(
        crawl: tuple[Path, list[Response]], tmp_path: Path) -> None:
    (tmp_path / "notes.py").write_text("x = 1\n")
    done = CliRunner().invoke(app, ["extract", "--warc", str(crawl[0]), "--service", SERVICE,
                                    "--out", str(tmp_path / "notes.py" / "rows.jsonl")])
    assert done.exit_code == 2
    message = " ".join(done.output.replace("\u2502", " ").split())
    assert "is a file, not a folder" in message
    assert "File exists" not in message


@pytest.mark.parametrize("name", ["rows.jsonl", "rows.parquet", "shards"])
def test_a_crawl_without_html_pages_writes_an_output_of_no_rows(tmp_path: Path,
                                                                name: str) -> None:
    """The next step of a pipeline reads OUT whatever the crawl held: a crawl of PDFs
    leaves it with no rows (a Parquet file with the rows' schema), and the report says
    why. A re-run finds it as its own."""
    import pyarrow.parquet as pq

    from orchestrator.warc_job import row_schema

    path = tmp_path / "documents.warc.gz"
    write_warc(path, [Response("https://a.example/report.pdf", PDF, "application/pdf")])
    out = tmp_path / "out" / name
    args = ["extract", "--warc", str(path), "--service", SERVICE, "--out", str(out),
            "--blocks"]
    for _ in range(2):
        done = CliRunner().invoke(app, args, terminal_width=300)
        assert done.exit_code == 0, done.output
        assert f"no HTML pages, so {name} holds no rows" in " ".join(done.output.split())
        if name == "shards":
            assert sorted(p.name for p in out.iterdir()) == ["job.json"]
        elif name == "rows.jsonl":
            assert out.read_bytes() == b""
        else:
            assert pq.read_table(out).num_rows == 0
            assert pq.read_schema(out).equals(row_schema(True))


@pytest.mark.parametrize("name", ["rows.parquet", "shards"])
def test_a_glob_that_matches_the_output_leaves_the_outputs_own_files_out(
        crawl: tuple[Path, list[Response]], tmp_path: Path, name: str) -> None:
    """`--warc 'crawl/*'` with OUT in crawl/: a re-run's glob matches OUT and what the
    job keeps beside it (its settings, a Parquet file's journal, a folder of shards),
    which are no WARCs: they are left out, and said so in one line."""
    folder = tmp_path / "crawl"
    folder.mkdir()
    shutil.copy(crawl[0], folder / "crawl.warc.gz")
    out = folder / name
    args = ["extract", "--warc", str(folder / "*"), "--service", SERVICE, "--out", str(out),
            "--workers", "1", "--shard-rows", "2"]
    first = CliRunner().invoke(app, args, terminal_width=300)
    assert first.exit_code == 0, first.output
    if name == "rows.parquet":  # as a job killed before its journal joined the file
        out.with_name(out.name + ".partial.jsonl").write_bytes(b"")
    again = CliRunner().invoke(app, args, terminal_width=300)
    assert again.exit_code == 0, again.output
    assert "left out of the input, as the output's own files: " in again.output
    counts = {line.split("│")[1].strip(): line.split("│")[2].strip()
              for line in again.output.splitlines() if line.count("│") >= 3}
    assert (counts["already written"], counts["malformed"]) == ("5", "1")  # the crawl's own
    assert "over 1 WARC file(s)" in again.output
    only_out = CliRunner().invoke(app, [*args[:2], str(out), *args[3:]])
    assert only_out.exit_code == 2
    assert "no WARC file is left" in only_out.output
