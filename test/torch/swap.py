"""Our libnccl.so.2 standing in place of the wheel's, with no LD_PRELOAD, as a container build
would put it.

torch's libtorch_cuda.so finds libnccl.so.2 through DT_RPATH `$ORIGIN/../../nvidia/nccl/lib`,
which LD_LIBRARY_PATH does not override. Two ways to put ours there:

- mirror (leaves the installation alone): a scratch tree with the layout of site-packages for
  `torch`, `nvidia` and every other folder torch's libraries name in their RPATH: real folders,
  a symbolic link per file, and a copy of ours in place of `nvidia/nccl/lib/libnccl.so.2`.
  Python imports torch from it first (PYTHONPATH). The loader expands $ORIGIN from the path it
  opened a library by, without resolving links, and the kernel resolves `..` in the real
  folders of the mirror: the RPATH leads into the mirror, to our file.
- in place (for a machine that is thrown away afterwards): the wheel's file is backed up beside
  itself as `libnccl.so.2.purlin-backup` and replaced by ours; `restore` puts it back.

Either way a probe process imports torch and lists the libnccl files it mapped.

Usage: python3 swap.py info | probe | restore
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

BACKUP_SUFFIX = ".purlin-backup"

_DT_NEEDED, _DT_STRTAB, _DT_RPATH, _DT_RUNPATH = 1, 5, 15, 29


def elf_dynamic(path: Path) -> dict[str, list[str]]:
    """NEEDED, RPATH and RUNPATH of a 64-bit little-endian ELF file (reads only its headers and
    dynamic section)."""
    out: dict[str, list[str]] = {"NEEDED": [], "RPATH": [], "RUNPATH": []}
    with open(path, "rb") as f:
        header = f.read(64)
        if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
            raise ValueError(f"{path} is not a 64-bit little-endian ELF file")
        (phoff,) = struct.unpack_from("<Q", header, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", header, 0x36)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
        loads, dynamic = [], None
        for i in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from("<IIQQQQQQ", table, i * phentsize)
            if p_type == 1:
                loads.append((p_vaddr, p_offset, p_filesz))
            elif p_type == 2:
                dynamic = (p_offset, p_filesz)
        if dynamic is None:
            return out
        f.seek(dynamic[0])
        raw = f.read(dynamic[1])
        entries = []
        for j in range(0, len(raw) - 15, 16):
            tag, value = struct.unpack_from("<qQ", raw, j)
            if tag == 0:
                break
            entries.append((tag, value))
        strtab = next((v for t, v in entries if t == _DT_STRTAB), None)
        base = next((strtab - va + off for va, off, size in loads if strtab is not None and va <= strtab < va + size),
                    None)
        if base is None:
            return out

        def string(index: int) -> str:
            f.seek(base + index)
            data = b""
            while b"\0" not in data:
                chunk = f.read(256)
                if not chunk:
                    break
                data += chunk
            return data.split(b"\0", 1)[0].decode()

        names = {_DT_NEEDED: "NEEDED", _DT_RPATH: "RPATH", _DT_RUNPATH: "RUNPATH"}
        for tag, value in entries:
            if tag in names:
                out[names[tag]].append(string(value))
    return out


def search_dirs(library: Path) -> list[Path]:
    """The folders a library's RPATH (or RUNPATH) names, $ORIGIN expanded, lexically normalized."""
    dyn = elf_dynamic(library)
    dirs = []
    for entry in dyn["RPATH"] + dyn["RUNPATH"]:
        for part in entry.split(":"):
            if part:
                part = part.replace("${ORIGIN}", str(library.parent)).replace("$ORIGIN", str(library.parent))
                dirs.append(Path(os.path.normpath(part)))
    return dirs


class Layout:
    """Where torch is installed and which libnccl.so.2 its libtorch_cuda.so finds."""

    def __init__(self):
        spec = importlib.util.find_spec("torch")  # does not import torch
        if spec is None or not spec.submodule_search_locations:
            raise LookupError("torch is not installed")
        self.torch_dir = Path(spec.submodule_search_locations[0]).resolve()
        self.site = self.torch_dir.parent
        self.torch_cuda = self.torch_dir / "lib" / "libtorch_cuda.so"
        if not self.torch_cuda.exists():
            raise LookupError(f"{self.torch_cuda} does not exist (a torch without CUDA?)")
        found = [d / "libnccl.so.2" for d in search_dirs(self.torch_cuda) if (d / "libnccl.so.2").exists()]
        if not found:
            raise LookupError(f"no libnccl.so.2 in the RPATH of {self.torch_cuda}: {search_dirs(self.torch_cuda)}")
        self.wheel_nccl = found[0]

    def tops(self) -> list[str]:
        """Top-level folders of site-packages that torch's libraries reach through their RPATH."""
        tops = {"torch"}
        for lib in sorted((self.torch_dir / "lib").glob("*.so*")):
            if lib.is_symlink() or not lib.is_file():
                continue
            try:
                dirs = search_dirs(lib)
            except (ValueError, OSError):
                continue
            for d in dirs:
                try:
                    tops.add(d.relative_to(self.site).parts[0])
                except (ValueError, IndexError):
                    pass
        return sorted(t for t in tops if (self.site / t).is_dir())

    def describe(self) -> dict:
        return {"site": str(self.site), "libtorch_cuda": str(self.torch_cuda),
                "rpath": [str(d) for d in search_dirs(self.torch_cuda)], "wheel_nccl": str(self.wheel_nccl),
                "mirrored_folders": self.tops()}


