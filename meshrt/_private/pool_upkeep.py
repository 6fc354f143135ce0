"""The default task pool's size over time: started a moment after init, trimmed when idle.

Mixed into the Controller. The pool starts ``PRESTART_DELAY_S`` after init rather than
at it: forked (and starting up) at init, its processes held up whatever the program
asked for at once, a mesh's processes say, on the same cores (each fork and start-up
costs milliseconds; spawning 4 mesh processes took ~12 ms longer here). Idle pool
processes beyond ``prestart`` leave after ``IDLE_TRIM_S``.
"""

from __future__ import annotations

import time

from . import messages as m

IDLE_TRIM_S = 30.0
PRESTART_DELAY_S = 0.25


class PoolUpkeep:
    """Needs from its host: loop, config, workers, scheduler_of, stopping, _start_workers."""

    def start_pool_upkeep(self) -> None:
        self._prestart_timer = self.loop.call_later(PRESTART_DELAY_S, self._prestart)
        self._trim_timer = self.loop.call_later(IDLE_TRIM_S, self._trim_idle)

    def default_pool_size(self) -> int:
        """Processes of the head's default task pool, started or starting, not leaving."""
        return sum(1 for w in self.workers.values()
                   if w.kind == "task" and w.pool_key == () and w.state != "exiting" and not w.host)

    def _prestart(self) -> None:
        """The default pool up to ``prestart`` processes (tasks may have started some)."""
        self._prestart_timer = None
        missing = self.config.get("prestart", 0) - self.default_pool_size()
        if missing > 0 and not self.stopping:
            self._start_workers((), missing)

    def _trim_idle(self) -> None:
        now = time.monotonic()
        keep = self.config.get("prestart", 0)
        idle = [w for w in self.workers.values() if w.kind == "task" and w.state == "idle"]
        # (``prestart`` is the head's default pool: other pools' and hosts' idle workers all go in time)
        kept = [w for w in idle if not w.host and w.pool_key == ()][:keep]
        for w in [w for w in idle if w not in kept]:
            if now - w.idle_since > IDLE_TRIM_S:
                self.scheduler_of(w.host).worker_busy_or_gone(w.id, w.pool_key)
                w.state = "exiting"
                w.conn.send(m.Exit("idle"))
        self._trim_timer = self.loop.call_later(IDLE_TRIM_S, self._trim_idle)
