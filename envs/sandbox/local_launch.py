"""Start bubblewrap for the ``local`` backend as an unprivileged host user (stdlib only; run with ``python -I``).

Run as root, bubblewrap would map the sandbox's user to the host's root: a missed route (a program the
runner started, a kernel interface owned by root) would then act on the host as root. So, when started by
root, this launcher joins the sandbox's cgroup, then drops to :data:`HOST_UID` (``nobody``) for good before
it execs bubblewrap, which maps the sandbox's user to that uid. Folders the sandbox needs that ``nobody``
cannot reach (an interpreter under ``/root``, mode 700) are first bind-mounted, in a mount namespace private
to this launcher, onto a staging tmpfs it can reach; bubblewrap mounts them from there. Nothing of this is
visible on the host.

Where the sandbox has no cgroup (repogym not run as root, or no writable cgroup tree), the spec's ``rlimits``
are set on the launcher, so on bubblewrap and everything in the sandbox, with hard limits equal to soft
ones (no process inside can raise them): ``RLIMIT_AS`` (each process's address space: a memory hog gets
``MemoryError`` or a failed ``mmap``), ``RLIMIT_FSIZE``, ``RLIMIT_NOFILE`` (per process), and
``RLIMIT_NPROC``. The kernel counts RLIMIT_NPROC over every task (threads included) of the real uid, in and
out of the sandbox, so it is set to the number that uid runs now plus the sandbox's own limit: the
sandbox may start about ``pids`` more, but other sandboxes and processes of the same uid share the count
(more of theirs leave it less room; when some end, it gets more).

Usage: ``python -I local_launch.py SPEC_JSON -- bwrap ARGS...`` where the spec is
``{"procs": [cgroup.procs files], "stage": DIR, "binds": {"@STAGE<i>@": source}, "uid": UID, "rlimits":
{"pids": N, "memory": BYTES, "file_size": BYTES, "open_files": N}}`` (``rlimits`` only without a cgroup); each
``@STAGE<i>@`` placeholder in the arguments is replaced by the staged path of its source.
"""

import ctypes
import json
import os
import resource
import shutil
import sys

HOST_UID = 65534
CLONE_NEWNS = 0x00020000
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18


def _mount(libc, source, target, fstype, flags, data=None):
    if libc.mount(source.encode() if source else None, target.encode(), fstype.encode() if fstype else None,
                  flags, data.encode() if data else None) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} on {target}: {os.strerror(errno)}")


def _stage(spec, argv):
    """Bind every source of ``spec["binds"]`` into a private staging tmpfs; the arguments with staged paths."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS) failed")
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)  # nothing below reaches the host's mount table
    stage = spec["stage"]
    _mount(libc, "tmpfs", stage, "tmpfs", 0, "mode=755,size=64k")
    staged = {}
    for index, (placeholder, source) in enumerate(sorted(spec["binds"].items())):
        target = os.path.join(stage, str(index))
        os.mkdir(target, 0o755)
        _mount(libc, source, target, None, MS_BIND | MS_REC)
        staged[placeholder] = target
    return [staged.get(arg, arg) for arg in argv]


def tasks_of(uid):
    """How many tasks (threads count: RLIMIT_NPROC counts them) run with the real uid ``uid`` now."""
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as fh:
                fields = dict(line.split(":", 1) for line in fh if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                count += int(fields["Threads"])
        except (OSError, KeyError, ValueError):
            pass  # gone already
    return count


def set_rlimits(limits):
    """Set the sandbox's rlimits on this process (see the module docstring); hard limits only ever lowered."""
    wanted = {resource.RLIMIT_NPROC: tasks_of(os.getuid()) + int(limits["pids"]),
              resource.RLIMIT_AS: int(limits["memory"]), resource.RLIMIT_FSIZE: int(limits["file_size"]),
              resource.RLIMIT_NOFILE: int(limits["open_files"])}
    for which, value in wanted.items():
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))


def main():
    spec = json.loads(sys.argv[1])
    argv = sys.argv[sys.argv.index("--") + 1:]
    for procs in spec.get("procs", []):  # join the cgroup first, so no child of bubblewrap starts outside it
        with open(procs, "w") as fh:
            fh.write(str(os.getpid()))
    # Found while still root: after the drop, an interpreter under /root cannot import what execvp would
    # import lazily (os.get_exec_path imports warnings).
    program = shutil.which(argv[0]) or argv[0]
    uid = spec.get("uid")
    if uid is not None and os.geteuid() == 0:
        if spec.get("binds"):
            argv = _stage(spec, argv)
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # for good: no saved uid to return to
    if spec.get("rlimits"):  # after the drop: RLIMIT_NPROC counts the uid bubblewrap will run as
        set_rlimits(spec["rlimits"])
    argv = [spec.get("binds", {}).get(arg, arg) for arg in argv]  # not staged (not root): the sources themselves
    os.execv(program, argv)


if __name__ == "__main__":
    main()
