//! Where messages go: the engine's and the FUSE adapter's warnings and
//! errors (`tracing` events) and a server's own. A command writes them to
//! standard error, as does a mount in the foreground (`-f`). A mount's
//! background server has no terminal: once it has detached it writes them
//! to the system log (`/dev/log`, facility daemon, as `tux3[PID]`), or to
//! the file `-o log=FILE` names, one line each.
//!
//! The system log is written as syslog(3) does, one datagram per message
//! in the traditional format (`<PRI>Mmm dd hh:mm:ss tux3[PID]: text`) sent
//! to `/dev/log` from an unbound socket, so a log daemon that restarts is
//! found again by the next message. Where nothing listens there, messages
//! are lost, as syslog(3)'s are: `-o log=FILE` keeps them.
//!
//! Calls tracing-subscriber and libc (local time).

use std::fmt::{self, Write as _};
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// The system log's socket.
pub const SYSLOG_SOCKET: &str = "/dev/log";

/// Where messages go now.
enum Sink {
    Stderr,
    File(File),
    /// A socket of our own, and where the log daemon listens.
    Syslog(UnixDatagram, PathBuf),
}

static SINK: Mutex<Sink> = Mutex::new(Sink::Stderr);

fn sink() -> std::sync::MutexGuard<'static, Sink> {
    SINK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Install the subscriber: `RUST_LOG` selects (default: warnings and
/// errors), messages go to standard error until [`to_file`] or
/// [`to_syslog`] says otherwise.
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer().with_writer(StderrWhileThere))
        .with(Detached)
        .try_init();
}

/// From now on, messages are appended to `path` (created if need be).
pub fn to_file(path: &Path) -> io::Result<()> {
    let file = std::fs::OpenOptions::new().append(true).create(true).open(path)?;
    *sink() = Sink::File(file);
    Ok(())
}

/// From now on, messages go to the system log.
pub fn to_syslog() -> io::Result<()> {
    to_syslog_at(Path::new(SYSLOG_SOCKET))
}

/// From now on, messages go to the log daemon listening at `socket`.
fn to_syslog_at(socket: &Path) -> io::Result<()> {
    *sink() = Sink::Syslog(UnixDatagram::unbound()?, socket.to_path_buf());
    Ok(())
}

/// A panic's message goes where the others do too (a detached server's
/// standard error is /dev/null). For a server's process only.
pub fn log_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        tracing::error!("{info}");
        default(info);
    }));
}

/// The formatted events of the `fmt` layer, written to standard error
/// while messages go there, dropped otherwise.
struct StderrWhileThere;

enum MaybeStderr {
    Stderr(io::Stderr),
    Nowhere,
}

impl Write for MaybeStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            MaybeStderr::Stderr(e) => e.write(buf),
            MaybeStderr::Nowhere => Ok(buf.len()),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            MaybeStderr::Stderr(e) => e.flush(),
            MaybeStderr::Nowhere => Ok(()),
        }
    }
}

impl<'a> MakeWriter<'a> for StderrWhileThere {
    type Writer = MaybeStderr;
    fn make_writer(&'a self) -> MaybeStderr {
        match *sink() {
            Sink::Stderr => MaybeStderr::Stderr(io::stderr()),
            _ => MaybeStderr::Nowhere,
        }
    }
}

/// Writes each event to the file or the system log, once messages go
/// there.
struct Detached;

impl<S: Subscriber> Layer<S> for Detached {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut sink = sink();
        if matches!(*sink, Sink::Stderr) {
            return;
        }
        let mut text = Text(String::new());
        event.record(&mut text);
        let level = *event.metadata().level();
        // A message that cannot be written has nowhere else to go.
        let _ = match &mut *sink {
            Sink::Stderr => Ok(()),
            Sink::File(f) => f.write_all(file_line(level, &text.0).as_bytes()),
            Sink::Syslog(s, at) => s
                .send_to(syslog_datagram(level, &text.0).as_bytes(), &*at)
                .map(drop),
        };
    }
}

