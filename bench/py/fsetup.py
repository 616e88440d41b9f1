"""Filesystems under test: each on a loop device (direct I/O) over one
backing image in the scratch directory, formatted and mounted fresh for each
workload, then unmounted and detached.

The backing image is written in full once per run, before the first
filesystem, and no mkfs or mount discards it: every block then exists in the
host filesystem, as on a disk. Over a sparse image the first write of each
block also allocates it in the host filesystem, and the next flush commits
that allocation: on this machine a 4 KiB write plus flush (median of 1,000)
cost 240-400 us on fresh blocks against 140-240 us on blocks written
before, varying from run to run. That cost is an artefact of the
loop device, and it falls unevenly: a journal (ext4, XFS) is written by its
mkfs and then rewritten in place, while a write-anywhere log (tux3) or
copy-on-write tree (Btrfs) keeps writing blocks never written before.

`Env` remembers every loop device, mount and filesystem daemon this run
created (also in SCRATCH/state.json, so a later run can clean up after a run
that was killed outright) and undoes exactly those: it never detaches a loop
device or unmounts a filesystem it did not create.
"""

import json
import os
import shutil
import signal
import time

from util import CmdError, find_pids, pid_alive, run, say

# tux3-devfuse: tux3 served through /dev/fuse (`-o nouring`), beside tux3
# over io_uring; run only where the kernel has io_uring for FUSE (elsewhere
# tux3 itself goes through /dev/fuse). Not a peer.
FILESYSTEMS = ["tux3", "tux3-devfuse", "ext4", "ext4-fc", "xfs", "btrfs", "fuse2fs", "tmpfs"]
TUX3_MOUNTS = ("tux3", "tux3-devfuse")
PEERS = ["ext4", "ext4-fc", "xfs", "btrfs", "fuse2fs"]
LABEL = {"tux3": "tux3", "tux3-devfuse": "tux3 /dev/fuse", "ext4": "ext4", "ext4-fc": "ext4 fast_commit", "xfs": "XFS",
         "btrfs": "Btrfs", "fuse2fs": "fuse2fs", "tmpfs": "tmpfs"}
ALIASES = {"ext4fc": "ext4-fc", "ext4_fc": "ext4-fc", "fast_commit": "ext4-fc",
           "ext4-fast_commit": "ext4-fc", "fuse": "fuse2fs", "tux3-nouring": "tux3-devfuse",
           "devfuse": "tux3-devfuse"}
# No lazy inode-table or journal zeroing: it would write in the background
# during the workloads and spoil the device counters.
# No discard at mkfs (or, for Btrfs, at mount): a discard punches holes in
# the backing image, which would make it sparse again (see above).
EXT4_OPTS = ["-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard"]
MKFS = {
    "ext4": ["mkfs.ext4", "-F", "-q"] + EXT4_OPTS,
    "ext4-fc": ["mkfs.ext4", "-F", "-q", "-O", "fast_commit"] + EXT4_OPTS,
    "fuse2fs": ["mkfs.ext4", "-F", "-q"] + EXT4_OPTS,
    "xfs": ["mkfs.xfs", "-f", "-q", "-K"],
    "btrfs": ["mkfs.btrfs", "-f", "-q", "-K"],
}
MOUNT_OPTS = {"btrfs": ["-o", "nodiscard"]}
KERNEL_FS = {"ext4": "ext4", "ext4-fc": "ext4", "xfs": "xfs", "btrfs": "btrfs",
             "fuse2fs": "fuse", "tux3": "fuse", "tux3-devfuse": "fuse", "tmpfs": "tmpfs"}
# Debian package of each tool the suite may need.
PACKAGES = {"mkfs.ext4": "e2fsprogs", "mkfs.xfs": "xfsprogs", "mkfs.btrfs": "btrfs-progs",
            "btrfs": "btrfs-progs",
            "fuse2fs": "fuse2fs", "dbench": "dbench", "fio": "fio", "gcc": "gcc",
            "losetup": "mount", "findmnt": "util-linux"}


class SetupError(Exception):
    pass


def tux3_mount_available(tux3):
    if not os.access(tux3, os.X_OK):
        return False, "%s is not built" % tux3
    try:
        rc, out, err = run([tux3, "mount", "--help"], timeout=20, check=False, quiet=True)
    except CmdError as e:
        return False, str(e)
    if rc != 0:
        return False, "`tux3 mount` does not exist yet (%s)" % (err.strip().splitlines() or ["?"])[0]
    return True, ""


def kernel_has(fstype):
    with open("/proc/filesystems") as f:
        if any(line.split()[-1] == fstype for line in f if line.strip()):
            return True
    try:
        run(["modprobe", fstype], timeout=30, check=False, quiet=True)
    except CmdError:
        pass
    with open("/proc/filesystems") as f:
        return any(line.split()[-1] == fstype for line in f if line.strip())


