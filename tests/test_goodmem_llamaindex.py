"""The vector stage's score convention through the real goodmem-llamaindex 0.2.3 retriever (issue 16, item 5).

``GoodMemRetriever`` negates a vector-stage ``relevanceScore`` into ``node.score`` (it is built for live
GoodMem servers, which send a negative inner product: ``-cos`` for normalised embeddings). Two memproxy
processes on the same node and data: one with the default settings (``--goodmem-vector-score live``) and one
sending cosines (``--goodmem-vector-score cosine``). Under the default the retriever's scores are cosines,
best first, a ``SimilarityPostprocessor(similarity_cutoff=0.3)`` keeps the relevant documents and
``QueryFusionRetriever`` ranks the best one first; under ``cosine`` the same calls keep nothing and rank the
worst document first, which is why ``live`` is the default.

Nothing here may reach the network: llama-index-core fetches NLTK data and tiktoken encodings lazily (for text
splitters and token counting, which these tests do not use) and falls back to OpenAI when no LLM is given, so
the fusion retriever gets an LLM that fails if called, and a socket audit hook fails any connection or name
lookup beyond the loopback while the tests run.
"""

from __future__ import annotations

import ipaddress
import sys
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import llama_index.core
import pytest
from goodmem import Goodmem
from llama_index.core.llms import MockLLM
from llama_index.core.postprocessor import SimilarityPostprocessor
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.core.retrievers.fusion_retriever import FUSION_MODES
from llama_index.core.schema import NodeWithScore
from llama_index.core.utils import globals_helper
from llama_index.tools.goodmem import GoodMemNodeWithScore, GoodMemRetriever

from tests.conftest import ProxyProcess
from tests.goodmem_helpers import root_api_key

pytestmark = pytest.mark.node

QUERY = "How do I change the wifi password on my router?"
# Best first by construction: the first answers the query, the second shares its topic, the last two do not
# (all-MiniLM cosines about 0.81, 0.65, 0.08 and -0.10: an unrelated text may score below zero).
TEXTS = {
    "answer": "To change the wifi password, open the router's admin page and edit the wireless security key.",
    "topic": "The router's wireless settings page also lets you rename your wifi network.",
    "bread": "The bread recipe needs two cups of flour, dry yeast and a pinch of salt.",
    "penguins": "Emperor penguins huddle together to survive the long Antarctic winter.",
}
LABEL = {text: label for label, text in TEXTS.items()}
RELEVANT = ["answer", "topic"]
IRRELEVANT = {"bread", "penguins"}
CUTOFF = 0.3
FUSION = [FUSION_MODES.SIMPLE, FUSION_MODES.RELATIVE_SCORE, FUSION_MODES.DIST_BASED_SCORE]

# --- no network ---------------------------------------------------------------------------------------------

_outbound: list[str] | None = None  # collecting while a test runs; None between tests


def _loopback(host: Any) -> bool:
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if host in ("localhost", None):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _outbound is None:
        return
    if event == "socket.getaddrinfo" and not _loopback(args[0]):
        _outbound.append(f"lookup {args[0]}")
    elif event == "socket.connect" and isinstance(args[1], tuple) and not _loopback(args[1][0]):
        _outbound.append(f"connect {args[1]}")
    else:
        return
    raise OSError(f"test_goodmem_llamaindex: network access outside the loopback: {_outbound[-1]}")


_hooked = False


def _lazy_data() -> tuple[Any, ...]:
    """What llama-index loads on first use and downloads when missing: tiktoken's encoding (the global
    tokenizer) and NLTK's stopwords and punkt tokenizer."""
    return (llama_index.core.global_tokenizer, globals_helper._stopwords, globals_helper._punkt_tokenizer)


@pytest.fixture(autouse=True)
def no_network() -> Iterator[None]:
    """Fails a test that looked up or connected to anything but the loopback (an audit hook cannot be removed,
    so it is installed once and does nothing between these tests), or loaded llama-index's NLTK data or
    tokenizer (the components that download them lazily)."""
    global _outbound, _hooked
    if not _hooked:
        sys.addaudithook(_audit)
        _hooked = True
    _outbound = []
    # What an earlier test loaded (none does today) is not this test's doing; only a change counts.
    before = _lazy_data()
    try:
        yield
        assert _outbound == []
        assert _lazy_data() == before
    finally:
        _outbound = None


