//! `tux3 man DIR`: the manual pages generated from the command
//! definitions — one per command, subcommand and helper, all in section 8,
//! each a roff page that says what the command's definition and option
//! tables say. Where man(1) is installed, each page renders.

use std::collections::BTreeSet;
use std::fs;
use std::process::Command;

#[test]
fn pages_for_every_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("man8");
    let o = Command::new(env!("CARGO_BIN_EXE_tux3"))
        .arg("man")
        .arg(&out)
        .output()
        .expect("run tux3 man");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let names: BTreeSet<String> = fs::read_dir(&out)
        .expect("read the pages")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let mut want: BTreeSet<String> = ["tux3", "mount.tux3", "mkfs.tux3", "fsck.tux3"]
        .iter()
        .map(|n| format!("{n}.8"))
        .collect();
    for sub in [
        "mkfs", "fsck", "dump", "graph", "ls", "cat", "readlink", "mount", "umount", "sync", "snapshot",
        "send", "receive", "scrub", "resize", "fstrim", "defrag", "clone", "send", "receive", "scrub",
        "resize", "fstrim", "defrag", "dedupe",
    ] {
        want.insert(format!("tux3-{sub}.8"));
    }
    assert_eq!(names, want, "no page for the hidden `man`, one for every other");
    let listed = String::from_utf8_lossy(&o.stdout);
    assert_eq!(listed.lines().count(), want.len(), "{listed}");

    let page = |name: &str| fs::read_to_string(out.join(name)).expect("read page");
    for name in &names {
        let text = page(name);
        let title = name.trim_end_matches(".8");
        let th = text.lines().find(|l| l.starts_with(".TH ")).unwrap_or_default();
        assert!(th.starts_with(&format!(".TH {title} 8 ")), "{name}: {th}");
        for section in ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "\"SEE ALSO\""] {
            assert!(text.contains(&format!(".SH {section}\n")), "{name}: no {section}");
        }
    }
    // The subcommands are listed on tux3's page, and each page's synopsis
    // shows the options' values.
    let tux3 = page("tux3.8");
    for sub in ["mkfs", "fsck", "mount", "sync"] {
        assert!(tux3.contains(&format!("tux3\\-{sub}(8)")), "tux3.8 lists {sub}");
    }
    assert!(!tux3.contains("tux3\\-man"), "the hidden command stays hidden");
    assert!(
        page("tux3-mount.8").contains("[\\-o OPTIONS]"),
        "synopsis of tux3 mount"
    );
    // The mount options and the defaults, on both mount pages.
    for name in ["tux3-mount.8", "mount.tux3.8"] {
        let text = page(name);
        for needle in [
            ".SH \"MOUNT OPTIONS\"",
            "allow_other",
            "noallow_other",
            "nosuid",
            "fsync=strict",
            "enable_uring",
            "leaves a server process",
        ] {
            assert!(text.contains(needle), "{name}: no {needle}");
        }
    }
    // The exit codes of both checkers.
    for name in ["tux3-fsck.8", "fsck.tux3.8"] {
        let text = page(name);
        assert!(text.contains(".SH \"EXIT STATUS\""), "{name}");
        assert!(text.contains("usage error"), "{name}");
    }
    assert!(page("mkfs.tux3.8").contains("\\-F"), "mkfs.tux3.8 has -F");

    let Ok(probe) = Command::new("man").arg("--version").output() else {
        eprintln!("note: man(1) is not installed: the pages are not rendered");
        return;
    };
    assert!(probe.status.success());
    for name in &names {
        let o = Command::new("man")
            .arg("-l")
            .arg(out.join(name))
            .env("MANWIDTH", "80")
            .output()
            .expect("run man -l");
        let shown = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "man -l {name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let title = format!("{}(8)", name.trim_end_matches(".8"));
        assert!(shown.starts_with(&title), "man -l {name}: {shown}");
    }
}
