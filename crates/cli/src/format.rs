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
