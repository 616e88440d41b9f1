//! `tux3 snapshot` on an image file that is not mounted: create, list
//! (table and JSON), the errors of a taken name, a bad name and an unknown
//! one (each naming the image and the snapshot, exit 1), delete with its
//! reclaim run to the end, and a clean fsck after. Also the parsing of
//! `-o snapshot=NAME`.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};
use tux3_cli::mount::parse_options;

fn tux3(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tux3"))
        .args(args.iter().map(|a| a.as_ref()))
        .env("TZ", "UTC")
        .output()
        .expect("run tux3")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `tux3 snapshot ARGS...` succeeds; its standard output.
fn ok(args: &[&dyn AsRef<std::ffi::OsStr>]) -> String {
    let o = tux3(args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stderr(&o), "");
    stdout(&o)
}

/// `tux3 snapshot ARGS...` fails with exit 1; its one-line message.
fn fails(args: &[&dyn AsRef<std::ffi::OsStr>]) -> String {
    let o = tux3(args);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

/// Names in the listing's NAME column (the header left out).
fn names(listing: &str) -> Vec<String> {
    let mut lines = listing.lines();
    let head = lines.next().expect("a header");
    assert!(head.starts_with("NAME") && head.ends_with("STATE"), "{listing}");
    lines
        .filter(|l| l.ends_with(" ok"))
        .map(|l| l.split("  ").next().unwrap_or_default().to_string())
        .collect()
}

fn volume(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("a"), b"the first file").unwrap();
    fs::write(src.join("d/b"), vec![7u8; 200_000]).unwrap();
    let img = dir.join("img");
    let o = tux3(&[&"mkfs", &"--size", &"64M", &"--from", &src, &img]);
    assert!(o.status.success(), "mkfs: {}", stderr(&o));
    img
}

#[test]
fn create_list_delete_on_an_image() {
    let dir = tempfile::tempdir().unwrap();
    let img = volume(dir.path());
    let shown = img.display().to_string();

    assert_eq!(names(&ok(&[&"snapshot", &"list", &img])), Vec::<String>::new());
    assert_eq!(ok(&[&"snapshot", &"create", &img, &"s1"]), "");
    let listing = ok(&[&"snapshot", &"list", &img]);
    assert_eq!(names(&listing), ["s1"], "{listing}");
    let row = listing.lines().nth(1).unwrap();
    // NAME ID CREATED(date time) REFERENCED UNIQUE STATE
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells.len(), 7, "{row}");
    assert!(cells[1].parse::<u64>().is_ok(), "{row}");
    assert_eq!(cells[2].len(), 10, "{row}");
    assert_eq!(cells[3].len(), 8, "{row}");
    let json = ok(&[&"snapshot", &"list", &"--json", &img]);
    assert!(json.starts_with("[{\"name\":\"s1\",\"id\":"), "{json}");
    assert!(json.contains("\"deleting\":false"), "{json}");

    // A second snapshot, then the name taken.
    assert_eq!(ok(&[&"snapshot", &"create", &img, &"s2"]), "");
    assert_eq!(names(&ok(&[&"snapshot", &"list", &img])), ["s1", "s2"]);
    assert_eq!(
        fails(&[&"snapshot", &"create", &img, &"s1"]),
        format!("tux3 snapshot create: {shown}: snapshot \"s1\" already exists\n")
    );
    let e = fails(&[&"snapshot", &"create", &img, &"a/b"]);
    assert!(
        e.starts_with(&format!(
            "tux3 snapshot create: {shown}: invalid snapshot name \"a/b\""
        )),
        "{e}"
    );
    let long = "x".repeat(256);
    let e = fails(&[&"snapshot", &"create", &img, &long]);
    assert!(e.contains("invalid snapshot name"), "{e}");

    // Delete: the space comes back before the command exits (no deleting
    // state left), and the other snapshot stays.
    assert_eq!(ok(&[&"snapshot", &"delete", &img, &"s1"]), "");
    let listing = ok(&[&"snapshot", &"list", &img]);
    assert_eq!(names(&listing), ["s2"], "{listing}");
    assert!(!listing.contains("deleting"), "{listing}");
    assert_eq!(ok(&[&"snapshot", &"delete", &img, &"s2"]), "");
    assert_eq!(names(&ok(&[&"snapshot", &"list", &img])), Vec::<String>::new());
    assert_eq!(
        fails(&[&"snapshot", &"delete", &img, &"s1"]),
        format!("tux3 snapshot delete: {shown}: no snapshot \"s1\"\n")
    );
    assert_eq!(
        fails(&[&"snapshot", &"delete", &img, &"never"]),
        format!("tux3 snapshot delete: {shown}: no snapshot \"never\"\n")
    );

    // The live volume is untouched, and the image checks clean.
    assert_eq!(ok(&[&"cat", &img, &"a"]), "the first file");
    let o = tux3(&[&"fsck", &img]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
}

#[test]
fn targets_that_are_neither_image_nor_mount_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let e = fails(&[&"snapshot", &"list", &dir.path()]);
    assert!(e.contains("neither on a tux3 mount nor an image"), "{e}");
    let missing = dir.path().join("missing");
    let e = fails(&[&"snapshot", &"create", &missing, &"s"]);
    assert!(
        e.starts_with("tux3 snapshot create: ") && e.contains("missing"),
        "{e}"
    );
    let junk = dir.path().join("junk");
    fs::write(&junk, vec![0u8; 65536]).unwrap();
    let e = fails(&[&"snapshot", &"create", &junk, &"s"]);
    assert!(e.contains("not a tux3 volume"), "{e}");
}

