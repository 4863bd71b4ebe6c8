"""Where a webhook may point: not at link-local or cloud-metadata addresses unless the user allowed them.

Seen (issue 27, finding 5): a sink saved with a URL on a cloud's metadata service would POST there, and its
answer came back to the model. The host is resolved and *every* address it has is checked (a name with one
good and one metadata address is refused); the send then connects to a checked address, never resolving the
name again (a DNS answer that changes between the check and the connect cannot slip through). Loopback and
private networks stay allowed: a receiver on the same machine or LAN is a real setup.

Allowed explicitly by the user only, in the environment (never a tool argument):
``VAD_NOTIFY_ALLOW_ADDRESSES=169.254.10.0/24,fe80::1`` (addresses or networks, comma-separated).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from verl_async_dapo.exceptions import NotifyConfigError

ALLOW_ENV = "VAD_NOTIFY_ALLOW_ADDRESSES"
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

BLOCKED: tuple[IPNetwork, ...] = tuple(ipaddress.ip_network(n) for n in (
    "169.254.0.0/16",      # IPv4 link-local: AWS/GCP/Azure/Oracle metadata at 169.254.169.254
    "fe80::/10",           # IPv6 link-local
    "fd00:ec2::254/128",   # AWS metadata over IPv6
    "100.100.100.200/32",  # Alibaba Cloud metadata
    "168.63.129.16/32",    # Azure wire server
))  # fmt: skip


@dataclass(frozen=True)
class Checked:
    host: str
    port: int
    addresses: tuple[str, ...]  # every address the host resolved to, all allowed; connect to these only


def allowed_networks(env: Mapping[str, str]) -> tuple[IPNetwork, ...]:
    text = (env.get(ALLOW_ENV) or "").strip()
    networks = []
    for item in (w.strip() for w in text.split(",")):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise NotifyConfigError(f"{ALLOW_ENV}: {item[:60]!r} is not an IP address or network") from None
    return tuple(networks)


def _plain(address: IPAddress) -> IPAddress:
    """An IPv4-mapped or NAT64-less IPv6 form (::ffff:169.254.169.254) is judged as the IPv4 it names."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def refused(address: str, allow: tuple[IPNetwork, ...]) -> bool:
    ip = _plain(ipaddress.ip_address(address.split("%", 1)[0]))  # a zone id (fe80::1%eth0) is not part of it
    if any(ip.version == n.version and ip in n for n in allow):
        return False
    return any(ip.version == n.version and ip in n for n in BLOCKED)


def check(host: str, port: int, env: Mapping[str, str], *, resolve: bool = True) -> Checked:
    """The host's addresses, all allowed; NotifyConfigError naming the host (never the URL) otherwise.

    ``resolve=False`` (a proxy will resolve the name): only a literal address in the URL is checked.
    """
    allow = allowed_networks(env)
    literal = _literal(host)
    if literal is not None:
        addresses: tuple[str, ...] = (literal,)
    elif not resolve:
        return Checked(host, port, ())
    else:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise NotifyConfigError(f"the webhook host {host[:80]!r} does not resolve ({type(exc).__name__})") from None
        addresses = tuple(dict.fromkeys(str(info[4][0]) for info in infos))
    bad = [a for a in addresses if refused(a, allow)]
    if bad:
        raise NotifyConfigError(
            f"the webhook host {host[:80]!r} is at {bad[0]}, a link-local or cloud-metadata address: refused (a "
            f"receiver there is allowed only when the user sets {ALLOW_ENV} in the server's environment)"
        )
    return Checked(host, port, addresses)


def _literal(host: str) -> str | None:
    try:
        return str(ipaddress.ip_address(host.strip("[]").split("%", 1)[0]))
    except ValueError:
        return None
