//! Through the real mount: `tux3 mount` behaves like mount(8) of a kernel
//! filesystem. It says nothing on success, and its background server keeps
//! nothing of the caller: a caller reading the command's output to its end
//! (`out=$(tux3 mount ...)`) gets it once the command exits, not when the
//! volume is unmounted; a descriptor the caller left open is closed in the
//! server; standard input, output and error are /dev/null there. Its
//! messages go to the system log, or to `-o log=FILE`; `-f` keeps them on
//! standard error.
//!
//! Needs root and /dev/fuse; without them the tests print a note and pass.

mod mount_util;

use mount_util::*;
use std::fs;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;

/// Where the caller's extra descriptor sits in `tux3 mount` (not
/// close-on-exec, as a shell's `exec 7>file` leaves one).
const EXTRA_FD: i32 = 57;

/// The targets of `pid`'s open descriptors, by number.
fn open_fds(pid: i32) -> Vec<(i32, String)> {
    let mut fds = Vec::new();
    for e in fs::read_dir(format!("/proc/{pid}/fd")).expect("read the server's fds") {
        let e = e.expect("fd entry");
        let Ok(n) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // (A descriptor closed while we list is gone.)
        if let Ok(target) = fs::read_link(e.path()) {
            fds.push((n, target.to_string_lossy().into_owned()));
        }
    }
    fds.sort();
    fds
}

#[test]
fn the_server_keeps_nothing_of_the_caller() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("64M");
    let extra_path = fx.dir.path().join("extra");
    let extra = fs::File::create(&extra_path).unwrap();
    let extra_fd = extra.as_raw_fd();
    let mut cmd = Command::new(TUX3);
    cmd.arg("mount")
        .arg(&fx.img)
        .arg(&fx.mnt)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: dup2 is async-signal-safe; it runs in the child between fork
    // and exec, and leaves the copy without close-on-exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(extra_fd, EXTRA_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("spawn tux3 mount");
    let status = child.wait().expect("wait for tux3 mount");
    assert!(status.success(), "tux3 mount: {status}");
    // From here on the mount is unmounted on every path.
    let m = fx.mounted();

    // Both pipes reach their end now, while the mount is live, and hold
    // nothing. (The time limit only guards the test: a server holding a
    // pipe would keep the read waiting until the unmount.)
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut o, mut e) = (Vec::new(), Vec::new());
        let read = out.read_to_end(&mut o).and_then(|_| err.read_to_end(&mut e));
        let _ = tx.send(read.map(|_| (o, e)));
    });
    let read = rx
        .recv_timeout(DEADLINE)
        .expect("the output of tux3 mount stays open while the mount is live: the server holds it");
    let (o, e) = read.expect("read the output of tux3 mount");
    assert!(
        o.is_empty() && e.is_empty(),
        "tux3 mount said something: {:?} {:?}",
        String::from_utf8_lossy(&o),
        String::from_utf8_lossy(&e)
    );

    // The server: the standard descriptors are /dev/null, the caller's
    // extra one is closed (the number may have been reused for one of its
    // own, never for the caller's file).
    let fds = open_fds(m.pid);
    for fd in 0..3 {
        let target = fds.iter().find(|(n, _)| *n == fd).map(|(_, t)| t.as_str());
        assert_eq!(target, Some("/dev/null"), "fd {fd} of the server: {fds:?}");
    }
    let extra_name = extra_path.to_string_lossy();
    assert!(
        !fds.iter().any(|(_, t)| *t == extra_name),
        "the server kept the caller's descriptor: {fds:?}"
    );
    drop(extra);
    fs::write(fx.path("f"), b"served").unwrap();
    m.unmount();
    fx.fsck();
}

#[test]
fn messages_go_to_the_log_file_or_with_f_to_stderr() {
    // The message: the note that io_uring is switched off.
    let Some(_switch) = uring_switch(false) else {
        return;
    };
    let fx = Fixture::new("64M");
    let log = fx.dir.path().join("mount.log");
    let st = Command::new(TUX3)
        .args(["mount", "-o"])
        .arg(format!("log={}", log.display()))
        .arg(&fx.img)
        .arg(&fx.mnt)
        .stdin(Stdio::null())
        .stdout(fx.log_file())
        .stderr(fx.log_file())
        .status()
        .expect("run tux3 mount");
    assert!(st.success(), "tux3 mount: {}", fx.log_text());
    let m = fx.mounted();
    assert!(
        fx.log_text().is_empty(),
        "tux3 mount said something: {}",
        fx.log_text()
    );
    let text = fs::read_to_string(&log).unwrap_or_default();
    let note = "echo Y > /sys/module/fuse/parameters/enable_uring";
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(note)).collect();
    assert_eq!(lines.len(), 1, "one note in the log file: {text:?}");
    let tag = format!("tux3[{}]: warning: FUSE over io_uring is switched off", m.pid);
    assert!(lines[0].contains(&tag), "{text:?}");
    m.unmount();

    // In the foreground they stay on standard error.
    let m = fx.mount_foreground(&[]);
    m.unmount();
    let stderr = fx.log_text();
    assert_eq!(stderr.matches(note).count(), 1, "{stderr:?}");
    assert_eq!(
        fs::read_to_string(&log).unwrap_or_default(),
        text,
        "nothing more in the log file"
    );
    fx.fsck();
}
