"""The secured cluster (``scripts/opensearch-secured``): OpenSearch 2.19.1 with the security plugin, TLS with
the demo certificates, and the profile's users; memproxy runs on it as its service user.

``secured_cluster`` starts the profile through the script (idempotent: a running node is reused and its
users are put in place again) and reads what it prints: ``OPENSEARCH_URL``, ``OPENSEARCH_CA_CERTS``,
``OPENSEARCH_USERNAME`` (the service user) and one ``OPENSEARCH_USER_<NAME>=<password>`` line per user.
"""

from __future__ import annotations

import base64
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from opensearchpy import OpenSearch

from tests.conftest import REPO, ProxyProcess

__all__ = ["SecuredCluster", "parse_profile"]

# The GoodMem root key of the secured cluster's instance, kept across sessions: the node keeps its data, and
# /v1/system/init hands the root key out once only.
ROOT_KEY_FILE = REPO / ".cache" / "secured-goodmem-root-key"


@dataclass(frozen=True)
class SecuredCluster:
    url: str
    ca_certs: str
    users: dict[str, str]  # user name -> password: admin, memproxy, alice, carol, bob
    service_user: str = "memproxy"
    backend_roles: dict[str, str] = field(
        default_factory=lambda: {"alice": "team-a", "carol": "team-a", "bob": "team-b"}
    )

    def auth(self, user: str) -> tuple[str, str]:
        return user, self.users[user]

    def basic(self, user: str, password: str | None = None) -> str:
        """The ``Authorization`` header value of ``user`` (with its own password unless one is given)."""
        raw = f"{user}:{self.users[user] if password is None else password}".encode()
        return "Basic " + base64.b64encode(raw).decode()

    def client(self, user: str) -> OpenSearch:
        return OpenSearch(hosts=[self.url], http_auth=self.auth(user), ca_certs=self.ca_certs, timeout=60)

    def http(self, user: str | None = None) -> httpx.Client:
        """An HTTPS client that trusts the demo CA (and authenticates as ``user`` when given)."""
        return httpx.Client(
            base_url=self.url,
            verify=ssl.create_default_context(cafile=self.ca_certs),
            auth=self.auth(user) if user else None,
            timeout=60,
        )

    def proxy_args(self) -> list[str]:
        """memproxy's flags to run as the service user (after ``--opensearch-url``)."""
        return [
            "--opensearch-username",
            self.service_user,
            "--opensearch-password",
            self.users[self.service_user],
            "--opensearch-ca-certs",
            self.ca_certs,
        ]


def parse_profile(output: str) -> SecuredCluster:
    """The cluster as ``scripts/opensearch-secured start`` / ``url`` print it."""
    values = dict(line.split("=", 1) for line in output.splitlines() if "=" in line)
    users = {
        key.removeprefix("OPENSEARCH_USER_").lower(): value
        for key, value in values.items()
        if key.startswith("OPENSEARCH_USER_")
    }
    return SecuredCluster(
        url=values["OPENSEARCH_URL"],
        ca_certs=values["OPENSEARCH_CA_CERTS"],
        users=users,
        service_user=values["OPENSEARCH_USERNAME"],
    )


@pytest.fixture(scope="session")
def secured_cluster() -> SecuredCluster:
    """Started here and left running, like the other nodes (``.ci/run`` stops it at the end)."""
    out = subprocess.run(
        [str(REPO / "scripts" / "opensearch-secured"), "start"], check=True, capture_output=True, text=True
    ).stdout
    cluster = parse_profile(out)
    assert Path(cluster.ca_certs).is_file(), cluster.ca_certs
    return cluster


@pytest.fixture(scope="session")
def secured_proxy(secured_cluster: SecuredCluster) -> Iterator[ProxyProcess]:
    """memproxy on the secured cluster, running as the service user."""
    p = ProxyProcess(secured_cluster.url, extra_args=secured_cluster.proxy_args())
    yield p
    p.stop()


def _key_works(proxy_url: str, key: str) -> bool:
    return httpx.get(proxy_url + "/v1/users/me", headers={"x-api-key": key}, timeout=30).status_code == 200


@pytest.fixture(scope="session")
def secured_root_key(secured_proxy: ProxyProcess, secured_cluster: SecuredCluster) -> str:
    """A GoodMem root key on the secured cluster's instance. ``/v1/system/init`` gives it on the first run;
    later runs read it back from ``ROOT_KEY_FILE``. When that is lost (or the node was rebuilt since) the
    instance record is deleted as admin, so that init (in this same proxy process) issues a new root: this
    cluster is the tests' alone."""
    if ROOT_KEY_FILE.is_file():
        key = ROOT_KEY_FILE.read_text().strip()
        if key and _key_works(secured_proxy.url, key):
            return key
    body = httpx.post(secured_proxy.url + "/v1/system/init", timeout=60).json()
    if not body.get("rootApiKey"):
        from proxy.store.goodmem import SYSTEM

        # the instance record's id (proxy.core.identity.INSTANCE_DOC)
        secured_cluster.client("admin").delete(index=SYSTEM, id="instance", refresh=True, ignore=[404])
        body = httpx.post(secured_proxy.url + "/v1/system/init", timeout=60).json()
    key = str(body["rootApiKey"])
    ROOT_KEY_FILE.parent.mkdir(parents=True, exist_ok=True)
    ROOT_KEY_FILE.write_text(key + "\n")
    return key
