"""A torch tensor over memory torch did not allocate (ncclMemAlloc's), through a DLPack capsule
built with ctypes. The tensor does not own the memory: free it only after the tensor is gone.
"""
from __future__ import annotations

import ctypes

kDLCPU, kDLCUDA = 1, 2
_CODES = {"int": 0, "uint": 1, "float": 2, "bfloat": 4}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]

_CAPSULE_NAME = b"dltensor"
_live: dict[int, tuple] = {}  # address of a DLManagedTensor -> the ctypes objects it points into


@_Deleter
def _release(managed):
    # torch calls this when the tensor's storage goes away: drop our references to its structs.
    _live.pop(ctypes.addressof(managed.contents), None)


_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def _dl_type(dtype) -> DLDataType:
    import torch

    kind, bits = {torch.float32: ("float", 32), torch.float16: ("float", 16), torch.bfloat16: ("bfloat", 16),
                  torch.float64: ("float", 64), torch.int32: ("int", 32), torch.int64: ("int", 64),
                  torch.uint8: ("uint", 8), torch.int8: ("int", 8)}[dtype]
    return DLDataType(_CODES[kind], bits, 1)


def tensor_at(ptr: int, count: int, dtype, device_index: int | None):
    """A 1-D torch tensor of `count` elements of `dtype` at `ptr`, on CUDA device
    `device_index` (None: host memory)."""
    import torch.utils.dlpack

    shape = (ctypes.c_int64 * 1)(count)
    managed = DLManagedTensor()
    managed.dl_tensor.data = ptr
    managed.dl_tensor.device = DLDevice(kDLCPU, 0) if device_index is None else DLDevice(kDLCUDA, device_index)
    managed.dl_tensor.ndim = 1
    managed.dl_tensor.dtype = _dl_type(dtype)
    managed.dl_tensor.shape = shape
    managed.dl_tensor.strides = None  # compact
    managed.dl_tensor.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _release
    _live[ctypes.addressof(managed)] = (managed, shape)
    capsule = _PyCapsule_New(ctypes.addressof(managed), _CAPSULE_NAME, None)
    return torch.utils.dlpack.from_dlpack(capsule)
