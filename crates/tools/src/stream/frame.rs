//! Send streams: the bytes around the records — the preamble, and each
//! record's head (length, kind, number) and CRC32C — written by
//! [`Writer`] and read and checked by [`Reader`], which names a damaged
//! or missing record by its number and byte offset. Calls `record.rs`
//! and `crc32c`.

use super::{Record, Result, StreamError, HEAD_LEN, MAGIC, MAX_BODY, PREAMBLE_LEN, VERSION};
use std::io::{self, Read, Write};

/// The preamble: magic, version, CRC32C of the first 12 bytes.
pub fn preamble() -> [u8; PREAMBLE_LEN] {
    let mut p = [0u8; PREAMBLE_LEN];
    p[..8].copy_from_slice(MAGIC);
    p[8..12].copy_from_slice(&VERSION.to_le_bytes());
    let crc = crc32c::crc32c(&p[..12]);
    p[12..].copy_from_slice(&crc.to_le_bytes());
    p
}

/// Writes a stream: the preamble, then records numbered from 0; records
/// below `skip_below` are counted but not written (a resumed stream).
pub struct Writer<W: Write> {
    out: W,
    next: u64,
    skip_below: u64,
    /// Bytes written so far.
    pub bytes: u64,
}

impl<W: Write> Writer<W> {
    /// Start a stream on `out` (the preamble is written at once).
    pub fn new(mut out: W, skip_below: u64) -> Result<Writer<W>> {
        out.write_all(&preamble()).map_err(StreamError::Io)?;
        Ok(Writer {
            out,
            next: 0,
            skip_below,
            bytes: PREAMBLE_LEN as u64,
        })
    }

    /// The number the next record gets.
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// Whether the next record is written (not skipped by a resume):
    /// callers build costly records (file data) only then. `Begin` is
    /// always written.
    pub fn wants_next(&self) -> bool {
        self.next == 0 || self.next >= self.skip_below
    }

    /// Write (or skip) the next record.
    pub fn put(&mut self, r: &Record) -> Result<()> {
        if self.wants_next() {
            let f = r.frame(self.next);
            self.out.write_all(&f).map_err(StreamError::Io)?;
            self.bytes += f.len() as u64;
        }
        self.next += 1;
        Ok(())
    }

    /// Count a record that is not written (the caller saw
    /// [`Writer::wants_next`] false).
    pub fn skip(&mut self) {
        self.next += 1;
    }

    pub fn flush(&mut self) -> Result<()> {
        self.out.flush().map_err(StreamError::Io)
    }
}

/// Reads a stream, checking the preamble, every record's checksum and
/// that the numbers follow each other.
pub struct Reader<R: Read> {
    inp: R,
    /// Bytes read so far: the offset of the next record.
    pub offset: u64,
    /// The number the next record must have (`None` before `Begin`).
    next: Option<u64>,
}

