"""The rank side of the PyTorch tests: a recorder that prints one line per check (the format
harness.py reads), and the evidence of which libnccl a process really runs.

Evidence, strongest first: every libnccl file mapped into the process (/proc/self/maps) has our
file's bytes; our own INFO lines (`NCCL INFO Purlin ...`, `NCCL INFO SM datapath: rank ...`) are in
the process's NCCL_DEBUG_FILE. The version alone proves nothing: ours reports the ABI version of
the nccl.h it was built against, which can equal the wheel's.
"""
from __future__ import annotations

import faulthandler
import hashlib
import os
import sys
import time
import traceback
from pathlib import Path


class CheckFailed(Exception):
    """A check's expectation did not hold; the message says how."""


class SkipCheck(Exception):
    """A check that cannot run here; the message says why."""


class Checks:
    """Runs named checks and prints START/PASS/FAIL/SKIP lines.

    `lenient` (the gloo self-check) turns a backend's RuntimeError or ValueError into SKIP: gloo
    lacks some operations and types, and that mode checks the tests, not a backend."""

    def __init__(self, lenient: bool = False):
        self.lenient = lenient
        self.passed = 0
        self.failed = 0
        self.skipped = 0

    @staticmethod
    def emit(line: str) -> None:
        print(line, flush=True)

    def note(self, text: str) -> None:
        self.emit(f"NOTE {text}")

    def run(self, name: str, fn, *args, **kwargs):
        """Runs fn(*args); it passes unless it raises. A string it returns is the PASS detail."""
        self.emit(f"START {name}")
        try:
            detail = fn(*args, **kwargs)
        except SkipCheck as e:
            self.skipped += 1
            self.emit(f"SKIP {name} :: {e}")
            return None
        except CheckFailed as e:
            self.failed += 1
            self.emit(f"FAIL {name} :: {e}")
            return None
        except Exception as e:  # noqa: BLE001 - a check reports anything it raises
            if self.lenient and isinstance(e, (RuntimeError, ValueError)):
                self.skipped += 1
                self.emit(f"SKIP {name} :: not available with this backend: {_one_line(e)}")
                return None
            self.failed += 1
            self.emit(f"FAIL {name} :: {type(e).__name__}: {_one_line(e)}")
            traceback.print_exc(file=sys.stderr)
            return None
        self.passed += 1
        self.emit(f"PASS {name}" + (f" :: {detail}" if isinstance(detail, str) and detail else ""))
        return True

    def digest(self, name: str, data: bytes) -> None:
        self.emit(f"DIGEST {name} {hashlib.sha256(data).hexdigest()}")

    def finish(self) -> int:
        self.emit(f"RESULT passed={self.passed} failed={self.failed} skipped={self.skipped}")
        return 1 if self.failed else 0


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:400] + ("..." if len(text) > 400 else "")


def arm_watchdog(seconds: float) -> None:
    """Prints every thread's Python stack to stderr if the rank is still running after `seconds`
    (the launcher kills it a little later), and on a fatal signal."""
    faulthandler.enable()
    faulthandler.dump_traceback_later(seconds, exit=False)


def rank_and_world() -> tuple[int, int]:
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def local_gpu(torch) -> int:
    """The GPU of this rank, as torchrun users pick it: LOCAL_RANK modulo the visible devices
    (one GPU: every rank shares it, under MPS)."""
    return int(os.environ.get("LOCAL_RANK", "0")) % max(1, torch.cuda.device_count())


# ---- which libnccl is this --------------------------------------------------------------------

_hashes: dict[str, str] = {}


def file_sha256(path: str | Path) -> str:
    key = str(path)
    if key not in _hashes:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _hashes[key] = h.hexdigest()
    return _hashes[key]


def mapped_libraries(stem: str = "libnccl") -> list[str]:
    """Paths of the mapped files of this process whose name starts with `stem`."""
    paths = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6:
                path = parts[5].strip()
                if Path(path.replace(" (deleted)", "")).name.startswith(stem) and path not in paths:
                    paths.append(path)
    return paths


def expect_ours_mapped(ours: str | Path, others_allowed: bool = False) -> str:
    """A libnccl with our bytes is mapped; unless `others_allowed`, every mapped libnccl is ours.

    Under LD_PRELOAD torch still loads the wheel's libnccl.so.2 itself (its Python start-up loads
    the nvidia wheels' libraries by path); ours then wins symbol resolution, which the "how loaded"
    check proves separately."""
    paths = mapped_libraries()
    if not paths:
        raise CheckFailed("no libnccl is mapped into this process")
    want = file_sha256(ours)
    foreign = [p for p in paths if p.endswith(" (deleted)") or file_sha256(p) != want]
    if len(foreign) == len(paths):
        raise CheckFailed(f"our libnccl is not mapped: {', '.join(foreign)} (ours: {ours})")
    if foreign and not others_allowed:
        raise CheckFailed(f"mapped libnccl not ours: {', '.join(foreign)} (ours: {ours})")
    return "mapped: " + ", ".join(paths)


def debug_file() -> Path | None:
    pattern = os.environ.get("NCCL_DEBUG_FILE")
    if not pattern:
        return None
    return Path(pattern.replace("%p", str(os.getpid())).replace("%h", os.uname().nodename.split(".")[0]))


def expect_our_log_lines(markers=("NCCL INFO Purlin ", "NCCL INFO SM datapath: rank")) -> str:
    """Our INFO lines are in this process's NCCL_DEBUG_FILE (NCCL_DEBUG=INFO)."""
    path = debug_file()
    if path is None:
        raise SkipCheck("NCCL_DEBUG_FILE is not set")
    deadline = time.monotonic() + 5  # lines are flushed as written; allow for a slow file system
    text = ""
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        if all(m in text for m in markers):
            break
        time.sleep(0.2)
    missing = [m for m in markers if m not in text]
    if missing:
        raise CheckFailed(f"{path} lacks {missing} ({len(text.splitlines())} lines)")
    first = next(line for line in text.splitlines() if markers[0] in line)
    return first.split("NCCL INFO ", 1)[1][:120]


def global_provider(symbol: str) -> str | None:
    """The file whose `symbol` the process's global scope resolves to (dladdr), or None when no
    library in the global scope defines it."""
    import ctypes

    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

    process = ctypes.CDLL(None)
    try:
        address = ctypes.cast(getattr(process, symbol), ctypes.c_void_p)
    except AttributeError:
        return None
    dladdr = getattr(process, "dladdr", None) or ctypes.CDLL("libdl.so.2").dladdr
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    info = DlInfo()
    if not dladdr(address, ctypes.byref(info)) or not info.dli_fname:
        return None
    return os.path.realpath(info.dli_fname.decode())


def version_of(library: str | Path) -> int:
    """ncclGetVersion of the library at `library` (already loaded: the same file maps once)."""
    import ctypes

    lib = ctypes.CDLL(str(library))
    v = ctypes.c_int(0)
    result = lib.ncclGetVersion(ctypes.byref(v))
    if result != 0:
        raise CheckFailed(f"ncclGetVersion returned {result}")
    return v.value


def split_version(code: int) -> tuple[int, int, int]:
    """NCCL's version code since 2.9: major*10000 + minor*100 + patch."""
    return code // 10000, (code % 10000) // 100, code % 100
