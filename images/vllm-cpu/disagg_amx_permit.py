"""Ask Linux once, at interpreter start, for permission to use AMX tile data (loaded from disagg-amx-permit.pth).

vLLM CPU picks AMX attention kernels for bf16 on processors that have AMX, but Linux lets a process execute AMX
instructions only after `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`. A prefill engine gets that
permission indirectly (oneDNN asks for its large GEMMs); a decode-only engine never asks and its worker dies with
SIGILL on its first decode step. Asking here fixes that for every process of the engine without changing its
command line. Where the call is unsupported (no AMX, older kernels, other architectures) it fails with an error
code that is ignored: the request is harmless there.
"""

from __future__ import annotations

import ctypes
import platform

SYS_ARCH_PRCTL = 158  # x86_64 system call number
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18


def request_amx_permission() -> int:
    """Returns the system call's result: 0 when granted, -1 where it is refused or unsupported."""
    if platform.machine() != "x86_64":
        return -1
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA))
    except (OSError, AttributeError):
        return -1


request_amx_permission()
