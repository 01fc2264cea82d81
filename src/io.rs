//! File helpers every stage uses: reading text (a UTF-8 byte-order mark is dropped, so files
//! saved by Windows editors load everywhere), atomic writes, JSON Lines, and RFC 3339 time.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{Error, Result};

/// Read a whole file to a string with an error that names it. A leading UTF-8 byte-order mark
/// is removed.
pub fn read_to_string(path: &Path) -> Result<String> {
    let mut text = std::fs::read_to_string(path).map_err(|e| Error::io("reading", path, e))?;
    if text.starts_with('\u{feff}') {
        text.drain(..'\u{feff}'.len_utf8());
    }
    Ok(text)
}

/// What writing `path` will do (see [`write_atomic`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputTarget {
    /// A regular file, or none yet: this file is replaced atomically. It is `path` itself, or
    /// the file a symbolic link leads to (the link is kept).
    File(PathBuf),
    /// An existing file that is not a regular file (a character or block device, a FIFO, a
    /// socket; the links to it followed): written in place, and nothing is made beside it.
    Special(PathBuf),
}

impl OutputTarget {
    /// Whether the output is written in place rather than replaced (see [`OutputTarget`]).
    pub fn is_special(&self) -> bool {
        matches!(self, OutputTarget::Special(_))
    }
}

/// Where writing `path` goes: an existing special file (after following links) is written in
/// place; a symbolic link to a regular file — or to nothing yet — is followed to the file it
/// names; a directory is an error naming it.
pub fn output_target(path: &Path) -> Result<OutputTarget> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Err(Error::io(
            "writing",
            path,
            std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory"),
        )),
        Ok(m) if !m.is_file() => Ok(OutputTarget::Special(path.to_path_buf())),
        Ok(_) => {
            let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_symlink());
            if !is_link {
                return Ok(OutputTarget::File(path.to_path_buf()));
            }
            // (`/dev/stdout` redirected to a file ends here too: the file is replaced)
            std::fs::canonicalize(path)
                .map(OutputTarget::File)
                .map_err(|e| Error::io("resolving", path, e))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // nothing there, or a link to nothing yet: the file the last link names
            let mut cur = path.to_path_buf();
            for _ in 0..40 {
                match std::fs::read_link(&cur) {
                    Ok(next) => {
                        cur = match cur.parent() {
                            Some(dir) if next.is_relative() => dir.join(next),
                            _ => next,
                        };
                    }
                    Err(_) => return Ok(OutputTarget::File(cur)),
                }
            }
            Err(Error::io(
                "resolving",
                path,
                std::io::Error::other("too many levels of symbolic links"),
            ))
        }
        Err(e) => Err(Error::io("writing", path, e)),
    }
}

/// Write a file so that nothing is clobbered: a regular file (or a new one) is written to a
/// sibling temp file, fsynced and renamed over the target — an existing file keeps its mode
/// (and, when permitted, its owner), a new one gets the usual `0666 & !umask`; a symbolic
/// link is followed and stays a link to the new file; an existing device, FIFO or socket is
/// written in place (never replaced by a regular file, so `-o /dev/null` discards and
/// `-o /dev/full` fails with ENOSPC). Errors name the file and the errno.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let file = match output_target(path)? {
        OutputTarget::Special(p) => return write_in_place(&p, bytes),
        OutputTarget::File(p) => p,
    };
    let dir = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| Error::io("creating directory", dir, e))?;
    let existing = std::fs::metadata(&file).ok().filter(|m| m.is_file());
    let mut tmp = tempfile::Builder::new()
        .prefix(".ppol-tmp-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(|e| Error::io("creating temp file in", dir, e))?;
    if let Some(m) = &existing {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        // the owner first (a chown clears set-id bits), then the mode; a user who may not
        // give the file to its owner keeps it
        let _ = std::os::unix::fs::fchown(tmp.as_file(), Some(m.uid()), Some(m.gid()));
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(m.mode() & 0o7777))
            .map_err(|e| Error::io("setting the mode of", &file, named_errno(e)))?;
    }
    tmp.write_all(bytes)
        .and_then(|_| tmp.as_file().sync_all())
        .map_err(|e| Error::io("writing", &file, named_errno(e)))?;
    tmp.persist(&file)
        .map_err(|e| Error::io("renaming temp file to", &file, named_errno(e.error)))?;
    Ok(())
}

