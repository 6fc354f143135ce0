"""Torch CPU tensors through pickle protocol 5: their bytes travel out of band.

torch's own pickling copies storage bytes into the pickle stream. This reducer
hands pickle the tensor's memory as one out-of-band buffer instead, so a large
tensor is copied once into the shared-memory store and comes back as a tensor over
the stored pages (zero-copy). Every dtype works, bfloat16 included (the bytes are
viewed as uint8); a non-contiguous tensor is made contiguous once.

Received tensors are writable: in shared memory they are built over a private
copy-on-write mapping, so writing to one never changes the stored object; small
inline ones get their own bytes.

Only registered when torch is already imported: a process that never touched
torch never imports it here.
"""

from __future__ import annotations

import pickle
import warnings


def tensor_reducers() -> dict:
    import torch

    return {torch.Tensor: _reduce_tensor, torch.nn.Parameter: _reduce_tensor}


def _reduce_tensor(t):
    import torch

    plain = (
        t.device.type == "cpu"
        and t.layout == torch.strided
        and not t.is_quantized
        and not (t.requires_grad and not t.is_leaf)
        and type(t) in (torch.Tensor, torch.nn.Parameter)
    )
    if not plain:
        return t.__reduce_ex__(5)  # torch's own (it raises for what cannot travel)
    c = t.detach()
    if not c.is_contiguous():
        c = c.contiguous()
    dtype = str(c.dtype).rpartition(".")[2]
    shape = tuple(c.shape)
    is_param = isinstance(t, torch.nn.Parameter)
    if c.numel() == 0:
        return (_rebuild_empty, (dtype, shape, t.requires_grad, is_param))
    raw = c.reshape(-1).view(torch.uint8).numpy()
    return (_rebuild_tensor, (pickle.PickleBuffer(raw), dtype, shape, t.requires_grad, is_param))


def _rebuild_tensor(buf, dtype: str, shape: tuple, requires_grad: bool, is_param: bool):
    import torch

    from .serialization import writable_twin

    memory = writable_twin(buf)
    if memory is None:
        view = memoryview(buf)
        memory = buf if not view.readonly else bytearray(view)  # (writable: a value owned, see serialization)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # copy-on-write memory: writes stay private
        t = torch.frombuffer(memory, dtype=torch.uint8)
    t = t.view(getattr(torch, dtype)).reshape(shape)
    if is_param:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(requires_grad) if requires_grad else t


def _rebuild_empty(dtype: str, shape: tuple, requires_grad: bool, is_param: bool):
    import torch

    t = torch.empty(shape, dtype=getattr(torch, dtype))
    if is_param:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(requires_grad) if requires_grad else t
