//! A replay of dbench's loadfile (client.txt, the NetBench trace): each
//! client runs the trace in its own directory `clients/clientN`, over and
//! over until the time is up, on any [`Target`]. The mapping follows dbench's
//! own file-I/O backend: NTCreateX opens or creates (a directory when its
//! options say so), ReadX/WriteX are positional reads and writes, Flush is an
//! fsync, FIND_FIRST lists the directory, QUERY_* are stat calls,
//! SET_FILE_INFORMATION sets times; lock calls are skipped. With `sync`,
//! files are opened O_SYNC as `dbench -s` does.

use crate::target::{Handles, Target};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub enum Op {
    Create {
        path: String,
        dir: bool,
        create: bool,
        trunc: bool,
        fnum: u32,
    },
    Close(u32),
    Write {
        fnum: u32,
        off: u64,
        len: usize,
    },
    Read {
        fnum: u32,
        off: u64,
        len: usize,
    },
    Flush(u32),
    QueryPath(String),
    QueryFile(u32),
    SetFile(u32),
    QueryFs,
    Find(String),
    Unlink(String),
    Rename(String, String),
    Deltree(String),
    Mkdir(String),
}

/// One line of the trace: the operation and whether it is expected to succeed.
#[derive(Debug, Clone)]
pub struct Line {
    pub op: Op,
    pub ok: bool,
}

fn tokens(line: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// "\clients\client1\x" -> "clients/client{N}/x" is done at run time; here
/// the client part is left as the marker `@`.
fn path(p: &str) -> String {
    let p = p.replace('\\', "/");
    let p = p.trim_start_matches('/');
    match p.strip_prefix("clients/client1") {
        Some(rest) => format!("@{rest}"),
        None => p.to_string(),
    }
}

fn num<T: std::str::FromStr + Default>(s: Option<&String>) -> T {
    let s = s.map(|s| s.as_str()).unwrap_or("0");
    let v = if let Some(h) = s.strip_prefix("0x") {
        u64::from_str_radix(h, 16)
            .map(|v| v.to_string())
            .unwrap_or_default()
    } else {
        s.to_string()
    };
    v.parse().unwrap_or_default()
}

/// Parse a loadfile; unknown operations are skipped.
pub fn parse(text: &str) -> Vec<Line> {
    let mut out = Vec::new();
    for raw in text.lines() {
        let t = tokens(raw);
        if t.len() < 2 || t[0].starts_with('#') {
            continue;
        }
        let ok = t.last().is_some_and(|s| s == "NT_STATUS_OK");
        let a = |i: usize| t.get(i);
        let op = match t[0].as_str() {
            "NTCreateX" => {
                let opts: u32 = num(a(2));
                let disp: u32 = num(a(3));
                // dispositions: 0 supersede, 1 open, 2 create, 3 open-if,
                // 4 overwrite, 5 overwrite-if
                Op::Create {
                    path: path(&t[1]),
                    dir: opts & 1 != 0,
                    create: matches!(disp, 0 | 2 | 3 | 5),
                    trunc: matches!(disp, 0 | 4 | 5),
                    fnum: num(a(4)),
                }
            }
            "Close" => Op::Close(num(a(1))),
            "WriteX" => Op::Write {
                fnum: num(a(1)),
                off: num(a(2)),
                len: num(a(3)),
            },
            "ReadX" => Op::Read {
                fnum: num(a(1)),
                off: num(a(2)),
                len: num(a(3)),
            },
            "Flush" => Op::Flush(num(a(1))),
            "QUERY_PATH_INFORMATION" => Op::QueryPath(path(&t[1])),
            "QUERY_FILE_INFORMATION" => Op::QueryFile(num(a(1))),
            "SET_FILE_INFORMATION" => Op::SetFile(num(a(1))),
            "QUERY_FS_INFORMATION" => Op::QueryFs,
            "FIND_FIRST" => {
                let p = path(&t[1]);
                Op::Find(p.rsplit_once('/').map(|(d, _)| d.to_string()).unwrap_or_default())
            }
            "Unlink" => Op::Unlink(path(&t[1])),
            "Rename" => Op::Rename(path(&t[1]), path(&t[2])),
            "Deltree" => Op::Deltree(path(&t[1])),
            "Mkdir" => Op::Mkdir(path(&t[1])),
            _ => continue,
        };
        out.push(Line { op, ok });
    }
    out
}

/// Totals of one replay.
#[derive(Default, Debug)]
pub struct Totals {
    pub ops: u64,
    pub bytes: u64,
    pub fsyncs: u64,
    pub unexpected: u64,
    /// Clients that died (a panic in the engine).
    pub failed_clients: u64,
    pub seconds: f64,
}

fn run_line<T: Target + ?Sized>(
    t: &T,
    h: &mut Handles,
    me: &str,
    l: &Line,
    sync: bool,
    buf: &[u8],
) -> (bool, u64, u64) {
    let fix = |p: &str| p.replacen('@', me, 1);
    let (mut bytes, mut fsyncs) = (0u64, 0u64);
    let r: std::io::Result<()> = match &l.op {
        Op::Create {
            path,
            dir,
            create,
            trunc,
            fnum,
        } => {
            let p = fix(path);
            let r = if *dir {
                t.open_dir(&p, *create)
            } else {
                t.open(&p, *create, *trunc, sync)
            };
            let r = match r {
                Err(e) if !dir && e.raw_os_error() == Some(libc::EISDIR) => t.open_dir(&p, false),
                r => r,
            };
            r.map(|hd| {
                if let Some(old) = h.insert(*fnum, hd) {
                    let _ = t.close(old);
                }
            })
        }
        Op::Close(f) => h.remove(f).map_or(Ok(()), |hd| t.close(hd)),
        Op::Write { fnum, off, len } => match h.get(fnum) {
            Some(hd) => {
                bytes = *len as u64;
                fsyncs = sync as u64;
                t.write(hd, *off, &buf[..(*len).min(buf.len())])
            }
            None => Ok(()),
        },
        Op::Read { fnum, off, len } => match h.get(fnum) {
            Some(hd) => t.read(hd, *off, *len).map(|n| bytes = n as u64),
            None => Ok(()),
        },
        Op::Flush(f) => match h.get(f) {
            Some(hd) => {
                fsyncs = 1;
                t.fsync(hd)
            }
            None => Ok(()),
        },
        Op::QueryPath(p) => t.stat(&fix(p)),
        Op::QueryFile(f) => h.get(f).map_or(Ok(()), |hd| t.fstat(hd)),
        Op::SetFile(f) => h.get(f).map_or(Ok(()), |hd| t.touch(hd)),
        Op::QueryFs => t.statfs(),
        Op::Find(d) => t.list(&fix(d)).map(|_| ()),
        Op::Unlink(p) => t.unlink(&fix(p)),
        Op::Rename(a, b) => t.rename(&fix(a), &fix(b)),
        Op::Deltree(p) => {
            let _ = t.deltree(&fix(p));
            Ok(())
        }
        Op::Mkdir(p) => match t.mkdir(&fix(p)) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            r => r,
        },
    };
    (r.is_ok() == l.ok, bytes, fsyncs)
}

