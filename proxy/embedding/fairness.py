"""Whose texts these are: the caller of the request that queued them, for a fair share of the queue.

The HTTP layer knows the caller and the queue does not see requests, so the identity middleware sets a
context variable that the embedding queue reads when texts are submitted (asyncio copies the context into
every task a request starts).
"""

from __future__ import annotations

from contextvars import ContextVar, Token

__all__ = ["ANONYMOUS", "current_caller", "set_caller"]

ANONYMOUS = "anonymous"
current_caller: ContextVar[str] = ContextVar("memproxy_embedding_caller", default=ANONYMOUS)


def set_caller(caller: str) -> Token[str]:
    """Make ``caller`` the owner of what this context queues; reset with ``current_caller.reset(token)``."""
    return current_caller.set(caller)
