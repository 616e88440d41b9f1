//! Recording device (stub).
