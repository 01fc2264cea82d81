//! File helpers every stage uses, one file per job: reading text in bounded memory (a UTF-8
//! byte-order mark is dropped, so files saved by Windows editors load everywhere), atomic
//! writes and RFC 3339 time here; JSON and JSON Lines with bidi controls escaped (`json`);
//! text safe to show (`text`: [`printable`], bidi controls); digests (`hash`: [`hex`],
//! [`sha256_hex`]). Process hygiene (descriptors no forked child keeps, CPU time) lives with
//! the child processes, in [`crate::child`].

use std::path::{Path, PathBuf};

use crate::{limits, Error, Result};

mod hash;
mod json;
mod text;

pub use hash::{hex, sha256_hex};
pub use json::{
    parse_jsonl, read_jsonl, to_json, to_json_pretty, to_jsonl, write_json, write_jsonl,
};
pub use text::{is_bidi_control, neutralize_bidi, printable};

/// Read a whole file to a string with an error that names it. A leading UTF-8 byte-order mark
/// is removed. A file larger than [`limits::MAX_INPUT_BYTES`] is refused (before it is read
/// when its size is known, else once that much has been read).
pub fn read_to_string(path: &Path) -> Result<String> {
    text_of(read_file(path, path, LongLines::Allow)?, path)
}

/// [`read_to_string`] of a file of one kind (`what`: "a task file", "a configuration") that is
/// never larger than `max` bytes: a regular file is refused before it is read, and a device or
/// a FIFO (`/dev/zero`, a pipe) is read no further than `max` (nor, with
/// [`LongLines::Refuse`], than [`limits::MAX_LINE_BYTES`] into one line).
pub fn read_text_capped(
    path: &Path,
    max: u64,
    what: &'static str,
    long_lines: LongLines,
) -> Result<String> {
    let mut file = std::fs::File::open(path).map_err(|e| Error::io("reading", path, e))?;
    let meta = file.metadata().map_err(|e| Error::io("reading", path, e))?;
    let size = meta.is_file().then_some(meta.len());
    let caps = Caps {
        file: max.min(limits::MAX_INPUT_BYTES),
        line: limits::MAX_LINE_BYTES,
        what,
    };
    text_of(
        read_bounded_with(&mut file, path, size, long_lines, caps)?,
        path,
    )
}

/// [`read_text_capped`] of a file that must be a regular file (`what`: "a judge prompt", "a
/// generator program"): it is opened without blocking and checked before a byte is read, so a
/// FIFO nobody writes to, a device (`/dev/zero`) or a directory is one error naming its kind,
/// never a wait or a read to the cap; a regular file over `max` bytes is refused unread.
pub fn read_regular_text(path: &Path, max: u64, what: &'static str) -> Result<String> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| Error::io("reading", path, e))?;
    let meta = file.metadata().map_err(|e| Error::io("reading", path, e))?;
    let t = meta.file_type();
    if !t.is_file() {
        let kind = if t.is_fifo() {
            "a FIFO (named pipe)"
        } else if t.is_char_device() || t.is_block_device() {
            "a device"
        } else if t.is_dir() {
            "a directory"
        } else if t.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        };
        return Err(Error::parse(
            path,
            "file",
            format!("is {kind}: {what} is read from a regular file"),
        ));
    }
    let caps = Caps {
        file: max.min(limits::MAX_INPUT_BYTES),
        line: limits::MAX_LINE_BYTES,
        what,
    };
    text_of(
        read_bounded_with(&mut file, path, Some(meta.len()), LongLines::Allow, caps)?,
        path,
    )
}

/// A configuration file (TOML) as text: [`read_text_capped`] at
/// [`limits::MAX_TEXT_FILE_BYTES`].
pub fn read_config_text(path: &Path) -> Result<String> {
    read_text_capped(
        path,
        limits::MAX_TEXT_FILE_BYTES,
        "a configuration",
        LongLines::Allow,
    )
}

/// Bytes read from `path` as text: UTF-8, a leading byte-order mark removed.
fn text_of(bytes: Vec<u8>, path: &Path) -> Result<String> {
    let mut text = String::from_utf8(bytes).map_err(|_| {
        let e = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        );
        Error::io("reading", path, e)
    })?;
    if text.starts_with('\u{feff}') {
        text.drain(..'\u{feff}'.len_utf8());
    }
    Ok(text)
}

