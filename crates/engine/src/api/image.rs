//! API layer: opening an existing image file or block device by path — the
//! device layer reads its head, the superblock's probe finds the block
//! size, and the device is opened with it.
//!
//! Calls the device layer and structures (the superblock's probe).

use crate::device::{file, Device, FileDevice};
use crate::error::{Error, Result};
use crate::structures::superblock::probe_block_size;
use std::path::Path;
use std::sync::Arc;

/// How much of an image is read to find the superblock.
const PROBE_BYTES: u64 = 128 * 1024;

/// Open an existing tux3 image or block device, learning its block size from
/// the superblock.
pub fn open_path(path: &Path, writable: bool) -> Result<Arc<dyn Device>> {
    let bad = |e: std::io::Error| Error::BadImage(format!("{}: {}", path.display(), e));
    let (size, head) = file::read_head(path, PROBE_BYTES).map_err(bad)?;
    let block_size = probe_block_size(&head).ok_or_else(|| {
        Error::BadImage(format!(
            "{}: not a tux3 volume (no valid superblock)",
            path.display()
        ))
    })?;
    if size < 2 * block_size as u64 {
        return Err(Error::BadImage(format!(
            "{}: image is truncated ({size} bytes, less than two {block_size}-byte blocks)",
            path.display()
        )));
    }
    let dev = FileDevice::open(path, block_size, writable).map_err(bad)?;
    Ok(Arc::new(dev))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_path_errors_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let e = open_path(&missing, false).err().unwrap().to_string();
        assert!(e.starts_with(&missing.display().to_string()), "{e}");
        let junk = dir.path().join("junk");
        std::fs::write(&junk, vec![0u8; 8192]).unwrap();
        let e = open_path(&junk, false).err().unwrap().to_string();
        assert!(e.contains("not a tux3 volume"), "{e}");
        assert!(open_path(dir.path(), false).is_err());
    }
}