/// Run `clients` clients over `lines` for `secs` seconds on `target`.
pub fn replay(
    target: Arc<dyn Target>,
    lines: Arc<Vec<Line>>,
    clients: usize,
    secs: f64,
    sync: bool,
) -> Totals {
    let _ = target.mkdir("clients");
    let stop = Arc::new(AtomicBool::new(false));
    let (ops, bytes, fsyncs, bad) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let start = Instant::now();
    let mut threads = Vec::new();
    for c in 0..clients {
        let (t, lines, stop) = (target.clone(), lines.clone(), stop.clone());
        let (ops, bytes, fsyncs, bad) = (ops.clone(), bytes.clone(), fsyncs.clone(), bad.clone());
        threads.push(std::thread::spawn(move || {
            let me = format!("clients/client{}", c + 1);
            let buf = vec![0x41u8; 1 << 20];
            let mut h = Handles::new();
            'outer: loop {
                for l in lines.iter() {
                    if stop.load(Ordering::Relaxed) {
                        break 'outer;
                    }
                    let (good, b, f) = run_line(t.as_ref(), &mut h, &me, l, sync, &buf);
                    ops.fetch_add(1, Ordering::Relaxed);
                    bytes.fetch_add(b, Ordering::Relaxed);
                    fsyncs.fetch_add(f, Ordering::Relaxed);
                    bad.fetch_add(!good as u64, Ordering::Relaxed);
                }
            }
            for (_, hd) in h.drain() {
                let _ = t.close(hd);
            }
        }));
    }
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    let seconds = start.elapsed().as_secs_f64();
    let mut failed_clients = 0;
    for th in threads {
        failed_clients += th.join().is_err() as u64;
    }
    Totals {
        ops: ops.load(Ordering::Relaxed),
        bytes: bytes.load(Ordering::Relaxed),
        fsyncs: fsyncs.load(Ordering::Relaxed),
        unexpected: bad.load(Ordering::Relaxed),
        failed_clients,
        seconds,
    }
}
