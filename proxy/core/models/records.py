"""What the registry keeps about a model: its kind, who registered it through which API, how to call it.

One document per model in ``memproxy-models``::

    {"memproxy": {"kind", "api", "model_id", "owner_id", "provider", "fingerprint", "created_at",
                  "updated_at", "call": {...}, "credential": "aesgcm1:..."},
     ...the registering API's own view of the model (GoodMem's EmbedderResponse fields, ml-commons' model
        document fields)...}

``call`` says how to reach the model, in one of two forms:

* ``provider``: a GoodMem-style provider (``wire`` of ``proxy.models``, ``endpoint_url``, ``api_path``,
  ``model``, ``dimension``, and the credential's ``header_name``/``prefix``);
* ``connector``: an ml-commons HTTP connector (its ``actions`` and ``parameters``; the credential is the
  connector's ``credential`` object).

The credential is stored only encrypted (``proxy.models.secrets``) and never leaves the registry except to
make a call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

__all__ = ["API", "KIND", "ModelRecord", "ProviderCall"]

# embedder / reranker / llm: GoodMem's three resources and the start-up flags; remote: an ml-commons model
# (which kind of model it is shows only when it is used); connector / model_group / task: ml-commons'
# other registry documents.
KIND = Literal["embedder", "reranker", "llm", "remote", "connector", "model_group", "task"]
API = Literal["goodmem", "ml-commons", "startup"]


@dataclass(frozen=True)
class ProviderCall:
    """How to call a GoodMem-style provider model."""

    wire: str  # proxy.models' format: openai / tei / cohere (embed), tei / cohere / jina / voyage / vllm
    endpoint_url: str
    api_path: str | None = None
    model: str | None = None
    dimension: int | None = None
    header_name: str = "Authorization"
    prefix: str = "Bearer "
    chat_provider: str = "generic"  # proxy.models.chat's table, for LLMs

    def to_doc(self) -> dict[str, Any]:
        return {"form": "provider", **{k: v for k, v in self.__dict__.items()}}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> ProviderCall:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in doc.items() if k in names})


@dataclass(frozen=True)
class ModelRecord:
    model_id: str
    kind: KIND
    api: API
    owner_id: str | None
    created_at: int
    updated_at: int
    # The registering API's own fields, as it renders them (never holds the credential).
    view: dict[str, Any] = field(default_factory=dict)
    # ``{"form": "provider", ...ProviderCall}`` or ``{"form": "connector", "actions", "parameters"}``.
    call: dict[str, Any] = field(default_factory=dict)
    provider: str | None = None
    # What makes two registrations the same model (GoodMem's duplicate rule), credential included.
    fingerprint: str | None = None
    # Encrypted; None when the model takes no credential.
    credential: str | None = field(default=None, repr=False)

    def to_doc(self) -> dict[str, Any]:
        own: dict[str, Any] = {
            "kind": self.kind,
            "api": self.api,
            "model_id": self.model_id,
            "owner_id": self.owner_id,
            "provider": self.provider,
            "fingerprint": self.fingerprint,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "call": self.call,
            "credential": self.credential,
        }
        return {**self.view, "memproxy": own}

    @classmethod
    def from_doc(cls, doc_id: str, doc: Mapping[str, Any]) -> ModelRecord:
        own = doc.get("memproxy") or {}
        view = {k: v for k, v in doc.items() if k != "memproxy"}
        return cls(
            model_id=str(own.get("model_id") or doc_id),
            kind=own.get("kind", "remote"),
            api=own.get("api", "ml-commons"),
            owner_id=own.get("owner_id"),
            created_at=int(own.get("created_at") or 0),
            updated_at=int(own.get("updated_at") or 0),
            view=view,
            call=dict(own.get("call") or {}),
            provider=own.get("provider"),
            fingerprint=own.get("fingerprint"),
            credential=own.get("credential"),
        )

    def with_view(self, view: Mapping[str, Any], updated_at: int) -> ModelRecord:
        return replace(self, view=dict(view), updated_at=updated_at)
