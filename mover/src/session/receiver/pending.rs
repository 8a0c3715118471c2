//! A file the generator requested from the sender, as the applier meets it
//! again when its data arrives: the one type both halves of the receiver's
//! tree pipeline share, so neither imports the other.

use crate::meta::Meta;
use crate::path::RelPath;
use crate::signature::SigShape;

use super::resume::Resume;

/// A file requested from the sender.
#[derive(Debug, Clone)]
pub struct PendingFile {
    pub path: RelPath,
    pub meta: Meta,
    pub basis: Option<SigShape>,
    /// Already requested again after a failed verification.
    pub redo: bool,
    /// Continues a partial file an earlier attempt left.
    pub resume: Option<Resume>,
}
