"""libnccl through ctypes, bound the way SGLang's and vLLM's `pynccl` wrappers bind it: by name,
with their argument types (ncclUniqueId a 128-byte struct passed by value; communicators,
windows, buffers and CUDA streams as void pointers; enums and results as int). Loading fails if
any of the functions is missing, as theirs does.
"""
from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_char_p, c_int, c_size_t, c_uint64, c_void_p

ncclResult_t = c_int
ncclComm_t = c_void_p
ncclWindow_t = c_void_p
cudaStream_t = c_void_p
buffer_type = c_void_p
ncclDataType_t = c_int
ncclRedOp_t = c_int

NCCL_WIN_DEFAULT = 0x00
NCCL_WIN_COLL_SYMMETRIC = 0x01
NCCL_SUSPEND_MEM = 0x01
# ncclCommMemStat_t (NCCL 2.30)
STAT_SUSPEND, STAT_SUSPENDED, STAT_PERSIST, STAT_TOTAL = 0, 1, 2, 3


class ncclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


# name: (result type, argument types)
SIGNATURES = {
    "ncclGetErrorString": (c_char_p, [ncclResult_t]),
    "ncclGetVersion": (ncclResult_t, [POINTER(c_int)]),
    "ncclGetUniqueId": (ncclResult_t, [POINTER(ncclUniqueId)]),
    "ncclCommInitRank": (ncclResult_t, [POINTER(ncclComm_t), c_int, ncclUniqueId, c_int]),
    "ncclAllReduce": (ncclResult_t, [buffer_type, buffer_type, c_size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                     cudaStream_t]),
    "ncclAllGather": (ncclResult_t, [buffer_type, buffer_type, c_size_t, ncclDataType_t, ncclComm_t, cudaStream_t]),
    "ncclReduceScatter": (ncclResult_t, [buffer_type, buffer_type, c_size_t, ncclDataType_t, ncclRedOp_t,
                                         ncclComm_t, cudaStream_t]),
    "ncclReduce": (ncclResult_t, [buffer_type, buffer_type, c_size_t, ncclDataType_t, ncclRedOp_t, c_int, ncclComm_t,
                                  cudaStream_t]),
    "ncclBroadcast": (ncclResult_t, [buffer_type, buffer_type, c_size_t, ncclDataType_t, c_int, ncclComm_t,
                                     cudaStream_t]),
    "ncclSend": (ncclResult_t, [buffer_type, c_size_t, ncclDataType_t, c_int, ncclComm_t, cudaStream_t]),
    "ncclRecv": (ncclResult_t, [buffer_type, c_size_t, ncclDataType_t, c_int, ncclComm_t, cudaStream_t]),
    "ncclGroupStart": (ncclResult_t, []),
    "ncclGroupEnd": (ncclResult_t, []),
    "ncclCommDestroy": (ncclResult_t, [ncclComm_t]),
    "ncclCommAbort": (ncclResult_t, [ncclComm_t]),
    "ncclMemAlloc": (ncclResult_t, [POINTER(c_void_p), c_size_t]),
    "ncclMemFree": (ncclResult_t, [c_void_p]),
    "ncclCommWindowRegister": (ncclResult_t, [ncclComm_t, buffer_type, c_size_t, POINTER(ncclWindow_t), c_int]),
    "ncclCommWindowDeregister": (ncclResult_t, [ncclComm_t, ncclWindow_t]),
    # vLLM's sleep mode (NCCL 2.29+): the communicator's memory given back and brought back.
    "ncclCommSuspend": (ncclResult_t, [ncclComm_t, c_int]),
    "ncclCommResume": (ncclResult_t, [ncclComm_t]),
    "ncclCommMemStats": (ncclResult_t, [ncclComm_t, c_int, POINTER(c_uint64)]),
}

REDOPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}


def nccl_type(dtype) -> int:
    """ncclDataType_t of a torch dtype."""
    import torch

    return {torch.int8: 0, torch.uint8: 1, torch.int32: 2, torch.int64: 4, torch.float16: 6, torch.float32: 7,
            torch.float64: 8, torch.bfloat16: 9}[dtype]


class NcclError(RuntimeError):
    pass