class UncalledLLM(MockLLM):
    """``QueryFusionRetriever`` asks its LLM for extra queries only when ``num_queries > 1``; without one it
    resolves llama-index's default (OpenAI, a network model). This one fails the test if it is called."""

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("QueryFusionRetriever called its LLM")

    async def acomplete(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("QueryFusionRetriever called its LLM")


# --- two memproxy processes, one space ----------------------------------------------------------------------


@dataclass
class World:
    key: str
    space: str
    live_url: str  # default settings: --goodmem-vector-score live
    cosine_url: str  # --goodmem-vector-score cosine

    def retriever(self, url: str) -> GoodMemRetriever:
        return GoodMemRetriever(space_ids=[self.space], top_k=len(TEXTS), base_url=url, api_key=self.key)


@pytest.fixture(scope="module")
def world(opensearch_url: str) -> Iterator[World]:
    live = ProxyProcess(opensearch_url)
    cosine: ProxyProcess | None = None
    try:
        cosine = ProxyProcess(opensearch_url, ["--goodmem-vector-score", "cosine"])
        key = root_api_key(live.url, opensearch_url)
        with Goodmem(base_url=live.url, api_key=key) as gm:
            embedder = gm.embedders.list()[0].embedder_id
            space = gm.spaces.create(
                name=f"llamaindex-{uuid.uuid4().hex[:8]}", space_embedders=[{"embedder_id": embedder}]
            ).space_id
            try:
                for text in TEXTS.values():
                    gm.memories.create(space_id=space, original_content=text)
                yield World(key, space, live.url, cosine.url)
            finally:
                gm.spaces.delete(id=space)
    finally:
        if cosine is not None:
            cosine.stop()
        live.stop()


def labels(nodes: Sequence[NodeWithScore]) -> list[str]:
    return [LABEL[n.node.get_content()] for n in nodes]


def vector_nodes(nodes: list[NodeWithScore]) -> list[GoodMemNodeWithScore]:
    assert all(isinstance(n, GoodMemNodeWithScore) for n in nodes)
    good = [n for n in nodes if isinstance(n, GoodMemNodeWithScore)]
    assert all(n.score_kind == "negative_inner_product" and not n.partial for n in good)
    return good


def fuse(retriever: GoodMemRetriever, mode: FUSION_MODES) -> list[NodeWithScore]:
    """Fusion as a new user would set it up without an LLM: one query (the user's), the default async run."""
    fusion = QueryFusionRetriever(
        [retriever], llm=UncalledLLM(max_tokens=None), mode=mode, num_queries=1, similarity_top_k=len(TEXTS)
    )
    return fusion.retrieve(QUERY)


# --- live (the default) -------------------------------------------------------------------------------------


def test_live_default_scores_best_first_and_the_cutoff_keeps_the_relevant(world: World) -> None:
    nodes = vector_nodes(world.retriever(world.live_url).retrieve(QUERY))
    order = labels(nodes)
    assert order[:2] == RELEVANT and set(order[2:]) == IRRELEVANT, order
    scores = [n.score for n in nodes if n.score is not None]
    assert len(scores) == len(nodes)
    # node.score = -relevanceScore = the cosine: higher is better, in the order the server streamed.
    assert scores == sorted(scores, reverse=True) and min(scores[:2]) > CUTOFF > max(scores[2:])
    assert [n.raw_score for n in nodes] == [-s for s in scores]
    kept = SimilarityPostprocessor(similarity_cutoff=CUTOFF).postprocess_nodes(list(nodes))
    assert labels(kept) == RELEVANT


async def test_live_default_async_retrieve_matches_sync(world: World) -> None:
    retriever = world.retriever(world.live_url)
    sync = retriever.retrieve(QUERY)
    async_ = await retriever.aretrieve(QUERY)
    assert [(n.node.node_id, n.score) for n in async_] == [(n.node.node_id, n.score) for n in sync]


@pytest.mark.parametrize("mode", FUSION, ids=lambda m: m.value)
def test_live_default_fusion_ranks_the_best_document_first(world: World, mode: FUSION_MODES) -> None:
    plain = labels(world.retriever(world.live_url).retrieve(QUERY))
    fused = fuse(world.retriever(world.live_url), mode)
    # One retriever and one query: every mode keeps the retriever's own (best-first) order.
    assert labels(fused) == plain and plain[:2] == RELEVANT


# --- cosine (the setting): the integration's scores come out inverted ---------------------------------------


def test_cosine_setting_inverts_the_retriever_scores(world: World) -> None:
    live = vector_nodes(world.retriever(world.live_url).retrieve(QUERY))
    cosine = vector_nodes(world.retriever(world.cosine_url).retrieve(QUERY))
    # The server's order is the same (best first); only the sign of relevanceScore differs.
    assert labels(cosine) == labels(live)
    assert [n.raw_score for n in cosine] == [-n.raw_score for n in live]
    scores = [n.score for n in cosine if n.score is not None]
    assert scores[0] < -CUTOFF and scores == sorted(scores)  # the best hit now scores lowest
    assert SimilarityPostprocessor(similarity_cutoff=CUTOFF).postprocess_nodes(list(cosine)) == []


@pytest.mark.parametrize("mode", FUSION, ids=lambda m: m.value)
def test_cosine_setting_makes_fusion_rank_the_worst_document_first(world: World, mode: FUSION_MODES) -> None:
    served = labels(world.retriever(world.cosine_url).retrieve(QUERY))
    fused = labels(fuse(world.retriever(world.cosine_url), mode))
    assert fused == served[::-1] and fused[0] in IRRELEVANT and fused[-2:] == RELEVANT[::-1]
