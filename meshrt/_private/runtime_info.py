"""What ``meshrt.init()`` returns, in place of Ray's RayContext."""

from __future__ import annotations

from typing import Any


class RuntimeInfo(dict):
    """What ``init`` returns: a dict (Ray's ``address_info``) with attribute access."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def address_info(self) -> dict:
        return dict(self)

    @property
    def dashboard_url(self) -> None:
        """Ray's context has one; meshrt serves no dashboard (``meshrt status`` and the state API)."""
        return None

    def disconnect(self) -> None:
        """Ray's name for ``shutdown()`` on its context."""
        from .driver import shutdown

        shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.disconnect()
