"""torch.distributed bring-up for a ProcMesh, inside each of its processes.

The driver picks the rendezvous (rank 0's host and a free port) and sends every
process its env (RANK, WORLD_SIZE, LOCAL_RANK ...); each process then starts the
process group and builds a torch DeviceMesh whose dim names are the mesh's, so DDP,
FSDP and DTensor code runs unchanged inside actors.
"""

from __future__ import annotations

import ipaddress
import os
import socket

from .._private.addresses import local_ip_towards

_device_mesh = None


def bring_up(backend: str | None, labels: tuple, sizes: tuple) -> str:
    """Start the default process group from the env and build the DeviceMesh."""
    global _device_mesh
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available() and torch.cuda.device_count() > 0
    if backend is None:
        backend = "nccl" if cuda else "gloo"
    if cuda:
        # Each mesh process sees its own GPU(s) through CUDA_VISIBLE_DEVICES.
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
    if backend == "gloo":
        _pin_gloo_interface()
    if not dist.is_initialized():
        dist.init_process_group(backend, rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]))
    from torch.distributed.device_mesh import init_device_mesh

    device_type = "cuda" if backend == "nccl" else "cpu"
    _device_mesh = init_device_mesh(device_type, tuple(sizes), mesh_dim_names=tuple(labels))
    return backend


def _pin_gloo_interface() -> None:
    """Across hosts, gloo picks the address it gives its peers from this host's name,
    which often resolves to loopback (127.0.1.1 in Debian's /etc/hosts) or not at all:
    peers on other hosts are then told to dial 127.0.0.1 and the group never forms.
    Unless the user chose (``GLOO_SOCKET_IFNAME``), gloo uses the interface this process
    reaches the rendezvous through."""
    if os.environ.get("GLOO_SOCKET_IFNAME"):
        return
    master = os.environ["MASTER_ADDR"]
    try:
        if ipaddress.ip_address(master).is_loopback:
            return  # (every rank on this machine)
    except ValueError:
        pass  # (a host name)
    name = _interface_towards(master)
    if name is not None:
        os.environ["GLOO_SOCKET_IFNAME"] = name


def _interface_towards(host: str) -> str | None:
    """The name of the IPv4 interface whose address this host uses to reach ``host``."""
    import fcntl
    import struct

    local = local_ip_towards(host)
    if local is None:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _index, name in socket.if_nameindex():
            try:  # SIOCGIFADDR: the interface's IPv4 address
                packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            if socket.inet_ntoa(packed[20:24]) == local:
                return name
    return None


def device_mesh():
    """This process's torch DeviceMesh, dims named as the mesh's (after
    ``await procs.init_torch_distributed()``)."""
    if _device_mesh is None:
        raise RuntimeError(
            "meshrt.device_mesh() is only available inside a mesh process after "
            "`await procs.init_torch_distributed()` was called on its ProcMesh"
        )
    return _device_mesh


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now, for the rendezvous (rank 0 binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