/// Read exactly `buf.len()` bytes; `Ok(false)` if the stream ended first
/// (`*got` says how many came).
fn read_full(inp: &mut impl Read, buf: &mut [u8], got: &mut usize) -> io::Result<bool> {
    while *got < buf.len() {
        match inp.read(&mut buf[*got..]) {
            Ok(0) => return Ok(false),
            Ok(n) => *got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

impl<R: Read> Reader<R> {
    /// Read and check the preamble.
    pub fn new(mut inp: R) -> Result<Reader<R>> {
        let mut p = [0u8; PREAMBLE_LEN];
        let mut got = 0;
        if !read_full(&mut inp, &mut p, &mut got).map_err(StreamError::Io)? {
            return Err(if got == 0 || p[..got.min(8)] == MAGIC[..got.min(8)] {
                StreamError::Cut { record: 0, offset: 0 }
            } else {
                StreamError::NotAStream
            });
        }
        if &p[..8] != MAGIC {
            return Err(StreamError::NotAStream);
        }
        let crc = u32::from_le_bytes([p[12], p[13], p[14], p[15]]);
        if crc != crc32c::crc32c(&p[..12]) {
            return Err(StreamError::BadPreamble);
        }
        let version = u32::from_le_bytes([p[8], p[9], p[10], p[11]]);
        if version != VERSION {
            return Err(StreamError::Version(version));
        }
        Ok(Reader {
            inp,
            offset: PREAMBLE_LEN as u64,
            next: None,
        })
    }

    /// The next record and its number; `None` at a clean end of the
    /// bytes (the caller decides whether a record was missing).
    pub fn read(&mut self) -> Result<Option<(u64, Record)>> {
        let at = self.offset;
        let record = self.next.unwrap_or(0);
        let mut head = [0u8; HEAD_LEN];
        let mut got = 0;
        if !read_full(&mut self.inp, &mut head, &mut got).map_err(StreamError::Io)? {
            if got == 0 {
                return Ok(None);
            }
            return Err(StreamError::Cut { record, offset: at });
        }
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let k = head[4];
        let mut s = [0u8; 8];
        s.copy_from_slice(&head[8..16]);
        let seq = u64::from_le_bytes(s);
        let malformed = |why: String| StreamError::Malformed {
            record,
            offset: at,
            why,
        };
        if len > MAX_BODY {
            // Checked before the checksum: a damaged length must not make
            // us read (or allocate) far past the record.
            return Err(StreamError::Checksum { record, offset: at });
        }
        let mut rest = vec![0u8; len + 4];
        let mut got = 0;
        if !read_full(&mut self.inp, &mut rest, &mut got).map_err(StreamError::Io)? {
            return Err(StreamError::Cut { record, offset: at });
        }
        self.offset += (HEAD_LEN + len + 4) as u64;
        let mut c = [0u8; 4];
        c.copy_from_slice(&rest[len..]);
        let mut digest = crc32c::crc32c(&head);
        digest = crc32c::crc32c_append(digest, &rest[..len]);
        if u32::from_le_bytes(c) != digest {
            return Err(StreamError::Checksum { record, offset: at });
        }
        if head[5..8] != [0, 0, 0] {
            return Err(malformed("reserved bytes 5..8 are not zero".into()));
        }
        let r = Record::decode(k, &rest[..len]).map_err(malformed)?;
        match (&r, self.next) {
            (Record::Begin(b), None) if seq == 0 => self.next = Some(b.resume_from),
            (_, None) => return Err(malformed("the first record is not Begin number 0".into())),
            (Record::Begin(_), Some(_)) => return Err(malformed("a second Begin".into())),
            (_, Some(n)) if seq != n => {
                return Err(malformed(format!("numbered {seq}, expected {n}")));
            }
            (_, Some(n)) => self.next = Some(n + 1),
        }
        Ok(Some((seq, r)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Attrs, Begin};
    use super::*;
    use tux3::types::{SnapOrigin, Timespec};

    fn t(sec: i64, nsec: u32) -> Timespec {
        Timespec { sec, nsec }
    }

    fn all() -> Vec<Record> {
        let attrs = Attrs {
            mode: 0o100644,
            uid: 1,
            gid: 2,
            atime: t(3, 4),
            mtime: t(-5, 6),
            ctime: t(7, 999_999_999),
            btime: t(8, 0),
        };
        vec![
            Record::Begin(Begin {
                source: SnapOrigin { volume: 9, id: 3 },
                base: Some(SnapOrigin { volume: 9, id: 2 }),
                resume_from: 1,
                staging_ino: 77,
                block_size: 4096,
                name: b"snap".to_vec(),
                staging_name: b".s".to_vec(),
            }),
            Record::Create {
                parent: 1,
                ino: 16,
                mode: 0o120777,
                uid: 0,
                gid: 0,
                rdev: 0,
                btime: t(1, 2),
                name: b"l".to_vec(),
                target: b"/x".to_vec(),
            },
            Record::Link {
                ino: 16,
                parent: 1,
                name: b"m".to_vec(),
            },
            Record::Unlink {
                parent: 1,
                ino: 16,
                name: b"m".to_vec(),
            },
            Record::Rmdir {
                parent: 1,
                ino: 18,
                name: b"d".to_vec(),
            },
            Record::Rename {
                parent: 1,
                newparent: 17,
                ino: 19,
                is_dir: true,
                name: b"a".to_vec(),
                newname: b"b".to_vec(),
            },
            Record::Write {
                ino: 16,
                offset: 5,
                data: vec![1, 2, 3],
            },
            Record::Truncate { ino: 16, size: 9 },
            Record::SetXattr {
                ino: 16,
                name: b"user.a".to_vec(),
                value: vec![],
            },
            Record::RemoveXattr {
                ino: 16,
                name: b"user.a".to_vec(),
            },
            Record::Attr { ino: 16, attrs },
            Record::Symlink {
                ino: 20,
                target: b"/t".to_vec(),
            },
            Record::Rdev {
                ino: 21,
                rdev: 0x0801,
            },
            Record::Clone {
                dst: 22,
                dst_offset: 8192,
                src: 16,
                src_offset: 4096,
                len: 12_345,
            },
            Record::End(attrs),
        ]
    }

    fn stream() -> Vec<u8> {
        let mut w = Writer::new(Vec::new(), 0).unwrap();
        for r in all() {
            w.put(&r).unwrap();
        }
        w.out
    }

    #[test]
    fn every_kind_reads_back_as_written() {
        let bytes = stream();
        let mut r = Reader::new(&bytes[..]).unwrap();
        let mut got = Vec::new();
        while let Some((seq, rec)) = r.read().unwrap() {
            assert_eq!(seq, got.len() as u64);
            got.push(rec);
        }
        assert_eq!(got, all());
        assert_eq!(r.offset, bytes.len() as u64);
    }

    #[test]
    fn a_flipped_bit_is_named_by_record_and_offset() {
        let bytes = stream();
        // The third record starts after the preamble and two records.
        let first = all()[0].frame(0).len() + all()[1].frame(1).len();
        let at = PREAMBLE_LEN + first;
        let mut bad = bytes.clone();
        bad[at + HEAD_LEN + 3] ^= 0x10;
        let mut r = Reader::new(&bad[..]).unwrap();
        r.read().unwrap();
        r.read().unwrap();
        match r.read() {
            Err(StreamError::Checksum { record, offset }) => {
                assert_eq!((record, offset), (2, at as u64));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_cut_anywhere_is_an_error_not_a_short_success() {
        let bytes = stream();
        for cut in 0..bytes.len() {
            let r = Reader::new(&bytes[..cut]);
            let mut r = match r {
                Err(StreamError::Cut { .. }) => continue,
                Err(e) => panic!("cut {cut}: {e}"),
                Ok(r) => r,
            };
            let mut n = 0;
            let end = loop {
                match r.read() {
                    Ok(Some(_)) => n += 1,
                    Ok(None) => break None,
                    Err(e) => break Some(e),
                }
            };
            // A clean end only at a record boundary, with fewer records.
            match end {
                None => assert!(n < all().len()),
                Some(StreamError::Cut { record, .. }) => assert_eq!(record, n as u64),
                Some(e) => panic!("cut {cut}: {e}"),
            }
        }
    }

    #[test]
    fn version_and_magic_are_checked() {
        let mut p = preamble();
        p[8] = 2;
        let crc = crc32c::crc32c(&p[..12]);
        p[12..].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(Reader::new(&p[..]), Err(StreamError::Version(2))));
        assert!(matches!(
            Reader::new(&b"hello world, not a stream"[..]),
            Err(StreamError::NotAStream)
        ));
    }

    /// A record of a kind this reader does not know (one a newer writer
    /// added) is refused, named, never skipped or read as another; so is
    /// a `Clone` of no bytes or past 2^64.
    #[test]
    fn an_unknown_kind_and_a_bad_clone_are_refused() {
        let begin = all()[0].frame(0);
        let refused = |rec: Vec<u8>| {
            let mut bytes = preamble().to_vec();
            bytes.extend_from_slice(&begin);
            bytes.extend_from_slice(&rec);
            let mut r = Reader::new(&bytes[..]).unwrap();
            r.read().unwrap();
            match r.read() {
                Err(StreamError::Malformed { record: 1, why, .. }) => why,
                other => panic!("{other:?}"),
            }
        };
        let mut rec = Record::Truncate { ino: 16, size: 1 }.frame(1);
        rec[4] = 16;
        let n = rec.len();
        let crc = crc32c::crc32c(&rec[..n - 4]);
        rec[n - 4..].copy_from_slice(&crc.to_le_bytes());
        let why = refused(rec);
        assert!(why.contains("unknown record kind 16"), "{why}");
        let clone = |dst_offset, len| Record::Clone {
            dst: 17,
            dst_offset,
            src: 16,
            src_offset: 0,
            len,
        };
        let why = refused(clone(0, 0).frame(1));
        assert!(why.contains("length 0"), "{why}");
        let why = refused(clone(u64::MAX - 10, 11).frame(1));
        assert!(why.contains("past 2^64"), "{why}");
    }
}
