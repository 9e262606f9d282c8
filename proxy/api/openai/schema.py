"""The OpenAI embeddings protocol's OpenAPI description (proxy.api.openapi): the request body, the answers
and OpenAI's error envelope as pydantic models, and the table of its operations.

The handler reads the body with :class:`proxy.api.openai.models.EmbeddingsRequest` (strict, with OpenAI's
messages); this model describes the same fields, ``input`` as OpenAI documents it (a string or an array of
strings). tests/test_openapi.py checks the answers against these models with schemathesis.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from proxy.api.openai.models import MAX_INPUTS
from proxy.api.openai.routes import PREFIX
from proxy.api.openapi import Api, Operation

__all__ = ["OPENAI_API"]


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorDetail(_Out):
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIError(_Out):
    """OpenAI's error envelope (proxy.api.errors.openai_error_body)."""

    error: ErrorDetail


class Embeddings(BaseModel):
    """``POST /openai/v1/embeddings``: strict types (no ``"1"`` for 1); token arrays are not supported."""

    model_config = ConfigDict(extra="forbid")
    input: str | list[str] = Field(min_length=1, max_length=MAX_INPUTS)
    model: str = Field(min_length=1, description="a memproxy embedder (GET /openai/v1/models)")
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: int | None = Field(None, gt=0, description="only the model's own dimension")
    user: str | None = None


class Embedding(_Out):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str = Field(description="floats, or base64 of little-endian float32")


class Usage(_Out):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(_Out):
    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: Usage


class Model(_Out):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(_Out):
    object: Literal["list"]
    data: list[Model]


OPENAI_API = Api(
    tag="OpenAI embeddings",
    error=OpenAIError,
    error_statuses=(400, 401, 404, 413, 429, 503),
    operations={
        ("POST", PREFIX + "/embeddings"): Operation(
            "Embed texts with a memproxy embedder", {200: EmbeddingList}, body=Embeddings
        ),
        ("GET", PREFIX + "/models"): Operation("The embedders, as OpenAI models", {200: ModelList}),
        ("GET", PREFIX + "/models/{model}"): Operation("One embedder, as an OpenAI model", {200: Model}),
    },
)
