//! Send streams cut off: a stream cut at random places (with the receiver
//! going on, or crashed: its volume dropped without a close) leaves no
//! snapshot, and the stream resumed from the receiver's token finishes it
//! to the same tree, full and incremental; a receive abandoned
//! (`receive::abort`) leaves the volume as it was before it.

mod stream_util;
use stream_util::*;

/// Cut `bytes` at `cut`, receive that much (which fails), maybe crash the
/// receiver, then finish with a stream resumed from its token.
fn cut_and_resume(
    src: &Arc<dyn Device>,
    dst: &Arc<dyn Device>,
    snap: &str,
    base: Option<&str>,
    cut: usize,
    crash: bool,
) {
    let whole = stream(src, snap, base, None).0;
    let opts = ReceiveOptions {
        checkpoint_bytes: 1 << 40,
        checkpoint_records: 5,
        ..ReceiveOptions::default()
    };
    let rfs = open(dst);
    let e = apply_with(&rfs, &whole[..cut], &opts).unwrap_err();
    assert!(
        matches!(e, StreamError::Cut { .. }),
        "cut at {cut} of {}: {e}",
        whole.len()
    );
    let rfs = if crash {
        drop(rfs); // as a crash would: the last commit stays
        open(dst)
    } else {
        rfs
    };
    assert!(
        rfs.snapshot_list()
            .unwrap()
            .iter()
            .all(|s| s.name != snap.as_bytes()),
        "a cut receive left snapshot {snap}"
    );
    let token = resume::stored(&rfs).unwrap();
    let Some(token) = token else {
        // Cut before the receive started: nothing to resume.
        apply(&rfs, &whole).unwrap();
        rfs.close().unwrap();
        return;
    };
    let (rest, _) = stream(src, snap, base, Some(token));
    if token.next > 1 {
        assert!(rest.len() < whole.len(), "a resumed stream starts over");
    }
    apply_with(&rfs, &rest, &opts).unwrap();
    rfs.close().unwrap();
}

#[test]
fn a_stream_cut_anywhere_resumes_to_the_same_tree() {
    let src = device(8192);
    let fs = open(&src);
    populate(&fs);
    fs.snapshot_create(b"s1").unwrap();
    let d = fs.lookup(ROOT_INO, b"dir").unwrap().ino;
    fs.rename(ROOT_INO, b"sparse", d, b"moved", RenameFlags::default())
        .unwrap();
    fs.rmdir(d, b"sub").unwrap_err(); // not empty
    file(&fs, ROOT_INO, "new", &[1u8; 20000]);
    fs.write(fs.lookup(d, b"file").unwrap().ino, 3, b"HELLO").unwrap();
    fs.snapshot_create(b"s2").unwrap();
    let full = stream(&src, "s1", None, None).0.len();
    let incr = stream(&src, "s2", Some("s1"), None).0.len();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..24 {
        let crash = round % 2 == 1;
        let dst = device(8192);
        cut_and_resume(&src, &dst, "s1", None, rng.below(full as u64) as usize, crash);
        same_snapshot(&src, &dst, "s1");
        cut_and_resume(
            &src,
            &dst,
            "s2",
            Some("s1"),
            rng.below(incr as u64) as usize,
            crash,
        );
        same_snapshot(&src, &dst, "s2");
    }
}

#[test]
fn an_abandoned_receive_leaves_the_volume_as_it_was() {
    let src = device(8192);
    let fs = open(&src);
    populate(&fs);
    fs.snapshot_create(b"s1").unwrap();
    file(&fs, ROOT_INO, "more", &[5u8; 50_000]);
    fs.unlink(ROOT_INO, b"fifo").unwrap();
    fs.snapshot_create(b"s2").unwrap();
    let dst = device(8192);
    let rfs = open(&dst);
    // A full receive cut off, abandoned: an empty root again.
    let full = stream(&src, "s1", None, None).0;
    apply(&rfs, &full[..full.len() / 2]).unwrap_err();
    assert!(resume::stored(&rfs).unwrap().is_some());
    assert!(tux3_tools::stream::receive::abort(&rfs).unwrap().is_some());
    assert!(rfs.readdir(ROOT_INO, 0, 10).unwrap().is_empty());
    assert!(rfs.listxattr(ROOT_INO).unwrap().is_empty());
    assert!(tux3_tools::stream::receive::abort(&rfs).unwrap().is_none());
    // An incremental one: the base's tree again.
    apply(&rfs, &full).unwrap();
    let incr = stream(&src, "s2", Some("s1"), None).0;
    apply(&rfs, &incr[..incr.len() / 2]).unwrap_err();
    tux3_tools::stream::receive::abort(&rfs).unwrap();
    assert_eq!(describe(&rfs), describe(&open_snapshot(&dst, "s1")));
    // And the stream is taken whole afterwards.
    apply(&rfs, &incr).unwrap();
    same_snapshot(&src, &dst, "s2");
}
