"""The local cross-encoder reranker: loading, scoring parity with transformers, truncation, batching.

The model is a tiny randomly initialised ``BertForSequenceClassification`` (one label) written to a temporary
folder at test time, with the tokenizer files of the bundled all-MiniLM-L6-v2. No OpenSearch, no downloads.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from proxy.embedding import (
    EmbedderOverloaded,
    EngineOptions,
    ModelLoadError,
    default_model_path,
)
from proxy.embedding.errors import CallerShareFull
from proxy.embedding.fairness import current_caller, set_caller
from proxy.embedding.rerank import LocalReranker

MAX_POSITIONS = 64
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")

QUERY = "what does the user drink in the morning"
DOCS = [
    "the user prefers tea in the morning",
    "coffee after lunch, never before",
    "a note about the weather in lisbon",
    "",
    "tea",
    "the user " + "really " * 12 + "likes green tea with honey",
]


def _write_cross_encoder(folder: Path) -> Path:
    from transformers import BertConfig, BertForSequenceClassification

    source = Path(default_model_path())
    folder.mkdir(parents=True, exist_ok=True)
    for name in _TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy(source / name, folder / name)
    torch.manual_seed(7)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=48,
        max_position_embeddings=MAX_POSITIONS,
        initializer_range=0.5,  # a wide random init, so scores spread over (0, 1) and the order checks bite
    )
    config.num_labels = 1
    model = BertForSequenceClassification(config).eval()
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_cross_encoder(tmp_path_factory.mktemp("reranker") / "tiny-cross-encoder")


OPTIONS = EngineOptions(device="cpu", dtype="float32", threads=1, warmup=False)


@pytest_asyncio.fixture(loop_scope="session")
async def reranker(model_dir: Path) -> AsyncIterator[LocalReranker]:
    loaded = LocalReranker.load(str(model_dir), OPTIONS, reranker_id="tiny")
    async with loaded:
        yield loaded


def _oracle(model_dir: Path, query: str, docs: list[str]) -> list[float]:
    """Scores computed directly with transformers, one pair at a time (no padding involved)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(
        str(model_dir), dtype=torch.float32, attn_implementation="eager", local_files_only=True
    ).eval()
    scores = []
    with torch.inference_mode():
        for doc in docs:
            # Lists, as sentence-transformers' CrossEncoder calls it: a single ``text_pair=""`` would be
            # taken for "no pair" and lose the closing [SEP].
            encoded = tokenizer(
                [query], [doc], truncation=True, max_length=MAX_POSITIONS, return_tensors="pt"
            )
            scores.append(float(torch.sigmoid(model(**encoded).logits.float())[0, 0]))
    return scores


async def test_loads_and_describes_itself(reranker: LocalReranker, model_dir: Path) -> None:
    info = reranker.info()
    assert info.id == "tiny"
    assert info.name == "tiny-cross-encoder"
    assert info.architecture == "BertForSequenceClassification"
    assert info.max_tokens == MAX_POSITIONS
    assert (info.device, info.dtype) == ("cpu", "float32")
    assert info.model_path == str(model_dir.resolve())


async def test_scores_match_transformers(reranker: LocalReranker, model_dir: Path) -> None:
    scores = await reranker.score(QUERY, DOCS)
    expected = _oracle(model_dir, QUERY, DOCS)
    assert len(scores) == len(DOCS)
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores == pytest.approx(expected, abs=1e-5)
    assert max(expected) - min(expected) > 0.05  # the scores really differ: the order check means something


async def test_order_follows_the_caller(reranker: LocalReranker) -> None:
    forward = await reranker.score(QUERY, DOCS)
    backward = await reranker.score(QUERY, DOCS[::-1])
    assert backward == pytest.approx(forward[::-1], abs=1e-6)


async def test_long_documents_are_truncated_not_refused(reranker: LocalReranker, model_dir: Path) -> None:
    long_docs = ["tea " * 5000, "the user prefers tea " + "and more words " * 300]
    ids = reranker.model.tokenize_pairs(QUERY, long_docs)
    assert all(len(pair) == MAX_POSITIONS for pair in ids)
    scores = await reranker.score(QUERY, long_docs)
    assert scores == pytest.approx(_oracle(model_dir, QUERY, long_docs), abs=1e-5)


