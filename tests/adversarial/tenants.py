"""Tenants for the adversarial tests: GoodMem users with their own API keys, made by the root user."""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass

import httpx

__all__ = ["Tenant", "basic", "make_tenant"]


@dataclass(frozen=True)
class Tenant:
    name: str
    user_id: str
    key: str
    key_id: str

    @property
    def headers(self) -> dict[str, str]:
        return {"x-api-key": self.key}


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def make_tenant(admin: httpx.Client, name: str) -> Tenant:
    """A new non-admin user and a key of theirs (``admin``: a client authenticated as root)."""
    suffix = uuid.uuid4().hex[:8]
    user = admin.post("/v1/users", json={"email": f"{name}-{suffix}@example.com", "displayName": name})
    assert user.status_code in (200, 201), user.text
    user_id = user.json()["userId"]
    key = admin.post("/v1/apikeys", json={"subjectPrincipalId": user_id, "labels": {"tenant": name}})
    assert key.status_code == 201, key.text
    return Tenant(name, user_id, key.json()["rawApiKey"], key.json()["apiKeyMetadata"]["apiKeyId"])
