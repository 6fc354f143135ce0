"""Node labels and label selectors, as Ray's: a node carries ``{key: value}`` labels
(``init(labels=...)`` for the head, ``meshrt agent --labels`` for a host, and
``ray.io/node-id`` on every node); a task or actor asks for nodes by them with
``label_selector={"zone": "a" | "!a" | "in(a,b)" | "!in(a,b)"}`` or
``NodeLabelSchedulingStrategy(hard={...: In(...)}, soft={...})``.

A selector is kept as a sorted tuple of ``(key, op, values)``, op one of "in", "!in",
"exists", "!exists": plain data that travels in task and actor specs, and that
host_choice.py matches against each host's labels.
"""

from __future__ import annotations

import re
from typing import Any

NODE_ID_LABEL = "ray.io/node-id"
ACCELERATOR_LABEL = "ray.io/accelerator-type"
RESERVED_PREFIX = "ray.io/"

_NAME = re.compile(r"[a-zA-Z0-9]([a-zA-Z0-9_.-]{0,61}[a-zA-Z0-9])?")
_PREFIX = re.compile(rf"{_NAME.pattern}(\.{_NAME.pattern})*")
_SELECTOR = re.compile(rf"(?P<neg>!)?(?:(?:in)?\((?P<many>{_NAME.pattern}(?:, ?{_NAME.pattern})*)\)|(?P<one>{_NAME.pattern}))")


def of_node(own: dict, node_id: str, resources: dict) -> dict:
    """A node's labels: its own, its id, and its GPU model where it offers one (as Ray
    sets ``ray.io/accelerator-type``; meshrt's hosts offer ``accelerator_type:<model>``)."""
    found = dict(own)
    found[NODE_ID_LABEL] = node_id
    models = [name.split(":", 1)[1] for name in resources if name.startswith("accelerator_type:")]
    if len(models) == 1:
        found[ACCELERATOR_LABEL] = models[0]
    return found


def check_key(key: Any, what: str) -> str:
    if not isinstance(key, str):
        raise TypeError(f"{what}: label keys are str; got {key!r}")
    prefix, _, name = key.rpartition("/")
    if (prefix and (len(prefix) > 253 or not _PREFIX.fullmatch(prefix))) or not _NAME.fullmatch(name):
        raise ValueError(f"{what}: label key {key!r} is not valid: a name of up to 63 letters, digits, '-', '_' "
                         f"or '.', starting and ending with a letter or digit, after an optional DNS-style "
                         f"prefix and '/'")
    return key


def node_labels(labels: Any, what: str) -> dict:
    """A node's own labels, checked: str keys and values, none under ``ray.io/``."""
    if labels is None:
        return {}
    if not isinstance(labels, dict):
        raise TypeError(f"{what}: give labels as a dict of str to str, e.g. {{'zone': 'us-east1'}}; got {labels!r}")
    for key, value in labels.items():
        check_key(key, what)
        if key.startswith(RESERVED_PREFIX):
            raise ValueError(f"{what}: label key {key!r}: keys under {RESERVED_PREFIX!r} are meshrt's own "
                             f"(as Ray's); choose another")
        if not isinstance(value, str) or (value and not _NAME.fullmatch(value)):
            raise ValueError(f"{what}: label {key}={value!r}: a value is a str of up to 63 letters, digits, '-', "
                             f"'_' or '.', starting and ending with a letter or digit")
    return dict(labels)


def selector(label_selector: Any, what: str) -> tuple:
    """Ray's ``label_selector`` dict as a selector tuple."""
    if label_selector is None:
        return ()
    if not isinstance(label_selector, dict):
        raise TypeError(f"{what}: label_selector must be a dict of label key to value, e.g. "
                        f"{{'zone': 'in(a,b)'}}; got {label_selector!r}")
    out = []
    for key, text in label_selector.items():
        check_key(key, f"{what}: label_selector")
        found = _SELECTOR.fullmatch(text) if isinstance(text, str) else None
        if found is None:
            raise ValueError(f"{what}: label_selector[{key!r}]={text!r}: give a value ('a'), its negation ('!a'), "
                             f"or a set ('in(a,b)', '!in(a,b)')")
        values = tuple(v.strip() for v in found["many"].split(",")) if found["many"] else (found["one"],)
        out.append((key, "!in" if found["neg"] else "in", values))
    return tuple(sorted(out))