def ensure_tools(tools):
    """Install the Debian packages of missing tools (apt-get update first)."""
    missing = sorted({PACKAGES[t] for t in tools if t in PACKAGES and not shutil.which(t)})
    if not missing:
        return
    if not shutil.which("apt-get"):
        say("cannot install %s: no apt-get" % " ".join(missing))
        return
    say("installing %s" % " ".join(missing))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        run(["apt-get", "update", "-qq"], timeout=600, check=False, env=env)
        run(["apt-get", "install", "-y", "-qq"] + missing, timeout=900, check=False, env=env)
    except CmdError as e:
        say("install failed: %s" % e)


class Mounted:
    def __init__(self, fs, mnt, dev=None, pid=None, img=None):
        self.fs, self.mnt, self.dev, self.pid, self.img = fs, mnt, dev, pid, img
        # What commits the filesystem after `sync -f`, which the kernel does
        # not pass to a FUSE server (docs/MOUNT.md): `tux3 sync MNT`.
        self.commit_cmd = None


# The fuse module's switch for FUSE over io_uring (Linux 6.14+).
URING_PARAM = "/sys/module/fuse/parameters/enable_uring"


def uring_available():
    return os.access(URING_PARAM, os.W_OK)


class Env:
    def __init__(self, scratch, tux3, image_size, tmpfs_size):
        self.scratch, self.tux3 = scratch, tux3
        self.image_size, self.tmpfs_size = image_size, tmpfs_size
        self.loops, self.mounts, self.daemons = [], [], []
        self.mnt = os.path.join(scratch, "mnt")
        os.makedirs(self.mnt, exist_ok=True)
        # tux3 serves through io_uring where the kernel has it: the switch
        # is turned on for the run and put back at clean-up. (fuse2fs, on
        # libfuse 3.14, only knows /dev/fuse.)
        self.uring_was = None
        if uring_available():
            with open(URING_PARAM) as f:
                self.uring_was = f.read().strip()
            with open(URING_PARAM, "w") as f:
                f.write("Y")
        self.save()

    def tux3_transport(self):
        return "io_uring" if self.uring_was is not None else "/dev/fuse"

    # -- state ---------------------------------------------------------------
    def save(self):
        state = {"pid": os.getpid(), "loops": self.loops, "mounts": self.mounts,
                 "daemons": self.daemons}
        tmp = os.path.join(self.scratch, "state.json.tmp")
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, os.path.join(self.scratch, "state.json"))

    # -- loop devices ----------------------------------------------------------
    def backing_image(self):
        """The run's backing image, written in full the first time."""
        img = os.path.join(self.scratch, "backing.img")
        if not os.path.exists(img):
            gib = self.image_size >> 30
            say("writing the %d GiB backing image once (every block allocated, as on a disk)" % gib)
            t0 = time.monotonic()
            tmp = img + ".part"
            # conv=fsync: on a virtual machine the host may hold what dd
            # wrote in its own cache, and the first flush of the first
            # filesystem measured would then wait for all of it to reach
            # the disk; the fsync pays for that here, before any timing.
            run(["dd", "if=/dev/zero", "of=" + tmp, "bs=64M", "count=%d" % (self.image_size >> 26),
                 "oflag=direct", "conv=fsync", "status=none"], timeout=1800)
            os.replace(tmp, img)
            say("backing image written in %.0f s" % (time.monotonic() - t0))
        return img

    def attach(self, img):
        _, out, _ = run(["losetup", "--direct-io=on", "-f", "--show", img], timeout=30)
        dev = out.strip()
        self.loops.append(dev)
        self.save()
        return dev

    def detach(self, dev):
        for attempt in range(10):
            try:
                run(["losetup", "-d", dev], timeout=30)
                break
            except CmdError as e:
                if attempt == 9:
                    say("warning: could not detach %s: %s" % (dev, e))
                    return
                time.sleep(1)
        if dev in self.loops:
            self.loops.remove(dev)
        self.save()

    # -- mount and unmount -------------------------------------------------------
    def setup(self, fs):
        """Format and mount a fresh `fs`; returns a Mounted."""
        if not kernel_has(KERNEL_FS[fs]):
            raise SetupError("the kernel has no %s support" % KERNEL_FS[fs])
        if fs == "tmpfs":
            run(["mount", "-t", "tmpfs", "-o", "size=%d" % self.tmpfs_size,
                 "tux3-bench-tmpfs", self.mnt], timeout=30)
            self._mounted(self.mnt)
            return Mounted(fs, self.mnt)
        dev = self.attach(self.backing_image())
        m = Mounted(fs, self.mnt, dev=dev)
        if fs in TUX3_MOUNTS:
            m.commit_cmd = [self.tux3, "sync", self.mnt]
        try:
            with open("/sys/block/%s/loop/dio" % os.path.basename(dev)) as f:
                if f.read().strip() != "1":
                    say("note: %s runs without direct I/O" % dev)
            if fs in TUX3_MOUNTS:
                run([self.tux3, "mkfs", dev], timeout=120)
            else:
                run(MKFS[fs] + [dev], timeout=300)
            self.mount(m)
        except (CmdError, SetupError, OSError) as e:
            self.teardown(m)
            raise SetupError(str(e))
        return m

    def mount_cmd(self, m):
        """The command that mounts `m`'s device (formatted) on its mount point."""
        fs, dev = m.fs, m.dev
        if fs in TUX3_MOUNTS:
            opt = "uring" if self.uring_was is not None and fs == "tux3" else "nouring"
            return [self.tux3, "mount", "-o", opt, dev, m.mnt]
        if fs == "fuse2fs":
            return ["fuse2fs", dev, m.mnt] + ([] if os.geteuid() == 0 else ["-o", "fakeroot"])
        return ["mount", "-t", KERNEL_FS[fs]] + MOUNT_OPTS.get(fs, []) + [dev, m.mnt]

    def mount(self, m, timeout=60):
        """Mount `m` (formatted); returns the seconds the mount command took."""
        t0 = time.monotonic()
        try:
            run(self.mount_cmd(m), timeout=timeout)
        finally:
            # Recorded even on a failure or timeout: it may have mounted.
            secs = time.monotonic() - t0
            self._mounted(m.mnt)
        if m.fs in TUX3_MOUNTS + ("fuse2fs",):
            # Its own process (the daemon): for CPU time and clean-up.
            time.sleep(0.2)
            pids = find_pids(["tux3" if m.fs in TUX3_MOUNTS else "fuse2fs"], exact=[m.dev])
            m.pid = pids[0] if pids else None
            if m.pid:
                self.daemons.append(m.pid)
                self.save()
        if not os.path.ismount(m.mnt):
            raise SetupError("%s is not mounted after mount returned" % m.mnt)
        return secs

    def remount(self, m, timeout=60):
        """Unmount `m`, drop the caches and mount it again; returns the
        seconds the mount command took (cold)."""
        self.unmount(m.mnt)
        if m.pid:
            self.end_daemon(m.pid)
            m.pid = None
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return self.mount(m, timeout)

    def _mounted(self, mnt):
        if mnt not in self.mounts:
            self.mounts.append(mnt)
        self.save()

    def unmount(self, mnt):
        if not os.path.ismount(mnt):
            if mnt in self.mounts:
                self.mounts.remove(mnt)
            self.save()
            return
        for attempt in range(3):
            try:
                run(["umount", mnt], timeout=120)
                break
            except CmdError as e:
                if attempt == 2:
                    say("warning: umount %s failed (%s); detaching lazily" % (mnt, e))
                    run(["umount", "-l", mnt], timeout=60, check=False)
                else:
                    time.sleep(1)
        if mnt in self.mounts:
            self.mounts.remove(mnt)
        self.save()

    def end_daemon(self, pid, grace=120):
        """Wait for a filesystem daemon to finish after unmount; end it by
        pid if it does not."""
        deadline = time.monotonic() + grace
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not pid_alive(pid):
                break
            say("warning: daemon %d still running; sending %s" % (pid, sig.name))
            os.kill(pid, sig)
            time.sleep(2)
        if pid in self.daemons:
            self.daemons.remove(pid)
        self.save()

    def teardown(self, m):
        try:
            self.unmount(m.mnt)
        finally:
            if m.pid:
                self.end_daemon(m.pid)
            if m.dev:
                self.detach(m.dev)
            if m.img and os.path.exists(m.img):
                os.unlink(m.img)

    def cleanup(self):
        """Undo everything still set up (used on every exit path)."""
        for mnt in list(reversed(self.mounts)):
            try:
                self.unmount(mnt)
            except CmdError as e:
                say("warning: %s" % e)
        for pid in list(self.daemons):
            self.end_daemon(pid, grace=30)
        for dev in list(self.loops):
            self.detach(dev)
        if self.uring_was is not None:
            try:
                with open(URING_PARAM, "w") as f:
                    f.write(self.uring_was)
            except OSError as e:
                say("warning: restoring %s: %s" % (URING_PARAM, e))


