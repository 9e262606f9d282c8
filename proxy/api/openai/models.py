"""Wire models of the OpenAI embeddings protocol, and the one place a body becomes a request or a 400."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from proxy.api.body import MalformedJson, decode_json
from proxy.errors import BadRequest

__all__ = ["MAX_INPUTS", "EmbeddingsRequest", "parse_embeddings_request"]

# OpenAI's own limit on the items of one request.
MAX_INPUTS = 2048


class EmbeddingsRequest(BaseModel):
    # Strict: no "1" -> 1 or True -> 1. Unknown keys are ignored so that clients sending newer or
    # vendor-specific parameters still work.
    model_config = ConfigDict(strict=True, extra="ignore")

    input: list[str]
    model: str = Field(min_length=1)
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, gt=0)
    user: str | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _strings(cls, value: Any) -> list[str]:
        if value == "" or value == []:
            raise PydanticCustomError("input_empty", "must not be empty")
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise PydanticCustomError("input_type", "must be a string or an array of strings")
        if len(value) > MAX_INPUTS:
            raise PydanticCustomError("input_size", f"must have at most {MAX_INPUTS} items, got {len(value)}")
        if any(_is_tokens(item) for item in value):
            raise PydanticCustomError("input_tokens", "token arrays are not supported, only strings")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise PydanticCustomError("input_type", f"item {i} is not a string")
            if not item:
                raise PydanticCustomError("input_empty", f"item {i} is an empty string")
        return value


def _is_tokens(item: Any) -> bool:
    """OpenAI accepts pre-tokenized input (ids of its own tokenizer), meaningless to a local model."""
    return isinstance(item, int) or (isinstance(item, list) and all(isinstance(t, int) for t in item))


def parse_embeddings_request(raw: bytes) -> EmbeddingsRequest:
    """The request, or a 400 whose ``param`` names the offending field."""
    try:
        body = decode_json(raw)
    except MalformedJson:
        raise BadRequest("We could not parse the JSON body of your request.") from None
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    try:
        return EmbeddingsRequest.model_validate(body)
    except ValidationError as exc:
        error = exc.errors()[0]
        param = str(error["loc"][0]) if error["loc"] else None
        if error["type"] == "missing":
            raise BadRequest(f"Missing required parameter: '{param}'.", details={"param": param}) from None
        raise BadRequest(f"Invalid '{param}': {error['msg']}.", details={"param": param}) from None