/// Write an existing special file in place (no temp file, no rename, nothing beside it).
fn write_in_place(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| Error::io("opening", path, named_errno(e)))?;
    f.write_all(bytes)
        .and_then(|_| f.flush())
        .map_err(|e| Error::io("writing", path, named_errno(e)))
}

/// `e` with the symbolic name of its errno appended (`... (os error 28, ENOSPC)`), for the
/// errors a write meets.
fn named_errno(e: std::io::Error) -> std::io::Error {
    let name = match e.raw_os_error() {
        Some(libc::ENOSPC) => "ENOSPC",
        Some(libc::EDQUOT) => "EDQUOT",
        Some(libc::EFBIG) => "EFBIG",
        Some(libc::EIO) => "EIO",
        Some(libc::EPIPE) => "EPIPE",
        Some(libc::EACCES) => "EACCES",
        Some(libc::EPERM) => "EPERM",
        Some(libc::EROFS) => "EROFS",
        Some(libc::ENXIO) => "ENXIO",
        Some(libc::ENODEV) => "ENODEV",
        Some(libc::EINVAL) => "EINVAL",
        Some(libc::EXDEV) => "EXDEV",
        _ => return e,
    };
    std::io::Error::new(e.kind(), format!("{e}, {name}"))
}

/// Descriptors no forked child may keep (see [`PrivateFile`]); -1 marks a free slot. Atomics,
/// so a child can read them between `fork` and `exec` without taking a lock.
static PRIVATE_FDS: [std::sync::atomic::AtomicI32; MAX_PRIVATE_FDS] =
    [const { std::sync::atomic::AtomicI32::new(-1) }; MAX_PRIVATE_FDS];

/// How many [`PrivateFile`]s a process may hold at once.
pub const MAX_PRIVATE_FDS: usize = 64;

/// A file whose descriptor no forked child keeps: every child ppol forks calls
/// [`close_private_fds`] first. `O_CLOEXEC` covers children that exec at once; this covers the
/// forks that never exec (the sandbox's supervisor and namespace init) and the moments before
/// an exec. It is for descriptors whose lifetime means something to other processes — the run
/// lock's `flock` lasts as long as any copy of its descriptor — so that when the process dies,
/// what it held dies with it.
#[derive(Debug)]
pub struct PrivateFile {
    file: std::fs::File,
}

impl PrivateFile {
    /// Make `file`'s descriptor private. Fails when [`MAX_PRIVATE_FDS`] are in use.
    pub fn new(file: std::fs::File, path: &Path) -> Result<PrivateFile> {
        use std::os::fd::AsRawFd;
        use std::sync::atomic::Ordering;
        let fd = file.as_raw_fd();
        for slot in &PRIVATE_FDS {
            if slot
                .compare_exchange(-1, fd, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return Ok(PrivateFile { file });
            }
        }
        Err(Error::io(
            "opening",
            path,
            std::io::Error::other(format!(
                "this process already holds {MAX_PRIVATE_FDS} run locks"
            )),
        ))
    }

    /// The file.
    pub fn file(&self) -> &std::fs::File {
        &self.file
    }
}

impl Drop for PrivateFile {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        use std::sync::atomic::Ordering;
        let fd = self.file.as_raw_fd();
        for slot in &PRIVATE_FDS {
            if slot
                .compare_exchange(fd, -1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                break;
            }
        }
        // the descriptor itself is closed when `file` drops, after this
    }
}

