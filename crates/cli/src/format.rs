//! Text formatting for listings: `ls -l` mode strings and timestamps.
//! Pure functions except [`local_offset`], which asks libc for the local
//! time zone. Calls nothing else in the crate beyond the API's value types.

use tux3::types::Timespec;

/// The ten-character mode string of `ls -l`: type letter, then `rwx` for
/// user, group and other, with set-user-id, set-group-id and sticky bits
/// shown as `s`/`S` and `t`/`T`. Example: `0o100644` gives `-rw-r--r--`.
pub fn mode_string(mode: u32) -> String {
    let kind = match mode & libc::S_IFMT {
        libc::S_IFDIR => 'd',
        libc::S_IFLNK => 'l',
        libc::S_IFIFO => 'p',
        libc::S_IFCHR => 'c',
        libc::S_IFBLK => 'b',
        libc::S_IFSOCK => 's',
        libc::S_IFREG => '-',
        _ => '?',
    };
    let mut s = String::with_capacity(10);
    s.push(kind);
    // (read bit, write bit, execute bit, special bit, letter when special)
    let triads = [
        (0o400, 0o200, 0o100, libc::S_ISUID, 's'),
        (0o040, 0o020, 0o010, libc::S_ISGID, 's'),
        (0o004, 0o002, 0o001, libc::S_ISVTX, 't'),
    ];
    for (r, w, x, special, letter) in triads {
        s.push(if mode & r != 0 { 'r' } else { '-' });
        s.push(if mode & w != 0 { 'w' } else { '-' });
        let exec = mode & x != 0;
        s.push(match (mode & special != 0, exec) {
            (true, true) => letter,
            (true, false) => letter.to_ascii_uppercase(),
            (false, true) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// The proleptic Gregorian date (year, month 1..=12, day 1..=31) of a day
/// counted from 1970-01-01 (Howard Hinnant's `civil_from_days`).
pub fn civil_date(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `YYYY-MM-DD HH:MM` of `ts` in a zone `utc_offset` seconds east of UTC.
pub fn format_time(ts: Timespec, utc_offset: i64) -> String {
    let t = ts.sec.saturating_add(utc_offset);
    let days = t.div_euclid(86_400);
    let secs = t.rem_euclid(86_400);
    let (y, m, d) = civil_date(days);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}", secs / 3600, secs % 3600 / 60)
}

/// Seconds east of UTC of the local time zone at instant `sec`.
pub fn local_offset(sec: i64) -> i64 {
    let t = sec as libc::time_t;
    // SAFETY: an all-zero `tm` is a valid value of this plain C struct.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call; localtime_r is reentrant.
    let r = unsafe { libc::localtime_r(&t, &mut tm) };
    if r.is_null() {
        0
    } else {
        tm.tm_gmtoff as i64
    }
}

/// `YYYY-MM-DD HH:MM` of `ts` in local time.
pub fn format_local_time(ts: Timespec) -> String {
    format_time(ts, local_offset(ts.sec))
}

/// `YYYY-MM-DD HH:MM:SS` of `sec` (seconds since the epoch) in a zone
/// `utc_offset` seconds east of UTC.
pub fn format_time_seconds(sec: i64, utc_offset: i64) -> String {
    let t = sec.saturating_add(utc_offset);
    let (y, m, d) = civil_date(t.div_euclid(86_400));
    let s = t.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        s / 3600,
        s % 3600 / 60,
        s % 60
    )
}

/// A byte count as `df -h` shows it: powers of 1024, rounded up, one
/// decimal below 10 (`0`, `1000`, `4.0K`, `9.8M`, `12G`).
pub fn human_size(bytes: u64) -> String {
    const UNITS: [char; 6] = ['K', 'M', 'G', 'T', 'P', 'E'];
    if bytes < 1024 {
        return bytes.to_string();
    }
    let bytes = u128::from(bytes);
    let mut i = 0;
    loop {
        let (scale, unit) = (1u128 << (10 * (i + 1)), UNITS[i]);
        let tenths = (bytes * 10).div_ceil(scale);
        if tenths < 100 {
            return format!("{}.{}{unit}", tenths / 10, tenths % 10);
        }
        let whole = bytes.div_ceil(scale);
        if whole < 1024 || i + 1 == UNITS.len() {
            return format!("{whole}{unit}");
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_like_df() {
        let cases = [
            (0, "0"),
            (1000, "1000"),
            (1024, "1.0K"),
            (1025, "1.1K"),
            (4096, "4.0K"),
            (10 * 1024 - 1, "10K"),
            (12 << 20, "12M"),
            ((1 << 30) - 1, "1.0G"),
            (5 << 40, "5.0T"),
            (u64::MAX, "16E"),
        ];
        for (n, want) in cases {
            assert_eq!(human_size(n), want, "{n}");
        }
    }

    #[test]
    fn times_have_seconds() {
        assert_eq!(format_time_seconds(0, 0), "1970-01-01 00:00:00");
        assert_eq!(format_time_seconds(1_795_686_902, 3600), "2026-11-26 10:55:02");
    }
}
