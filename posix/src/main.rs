//! posix-suite: POSIX (Linux) behaviour cases run through a mounted directory.
//!
//! Usage: posix-suite [--filter SUBSTR] [--skip-perm] DIR
//!
//! Each case runs in a fresh subdirectory of DIR and prints `ok   name`,
//! `FAIL name: what differed` or `skip name: why`; the last line is
//! `posix: N passed, M failed, K skipped`. Exit status 0 only if none failed.
//! The cases describe Linux behaviour (they pass on tmpfs and ext4), not any
//! one implementation.

mod sys;
#[macro_use]
mod util;

mod acl;
mod attrs;
mod dirs;
mod falloc;
mod flags;
mod links;
mod misc;
mod mmap;
mod open;
mod perms;
mod rename;
mod sparse;
mod tmpfile;
mod xattr;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use util::{Case, Ctx, Fail};

fn all_cases() -> Vec<&'static Case> {
    let groups: [&'static [Case]; 14] = [
        open::CASES,
        tmpfile::CASES,
        dirs::CASES,
        rename::CASES,
        links::CASES,
        attrs::CASES,
        perms::CASES,
        sparse::CASES,
        falloc::CASES,
        mmap::CASES,
        xattr::CASES,
        acl::CASES,
        flags::CASES,
        misc::CASES,
    ];
    groups.iter().flat_map(|g| g.iter()).collect()
}

fn usage() -> ExitCode {
    eprintln!("usage: posix-suite [--filter SUBSTR] [--skip-perm] [--list] DIR");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut filter: Option<String> = None;
    let mut skip_perm = false;
    let mut list = false;
    let mut dir: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--filter" => match args.next() {
                Some(f) => filter = Some(f),
                None => return usage(),
            },
            "--skip-perm" => skip_perm = true,
            "--list" => list = true,
            "-h" | "--help" => {
                usage();
                return ExitCode::SUCCESS;
            }
            s if s.starts_with("--filter=") => filter = Some(s["--filter=".len()..].to_string()),
            s if s.starts_with('-') => return usage(),
            _ if dir.is_some() => return usage(),
            _ => dir = Some(PathBuf::from(a)),
        }
    }
    let cases: Vec<&Case> = all_cases()
        .into_iter()
        .filter(|c| filter.as_deref().is_none_or(|f| c.name.contains(f)))
        .collect();
    if list {
        for c in &cases {
            println!("{}", c.name);
        }
        return ExitCode::SUCCESS;
    }
    let Some(dir) = dir else { return usage() };
    let dir = match std::fs::canonicalize(&dir) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("posix-suite: {}: {e}", dir.display());
            return ExitCode::from(2);
        }
    };
    // Fixed, predictable creation modes for every case.
    unsafe { libc::umask(0o022) };
    let run_dir = dir.join(format!("posix-suite.{}", std::process::id()));
    if let Err(e) = sys::mkdir(&run_dir, 0o755) {
        eprintln!("posix-suite: mkdir {}: {e}", run_dir.display());
        return ExitCode::from(2);
    }
    // Cases report through their result; keep panics quiet and count them.
    std::panic::set_hook(Box::new(|_| {}));

    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for (i, case) in cases.iter().enumerate() {
        let case_dir = run_dir.join(format!("{:03}-{}", i, case.name.replace('/', "-")));
        let outcome = match sys::mkdir(&case_dir, 0o755) {
            Err(e) => Err(Fail::Fail(format!("mkdir {}: {e}", case_dir.display()))),
            Ok(()) => {
                let ctx = Ctx {
                    dir: case_dir.clone(),
                    skip_perm,
                };
                match std::panic::catch_unwind(|| (case.run)(&ctx)) {
                    Ok(r) => r,
                    Err(p) => Err(Fail::Fail(format!("panicked: {}", panic_msg(&p)))),
                }
            }
        };
        match outcome {
            Ok(()) => {
                passed += 1;
                println!("ok   {}", case.name);
                remove_tree(&case_dir);
            }
            Err(Fail::Skip(why)) => {
                skipped += 1;
                println!("skip {}: {why}", case.name);
                remove_tree(&case_dir);
            }
            Err(Fail::Fail(what)) => {
                failed += 1;
                println!("FAIL {}: {what}", case.name);
            }
        }
        std::io::stdout().flush().ok();
    }
    if failed == 0 {
        remove_tree(&run_dir);
    } else {
        println!("(failed cases left their files in {})", run_dir.display());
    }
    println!("posix: {passed} passed, {failed} failed, {skipped} skipped");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn panic_msg(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".into()
    }
}

/// Best-effort removal of a case directory (restoring search/write
/// permission on directories first, in case a case took them away).
fn remove_tree(p: &Path) {
    if let Ok(st) = sys::lstat(p) {
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            let _ = sys::chmod(p, 0o755);
            if let Ok(rd) = std::fs::read_dir(p) {
                for e in rd.flatten() {
                    remove_tree(&e.path());
                }
            }
            let _ = sys::rmdir(p);
        } else {
            let _ = sys::unlink(p);
        }
    }
}
