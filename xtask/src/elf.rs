//! Whether a Linux binary runs without a dynamic loader: what `ldd` says
//! as "statically linked", read from the ELF headers themselves.

use std::path::Path;

use object::elf;
use object::read::elf::{Dyn, ElfFile64, FileHeader, ProgramHeader};
use object::Endianness;

#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a 64-bit ELF file: {message}")]
    Parse { path: String, message: String },
}

/// How a binary is linked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Linkage {
    /// No program interpreter and no shared libraries: runs on its own.
    Static,
    /// Needs the dynamic loader `interpreter` and the `needed` libraries.
    Dynamic {
        interpreter: Option<String>,
        needed: Vec<String>,
    },
}

/// The linkage of the ELF file at `path`.
pub fn linkage(path: &Path) -> Result<Linkage, ElfError> {
    let shown = path.display().to_string();
    let data = std::fs::read(path).map_err(|source| ElfError::Read {
        path: shown.clone(),
        source,
    })?;
    let parse = |e: object::Error| ElfError::Parse {
        path: shown.clone(),
        message: e.to_string(),
    };
    let file = ElfFile64::<Endianness>::parse(&*data).map_err(parse)?;
    let endian = file.endian();
    let header = file.elf_header();
    let mut interpreter = None;
    let mut needed = Vec::new();
    for segment in header.program_headers(endian, &*data).map_err(parse)? {
        match segment.p_type(endian) {
            elf::PT_INTERP => {
                let bytes = segment.interpreter(endian, &*data).map_err(parse)?;
                interpreter = bytes.map(|b| String::from_utf8_lossy(b).into_owned());
            }
            elf::PT_DYNAMIC => {
                let Some(entries) = segment.dynamic(endian, &*data).map_err(parse)? else {
                    continue;
                };
                // DT_NEEDED names are offsets into the dynamic string
                // table; the names are not needed to tell "has some".
                for entry in entries {
                    if entry.d_tag(endian) == elf::DT_NEEDED {
                        needed.push(format!("(string table offset {})", entry.d_val(endian)));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(if interpreter.is_none() && needed.is_empty() {
        Linkage::Static
    } else {
        Linkage::Dynamic {
            interpreter,
            needed,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_binary_is_told_apart() {
        // The test binary itself: cargo links tests against the system's
        // libc dynamically.
        let me = std::env::current_exe().expect("current exe");
        match linkage(&me).expect("an ELF file") {
            Linkage::Dynamic {
                interpreter,
                needed,
            } => {
                assert!(interpreter.is_some_and(|i| i.contains("ld-linux")));
                assert!(!needed.is_empty());
            }
            Linkage::Static => panic!("a test binary is dynamic"),
        }
    }

    #[test]
    fn a_non_elf_file_is_an_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("script");
        std::fs::write(&path, "#!/bin/sh\n").expect("write");
        assert!(matches!(linkage(&path), Err(ElfError::Parse { .. })));
    }
}
