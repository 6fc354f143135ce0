"""The errors of the state API under Ray's names (``ray.util.state.exception``), so
``except RayStateApiException`` in Ray code catches what meshrt raises."""

from __future__ import annotations


class RayStateApiException(Exception):
    """A state API request that could not be answered as asked."""


class StateFilterError(RayStateApiException, ValueError):
    """``filters=`` names a field the rows do not have, or an operator other than '='
    and '!=' (also a ValueError: the argument is wrong)."""
