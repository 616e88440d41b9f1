//! The allocator setting of the `tux3` binaries: `tune_allocator` sets
//! mimalloc's `purge_delay`, whose option number depends on mimalloc's own
//! list (libmimalloc-sys's constants do not follow it).

use libmimalloc_sys::{mi_option_get, mi_version};
use tux3_cli::{tune_allocator, MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS};

#[test]
fn tune_allocator_sets_the_purge_delay() {
    // Before tuning, the option holds purge_delay's documented default for
    // the version linked (10 ms in version 2, 1000 ms in version 3), so the
    // number names that option and not a neighbour (the neighbours default
    // to 0 and 1).
    // SAFETY: reading mimalloc's version and options has no preconditions.
    let (major, before) = unsafe { (mi_version() / 10000, mi_option_get(MI_OPTION_PURGE_DELAY)) };
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        let default = match major {
            2 => 10,
            3 => 1000,
            v => panic!("mimalloc version {v}: check its option list for purge_delay"),
        };
        assert_eq!(
            before, default,
            "option {MI_OPTION_PURGE_DELAY} of mimalloc {major}"
        );
    }
    tune_allocator();
    // SAFETY: as above.
    let after = unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) };
    assert_eq!(after, PURGE_DELAY_MS);
}