/// What a bounded read does with a line longer than [`limits::MAX_LINE_BYTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LongLines {
    /// Allow it (only the size of the whole file is bounded): JSON documents, TOML.
    Allow,
    /// Stop reading and refuse the file, naming the line: line-based inputs (JSON Lines).
    Refuse,
    /// Refuse it unless the file opens a JSON document (its first character other than
    /// white space and a byte-order mark is `[` or `{`): trace files, whose format is known
    /// by content. A JSON Lines file opens with `{` too; its lines are checked once it is
    /// parsed as such.
    UnlessJson,
}

/// The bounds of a read: [`limits::MAX_INPUT_BYTES`] and [`limits::MAX_LINE_BYTES`]
/// (smaller in tests).
#[derive(Debug, Clone, Copy)]
struct Caps {
    file: u64,
    line: usize,
    /// What the file cap is of, in messages.
    what: &'static str,
}

const CAPS: Caps = Caps {
    file: limits::MAX_INPUT_BYTES,
    line: limits::MAX_LINE_BYTES,
    what: "one input file",
};

/// Read the file `open` (errors name `shown`) in bounded memory: a regular file larger than
/// [`limits::MAX_INPUT_BYTES`] is refused before it is read; a stream (a FIFO, a device) is
/// read no further than that, and no further than [`limits::MAX_LINE_BYTES`] into a line
/// that `long_lines` refuses.
pub fn read_file(open: &Path, shown: &Path, long_lines: LongLines) -> Result<Vec<u8>> {
    let mut file = std::fs::File::open(open).map_err(|e| Error::io("reading", shown, e))?;
    let meta = file
        .metadata()
        .map_err(|e| Error::io("reading", shown, e))?;
    let size = meta.is_file().then_some(meta.len());
    read_bounded_with(&mut file, shown, size, long_lines, CAPS)
}

/// Read `reader` to its end in bounded memory (see [`read_file`]); `size` is its length when
/// known (a regular file), used to refuse a large file at once and to allocate once.
pub fn read_bounded(
    reader: &mut dyn std::io::Read,
    shown: &Path,
    size: Option<u64>,
    long_lines: LongLines,
) -> Result<Vec<u8>> {
    read_bounded_with(reader, shown, size, long_lines, CAPS)
}

fn read_bounded_with(
    reader: &mut dyn std::io::Read,
    shown: &Path,
    size: Option<u64>,
    long_lines: LongLines,
    caps: Caps,
) -> Result<Vec<u8>> {
    use std::io::Read;
    const CHUNK: usize = 8 << 20;
    let too_big = |at: String, what: String| {
        Error::parse(
            shown,
            at,
            format!(
                "{what} larger than {}, the most ppol reads of {}",
                limits::bytes(caps.file),
                caps.what
            ),
        )
    };
    if let Some(n) = size.filter(|&n| n > caps.file) {
        return Err(too_big("file".into(), format!("{n} bytes,")));
    }
    // one byte more than allowed tells a file of exactly the limit from a larger one
    let max = usize::try_from(caps.file.saturating_add(1)).unwrap_or(usize::MAX);
    let mut buf: Vec<u8> = Vec::new();
    if let Some(n) = size {
        // a regular file: its length plus one byte to see the end (it may have grown)
        buf.reserve_exact((n as usize).saturating_add(1).min(max));
    }
    // the line being read: its number, and its length so far
    let (mut line, mut line_len) = (1usize, 0usize);
    // whether a long line is refused (for `UnlessJson`, known at the first non-blank byte)
    let mut refuse: Option<bool> = match long_lines {
        LongLines::Allow => Some(false),
        LongLines::Refuse => Some(true),
        LongLines::UnlessJson => None,
    };
    loop {
        if buf.len() == buf.capacity() {
            // grow geometrically, never beyond the limit (plus the byte that detects it)
            let want = buf.capacity().max(CHUNK).min(max - buf.len());
            buf.try_reserve_exact(want)
                .map_err(|e| Error::io("reading", shown, std::io::Error::other(e)))?;
        }
        let start = buf.len();
        let mut room = (buf.capacity() - start).min(max - start);
        if size.is_none() {
            // a stream: look at what came in every few MiB
            room = room.min(CHUNK);
        }
        let n = std::io::Read::take(&mut *reader, room as u64)
            .read_to_end(&mut buf)
            .map_err(|e| Error::io("reading", shown, e))?;
        if refuse.is_none() {
            let head = buf.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&buf);
            if let Some(&first) = head.iter().find(|b| !b.is_ascii_whitespace()) {
                refuse = Some(first != b'[' && first != b'{');
            }
        }
        let mut from = start;
        for nl in memchr::memchr_iter(b'\n', &buf[start..]) {
            line_len += start + nl - from;
            if line_len > caps.line && refuse != Some(false) {
                return Err(long_line(shown, line, caps.line));
            }
            line += 1;
            line_len = 0;
            from = start + nl + 1;
        }
        line_len += buf.len() - from;
        if line_len > caps.line && refuse != Some(false) {
            return Err(long_line(shown, line, caps.line));
        }
        if buf.len() as u64 > caps.file {
            return Err(too_big(format!("line {line}"), "the file is".into()));
        }
        if n < room {
            return Ok(buf);
        }
    }
}

