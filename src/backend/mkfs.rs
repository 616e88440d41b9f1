//! mkfs: write an empty volume.
use crate::api::types::FormatOptions;
use crate::device::Device;
use crate::error::Result;

/// Write a fresh volume to `dev`.
pub fn format(_dev: &dyn Device, _opts: &FormatOptions) -> Result<()> {
    todo!()
}
