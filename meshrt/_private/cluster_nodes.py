"""The cluster as Ray shows it: one node per host (the head and each agent's host).

Mixed into the Controller (which provides config, node, store, hosts, address,
tcp_address): ``meshrt.nodes()``, ``cluster_resources()``, ``available_resources()``,
and which host a ``NodeAffinitySchedulingStrategy`` names.
"""

from __future__ import annotations

from .. import exceptions as exc
from ..scheduler.resources import from_units
from .host_directory import node_ip


class ClusterNodes:
    def node_id_of_host(self, host_id: int) -> str:
        """The node id of host ``host_id`` (0: the head) for its workers' runtime context."""
        host = self.hosts.get(host_id) if host_id else None
        return host.node_id if host is not None else self.config["node_id"]

    def _joined_hosts(self) -> list:
        # (list() first: the driver's callers check a task's resources from their own thread)
        return [h for h in list(self.hosts.values()) if h.joined]

    def rpc_nodes(self, caller: int) -> list:
        c = self.config
        nodes = [_node(c["node_id"], True, self.node_ip(), c["hostname"], self.node.as_floats("total"),
                       self.address, self.labels)]
        for host in self.hosts.values():
            if host.checking:
                continue  # (not in the cluster until its UCX check is done: meshrt.hosts() agrees)
            nodes.append(_node(host.node_id, host.alive, host.listen_host, host.name, host.node.as_floats("total"),
                               f"host {host.id}", host.labels, _death(host)))
        return nodes

    def node_ip(self) -> str:
        """The head node's IP, as its processes' get_node_ip_address() says it."""
        return node_ip(self.tcp_address.removeprefix("tcp:").rsplit(":", 1)[0] if self.tcp_address else None)

    def labels_of_host(self, host_id: int) -> dict:
        """A host's node labels (0: the head's); read them, do not change them."""
        host = self.hosts.get(host_id) if host_id else None
        return host.labels if host is not None else self.labels

    def rpc_cluster_resources(self, caller: int) -> dict:
        return _summed([self.node.as_floats("total")] + [h.node.as_floats("total") for h in self._joined_hosts()])

    async def rpc_available_resources(self, caller: int) -> dict:
        usage = await self.store_service.call(self.store.usage)
        available = self.node.as_floats("available")
        # (the store's capacity is the configured size rounded up to whole pages)
        total = self.node.as_floats("total").get("object_store_memory", usage["capacity"])
        available["object_store_memory"] = max(0, min(total, usage["capacity"]) - usage["used"])
        return _summed([available] + [h.node.as_floats("available") for h in self._joined_hosts()])

    def rpc_host_of_node(self, caller: int, node_id: str, soft: bool, units: tuple, what: str) -> int:
        """The host an actor with affinity to ``node_id`` starts on: 0 for the head. Hard
        affinity to a host that is not in the cluster fails here, at the caller's line;
        soft affinity then goes where it would without one, as it does when that host
        lacks the free resources now (Ray's soft affinity runs elsewhere rather than wait)."""
        if node_id == self.config["node_id"]:
            return 0
        host = self.host_of_node_id(node_id)
        if host is not None and host.joined and (not soft or fits_now(host.node, units)):
            return host.id
        if soft:
            return self.rpc_host_for(caller, units, what)
        raise self.affinity_unmet(node_id, host)

    def host_of_node_id(self, node_id: str):
        """The agent's host of that node id (alive or not), or None."""
        return next((h for h in self.hosts.values() if h.node_id == node_id), None)

    @staticmethod
    def affinity_unmet(node_id: str, host) -> ValueError:
        """Why a hard affinity to ``node_id`` cannot be met: still joining, being shut
        down, left, or unknown."""
        if host is not None and host.alive and host.leaving:
            return ValueError(f"NodeAffinitySchedulingStrategy(node_id={node_id!r}): that node (host "
                              f"{host.name!r}) is being shut down (HostMesh.shutdown()); pick a live one "
                              "from meshrt.nodes(), or pass soft=True to run elsewhere")
        if host is not None and host.alive:
            return ValueError(f"NodeAffinitySchedulingStrategy(node_id={node_id!r}): that node (host "
                              f"{host.name!r}) is still joining (its UCX check); wait for it with "
                              "meshrt.hosts(min_hosts=...), or pass soft=True to run elsewhere")
        if host is not None:
            return ValueError(f"NodeAffinitySchedulingStrategy(node_id={node_id!r}): that node (host "
                              f"{host.name!r}) has left the cluster; pick a live one from meshrt.nodes(), "
                              "or pass soft=True to run elsewhere")
        return ValueError(f"NodeAffinitySchedulingStrategy(node_id={node_id!r}): no node of the cluster has "
                          "that id; meshrt.nodes() lists them ('NodeID'), or pass soft=True to run elsewhere")

    def hosts_able(self, units: tuple, what: str, unschedulable=exc.TaskUnschedulableError) -> list:
        """The joined agents' hosts that can ever give ``units``; when neither they nor the
        head can, ``unschedulable`` naming what no host has enough of."""
        joined = self._joined_hosts()
        hosts = [h for h in joined if h.node.infeasible(units) is None and not h.leaving]
        if not hosts and self.node.infeasible(units) is not None:
            nodes = [self.node] + [h.node for h in joined]
            for name, requested in units:  # (first, what no host has enough of)
                largest = max(node.total.get(name, 0) for node in nodes)
                if largest < requested:
                    raise unschedulable(what, name, from_units(requested), from_units(largest))
            raise unschedulable.on_no_single_node(what, {name: from_units(amount) for name, amount in units})
        return hosts


def _node(node_id: str, alive: bool, address: str, name: str, resources: dict, meshrt_address: str,
          labels: dict, death: tuple = (0, "")) -> dict:
    return {
        "NodeID": node_id, "Alive": alive, "NodeManagerAddress": address,
        "NodeManagerHostname": name, "NodeName": name, "Resources": resources,
        "MeshrtAddress": meshrt_address, "alive": alive, "Labels": dict(labels),
        "DeathReason": death[0], "DeathReasonMessage": death[1],
    }


# Ray's NodeDeathInfo reasons, as nodes() gives them
_EXPECTED_TERMINATION, _UNEXPECTED_TERMINATION = 1, 2


def _death(host) -> tuple:
    """(Ray's DeathReason, a sentence) for a host that left; (0, "") while it is alive."""
    if host.alive:
        return 0, ""
    if host.leaving:
        return _EXPECTED_TERMINATION, f"its agent {host.name!r} was shut down"
    return _UNEXPECTED_TERMINATION, f"its agent {host.name!r} {host.went or 'went away'}"


def _summed(tables: list) -> dict:
    total: dict = {}
    for table in tables:
        for name, amount in table.items():
            total[name] = total.get(name, 0.0) + amount
    return total


def fits_now(node, units: tuple) -> bool:
    """Could ``node`` give ``units`` now (without taking them)?"""
    alloc = node.try_acquire(units)
    if alloc is None:
        return False
    node.release(alloc)
    return True
