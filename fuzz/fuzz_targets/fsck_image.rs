//! Fuzz target: check a mutated image. Same input as `open_image`; runs
//! `tools::dump::report` and `tools::fsck::check` with repair (its first
//! pass is the plain read-only check; a repair then writes and re-checks).
#![no_main]
use libfuzzer_sys::fuzz_target;
use tux3_fuzz::{check, device, fit, reseal_all, OPT_RESEAL};

fuzz_target!(|data: &[u8]| {
    let (mut img, opts) = fit(data);
    if opts & OPT_RESEAL != 0 {
        reseal_all(&mut img);
    }
    check(device(&img));
});
