//! Seed corpus generator: writes the small valid images of
//! `tux3_fuzz::seeds` into corpus/open_image and corpus/fsck_image (each
//! also with a trailing option byte 1, "reseal checksums"), and a few edit
//! scripts into corpus/replay_log. Run from anywhere:
//! `cargo run --release --manifest-path fuzz/Cargo.toml --example make-corpus`.
use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let seeds = tux3_fuzz::seeds();
    for target in ["open_image", "fsck_image"] {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir)?;
        for (name, img) in &seeds {
            std::fs::write(dir.join(format!("{name}.img1k")), img)?;
            let mut resealed = img.clone();
            resealed.push(tux3_fuzz::OPT_RESEAL);
            std::fs::write(dir.join(format!("{name}-reseal.img1k")), resealed)?;
        }
    }
    // replay_log: flags byte, then (sel u16, off u16, byte) edits.
    let dir = root.join("replay_log");
    std::fs::create_dir_all(&dir)?;
    let edit = |sel: u16, off: u16, v: u8| {
        let mut e = sel.to_le_bytes().to_vec();
        e.extend_from_slice(&off.to_le_bytes());
        e.push(v);
        e
    };
    let scripts: Vec<(&str, Vec<u8>)> = vec![
        ("clean-0", vec![0]),
        ("clean-1", vec![4]),
        ("record-byte", [vec![1], edit(0, 60, 0xff)].concat()),
        ("record-byte-rechained", [vec![2 | 4], edit(1, 70, 0x03)].concat()),
        (
            "used-field",
            [vec![3], edit(0, 46, 0xff), edit(0, 47, 0x03)].concat(),
        ),
        ("commit-flag", [vec![2], edit(0, 44, 0x01)].concat()),
        ("next-pointer", [vec![1 | 4], edit(2, 24, 0x05)].concat()),
        ("meta-flip", [vec![1], edit(0xC001, 0x8000 | 20, 0x10)].concat()),
    ];
    for (name, s) in scripts {
        std::fs::write(dir.join(name), s)?;
    }
    println!("seed corpus written to {}", root.display());
    Ok(())
}