/// The error for line `line` of `path`, longer than `cap` bytes.
pub fn long_line(path: &Path, line: usize, cap: usize) -> Error {
    Error::parse(
        path,
        format!("line {line}"),
        format!(
            "the line is longer than {}, the most ppol reads of one line",
            limits::bytes(cap as u64)
        ),
    )
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
        // right-to-left letters and direction marks stay readable
        let rtl = "שלום \u{200f}(עולם) مرحبا\u{061c}";
        assert_eq!(printable(rtl), rtl);
        assert_eq!(neutralize_bidi(rtl), rtl);
        assert_eq!(
            neutralize_bidi("\u{2067}x\u{2069}\r"),
            "\\u{2067}x\\u{2069}\r"
        );
    }

    #[test]
    fn json_escapes_bidi_controls_and_parses_back_to_the_same_string() {
        let v = serde_json::json!({
            "text": "say \u{202e}gnp.exe\u{202c} שלום \u{7f}\u{85}",
            "list": ["\u{2066}", "a\nb", "😀"],
        });
        let lines = to_jsonl(&[&v, &v]);
        let docs = [to_json(&v), to_json_pretty(&v)];
        for text in docs.iter().map(String::as_str).chain(lines.lines()) {
            assert!(!text.chars().any(unprintable_in_json), "{text}");
            assert!(text.contains("\\u202e") && text.contains("שלום"), "{text}");
            let back: serde_json::Value = serde_json::from_str(text).unwrap();
            assert_eq!(back, v);
        }
        assert_eq!(to_json_pretty(&v), {
            let plain = serde_json::to_string_pretty(&v).unwrap();
            plain
                .replace('\u{202e}', "\\u202e")
                .replace('\u{202c}', "\\u202c")
                .replace('\u{2066}', "\\u2066")
                .replace('\u{7f}', "\\u007f")
                .replace('\u{85}', "\\u0085")
        });
    }

    #[test]
    fn issue34_item6_map_keys_are_escaped_too() {
        let mut m = std::collections::BTreeMap::new();
        m.insert("task\u{202e}gnp.exe\u{1b}".to_string(), 1.0);
        let v = serde_json::json!({"by_task": m, "k\u{2066}": {"\u{85}": 2}});
        for text in [
            to_json(&m),
            to_json(&v),
            to_json_pretty(&v),
            to_jsonl(&[&v]),
        ] {
            assert!(!text.chars().any(unprintable_in_json), "{text}");
            assert!(
                text.contains("\\u202e") && text.contains("\\u001b"),
                "{text}"
            );
        }
        let back: serde_json::Value = serde_json::from_str(&to_json(&v)).unwrap();
        assert_eq!(back, v);
    }

    /// What may not appear raw in JSON ppol writes (`\n` is escaped by serde_json already).
    fn unprintable_in_json(c: char) -> bool {
        super::text::unprintable(c) && c != '\n'
    }

    /// A reader of `head` then endless `fill` bytes, counting what it handed out.
    struct Endless {
        head: Vec<u8>,
        fill: u8,
        given: usize,
    }

    impl std::io::Read for Endless {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            // a pipe's worth at most, as a FIFO would
            let n = out.len().min(65536);
            for (i, b) in out[..n].iter_mut().enumerate() {
                *b = self.head.get(self.given + i).copied().unwrap_or(self.fill);
            }
            self.given += n;
            Ok(n)
        }
    }

    fn endless(head: &str, fill: u8) -> Endless {
        Endless {
            head: head.as_bytes().to_vec(),
            fill,
            given: 0,
        }
    }

    #[test]
    fn bounded_reads_stop_at_a_long_line_or_the_file_limit() {
        let caps = Caps {
            file: 1 << 20,
            line: 1000,
            what: "one input file",
        };
        let p = Path::new("s.jsonl");
        let read = |r: &mut Endless, long| read_bounded_with(r, p, None, long, caps);
        // a stream without line breaks is read no further than about one chunk past the limit
        let mut zeros = endless("", 0);
        let e = read(&mut zeros, LongLines::Refuse).unwrap_err();
        assert_eq!(
            e.to_string(),
            "s.jsonl: line 1: the line is longer than 1000 bytes, the most ppol reads of one line"
        );
        assert!(zeros.given <= 8 << 20, "{}", zeros.given);
        // the line that is too long is named
        let mut third = endless("{}\n{}\n{\"a\": \"", b'x');
        let e = read(&mut third, LongLines::Refuse).unwrap_err();
        assert!(e.to_string().starts_with("s.jsonl: line 3: "), "{e}");
        // text traces (not JSON) refuse long lines; a JSON document may have them, up to the
        // file limit
        let e = read(&mut endless("USER: ", b'a'), LongLines::UnlessJson).unwrap_err();
        assert!(e.to_string().contains("line 1: the line is longer"), "{e}");
        for head in ["[", "\u{feff} \n {"] {
            let e = read(&mut endless(head, b' '), LongLines::UnlessJson).unwrap_err();
            assert!(
                e.to_string().ends_with(
                    "the file is larger than 1 MiB, the most ppol reads of one input file"
                ),
                "{e}"
            );
        }
        let e = read(&mut endless("a\n", b'\n'), LongLines::Refuse).unwrap_err();
        assert!(e.to_string().contains("line 1048"), "{e}");
        // within the bounds, everything is read (a file of exactly the limit too)
        let text = "{\"a\":1}\n".repeat(10);
        let got = read_bounded_with(&mut text.as_bytes(), p, None, LongLines::Refuse, caps);
        assert_eq!(got.unwrap(), text.as_bytes());
        let exact = vec![b'\n'; 1 << 20];
        let got = read_bounded_with(&mut &exact[..], p, None, LongLines::Refuse, caps).unwrap();
        assert_eq!(got.len(), 1 << 20);
        let long = format!("[\"{}\"]", "y".repeat(5000));
        let got = read_bounded_with(
            &mut long.as_bytes(),
            p,
            Some(5004),
            LongLines::UnlessJson,
            caps,
        );
        assert_eq!(got.unwrap(), long.as_bytes());
        // a regular file's size is checked before it is read
        let e = read_bounded_with(
            &mut endless("", 0),
            p,
            Some(2 << 20),
            LongLines::Allow,
            caps,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "s.jsonl: file: 2097152 bytes, larger than 1 MiB, the most ppol reads of one input file"
        );
    }

    #[test]
    fn issue34_item6_a_device_is_read_no_further_than_its_kind_allows() {
        let e = read_text_capped(
            Path::new("/dev/zero"),
            1 << 20,
            "a system prompt",
            LongLines::Allow,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.ends_with("larger than 1 MiB, the most ppol reads of a system prompt"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.txt");
        std::fs::write(&p, vec![b'a'; 2 << 20]).unwrap();
        let e = read_text_capped(&p, 1 << 20, "a task file", LongLines::Allow).unwrap_err();
        assert!(
            e.to_string().contains("2097152 bytes, larger than 1 MiB"),
            "{e}"
        );
        std::fs::write(&p, "\u{feff}ok").unwrap();
        assert_eq!(
            read_text_capped(&p, 16, "x", LongLines::Refuse).unwrap(),
            "ok"
        );
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
