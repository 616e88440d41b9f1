//! Image file or block device (stub).
