"""``accelerator_type=``: a task or actor runs only on a node with that GPU model (a node
offers ``accelerator_type:<model>``; here declared by hand, as on a machine without GPUs)."""
import pytest

import meshrt as ray
from meshrt.util.accelerators import NVIDIA_H100

pytestmark = pytest.mark.timeout(120)


@ray.remote
def where():
    return "ran"


@ray.remote(accelerator_type=NVIDIA_H100)
class Trainer:
    def step(self):
        return 1


def test_accelerator_type_matches_the_node():
    ray.init(num_cpus=2, resources={"accelerator_type:H100": 1})
    try:
        assert ray.cluster_resources()["accelerator_type:H100"] == 1
        assert ray.get(where.options(accelerator_type=NVIDIA_H100).remote()) == "ran"
        assert ray.get(Trainer.remote().step.remote()) == 1
    finally:
        ray.shutdown()
