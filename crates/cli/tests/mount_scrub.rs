//! `tux3 scrub` through a real mount: start, status and cancel on a
//! mount; a cancelled scrub resumes after a remount; a data block damaged
//! behind the volume's back is reported by every path of its file, with
//! fsck's exit codes (0 clean, 4 damage, 8 operational, 32 cancelled);
//! the damage `fsck --repair --data` records is then named as known.
//!
//! Needs root and /dev/fuse; without them the test prints a note and
//! passes (fails under TUX3_REQUIRE_MOUNT=1).

use std::fs;
use std::process::{Command, Output};

mod mount_util;

use mount_util::*;

fn scrub(args: &[&str]) -> Output {
    Command::new(TUX3)
        .arg("scrub")
        .args(args)
        .output()
        .expect("run tux3 scrub")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// 4 KiB blocks each starting with a marker naming the block.
fn marked(blocks: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(blocks * 4096);
    for b in 0..blocks {
        let mut block = format!("scrub-test-block-{b:06}").into_bytes();
        block.resize(4096, (b % 251) as u8);
        v.extend_from_slice(&block);
    }
    v
}

#[test]
fn start_status_cancel_resume_and_name_a_damaged_file() {
    if !can_mount() {
        return;
    }
    let fx = Fixture::new("64M");
    let mnt = fx.mnt.to_str().unwrap().to_string();
    {
        let m = fx.mount(&[]);
        fs::write(fx.path("a"), marked(2048)).unwrap();
        fs::hard_link(fx.path("a"), fx.path("b")).unwrap();
        fs::write(fx.path("c"), b"small").unwrap();
        // Nothing ran yet; cancel has nothing to stop.
        let o = scrub(&["status", &mnt]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(text(&o).contains("no scrub has run"), "{}", text(&o));
        assert_eq!(scrub(&["cancel", &mnt]).status.code(), Some(8));
        // A slow scrub, cancelled: its position is kept.
        let o = scrub(&["start", "--rate", "1", &mnt]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let o = scrub(&["start", &mnt]);
        assert_eq!(o.status.code(), Some(8), "a second start: {}", text(&o));
        assert!(text(&o).contains("running already"), "{}", text(&o));
        let o = scrub(&["cancel", &mnt]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let mut last = None;
        wait_until("the scrub to stop", || {
            let o = scrub(&["status", &mnt]);
            let done = !text(&o).contains("running");
            last = Some(o);
            done
        });
        let o = last.unwrap();
        assert_eq!(o.status.code(), Some(32), "{}", text(&o));
        assert!(text(&o).contains("cancelled"), "{}", text(&o));
        m.unmount();
    }
    // Saved on the volume: the next start resumes it, and it ends clean.
    let o = Command::new(TUX3)
        .args(["scrub", "status"])
        .arg(&fx.img)
        .output()
        .unwrap();
    assert!(text(&o).contains("cancelled"), "{}", text(&o));
    {
        let _m = fx.mount(&[]);
        let o = scrub(&["start", "--wait", "--rate", "max", &mnt]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(o.stdout.is_empty(), "silent on success: {}", text(&o));
    }
    // Damage a block of a/b behind the volume's back.
    let mut img = fs::read(&fx.img).unwrap();
    let marker = b"scrub-test-block-000005";
    let at = img
        .windows(marker.len())
        .position(|w| w == marker)
        .expect("block 5 on the image");
    img[at + 100] ^= 0x20;
    fs::write(&fx.img, &img).unwrap();
    {
        let _m = fx.mount(&[]);
        let o = scrub(&["start", "--wait", "--rate", "max", "--restart", &mnt]);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(4), "{out}");
        let line = out.lines().find(|l| l.contains("damaged file")).expect(&out);
        assert!(line.contains("/a") && line.contains("/b"), "{out}");
        assert!(!out.contains("/c"), "{out}");
        assert_eq!(out.lines().filter(|l| l.contains("damaged")).count(), 1, "{out}");
        let o = scrub(&["status", &mnt]);
        assert_eq!(o.status.code(), Some(4), "{}", text(&o));
        assert!(text(&o).contains("1 damaged data blocks"), "{}", text(&o));
    }
    // The same on the unmounted image, in the foreground.
    let o = Command::new(TUX3)
        .args(["scrub", "start", "--rate", "max"])
        .arg(&fx.img)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(
        text(&o).contains("/a, /b") || text(&o).contains("/b, /a"),
        "{}",
        text(&o)
    );
    fx.fsck();
    // fsck --data finds it; the repair records it as known damage, after
    // which fsck --data is clean and names it in a note, and the scrub
    // and its status say it is known.
    let tux3 = |args: &[&str]| Command::new(TUX3).args(args).arg(&fx.img).output().unwrap();
    assert_eq!(tux3(&["fsck", "--data"]).status.code(), Some(4));
    let o = tux3(&["fsck", "--data", "--repair"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let o = tux3(&["fsck", "--data"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("known damage, recorded by a repair"),
        "{}",
        text(&o)
    );
    let o = tux3(&["scrub", "status"]);
    assert!(
        text(&o).contains("1 data blocks recorded as known damage"),
        "{}",
        text(&o)
    );
    let o = tux3(&["scrub", "start", "--rate", "max", "--restart"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(text(&o).contains("1 of them known damage"), "{}", text(&o));
}
