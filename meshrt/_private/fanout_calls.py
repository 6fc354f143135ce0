"""One call to each of many actors on other hosts (a mesh call), sent from the
caller's thread.

The calls to each host go to its agent as one frame. Made one at a time and handed
to the core loop, each call cost the loop a turn of bookkeeping (queue it on its
ActorClient, check its arguments, send it), and the same loop reads every reply: it
was the driver's busiest thread, and a call to 32 actors over 4 agents waited on it.
Here the caller's thread makes every call's record, claims each call whose actor is
live with nothing of ours queued ahead (ActorClient.claim), and writes each host's
claimed calls as one frame itself. The others (the actor is starting or restarting,
calls of ours to it still wait on the loop, an argument is a ref not ready yet, the
actor is on this host) take the loop's path, in one turn for all of them.

Order: a claimed call is written before this function returns, behind whatever the
loop already queued on that connection, so the calls this thread makes later come after
it (calls made meanwhile by other threads have no order with it, as anywhere).
"""

from __future__ import annotations

import logging

from . import lanes

log = logging.getLogger("meshrt")


def call_actors(core, handles: list, method: str, calls: list) -> list:
    """``calls``: each actor's (args, inline, packed), as call_actor takes them. The
    calls made before one whose arguments cannot be packed are sent, then it raises."""
    made = []
    results = []
    names: dict = {}  # class name -> the calls' name (in errors, the timeline, the state API)
    try:
        for handle, (args, inline, packed) in zip(handles, calls, strict=True):
            class_name = handle._class_name
            if packed is not None:
                payload, deps, pins = packed, [], []
            else:
                payload, deps, pins = core.pack_args(args, {}, f"{class_name}.{method}.remote()", inline,
                                                     lend=not inline)
            name = names.get(class_name)
            if name is None:
                name = names[class_name] = f"{class_name}.{lanes.split(method)[0]}"
            pt, result = core.pending_call(handle, method, payload, deps, pins, 1, inline, name)
            made.append((pt, class_name))
            results.append(result)
    finally:
        if made:
            _dispatch(core, made)
    return results


def _dispatch(core, made: list) -> None:
    core.count_calls([pt.actor_id for pt, _ in made], 1)
    later: list = []
    try:
        _send_claimed(core, made, later)
    finally:  # (even when interrupted: every call made is written, or the loop sends it)
        if later:
            core.count_unsubmitted_calls([pt.actor_id for pt, _ in later], 1)
            core.io.post(_submit, core, later)


def _send_claimed(core, made: list, later: list) -> None:
    """Write the calls that may leave now, one frame per host, each as soon as its
    calls are claimed (a mesh's ranks go host by host: the first host's agent starts
    on its calls while this thread claims the next host's); the rest go to ``later``."""
    clients = core.actor_clients
    written: set = set()  # (ids of the calls written)
    conn, batch = None, []
    try:
        for pt, class_name in made:
            client = clients.get(pt.actor_id)
            claimed = client.claim(pt) if client is not None and not pt.deps else None
            if claimed is None:
                later.append((pt, class_name))
                continue
            if claimed[0] is not conn:
                _write(conn, batch, later, written)
                conn, batch = claimed[0], []
            batch.append((claimed[1], pt, class_name, client))
        _write(conn, batch, later, written)
    except BaseException:  # (a KeyboardInterrupt, say): the calls not written yet go to the loop
        waiting = {id(pt) for pt, _ in later}
        for pt, class_name in made:
            if id(pt) in written or id(pt) in waiting:
                continue
            client = clients.get(pt.actor_id)
            if client is None or client.unclaim(pt) or pt.client is None:
                later.append((pt, class_name))
        raise


def _write(conn, batch: list, later: list, written: set) -> None:
    """One frame of claimed calls; those that cannot be written go to ``later``."""
    if not batch:
        return
    try:  # (raises only before anything was written)
        conn.send_from_thread(*[msg for msg, _, _, _ in batch])
    except Exception:  # noqa: BLE001 - the loop's path takes them, and says what is wrong
        for _, pt, class_name, client in batch:
            if client.unclaim(pt):  # (else the loop has it already: the actor restarted or died)
                later.append((pt, class_name))
        return
    written.update(id(pt) for _, pt, _, _ in batch)


def _submit(core, later: list) -> None:
    """Loop: the calls that could not leave from the caller's thread, each on its own
    (one that fails to queue is logged, as a posted call's would be, and the rest go on)."""
    for pt, class_name in later:
        try:
            core._submit_actor_call(pt.actor_id, class_name, pt)
        except Exception:
            log.exception("meshrt: error queueing a call to %s", class_name)