async def test_token_types_mark_the_document(reranker: LocalReranker) -> None:
    (pair,) = reranker.model.tokenize_pairs("tea", ["coffee"])
    assert pair.type_ids == [0, 0, 0, 1, 1]  # type: ignore[attr-defined]  # [CLS] tea [SEP] coffee [SEP]


async def test_empty_document_list(reranker: LocalReranker) -> None:
    before = reranker.batches_run
    assert await reranker.score(QUERY, []) == []
    assert reranker.batches_run == before


async def test_non_classifier_folder_is_refused(tmp_path: Path) -> None:
    # The bundled embedding model: a BertModel, not a sequence classifier.
    with pytest.raises(ModelLoadError, match=r"not a cross-encoder.*BertModel"):
        LocalReranker.load(default_model_path(), OPTIONS)
    with pytest.raises(ModelLoadError, match=r"not a cross-encoder: no config\.json"):
        LocalReranker.load(str(tmp_path), OPTIONS)
    with pytest.raises(ModelLoadError, match="no such directory"):
        LocalReranker.load(str(tmp_path / "absent"), OPTIONS)


async def test_multi_label_classifier_is_refused(tmp_path: Path) -> None:
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=64, hidden_size=8, num_hidden_layers=1, num_attention_heads=1, intermediate_size=8
    )
    config.num_labels = 3
    BertForSequenceClassification(config).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="3 labels"):
        LocalReranker.load(str(tmp_path), OPTIONS)


async def test_concurrent_calls_share_forwards(model_dir: Path) -> None:
    reranker = LocalReranker.load(str(model_dir), OPTIONS)
    batch_sizes: list[int] = []
    classifier = reranker.model.model
    handle = classifier.register_forward_hook(lambda _m, _args, out: batch_sizes.append(out.logits.shape[0]))
    calls = [(f"query {i}", [f"doc {i} {j}" for j in range(3)]) for i in range(8)]
    try:
        async with reranker:
            # Hold the compute thread so every call queues before the first batch is cut.
            gate = asyncio.Event()
            loop = asyncio.get_running_loop()
            blocker = loop.run_in_executor(
                reranker._queue._compute,
                lambda: asyncio.run_coroutine_threadsafe(gate.wait(), loop).result(),
            )
            results = asyncio.gather(*(reranker.score(q, d) for q, d in calls))
            await asyncio.sleep(0.05)
            gate.set()
            await blocker
            together = await results
            assert reranker.batches_run == 1
            assert reranker.pairs_computed == 24
            assert sum(batch_sizes) == 24  # one batch, split by length into as few forwards as pay off
            assert len(batch_sizes) < 8
            for (query, docs), got in zip(calls, together, strict=True):
                assert got == pytest.approx(await reranker.score(query, docs), abs=1e-5)
    finally:
        handle.remove()


async def test_full_queue_and_caller_share_answer_429(model_dir: Path) -> None:
    options = EngineOptions(device="cpu", dtype="float32", threads=1, warmup=False, max_queue=4)
    reranker = LocalReranker.load(str(model_dir), options)
    assert reranker._queue.caller_limit == 2
    async with reranker:
        gate = asyncio.Event()
        loop = asyncio.get_running_loop()
        blocker = loop.run_in_executor(
            reranker._queue._compute, lambda: asyncio.run_coroutine_threadsafe(gate.wait(), loop).result()
        )
        first = asyncio.ensure_future(reranker.score("q", ["a"]))  # cut into the batch held by the gate
        await asyncio.sleep(0.05)
        token = set_caller("alice")
        try:
            bulk = asyncio.ensure_future(reranker.score("q", ["a", "b", "c"]))  # over the share, holds none
            await asyncio.sleep(0)
            with pytest.raises(CallerShareFull):
                await reranker.score("q", ["d"])
        finally:
            current_caller.reset(token)
        token = set_caller("bob")
        try:
            other = asyncio.ensure_future(reranker.score("q", ["e", "f"]))
            await asyncio.sleep(0)
        finally:
            current_caller.reset(token)
        token = set_caller("carol")  # alice's share and bob's fill the queue of 4
        try:
            with pytest.raises(EmbedderOverloaded, match="overloaded: 5 of 4"):
                await reranker.score("q", ["g"])
        finally:
            current_caller.reset(token)
        gate.set()
        await blocker
        scores = await asyncio.gather(first, bulk, other)
        assert [len(s) for s in scores] == [1, 3, 2]
        assert scores[1][0] == pytest.approx(scores[0][0], abs=1e-6)