class Nccl:
    """The bound library. Methods return what the C function returns through pointers and raise
    NcclError on any result other than ncclSuccess."""

    def __init__(self, path: str):
        self.path = path
        self.lib = ctypes.CDLL(path)
        self.fn = {}
        for name, (restype, argtypes) in SIGNATURES.items():
            f = getattr(self.lib, name)  # AttributeError: the symbol is missing
            f.restype = restype
            f.argtypes = argtypes
            self.fn[name] = f

    def check(self, result: int, what: str) -> None:
        if result != 0:
            text = self.fn["ncclGetErrorString"](result)
            raise NcclError(f"{what} returned {result} ({text.decode() if text else '?'})")

    def error_string(self, result: int) -> str:
        return self.fn["ncclGetErrorString"](result).decode()

    def version(self) -> int:
        v = c_int(0)
        self.check(self.fn["ncclGetVersion"](byref(v)), "ncclGetVersion")
        return v.value

    def unique_id(self) -> ncclUniqueId:
        uid = ncclUniqueId()
        self.check(self.fn["ncclGetUniqueId"](byref(uid)), "ncclGetUniqueId")
        return uid

    def comm_init_rank(self, world: int, uid: ncclUniqueId, rank: int) -> c_void_p:
        comm = ncclComm_t()
        self.check(self.fn["ncclCommInitRank"](byref(comm), world, uid, rank), "ncclCommInitRank")
        return comm

    def all_reduce(self, send, recv, count, dtype, op, comm, stream) -> None:
        self.check(self.fn["ncclAllReduce"](send, recv, count, dtype, op, comm, stream), "ncclAllReduce")

    def all_gather(self, send, recv, count, dtype, comm, stream) -> None:
        self.check(self.fn["ncclAllGather"](send, recv, count, dtype, comm, stream), "ncclAllGather")

    def reduce_scatter(self, send, recv, count, dtype, op, comm, stream) -> None:
        self.check(self.fn["ncclReduceScatter"](send, recv, count, dtype, op, comm, stream), "ncclReduceScatter")

    def reduce(self, send, recv, count, dtype, op, root, comm, stream) -> None:
        self.check(self.fn["ncclReduce"](send, recv, count, dtype, op, root, comm, stream), "ncclReduce")

    def broadcast(self, send, recv, count, dtype, root, comm, stream) -> None:
        self.check(self.fn["ncclBroadcast"](send, recv, count, dtype, root, comm, stream), "ncclBroadcast")

    def send(self, buf, count, dtype, peer, comm, stream) -> None:
        self.check(self.fn["ncclSend"](buf, count, dtype, peer, comm, stream), "ncclSend")

    def recv(self, buf, count, dtype, peer, comm, stream) -> None:
        self.check(self.fn["ncclRecv"](buf, count, dtype, peer, comm, stream), "ncclRecv")

    def group_start(self) -> None:
        self.check(self.fn["ncclGroupStart"](), "ncclGroupStart")

    def group_end(self) -> None:
        self.check(self.fn["ncclGroupEnd"](), "ncclGroupEnd")

    def comm_destroy(self, comm) -> None:
        self.check(self.fn["ncclCommDestroy"](comm), "ncclCommDestroy")

    def comm_abort(self, comm) -> None:
        self.check(self.fn["ncclCommAbort"](comm), "ncclCommAbort")

    def mem_alloc(self, size: int) -> int:
        ptr = c_void_p()
        self.check(self.fn["ncclMemAlloc"](byref(ptr), size), "ncclMemAlloc")
        return ptr.value

    def mem_free(self, ptr: int) -> None:
        self.check(self.fn["ncclMemFree"](ptr), "ncclMemFree")

    def window_register(self, comm, ptr: int, size: int, flags: int = NCCL_WIN_COLL_SYMMETRIC) -> c_void_p:
        win = ncclWindow_t()
        self.check(self.fn["ncclCommWindowRegister"](comm, ptr, size, byref(win), flags), "ncclCommWindowRegister")
        return win

    def window_deregister(self, comm, win) -> None:
        self.check(self.fn["ncclCommWindowDeregister"](comm, win), "ncclCommWindowDeregister")

    def comm_suspend(self, comm, flags: int = NCCL_SUSPEND_MEM) -> None:
        self.check(self.fn["ncclCommSuspend"](comm, flags), "ncclCommSuspend")

    def comm_resume(self, comm) -> None:
        self.check(self.fn["ncclCommResume"](comm), "ncclCommResume")

    def mem_stat(self, comm, stat: int) -> int:
        value = c_uint64()
        self.check(self.fn["ncclCommMemStats"](comm, stat, byref(value)), "ncclCommMemStats")
        return value.value