/// Close the descriptors of every [`PrivateFile`] of the parent, in a child just forked. Only
/// atomic loads and `close`: safe between `fork` and `exec` of a multi-threaded process.
pub fn close_private_fds() {
    use std::sync::atomic::Ordering;
    for slot in &PRIVATE_FDS {
        let fd = slot.load(Ordering::SeqCst);
        if fd >= 0 {
            // SAFETY: close(2) of a descriptor this (forked) process never uses again; it is
            // async-signal-safe.
            unsafe { libc::close(fd) };
        }
    }
}

/// Rows as JSON Lines text.
pub fn to_jsonl<T: Serialize>(rows: &[T]) -> String {
    let mut s = String::new();
    for r in rows {
        s.push_str(&serde_json::to_string(r).expect("serialisable"));
        s.push('\n');
    }
    s
}

/// Write rows as JSON Lines, atomically.
pub fn write_jsonl<T: Serialize>(path: &Path, rows: &[T]) -> Result<()> {
    write_atomic(path, to_jsonl(rows).as_bytes())
}

/// Parse JSON Lines text (blank lines skipped); an error names the file, the line and `what`
/// was expected.
pub fn parse_jsonl<T: DeserializeOwned>(text: &str, path: &Path, what: &str) -> Result<Vec<T>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row = serde_json::from_str(line).map_err(|e| {
            Error::parse(path, format!("line {}", i + 1), format!("not {what}: {e}"))
        })?;
        out.push(row);
    }
    Ok(out)
}

/// Read a JSON Lines file (see [`parse_jsonl`]).
pub fn read_jsonl<T: DeserializeOwned>(path: &Path, what: &str) -> Result<Vec<T>> {
    parse_jsonl(&read_to_string(path)?, path, what)
}

/// Text safe to print on a terminal: control characters (escape sequences included) other
/// than newline and tab, and the bidirectional overrides that reorder what a reader sees
/// (U+202A–U+202E, U+2066–U+2069, U+200E/U+200F, U+061C), are shown as `\u{..}` escapes. For
/// anything an untrusted program or a model wrote (stderr tails, generated text) before it
/// reaches stderr.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(unprintable) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unprintable(c) {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

fn unprintable(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}')
}

/// Now, as RFC 3339 UTC with seconds (`2026-11-24T07:00:00Z`).
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// Seconds since the Unix epoch as RFC 3339 UTC.
pub fn rfc3339(secs: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
        .to_string()
}

/// Seconds since the Unix epoch of an RFC 3339 time (fractions kept); `None` if it is not one.
pub fn parse_rfc3339(s: &str) -> Option<f64> {
    let t = humantime::parse_rfc3339_weak(s.trim()).ok()?;
    t.duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips_known_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_417_200), "2026-11-23T07:00:00Z");
        assert_eq!(rfc3339(4_107_542_399), "2100-02-28T23:59:59Z");
        assert_eq!(now_rfc3339().len(), 20);
        assert_eq!(parse_rfc3339("2000-02-29T00:00:01.5Z"), Some(951_782_401.5));
        assert_eq!(
            parse_rfc3339(&rfc3339(1_795_417_200)),
            Some(1_795_417_200.0)
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
    }

    #[test]
    fn printable_neutralises_escape_sequences() {
        assert_eq!(printable("ok\n\tline"), "ok\n\tline");
        assert_eq!(printable("\u{1b}[2Jgone\r"), "\\u{1b}[2Jgone\\u{d}");
        assert_eq!(printable("a\u{202e}b"), "a\\u{202e}b");
    }

    #[test]
    fn bom_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.jsonl");
        std::fs::write(&p, "\u{feff}{\"a\":1}\n").unwrap();
        assert_eq!(read_to_string(&p).unwrap(), "{\"a\":1}\n");
        let rows: Vec<serde_json::Value> = read_jsonl(&p, "a row").unwrap();
        assert_eq!(rows[0]["a"], 1);
    }
}
