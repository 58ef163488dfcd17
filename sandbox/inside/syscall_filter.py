"""The seccomp filter every agent and verifier process runs under, in every backend.

Stdlib-only and Python >= 3.9: the supervisor installs it in the phase's process right before
``execve`` (after ``no_new_privs``, so no capability is needed). It is a classic BPF program
that denies, with ``EPERM``, the kernel surface an evaluated agent never needs and an escape
usually does:

- new user namespaces (``unshare``/``clone`` with ``CLONE_NEWUSER``) and joining namespaces
  (``setns``); ``clone3`` answers ``ENOSYS`` so libc falls back to ``clone``, whose flags the
  filter can read;
- ``mount``, ``umount2``, ``pivot_root``, the new mount API (``fsopen``, ``fsmount``,
  ``move_mount``, ``open_tree``, ...);
- ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring_*``;
- the kernel keyring (``keyctl``, ``add_key``, ``request_key``);
- kernel modules (``init_module``, ``finit_module``, ``delete_module``), ``kexec_*``,
  ``reboot``, ``swapon``/``swapoff``, ``open_by_handle_at``;
- ptrace of other processes (``PTRACE_ATTACH``, ``PTRACE_SEIZE``), ``process_vm_readv``,
  ``process_vm_writev``; ``PTRACE_TRACEME`` (a debugger started by the agent) still works.

It stacks on the engine's own profile where there is one (docker's default); under gVisor and
in the local sandbox it is the only one. Any other architecture, and the x32 ABI, is refused:
``install`` fails closed and the phase never runs unfiltered.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from typing import Dict, List, Tuple

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K

RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
RET_KILL_PROCESS = 0x80000000

# struct seccomp_data: int nr; __u32 arch; __u64 ip; __u64 args[6] (little endian here).
_OFF_NR = 0
_OFF_ARCH = 4
_OFF_ARG0_LOW = 16

CLONE_NEWUSER = 0x10000000
PTRACE_ATTACH = 16
PTRACE_SEIZE = 0x4206
X32_SYSCALL_BIT = 0x40000000

#: Syscalls denied outright, by name.
DENIED = (
    "mount",
    "umount2",
    "pivot_root",
    "setns",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "keyctl",
    "add_key",
    "request_key",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "open_by_handle_at",
    "process_vm_readv",
    "process_vm_writev",
)

# (audit arch, syscall numbers) per machine: only what the filter names.
_ARCHES: Dict[str, Tuple[int, Dict[str, int]]] = {
    "x86_64": (
        0xC000003E,
        {
            "mount": 165,
            "umount2": 166,
            "pivot_root": 155,
            "setns": 308,
            "fsopen": 430,
            "fsconfig": 431,
            "fsmount": 432,
            "fspick": 433,
            "move_mount": 429,
            "open_tree": 428,
            "mount_setattr": 442,
            "bpf": 321,
            "perf_event_open": 298,
            "userfaultfd": 323,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "keyctl": 250,
            "add_key": 248,
            "request_key": 249,
            "init_module": 175,
            "finit_module": 313,
            "delete_module": 176,
            "kexec_load": 246,
            "kexec_file_load": 320,
            "reboot": 169,
            "swapon": 167,
            "swapoff": 168,
            "open_by_handle_at": 304,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "unshare": 272,
            "clone": 56,
            "clone3": 435,
            "ptrace": 101,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "mount": 40,
            "umount2": 39,
            "pivot_root": 41,
            "setns": 268,
            "fsopen": 430,
            "fsconfig": 431,
            "fsmount": 432,
            "fspick": 433,
            "move_mount": 429,
            "open_tree": 428,
            "mount_setattr": 442,
            "bpf": 280,
            "perf_event_open": 241,
            "userfaultfd": 282,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "keyctl": 219,
            "add_key": 217,
            "request_key": 218,
            "init_module": 105,
            "finit_module": 273,
            "delete_module": 106,
            "kexec_load": 104,
            "kexec_file_load": 294,
            "reboot": 142,
            "swapon": 224,
            "swapoff": 225,
            "open_by_handle_at": 265,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "unshare": 97,
            "clone": 220,
            "clone3": 435,
            "ptrace": 117,
        },
    ),
}


class FilterUnavailable(Exception):
    """The filter cannot be built or installed here; the phase must not run."""


def _stmt(code: int, k: int) -> bytes:
    return struct.pack("HBBI", code, 0, 0, k)


def _jump(code: int, k: int, jt: int, jf: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def build(machine: str = "") -> bytes:
    """The filter program for ``machine`` (default: this one) as packed ``sock_filter`` s.

    Raises:
        FilterUnavailable: for an architecture the filter has no syscall table for.
    """
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        raise FilterUnavailable("no seccomp syscall table for architecture %r" % machine)
    arch, nr = _ARCHES[machine]
    eperm = RET_ERRNO | errno.EPERM
    prog: List[bytes] = [
        _stmt(_LD_W_ABS, _OFF_ARCH),
        _jump(_JEQ_K, arch, 1, 0),
        _stmt(_RET_K, RET_KILL_PROCESS),
        _stmt(_LD_W_ABS, _OFF_NR),
    ]
    if machine == "x86_64":  # the x32 ABI would bypass every number below
        prog += [_jump(_JGE_K, X32_SYSCALL_BIT, 0, 1), _stmt(_RET_K, eperm)]
    for name in DENIED:
        prog += [_jump(_JEQ_K, nr[name], 0, 1), _stmt(_RET_K, eperm)]
    prog += [_jump(_JEQ_K, nr["clone3"], 0, 1), _stmt(_RET_K, RET_ERRNO | errno.ENOSYS)]
    # unshare(flags) and clone(flags, ...): refuse CLONE_NEWUSER in the first argument.
    for name in ("unshare", "clone"):
        prog += [
            _jump(_JEQ_K, nr[name], 0, 4),
            _stmt(_LD_W_ABS, _OFF_ARG0_LOW),
            _jump(_JSET_K, CLONE_NEWUSER, 0, 1),
            _stmt(_RET_K, eperm),
            _stmt(_LD_W_ABS, _OFF_NR),
        ]
    # ptrace(request, pid, ...): attaching to another process is refused.
    prog += [
        _jump(_JEQ_K, nr["ptrace"], 0, 5),
        _stmt(_LD_W_ABS, _OFF_ARG0_LOW),
        _jump(_JEQ_K, PTRACE_ATTACH, 1, 0),
        _jump(_JEQ_K, PTRACE_SEIZE, 0, 1),
        _stmt(_RET_K, eperm),
        _stmt(_LD_W_ABS, _OFF_NR),
    ]
    prog.append(_stmt(_RET_K, RET_ALLOW))
    return b"".join(prog)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(program: bytes) -> None:
    """Install ``program`` on the calling thread (``no_new_privs`` must already be set).

    Raises:
        FilterUnavailable: when the kernel refuses it (the phase must not run then).
    """
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    res = libc.prctl(
        ctypes.c_int(PR_SET_SECCOMP),
        ctypes.c_ulong(SECCOMP_MODE_FILTER),
        ctypes.byref(fprog),
        ctypes.c_ulong(0),
        ctypes.c_ulong(0),
    )
    if res != 0:
        err = ctypes.get_errno()
        raise FilterUnavailable("installing the seccomp filter failed: %s" % os.strerror(err))
