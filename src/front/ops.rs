//! The operations layer (filled in next).