def _link(src: Path, dst: Path, site: Path, tops: list[str]) -> None:
    """dst -> src; a link inside the mirrored folders keeps pointing inside the mirror."""
    if src.is_symlink():
        target = os.readlink(src)
        real = Path(os.path.normpath(src.parent / target))
        inside = any(real.is_relative_to(site / t) for t in tops)
        os.symlink(target if inside and not os.path.isabs(target) else real, dst)
    else:
        os.symlink(src, dst)


def build_mirror(layout: Layout, ours: Path, scratch: Path) -> Path:
    """The scratch site-packages (see the module doc); returns its path."""
    tops = layout.tops()
    mirror = scratch / "site-packages"
    for top in tops:
        for dirpath, dirnames, filenames in os.walk(layout.site / top):
            here = Path(dirpath)
            rel = here.relative_to(layout.site)
            (mirror / rel).mkdir(parents=True, exist_ok=True)
            linked_dirs = [d for d in dirnames if (here / d).is_symlink()]
            dirnames[:] = [d for d in dirnames if d not in linked_dirs]
            for name in filenames + linked_dirs:
                _link(here / name, mirror / rel / name, layout.site, tops)
    target = mirror / layout.wheel_nccl.relative_to(layout.site)
    if target.is_symlink() or target.exists():
        target.unlink()
    shutil.copy2(ours, target)
    return mirror


def swap_in_place(layout: Layout, ours: Path) -> Path:
    """Backs up the wheel's file (unless a backup from an interrupted run exists) and puts ours in
    its place. Returns the backup's path."""
    target = layout.wheel_nccl
    backup = target.with_name(target.name + BACKUP_SUFFIX)
    if not backup.exists():
        shutil.copy2(target, backup)
    staged = target.with_name(target.name + ".purlin-new")
    shutil.copy2(ours, staged)
    os.replace(staged, target)
    return backup


def restore(layout: Layout) -> bool:
    """Puts the wheel's file back if a backup exists; True if it did."""
    target = layout.wheel_nccl
    backup = target.with_name(target.name + BACKUP_SUFFIX)
    if not backup.exists():
        return False
    os.replace(backup, target)
    return True


PROBE = ("import json, torch\n"
         "maps = [l.split(None, 5) for l in open('/proc/self/maps')]\n"
         "paths = sorted({p[5].strip() for p in maps if len(p) == 6 and '/libnccl' in p[5]})\n"
         "print(json.dumps({'torch': torch.__file__, 'libnccl': paths}))\n")


def probe_env(pythonpath: Path | None = None) -> dict[str, str]:
    """The environment of a process that must find libnccl on its own: no libnccl preloaded."""
    env = dict(os.environ)
    preload = ":".join(p for p in env.get("LD_PRELOAD", "").split(":") if p and "libnccl" not in p)
    if preload:
        env["LD_PRELOAD"] = preload
    else:
        env.pop("LD_PRELOAD", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(pythonpath), env.get("PYTHONPATH", "")) if p)
    return env


def probe(env: dict[str, str]) -> dict:
    """Imports torch in a fresh process; returns torch's path and the libnccl files it mapped."""
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"import torch failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def scratch_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="purlin-swap-", dir=os.environ.get("PURLIN_SWAP_SCRATCH")))


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "info"
    layout = Layout()
    if command == "info":
        print(json.dumps(layout.describe(), indent=2))
    elif command == "probe":
        print(json.dumps(probe(probe_env()), indent=2))
    elif command == "restore":
        print(f"restored {layout.wheel_nccl}" if restore(layout) else f"nothing to restore at {layout.wheel_nccl}")
    else:
        print(__doc__.strip())
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except LookupError as e:
        print(f"swap: {e}")
        sys.exit(0 if sys.argv[1:2] == ["restore"] else 1)
