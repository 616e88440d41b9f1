//! The allocator settings of the `tux3` binaries: `tune_allocator` sets
//! mimalloc's `purge_delay` and `allow_thp`, whose option numbers depend
//! on mimalloc's own list (libmimalloc-sys's constants do not follow it).
//! One test: the options are the process's, set once.

use libmimalloc_sys::{mi_option_get, mi_version};
use tux3_cli::{tune_allocator, MI_OPTION_ALLOW_THP, MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS};

#[test]
fn tune_allocator_sets_the_purge_delay_and_turns_huge_pages_off() {
    // Before tuning, each option holds its documented default for the
    // version linked, so each number names that option and not a
    // neighbour: purge_delay 10 ms in version 2, 1000 ms in version 3 (its
    // neighbours 0 and 1); allow_thp 1 in version 3 on Linux (its
    // neighbours 32 and 0).
    // SAFETY: reading mimalloc's version and options has no preconditions.
    let (major, delay, thp) = unsafe {
        (
            mi_version() / 10000,
            mi_option_get(MI_OPTION_PURGE_DELAY),
            mi_option_get(MI_OPTION_ALLOW_THP),
        )
    };
    assert_eq!(
        major, 3,
        "mimalloc {major}: check its option list for purge_delay and allow_thp"
    );
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        assert_eq!(delay, 1000, "option {MI_OPTION_PURGE_DELAY} of mimalloc {major}");
    }
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        assert_eq!(thp, 1, "option {MI_OPTION_ALLOW_THP} of mimalloc {major}");
    }
    tune_allocator();
    // SAFETY: as above.
    let (delay, thp) = unsafe {
        (
            mi_option_get(MI_OPTION_PURGE_DELAY),
            mi_option_get(MI_OPTION_ALLOW_THP),
        )
    };
    assert_eq!(delay, PURGE_DELAY_MS);
    assert_eq!(thp, 0);
}
