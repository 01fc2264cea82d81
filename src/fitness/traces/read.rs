//! Reading a trace file in bounded memory: the whole text (a size cap; a line cap for line-based
//! files), checked to be UTF-8 in parallel pieces, with the line of a bad byte.

use std::path::Path;

use rayon::prelude::*;

use crate::{Error, Result};

/// The text of a trace file (`-` reads standard input; `hf://` paths are fetched into the
/// shared Hugging Face cache first), read in bounded memory: a file larger than
/// [`limits::MAX_INPUT_BYTES`](crate::limits::MAX_INPUT_BYTES) is refused, and so is a line
/// longer than [`limits::MAX_LINE_BYTES`](crate::limits::MAX_LINE_BYTES) in a file that is
/// not one JSON document (JSON Lines, text), as soon as it is met. The error names the file
/// and the line.
pub fn read_text(path: &Path) -> Result<String> {
    use crate::io::LongLines;
    let (bytes, shown) = if path == Path::new("-") {
        let shown = Path::new("<stdin>");
        let bytes = crate::io::read_bounded(
            &mut std::io::stdin().lock(),
            shown,
            None,
            LongLines::UnlessJson,
        )?;
        (bytes, shown)
    } else {
        let local = crate::hub::local_path(path)?;
        (
            crate::io::read_file(&local, path, LongLines::UnlessJson)?,
            path,
        )
    };
    utf8_text(bytes, shown)
}

/// The bytes as text, checked in parallel pieces; the error names the line of the first byte
/// that is not UTF-8.
pub(super) fn utf8_text(bytes: Vec<u8>, path: &Path) -> Result<String> {
    let bad = newline_pieces(&bytes)
        .into_par_iter()
        .filter_map(|r| {
            std::str::from_utf8(&bytes[r.clone()])
                .err()
                .map(|e| r.start + e.valid_up_to())
        })
        .min();
    match bad {
        None => {
            // SAFETY: every piece was checked to be UTF-8 above, and the pieces cover `bytes`
            // end to end, split after b'\n' bytes, which never occur inside a multi-byte
            // character; so `bytes` is UTF-8 as a whole.
            Ok(unsafe { String::from_utf8_unchecked(bytes) })
        }
        Some(at) => {
            let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
            Err(Error::parse(
                path,
                format!("line {line}"),
                format!("not UTF-8 text (byte {at} of the file); trace files must be UTF-8"),
            ))
        }
    }
}

/// Split `bytes` into consecutive ranges, each ending just after a b'\n' (the last one at the
/// end), for parallel work: about eight per thread, none much shorter than 256 KiB.
pub(super) fn newline_pieces(bytes: &[u8]) -> Vec<std::ops::Range<usize>> {
    const MIN_PIECE: usize = 256 * 1024;
    let pieces = (rayon::current_num_threads() * 8)
        .min(bytes.len() / MIN_PIECE)
        .max(1);
    let target = bytes.len() / pieces;
    let mut out = Vec::with_capacity(pieces);
    let mut start = 0;
    while start < bytes.len() {
        let from = (start + target).min(bytes.len());
        let end = match bytes[from..].iter().position(|&b| b == b'\n') {
            Some(i) if out.len() + 1 < pieces => from + i + 1,
            _ => bytes.len(),
        };
        out.push(start..end);
        start = end;
    }
    out
}
