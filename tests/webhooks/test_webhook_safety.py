"""Where webhooks may send: the URL rules, and the address rules on every connection."""

from __future__ import annotations

import ipaddress

import pytest

from gql_presence.store.errors import BadInputError
from gql_presence.webhooks.safety import (
    MAX_URL_LENGTH,
    RefusedAddressError,
    SafeResolver,
    address_of,
    check_sockaddr,
    check_url,
    is_allowed,
)
from tests.helpers import Answers

NONE = ()
LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",  # cloud metadata
        "100.64.0.1",
        "0.0.0.0",  # noqa: S104 - an address refused, not one bound to
        "224.0.0.1",
        "240.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fd00::1",
        "fe80::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "::ffff:10.0.0.1",
        "2002:7f00:1::",  # 6to4 of 127.0.0.1
    ],
)
def test_no_connection_is_allowed_to_a_private_or_special_address(address: str) -> None:
    assert not is_allowed(ipaddress.ip_address(address), NONE)
    with pytest.raises(RefusedAddressError, match="not allowed"):
        check_sockaddr((address, 443), NONE, plain_http=False)


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"])
def test_public_addresses_are_allowed_over_https_only(address: str) -> None:
    assert is_allowed(ipaddress.ip_address(address), NONE)
    assert not is_allowed(ipaddress.ip_address(address), NONE, plain_http=True)
    check_sockaddr((address, 443), NONE, plain_http=False)


def test_the_allowed_networks_open_what_they_hold_and_nothing_else() -> None:
    assert is_allowed(ipaddress.ip_address("127.0.0.1"), LOOPBACK)
    assert is_allowed(ipaddress.ip_address("127.0.0.1"), LOOPBACK, plain_http=True)
    assert is_allowed(ipaddress.ip_address("::ffff:127.0.0.1"), LOOPBACK, plain_http=True)
    assert not is_allowed(ipaddress.ip_address("10.0.0.1"), LOOPBACK)
    assert not is_allowed(ipaddress.ip_address("::1"), LOOPBACK)


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("2130706433", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("[::ffff:a9fe:a9fe]", "169.254.169.254"),
        ("example.com", None),
        ("cafe.de", None),
    ],
)
def test_every_spelling_of_an_address_is_read_as_that_address(
    host: str, address: str | None
) -> None:
    found = address_of(host)
    if address is None:
        assert found is None
    else:
        assert found is not None
        assert ipaddress.ip_address(address) in {found, getattr(found, "ipv4_mapped", None)}


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("ftp://hooks.example.com/", "not an https URL"),
        ("hooks.example.com/in", "not an https URL"),
        ("https://user:pw@hooks.example.com/", "user name or password"),
        ("https://user@hooks.example.com/", "user name or password"),
        ("https:///path", "no host"),
        ("https://hooks.example.com:99999/", "not a valid URL"),
        ("https://hooks.example.com:0/", "port is 0"),
        ("https://127.0.0.1/", "addresses 127.0.0.1"),
        ("https://2130706433/", "addresses 127.0.0.1"),
        ("https://0177.0.0.1/", "addresses 127.0.0.1"),
        ("https://169.254.169.254/latest/meta-data", "addresses 169.254.169.254"),
        ("https://[::ffff:127.0.0.1]/", "addresses ::ffff:7f00:1"),
        ("https://[fe80::1]/", "addresses fe80::1"),
        # Written with characters that the connection's IDNA encoding turns into an address.
        ("https://\uff11\uff12\uff17.\uff10.\uff10.\uff11/", "addresses 127.0.0.1"),
        ("https://169\u3002254\u3002169\u3002254/", "addresses 169.254.169.254"),
        ("https://exa mple.com/", "not a valid host name"),
        ("https://%31%32%37.0.0.1/", "not a valid host name"),
        ("https://\u2488.example/", "not a valid host name"),
        ("https://hooks..example.com/", "not a valid host name"),
        ("https://" + "a" * 64 + ".example.com/", "not a valid host name"),
        ("http://hooks.example.com/", "is http, and no network is allowed it"),
        ("https://hooks.example.com/" + "a" * MAX_URL_LENGTH, "this one has 2,074 characters"),
    ],
)
def test_a_url_that_breaks_a_rule_is_refused_saying_the_rules(url: str, said: str) -> None:
    with pytest.raises(BadInputError) as refused:
        check_url(url, NONE)
    assert said in refused.value.message
    assert refused.value.message.startswith("A webhook's url is https")


def test_urls_that_keep_the_rules_are_taken() -> None:
    longest = "https://hooks.example.com/" + "a" * (MAX_URL_LENGTH - 26)
    assert check_url(longest, NONE) == longest
    assert check_url("https://93.184.215.14:8443/in?token=x", NONE)
    assert check_url("http://127.0.0.1:8080/in", LOOPBACK)
    assert check_url("https://localhost/in", NONE)  # a name: checked as it is connected to
    assert check_url("https://hooks.example.com./in", NONE)
    assert check_url("https://b\u00fccher.example/in", NONE)
    assert check_url("https://in_1.hooks-2.example/", NONE)
    with pytest.raises(BadInputError, match=r"addresses 10\.0\.0\.1"):
        check_url("http://10.0.0.1/", LOOPBACK)


async def test_the_resolver_keeps_only_the_allowed_answers_of_a_name() -> None:
    resolver = SafeResolver(NONE, source=Answers("93.184.215.14", "127.0.0.1", "10.0.0.2"))
    kept = await resolver.resolve("rebinding.example", 443)
    assert [r["host"] for r in kept] == ["93.184.215.14"]


async def test_a_name_with_only_refused_answers_is_refused() -> None:
    resolver = SafeResolver(NONE, source=Answers("127.0.0.1", "::ffff:10.0.0.1"))
    with pytest.raises(
        RefusedAddressError, match=r"not allowed \(127\.0\.0\.1, ::ffff:10\.0\.0\.1\)"
    ):
        await resolver.resolve("rebinding.example", 443)


async def test_a_plain_http_name_may_resolve_only_into_the_allowed_networks() -> None:
    resolver = SafeResolver(LOOPBACK, plain_http=True, source=Answers("93.184.215.14", "127.0.0.5"))
    assert [r["host"] for r in await resolver.resolve("inside.example", 80)] == ["127.0.0.5"]


@pytest.mark.parametrize("host", ["localhost", "2130706433", "0177.0.0.1", "127.1"])
async def test_names_and_spellings_that_the_system_resolves_to_loopback_are_refused(
    host: str,
) -> None:
    resolver = SafeResolver(NONE)
    try:
        with pytest.raises(RefusedAddressError):
            await resolver.resolve(host, 443)
    finally:
        await resolver.close()


@pytest.mark.parametrize(
    "url", ["https://hooks.example.com/\n", "https://hooks.example.com/\ud800"]
)
def test_a_url_with_control_characters_or_invalid_text_is_refused(url: str) -> None:
    with pytest.raises(BadInputError, match="control characters or invalid text"):
        check_url(url, NONE)
