"""Provider credentials at rest: AES-256-GCM under one key that every memproxy process of a cluster shares.

A stored credential is ``aesgcm1:`` + urlsafe base64 of (12-byte nonce | ciphertext | tag). The model's id
is the associated data, so a ciphertext copied onto another model's record does not decrypt there.

Where the key comes from is decided by the caller (``proxy.core.models.secret_box``, docs/models.md): the
environment, a file, or, as ml-commons does with its master key, a key generated once and kept in
memproxy's private config index.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from proxy.errors import MemproxyError

__all__ = ["SecretBox", "SecretUnreadable", "generate_key"]

_PREFIX = "aesgcm1:"
_NONCE = 12


class SecretUnreadable(MemproxyError):
    """A stored credential that this key cannot decrypt (another key, or a tampered record)."""

    status = 500


def generate_key() -> str:
    """A fresh key in the form ``SecretBox.from_text`` reads (urlsafe base64 of 32 random bytes)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()


def _key_bytes(text: str) -> bytes:
    text = text.strip()
    if not text:
        raise ValueError("the credential key is empty")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) == 32:
        return raw
    # Any other text is a passphrase: stretched so that a short one is not a short key.
    return hashlib.pbkdf2_hmac("sha256", text.encode(), b"memproxy-credentials", 200_000)


class SecretBox:
    def __init__(self, key: bytes, source: str) -> None:
        if len(key) != 32:
            raise ValueError("an AES-256 key is 32 bytes")
        self._aead = AESGCM(key)
        # Where the key came from (an env var name, a file path, "cluster"), for logs: never the key itself.
        self.source = source

    def __repr__(self) -> str:
        return f"SecretBox(source={self.source!r})"

    @classmethod
    def from_text(cls, text: str, source: str) -> SecretBox:
        return cls(_key_bytes(text), source)

    def encrypt(self, plaintext: str, *, bound_to: str) -> str:
        nonce = os.urandom(_NONCE)
        sealed = self._aead.encrypt(nonce, plaintext.encode(), bound_to.encode())
        return _PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode()

    def decrypt(self, token: str, *, bound_to: str) -> str:
        if not token.startswith(_PREFIX):
            raise SecretUnreadable("a stored credential is not in memproxy's encrypted form")
        try:
            raw = base64.urlsafe_b64decode(token[len(_PREFIX) :])
            return self._aead.decrypt(raw[:_NONCE], raw[_NONCE:], bound_to.encode()).decode()
        except (binascii.Error, ValueError, InvalidTag):
            raise SecretUnreadable(
                "a stored credential cannot be decrypted with this process's key "
                f"(key from {self.source}); was it written under another MEMPROXY_SECRET_KEY?"
            ) from None
