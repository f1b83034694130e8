"""The sandbox backend: BM25 (bm25s) over a suite's local corpus, behind the env's clock.

The index is built once per corpus and cached on disk next to it (or under the cache dir when the
corpus directory is read-only), keyed by the corpus file's content hash. Documents dated after the
``before`` date are masked out of every search and cannot be opened: for the agent they do not
exist yet. Likewise, given a ``world``, the pages of other worlds (a sandbox built with ``worlds``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import threading
from pathlib import Path
from urllib.parse import urlsplit

from agentrl.cachedir import cache_root
from agentrl.env.backends.base import Hit, Page, ToolFailure
from agentrl.env.suite import parse_date, read_corpus

__all__ = ["SandboxBackend", "corpus_kinds", "normalize_url"]

_INDEX_VERSION = "1"


def normalize_url(url: str) -> str:
    """A URL in the form the corpus is keyed by: scheme and host lower-cased, no fragment or
    trailing slash. Never raises: a string ``urlsplit`` refuses (``https://[host``, an unclosed IPv6
    bracket, which a sampled URL can be) comes back stripped, a key no corpus page has."""
    url = url.strip().strip("<>\"'")
    try:
        parts = urlsplit(url if "://" in url else "https://" + url)
    except ValueError:
        return url
    path = parts.path.rstrip("/") or ""
    query = f"?{parts.query}" if parts.query else ""
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{path}{query}"


def _snippet(text: str, title: str, n: int = 240) -> str:
    text = " ".join(text.split())
    if title and text.startswith(title):  # pages repeat their title as a heading
        text = text[len(title) :].lstrip()
    return text if len(text) <= n else text[: n - 1].rsplit(" ", 1)[0] + " …"


class SandboxBackend:
    """Search and fetch over a local corpus (``corpus.jsonl``); thread-safe for reads."""

    def __init__(self, corpus_path: Path):
        import numpy as np

        self.corpus_path = Path(corpus_path)
        data = self.corpus_path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()[:16]
        docs = read_corpus(self.corpus_path)
        self._lock = threading.Lock()
        index_dir = self._index_dir(digest)
        texts_file = index_dir / "texts.json"
        if texts_file.exists():
            stored = json.loads(texts_file.read_text(encoding="utf-8"))
            titles, texts = stored["titles"], stored["texts"]
        else:
            titles, texts = self._extract(docs)
        self.urls = [normalize_url(d.url) for d in docs]
        self.raw_urls = [d.url for d in docs]
        self.titles = titles
        self.texts = texts
        self.kinds = [d.kind for d in docs]
        self.content_types = [d.content_type for d in docs]
        self.dates = [d.date for d in docs]
        self._ordinals = np.array([parse_date(d.date).toordinal() for d in docs], dtype=np.int64)  # type: ignore[union-attr]
        self._by_url = {u: i for i, u in enumerate(self.urls)}
        self._world_code = {
            w: i for i, w in enumerate(sorted({d.world for d in docs if d.world is not None}))
        }
        self._worlds = np.array([self._world_code.get(d.world, -1) for d in docs], dtype=np.int64)
        self._retriever = self._load_or_build(index_dir, titles, texts, texts_file)

    # ---- index ---------------------------------------------------------------------------
    def _index_dir(self, digest: str) -> Path:
        local = self.corpus_path.parent / ".index" / f"bm25-v{_INDEX_VERSION}-{digest}"
        try:
            local.mkdir(parents=True, exist_ok=True)
            probe = local / ".w"
            probe.write_text("")
            probe.unlink()
            return local
        except OSError:
            fallback = cache_root() / "index" / f"bm25-v{_INDEX_VERSION}-{digest}"
            fallback.mkdir(parents=True, exist_ok=True)
            return fallback

    @staticmethod
    def _extract(docs: list) -> tuple[list[str], list[str]]:
        from agentrl.env.backends.extract import html_to_text

        titles, texts = [], []
        for d in docs:
            if d.content_type == "text/html":
                title, text = html_to_text(d.body)
                titles.append(d.title or title)
                texts.append(text)
            else:
                titles.append(d.title)
                texts.append(d.body)
        return titles, texts

    @staticmethod
    def _load_or_build(index_dir: Path, titles: list[str], texts: list[str], texts_file: Path):
        import bm25s

        if (index_dir / "params.index.json").exists():
            try:
                return bm25s.BM25.load(str(index_dir), show_progress=False, verbosity=0)
            except Exception:  # a torn cache is rebuilt, never trusted
                pass
        tokens = bm25s.tokenize(
            [f"{t}\n{x}" for t, x in zip(titles, texts, strict=True)], stopwords="en", show_progress=False
        )
        retriever = bm25s.BM25()
        retriever.index(tokens, show_progress=False)
        tmp = index_dir.with_name(index_dir.name + f".tmp{os.getpid()}-{threading.get_ident()}")
        try:  # write to a temp dir and rename, so a concurrent reader never sees half an index
            tmp.mkdir(parents=True, exist_ok=True)
            retriever.save(str(tmp), show_progress=False)
            (tmp / "texts.json").write_text(json.dumps({"titles": titles, "texts": texts}), encoding="utf-8")
            for f in tmp.iterdir():
                f.replace(index_dir / f.name)
            tmp.rmdir()
        except OSError:
            pass
        return retriever

    # ---- tools ---------------------------------------------------------------------------
    def _visible(self, before: dt.date | None, world: str | None):  # type: ignore[no-untyped-def]
        """1/0 per document: dated on or before ``before`` and of ``world`` (or of none); None when
        every document is."""
        import numpy as np

        mask = None
        if before is not None:
            mask = self._ordinals <= before.toordinal()
        if world is not None:
            code = self._world_code.get(world, -2)  # a world the corpus does not have: none of its pages
            seen = (self._worlds == code) | (self._worlds == -1)
            mask = seen if mask is None else mask & seen
        return None if mask is None else mask.astype(np.float32)

    def search(
        self, query: str, k: int, *, before: dt.date | None = None, world: str | None = None
    ) -> list[Hit]:
        """The top ``k`` documents for ``query`` among those dated on or before ``before`` (and of
        ``world``, or of none)."""
        import bm25s

        tokens = bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)
        if not tokens or not tokens[0]:
            return []
        mask = self._visible(before, world)
        n = min(k, len(self.urls))
        with self._lock:  # bm25s keeps per-call state on the retriever
            docs, scores = self._retriever.retrieve(
                tokens, k=n, show_progress=False, weight_mask=mask, n_threads=0
            )
        hits = []
        for i, s in zip(docs[0].tolist(), scores[0].tolist(), strict=True):
            if s <= 0 or (mask is not None and mask[i] == 0):
                continue
            hits.append(
                Hit(
                    url=self.raw_urls[i],
                    title=self.titles[i],
                    snippet=_snippet(self.texts[i], self.titles[i]),
                    date=self.dates[i],
                )
            )
        return hits

    def fetch(self, url: str, *, before: dt.date | None = None, world: str | None = None) -> Page:
        """The page at ``url``; a page dated after ``before``, or of a world other than ``world``, is
        as absent as an unknown URL."""
        i = self._by_url.get(normalize_url(url))
        if i is None or (before is not None and self._ordinals[i] > before.toordinal()):
            raise ToolFailure(f"404 Not Found: {url}")
        if world is not None and self._worlds[i] not in (-1, self._world_code.get(world, -2)):
            raise ToolFailure(f"404 Not Found: {url}")
        return Page(
            url=self.raw_urls[i],
            title=self.titles[i],
            text=self.texts[i],
            date=self.dates[i],
            content_type=self.content_types[i],
        )

    def __len__(self) -> int:
        return len(self.urls)


_BACKENDS: dict[Path, SandboxBackend] = {}
_BACKENDS_LOCK = threading.Lock()


def sandbox_backend(corpus_path: Path) -> SandboxBackend:
    """One shared backend per corpus file per process (the index is loaded once)."""
    key = Path(corpus_path).resolve()
    with _BACKENDS_LOCK:
        if key not in _BACKENDS:
            _BACKENDS[key] = SandboxBackend(key)
        return _BACKENDS[key]


def corpus_kinds(corpus_path: Path) -> dict[str, str]:
    """Normalised URL (``normalize_url``) → the ``kind`` of every page of a corpus."""
    return {normalize_url(d.url): d.kind for d in read_corpus(corpus_path)}
