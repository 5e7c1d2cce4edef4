"""Semantic search, backend-neutral: which texts an item embeds, and how vectors are scored.

The rules are ``InMemoryStore``'s so results agree: the store's ``index["fields"]`` (or a
put's ``index=[...]``) name JSON paths; a path that yields several texts (``"a[*].b"``)
gives one vector per text, named ``path.i``; an item's score is the best cosine similarity
among its vectors (zero for a zero vector); items without vectors rank after every scored
item.

Scoring is exact over the candidates that pass the filter: in the database where it can
(PostgreSQL, with pgvector's ``<=>`` where installed, see
:mod:`.postgres.pgvector`, else with arithmetic on arrays) and with :func:`cosine` where it
cannot. The one approximate path is PostgreSQL's opt-in HNSW index.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.embeddings import Embeddings
from langgraph.store.base import IndexConfig, ensure_embeddings, get_text_at_path, tokenize_path

from ..errors import InvalidConfigError

Vector = list[float]


@dataclass(frozen=True)
class IndexSettings:
    """A checked ``index=`` option."""

    dims: int
    embeddings: Embeddings
    fields: tuple[tuple[str, list[str] | str], ...]
    config: IndexConfig

    @classmethod
    def build(cls, index: Any) -> IndexSettings | None:
        if index is None:
            return None
        if not isinstance(index, Mapping):
            raise InvalidConfigError("index must be a dict like {'dims': 1536, 'embed': ...}")
        dims = index.get("dims")
        if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
            raise InvalidConfigError(f"index['dims'] must be a positive integer, got {dims!r}")
        if index.get("embed") is None:
            raise InvalidConfigError("index['embed'] is required: an Embeddings or a function")
        paths = list(index.get("fields") or ["$"])
        if not all(isinstance(p, str) for p in paths):
            raise InvalidConfigError(f"index['fields'] must be a list of strings, got {paths!r}")
        config: IndexConfig = {"dims": dims, "embed": index["embed"], "fields": paths}
        return cls(dims, ensure_embeddings(index["embed"]), _tokenize(paths), config)

    def texts(self, value: Mapping[str, Any], index: Any) -> list[tuple[str, str]]:
        """(vector name, text) pairs to embed for a put with ``PutOp.index = index``."""
        if index is False:
            return []
        if index is None:
            fields = self.fields
        elif isinstance(index, (list, tuple)) and all(isinstance(p, str) for p in index):
            fields = _tokenize(index)
        else:
            raise InvalidConfigError(
                f"index must be None, False or a list of field paths, got {index!r}"
            )
        out: list[tuple[str, str]] = []
        for path, tokens in fields:
            texts = get_text_at_path(value, tokens)
            if len(texts) == 1:
                out.append((path, texts[0]))
            else:
                out.extend((f"{path}.{i}", text) for i, text in enumerate(texts))
        return out

    def check(self, vectors: Sequence[Sequence[float]], expected: int) -> list[Vector]:
        """The embedder's answer as float lists, after checking its count and dimensions."""
        if len(vectors) != expected:
            raise InvalidConfigError(
                f"the embedding function returned {len(vectors)} vectors for {expected} texts"
            )
        out = [[float(x) for x in v] for v in vectors]
        for v in out:
            if len(v) != self.dims:
                raise InvalidConfigError(
                    f"the embedding function returned a vector of {len(v)} dimensions; "
                    f"index['dims'] is {self.dims}"
                )
            if not all(math.isfinite(x) for x in v):
                raise InvalidConfigError("the embedding function returned NaN or infinity")
        return out

    def embed(self, texts: list[str], query: bool) -> list[Vector]:
        if query:
            return self.check([self.embeddings.embed_query(t) for t in texts], len(texts))
        return self.check(self.embeddings.embed_documents(texts), len(texts))

    async def aembed(self, texts: list[str], query: bool) -> list[Vector]:
        if query:
            found = await asyncio.gather(*(self.embeddings.aembed_query(t) for t in texts))
            return self.check(found, len(texts))
        return self.check(await self.embeddings.aembed_documents(texts), len(texts))


def _tokenize(paths: Sequence[str]) -> tuple[tuple[str, list[str] | str], ...]:
    return tuple((p, p if p == "$" else tokenize_path(p)) for p in paths)


def norm(vector: Sequence[float]) -> float:
    """Euclidean length, stored beside each vector so scoring divides only once."""
    return math.sqrt(math.fsum(x * x for x in vector))


def cosine(
    query: Sequence[float], query_norm: float, vector: Sequence[float], length: float
) -> float:
    """Cosine similarity, zero when either vector is zero (as ``InMemoryStore`` scores it)."""
    if query_norm == 0 or length == 0:
        return 0.0
    return math.fsum(a * b for a, b in zip(query, vector, strict=True)) / (query_norm * length)
