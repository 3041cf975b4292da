"""Copied into the real-engine venv by tests/real/env.sh: runs at every interpreter start in that venv.

Linux lets a process use AMX tiles only after it asks once with arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA).
vLLM CPU's bf16 attention kernel uses AMX where the processor has it; a prefill engine gets the permission through
oneDNN's GEMMs, a decode-only engine does not and dies with SIGILL on its first decode step. Asking here fixes that
without touching the engine's command line. Without AMX the call fails (EINVAL) and nothing changes.
"""

import contextlib
import ctypes

_SYS_ARCH_PRCTL = 158  # x86_64
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18

with contextlib.suppress(OSError, AttributeError):
    ctypes.CDLL(None, use_errno=True).syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA)