/// An event's message, then its other fields as `name=value`.
struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

/// A line of `-o log=FILE`: local time, who, how grave, what.
fn file_line(level: Level, text: &str) -> String {
    format!(
        "{} tux3[{}]: {}: {}\n",
        local_time("%Y-%m-%d %H:%M:%S"),
        std::process::id(),
        level_word(level),
        one_line(text)
    )
}

/// A datagram for the system log: facility daemon, the severity of
/// `level`, the time as syslog(3) writes it, `tux3[PID]`.
fn syslog_datagram(level: Level, text: &str) -> String {
    format!(
        "<{}>{} tux3[{}]: {}",
        libc::LOG_DAEMON | severity(level),
        local_time("%b %e %H:%M:%S"),
        std::process::id(),
        one_line(text)
    )
}

fn severity(level: Level) -> libc::c_int {
    match level {
        Level::ERROR => libc::LOG_ERR,
        Level::WARN => libc::LOG_WARNING,
        Level::INFO => libc::LOG_INFO,
        _ => libc::LOG_DEBUG,
    }
}

fn level_word(level: Level) -> &'static str {
    match level {
        Level::ERROR => "error",
        Level::WARN => "warning",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        _ => "trace",
    }
}

/// Line breaks inside a message (a panic's backtrace note) as ` / `, so a
/// message stays one line.
fn one_line(text: &str) -> String {
    text.trim_end().replace('\n', " / ")
}

/// The local time now, formatted by strftime(3).
fn local_time(format: &str) -> String {
    let Ok(format) = std::ffi::CString::new(format) else {
        return String::new();
    };
    // SAFETY: time, localtime_r and strftime with valid pointers; `tm` is
    // plain data localtime_r fills in, and strftime writes at most
    // `buf.len()` bytes.
    unsafe {
        let now = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&now, &mut tm).is_null() {
            return String::new();
        }
        let mut buf = [0u8; 64];
        let n = libc::strftime(buf.as_mut_ptr().cast(), buf.len(), format.as_ptr(), &tm);
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_is_what_syslog3_sends() {
        let d = syslog_datagram(Level::WARN, "io_uring is off\n");
        // <daemon.warning> = 3 * 8 + 4.
        assert!(d.starts_with("<28>"), "{d}");
        let pid = format!(" tux3[{}]: io_uring is off", std::process::id());
        assert!(d.ends_with(&pid), "{d}");
        // "Mmm dd hh:mm:ss" between the priority and the tag.
        let stamp = &d[4..d.len() - pid.len()];
        assert_eq!(stamp.len(), 15, "{stamp:?}");
        assert_eq!(&stamp[9..10], ":", "{stamp:?}");
        assert_eq!(syslog_datagram(Level::ERROR, "x").get(..4), Some("<27>"));
    }

    #[test]
    fn a_file_line_is_one_line() {
        let l = file_line(Level::ERROR, "commit failed\nat block 7");
        assert!(l.ends_with(": error: commit failed / at block 7\n"), "{l}");
        assert_eq!(l.lines().count(), 1);
    }

    #[test]
    fn events_reach_the_log_daemon() {
        init();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let daemon = UnixDatagram::bind(&path).unwrap();
        to_syslog_at(&path).unwrap();
        tracing::warn!("switched off, {}", "once");
        tracing::info!("not selected by the default filter");
        *sink() = Sink::Stderr;
        daemon.set_nonblocking(true).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        while let Ok(n) = daemon.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        // (Other tests of this binary may log meanwhile: only ours count.)
        let want = format!(" tux3[{}]: switched off, once", std::process::id());
        let ours: Vec<&String> = got.iter().filter(|d| d.contains("switched off")).collect();
        assert_eq!(ours.len(), 1, "{got:?}");
        assert!(ours[0].starts_with("<28>") && ours[0].ends_with(&want), "{got:?}");
        assert!(!got.iter().any(|d| d.contains("not selected")), "{got:?}");
    }
}
