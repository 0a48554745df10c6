"""The sandbox's whole filesystem: a new root on one size-capped tmpfs.

It holds read-only bind mounts of the interpreter's files and nothing else of the host.
Standard library only.

Built by the runner as root of a fresh mount namespace (and PID 1 of a fresh PID
namespace), before it forks anything untrusted:

    /                tmpfs, `size` bytes in all, root-owned 0755
    <interpreter>    the executable, its shared libraries, the stdlib and lib-dynload,
                     each read-only at its host path (site-packages covered by an empty
                     read-only tmpfs)
    /dev             null, zero, random, urandom (bound from the host), fd/std* symlinks
    /dev/shm, /tmp   1777, on the root tmpfs
    /sandbox         the program's work directory (its uid, 0700), on the root tmpfs
    /proc            a fresh proc of the new PID namespace, hidepid=2

then `pivot_root` into it and detach the old root, so nothing of the host is reachable
by path any more and everything written (in total, not per file) counts against `size`
and disappears with the namespace.
"""

import ctypes
import os

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 4096, 8192, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME = 1024, 2048
ST_NOEXEC, ST_NOATIME, ST_NODIRATIME = 8, 1024, 2048
MNT_DETACH = 2

WORKDIR = "/sandbox"
DEVICES = ("null", "zero", "random", "urandom")
# Where the new root is assembled: any directory none of the bound paths lies under.
_STAGING = ("/tmp", "/mnt", "/var/tmp", "/srv", "/opt", "/media", "/home")
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "ppc64": 203,
                   "s390x": 217, "i686": 217, "i386": 217}

_libc = ctypes.CDLL(None, use_errno=True)


def _raise(what: str) -> None:
    err = ctypes.get_errno()
    raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, options: str = "") -> None:
    enc = lambda s: s.encode() if s else None   # noqa: E731
    if _libc.mount(enc(source), target.encode(), enc(fstype), ctypes.c_ulong(flags), enc(options)) != 0:
        _raise(f"mount {source or ''} on {target}")


def _bind_read_only(source: str, target: str) -> None:
    mount(source, target, None, MS_BIND)
    # A bind mount takes its flags only on a remount. Keep the source's noexec/atime
    # flags: a user namespace refuses to clear them (and we have no reason to).
    st = os.statvfs(source).f_flag
    keep = ((MS_NOEXEC if st & ST_NOEXEC else 0) | (MS_NOATIME if st & ST_NOATIME else 0)
            | (MS_NODIRATIME if st & ST_NODIRATIME else 0))
    mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | keep)


def under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _mkdirs(path: str) -> None:
    """Create `path` and missing parents 0755 (whatever the umask)."""
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    for d in reversed(missing):
        os.mkdir(d)
        os.chmod(d, 0o755)


def _touch(path: str) -> None:
    _mkdirs(os.path.dirname(path))
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))


def _pivot(new_root: str) -> None:
    os.chdir(new_root)
    nr = _SYS_PIVOT_ROOT.get(os.uname().machine)
    if nr is not None:
        # pivot_root(".", ".") stacks the old root on top of the new one; detaching it
        # leaves only the new root (pivot_root(2), "NOTES").
        if _libc.syscall(nr, b".", b".") != 0:
            _raise("pivot_root")
        if _libc.umount2(b".", MNT_DETACH) != 0:
            _raise("umount old root")
    else:   # unknown syscall number: move the new root over / (the old one stays, unreachable)
        mount(".", "/", None, MS_MOVE)
        os.chroot(".")
    os.chdir("/")


def build(layout: dict, size: int, owner_uid: int | None, owner_gid: int | None, proc: bool) -> str:
    """Build the root, pivot into it; returns the work directory (inside it)."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)   # nothing we mount propagates to the host
    dirs, files, hidden = layout["dirs"], layout["files"], layout["hidden"]
    needed = [*dirs, *files, *("/dev/" + d for d in DEVICES)]
    staging = next((s for s in _STAGING if os.path.isdir(s) and not os.path.islink(s)
                    and not any(under(p, s) for p in needed)), None)
    if staging is None:
        raise OSError(f"no directory to build the sandbox root in (tried {', '.join(_STAGING)})")
    mount("tmpfs", staging, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=755")
    new = staging.rstrip("/")
    for d in sorted(dirs):
        _mkdirs(new + d)
        _bind_read_only(d, new + d)
    for f in files:
        _touch(new + f)
        _bind_read_only(f, new + f)
    for h in hidden:
        mount("tmpfs", new + h, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=755")
    for d in DEVICES:
        _touch(f"{new}/dev/{d}")
        mount(f"/dev/{d}", f"{new}/dev/{d}", None, MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{new}/dev/{name}")
    for d, mode in (("/tmp", 0o1777), ("/dev/shm", 0o1777), ("/proc", 0o555), (WORKDIR, 0o700)):
        _mkdirs(new + d)
        os.chmod(new + d, mode)
    if owner_uid is not None:
        assert owner_gid is not None   # given together with the uid
        os.chown(new + WORKDIR, owner_uid, owner_gid)
    _pivot(new)
    if proc:
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")
    return WORKDIR
