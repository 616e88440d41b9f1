//! The message of a failed commit (ARCHITECTURE.md, *When the device
//! fails*): one error naming the device and the device's error, saying
//! the volume is read-only until it is mounted again. Alone in its test
//! binary, whose log it captures.

use std::io::Write;
use std::sync::{Arc, Mutex};
use tux3::api::Fs;
use tux3::device::MemDevice;
use tux3::error::Errno;
use tux3::types::{FormatOptions, OpenOptions, ROOT_INO};
use tux3_crash::{FailEffect, FailMode, FailOp, FailingDevice};

/// Everything the engine logs.
static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        LOG.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_message_names_the_device_and_the_error() {
    tracing_subscriber::fmt()
        .with_writer(|| LogWriter)
        .with_ansi(false)
        .init();
    let mem = Arc::new(MemDevice::new(4096, 1024));
    Fs::format(mem.clone(), &FormatOptions::default()).unwrap();
    let failing = Arc::new(FailingDevice::healthy(mem));
    let opts = OpenOptions {
        commit_interval: None,
        ..OpenOptions::default()
    };
    let fs = Fs::open(failing.clone(), opts).unwrap();
    let ino = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(ino, 0, b"x").unwrap();
    failing.arm(FailOp::Flush, FailMode::Once, FailEffect::Eio);
    assert_eq!(fs.sync().unwrap_err().errno(), Errno::EIO);
    let log = String::from_utf8_lossy(&LOG.lock().unwrap()).to_string();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("read-only until it is mounted again"))
        .collect();
    assert_eq!(lines.len(), 1, "one message of the failed commit: {log:?}");
    let line = lines[0];
    assert!(line.contains("ERROR"), "{line}");
    assert!(line.contains("failing device over the device"), "{line}");
    assert!(
        line.contains("a delta commit failed") && line.contains("injected flush error"),
        "{line}"
    );
    // Later refusals say nothing more.
    assert!(fs.sync().is_err());
    let log = String::from_utf8_lossy(&LOG.lock().unwrap()).to_string();
    assert_eq!(
        log.matches("read-only until it is mounted again").count(),
        1,
        "{log}"
    );
}
