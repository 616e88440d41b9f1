//! Fuzz target: mount a mutated image. The input is a whole image of 1 KiB
//! blocks (padded to 64 blocks, cut to 256); bit 0 of the byte after the
//! last whole block reseals every metadata block's checksum first, so the
//! damage reaches the decoders. If `Fs::open` succeeds: walk the namespace,
//! read everything, make a few changes, sync, unify and close.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tux3_fuzz::{device, exercise, fit, reseal_all, OPT_RESEAL};

fuzz_target!(|data: &[u8]| {
    let (mut img, opts) = fit(data);
    if opts & OPT_RESEAL != 0 {
        reseal_all(&mut img);
    }
    exercise(device(&img));
});
