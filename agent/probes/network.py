"""Network interfaces, the default route, InfiniBand/RoCE ports and GPUDirect RDMA readiness.

NICs come from psutil; the default route from ``/proc/net/route``; IB ports from
``/sys/class/infiniband``; ``nvidia_peermem`` from ``/proc/modules``. The file locations are
parameters so the parsers can be exercised on constructed trees.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from typing import Optional

import psutil

from shared.models import IbPort, NicAddress, NicInfo

__all__ = ["nic_info", "default_route_interface", "ib_ports", "peermem_loaded"]

_RTF_UP = 0x1


def nic_info(*, route_file: str = "/proc/net/route") -> list[NicInfo]:
    """Every interface with its addresses, MTU, speed and state; marks the default-route one."""
    addresses = psutil.net_if_addrs()
    stats = psutil.net_if_stats()
    default_nic = default_route_interface(route_file=route_file)
    nics = []
    for name in sorted(set(addresses) | set(stats)):
        stat = stats.get(name)
        nics.append(
            NicInfo(
                name=name,
                addresses=[address for raw in addresses.get(name, []) if (address := _address(raw)) is not None],
                mtu=stat.mtu if stat else None,
                speed_mbps=stat.speed if stat and stat.speed > 0 else None,
                is_up=stat.isup if stat else None,
                is_loopback=name == "lo" or bool(stat and "loopback" in getattr(stat, "flags", "")),
                default_route=name == default_nic,
            )
        )
    return nics


def default_route_interface(*, route_file: str = "/proc/net/route") -> Optional[str]:
    """The interface of the IPv4 default route with the lowest metric, or ``None``."""
    best: Optional[tuple[int, str]] = None
    try:
        with open(route_file, encoding="ascii", errors="replace") as routes:
            next(routes, None)  # header line
            for line in routes:
                fields = line.split()
                if len(fields) < 8:
                    continue
                iface, destination, flags, metric, mask = fields[0], fields[1], fields[3], fields[6], fields[7]
                try:
                    if destination != "00000000" or mask != "00000000" or not int(flags, 16) & _RTF_UP:
                        continue
                    candidate = (int(metric), iface)
                except ValueError:
                    continue
                if best is None or candidate < best:
                    best = candidate
    except OSError:
        return None
    return best[1] if best else None


def ib_ports(*, sysfs_root: str = "/sys/class/infiniband") -> list[IbPort]:
    """InfiniBand and RoCE ports of every HCA; empty when there is none."""
    try:
        devices = sorted(os.listdir(sysfs_root))
    except OSError:
        return []
    ports = []
    for device in devices:
        ports_dir = os.path.join(sysfs_root, device, "ports")
        try:
            port_names = sorted(os.listdir(ports_dir), key=lambda name: (len(name), name))
        except OSError:
            continue
        for port_name in port_names:
            if not port_name.isdigit():
                continue
            port_dir = os.path.join(ports_dir, port_name)
            ports.append(
                IbPort(
                    device=device,
                    port=int(port_name),
                    state=_state(_read(os.path.join(port_dir, "state"))),
                    phys_state=_state(_read(os.path.join(port_dir, "phys_state"))),
                    rate=_read(os.path.join(port_dir, "rate")),
                    link_layer=_read(os.path.join(port_dir, "link_layer")),
                    netdev=_netdev(os.path.join(sysfs_root, device), port_dir),
                )
            )
    return ports


def peermem_loaded(*, modules_file: str = "/proc/modules") -> Optional[bool]:
    """Whether ``nvidia_peermem`` (GPUDirect RDMA) is loaded; ``None`` if modules are unreadable."""
    try:
        with open(modules_file, encoding="ascii", errors="replace") as modules:
            return any(line.split(" ", 1)[0] == "nvidia_peermem" for line in modules)
    except OSError:
        return None


def _address(raw) -> Optional[NicAddress]:
    if raw.family == socket.AF_INET:
        family = "ipv4"
    elif raw.family == socket.AF_INET6:
        family = "ipv6"
    else:
        return None
    address = raw.address.split("%", 1)[0]  # link-local addresses carry a %scope suffix
    return NicAddress(family=family, address=address, prefixlen=_prefixlen(raw.netmask))


def _prefixlen(netmask: Optional[str]) -> Optional[int]:
    if not netmask:
        return None
    try:
        packed = ipaddress.ip_address(netmask).packed
    except ValueError:
        return None
    return sum(bin(byte).count("1") for byte in packed)


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def _state(value: Optional[str]) -> Optional[str]:
    """sysfs writes '4: ACTIVE' and '5: LinkUp'; keep the name."""
    if value is None:
        return None
    return value.split(":", 1)[-1].strip() or None


def _netdev(device_dir: str, port_dir: str) -> Optional[str]:
    # RoCE ports name their netdev in the GID table; IPoIB and RoCE HCAs also list it under device/net.
    ndev = _read(os.path.join(port_dir, "gid_attrs", "ndevs", "0"))
    if ndev:
        return ndev
    try:
        names = sorted(os.listdir(os.path.join(device_dir, "device", "net")))
    except OSError:
        return None
    return names[0] if names else None
