"""Process probes from /proc (Linux): a process's memory, children, process groups and sockets.

Small on purpose; callers skip where /proc is missing."""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")


def available() -> bool:
    return (PROC / "self" / "status").exists()


def rss_bytes(pid: int) -> int:
    for line in (PROC / str(pid) / "status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _stat_fields(pid: str) -> list[str] | None:
    try:
        text = (PROC / pid / "stat").read_text()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: split after its closing parenthesis
    return text[text.rindex(")") + 2 :].split()


def alive(pid: int) -> bool:
    fields = _stat_fields(str(pid))
    return fields is not None and fields[0] != "Z"


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group `pgid`."""
    members = []
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (fields := _stat_fields(entry.name)) is not None:
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry.name))
    return members


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    fd_dir = PROC / str(pid) / "fd"
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def inet_sockets(pid: int) -> list[dict[str, str]]:
    """The process's TCP/UDP sockets (IPv4 and IPv6): local and remote address, state. Unix
    sockets (asyncio's self-pipe) are not network sockets and are left out."""
    inodes = _socket_inodes(pid)
    found = []
    for table in ("tcp", "tcp6", "udp", "udp6"):
        path = PROC / str(pid) / "net" / table
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[9] in inodes:
                found.append({"proto": table, "local": decode_address(fields[1]),
                              "remote": decode_address(fields[2]), "state": fields[3]})
    return found


def decode_address(hex_address: str) -> str:
    """/proc/net/tcp's `0100007F:1F90` -> `127.0.0.1:8080` (IPv6 as its 32 hex digits, converted)."""
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        address = ".".join(str(b) for b in raw[::-1])
    else:
        import ipaddress

        words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
        address = str(ipaddress.IPv6Address(words))
    return f"{address}:{int(port, 16)}"
