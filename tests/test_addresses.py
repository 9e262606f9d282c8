"""The outbound address rule and stored media types, without a node: the classifier, the policy, the
socket factory a real ``ProviderClient`` connects through, redirects, and the media-type parser."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from aiohttp import web

from proxy.core.goodmem.media import check_media_type, download_headers, parse_media_type
from proxy.errors import BadRequest
from proxy.models import EndpointRefused, ProviderRejected, ProviderUnavailable, RemoteEmbedder
from proxy.models.addresses import AddressPolicy, RefusedAddress, classify, literal_ip, parse_allowed
from tests.test_models_remote import Seen, client_for, serve

ip = ipaddress.ip_address

CLASSES = {
    "8.8.8.8": None,
    "1.1.1.1": None,
    "2606:4700:4700::1111": None,
    "::ffff:8.8.8.8": None,
    "127.0.0.1": "loopback",
    "127.255.1.2": "loopback",
    "::1": "loopback",
    "10.0.0.1": "private",
    "172.16.0.1": "private",
    "172.31.255.255": "private",
    "192.168.0.1": "private",
    "fd12::1": "private",
    "169.254.169.254": "link-local",
    "fe80::1": "link-local",
    "100.64.0.1": "carrier-grade NAT",
    "100.127.255.255": "carrier-grade NAT",
    "0.0.0.0": "unspecified",
    "::": "unspecified",
    "224.0.0.1": "multicast",
    "ff02::1": "multicast",
    "192.0.2.1": "reserved",
    "255.255.255.255": "reserved",
    # IPv4 inside IPv6: classified by the IPv4 address they carry.
    "::ffff:127.0.0.1": "loopback",
    "::ffff:10.1.2.3": "private",
    "::ffff:169.254.169.254": "link-local",
    "::127.0.0.1": "loopback",
    "64:ff9b::a00:1": "private",
    "2002:7f00:1::": "loopback",
    "2002:a9fe:a9fe::": "link-local",
}


@pytest.mark.parametrize(("address", "kind"), CLASSES.items())
def test_classify(address: str, kind: str | None) -> None:
    assert classify(ip(address)) == kind


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("3232235777", "192.168.1.1"),
        ("[::ffff:127.0.0.1]", "::ffff:127.0.0.1"),
        ("[fe80::1%eth0]", "fe80::1"),
        ("8.8.8.8", "8.8.8.8"),
    ],
)
def test_literal_ip_reads_every_form_the_resolver_reads(host: str, address: str) -> None:
    assert literal_ip(host) == ip(address)


@pytest.mark.parametrize("host", ["localhost", "example.com", "api.openai.com", "0x", "1e100.net", ""])
def test_names_are_not_literals(host: str) -> None:
    assert literal_ip(host) is None


def test_parse_allowed() -> None:
    nets = parse_allowed(["loopback", " 10.1.0.0/16 ", "fd00::/8", ""])
    assert ipaddress.ip_network("127.0.0.0/8") in nets and ipaddress.ip_network("::1/128") in nets
    assert ipaddress.ip_network("10.1.0.0/16") in nets
    for bad in ("everything", "10.0.0.0/33", "*"):
        with pytest.raises(ValueError, match="neither"):
            parse_allowed([bad])


def test_policy_refuses_non_public_unless_allowed_and_the_cluster_always() -> None:
    strict = AddressPolicy()
    assert strict.refusal(ip("8.8.8.8"), 443) is None
    assert "loopback address" in (strict.refusal(ip("127.0.0.1"), 80) or "")
    assert "link-local" in (strict.refusal(ip("169.254.169.254"), 80) or "")
    loopback = AddressPolicy(parse_allowed(["loopback"])).with_forbidden([("127.0.0.1", 9250)])
    assert loopback.refusal(ip("127.0.0.1"), 8080) is None
    assert loopback.refusal(ip("::ffff:127.0.0.1"), 8080) is None
    assert loopback.refusal(ip("10.0.0.1"), 80) is not None  # loopback opens loopback only
    for form in ("127.0.0.1", "::ffff:127.0.0.1", "::127.0.0.1"):
        assert "OpenSearch cluster" in (loopback.refusal(ip(form), 9250) or "")
    everything = AddressPolicy(allow_all=True).with_forbidden([("localhost", 9250)])
    assert everything.refusal(ip("10.0.0.1"), 9250) is None
    assert "OpenSearch cluster" in (everything.refusal(ip("127.0.0.1"), 9250) or "")


def test_the_socket_factory_refuses_before_any_connect() -> None:
    policy = AddressPolicy()
    with pytest.raises(RefusedAddress) as refused:
        policy.socket_factory((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 80)))
    assert "loopback" in refused.value.reason
    with pytest.raises(RefusedAddress):
        policy.socket_factory((socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::ffff:10.0.0.1", 80, 0, 0)))
    sock = policy.socket_factory((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("8.8.8.8", 443)))
    sock.close()


async def _embed_answer(seen: Seen, n: int) -> web.StreamResponse:
    return web.json_response([[0.5, 0.5]])


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]", "2130706433", "0x7f.1"])
async def test_a_client_under_a_strict_policy_never_connects(host: str) -> None:
    """The check holds on the address connected to, whatever name (or number) the URL used. (aiohttp
    itself refuses the non-canonical IPv4 forms as hosts: unreachable, and never connected either.)"""
    async with serve(_embed_answer) as double:
        url = double.url.replace("127.0.0.1", host)
        async with client_for(url, addresses=AddressPolicy(), max_retries=2) as client:
            with pytest.raises((EndpointRefused, ProviderUnavailable)) as caught:
                await RemoteEmbedder(client, wire="tei").embed(["a"])
        if host in ("127.0.0.1", "localhost", "[::ffff:127.0.0.1]"):
            assert isinstance(caught.value, EndpointRefused) and caught.value.status == 400
            assert "is a loopback address" in caught.value.message
        assert double.seen == []
        if host in ("127.0.0.1", "localhost"):
            allowed = AddressPolicy(parse_allowed(["loopback"]))
            async with client_for(url, addresses=allowed) as client:
                assert await RemoteEmbedder(client, wire="tei").embed(["a"]) == [[0.5, 0.5]]
            assert len(double.seen) == 1


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
async def test_a_redirect_is_a_model_error_and_is_not_followed(code: int) -> None:
    async with serve(_embed_answer) as target:

        async def redirect(seen: Seen, n: int) -> web.StreamResponse:
            return web.Response(status=code, headers={"Location": f"{target.url}/embed"})

        async with serve(redirect) as double, client_for(double.url, max_retries=2) as client:
            with pytest.raises(ProviderRejected, match=rf"answered a redirect \({code}\), which memproxy"):
                await RemoteEmbedder(client, wire="tei").embed(["a"])
        assert len(double.seen) == 1 and target.seen == []


GOOD_TYPES = [
    "text/plain",
    "TEXT/Plain",
    "application/pdf",
    "text/plain; charset=utf-8",
    'text/plain;charset="utf-8"',
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "image/svg+xml",
    'multipart/mixed; boundary="a b"',
]
BAD_TYPES = ["text/plain\r\nX: 1", "text/plain\n", "text", "text/", "text/pl ain", "a/b; c", "é/b"]


@pytest.mark.parametrize("value", GOOD_TYPES)
def test_media_types_accepted(value: str) -> None:
    assert check_media_type(value) == value and parse_media_type(value) is not None


@pytest.mark.parametrize("value", [*BAD_TYPES, "a/" + "b" * 260])
def test_media_types_refused(value: str) -> None:
    with pytest.raises(BadRequest, match="media type"):
        check_media_type(value)


def test_download_headers() -> None:
    plain = download_headers("text/plain; charset=utf-8")
    assert plain["Content-Type"] == "text/plain; charset=utf-8" and "Content-Disposition" not in plain
    assert plain["X-Content-Type-Options"] == "nosniff"
    assert plain["Content-Security-Policy"] == "sandbox; default-src 'none'"
    for active in ("text/html", "image/svg+xml", "application/xhtml+xml", "text/xml", "application/pdf"):
        assert download_headers(active)["Content-Disposition"] == "attachment"
    legacy = download_headers("text/html\r\nSet-Cookie: x=1")
    assert (
        legacy["Content-Type"] == "application/octet-stream" and legacy["Content-Disposition"] == "attachment"
    )


def test_the_setting_is_read_and_checked_at_start_up() -> None:
    from proxy.config import parse_settings

    assert parse_settings([], {}).allow_private_model_endpoints == ()
    flag = parse_settings(["--allow-private-model-endpoints", "loopback, 10.1.0.0/16"], {})
    assert flag.allow_private_model_endpoints == ("loopback", "10.1.0.0/16")
    env = parse_settings([], {"MEMPROXY_ALLOW_PRIVATE_MODEL_ENDPOINTS": "private"})
    assert env.allow_private_model_endpoints == ("private",)
    with pytest.raises(SystemExit, match="allow-private-model-endpoints"):
        parse_settings(["--allow-private-model-endpoints", "everywhere"], {})
