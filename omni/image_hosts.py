"""Which hosts an image URL may name: public addresses always, and what the operator allows
beyond them (--allow-image-hosts). Below the settings, which carry an ImageHosts; the fetch
itself is omni.service.image_urls."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # the IPv4 address in its last 32 bits
_NAME = re.compile(r"(\*\.)?[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?")


def public(address: Address) -> bool:
    """Whether `address` is on the internet at large: not loopback, private, link-local,
    site-local, multicast, unspecified or reserved, nor an IPv6 address that carries such an
    IPv4 one."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:  # ::ffff:127.0.0.1 is 127.0.0.1
            return public(address.ipv4_mapped)
        if address in _NAT64:  # the whole prefix is reserved (::/8): judge what it carries
            return public(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        if address.sixtofour is not None:  # 2002::/16 is global by some Pythons' tables only
            return public(address.sixtofour)
        if address.is_site_local:  # fec0::/10: deprecated, yet still a local network's
            return False
    return address.is_global and not (
        address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_multicast
        or address.is_unspecified
        or address.is_reserved
    )


@dataclass(frozen=True, slots=True)
class ImageHosts:
    """What image URLs may name beyond public addresses: host names (`name`, `*.domain`)
    whatever they resolve to, and networks (`10.0.0.0/8`, or one address) under any name."""

    names: tuple[str, ...] = ()
    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> ImageHosts:
        """ValueError names an entry that is neither a host name nor an address or network."""
        names: list[str] = []
        networks: list[Network] = []
        for entry in entries:
            text = entry.strip().lower()
            try:  # an address, bracketed or not, is a network of one
                networks.append(ipaddress.ip_network(text.strip("[]"), strict=False))
            except ValueError:
                if not _NAME.fullmatch(text):
                    raise ValueError(
                        f"{entry!r} is neither a host name nor an IP address or network (CIDR)"
                    ) from None
                names.append(text.rstrip("."))
        return cls(tuple(names), tuple(networks))

    def allows(self, host: str, address: Address) -> bool:
        """Whether a URL naming `host` may be fetched from `address` (one it resolved to)."""
        name = host.lower().rstrip(".")
        if any(name == n or (n.startswith("*.") and name.endswith(n[1:])) for n in self.names):
            return True
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return public(address) or any(address in network for network in self.networks)