def as_label_selector(selector_: tuple) -> dict:
    """A selector tuple in Ray's ``label_selector`` words ("a", "!a", "in(a,b)"...), as
    list_tasks shows it (an Exists()/DoesNotExist() of NodeLabelSchedulingStrategy has none)."""
    out = {}
    for key, op, values in selector_:
        if op in ("in", "!in"):
            neg = "!" if op == "!in" else ""
            out[key] = f"{neg}{values[0]}" if len(values) == 1 else f"{neg}in({','.join(values)})"
    return out


def expressions(match: Any, what: str) -> tuple:
    """NodeLabelSchedulingStrategy's ``{key: In(...) | NotIn(...) | Exists() |
    DoesNotExist()}`` as a selector tuple."""
    from ..util.scheduling_strategies import DoesNotExist, Exists, In, NotIn

    if match is None:
        return ()
    if not isinstance(match, dict):
        raise TypeError(f"{what}: give a dict of label key to In(...), NotIn(...), Exists() or DoesNotExist(); "
                        f"got {match!r}")
    out = []
    for key, operator in match.items():
        check_key(key, what)
        if isinstance(operator, In):
            out.append((key, "in", tuple(operator.values)))
        elif isinstance(operator, NotIn):
            out.append((key, "!in", tuple(operator.values)))
        elif isinstance(operator, Exists):
            out.append((key, "exists", ()))
        elif isinstance(operator, DoesNotExist):
            out.append((key, "!exists", ()))
        else:
            raise TypeError(f"{what}: {key!r}: {operator!r} is not In(...), NotIn(...), Exists() or DoesNotExist()")
    return tuple(sorted(out))


def matches(labels: dict, wanted: tuple) -> bool:
    """Whether a node with ``labels`` satisfies every expression of ``wanted``."""
    for key, op, values in wanted:
        have = labels.get(key)
        if op == "in" and have not in values:
            return False
        if op == "!in" and have in values:
            return False
        if op == "exists" and have is None:
            return False
        if op == "!exists" and have is not None:
            return False
    return True


def first_met(hard: tuple, fallbacks: tuple, nodes: list[dict]) -> tuple | None:
    """``hard``, or else the first of ``fallbacks`` (Ray's fallback_strategy), that one
    of ``nodes`` (their labels) matches; None where none does."""
    for wanted in (hard, *fallbacks):
        if any(matches(node, wanted) for node in nodes):
            return wanted
    return None


def given(labels: dict) -> dict:
    """A node's labels but the ones meshrt sets (its id, its GPU model): what errors and
    ``meshrt status`` show beside the node."""
    return {k: v for k, v in labels.items() if not k.startswith(RESERVED_PREFIX)}


def by_node(nodes: list[dict]) -> dict:
    """``{node id (8 hex): its given labels}`` of nodes' labels, for errors."""
    return {n.get(NODE_ID_LABEL, "?")[:8]: given(n) for n in nodes}


def describe(wanted: tuple) -> str:
    """A selector as a user wrote it, for errors."""
    parts = []
    for key, op, values in wanted:
        if op in ("in", "!in"):
            text = values[0] if len(values) == 1 else f"in({','.join(values)})"
            parts.append(f"{key!r}: {('!' if op == '!in' else '') + text!r}")
        else:
            parts.append(f"{key!r}: {'DoesNotExist()' if op == '!exists' else 'Exists()'}")
    return "{" + ", ".join(parts) + "}"
