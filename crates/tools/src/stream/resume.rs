//! Where a cut receive stopped: the resume token. A receive commits its
//! progress now and then together with a token — which stream (the
//! snapshot's origin and its base's) and the number of the first record
//! not yet applied — kept in the target's live volume as the xattr
//! [`TOKEN_XATTR`] of the root directory, in the same delta as the
//! changes it covers, so after any crash the token and the volume agree.
//! The receive removes it before it takes the snapshot, so no snapshot
//! holds it.
//!
//! The token's text (what `tux3 receive --resume-token` prints and `tux3
//! send --resume` takes) is `1-VOLUME-ID-BASEVOLUME-BASEID-NEXT-CRC`: the
//! numbers in lower-case hex, `x-x` for the base of a full stream, and
//! the CRC32C of everything before the last dash, so a token mistyped is
//! refused rather than taken for another.
//!
//! Calls the engine API (xattrs of the root) and the engine's value types.

use super::{Result, StreamError};
use tux3::types::{SnapOrigin, XattrMode, ROOT_INO};
use tux3::Fs;

/// The root's xattr that holds a receive's token while it is in progress.
/// Linux passes no xattr outside the `user.`, `trusted.`, `security.` and
/// `system.` namespaces to a filesystem, so nothing a mount stores can
/// take this name; a stream that carries it is refused.
pub const TOKEN_XATTR: &[u8] = b"tux3.receive";

/// A receive's place in a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    /// The snapshot the stream carries.
    pub source: SnapOrigin,
    /// Its base, for an incremental stream.
    pub base: Option<SnapOrigin>,
    /// The number of the first record not applied.
    pub next: u64,
}

impl Token {
    /// The token's text.
    pub fn encode(&self) -> String {
        let base = self
            .base
            .map_or("x-x".to_string(), |b| format!("{:x}-{:x}", b.volume, b.id));
        let body = format!(
            "1-{:x}-{:x}-{base}-{:x}",
            self.source.volume, self.source.id, self.next
        );
        let crc = crc32c::crc32c(body.as_bytes());
        format!("{body}-{crc:08x}")
    }

    /// Read a token's text; the error says what is wrong with it.
    pub fn decode(text: &str) -> std::result::Result<Token, String> {
        let text = text.trim();
        let bad = || format!("not a resume token: {text:?}");
        let (body, crc) = text.rsplit_once('-').ok_or_else(bad)?;
        let crc = u32::from_str_radix(crc, 16).map_err(|_| bad())?;
        if crc != crc32c::crc32c(body.as_bytes()) {
            return Err(format!(
                "resume token {text:?} is damaged (its checksum does not match)"
            ));
        }
        let parts: Vec<&str> = body.split('-').collect();
        if parts.first() != Some(&"1") {
            return Err(format!(
                "resume token {text:?} is of a version this tux3 does not know"
            ));
        }
        let [_, sv, si, bv, bi, next] = parts[..] else {
            return Err(bad());
        };
        let hex = |p: &str| u64::from_str_radix(p, 16).map_err(|_| bad());
        let base = match (bv, bi) {
            ("x", "x") => None,
            _ => Some(SnapOrigin {
                volume: hex(bv)?,
                id: hex(bi)?,
            }),
        };
        Ok(Token {
            source: SnapOrigin {
                volume: hex(sv)?,
                id: hex(si)?,
            },
            base,
            next: hex(next)?,
        })
    }
}

/// The token of the receive in progress on `fs`, if any.
pub fn stored(fs: &Fs) -> Result<Option<Token>> {
    match fs.getxattr(ROOT_INO, TOKEN_XATTR) {
        Ok(v) => {
            let text = String::from_utf8_lossy(&v);
            Token::decode(&text).map(Some).map_err(StreamError::Refused)
        }
        Err(e) if e.errno() == tux3::Errno::ENODATA => Ok(None),
        Err(e) => Err(StreamError::engine("reading the receive's token")(e)),
    }
}

/// Keep `t` on `fs` (the caller commits it with the changes it covers).
pub fn store(fs: &Fs, t: &Token) -> Result<()> {
    fs.setxattr(ROOT_INO, TOKEN_XATTR, t.encode().as_bytes(), XattrMode::Any)
        .map_err(StreamError::engine("writing the receive's token"))
}

/// Remove the token (a receive that finished or was abandoned).
pub fn clear(fs: &Fs) -> Result<()> {
    match fs.removexattr(ROOT_INO, TOKEN_XATTR) {
        Ok(()) => Ok(()),
        Err(e) if e.errno() == tux3::Errno::ENODATA => Ok(()),
        Err(e) => Err(StreamError::engine("removing the receive's token")(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_reads_back_and_a_typo_is_caught() {
        let t = Token {
            source: SnapOrigin {
                volume: 0xdead_beef_0123_4567,
                id: 12,
            },
            base: Some(SnapOrigin {
                volume: 0xdead_beef_0123_4567,
                id: 7,
            }),
            next: 4242,
        };
        let text = t.encode();
        assert_eq!(Token::decode(&text), Ok(t));
        let full = Token { base: None, ..t };
        assert_eq!(Token::decode(&full.encode()), Ok(full));
        // A base that is its volume's first snapshot (id 0) is still a base.
        let first = Token {
            base: Some(SnapOrigin { volume: 0, id: 0 }),
            ..t
        };
        assert_eq!(Token::decode(&first.encode()), Ok(first));
        let typo = text.replacen("1092", "1093", 1);
        assert_ne!(typo, text);
        assert!(Token::decode(&typo).unwrap_err().contains("damaged"));
        assert!(Token::decode("hello").is_err());
    }
}
