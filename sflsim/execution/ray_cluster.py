"""A Ray cluster checked before any point is submitted: Ray is installed, the address
answers as Ray's GCS, and some alive node has the CPUs and GPUs a point asks for (Ray
would otherwise retry for minutes, or hold the tasks forever).
"""

from __future__ import annotations

import os
import socket
from typing import Any

from sflsim.errors import SflsimError
from sflsim.text import plural

#: Seconds a Ray cluster address gets to accept a connection before the sweep gives up
#: (Ray itself would retry for minutes).
CONNECT_TIMEOUT_S = 5.0
#: The Ray addresses ``--address`` takes.
RAY_ADDRESSES = ("auto (the cluster this machine is part of), HOST:PORT of the head node "
                 "(as 'ray start --head' prints it, e.g. 10.0.0.1:6379), ray://HOST:10001, "
                 "or local")


def require_ray() -> Any:
    """The ``ray`` module.

    Raises:
        SflsimError: Ray is not installed (says how to install it).
    """
    try:
        import ray
    except ImportError:
        raise SflsimError("the ray executor needs Ray: pip install 'sflsim[ray]'") from None
    return ray


def ray_unreachable(address: str, detail: str) -> SflsimError:
    """The error of a Ray that cannot be started or reached at ``address``."""
    return SflsimError(f"cannot start or reach Ray at {address}: {detail}")


def _host_port(address: str) -> tuple[str, str] | None:
    """``(host, port)`` of ``HOST:PORT`` or ``ray://HOST:PORT`` (IPv6 in brackets), else
    None (``auto``, ``local``, anything else: Ray reads it)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or "/" in host or not port.isdigit():
        return None
    return host, port


def check_ray_address(address: str | None, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse a Ray cluster address (``HOST:PORT``, ``ray://HOST:PORT``) whose host name
    does not resolve or where nothing accepts a connection within ``timeout_s`` seconds,
    before Ray would retry for minutes. ``auto``, ``local`` and None: nothing to check.

    Raises:
        SflsimError: ``cannot start or reach Ray at ADDRESS: ...``, saying why and which
            addresses are valid.
    """
    target = _host_port(address) if address and address not in ("auto", "local") else None
    if target is None:
        return
    host, port = target
    if not 1 <= int(port) <= 65535:
        detail = f"port {port} is not a TCP port (1 to 65535)"
    else:
        try:
            with socket.create_connection((host, int(port)), timeout=timeout_s) as conn:
                # with TLS (RAY_USE_TLS) the GCS wants a TLS greeting first: Ray decides
                answer = None if _truthy(os.environ.get("RAY_USE_TLS")) else _http2_answer(conn)
            if answer is None or answer[3:4] == b"\x04":  # silence: Ray decides
                return
            said = f"answered {answer[:16]!r}" if answer else "closed the connection"
            detail = (f"{host}:{port} accepts connections but is not Ray's GCS (a gRPC server "
                      f"answers with an HTTP/2 SETTINGS frame; it {said}); the dashboard port, "
                      f"8265, is not the cluster's address: the head's GCS port is 6379 unless "
                      f"'ray start --head --port' said otherwise")
        except socket.gaierror:
            detail = f"the host name {host!r} does not resolve"
        except TimeoutError:
            detail = f"{host}:{port} did not answer within {timeout_s:g} s"
        except OSError as exc:
            detail = f"nothing accepts connections at {host}:{port} ({exc.strerror or exc})"
    raise ray_unreachable(address, f"{detail}; is the cluster up ('ray status' on its head "
                                   f"node)? --address takes {RAY_ADDRESSES}")


#: The client's HTTP/2 connection preface and an empty SETTINGS frame (RFC 9113 §3.4):
#: a gRPC server such as Ray's GCS answers with a SETTINGS frame (type 0x04, byte 3).
_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _http2_answer(conn: socket.socket) -> bytes | None:
    """The first bytes a server sends back to an HTTP/2 client's greeting on ``conn``
    (its timeout applies), ``b""`` if it closed, or None if it said nothing in time."""
    try:
        conn.sendall(_HTTP2_HELLO)
        return conn.recv(64)
    except TimeoutError:
        return None
    except OSError:
        return b""


def _node_text(resources: dict[str, float]) -> str:
    cpus, gpus = resources.get("CPU", 0.0), resources.get("GPU", 0.0)
    return f"{plural(cpus, 'CPU', spec='g')}, {plural(gpus, 'GPU', spec='g')}"


def check_ray_resources(ray: Any, where: str, cpus_per_point: float, gpus_per_point: float,
                        local: bool = False) -> None:
    """Refuse a sweep whose points ask for more CPUs or GPUs than any alive node of the
    Ray cluster has (Ray would hold such tasks forever); what a node has comes from
    ``ray.nodes()``.

    Args:
        ray: the ``ray`` module, initialised.
        where: the cluster in the message (``the Ray cluster at head:6379``).
        cpus_per_point, gpus_per_point: what each point's task asks for.
        local: a local Ray that this sweep started (its CPUs come from ``--workers``).

    Raises:
        SflsimError: naming the option, the value and what the nodes have.
    """
    try:
        nodes = [dict(n.get("Resources") or {}) for n in ray.nodes()
                 if n.get("Alive", n.get("alive", True))]
    except Exception:  # noqa: BLE001  (a Ray without node information: Ray decides)
        return
    eps = 1e-9

    def fits(node: dict[str, float]) -> bool:
        return (node.get("CPU", 0.0) + eps >= cpus_per_point
                and node.get("GPU", 0.0) + eps >= gpus_per_point)

    if any(fits(node) for node in nodes):
        return
    if not nodes:
        raise SflsimError(f"{where} has no node that is alive; start one ('ray start') or "
                          f"choose another --address")
    kinds: dict[str, int] = {}
    for node in nodes:
        kinds[_node_text(node)] = kinds.get(_node_text(node), 0) + 1
    have = "; ".join(text if n == 1 else f"{n} x {text}" for text, n in kinds.items())
    have = f"{plural(len(nodes), 'node')}: {have}"
    most_cpus = max(node.get("CPU", 0.0) for node in nodes)
    most_gpus = max(node.get("GPU", 0.0) for node in nodes)
    gpus, cpus = f"--gpus-per-point {gpus_per_point:g}", f"--cpus-per-point {cpus_per_point:g}"
    if gpus_per_point > most_gpus + eps and most_gpus == 0:
        message = (f"{gpus}: no node of {where} has a GPU ({have}); valid: --gpus-per-point 0 "
                   f"(the default) with --set training.device=cpu, or a cluster with GPU nodes")
    elif gpus_per_point > most_gpus + eps:
        message = (f"{gpus}: no node of {where} has {plural(gpus_per_point, 'GPU', spec='g')} "
                   f"({have}); valid: at most {most_gpus:g}")
    elif cpus_per_point > most_cpus + eps:
        more = " (a local Ray has --workers CPUs when --workers is above 1, else every core)" if local else ""
        message = (f"{cpus}: no node of {where} has {plural(cpus_per_point, 'CPU', spec='g')} "
                   f"({have}); valid: at most {most_cpus:g}{more}")
    else:
        best = max((node.get("CPU", 0.0) for node in nodes
                    if node.get("GPU", 0.0) + eps >= gpus_per_point), default=0.0)
        message = (f"{cpus} with {gpus}: no node of {where} has both ({have}); valid: "
                   f"--cpus-per-point at most {best:g} with {gpus}")
    raise SflsimError(f"{message}; no point was run")