def clean_stale(base, prefix):
    """Clean up after earlier runs that were killed before their own
    clean-up: scratch dirs named PREFIX* under BASE whose owner is dead."""
    if not os.path.isdir(base):
        return
    for name in os.listdir(base):
        d = os.path.join(base, name)
        state_file = os.path.join(d, "state.json")
        if not name.startswith(prefix) or not os.path.isfile(state_file):
            continue
        try:
            with open(state_file) as f:
                st = json.load(f)
        except (OSError, ValueError):
            continue
        if pid_alive(st.get("pid", 0)):
            continue
        say("cleaning up after an interrupted run in %s" % d)
        for mnt in reversed(st.get("mounts", [])):
            if os.path.ismount(mnt):
                run(["umount", mnt], timeout=120, check=False)
                if os.path.ismount(mnt):
                    run(["umount", "-l", mnt], timeout=60, check=False)
        for pid in st.get("daemons", []):
            if pid_alive(pid) and pid in find_pids([d]):
                os.kill(pid, signal.SIGKILL)
        for dev in st.get("loops", []):
            # Only if it still points into that run's scratch dir.
            try:
                with open("/sys/block/%s/loop/backing_file" % os.path.basename(dev)) as f:
                    backing = f.read().strip()
            except OSError:
                continue
            if backing.startswith(d + "/"):
                run(["losetup", "-d", dev], timeout=30, check=False)
        shutil.rmtree(d, ignore_errors=True)
