//! Parsers of command-line values: sizes with binary suffixes and block
//! sizes. Pure functions (no I/O), used as clap value parsers and by tests.

/// Smallest block size `mkfs` accepts.
pub const MIN_BLOCK_SIZE: u32 = 1024;
/// Largest block size `mkfs` accepts.
pub const MAX_BLOCK_SIZE: u32 = 65536;

/// Parse a byte count: decimal digits with an optional binary suffix
/// `K`, `M`, `G` or `T` (either case, optionally followed by `iB` or `B`):
/// `4096`, `64K`, `4G`, `1TiB`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(digits_end);
    if digits.is_empty() {
        return Err(format!(
            "invalid size '{text}': expected a number with an optional K, M, G or T suffix"
        ));
    }
    let shift = match suffix.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => {
            return Err(format!(
                "invalid size '{text}': unknown suffix '{suffix}' (use K, M, G or T)"
            ))
        }
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("invalid size '{text}': number too large"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("invalid size '{text}': too large"))
}

/// Parse a block size: a size (suffixes allowed) that is a power of two
/// from [`MIN_BLOCK_SIZE`] to [`MAX_BLOCK_SIZE`].
pub fn parse_block_size(text: &str) -> Result<u32, String> {
    let n = parse_size(text)?;
    if !n.is_power_of_two() || n < MIN_BLOCK_SIZE as u64 || n > MAX_BLOCK_SIZE as u64 {
        return Err(format!(
            "invalid block size '{text}': must be a power of two from {MIN_BLOCK_SIZE} to {MAX_BLOCK_SIZE} bytes"
        ));
    }
    Ok(n as u32)
}
