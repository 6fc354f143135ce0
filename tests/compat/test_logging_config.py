"""``ray.LoggingConfig``: init(logging_config=...) sets how the driver and workers log;
a task that logs through the logging module still runs and returns."""
import logging

import pytest

import meshrt as ray

pytestmark = pytest.mark.timeout(120)


@ray.remote
def log_and_add(a, b):
    logging.getLogger(__name__).info("adding %s and %s", a, b, extra={"step": 1})
    return a + b


def test_logging_config_is_taken_by_init():
    ray.init(num_cpus=2, logging_config=ray.LoggingConfig(encoding="JSON", log_level="INFO"))
    try:
        assert ray.get(log_and_add.remote(2, 3)) == 5
    finally:
        ray.shutdown()
    ray.init(num_cpus=2, logging_config=ray.LoggingConfig(encoding="TEXT", log_level="DEBUG",
                                                          additional_log_standard_attrs=["name"]))
    try:
        assert ray.get(log_and_add.remote(1, 1)) == 2
    finally:
        ray.shutdown()


def test_an_unknown_encoding_is_refused():
    with pytest.raises(ValueError):
        ray.LoggingConfig(encoding="XML")
