"""Every member's answer on every labelled page, computed once and kept on disk.

Training the combiner and choosing its members by cost need each member's output on
every page of every dataset; running ten extractors over all pages takes many CPU
minutes, so the answers (text, blocks, CPU milliseconds) are computed in a process
pool, in this process's way of reaching members (in-process, default options), and
stored per dataset and member in the user's cache folder (CACHE_DIR). A stored file is reused
while the member's version, its code and model files (shared.registry.code_digest)
and the dataset's page ids and HTML bytes are unchanged: a retrained fusion model or a change to the
blocks every peer is labelled on makes new answers even though the version strings
stay the package's and the libraries'.

Training only: the service never reads this cache.
"""

from __future__ import annotations

import gzip
import hashlib
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from services.ensemble.members import MemberAnswer, ask_in_process
from shared.contract import Block
from shared.datasets import REPO_ROOT
from shared.decoding import NotHTMLError, decode_html
from shared.modelfile import configured_model, write_atomically
from shared.pairing import PairedFolders
from shared.registry import SERVICES, code_digest
from shared.training import paired_pages


def user_cache_dir() -> Path:
    """boilerbench's folder of the user's cache: BOILERBENCH_CACHE_DIR, else
    $XDG_CACHE_HOME/boilerbench (an absolute one: the XDG spec ignores the others), else
    ~/.cache/boilerbench. Not the repository's: an installed package's folder may be
    read-only or shared, and is no place for hundreds of megabytes of answers."""
    own = os.environ.get("BOILERBENCH_CACHE_DIR")
    if own:
        return Path(own).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "boilerbench"


CACHE_DIR = user_cache_dir() / "ensemble-members"


def _encode(answer: MemberAnswer) -> dict[str, Any]:
    blocks = None if answer.blocks is None else [
        [b.text, b.is_content, b.score, b.path, b.label] for b in answer.blocks]
    return {"text": answer.text, "blocks": blocks, "cpu_ms": round(answer.cpu_ms, 3),
            "wall_ms": round(answer.wall_ms, 3), "error": answer.error}


def _decode(member: str, data: dict[str, Any]) -> MemberAnswer:
    blocks = None if data["blocks"] is None else [
        Block(text=t, is_content=c, score=s, path=p, label=lab)
        for t, c, s, p, lab in data["blocks"]]
    return MemberAnswer(member, data["text"], blocks, data["cpu_ms"], data["error"],
                        data["wall_ms"])


def _member_version(member: str) -> str:
    try:
        return SERVICES[member].algorithm().version
    except Exception as exc:  # not installed: cached as failing everywhere
        return f"unavailable ({type(exc).__name__})"


def _page_answers(job: tuple[Path, tuple[str, ...]]) -> dict[str, dict[str, Any]]:
    html_file, members = job
    try:
        html = decode_html(html_file.read_bytes())
    except NotHTMLError:
        return {}
    return {m: _encode(ask_in_process(m, html, None)) for m in members}


def _cache_file(dataset: Path, member: str) -> Path:
    return CACHE_DIR / dataset.name / f"{member}.json.gz"


def _key(pages: str, member: str) -> str:
    """A member's cached answers are good for these pages (_pages_digest) and code, and
    for the model file it loads in place of its shipped one (BOILERBENCH_<NAME>_MODEL),
    which code_digest does not see."""
    member_id = f"{_member_version(member)}\n{code_digest(member, REPO_ROOT)}"
    configured = configured_model(member)
    if configured is not None:
        try:
            member_id += f"\n{hashlib.sha256(configured.read_bytes()).hexdigest()}"
        except OSError as exc:  # the member fails on every page: keyed as such
            member_id += f"\nunreadable model ({exc})"
    return hashlib.sha256(f"{member_id}\n{pages}".encode()).hexdigest()


def _pages_digest(folders: PairedFolders, ids: Sequence[str]) -> str:
    """The page ids and the bytes of the HTML files they read, hashed: a page edited
    under its old id must be asked again, not answered from the cache."""
    digest = hashlib.sha256()
    for page_id in ids:
        digest.update(f"{page_id}\n".encode())
        digest.update(hashlib.sha256(folders.html_file(page_id).read_bytes()).digest())
    return digest.hexdigest()


def _read(path: Path) -> dict[str, Any] | None:
    """A stored file's contents, or None (computed anew) when it is missing, cut short
    (EOFError: a write that was interrupted) or not one of these files."""
    try:
        data = orjson.loads(gzip.decompress(path.read_bytes()))
    except (OSError, EOFError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("pages"), dict):
        return None
    return data


def member_answers(datasets: Sequence[Path], members: Sequence[str], workers: int = 2,
                   log: Callable[[str], None] = lambda _: None, limit: int | None = None
                   ) -> dict[tuple[str, str], dict[str, MemberAnswer]]:
    """(dataset name, page id) -> member -> answer, from the cache or computed (and
    then stored) for the members whose cached file is missing or stale. Pages are
    paired as training pairs them (shared.training.paired_pages), in silence: the
    training that asks logs the pairing's warnings. With `limit`, only the first
    `limit` ids of each dataset: a stored file of every page serves them, else they
    alone are computed and stored (in place of a stale file only)."""
    result: dict[tuple[str, str], dict[str, MemberAnswer]] = {}
    for dataset in datasets:
        stale = []
        stored: dict[str, dict[str, Any]] = {}
        folders = paired_pages(dataset)
        ids = folders.ids[:limit]
        every_page = _pages_digest(folders, folders.ids)
        pages_digest = every_page if ids == folders.ids else _pages_digest(folders, ids)
        for member in members:
            data = _read(_cache_file(dataset, member))
            if data is not None and data.get("key") in {_key(every_page, member),
                                                        _key(pages_digest, member)}:
                stored[member] = {i: data["pages"][i] for i in ids if i in data["pages"]}
            else:
                stale.append(member)
        if stale:
            log(f"{dataset.name}: computing {', '.join(stale)} on {len(ids)} pages")
            jobs = [(folders.html_file(page_id), tuple(stale)) for page_id in ids]
            # spawn: a forked child would inherit a started JVM (Boilerpipe) and hang
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")
                                     ) as pool:
                computed = list(pool.map(_page_answers, jobs, chunksize=4))
            for member in stale:
                pages = {page_id: answers[member]
                         for page_id, answers in zip(ids, computed, strict=True)
                         if answers}
                write_atomically(_cache_file(dataset, member), gzip.compress(orjson.dumps(
                    {"key": _key(pages_digest, member), "pages": pages})))
                stored[member] = pages
        for member, pages in stored.items():
            for page_id, data in pages.items():
                result.setdefault((dataset.name, page_id), {})[member] = _decode(member, data)
    return result