#[test]
fn snapshot_mount_option() {
    let o = parse_options(&["snapshot=daily"], false).expect("valid");
    assert_eq!(o.snapshot.as_deref(), Some("daily"));
    assert!(o.fuse.read_only, "a snapshot mounts read-only");
    let o = parse_options(&["ro", "snapshot=daily,nouring"], false).expect("valid");
    assert!(o.fuse.read_only);
    for bad in [
        "snapshot=daily,rw",
        "rw,snapshot=daily",
        "snapshot=",
        "snapshot",
        "snapshot=a/b",
    ] {
        let e = parse_options(&[bad], false).expect_err(bad);
        assert!(e.contains("snapshot"), "{bad}: {e}");
    }
    assert!(parse_options(&["snapshot=daily,rw"], false)
        .expect_err("rw")
        .contains("read-only"));
    assert!(parse_options(&["ro,snapshot=x"], false).is_ok());
}

/// `diff` between two snapshots of an image prints each change once, in
/// the `+ - M R` form; `rollback` makes the image what the older one held,
/// keeps both, and refuses an unknown name.
#[test]
fn diff_and_rollback_on_an_image() {
    let dir = tempfile::tempdir().unwrap();
    let img = volume(dir.path());
    ok(&[&"snapshot", &"create", &img, &"one"]);
    // Change the image through the engine: overwrite a, rename d/b, add c.
    {
        let dev = tux3::open_path(&img, true).unwrap();
        let fs = tux3::Fs::open(dev, tux3::OpenOptions::default()).unwrap();
        let a = fs.lookup(tux3::ROOT_INO, b"a").unwrap().ino;
        fs.write(a, 0, b"THE").unwrap();
        let d = fs.lookup(tux3::ROOT_INO, b"d").unwrap().ino;
        fs.rename(d, b"b", d, b"b2", tux3::RenameFlags::default())
            .unwrap();
        let c = fs.create(tux3::ROOT_INO, b"c", 0o644, 0, 0).unwrap().ino;
        fs.write(c, 0, b"new").unwrap();
        fs.close().unwrap();
    }
    ok(&[&"snapshot", &"create", &img, &"two"]);
    let diff = ok(&[&"snapshot", &"diff", &img, &"one", &"two"]);
    assert_eq!(diff, "M\t/\nM\t/a\n+\t/c\nM\t/d\nR\t/d/b -> /d/b2\n");
    assert_eq!(ok(&[&"snapshot", &"diff", &img, &"two", &"two"]), "");
    let err = fails(&[&"snapshot", &"diff", &img, &"one", &"three"]);
    assert!(err.contains("no snapshot named \"three\""), "{err}");

    ok(&[&"snapshot", &"rollback", &img, &"one"]);
    assert_eq!(ok(&[&"cat", &img, &"/a"]), "the first file");
    assert!(tux3(&[&"cat", &img, &"/c"]).status.code() != Some(0));
    assert_eq!(names(&ok(&[&"snapshot", &"list", &img])), ["one", "two"]);
    let err = fails(&[&"snapshot", &"rollback", &img, &"nope"]);
    assert!(err.contains("no snapshot \"nope\""), "{err}");
    let fsck = tux3(&[&"fsck", &img]);
    assert_eq!(fsck.status.code(), Some(0), "{}", stdout(&fsck));
}
