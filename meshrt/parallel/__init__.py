"""One API for data, fully-sharded, tensor and pipeline parallelism over a mesh.

    plan = parallel.plan(model_fn, mesh, sample_batch, strategy="auto")
    trainer = parallel.Trainer(model_fn, mesh, plan, optimizer=..., loss_fn=...)
    loss = await trainer.step(batch)
    trainer = parallel.Trainer(parallel.lightning(MyLightningModule), mesh, plan)

PyTorch's own machinery does the work (DDP, FSDP2 ``fully_shard``, DTensor
``parallelize_module``); this package chooses the layout, brings the processes up to
match and drives them as one.
"""

from .auto import NoPlanError
from .lightning_step import lightning
from .plan import Plan
from .planner import plan
from .strategy import Strategy
from .tensor_plan import TensorParallelError
from .trainer import Trainer

__all__ = ["NoPlanError", "Plan", "Strategy", "TensorParallelError", "Trainer", "lightning", "plan"]

for _name in __all__:
    _obj = globals()[_name]
    if hasattr(_obj, "__module__") and not callable(getattr(_obj, "__self__", None)):
        try:
            _obj.__module__ = __name__
        except (AttributeError, TypeError):
            pass
del _name, _obj
__all__.append("PartitionError")


def __getattr__(name: str):
    if name == "PartitionError":  # numba loads only when a pipeline is partitioned
        from .partition import PartitionError

        return PartitionError
    raise AttributeError(f"module 'meshrt.parallel' has no attribute {name!r}")
